"""Creating a private MariaDB data directory (mariadb-install-db), and refusing somebody else's."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

from .errors import ServerConfigError, ServerNotFoundError, ServerStartError, ServerTimeoutError
from .mariadb_logs import with_log
from .mariadb_processes import current_user
from .mariadb_programs import find_program

# Files windvane itself puts in a data directory before initialising it (the
# replication role is written first, so that a failed first start keeps it).
# A directory holding only these may still be initialised; anything else
# means it is somebody's data.
_OWN_FILES = frozenset(
    {
        "my.cnf",
        "my.cnf.tmp",
        "error.log",
        "mariadbd.out",
        "install-db.log",
        "init.sql",
        ".server.lock",
        "replication.json",
    }
)

# Run by mariadb-install-db after it creates the system tables.  It also
# creates root@<this host's name>; the server runs with skip-name-resolve, so
# such accounts can never match a client and only cause a warning at every
# start.  Keep root@localhost (socket) and root@127.0.0.1/::1 (--port).
_INIT_SQL = """\
DELETE FROM mysql.global_priv WHERE Host NOT IN ('localhost', '127.0.0.1', '::1');
DELETE FROM mysql.proxies_priv WHERE Host NOT IN ('localhost', '127.0.0.1', '::1');
"""


def check_no_foreign_files(datadir: Path) -> None:
    """Raise ServerConfigError if ``datadir`` holds files this module did not put there."""
    # Initialising writes dozens of files: never into a directory that
    # holds somebody's data (a mistyped --datadir pointing at $HOME).
    stray = sorted(p.name for p in datadir.iterdir() if p.name not in _OWN_FILES)
    if stray:
        raise ServerConfigError(
            f"data directory {datadir} is not empty and is not a MariaDB data "
            f"directory (it contains {', '.join(stray[:5])}{', ...' if len(stray) > 5 else ''}). "
            "Use a new or empty directory; if an earlier initialisation failed, remove it and retry"
        )


def initialise(datadir: Path, user: str | None = None) -> None:
    """Create the system tables in ``datadir`` with mariadb-install-db (root without a password).

    ``user`` is the system user the server runs as (default: the current one).
    """
    check_no_foreign_files(datadir)
    # Root has no password, so whoever can reach the socket is root: keep
    # the directory (and so the socket) to its owner.
    datadir.chmod(0o700)
    install_db = find_program("mariadb-install-db") or find_program("mysql_install_db")
    if install_db is None:
        raise ServerNotFoundError(
            "mariadb-install-db was not found; install the MariaDB server: apt-get install mariadb-server"
        )
    extra_sql = datadir / "init.sql"
    extra_sql.write_text(_INIT_SQL, encoding="utf-8")
    cmd = [
        install_db,
        "--no-defaults",  # must come first; keeps /etc/mysql out of it
        f"--datadir={datadir}",
        # Passwordless root@localhost: the socket in our private directory
        # is the access control (the directory is mode 0700).
        "--auth-root-authentication-method=normal",
        "--skip-test-db",
        # The bootstrap server's temporary files stay in the private directory: at start a server removes
        # every temporary table file it finds in its tmpdir, which in a shared /tmp may be another server's.
        f"--tmpdir={datadir}",
        # Runs after the system tables are created; see _INIT_SQL.
        f"--extra-file={extra_sql}",
    ]
    if os.geteuid() == 0:
        # mariadbd refuses to run as root unless told to.
        cmd.append(f"--user={user or current_user()}")
    log = datadir / "install-db.log"
    with open(log, "wb") as out:
        try:
            result = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, timeout=300)
        except subprocess.TimeoutExpired:
            raise ServerTimeoutError(with_log("mariadb-install-db did not finish in 300 s", log)) from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                extra_sql.unlink()
    if result.returncode != 0 or not (datadir / "mysql").is_dir():
        raise ServerStartError(
            with_log(
                f"initialising {datadir} failed (mariadb-install-db exit code "
                f"{result.returncode}). Remove the directory and retry",
                log,
            )
        )
