"""The processes of a private MariaDB server as /proc and pid files show them (no connection is made)."""

from __future__ import annotations

import contextlib
import fcntl
import grp
import os
import pwd
import stat
from collections.abc import Iterator
from pathlib import Path

from .errors import ServerConfigError, ServerError


def read_pid(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def proc_cmdline(pid: int) -> list[str] | None:
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


def pid_alive(pid: int) -> bool:
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


def current_user() -> str:
    # Not getpass.getuser(): it believes $USER, which sudo may leave pointing
    # at the invoking user.
    return pwd.getpwuid(os.geteuid()).pw_name


def check_user(user: str) -> None:
    """Raise ServerConfigError unless this process may run a server as ``user`` (itself, or anyone as root)."""
    try:
        pwd.getpwnam(user)
    except KeyError:
        raise ServerConfigError(
            f"there is no system user {user!r} to run mariadbd as; installing mariadb-server creates "
            "the usual one (mysql)"
        ) from None
    if user != current_user() and os.geteuid() != 0:
        raise ServerConfigError(f"running mariadbd as {user!r} needs root; run as root or as {user!r}")


def give_to_user(directory: Path, user: str) -> None:
    """Make ``user`` the owner of ``directory`` and everything in it (as root; otherwise nothing to do)."""
    if os.geteuid() != 0:
        return
    entry = pwd.getpwnam(user)
    for root, dirs, files in os.walk(directory):
        for name in [root, *(os.path.join(root, n) for n in (*dirs, *files))]:
            with contextlib.suppress(FileNotFoundError):  # a temporary file the server just removed
                os.chown(name, entry.pw_uid, entry.pw_gid, follow_symlinks=False)
    missing = unreachable_parent(directory, user)
    if missing is not None:
        raise ServerConfigError(
            f"mariadbd runs as {user!r}, which cannot enter {missing}; choose a data directory that user "
            f"can reach (under /srv or /var/lib, say) or let it in: chmod o+x {missing}"
        )


def unreachable_parent(path: Path, user: str) -> Path | None:
    """The first directory above ``path`` that ``user`` may not enter (no search permission), or None."""
    entry = pwd.getpwnam(user)
    groups = {entry.pw_gid, *(g.gr_gid for g in grp.getgrall() if user in g.gr_mem)}
    for parent in reversed(path.parents):
        try:
            st = parent.stat()
        except OSError:
            return parent
        if st.st_uid == entry.pw_uid:
            bit = stat.S_IXUSR
        elif st.st_gid in groups:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if entry.pw_uid != 0 and not st.st_mode & bit:
            return parent
    return None


def looks_like_server(argv: list[str] | None) -> bool:
    if argv is None:
        return True  # no /proc: trust the pid file
    return bool(argv) and os.path.basename(argv[0]).startswith(("mariadbd", "mysqld"))


def find_server_process(config_file: Path) -> int | None:
    """Pid of a live mariadbd started on ``config_file``, found in /proc, or None."""
    wanted = f"--defaults-file={config_file}"
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    for entry in entries:
        if not entry.isdigit():
            continue
        argv = proc_cmdline(int(entry))
        if argv and wanted in argv and looks_like_server(argv) and pid_alive(int(entry)):
            return int(entry)
    return None


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on the file ``path`` (created if missing), against every other process."""
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def signal_pid(pid: int, sig: int) -> None:
    """Send ``sig`` to ``pid`` (gone already: nothing); ServerError if it is another user's."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError as exc:
        raise ServerError(f"not allowed to signal mariadbd (pid {pid}); it belongs to another user") from exc
