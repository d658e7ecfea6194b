"""The memory budget is a bound on what Forward holds, and what a burst took is given back afterwards.

Each test runs ``windvane serve`` (a subprocess, SQLite, decoding in the
serving process so that everything it holds is in the process measured)
with a small ``--memory-budget`` and an attack scaled to it, on loopback.
What is asserted is the server's own figure of bytes held at once
(``windvane_memory_held_peak_bytes``, never above the budget), the kernel's
peak and current resident memory of the process (``VmHWM``, ``VmRSS``), and
what was stored; never how fast.
"""

from __future__ import annotations

import asyncio
import http.client
import socket
import threading
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from tests.connectors.test_timeouts import SCHEMA, handshake
from tests.forward_sender import chunk_id, packed_forward
from tests.hostile import acked, metrics, read_acks, run_clients, send_and_read_acks
from tests.serve_process import Serve
from windvane import arrays
from windvane.arrays import VARIABLE_CHUNK_ROWS
from windvane.connectors import budget as budget_module
from windvane.connectors.budget import Charges, MemoryBudget

MIB = 1 << 20

#: What a serving process takes beyond its budget and its writers' partial chunks at its peak: the
#: allocator's free blocks between the burst's objects, and the decoding copies past the budget's four
#: times a message.
SLACK = 200_000_000


def partial_chunk(event_bytes: int) -> int:
    """The most a stream writer holds uncharged of a text stream of ``event_bytes``-byte events after its
    commits: its partial chunk, up to a chunk's rows (docs/serve.md, memory and time limits)."""
    return VARIABLE_CHUNK_ROWS * event_bytes


def start(tmp_path: Path, budget_mib: int, *args: str) -> Serve:
    schemas = tmp_path / "schemas"
    schemas.mkdir(exist_ok=True)
    (schemas / "app.toml").write_text(SCHEMA)
    return Serve(
        f"sqlite:///{tmp_path}/store.db",
        schemas,
        tmp_path / "serve.log",
        "--memory-budget",
        str(budget_mib),
        "--decode-workers",
        "0",
        *args,
    )


def memory(pid: int) -> dict[str, int]:
    """``VmRSS`` (now) and ``VmHWM`` (the peak) of process ``pid``, in bytes."""
    with open(f"/proc/{pid}/status") as status:
        fields = dict(line.split(":", 1) for line in status)
    return {key: int(fields[key].split()[0]) << 10 for key in ("VmRSS", "VmHWM")}


def stored(tmp_path: Path, tag: str) -> tuple[int, int]:
    """How many events stream ``tag`` holds, and the length of the last one's message."""
    with arrays.open_stream(f"sqlite:///{tmp_path}/store.db", tag) as stream:
        return len(stream), len(stream["message"][len(stream) - 1])


def big_events(tag: str, size: int, count: int) -> list[tuple[bytes, bytes]]:
    """``count`` PackedForward messages of one ``size``-byte event each, in two pieces (the message up to its
    chunk id, shared, and the chunk id)."""
    first = chunk_id()
    head = packed_forward(tag, [(time.time_ns(), {"message": "x" * size})], first)[: -len(first)]
    return [(head, chunk_id()) for _ in range(count)]


def small_events(tag: str, size: int, count: int) -> list[tuple[bytes, bytes]]:
    """As :func:`big_events`, each message ``size`` bytes of events of 1 KiB."""
    first = chunk_id()
    now = time.time_ns()
    events = [(now + i, {"message": f"{i:08d}".ljust(1024, "y")}) for i in range(size >> 10)]
    head = packed_forward(tag, events, first)[: -len(first)]
    return [(head, chunk_id()) for _ in range(count)]


def rss_settles(pid: int, bound: int) -> bool:
    """Whether the resident memory of ``pid`` comes down to ``bound`` bytes, looking for at most 30 s."""
    for _ in range(300):
        if memory(pid)["VmRSS"] <= bound:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
def test_pipelined_big_frames_stay_within_the_budget_and_are_given_back(tmp_path):
    # 8 connections each pipeline 4 messages of 8 MiB, 8,192 events of 1 KiB each (256 MiB offered at
    # once), against a budget of 128 MiB: each message is admitted (four times its size) before it is
    # read, so at most three or four are held at a time. The many objects the burst made leave the
    # allocator's heaps fragmented: that memory goes back to the system once nothing is held.
    budget, connections, frames, size = 128, 8, 4, 8 * MIB
    with start(tmp_path, budget, "--trim-after", "0.5") as server:
        pid = server.process.pid
        assert acked(socket.create_connection(("127.0.0.1", server.forward_port), timeout=60))  # warmed up
        idle = memory(pid)["VmRSS"]
        acks: list[int] = []
        run_clients(
            send_and_read_acks,
            [(server.forward_port, small_events(f"app.p{i}", size, frames), acks) for i in range(connections)],
        )
        peak = memory(pid)["VmHWM"]
        for _ in range(300):  # the budget holds nothing once the last ack is sent: given back half a second later
            if metrics(server)["windvane_memory_given_back_total"] >= 1:
                break
            time.sleep(0.1)
        settled = rss_settles(pid, idle + 100_000_000)
        counters = metrics(server)
        assert server.stop() == 0, server.log()
    assert acks == [frames] * connections
    held_peak = counters["windvane_memory_held_peak_bytes"]
    assert held_peak <= budget * MIB, f"held {held_peak / MIB:.1f} MiB at once, over the budget of {budget} MiB"
    bound = idle + budget * MIB + connections * partial_chunk(1024) + SLACK
    assert peak <= bound, f"peak RSS {peak >> 20} MiB, over {bound >> 20} (idle {idle >> 20})"
    assert settled, f"RSS stayed over idle + 100 MB after the burst ({idle >> 20} MiB idle)"
    assert counters["windvane_memory_budget_pauses_total"] > 0
    assert counters["windvane_memory_given_back_total"] >= 1
    assert {stored(tmp_path, f"app.p{i}") for i in range(connections)} == {(frames * size >> 10, 1024)}


def decode_workers(pid: int) -> list[int]:
    """The pids of the decode workers of serving process ``pid`` (its children but multiprocessing's
    resource tracker)."""
    children = psutil.Process(pid).children()
    return sorted(c.pid for c in children if "resource_tracker" not in " ".join(c.cmdline()))


def post_retrying(port: int, body: bytes) -> int:
    """POST ``body`` as NDJSON to stream app.h, again while refused for the budget (503); the last status."""
    for _ in range(600):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        try:
            conn.request("POST", "/app.h", body, {"Content-Type": "application/x-ndjson"})
            reply = conn.getresponse()
            reply.read()
        finally:
            conn.close()
        if reply.status != 503:
            return reply.status
        time.sleep(0.1)
    return 503


def given_back(server: Serve, before: dict[str, float]) -> dict[str, float]:
    """The metrics once the serving process and a decode worker each gave memory back since ``before``
    (looking for at most 30 s)."""
    keys = ("windvane_memory_given_back_total", "windvane_decode_memory_given_back_total")
    for _ in range(300):
        counters = metrics(server)
        if all(counters[key] > before.get(key, 0) for key in keys):
            break
        time.sleep(0.1)
    return counters


@pytest.mark.slow
def test_after_a_forward_and_an_http_burst_the_decode_workers_and_the_server_give_memory_back(tmp_path):
    # With 2 decode workers: 8 connections each pipeline 4 messages of 8 MiB (8,192 events of 1 KiB), then
    # 8 HTTP clients post 3 bodies of 8 MiB each (24 at once), then 8 connections each pipeline 8 messages
    # of one 10 MiB event, against a budget of 128 MiB. The workers decode and validate the first two,
    # and each keeps what the burst's objects took in its heap unless it gives it back; the big events
    # are decoded by the serving process, and its stream writers hold each stream's last ones (the
    # partial chunk) unless they let them go. After each burst, the serving process and every worker
    # come back to idle + 100 MB.
    budget, size = 128, 8 * MIB
    body = b"".join(b'{"message": "%s"}\n' % f"{i:08d}".ljust(1024, "y").encode() for i in range(size >> 10))
    with start(tmp_path, budget, "--trim-after", "0.5", "--decode-workers", "2") as server:
        pid = server.process.pid
        for _ in range(4):  # warmed up: the workers have imported what decoding needs
            assert post_retrying(server.http_port, body[: 256 << 10].rpartition(b"\n")[0] + b"\n") == 200
        workers = decode_workers(pid)
        idle = {p: memory(p)["VmRSS"] for p in [pid, *workers]}
        acks: list[int] = []
        run_clients(
            send_and_read_acks,
            [(server.forward_port, small_events(f"app.p{i}", size, 4), acks) for i in range(8)],
        )
        after_forward = given_back(server, {})
        settled_forward = {p: rss_settles(p, rss + 100_000_000) for p, rss in idle.items()}
        statuses: list[int] = []
        run_clients(lambda: statuses.extend(post_retrying(server.http_port, body) for _ in range(3)), [()] * 8)
        after_http = given_back(server, after_forward)
        settled_http = {p: rss_settles(p, rss + 100_000_000) for p, rss in idle.items()}
        run_clients(
            send_and_read_acks,
            [(server.forward_port, big_events(f"app.b{i}", 10 * MIB, 8), acks) for i in range(8)],
        )
        for _ in range(300):
            if metrics(server)["windvane_memory_given_back_total"] > after_http["windvane_memory_given_back_total"]:
                break
            time.sleep(0.1)
        settled_big = rss_settles(pid, idle[pid] + 100_000_000)
        peaks = {p: memory(p)["VmHWM"] for p in idle}
        assert server.stop() == 0, server.log()
    assert len(workers) == 2 and acks == [4] * 8 + [8] * 8 and statuses == [200] * 24
    # The peak over idle: the budget, the partial chunks the writers of eight streams keep after their
    # commits (the 1 KiB events' before they are let go, then one 10 MiB event each), and the slack.
    held = 8 * max(partial_chunk(1024), 10 * MIB)
    bound = idle[pid] + budget * MIB + held + SLACK
    assert peaks[pid] <= bound, f"peak RSS {peaks[pid] >> 20} MiB, over {bound >> 20} (idle {idle[pid] >> 20})"
    for key in ("windvane_memory_given_back_total", "windvane_decode_memory_given_back_total"):
        assert 0 < after_forward[key] < after_http[key], key
    idle_mib = {p: rss >> 20 for p, rss in idle.items()}
    assert all(settled_forward.values()), f"RSS over idle + 100 MB after the Forward burst (idle MiB: {idle_mib})"
    assert all(settled_http.values()), f"RSS over idle + 100 MB after the HTTP burst (idle MiB: {idle_mib})"
    assert settled_big, f"RSS over idle + 100 MB after the big events ({idle_mib[pid]} MiB idle)"
    assert stored(tmp_path, "app.p7") == (4 * size >> 10, 1024)
    assert stored(tmp_path, "app.b7") == (8, 10 * MIB)


def slow_frame(port: int, tag: str, size: int, done: list[int]) -> None:
    """Authenticate, then send one message of one ``size``-byte event slowly (64 KiB every 5 ms), and read
    its ack."""
    frame = b"".join(big_events(tag, size, 1)[0])
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        assert handshake(sock, "k3y")[:2] == ["PONG", True]
        for offset in range(0, len(frame), 64 << 10):
            sock.sendall(frame[offset : offset + (64 << 10)])
            time.sleep(0.005)
        done.append(read_acks(sock, 1))


def http_status(port: int) -> int:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/app.h", b'{"message": "hello"}', {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_slow_big_frames_hold_no_more_than_the_budget_and_others_are_served(tmp_path):
    # 8 authenticated connections each send a 6 MiB message slowly. Each is charged 24 MiB of the 32 MiB
    # budget from its header on, so one is read at a time: the others are not read at all meanwhile, and
    # a small chunk or an HTTP post still fits beside it.
    budget, connections, size = 32, 8, 6 * MIB
    done: list[int] = []
    with start(tmp_path, budget, "--shared-key", "k3y", "--http-auth", "none") as server:
        port = server.forward_port
        senders = threading.Thread(
            target=run_clients, args=(slow_frame, [(port, f"app.s{i}", size, done) for i in range(connections)])
        )
        senders.start()
        for _ in range(600):  # until the budget holds a big frame
            if metrics(server)['windvane_memory_held_bytes{kind="partial"}'] >= 4 * size:
                break
            time.sleep(0.05)
        with socket.create_connection(("127.0.0.1", port), timeout=60) as small:
            assert handshake(small, "k3y")[:2] == ["PONG", True]
            small_acked = acked(small)
        status = http_status(server.http_port)
        senders.join(200)
        counters = metrics(server)
        assert server.stop() == 0, server.log()
    assert small_acked and status == 200
    assert done == [1] * connections
    held_peak = counters["windvane_memory_held_peak_bytes"]
    assert held_peak <= budget * MIB, f"held {held_peak / MIB:.1f} MiB at once, over the budget of {budget} MiB"
    assert {stored(tmp_path, f"app.s{i}") for i in range(connections)} == {(1, size)}


def test_a_message_bigger_than_the_whole_budget_is_read_alone(tmp_path):
    # A 10 MiB message is charged 40 MiB, more than the 32 MiB budget: it is read once nothing else is
    # held, and stored; small chunks before and after it are stored too.
    budget, size = 32, 10 * MIB
    with start(tmp_path, budget) as server:
        acks: list[int] = []
        small = [(packed_forward("app.small", [(time.time_ns(), {"message": "hi"})], chunk_id()),) for _ in range(3)]
        run_clients(
            send_and_read_acks,
            [(server.forward_port, small + big_events("app.big", size, 1) + small, acks)]
            + [(server.forward_port, big_events(f"app.b{i}", 2 * MIB, 2), acks) for i in range(4)],
        )
        counters = metrics(server)
        assert server.stop() == 0, server.log()
    assert sorted(acks) == [2, 2, 2, 2, 7]
    assert stored(tmp_path, "app.big") == (1, size)
    # The message alone, and what the other connections had read of their next message's head.
    assert counters["windvane_memory_held_peak_bytes"] <= 4 * size + 4 * MIB


class Holder:
    """A reader of the budget that records what it was told, and holds what it was admitted for."""

    def __init__(self, budget: MemoryBudget) -> None:
        self.charges = Charges(budget)
        self.admitted: list[int] = []

    @property
    def partial_charge(self) -> int:
        return self.charges.partial

    def ask(self, size: int) -> bool:
        if self.charges.budget.admit(self, size):
            self.charges.add("partial", size)
            return True
        return False

    def budget_admitted(self, size: int) -> None:
        self.charges.add("partial", size)
        self.admitted.append(size)

    def budget_resume(self) -> None:
        pass

    def budget_pass(self) -> None:
        pass


def test_admission_rules():
    async def rules() -> None:
        budget = MemoryBudget(100)
        first, big, small, huge, late = (Holder(budget) for _ in range(5))
        assert first.ask(60)
        assert not big.ask(70)  # does not fit: waits, its connection not read
        assert small.ask(30)  # fits beside it: goes first
        first.charges.release()
        assert big.admitted == [70] and budget.used == budget.peak == budget.limit
        small.charges.release()
        assert not huge.ask(150)  # more than the whole budget: alone, once nothing else is held
        assert not late.ask(10)  # waits behind it though it fits
        big.charges.release()
        assert huge.admitted == [150] and late.admitted == []
        huge.charges.release()
        assert late.admitted == [10]

    asyncio.run(rules())


def test_a_message_waiting_past_the_patience_goes_first(monkeypatch):
    monkeypatch.setattr(budget_module, "ADMISSION_PATIENCE", 0.01)

    async def rules() -> None:
        budget = MemoryBudget(100)
        first, big, small = (Holder(budget) for _ in range(3))
        assert first.ask(60)
        assert not big.ask(70)
        await asyncio.sleep(0.05)
        assert not small.ask(30)  # would fit, but the big one has waited long enough
        first.charges.release()
        assert (big.admitted, small.admitted) == ([70], [30])

    asyncio.run(rules())
