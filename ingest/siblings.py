"""The workers of one ``windvane serve --workers N`` answer for the whole server.

Connections land on any worker (they share the listening ports), so the
worker that a ``GET /health`` or ``GET /metrics`` (or the senders table) reaches asks every other
worker for its own part and merges them: counters add up, gauges of
amounts add up, gauges of states take the worst. Each worker answers on a
unix socket of its own in the server's runtime directory
(:class:`WorkerPlace`), through :mod:`multiprocessing.connection` with the
server's key, in a thread of its own: the event loop never waits for it.
A worker that does not answer (dead, being started again) is named in
the health's ``workers`` and counted out of ``windvane_workers``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterable
from multiprocessing.connection import Client, Connection, Listener
from typing import Any

from .config import WorkerPlace
from .metrics import MetricSample

log = logging.getLogger("windvane.ingest")

#: Seconds a worker waits for another's answer: a worker busy with a commit still answers in its own thread.
ASK_TIMEOUT = 5.0

#: Gauges whose workers' values merge by the largest (a state, a worst case) rather than by their sum.
WORST_OF = frozenset({"windvane_commits_failing", "windvane_stream_commits_failing", "windvane_stream_lag_seconds"})


class Answering:
    """Answers the other workers' questions with ``answer(question)``, in a thread, until closed."""

    def __init__(self, place: WorkerPlace, answer: Callable[[str], Any]) -> None:
        self.place = place
        self.answer = answer
        address = place.address(place.index)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(address)  # left by this worker's previous process, killed
        self._listener = Listener(address, family="AF_UNIX", authkey=place.authkey)
        self._thread = threading.Thread(target=self._serve, name="windvane-siblings", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn = self._listener.accept()
            except OSError:
                return  # closed
            except Exception as exc:  # noqa: BLE001 - a caller without the key, or one that hung up: serve the next
                log.debug("a question from another worker could not be read: %s", exc)
                continue
            threading.Thread(target=self._answer, args=(conn,), name="windvane-sibling", daemon=True).start()

    def _answer(self, conn: Connection) -> None:
        with conn:
            try:
                conn.send(self.answer(conn.recv()))
            except Exception as exc:  # noqa: BLE001 - whatever failed is the asker's answer, not this thread's end
                with contextlib.suppress(OSError):
                    conn.send(exc)

    def close(self) -> None:
        self._listener.close()


def ask_all(place: WorkerPlace, question: str) -> dict[int, Any]:
    """Every other worker's answer to ``question``, by index: what it answered, or the exception saying why
    it did not."""
    answers: dict[int, Any] = {}
    for index in range(place.count):
        if index == place.index:
            continue
        try:
            with Client(place.address(index), family="AF_UNIX", authkey=place.authkey) as conn:
                conn.send(question)
                if not conn.poll(ASK_TIMEOUT):
                    raise TimeoutError(f"no answer within {ASK_TIMEOUT:g} s")
                answers[index] = conn.recv()
        except (OSError, EOFError) as exc:
            answers[index] = exc
    return answers


def merge_samples(parts: Iterable[list[MetricSample]]) -> list[MetricSample]:
    """The samples of every worker as one server's: counters and amounts summed, :data:`WORST_OF` the
    largest; in the order they first appear."""
    merged: dict[tuple[str, tuple[tuple[str, str], ...]], MetricSample] = {}
    for samples in parts:
        for name, help_text, kind, labels, value in samples:
            key = (name, tuple(sorted(labels.items())))
            if key not in merged:
                merged[key] = (name, help_text, kind, labels, value)
                continue
            before = merged[key][4]
            both = max(before, value) if name in WORST_OF else before + value
            merged[key] = (name, help_text, kind, labels, both)
    return list(merged.values())


def sort_senders(senders: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``senders`` (rows of the senders table) sorted: the open first, then the last acknowledged first (those
    never acknowledged last)."""
    return sorted(senders, key=lambda s: (not s["open"], -(s["last_ack"] or float("-inf"))))


def merge_senders(own: list[dict[str, Any]], others: dict[int, Any]) -> list[dict[str, Any]]:
    """The server's senders from this worker's (``own``) and the others' answers (each row naming its
    ``worker``), sorted as :func:`sort_senders`; a worker that does not answer lists none (its health says
    why)."""
    rows = list(own)
    for answer in others.values():
        if not isinstance(answer, BaseException):
            rows += answer
    return sort_senders(rows)


def merge_health(place: WorkerPlace, own: dict[str, Any], others: dict[int, Any]) -> dict[str, Any]:
    """The server's health from this worker's (``own``) and the others' answers: failing if any worker's
    commits fail (its report, named), pending bytes summed, and each worker's state under ``workers``; a
    worker that does not answer is a warning (the others go on; the server starts it again)."""
    workers = [{"worker": place.index, "pid": os.getpid(), "status": own["status"], "restarts": place.restarts}]
    out = dict(own)
    warnings = list(own.get("warnings", []))
    for index, answer in sorted(others.items()):
        if isinstance(answer, BaseException):
            workers.append({"worker": index, "status": "unreachable", "error": str(answer) or type(answer).__name__})
            warnings.append(f"worker {index} does not answer ({answer}); the server starts it again if it ended")
            continue
        workers.append(
            {"worker": index, "pid": answer["pid"], "status": answer["status"], "restarts": answer["restarts"]}
        )
        out["pending_bytes"] = out.get("pending_bytes", 0) + answer.get("pending_bytes", 0)
        if answer["status"] != "ok" and out["status"] == "ok":
            failing = {k: v for k, v in answer.items() if k not in ("pid", "restarts", "pending_bytes")}
            out.update(failing)
            out["message"] = f"worker {index}: {answer.get('message', answer['status'])}"
    workers.sort(key=lambda w: w["worker"])
    out["workers"] = workers
    if warnings:
        out["warnings"] = warnings
    return out
