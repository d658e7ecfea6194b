"""Real fluentd and Fluent Bit as test peers: find them, write their configuration, run them, stop them.

The programs come from ``../shared/vendor/`` beside the repository (see its
README), or from where ``WINDVANE_FLUENTD_DIR`` (fluentd's source tree, run
with ``ruby -Ilib bin/fluentd``) and ``WINDVANE_FLUENT_BIT`` (the
``fluent-bit`` executable) say. Outside CI a missing program skips the
test with that reason; with ``CI`` set it fails (CI never skips a real
client: ``scripts/test install`` installs Ruby and fluentd's gems from
Debian, and what Fluent Bit needs).

fluentd runs **with its supervisor**, as deployments do: its worker then
runs with ``-Eascii-8bit``, so text read by ``in_tail`` is sent as msgpack
bin. ``--no-supervisor`` would hide that and is never used here.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from tests.clients import in_ci, unavailable

REPO = Path(__file__).resolve().parents[1]
VENDOR = REPO.parent / "shared" / "vendor"


def fluentd_dir() -> Path:
    """fluentd's source tree (``bin/fluentd``, ``lib/``); skips (fails in CI) where it or Ruby is missing."""
    where = os.environ.get("WINDVANE_FLUENTD_DIR")
    path = Path(where) if where else VENDOR / "fluentd-1.14.6"
    if not (path / "bin" / "fluentd").exists():
        unavailable(f"fluentd not found at {path} (set WINDVANE_FLUENTD_DIR to a fluentd source tree)")
    if shutil.which("ruby") is None:
        unavailable("ruby is not installed (scripts/test install installs it and fluentd's gems from Debian)")
    return path


def fluent_bit_binary() -> Path:
    """The ``fluent-bit`` executable; skips (fails in CI) where it is missing."""
    where = os.environ.get("WINDVANE_FLUENT_BIT")
    path = Path(where) if where else VENDOR / "fluent-bit-5.1.1" / "bin" / "fluent-bit"
    if not path.exists():
        unavailable(f"Fluent Bit not found at {path} (set WINDVANE_FLUENT_BIT to a fluent-bit executable)")
    return path


class Program:
    """One running fluentd or Fluent Bit, its configuration and log in ``workdir``."""

    def __init__(
        self, argv: list[str], workdir: Path, name: str, cwd: Path | None = None, env: dict[str, str] | None = None
    ) -> None:
        self.workdir = workdir
        self.name = name
        self.log_path = workdir / f"{name}.log"
        self._log = open(self.log_path, "ab")
        # A session of its own: the supervisor's worker and Fluent Bit's threads die with the group.
        self.process = subprocess.Popen(
            argv,
            cwd=cwd or workdir,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def log(self, tail: int = 6000) -> str:
        """The end of the program's log (also after :meth:`stop`)."""
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")[-tail:]

    def running(self) -> bool:
        return self.process.poll() is None

    def wait_log(self, text: str, timeout: float = 60) -> None:
        """Wait until ``text`` appears in the program's log; RuntimeError (with the log) if it does not."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log_path.read_text(errors="replace"):
                return
            if not self.running():
                break
            time.sleep(0.2)
        raise RuntimeError(f"{self.name}: {text!r} not in its log after {timeout} s:\n{self.log()}")

    def stop(self, timeout: float = 30) -> int | None:
        """SIGTERM to the whole group (a graceful flush), SIGKILL after ``timeout``."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._kill_group()
        self._log.close()
        return self.process.returncode

    def kill(self) -> None:
        """``kill -9`` of the whole group."""
        self._kill_group()
        self.process.wait(30)

    def _kill_group(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def __enter__(self) -> Program:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop(timeout=10)


def start_fluentd(config: str, workdir: Path, name: str = "fluentd", env: dict[str, str] | None = None) -> Program:
    """Run fluentd (with its supervisor) on ``config`` text; returns once its worker is running.

    ``env``: its environment (None: this process's), e.g. with ``TZ`` for its local time zone."""
    root = fluentd_dir()
    conf = workdir / f"{name}.conf"
    conf.write_text(config)
    program = Program(["ruby", "-Ilib", "bin/fluentd", "-c", str(conf)], workdir, name, cwd=root, env=env)
    try:
        program.wait_log("fluentd worker is now running", timeout=90)
    except BaseException:
        program.stop(timeout=5)
        raise
    return program


def start_fluent_bit(config: str, workdir: Path, name: str = "fluent-bit") -> Program:
    """Run Fluent Bit on ``config`` text (classic format); returns once its pipeline has started."""
    binary = fluent_bit_binary()
    conf = workdir / f"{name}.conf"
    conf.write_text(config)
    program = Program([str(binary), "-c", str(conf)], workdir, name)
    try:
        program.wait_log("[sp] stream processor started", timeout=60)
    except BaseException:
        program.stop(timeout=5)
        raise
    return program


__all__ = [
    "Program",
    "fluent_bit_binary",
    "fluentd_dir",
    "in_ci",
    "start_fluent_bit",
    "start_fluentd",
]
