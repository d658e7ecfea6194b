"""Read replicas of a private MariaDB server: asynchronous replication with GTIDs.

A primary is a private server (:class:`~windvane.ops.mariadb_server.MariaDBServer`)
with its binary log on and a 127.0.0.1 port its replicas connect to; a replica
is another private server that copies the primary's databases once
(``mariadb-dump --single-transaction --master-data=1 --gtid``, which records the
GTID position of the copy) and then applies the primary's binary log from that
position on, read-only::

    primary = make_primary("/srv/wv/db")                     # restarts it if it had no binary log
    replica = start_replica("/srv/wv/replica1", "/srv/wv/db")
    wait_for_primary(replica, primary)                       # the replica has applied all the primary committed

The role of a data directory (primary or replica, its server id, its port or
its primary's address) is kept in ``DATADIR/replication.json``, so that a
later ``windvane db start`` on the directory starts it in the same role
(:func:`open_server`).  A replica keeps its position in ``mysql.gtid_slave_pos``,
committed with each transaction it applies: after kill -9 it starts again
where it was, losing and repeating nothing.

Replicas of MyRocks stores get ``gtid_pos_auto_engines=innodb,rocksdb`` when
the MyRocks plugin is installed: the position is then updated in a table of
the engine of the transaction applied (``mysql.gtid_slave_pos_ROCKSDB``) instead
of an InnoDB table, so that a ROCKSDB transaction commits in one engine rather
than across two, which would need a two-phase commit and more fsyncs for
every transaction applied.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from .errors import ServerConfigError, ServerError, ServerNotFoundError, ServerTimeoutError
from .mariadb_config import read_option
from .mariadb_programs import find_program, rocksdb_installed
from .mariadb_server import MariaDBServer, check_connector

if TYPE_CHECKING:
    import mariadb

__all__ = [
    "ROLE_FILE",
    "PrimaryRole",
    "ReplicaRole",
    "ReplicaStatus",
    "ReplicationError",
    "make_primary",
    "open_server",
    "read_role",
    "replica_status",
    "start_replica",
    "start_server",
    "wait_for_primary",
]

#: The file in a data directory that says its replication role.
ROLE_FILE = "replication.json"

#: The account replicas log in to a private primary with (from 127.0.0.1 only, REPLICATION SLAVE only).
REPLICATION_USER = "windvane_repl"

#: Databases of the server itself, never copied to a replica.
_SYSTEM_DATABASES = frozenset({"mysql", "information_schema", "performance_schema", "sys"})

_PRIMARY_SERVER_ID = 1

# A week of binary log: a replica stopped for longer has to be made again from a fresh copy.  Without a
# limit the log, which holds every value written, grows without end.
_BINLOG_EXPIRE_SECONDS = 7 * 24 * 3600


class ReplicationError(ServerError):
    """A replica could not be made or queried: the primary cannot be copied or reached."""


class PrimaryRole(msgspec.Struct, tag="primary", frozen=True):
    """A data directory whose server writes a binary log for its replicas, listening on 127.0.0.1:``port``."""

    port: int
    #: The password of `REPLICATION_USER` (the data directory is readable by its owner only).
    password: str
    server_id: int = _PRIMARY_SERVER_ID

    def settings(self) -> list[tuple[str, str | None]]:
        """The my.cnf lines a primary needs beyond a private server's."""
        return [
            ("server_id", str(self.server_id)),
            # Relative: in the data directory.
            ("log_bin", "mariadb-bin"),
            # Row events apply the same on every replica whatever the statement was.
            ("binlog_format", "ROW"),
            # A commit acknowledged to a writer is in the binary log on disk, so a replica never misses it.
            ("sync_binlog", "1"),
            ("gtid_strict_mode", "ON"),
            ("binlog_expire_logs_seconds", str(_BINLOG_EXPIRE_SECONDS)),
        ]


class ReplicaRole(msgspec.Struct, tag="replica", frozen=True):
    """A data directory whose server applies the binary log of the primary at ``host``:``port``, read-only."""

    server_id: int
    host: str
    port: int
    #: Engines with a ``mysql.gtid_slave_pos`` table of their own ('' for the InnoDB table only).
    gtid_pos_auto_engines: str
    #: False until the copy of the primary is complete and replication has started.
    seeded: bool = False

    @property
    def primary(self) -> str:
        return f"{self.host}:{self.port}"

    def settings(self) -> list[tuple[str, str | None]]:
        """The my.cnf lines a replica needs beyond a private server's."""
        lines: list[tuple[str, str | None]] = [
            ("server_id", str(self.server_id)),
            # Only replication (and root, who holds READ_ONLY ADMIN) writes: a client writing here by mistake
            # would make the replica differ from its primary.
            ("read_only", "ON"),
            ("gtid_strict_mode", "ON"),
            ("relay_log", "relay-bin"),
            # After a crash the relay log may be torn: it is fetched again from the position in
            # mysql.gtid_slave_pos, which commits with each transaction applied.
            ("relay_log_recovery", "ON"),
        ]
        if self.gtid_pos_auto_engines:
            lines.append(("gtid_pos_auto_engines", self.gtid_pos_auto_engines))
        return lines


Role = PrimaryRole | ReplicaRole


def read_role(datadir: str | os.PathLike[str]) -> Role | None:
    """The replication role of ``datadir``, or None for a server that is neither a primary nor a replica."""
    path = Path(datadir) / ROLE_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ServerConfigError(f"cannot read {path}: {exc}") from exc
    try:
        return msgspec.json.decode(data, type=Role)
    except msgspec.ValidationError as exc:
        raise ServerConfigError(
            f"{path} is not a replication role windvane wrote ({exc}); restore or remove it"
        ) from exc


def _write_role(datadir: Path, role: Role) -> None:
    tmp = datadir / (ROLE_FILE + ".tmp")
    tmp.write_bytes(msgspec.json.encode(role))
    os.replace(tmp, datadir / ROLE_FILE)


def open_server(
    datadir: str | os.PathLike[str],
    *,
    port: int | None = None,
    overrides: Mapping[str, str | None] | None = None,
) -> MariaDBServer:
    """The private server of ``datadir`` in its replication role (not started).

    A primary keeps the port its replicas connect to: another ``port`` is a
    ServerConfigError.
    """
    role = read_role(datadir)
    if isinstance(role, PrimaryRole):
        if port is not None and port != role.port:
            raise ServerConfigError(
                f"{datadir} is a replication primary on port {role.port}, where its replicas connect; "
                f"start it without --port or with --port {role.port}"
            )
        return MariaDBServer(datadir, port=role.port, overrides=overrides, settings=role.settings())
    if isinstance(role, ReplicaRole):
        return MariaDBServer(datadir, port=port, overrides=overrides, settings=role.settings())
    return MariaDBServer(datadir, port=port, overrides=overrides)


def start_server(
    datadir: str | os.PathLike[str],
    *,
    port: int | None = None,
    overrides: Mapping[str, str | None] | None = None,
    timeout: float = 60,
) -> MariaDBServer:
    """Start the server of ``datadir`` in its role (see :func:`open_server`); return it running.

    A replica whose first copy never completed is refused (ServerConfigError):
    it holds part of its primary's data and must be made again.
    """
    role = read_role(datadir)
    if isinstance(role, ReplicaRole) and not role.seeded:
        raise ServerConfigError(
            f"{datadir} is a replica of {role.primary} whose copy of the primary never completed; "
            "remove the directory and make the replica again (windvane db start --replica-of)"
        )
    server = open_server(datadir, port=port, overrides=overrides)
    # A replica's databases are its primary's: one it made itself could clash with the primary's later.
    server.start(timeout=timeout, create_database=not isinstance(role, ReplicaRole))
    return server


# -- the primary --------------------------------------------------------------


def make_primary(
    datadir: str | os.PathLike[str],
    *,
    port: int | None = None,
    overrides: Mapping[str, str | None] | None = None,
    timeout: float = 60,
) -> MariaDBServer:
    """Start the private server of ``datadir`` as a replication primary; return it running.

    A directory that is a primary already is only started.  Otherwise (a new
    directory, or a server without a binary log) the server gets its role:
    binary log on, server id 1, and a 127.0.0.1 port (``port``, the one it is
    configured with, or a free one); a running server is stopped cleanly and
    started again for that.  A replica cannot be a primary (ServerConfigError).
    """
    path = Path(os.path.abspath(os.fspath(datadir)))
    role = read_role(path)
    if isinstance(role, ReplicaRole):
        raise ServerConfigError(f"{path} is a replica of {role.primary}; a replica cannot be a primary of others")
    if role is None:
        plain = MariaDBServer(path, port=port, overrides=overrides)
        configured = read_option(plain.config_file, "port")
        if port is None and configured and configured.isdigit():
            port = int(configured)
        role = PrimaryRole(port=port or _free_port(), password=secrets.token_urlsafe(24))
        plain.stop(timeout=timeout)
        # Before the start, for a later start to find the role even if this one fails.
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        _write_role(path, role)
    server = start_server(path, port=port, overrides=overrides, timeout=timeout)
    _ensure_replication_user(server, role.password)
    return server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _ensure_replication_user(server: MariaDBServer, password: str) -> None:
    # Kept out of the binary log: replicas do not need the account, and the primary's GTID position
    # stays that of the data.
    with _connection(server.connect, f"the primary in {server.datadir}") as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(f"CREATE USER IF NOT EXISTS '{REPLICATION_USER}'@'127.0.0.1' IDENTIFIED BY ?", (password,))
        cur.execute(f"GRANT REPLICATION SLAVE ON *.* TO '{REPLICATION_USER}'@'127.0.0.1'")


# -- the replica ----------------------------------------------------------------


@dataclass(frozen=True)
class _Source:
    """Where a replica copies from and connects to."""

    host: str
    port: int
    user: str
    password: str
    #: mariadb-dump's options to reach the primary as a user that may read everything.
    dump_login: tuple[str, ...]
    #: The password of that login, if any (given in an option file, never on the command line).
    dump_password: str | None
    #: How to connect to the primary to read its state.
    connect: Callable[[], mariadb.Connection]

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def start_replica(
    datadir: str | os.PathLike[str],
    primary: str,
    *,
    port: int | None = None,
    overrides: Mapping[str, str | None] | None = None,
    primary_overrides: Mapping[str, str | None] | None = None,
    gtid_pos_auto_engines: str | None = None,
    timeout: float = 60,
) -> MariaDBServer:
    """Make ``datadir`` a read replica of ``primary`` and start it; return it running.

    ``primary`` is the data directory of a private server (made a primary
    first, see :func:`make_primary`; ``primary_overrides`` are its overrides
    then) or the ``mariadb://user:password@host:port/db`` URL of a server with
    its binary log on, whose user may dump every database and replicate.
    ``gtid_pos_auto_engines`` defaults to ``innodb,rocksdb`` when MyRocks is
    installed, else to none ('').  A directory that is a replica of that
    primary already is only started.
    """
    path = Path(os.path.abspath(os.fspath(datadir)))
    role = read_role(path)
    if role is None and (path / "mysql").is_dir():
        raise ServerConfigError(f"{path} holds a server that is not a replica; give --replica-of a new directory")
    if isinstance(role, PrimaryRole):
        raise ServerConfigError(f"{path} is a replication primary; give --replica-of a new directory")
    source = _source(primary, primary_overrides, timeout)
    if isinstance(role, ReplicaRole):
        if (role.host, role.port) != (source.host, source.port):
            raise ServerConfigError(f"{path} is a replica of {role.primary}, not of {source.address}")
        return start_server(path, port=port, overrides=overrides, timeout=timeout)
    if gtid_pos_auto_engines is None:
        gtid_pos_auto_engines = "innodb,rocksdb" if rocksdb_installed() else ""
    role = ReplicaRole(
        # Unique among the primary's replicas: the primary drops a replica connecting with the id of another.
        server_id=_PRIMARY_SERVER_ID + 1 + secrets.randbelow(2**31),
        host=source.host,
        port=source.port,
        gtid_pos_auto_engines=gtid_pos_auto_engines,
    )
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    _write_role(path, role)
    server = open_server(path, port=port, overrides=overrides)
    server.start(timeout=timeout, create_database=False)
    try:
        _copy(source, server)
        with _connection(server.connect, f"the replica in {path}") as cur:
            cur.execute(
                "CHANGE MASTER TO MASTER_HOST = ?, MASTER_PORT = ?, MASTER_USER = ?, MASTER_PASSWORD = ?, "
                "MASTER_USE_GTID = slave_pos",
                (source.host, source.port, source.user, source.password),
            )
            cur.execute("START SLAVE")
    except BaseException:  # Ctrl-C too: a replica that is not complete must not keep running
        server.stop(timeout=timeout)
        raise
    _write_role(path, msgspec.structs.replace(role, seeded=True))
    return server


def _source(primary: str, overrides: Mapping[str, str | None] | None, timeout: float) -> _Source:
    if primary.startswith("mariadb://"):
        return _url_source(primary, overrides, timeout)
    path = Path(primary)
    if not (path / "mysql").is_dir():
        raise ServerConfigError(
            f"the primary {primary!r} is neither the data directory of a server (`windvane db start "
            "--datadir`) nor a mariadb://user:password@host:port/db URL"
        )
    server = make_primary(path, overrides=overrides, timeout=timeout)
    role = read_role(path)
    assert isinstance(role, PrimaryRole)  # make_primary wrote it
    return _Source(
        host="127.0.0.1",
        port=role.port,
        user=REPLICATION_USER,
        password=role.password,
        dump_login=(f"--socket={server.socket}", "--user=root"),
        dump_password=None,
        connect=server.connect,
    )


def _url_source(url: str, overrides: Mapping[str, str | None] | None, timeout: float) -> _Source:
    from windvane.neostore.errors import InvalidURLError
    from windvane.neostore.url import parse_url

    try:
        parsed = parse_url(url)
    except InvalidURLError as exc:
        raise ServerConfigError(str(exc)) from exc
    node = parsed.nodes[0]
    if node.unix_socket is not None:
        datadir = Path(node.unix_socket).parent
        if (datadir / "my.cnf").is_file():
            return _source(str(datadir), overrides, timeout)
        raise ServerConfigError(
            f"replicas connect to their primary over TCP: give the primary as mariadb://user:password@host:port/db "
            f"or as its windvane data directory, not the socket {node.unix_socket}"
        )
    host, port = node.host or "127.0.0.1", node.port or 3306
    user, password = parsed.user or "root", parsed.password or ""

    def connect() -> mariadb.Connection:
        import mariadb

        return mariadb.connect(host=host, port=port, user=user, password=password)

    with _connection(connect, f"the primary at {host}:{port}") as cur:
        cur.execute("SELECT @@log_bin, @@binlog_format")
        log_bin, binlog_format = cur.fetchone()
    if not log_bin or binlog_format != "ROW":
        raise ReplicationError(
            f"the primary at {host}:{port} has no binary log in ROW format (log_bin={log_bin}, "
            f"binlog_format={binlog_format}): set log_bin, a server_id, binlog_format=ROW and sync_binlog=1 "
            "in its my.cnf and restart it (docs/operations.md, Read replicas)"
        )
    return _Source(
        host, port, user, password, (f"--host={host}", f"--port={port}", f"--user={user}"), password, connect
    )


def _copy(source: _Source, replica: MariaDBServer) -> None:
    """Copy the primary's databases into ``replica`` and set its GTID position to that of the copy."""
    dump = find_program("mariadb-dump", "mysqldump")
    client = find_program("mariadb", "mysql")
    if dump is None or client is None:
        raise ServerNotFoundError(
            "mariadb-dump and the mariadb client are needed to copy a primary: apt-get install mariadb-client"
        )
    with _connection(source.connect, f"the primary at {source.address}") as cur:
        cur.execute("SHOW DATABASES")
        databases = sorted(name for (name,) in cur.fetchall() if name.lower() not in _SYSTEM_DATABASES)
    if not databases:
        raise ReplicationError(f"the primary at {source.address} has no database to replicate; create one first")
    with tempfile.TemporaryDirectory(dir=replica.datadir) as work:
        defaults = Path(work) / "dump.cnf"
        # The password goes in an option file of the private directory, where no `ps` shows it.
        lines = ["[client]"] + ([f"password={source.dump_password}"] if source.dump_password else [])
        defaults.write_text("\n".join(lines) + "\n", encoding="utf-8")
        dump_log, load_log = Path(work) / "dump.log", Path(work) / "load.log"
        with open(dump_log, "wb") as dump_err, open(load_log, "wb") as load_err:
            dumper = subprocess.Popen(
                [
                    dump,
                    f"--defaults-file={defaults}",
                    *source.dump_login,
                    # One consistent snapshot of every engine, and the GTID position it is at: the load ends
                    # with SET GLOBAL gtid_slave_pos and CHANGE MASTER TO MASTER_USE_GTID=slave_pos.
                    "--single-transaction",
                    "--master-data=1",
                    "--gtid",
                    "--routines",
                    "--events",
                    "--hex-blob",
                    "--max-allowed-packet=1G",
                    "--databases",
                    *databases,
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=dump_err,
            )
            assert dumper.stdout is not None  # stdout=PIPE
            with dumper.stdout:
                loaded = subprocess.run(
                    [
                        client,
                        "--no-defaults",
                        f"--socket={replica.socket}",
                        "--user=root",
                        "--binary-mode",
                        "--max-allowed-packet=1G",
                    ],
                    stdin=dumper.stdout,
                    stdout=subprocess.DEVNULL,
                    stderr=load_err,
                    check=False,
                )
            dumped = dumper.wait()
        if dumped != 0 or loaded.returncode != 0:
            log = (dump_log if dumped != 0 else load_log).read_text(encoding="utf-8", errors="replace").strip()
            raise ReplicationError(
                f"copying {', '.join(databases)} from the primary at {source.address} into {replica.datadir} "
                f"failed ({'mariadb-dump' if dumped != 0 else 'loading the copy'}: {log[-2000:] or 'no message'}); "
                "remove the replica's directory and try again"
            )


# -- state ------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplicaStatus:
    """What a replica says of its replication (``SHOW SLAVE STATUS`` and ``@@gtid_slave_pos``)."""

    primary: str
    io_running: str
    sql_running: str
    #: None while the SQL thread is stopped or the primary is out of reach.
    seconds_behind: int | None
    gtid_slave_pos: str
    gtid_io_pos: str
    last_error: str

    def lines(self) -> list[tuple[str, str]]:
        """(label, value) pairs for a report, labelled with the server's own names."""
        lines = [
            ("replica of", self.primary),
            ("Slave_IO_Running", self.io_running),
            ("Slave_SQL_Running", self.sql_running),
            ("Seconds_Behind_Master", "NULL" if self.seconds_behind is None else str(self.seconds_behind)),
            ("gtid_slave_pos", self.gtid_slave_pos or "(empty)"),
            ("Gtid_IO_Pos", self.gtid_io_pos or "(empty)"),
        ]
        if self.last_error:
            lines.append(("last error", self.last_error))
        return lines


def replica_status(server: MariaDBServer) -> ReplicaStatus:
    """Ask the running replica ``server`` how its replication goes."""
    with _connection(server.connect, f"the replica in {server.datadir}") as cur:
        cur.execute("SHOW SLAVE STATUS")
        names = [d[0] for d in cur.description or ()]
        row = cur.fetchone()
        cur.execute("SELECT @@gtid_slave_pos")
        (slave_pos,) = cur.fetchone()
    if row is None:
        raise ReplicationError(f"the server in {server.datadir} replicates from no primary")
    state = dict(zip(names, row, strict=True))
    return ReplicaStatus(
        primary=f"{state['Master_Host']}:{state['Master_Port']}",
        io_running=state["Slave_IO_Running"],
        sql_running=state["Slave_SQL_Running"],
        seconds_behind=state["Seconds_Behind_Master"],
        gtid_slave_pos=slave_pos,
        gtid_io_pos=state["Gtid_IO_Pos"],
        last_error=state["Last_SQL_Error"] or state["Last_IO_Error"],
    )


def wait_for_primary(replica: MariaDBServer, primary: MariaDBServer, timeout: float = 60) -> str:
    """Wait until ``replica`` has applied everything ``primary`` has committed now; return that GTID position.

    Raises ServerTimeoutError if it has not after ``timeout`` seconds.
    """
    with _connection(primary.connect, f"the primary in {primary.datadir}") as cur:
        cur.execute("SELECT @@gtid_binlog_pos")
        (position,) = cur.fetchone()
    deadline = time.monotonic() + timeout
    with _connection(replica.connect, f"the replica in {replica.datadir}") as cur:
        # MASTER_GTID_WAIT returns 0 once the position is applied, -1 when its wait runs out.
        cur.execute("SELECT MASTER_GTID_WAIT(?, ?)", (position, max(0.0, deadline - time.monotonic())))
        (reached,) = cur.fetchone()
    if reached != 0:
        raise ServerTimeoutError(
            f"the replica in {replica.datadir} has not reached the primary's position {position} "
            f"after {timeout:g} s: see `windvane db status --datadir {replica.datadir}`"
        )
    return str(position)


@contextlib.contextmanager
def _connection(connect: Callable[[], mariadb.Connection], what: str) -> Iterator[mariadb.Cursor]:
    """A cursor of a new connection (autocommit on), closed after; a server error becomes a ReplicationError
    naming ``what``; without the connector, a ServerNotFoundError saying what to install."""
    check_connector()
    import mariadb

    try:
        conn = connect()
    except mariadb.Error as exc:
        raise ReplicationError(f"cannot connect to {what}: {exc}") from exc
    try:
        conn.autocommit = True
        yield conn.cursor()
    except mariadb.Error as exc:
        raise ReplicationError(f"{what}: {exc}") from exc
    finally:
        conn.close()
