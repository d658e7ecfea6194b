"""The reference logfmt decoder, Go's ``github.com/go-logfmt/logfmt``, as an oracle.

fluentd has no logfmt parser of its own (users install a plugin, which RubyGems would have to serve; it is
not reachable here), so windvane's logfmt parser is checked against the decoder the logfmt format is
defined by in practice. :func:`decode` runs ``tests/clients/logfmt`` (pinned by its ``go.sum``), built
once per source version into the temporary folder; a missing ``go`` skips the test (fails in CI).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

from tests.clients import CLIENTS, unavailable

SOURCE = CLIENTS / "logfmt"


@cache
def oracle() -> Path:
    """The built decoder program (built here on first use)."""
    sources = [SOURCE / name for name in ("main.go", "go.mod", "go.sum")]
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in sources)).hexdigest()[:16]
    program = Path(tempfile.gettempdir()) / f"windvane-logfmt-oracle-{digest}" / "decode"
    if program.exists():
        return program
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go") else None)
    if go is None:
        unavailable("go not installed (the logfmt oracle is a Go program)")
    program.parent.mkdir(parents=True, exist_ok=True)
    building = program.with_suffix(f".{os.getpid()}")
    proc = subprocess.run(
        [go, "build", "-buildvcs=false", "-o", str(building), "."],
        cwd=SOURCE,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"building the logfmt oracle failed:\n{proc.stderr[-3000:]}")
    building.replace(program)
    return program


def decode(lines: list[bytes]) -> list[dict]:
    """What the decoder makes of each line: ``{"pairs": [[key, value], ...]}`` or ``{"error": message, ...}``."""
    proc = subprocess.run(
        [str(oracle())], input=b"".join(line + b"\n" for line in lines), capture_output=True, timeout=120
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the logfmt oracle failed: {proc.stderr.decode(errors='replace')}")
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(results) == len(lines)
    return results
