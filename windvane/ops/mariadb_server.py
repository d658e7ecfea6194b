"""A private MariaDB server for windvane and its test suite.

`MariaDBServer` runs the system's ``mariadbd`` binary on a data directory of
our own: no system service, no root password, no TCP port unless asked for.
Clients reach it through the unix socket inside the data directory, and the
store URL it hands out says so::

    server = MariaDBServer("/srv/windvane/db")
    url = server.start()   # mariadb://root@/windvane?unix_socket=/srv/windvane/db/mysqld.sock
    ...
    server.stop()

Layout of the data directory (besides MariaDB's own files):

* ``my.cnf``        -- the shipped ``mariadb.cnf`` plus the generated settings
                       for this directory; rewritten at every start.
* ``error.log``     -- the server's error log (read it when a start fails).
* ``mariadbd.out``  -- the server's stdout/stderr (normally empty).
* ``mysqld.sock``, ``mysqld.pid`` -- socket and pid file of the running server.
* ``#sql*``         -- the server's temporary files (its tmpdir is the directory).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from .errors import (
    ServerConfigError,
    ServerError,
    ServerNotFoundError,
    ServerStartError,
    ServerTimeoutError,
)
from .mariadb_config import check_option_value, check_override, read_option, render_config, shipped_config, write_config
from .mariadb_install import check_no_foreign_files, initialise
from .mariadb_logs import with_log
from .mariadb_processes import (
    check_user,
    current_user,
    exclusive_lock,
    find_server_process,
    give_to_user,
    looks_like_server,
    pid_alive,
    proc_cmdline,
    read_pid,
    signal_pid,
)
from .mariadb_programs import SEARCH_DIRS, find_mariadbd, find_program, plugin_dir, rocksdb_installed
from .mariadb_ready import wait_ready

if TYPE_CHECKING:
    import mariadb

__all__ = [
    "DEFAULT_DATABASE",
    "SEARCH_DIRS",
    "MariaDBServer",
    "ServerConfigError",
    "ServerError",
    "ServerNotFoundError",
    "ServerStartError",
    "ServerStatus",
    "ServerTimeoutError",
    "check_connector",
    "check_database_name",
    "database_url",
    "find_program",
    "plugin_dir",
    "render_config",
    "rocksdb_installed",
    "shipped_config",
]

DEFAULT_DATABASE = "windvane"

_SOCKET_NAME = "mysqld.sock"
_PID_NAME = "mysqld.pid"

# sun_path in struct sockaddr_un is 108 bytes including the final NUL.
_MAX_SOCKET_PATH = 107

_DATABASE_NAME = re.compile(r"^[A-Za-z0-9_$]{1,64}$")


def check_connector() -> None:
    """Raise ServerNotFoundError unless the MariaDB connector (the ``mariadb`` package) imports.

    `MariaDBServer.start` needs it to learn when the server is ready; checked
    before anything is started, so a missing connector leaves nothing running.
    """
    try:
        import mariadb  # noqa: F401 - imported only to learn whether it can be
    except ImportError as exc:
        raise ServerNotFoundError(
            f"the MariaDB connector (Python package mariadb) cannot be imported ({exc}). "
            "Install it: pip install 'windvane[mariadb]' (it builds against libmariadb-dev: "
            "apt-get install libmariadb-dev gcc python3-dev)"
        ) from None


@dataclass(frozen=True)
class ServerStatus:
    """What `MariaDBServer.status` found.

    ``url`` is the store URL when the server is running, else None; ``port`` is
    the TCP port it was configured with, or None when it listens on the socket
    only.
    """

    running: bool
    pid: int | None
    socket: str
    url: str | None
    datadir: str
    port: int | None


def database_url(socket: str | os.PathLike[str], database: str = DEFAULT_DATABASE) -> str:
    """Return the store URL for ``database`` on the server listening on ``socket``."""
    check_database_name(database)
    return f"mariadb://root@/{database}?unix_socket={quote(os.fspath(socket), safe='/')}"


def check_database_name(name: str) -> None:
    """Raise ServerConfigError unless ``name`` is a plain database name (no quoting needed)."""
    if not _DATABASE_NAME.match(name):
        raise ServerConfigError(f"invalid database name {name!r}: use 1-64 letters, digits, '_' or '$'")


class MariaDBServer:
    """A private mariadbd serving the data directory ``datadir``.

    Without ``port`` the server does not listen on TCP at all
    (skip-networking); with it, it listens on 127.0.0.1:port as well.  Root
    has no password (the 0700 data directory guards the socket), so a port
    lets every local user in as root: use it on single-user machines only.
    ``overrides`` replace settings of the shipped mariadb.cnf, e.g.
    ``{"innodb_buffer_pool_size": "256M"}``; a value of None removes one.
    ``settings`` are (name, value) pairs added after the generated ones, for
    servers that need more than one data directory says (a Galera node's
    addresses); value None for a bare flag.  ``user`` is the system user
    mariadbd runs as (default: the current one); another user needs root,
    and the data directory is given to that user at every start.

    One MariaDBServer object may be created per call (as the CLI does): all
    state lives in the data directory, so `status`, `stop` and `kill` work on
    a server started by another process.
    """

    def __init__(
        self,
        datadir: str | os.PathLike[str],
        *,
        port: int | None = None,
        overrides: Mapping[str, str | None] | None = None,
        settings: Sequence[tuple[str, str | None]] = (),
        user: str | None = None,
    ) -> None:
        self.datadir = Path(os.path.abspath(os.fspath(datadir)))
        if port is not None and not (1 <= port <= 65535):
            raise ServerConfigError(f"invalid port {port}: use 1-65535")
        self.port = port
        self.overrides = dict(overrides or {})
        for name, value in self.overrides.items():
            check_override(name, value)
        self.settings = list(settings)
        for name, value in self.settings:
            check_override(name, value)
        if user is not None:
            check_user(user)
        self.user = user
        self._proc: subprocess.Popen[bytes] | None = None
        # Size of error.log when we last spawned mariadbd: error messages
        # quote only what that run wrote.
        self._log_offset = 0

    # -- paths -------------------------------------------------------------

    @property
    def socket(self) -> str:
        """Path of the server's unix socket."""
        return str(self.datadir / _SOCKET_NAME)

    @property
    def config_file(self) -> Path:
        return self.datadir / "my.cnf"

    @property
    def error_log(self) -> Path:
        return self.datadir / "error.log"

    @property
    def pid_file(self) -> Path:
        return self.datadir / _PID_NAME

    def url(self, database: str = DEFAULT_DATABASE) -> str:
        """Return the store URL of ``database`` on this server (running or not)."""
        return database_url(self.socket, database)

    def __repr__(self) -> str:
        return f"MariaDBServer({str(self.datadir)!r}, port={self.port!r})"

    # -- state -------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """Pid of the mariadbd serving this data directory, or None if none is running."""
        if self._proc is not None and self._proc.poll() is None:
            return self._proc.pid
        pid = read_pid(self.pid_file)
        if pid is not None and pid_alive(pid) and looks_like_server(proc_cmdline(pid)):
            return pid
        # No (valid) pid file: it may be stale after kill -9, or not written
        # yet by a server that is still starting.  Look for a mariadbd that
        # was started on our configuration file.
        return find_server_process(self.config_file)

    def status(self) -> ServerStatus:
        """Report whether a server is running on this data directory (no connection is made)."""
        pid = self.pid
        port = self.port
        if port is None:
            configured = read_option(self.config_file, "port")
            port = int(configured) if configured and configured.isdigit() else None
        return ServerStatus(
            running=pid is not None,
            pid=pid,
            socket=self.socket,
            url=self.url() if pid is not None else None,
            datadir=str(self.datadir),
            port=port,
        )

    def is_initialised(self) -> bool:
        """True when ``datadir`` holds a MariaDB data directory (system tables exist)."""
        return (self.datadir / "mysql").is_dir()

    # -- start -------------------------------------------------------------

    def start(self, timeout: float = 60, *, args: Sequence[str] = (), create_database: bool = True) -> str:
        """Start the server if needed and return the URL of the 'windvane' database.

        Initialises the data directory on first use and creates the windvane
        database if it is missing (unless ``create_database`` is false: a
        cluster node creates it once for the whole cluster).  ``args`` are
        extra command-line options of this run only (``--wsrep-new-cluster``).
        Idempotent: with a server already running it only waits until that
        one accepts connections.  After kill -9 it simply starts again;
        InnoDB's crash recovery runs during startup.

        Raises ServerNotFoundError if MariaDB or its Python connector is not
        installed, ServerConfigError for an unusable data directory,
        ServerStartError if the server fails, ServerTimeoutError if it is not
        ready in ``timeout`` seconds.  A server this call spawned is stopped
        again on any failure (killed if it does not stop), so a failed start
        leaves nothing running; a server that was already running is left
        alone.
        """
        check_connector()
        self._check_datadir()
        deadline = time.monotonic() + timeout
        if not self.datadir.exists():
            try:
                # 0700: root has no password; the socket inside this
                # directory is reachable only by its owner, which is the
                # access control.
                self.datadir.mkdir(mode=0o700, parents=True)
            except OSError as exc:
                raise ServerConfigError(f"cannot create data directory {self.datadir}: {exc}") from exc
        if not self.is_initialised():
            check_no_foreign_files(self.datadir)  # before the lock file is put there
        with self._lock():
            pid = self.pid
            spawned = pid is None
            if pid is None:
                mariadbd = find_mariadbd()
                self._prepare(mariadbd)
                pid = self._spawn(mariadbd, args)
            try:
                self._wait_ready(pid, deadline)
                if create_database:
                    self._create_database(DEFAULT_DATABASE)
            except BaseException:  # Ctrl-C too: a server this start spawned must not stay running
                if spawned:
                    self._stop_failed_start(pid)
                raise
        return self.url()

    def _stop_failed_start(self, pid: int, grace: float = 10) -> None:
        # A server that never became usable holds no work of the caller's,
        # so SIGKILL is safe when SIGTERM is not heeded: mariadbd ignores it
        # until its start-up is done (crash recovery then runs again at the
        # next start).
        signal_pid(pid, signal.SIGTERM)
        if not self._wait_exit(pid, grace):
            signal_pid(pid, signal.SIGKILL)
            self._wait_exit(pid, 30)
        # A killed mariadbd leaves its pid file behind; the start that
        # spawned it leaves nothing.
        if read_pid(self.pid_file) == pid and not pid_alive(pid):
            self.pid_file.unlink(missing_ok=True)

    def _check_datadir(self) -> None:
        if self.datadir.exists() and not self.datadir.is_dir():
            raise ServerConfigError(f"data directory {self.datadir} exists and is not a directory")
        check_option_value("data directory", str(self.datadir))
        if len(os.fsencode(self.socket)) > _MAX_SOCKET_PATH:
            raise ServerConfigError(
                f"data directory path is too long: the socket {self.socket} would exceed "
                f"the {_MAX_SOCKET_PATH}-byte limit of unix socket paths; choose a shorter path"
            )

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        # Serialises start() across processes (two test workers, two shells):
        # without it both could run mariadb-install-db or spawn a server on
        # the same directory.
        with exclusive_lock(self.datadir / ".server.lock"):
            yield

    def run_once(self, *args: str, timeout: float = 300) -> str:
        """Run mariadbd on this stopped data directory with ``args`` (``--wsrep-recover``) until it exits.

        Returns what that run wrote to the error log.  Raises ServerError if a
        server is running on the directory, ServerTimeoutError (after killing
        it) if the run takes longer than ``timeout`` seconds.
        """
        self._check_datadir()
        mariadbd = find_mariadbd()
        with self._lock():
            if self.pid is not None:
                raise ServerError(f"mariadbd is running on {self.datadir}: stop it first")
            self._prepare(mariadbd)
            pid = self._spawn(mariadbd, args)
            if not self._wait_exit(pid, timeout):
                signal_pid(pid, signal.SIGKILL)
                self._wait_exit(pid, 30)
                raise ServerTimeoutError(
                    with_log(
                        f"mariadbd {' '.join(args)} did not finish in {timeout:g} s", self.error_log, self._log_offset
                    )
                )
        with open(self.error_log, "rb") as log:
            log.seek(self._log_offset)
            return log.read().decode("utf-8", "replace")

    def _prepare(self, mariadbd: str) -> None:
        # Initialised by and given to the user the server runs as, so that it owns every file it writes.
        if self.user is not None:
            give_to_user(self.datadir, self.user)
        if not self.is_initialised():
            initialise(self.datadir, self.user)
        self._write_config(mariadbd)
        if self.user is not None:
            give_to_user(self.datadir, self.user)

    def _write_config(self, mariadbd: str) -> None:
        generated: list[tuple[str, str | None]] = [
            ("datadir", str(self.datadir)),
            ("socket", self.socket),
            ("pid-file", str(self.pid_file)),
            ("log-error", str(self.error_log)),
            # Temporary files in the private directory, not a shared /tmp: at start a server removes every
            # temporary table file in its tmpdir, which there may be another server's; and the 0700
            # directory keeps them to their owner.
            ("tmpdir", str(self.datadir)),
        ]
        if self.port is None:
            generated.append(("skip-networking", None))
        else:
            generated += [("bind-address", "127.0.0.1"), ("port", str(self.port))]
        if os.geteuid() == 0:
            generated.append(("user", self.user or current_user()))
        if rocksdb_installed(mariadbd):
            # Makes ENGINE=ROCKSDB available.  Loaded only when installed:
            # plugin-load-add of a missing file stops the server.
            generated.append(("plugin-load-add", "ha_rocksdb.so"))
        write_config(self.config_file, generated + self.settings, self.overrides, self.socket)

    def _spawn(self, mariadbd: str, args: Sequence[str] = ()) -> int:
        # A stale pid file from a killed server would be overwritten anyway;
        # removing it keeps status() from ever reading the old pid.
        with contextlib.suppress(FileNotFoundError):
            self.pid_file.unlink()
        try:
            self._log_offset = self.error_log.stat().st_size
        except FileNotFoundError:
            self._log_offset = 0
        with open(self.datadir / "mariadbd.out", "ab") as out:
            self._proc = subprocess.Popen(
                [mariadbd, f"--defaults-file={self.config_file}", *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.datadir,
                close_fds=True,
                # Own session: Ctrl-C in the shell that ran `windvane db
                # start`, or the end of that shell, must not stop the server.
                start_new_session=True,
            )
        return self._proc.pid

    def _wait_ready(self, pid: int, deadline: float) -> None:
        proc = self._proc if self._proc is not None and self._proc.pid == pid else None
        wait_ready(pid, proc, self.socket, self.error_log, self._log_offset, deadline)

    def connect(self, database: str | None = None) -> mariadb.Connection:
        """Return a new connection as root over the socket (to ``database`` if given)."""
        import mariadb

        kwargs = {"database": database} if database else {}
        return mariadb.connect(user="root", unix_socket=self.socket, **kwargs)

    def _create_database(self, name: str) -> None:
        check_database_name(name)
        conn = self.connect()
        try:
            conn.cursor().execute(f"CREATE DATABASE IF NOT EXISTS `{name}`")
        finally:
            conn.close()

    # -- stop --------------------------------------------------------------

    def stop(self, timeout: float = 60) -> bool:
        """Shut the server down cleanly and wait until it has exited.

        Returns True if a server was running, False if there was nothing to
        stop.  Raises ServerTimeoutError if it is still running after
        ``timeout`` seconds (it keeps shutting down; `kill` ends it at once).
        """
        pid = self.pid
        if pid is None:
            return False
        # SIGTERM is mariadbd's normal shutdown: it flushes and closes InnoDB,
        # so the next start needs no crash recovery.
        signal_pid(pid, signal.SIGTERM)
        if not self._wait_exit(pid, timeout):
            raise ServerTimeoutError(
                with_log(
                    f"mariadbd (pid {pid}) is still shutting down after {timeout:g} s; "
                    "wait, or kill it (all committed data survives a kill)",
                    self.error_log,
                )
            )
        return True

    def kill(self, timeout: float = 30) -> bool:
        """Kill the server with SIGKILL (as a crash would) and wait until it has exited.

        Committed transactions survive: the next `start` runs crash recovery.
        Returns True if a server was running.
        """
        pid = self.pid
        if pid is None:
            return False
        signal_pid(pid, signal.SIGKILL)
        if not self._wait_exit(pid, timeout):
            raise ServerTimeoutError(f"mariadbd (pid {pid}) did not exit {timeout:g} s after SIGKILL")
        return True

    def _wait_exit(self, pid: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            if self._proc is not None and self._proc.pid == pid:
                if self._proc.poll() is not None:
                    self._proc = None
                    return True
            elif not pid_alive(pid):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
