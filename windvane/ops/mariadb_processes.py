"""The processes of a private MariaDB server as /proc and pid files show them (no connection is made)."""

from __future__ import annotations

import contextlib
import os
import pwd
from pathlib import Path

from .errors import ServerError


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


def signal_pid(pid: int, sig: int) -> None:
    """Send ``sig`` to ``pid`` (gone already: nothing); ServerError if it is another user's."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError as exc:
        raise ServerError(f"not allowed to signal mariadbd (pid {pid}); it belongs to another user") from exc
