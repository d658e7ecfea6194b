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
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.resources
import os
import pwd
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from .errors import OpsError

if TYPE_CHECKING:
    import mariadb

__all__ = [
    "DEFAULT_DATABASE",
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

# Where distributions put the server binaries when they are not on PATH
# (Debian: /usr/sbin/mariadbd; Fedora/RHEL: /usr/libexec/mariadbd).
SEARCH_DIRS = ("/usr/sbin", "/usr/libexec", "/usr/bin", "/usr/local/sbin", "/usr/local/bin")

# Files this module itself puts in a data directory.  A directory holding only
# these may still be initialised; anything else means it is somebody's data.
_OWN_FILES = frozenset(
    {"my.cnf", "my.cnf.tmp", "error.log", "mariadbd.out", "install-db.log", "init.sql", ".server.lock"}
)

_SOCKET_NAME = "mysqld.sock"
_PID_NAME = "mysqld.pid"

# Run by mariadb-install-db after it creates the system tables.  It also
# creates root@<this host's name>; the server runs with skip-name-resolve, so
# such accounts can never match a client and only cause a warning at every
# start.  Keep root@localhost (socket) and root@127.0.0.1/::1 (--port).
_INIT_SQL = """\
DELETE FROM mysql.global_priv WHERE Host NOT IN ('localhost', '127.0.0.1', '::1');
DELETE FROM mysql.proxies_priv WHERE Host NOT IN ('localhost', '127.0.0.1', '::1');
"""

# sun_path in struct sockaddr_un is 108 bytes including the final NUL.
_MAX_SOCKET_PATH = 107

# Characters with a meaning in MariaDB option files ('#' starts a comment,
# quotes are stripped, backslashes are escapes) or that would end the line.
_BAD_OPTION_CHARS = frozenset("\n\r#\"'\\")

_OPTION_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
_DATABASE_NAME = re.compile(r"^[A-Za-z0-9_$]{1,64}$")

# Sections of an option file that mariadbd reads.
_SERVER_SECTIONS = frozenset({"mariadbd", "mysqld", "server", "mariadb", "client-server"})


class ServerError(OpsError):
    """A private MariaDB server could not be started, stopped or queried."""


class ServerNotFoundError(ServerError):
    """The MariaDB server programs (mariadbd, mariadb-install-db) are not installed."""


class ServerConfigError(ServerError):
    """The caller asked for something unusable: a bad data directory or setting."""


class ServerStartError(ServerError):
    """mariadbd or mariadb-install-db failed; the message ends with their log."""


class ServerTimeoutError(ServerError):
    """The server did not become ready, or did not exit, within the time allowed."""


def check_connector() -> None:
    """Raise ServerNotFoundError unless the MariaDB connector (the ``mariadb`` package) imports.

    `MariaDBServer.start` needs it to learn when the server is ready; checked
    before anything is started, so a missing connector leaves nothing running.
    """
    try:
        import mariadb  # noqa: F401
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


def find_program(*names: str) -> str | None:
    """Return the path of the first of ``names`` found on PATH or in `SEARCH_DIRS`."""
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    for name in names:
        for directory in SEARCH_DIRS:
            candidate = os.path.join(directory, name)
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
    return None


def database_url(socket: str | os.PathLike[str], database: str = DEFAULT_DATABASE) -> str:
    """Return the store URL for ``database`` on the server listening on ``socket``."""
    check_database_name(database)
    return f"mariadb://root@/{database}?unix_socket={quote(os.fspath(socket), safe='/')}"


def check_database_name(name: str) -> None:
    """Raise ServerConfigError unless ``name`` is a plain database name (no quoting needed)."""
    if not _DATABASE_NAME.match(name):
        raise ServerConfigError(f"invalid database name {name!r}: use 1-64 letters, digits, '_' or '$'")


def shipped_config() -> str:
    """Return the text of the recommended server configuration shipped with neostore."""
    return importlib.resources.files("windvane.ops").joinpath("mariadb.cnf").read_text(encoding="utf-8")


def plugin_dir(mariadbd: str) -> Path | None:
    """Return the directory ``mariadbd`` loads plugins from, or None if it cannot tell."""
    try:
        out = subprocess.run(
            [mariadbd, "--no-defaults", "--verbose", "--help"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"^plugin-dir\s+(\S.*?)\s*$", out, re.MULTILINE)
    return Path(match.group(1)) if match else None


def rocksdb_installed(mariadbd: str | None = None) -> bool:
    """True if the MyRocks plugin (Debian: mariadb-plugin-rocksdb) is installed for ``mariadbd``."""
    mariadbd = mariadbd or find_program("mariadbd")
    if mariadbd is None:
        return False
    directory = plugin_dir(mariadbd)
    return directory is not None and (directory / "ha_rocksdb.so").is_file()


def _tail(path: Path, lines: int = 15, since: int = 0) -> str:
    """Return the end of the log ``path`` for an error message, or '' if unreadable.

    Only what was written after byte offset ``since`` counts (the log keeps
    earlier runs).  The server's [ERROR] lines come first: mariadbd's reason
    for stopping is often followed by a screenful of shutdown notes.
    """
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(since, f.tell() - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    all_lines = text.splitlines()
    errors = [line for line in all_lines if "[ERROR]" in line][-10:]
    tail = all_lines[-lines:]
    if errors and errors != tail[-len(errors) :]:
        return "\n".join([*errors, "...", *tail])
    return "\n".join(tail)


def _with_log(message: str, path: Path, since: int = 0) -> str:
    tail = _tail(path, since=since)
    if not tail:
        return message
    return f"{message}\n--- from {path} ---\n{tail}"


def _check_option_value(what: str, value: str) -> None:
    bad = _BAD_OPTION_CHARS.intersection(value)
    if bad or value != value.strip():
        raise ServerConfigError(
            f"{what} {value!r} cannot be written to a MariaDB option file "
            f"(contains {''.join(sorted(bad)) or 'leading/trailing spaces'!r}); choose another"
        )


def _option_key(name: str) -> str:
    # mariadbd treats '-' and '_' in option names alike.
    return name.strip().lower().replace("-", "_")


def render_config(
    shipped: str,
    generated: list[tuple[str, str | None]],
    overrides: Mapping[str, str | None] | None = None,
) -> str:
    """Combine the shipped configuration, ``overrides`` and ``generated`` settings.

    Each override replaces the setting of the same name in the shipped server
    sections where it stands (so the comment explaining it stays next to it);
    a value of None removes the setting; overrides the shipped file does not
    set are added to the generated block.  ``generated`` entries are
    (name, value) pairs, value None for a bare flag such as skip-networking;
    they come last, so they win over anything shipped.
    """
    pending = {_option_key(k): (k, v) for k, v in (overrides or {}).items()}
    applied: set[str] = set()
    out: list[str] = []
    section = None
    for line in shipped.splitlines():
        stripped = line.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            section = stripped[1:-1].strip().lower()
        elif section in _SERVER_SECTIONS and stripped and stripped[0] not in "#;":
            key = _option_key(stripped.split("=", 1)[0])
            if key in pending:
                name, value = pending[key]
                applied.add(key)
                if value is None:
                    out.append(f"# {stripped}    (removed by an override)")
                else:
                    out.append(f"# overridden (shipped value: {stripped})")
                    out.append(f"{name} = {value}")
                continue
        out.append(line)
    leftover = [(n, v) for k, (n, v) in pending.items() if k not in applied and v is not None]

    out.append("")
    out.append("# ---- generated by windvane.ops.mariadb_server for this data directory ----")
    out.append("# Rewritten at every start: edit the shipped mariadb.cnf or pass overrides.")
    out.append("[mariadbd]")
    for name, value in leftover + generated:
        out.append(name if value is None else f"{name} = {value}")
    return "\n".join(out) + "\n"


def _read_option(path: Path, name: str) -> str | None:
    """Return the last value of option ``name`` in the server sections of ``path``."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    key, value, section = _option_key(name), None, None
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("[") and s.endswith("]"):
            section = s[1:-1].strip().lower()
        elif section in _SERVER_SECTIONS and s and s[0] not in "#;":
            k, _, v = s.partition("=")
            if _option_key(k) == key:
                value = v.strip()
    return value


def _read_pid(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _proc_cmdline(pid: int) -> list[str] | None:
    """Return the argv of ``pid`` from /proc, or None where /proc cannot tell."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [os.fsdecode(a) for a in raw.split(b"\0") if a]


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # The state is the first field after the parenthesised command name.
    return stat.rpartition(")")[2].split()[:1] in (["Z"], ["X"])


def _pid_alive(pid: int) -> bool:
    # Reap it if it is an exited child of ours; other processes' exited
    # children stay zombies until their parent reaps them (in a container
    # whose init never reaps, forever), so a zombie counts as exited.
    with contextlib.suppress(ChildProcessError, OSError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, owned by another user
    return not _is_zombie(pid)


def _current_user() -> str:
    # Not getpass.getuser(): it believes $USER, which sudo may leave pointing
    # at the invoking user.
    return pwd.getpwuid(os.geteuid()).pw_name


def _looks_like_server(argv: list[str] | None) -> bool:
    if argv is None:
        return True  # no /proc: trust the pid file
    return bool(argv) and os.path.basename(argv[0]).startswith(("mariadbd", "mysqld"))


class MariaDBServer:
    """A private mariadbd serving the data directory ``datadir``.

    Without ``port`` the server does not listen on TCP at all
    (skip-networking); with it, it listens on 127.0.0.1:port as well.  Root
    has no password (the 0700 data directory guards the socket), so a port
    lets every local user in as root: use it on single-user machines only.
    ``overrides`` replace settings of the shipped mariadb.cnf, e.g.
    ``{"innodb_buffer_pool_size": "256M"}``; a value of None removes one.

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
    ) -> None:
        self.datadir = Path(os.path.abspath(os.fspath(datadir)))
        if port is not None and not (1 <= port <= 65535):
            raise ServerConfigError(f"invalid port {port}: use 1-65535")
        self.port = port
        self.overrides = dict(overrides or {})
        for name, value in self.overrides.items():
            if not _OPTION_NAME.match(name):
                raise ServerConfigError(f"invalid MariaDB option name {name!r}")
            if value is not None:
                _check_option_value(f"value of {name}", value)
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
        pid = _read_pid(self.pid_file)
        if pid is not None and _pid_alive(pid) and _looks_like_server(_proc_cmdline(pid)):
            return pid
        # No (valid) pid file: it may be stale after kill -9, or not written
        # yet by a server that is still starting.  Look for a mariadbd that
        # was started on our configuration file.
        return self._find_server_process()

    def _find_server_process(self) -> int | None:
        wanted = f"--defaults-file={self.config_file}"
        try:
            entries = os.listdir("/proc")
        except OSError:
            return None
        for entry in entries:
            if not entry.isdigit():
                continue
            argv = _proc_cmdline(int(entry))
            if argv and wanted in argv and _looks_like_server(argv) and _pid_alive(int(entry)):
                return int(entry)
        return None

    def status(self) -> ServerStatus:
        """Report whether a server is running on this data directory (no connection is made)."""
        pid = self.pid
        port = self.port
        if port is None:
            configured = _read_option(self.config_file, "port")
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

    def start(self, timeout: float = 60) -> str:
        """Start the server if needed and return the URL of the 'windvane' database.

        Initialises the data directory on first use and creates the windvane
        database if it is missing.  Idempotent: with a server already running
        it only waits until that one accepts connections.  After kill -9 it
        simply starts again; InnoDB's crash recovery runs during startup.

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
            self._check_no_foreign_files()  # before the lock file is put there
        with self._lock():
            pid = self.pid
            spawned = pid is None
            if spawned:
                mariadbd = self._mariadbd()
                if not self.is_initialised():
                    self._initialise()
                self._write_config(mariadbd)
                pid = self._spawn(mariadbd)
            try:
                self._wait_ready(pid, deadline)
                self._create_database(DEFAULT_DATABASE)
            except BaseException:
                if spawned:
                    self._stop_failed_start(pid)
                raise
        return self.url()

    def _stop_failed_start(self, pid: int, grace: float = 10) -> None:
        # A server that never became usable holds no work of the caller's,
        # so SIGKILL is safe when SIGTERM is not heeded: mariadbd ignores it
        # until its start-up is done (crash recovery then runs again at the
        # next start).
        self._signal(pid, signal.SIGTERM)
        if not self._wait_exit(pid, grace):
            self._signal(pid, signal.SIGKILL)
            self._wait_exit(pid, 30)

    def _check_datadir(self) -> None:
        if self.datadir.exists() and not self.datadir.is_dir():
            raise ServerConfigError(f"data directory {self.datadir} exists and is not a directory")
        _check_option_value("data directory", str(self.datadir))
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
        with open(self.datadir / ".server.lock", "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    @staticmethod
    def _mariadbd() -> str:
        path = find_program("mariadbd")
        if path is None:
            raise ServerNotFoundError(
                "mariadbd (the MariaDB server) was not found on PATH or in "
                + ", ".join(SEARCH_DIRS)
                + ". Install it: apt-get install mariadb-server (the system service is not "
                "needed; windvane runs its own server)"
            )
        return path

    def _check_no_foreign_files(self) -> None:
        # Initialising writes dozens of files: never into a directory that
        # holds somebody's data (a mistyped --datadir pointing at $HOME).
        stray = sorted(p.name for p in self.datadir.iterdir() if p.name not in _OWN_FILES)
        if stray:
            raise ServerConfigError(
                f"data directory {self.datadir} is not empty and is not a MariaDB data "
                f"directory (it contains {', '.join(stray[:5])}{', ...' if len(stray) > 5 else ''}). "
                "Use a new or empty directory; if an earlier initialisation failed, remove it and retry"
            )

    def _initialise(self) -> None:
        self._check_no_foreign_files()
        # Root has no password, so whoever can reach the socket is root: keep
        # the directory (and so the socket) to its owner.
        self.datadir.chmod(0o700)
        install_db = find_program("mariadb-install-db") or find_program("mysql_install_db")
        if install_db is None:
            raise ServerNotFoundError(
                "mariadb-install-db was not found; install the MariaDB server: apt-get install mariadb-server"
            )
        extra_sql = self.datadir / "init.sql"
        extra_sql.write_text(_INIT_SQL, encoding="utf-8")
        cmd = [
            install_db,
            "--no-defaults",  # must come first; keeps /etc/mysql out of it
            f"--datadir={self.datadir}",
            # Passwordless root@localhost: the socket in our private directory
            # is the access control (the directory is mode 0700).
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            # Runs after the system tables are created; see _INIT_SQL.
            f"--extra-file={extra_sql}",
        ]
        if os.geteuid() == 0:
            # mariadbd refuses to run as root unless told to.
            cmd.append(f"--user={_current_user()}")
        log = self.datadir / "install-db.log"
        with open(log, "wb") as out:
            try:
                result = subprocess.run(
                    cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, timeout=300
                )
            except subprocess.TimeoutExpired:
                raise ServerTimeoutError(
                    _with_log("mariadb-install-db did not finish in 300 s", log)
                ) from None
            finally:
                with contextlib.suppress(FileNotFoundError):
                    extra_sql.unlink()
        if result.returncode != 0 or not self.is_initialised():
            raise ServerStartError(
                _with_log(
                    f"initialising {self.datadir} failed (mariadb-install-db exit code "
                    f"{result.returncode}). Remove the directory and retry",
                    log,
                )
            )

    def _write_config(self, mariadbd: str) -> None:
        generated: list[tuple[str, str | None]] = [
            ("datadir", str(self.datadir)),
            ("socket", self.socket),
            ("pid-file", str(self.pid_file)),
            ("log-error", str(self.error_log)),
        ]
        if self.port is None:
            generated.append(("skip-networking", None))
        else:
            generated += [("bind-address", "127.0.0.1"), ("port", str(self.port))]
        if os.geteuid() == 0:
            generated.append(("user", _current_user()))
        if rocksdb_installed(mariadbd):
            # Makes ENGINE=ROCKSDB available.  Loaded only when installed:
            # plugin-load-add of a missing file stops the server.
            generated.append(("plugin-load-add", "ha_rocksdb.so"))
        text = render_config(shipped_config(), generated, self.overrides)
        # Lets `mariadb --defaults-file=DATADIR/my.cnf` find the server.
        text += f"\n[client]\nsocket = {self.socket}\nuser = root\n"
        tmp = self.config_file.with_name("my.cnf.tmp")
        tmp.write_text(text, encoding="utf-8")
        # mariadbd ignores world-writable option files.
        tmp.chmod(0o644)
        os.replace(tmp, self.config_file)

    def _spawn(self, mariadbd: str) -> int:
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
                [mariadbd, f"--defaults-file={self.config_file}"],
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
        import mariadb  # the connector; imported late so status/stop work without it

        last_error: Exception | None = None
        while True:
            proc = self._proc if self._proc is not None and self._proc.pid == pid else None
            exited = proc.poll() is not None if proc is not None else not _pid_alive(pid)
            if exited:
                raise ServerStartError(
                    _with_log(f"mariadbd (pid {pid}) exited during startup", self.error_log, self._log_offset)
                )
            if os.path.exists(self.socket):
                try:
                    mariadb.connect(user="root", unix_socket=self.socket, connect_timeout=5).close()
                    return
                except mariadb.Error as exc:
                    last_error = exc
                    if "Access denied" in str(exc):
                        raise ServerStartError(
                            f"the server at {self.socket} refused root without a password: {exc}. "
                            "This data directory was not created by windvane"
                        ) from exc
            if time.monotonic() >= deadline:
                raise ServerTimeoutError(
                    _with_log(
                        f"mariadbd (pid {pid}) did not accept connections on {self.socket} in time "
                        f"(last error: {last_error}). A server this start spawned is stopped again; "
                        "if crash recovery of a large redo log is slow, start with a longer timeout",
                        self.error_log,
                        self._log_offset,
                    )
                )
            time.sleep(0.1)

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
        self._signal(pid, signal.SIGTERM)
        if not self._wait_exit(pid, timeout):
            raise ServerTimeoutError(
                _with_log(
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
        self._signal(pid, signal.SIGKILL)
        if not self._wait_exit(pid, timeout):
            raise ServerTimeoutError(f"mariadbd (pid {pid}) did not exit {timeout:g} s after SIGKILL")
        return True

    @staticmethod
    def _signal(pid: int, sig: int) -> None:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
        except PermissionError as exc:
            raise ServerError(
                f"not allowed to signal mariadbd (pid {pid}); it belongs to another user"
            ) from exc

    def _wait_exit(self, pid: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            if self._proc is not None and self._proc.pid == pid:
                if self._proc.poll() is not None:
                    self._proc = None
                    return True
            elif not _pid_alive(pid):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
