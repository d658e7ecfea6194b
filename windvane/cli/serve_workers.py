"""`windvane serve --workers N`: N processes serving one store, started and watched by the command's process.

Each worker is a whole server (its event loop, committer and commit thread,
each with its interpreter lock) on the same store, so the work of many
connections spreads over the cores. They listen on the same ports
(SO_REUSEPORT: the kernel spreads connections and heartbeats between them);
this process binds each port first, without listening, so that a port 0
becomes one port for all, and keeps it bound while it runs.

What holds across workers:

* a chunk id or ``Idempotency-Key`` is committed once whichever worker
  gets it (the key ledger is the store's);
* one memory budget: each worker has its share of ``--memory-budget``, and
  of the decode workers;
* appends of two workers to one stream serialize on the store's commit
  lock, each writer reloading what the other wrote (arrays.StreamWriter);
* ``/health`` and ``/metrics`` answer for all workers
  (:mod:`windvane.ingest.siblings`); MQTT is subscribed once, by worker 0;
* SIGTERM or Ctrl-C stops every worker as one server stops (committing
  what it received); a worker that ends unasked (killed, crashed) is
  started again while the others go on, and each dies with this process.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import importlib
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any

import click

from windvane.ingest.config import WorkerPlace

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

    from windvane.cli.serve import ServeConfig
    from windvane.connectors.tls import TlsConfig

    #: What serves one configuration in one process: ``serve(config, auth, tls, ready)``.
    Serve = Callable[
        [ServeConfig, dict[str, str], TlsConfig | None, Callable[[list[tuple[str, str, int]]], None]], None
    ]

log = logging.getLogger("windvane.serve")

#: Seconds a worker that ended unasked waits before it is started again, doubled while it keeps ending
#: within :data:`STEADY` seconds of its start, up to :data:`RESTART_DELAY_MAX`.
RESTART_DELAY, RESTART_DELAY_MAX, STEADY = 0.5, 30.0, 60.0
#: Seconds the workers have to start (their imports, the store, the listeners).
START_TIMEOUT = 120.0
#: What a start-up error calls each kind of socket a listener binds (as the listeners themselves do).
PROTOCOLS = {socket.SOCK_STREAM: "TCP", socket.SOCK_DGRAM: "UDP, for heartbeats"}
#: Linux's prctl option that sends a signal to a process when its parent ends.
PR_SET_PDEATHSIG = 1


#: What a worker imports to serve: imported once by the supervisor before the workers fork from it, so that
#: they start without importing it each.
PRELOAD = (
    "windvane.ingest.service",
    "windvane.connectors.budget",
    "windvane.connectors.forward.server",
    "windvane.connectors.http.app",
    "windvane.connectors.mqtt",
)


def _context() -> multiprocessing.context.ForkContext | multiprocessing.context.SpawnContext:
    """How workers are started: forked from this process once it has imported :data:`PRELOAD` (fork copies
    the calling thread alone, so only while no other runs), else spawned afresh."""
    for name in PRELOAD:
        importlib.import_module(name)
    if threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


def default_workers() -> int:
    """One worker per core this process may run on."""
    return len(os.sched_getaffinity(0))


@dataclasses.dataclass
class _Worker:
    """One worker process as the supervisor knows it."""

    index: int
    process: BaseProcess
    conn: Connection
    started: float
    restarts: int = 0
    delay: float = RESTART_DELAY


class Supervisor:
    """Starts ``count`` workers of ``config``, prints the listeners once all are ready, and watches them."""

    def __init__(
        self, config: ServeConfig, auth: dict[str, str], tls: TlsConfig | None, count: int, level: str, serve: Serve
    ):
        self.count = count
        self.serve = serve
        self.auth = auth
        self.tls = tls
        self.level = level
        self.context = _context()
        self.directory = tempfile.mkdtemp(prefix="windvane-serve-")
        self.authkey = os.urandom(32)
        self._held: list[socket.socket] = []
        self.config = self._with_ports(config)
        self.workers: list[_Worker] = []

    # -- ports -------------------------------------------------------------------------------

    def _with_ports(self, config: ServeConfig) -> ServeConfig:
        """``config`` with each listener's port 0 replaced by a port bound here for all workers."""
        forward, http = config.forward, config.http
        if forward is not None:
            forward = dataclasses.replace(forward, port=self._hold("Forward", forward.host, forward.port, udp=True))
        if http is not None:
            http = dataclasses.replace(http, port=self._hold("HTTP", http.host, http.port, udp=False))
        return dataclasses.replace(config, forward=forward, http=http)

    def _hold(self, name: str, host: str, port: int, *, udp: bool) -> int:
        """Bind ``host:port`` (TCP, and UDP if ``udp``) for the workers and keep the TCP socket bound; the port
        (a free one for both if ``port`` is 0). ListenError naming listener ``name`` if it is not free.

        Each port is first bound without SO_REUSEPORT: another program listening there, another windvane
        server included, is refused rather than joined."""
        from windvane.connectors.address import host_port
        from windvane.connectors.errors import ListenError

        family = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
        for _ in range(20):
            kinds = [socket.SOCK_STREAM, socket.SOCK_DGRAM] if udp else [socket.SOCK_STREAM]
            bound, failed = port, None
            for kind in kinds:
                with socket.socket(family, kind) as probe:
                    if kind == socket.SOCK_STREAM:  # as the listeners do: a port in TIME_WAIT is free
                        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    try:
                        probe.bind((host, bound))
                    except OSError as exc:
                        failed = ListenError(name, host_port(host, bound), PROTOCOLS[kind], exc)
                        break
                    bound = probe.getsockname()[1]
            if failed is not None:
                if port:
                    raise failed
                continue  # a free TCP port taken in UDP: another
            held = socket.socket(family, socket.SOCK_STREAM)
            held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            try:
                held.bind((host, bound))
            except OSError as exc:
                held.close()
                raise ListenError(name, host_port(host, bound), "TCP", exc) from exc
            self._held.append(held)
            return bound
        raise ListenError(name, host_port(host, port), "TCP and UDP", OSError(f"no port on {host} is free for both"))

    # -- workers -----------------------------------------------------------------------------

    def _place(self, index: int, restarts: int) -> WorkerPlace:
        return WorkerPlace(index, self.count, self.directory, self.authkey, restarts)

    def _worker_config(self, index: int, restarts: int) -> ServeConfig:
        """The configuration of worker ``index``: its place, its share of the budget and of the decode workers,
        and MQTT for worker 0 alone (one session per client id)."""
        from windvane.ingest.config import default_decode_workers

        config, service = self.config, self.config.service
        limits = dataclasses.replace(config.limits, memory_budget=config.limits.memory_budget // self.count)
        decode = service.committer.decode_workers
        committer = dataclasses.replace(
            service.committer,
            max_pending_bytes=service.committer.max_pending_bytes // self.count,
            decode_workers=(default_decode_workers() if decode is None else decode) // self.count,
            takes_turns=self.count > 1,
        )
        service = dataclasses.replace(service, committer=committer, worker=self._place(index, restarts))
        mqtt = config.mqtt if index == 0 else None
        return dataclasses.replace(config, service=service, limits=limits, mqtt=mqtt)

    def _start(self, index: int, restarts: int = 0) -> _Worker:
        ours, theirs = self.context.Pipe()
        args = (self._worker_config(index, restarts), self.auth, self.tls, self.level, theirs, os.getpid(), self.serve)
        process = self.context.Process(target=run_worker, args=args, name=f"windvane-serve-{index}")
        process.start()
        theirs.close()
        return _Worker(index, process, ours, time.monotonic(), restarts)

    def start(self) -> list[tuple[str, str, int]]:
        """Start every worker and wait until all listen; the listeners' ``(name, host, port)``. BadInput if
        one cannot start (the caller then stops the others)."""
        from windvane.cli.root import BadInput

        self.workers = [self._start(index) for index in range(self.count)]
        deadline = time.monotonic() + START_TIMEOUT
        lines: list[tuple[str, str, int]] = []
        for worker in self.workers:
            message = _receive(worker.conn, deadline - time.monotonic())
            if message is None or message[0] != "ready":
                why = message[1] if message else f"worker {worker.index} did not start"
                raise BadInput(why)
            lines = message[1]
        return lines

    def watch(self) -> None:
        """Until SIGTERM or SIGINT: start again each worker that ends unasked; then stop them all."""
        stop = {"asked": False}

        def asked(signum: int, frame: Any) -> None:
            stop["asked"] = True

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, asked)
        while not stop["asked"]:
            ended = wait([w.process.sentinel for w in self.workers], timeout=0.2)
            for worker in list(self.workers):
                if worker.process.sentinel in ended and not stop["asked"]:
                    self._replace(worker)
        self.stop()

    def _replace(self, worker: _Worker) -> None:
        worker.process.join()
        code = worker.process.exitcode
        how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        steady = time.monotonic() - worker.started > STEADY
        delay = RESTART_DELAY if steady else worker.delay
        log.warning(
            "worker %d (pid %s) ended (%s); starting it again in %g s", worker.index, worker.process.pid, how, delay
        )
        time.sleep(delay)
        worker.conn.close()
        new = self._start(worker.index, worker.restarts + 1)
        new.delay = RESTART_DELAY if steady else min(2 * delay, RESTART_DELAY_MAX)
        self.workers[self.workers.index(worker)] = new

    def stop(self) -> None:
        """Ask every worker to stop (each commits what it received) and wait for them; free the ports."""
        for worker in self.workers:
            if worker.process.is_alive() and worker.process.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker.process.pid, signal.SIGTERM)
        for worker in self.workers:
            worker.process.join()
            worker.conn.close()
        for sock in self._held:
            sock.close()
        shutil.rmtree(self.directory, ignore_errors=True)


def _receive(conn: Connection, timeout: float) -> Any:
    """The next message from a worker, or None if it ended or sent none within ``timeout`` seconds."""
    try:
        return conn.recv() if conn.poll(max(timeout, 0)) else None
    except EOFError:
        return None


def run_workers(
    config: ServeConfig,
    auth: dict[str, str],
    tls: TlsConfig | None,
    count: int,
    level: str,
    serve: Serve,
    announce: Callable[[list[tuple[str, str, int]]], None],
) -> None:
    """Serve with ``count`` workers, each running ``serve`` with its configuration, until SIGTERM or SIGINT
    (see the module docstring); ``announce`` the listeners once all workers listen."""
    supervisor = Supervisor(config, auth, tls, count, level, serve)
    try:
        lines = supervisor.start()
    except BaseException:
        supervisor.stop()
        raise
    log.info("%d workers serve (pids %s)", count, ", ".join(str(w.process.pid) for w in supervisor.workers))
    announce(lines)
    supervisor.watch()


def run_worker(
    config: ServeConfig,
    auth: dict[str, str],
    tls: TlsConfig | None,
    level: str,
    conn: Connection,
    parent: int,
    serve: Serve,
) -> None:
    """A worker's process: ``serve`` its ``config`` as one server does, telling the supervisor when it listens."""
    # A forked worker starts with the supervisor's handlers; the server installs its own once it runs.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)
    # The worker ends with its supervisor, however that ends (kill -9 included): no worker serves on alone.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        return  # the supervisor ended before the signal was asked for
    logging.basicConfig(
        level=level.upper(), format=f"%(asctime)s %(levelname)s %(name)s[{os.getpid()}]: %(message)s", force=True
    )
    try:
        serve(config, auth, tls, lambda lines: conn.send(("ready", lines)))
    except click.ClickException as exc:
        conn.send(("error", exc.format_message()))
        raise SystemExit(exc.exit_code) from None
