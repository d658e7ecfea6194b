"""A separate process that writes to (or reads from) a store, for the crash and concurrency tests.

Run as ``python tests/neostore/store_worker.py MODE ...``; imported by the tests for
the value format and for `Worker`, which starts and drives such a process.
(No ``test_`` prefix: pytest must not collect it.)

Modes:

``commit``
    Numbered transactions: transaction ``k`` writes every slot oid, slot
    ``i`` getting `value_for(k, i, size)`, and its description is
    ``txn k``. Before each step the worker prints a line naming the phase
    (``uploading k``, ``voting k``, ``voted k``, ``finishing k``,
    ``finished k TID``), flushed, so the test knows where it is. With
    ``--pause-at PHASE`` it then prints ``paused PHASE`` and waits on stdin,
    so the test can kill it at exactly that point. Right after ``finish``
    returns, the tid is appended to ``--log`` and fsynced: that file lists
    every transaction whose commit was acknowledged.

``counters``
    The concurrency workload: pairs of counter objects; each transaction
    increments both counters of two random pairs, expecting the serials it
    read. ConflictError -> re-read and retry. Prints ``result JSON``.

``reader``
    Loops over snapshots: takes ``last_transaction()`` and reads every
    counter as of that tid with ``load_before``; both counters of a pair must
    be equal in every snapshot. Prints ``result JSON``.

``counters`` and ``reader`` print ``ready`` once the store is open and
start when a ``go`` line arrives on stdin, so all processes overlap.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import queue
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
if __name__ == "__main__":
    # Run as a script, Python puts this folder first on sys.path; the
    # checkout's root goes there instead (never tests/, whose tests/mariadb.py
    # would shadow the MariaDB connector), so `tests.*` imports resolve.
    sys.path[:] = [os.path.dirname(os.path.dirname(HERE))] + [p for p in sys.path if os.path.abspath(p or ".") != HERE]

from windvane import neostore  # noqa: E402
from windvane.neostore import p64, u64  # noqa: E402

# -- numbered values ----------------------------------------------------------

_HEADER = re.compile(rb"^txn (\d+) slot (\d+) size (\d+);")


def value_for(txn: int, slot: int, size: int) -> bytes:
    """The value transaction ``txn`` gives slot ``slot``: ``size`` bytes, self-describing.

    The header names the transaction, the slot and the full size, so a value
    from another transaction, another slot, or a truncated one is recognised;
    the rest is deterministic filler (not compressible to nothing, so real
    bytes travel).
    """
    header = b"txn %d slot %d size %d;" % (txn, slot, size)
    seed = hashlib.blake2b(header).digest()
    filler = (seed * (size // len(seed) + 1))[: max(size - len(header), 0)]
    return header + filler


def parse_value(value: bytes) -> tuple[int, int, int]:
    """``(txn, slot, size)`` from a value made by `value_for`."""
    match = _HEADER.match(value)
    if match is None:
        raise ValueError(f"not a numbered value: {value[:40]!r}")
    return int(match[1]), int(match[2]), int(match[3])


def description_for(txn: int) -> bytes:
    return b"txn %d" % txn


def txn_number(description: bytes) -> int:
    match = re.fullmatch(rb"txn (\d+)", description)
    if match is None:
        raise ValueError(f"not a numbered transaction: {description!r}")
    return int(match[1])


def commit_numbered(
    store: neostore.Store,
    slots: list[bytes],
    txn: int,
    size: int,
    on_phase: Callable[[str], None] = lambda phase: None,
) -> bytes:
    """Commit transaction number ``txn`` (every slot, expecting its current serial); return its tid.

    ``on_phase`` is called as each commit phase begins.
    """
    t = store.begin(b"worker", description_for(txn))
    try:
        for i, oid in enumerate(slots):
            try:
                serial = store.load(oid)[1]
            except neostore.POSKeyError:
                serial = None  # the slot does not exist yet
            t.write(oid, serial, value_for(txn, i, size))
            if i == len(slots) // 2:
                # Half the values are written (and, with a small flush_bytes,
                # uploaded inside the open database transaction).
                on_phase("uploading")
        on_phase("voting")
        t.vote()
        on_phase("voted")
        on_phase("finishing")
        return t.finish()
    except BaseException:
        t.abort()
        raise


# -- driving a worker from a test -------------------------------------------------


class WorkerDied(AssertionError):
    """The worker exited (or fell silent) before printing what the test waited for."""


class Worker:
    """A running ``store_worker.py`` process whose stdout lines the test can await.

    Use as a context manager: on exit the process is killed if still alive,
    so a failing test leaves no stray process.
    """

    def __init__(self, *args: str):
        self.args = args
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "store_worker.py"), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            # stderr is inherited: pytest shows it with the failing test.
            text=True,
            bufsize=1,
        )
        self.lines: list[str] = []  # everything printed so far, for messages
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._pump_thread = threading.Thread(target=self._pump, daemon=True)
        self._pump_thread.start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)  # end of output

    def expect(self, prefix: str, timeout: float = 60) -> list[str]:
        """Wait for the next line whose first word is ``prefix`` (skipping others); return its words."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            try:
                line = self._queue.get(timeout=max(remaining, 0))
            except queue.Empty:
                raise WorkerDied(f"no {prefix!r} line within {timeout} s; {self._recent()}") from None
            if line is None:
                self._queue.put(None)  # keep reporting the end
                raise WorkerDied(f"worker exited ({self.proc.wait()}) before {prefix!r}; {self._recent()}")
            self.lines.append(line)
            if line.split(" ", 1)[0] == prefix:
                return line.split()

    def result(self, timeout: float = 120) -> dict:
        """The worker's final ``result JSON`` line, after checking it exited cleanly."""
        self.expect("result", timeout)
        data = json.loads(self.lines[-1].split(" ", 1)[1])
        assert self.proc.wait(timeout=30) == 0, f"worker failed; {self._recent()}"
        return data

    def send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        """SIGKILL the worker (as a crash would) and reap it."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def _recent(self) -> str:
        return f"last lines of {' '.join(self.args[:1])} worker: {self.lines[-8:]}"

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.kill()
        self._pump_thread.join(timeout=10)  # it ends at the dead process's end of output
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass  # BrokenPipe: the buffered stdin could not reach the dead process


def hex_list(oids: list[bytes]) -> str:
    return ",".join(oid.hex() for oid in oids)


def _oids(text: str) -> list[bytes]:
    return [bytes.fromhex(part) for part in text.split(",") if part]


# -- the worker process -------------------------------------------------------------


def say(*words: object) -> None:
    print(*words, flush=True)


def wait_for_go() -> None:
    say("ready")
    line = sys.stdin.readline()
    if line.strip() != "go":
        sys.exit(f"expected 'go' on stdin, got {line!r}")


def run_commit(args: argparse.Namespace) -> None:
    store = neostore.open(args.url, flush_bytes=args.flush_bytes)
    slots = _oids(args.slots)
    log_fd = os.open(args.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    deadline = time.monotonic() + args.seconds

    def pause_if_asked(phase: str) -> None:
        if phase == args.pause_at:
            say("paused", phase)
            if not sys.stdin.readline():
                sys.exit(0)  # the test went away: do not linger

    for txn in range(args.first, args.first + args.count):
        if time.monotonic() > deadline:
            break

        def on_phase(phase: str, txn: int = txn) -> None:
            say(phase, txn)
            pause_if_asked(phase)

        try:
            tid = commit_numbered(store, slots, txn, args.size, on_phase)
        except Exception as exc:
            if not args.retry_errors:
                raise
            # The database went away (test_mariadbd_killed...): the commit
            # failed or its outcome is unknown; try the next number.
            say("error", txn, type(exc).__name__, str(exc).replace("\n", " ")[:200])
            time.sleep(0.05)
            continue
        # The acknowledgement: from here on the transaction must survive.
        os.write(log_fd, b"%s %d\n" % (tid.hex().encode(), txn))
        os.fsync(log_fd)
        say("finished", txn, tid.hex())
        pause_if_asked("finished")
    say("done")


def _pairs(text: str) -> list[tuple[bytes, bytes]]:
    oids = _oids(text)
    return list(zip(oids[0::2], oids[1::2]))


def run_counters(args: argparse.Namespace) -> None:
    store = neostore.open(args.url, commit_lock_timeout=120)
    pairs = _pairs(args.pairs)
    rng = random.Random(args.seed)
    increments = [0] * len(pairs)
    conflicts = 0
    tids: list[str] = []
    last_seen: list[str] = []  # last_transaction() just before each successful attempt began
    wait_for_go()
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        chosen = rng.sample(range(len(pairs)), 2)
        while True:  # until this increment commits
            before = store.last_transaction()
            t = store.begin(b"counters", b"worker %d" % args.seed)
            for index in chosen:
                for oid in pairs[index]:
                    value, serial = store.load(oid)
                    t.write(oid, serial, b"%d" % (int(value) + 1))
            try:
                t.vote()
            except neostore.ConflictError:
                conflicts += 1  # vote aborted the transaction; read again
                continue
            tids.append(t.finish().hex())
            last_seen.append(before.hex())
            break
        for index in chosen:
            increments[index] += 1
    say("result", json.dumps({"increments": increments, "conflicts": conflicts, "tids": tids, "last_seen": last_seen}))


def run_reader(args: argparse.Namespace) -> None:
    store = neostore.open(args.url, read_only=True)
    pairs = _pairs(args.pairs)
    snapshots: list[str] = []
    violations: list[str] = []
    previous = [0] * len(pairs)
    wait_for_go()
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        snapshot = store.last_transaction()
        before = p64(u64(snapshot) + 1)  # load_before excludes its bound: see `snapshot` itself
        # All first counters, then all second ones: the longer the gap
        # between the two reads of a pair, the likelier a commit lands in
        # between, and it must not change what this snapshot shows.
        firsts = [store.load_before(a, before) for a, _ in pairs]
        seconds = [store.load_before(b, before) for _, b in pairs]
        for index, (first, second) in enumerate(zip(firsts, seconds)):
            (va, sa, _), (vb, sb, _) = first, second
            where = f"snapshot {snapshot.hex()} pair {index}"
            if va != vb:
                violations.append(f"{where}: counters differ, {va!r} != {vb!r}")
            if u64(sa) > u64(snapshot) or u64(sb) > u64(snapshot):
                violations.append(f"{where}: a revision newer than the snapshot was read")
            if int(va) < previous[index]:
                violations.append(f"{where}: went back from {previous[index]} to {int(va)}")
            previous[index] = int(va)
        snapshots.append(snapshot.hex())
    say(
        "result",
        json.dumps({"snapshots": len(snapshots), "distinct": len(set(snapshots)), "violations": violations[:20]}),
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    modes = parser.add_subparsers(dest="mode", required=True)
    commit = modes.add_parser("commit")
    commit.add_argument("url")
    commit.add_argument("--slots", required=True, help="comma-separated hex oids")
    commit.add_argument("--log", required=True, help="file to append 'TID NUMBER' to after each finish")
    commit.add_argument("--first", type=int, required=True, help="number of the first transaction")
    commit.add_argument("--count", type=int, default=1)
    commit.add_argument("--seconds", type=float, default=120, help="stop starting transactions after this")
    commit.add_argument("--size", type=int, default=1024, help="bytes per value")
    commit.add_argument("--flush-bytes", type=int, default=64 * 1024 * 1024)
    commit.add_argument("--pause-at", choices=["uploading", "voted", "finished"])
    commit.add_argument("--retry-errors", action="store_true", help="keep going when a commit fails")
    commit.set_defaults(run=run_commit)
    for name, run in (("counters", run_counters), ("reader", run_reader)):
        sub = modes.add_parser(name)
        sub.add_argument("url")
        sub.add_argument("--pairs", required=True, help="comma-separated hex oids, two per pair")
        sub.add_argument("--seconds", type=float, required=True)
        sub.add_argument("--seed", type=int, default=0)
        sub.set_defaults(run=run)
    args = parser.parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()
