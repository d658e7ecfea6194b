"""Finding the MariaDB server's programs and plugins on this machine."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from .errors import ServerNotFoundError

# Where distributions put the server binaries when they are not on PATH
# (Debian: /usr/sbin/mariadbd; Fedora/RHEL: /usr/libexec/mariadbd).
SEARCH_DIRS = ("/usr/sbin", "/usr/libexec", "/usr/bin", "/usr/local/sbin", "/usr/local/bin")


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


def find_mariadbd() -> str:
    """The path of the mariadbd binary; ServerNotFoundError (saying what to install) if there is none."""
    path = find_program("mariadbd")
    if path is None:
        raise ServerNotFoundError(
            "mariadbd (the MariaDB server) was not found on PATH or in "
            + ", ".join(SEARCH_DIRS)
            + ". Install it: apt-get install mariadb-server (the system service is not "
            "needed; windvane runs its own server)"
        )
    return path
