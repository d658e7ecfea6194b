"""The reference logfmt decoder, Go's ``github.com/go-logfmt/logfmt``, as an oracle.

fluentd has no logfmt parser of its own (users install a plugin, which RubyGems would have to serve; it is
not reachable here), so windvane's logfmt parser is checked against the decoder the logfmt format is
defined by in practice. :func:`decode` runs ``tests/clients/logfmt`` (pinned by its ``go.sum``), built by
the README's test command next to the Python interpreter, as the Go client is (see :mod:`tests.clients`).
"""

from __future__ import annotations

import json
import subprocess

from tests.clients import LOGFMT_DIR, LOGFMT_ORACLE, go_program


def oracle() -> str:
    """The built decoder program (``windvane-logfmt-oracle``, built by the README's test command)."""
    return go_program(LOGFMT_DIR, LOGFMT_ORACLE, "the logfmt oracle")


def decode(lines: list[bytes]) -> list[dict]:
    """What the decoder makes of each line: ``{"pairs": [[key, value], ...]}`` or ``{"error": message, ...}``."""
    proc = subprocess.run([oracle()], input=b"".join(line + b"\n" for line in lines), capture_output=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"the logfmt oracle failed: {proc.stderr.decode(errors='replace')}")
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(results) == len(lines)
    return results
