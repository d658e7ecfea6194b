"""The raw results files beside the benchmarks: ``results-<name>-<date>.json``, each saying when, on what
machine and with which Python it was measured, then what was."""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent


def cpu_model() -> str:
    """The processor's model as ``lscpu`` names it ("?" where it cannot tell): VMs of one kind differ."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name")), "?")


def write(name: str, found: dict[str, Any]) -> Path:
    """Write ``found`` to ``results-<name>-<today>.json`` after the date, machine and Python; its path."""
    date = datetime.date.today().isoformat()
    doc = {
        "date": date,
        "machine": f"{os.cpu_count()} cores, {cpu_model()}, {platform.machine()}",
        "python": platform.python_version(),
        **found,
    }
    path = HERE / f"results-{name}-{date}.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path
