"""`windvane tail` as a real subprocess: appends, rename and copytruncate rotation, kill -9, restarts.

Every test checks the stream holds each line written exactly once, in
order; results are polled for with deadlines, never waited for with fixed
sleeps.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.serve_process import REPO, Serve
from windvane import arrays

TAG = "logs.app"


class Tail(Serve):
    """One ``windvane tail`` process, started once it printed its "following" line (log, kill as Serve's)."""

    def __init__(self, path: Path, store: str, log_path: Path, *args: str):
        command = [
            sys.executable,
            "-c",
            "import windvane; windvane.main()",
            "tail",
            str(path),
            "--store",
            store,
            "--tag",
            TAG,
            "--format",
            "syslog3164",
            "--timezone",
            "UTC",
            "--poll-ms",
            "50",
            "--commit-ms",
            "100",
            "--rotate-wait",
            "0.3",
            *args,
        ]
        self.log_path = Path(log_path)
        self._log = open(log_path, "ab")
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=self._log, cwd=REPO, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )
        self.first_line = self.process.stdout.readline().decode()  # ends early if the process dies
        if not self.first_line.startswith("following"):
            self.kill()
            raise RuntimeError(f"windvane tail did not start: {self.first_line!r}\n{self.log()}")

    def stop(self) -> tuple[int, str]:
        """SIGTERM; the exit code and what it printed."""
        self.process.send_signal(signal.SIGTERM)
        out = self.process.stdout.read().decode()
        code = self.process.wait(30)
        self._log.close()
        return code, out


def line(i: int, text: str = "event") -> str:
    return f"Oct 11 22:{i // 3600 % 60:02d}:{i % 60:02d} web-1 app[{i}]: {text} {i} é\n"


def append(path: Path, lines: list[str]) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write("".join(lines))


def messages(url: str) -> list[str]:
    try:
        with arrays.open_stream(url, TAG) as s:
            return s.to_pandas()["message"].tolist() if len(s) else []
    except arrays.StreamNotFoundError:
        return []


def wait_for(url: str, count: int, tail: Tail | None = None, timeout: float = 30) -> list[str]:
    """The stream's messages once it holds ``count`` rows (AssertionError with the tail's log after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        got = messages(url)
        if len(got) >= count or time.monotonic() > deadline:
            assert len(got) == count, f"{len(got)} rows, expected {count}\n{tail.log() if tail else ''}"
            return got
        time.sleep(0.05)


def expected(numbers) -> list[str]:
    return [line(i).split(": ", 1)[1].rstrip("\n") for i in numbers]


@pytest.fixture
def log_file(tmp_path) -> Path:
    return tmp_path / "app.log"


def test_appends_while_running_and_a_partial_line_waits(log_file, sqlite_url, tmp_path):
    append(log_file, [line(i) for i in range(50)])
    with Tail(log_file, sqlite_url, tmp_path / "tail.log") as tail:
        wait_for(sqlite_url, 50, tail)
        half = line(50)
        append(log_file, [half[:20]])  # a writer mid-line; the tail polls several times meanwhile ...
        time.sleep(0.3)
        append(log_file, [half[20:], "not a syslog line\n"] + [line(i) for i in range(51, 300)])
        got = wait_for(sqlite_url, 300, tail)  # ... and stores the whole line once, not two halves
        code, out = tail.stop()
    assert code == 0 and out.rstrip().endswith("stopped") and "committed" in out
    assert got == expected(range(300))
    with arrays.open_stream(sqlite_url, TAG, quarantine=True) as q:
        rejected = q.to_pandas()
    assert rejected["raw"].tolist() == [b"not a syslog line"]
    assert rejected["reason"].tolist()[0].startswith("line 52: not an RFC 3164 syslog line")
    assert rejected["source"].tolist() == ["tail"]


def test_rename_rotation_reads_the_old_file_to_its_end(log_file, sqlite_url, tmp_path):
    append(log_file, [line(i) for i in range(100)])
    with Tail(log_file, sqlite_url, tmp_path / "tail.log") as tail:
        wait_for(sqlite_url, 100, tail)
        writer = open(log_file, "a", encoding="utf-8")  # a logger holding the file open across the rename
        log_file.rename(tmp_path / "app.log.1")
        writer.write("".join(line(i) for i in range(100, 150)))
        writer.write(line(150)[:-1])  # the old file's last line has no newline: still a line
        writer.close()
        append(log_file, [line(i) for i in range(151, 200)])
        got = wait_for(sqlite_url, 200, tail)
        assert tail.stop()[0] == 0
    assert got == expected(range(200))
    assert "was rotated (renamed)" in tail.log()


def test_copytruncate_rotation(log_file, sqlite_url, tmp_path):
    append(log_file, [line(i) for i in range(100)])
    with Tail(log_file, sqlite_url, tmp_path / "tail.log", "--poll-ms", "500") as tail:
        wait_for(sqlite_url, 100, tail)
        # logrotate's copytruncate; lines written just before it may or may not have been read yet:
        # either way each is stored once (the rest is read from the copy).
        append(log_file, [line(i) for i in range(100, 130)])
        shutil.copyfile(log_file, tmp_path / "app.log.1")
        os.truncate(log_file, 0)
        append(log_file, [line(i) for i in range(130, 160)])
        got = wait_for(sqlite_url, 160, tail)
        # truncated again, and refilled past the old offset before the follower looks: the first bytes tell
        with open(log_file, "r+", encoding="utf-8") as f:
            f.truncate(0)
            f.write("".join(line(i, "refilled after the truncation, longer than before") for i in range(160, 260)))
        got = wait_for(sqlite_url, 260, tail)
        assert tail.stop()[0] == 0
    assert got[:160] == expected(range(160))
    assert got[160:] == [
        line(i, "refilled after the truncation, longer than before").split(": ", 1)[1].rstrip() for i in range(160, 260)
    ]
    assert "was truncated" in tail.log()


def test_sigterm_commits_what_was_read_and_a_restart_resumes_exactly(log_file, sqlite_url, tmp_path):
    # Batches this large never fill: only SIGTERM commits, and it must commit every whole line there.
    with Tail(log_file, sqlite_url, tmp_path / "tail.log", "--commit-ms", "600000", "--commit-lines", "100000") as tail:
        append(log_file, [line(i) for i in range(120)] + [line(120)[:10]])
        code, out = tail.stop()
    assert code == 0 and "committed 120 rows, 0 rejected" in out
    assert messages(sqlite_url) == expected(range(120))
    append(log_file, [line(120)[10:]])
    append(log_file, [line(i) for i in range(121, 200)])
    offset = len("".join(line(i) for i in range(120)).encode())
    with Tail(log_file, sqlite_url, tmp_path / "tail.log") as tail:
        assert f"from line 121, offset {offset}" in tail.first_line
        got = wait_for(sqlite_url, 200, tail)
        assert tail.stop()[0] == 0
    assert got == expected(range(200))


def test_rotation_while_stopped_finishes_the_rotated_file(log_file, sqlite_url, tmp_path):
    append(log_file, [line(i) for i in range(80)])
    with Tail(log_file, sqlite_url, tmp_path / "tail.log") as tail:
        wait_for(sqlite_url, 80, tail)
        assert tail.stop()[0] == 0
    append(log_file, [line(i) for i in range(80, 120)])  # written, then rotated, while no tail ran
    log_file.rename(tmp_path / "app.log.1")
    append(log_file, [line(i) for i in range(120, 150)])
    with Tail(log_file, sqlite_url, tmp_path / "tail.log") as tail:
        got = wait_for(sqlite_url, 150, tail)
        assert tail.stop()[0] == 0
    assert got == expected(range(150))
    assert "was rotated while stopped: finishing" in tail.log()


@pytest.mark.crash
def test_kill_9_mid_stream_then_restart_stores_every_line_exactly_once(log_file, store_url, tmp_path):
    total = 6000
    append(log_file, [line(i) for i in range(1000)])
    done = threading.Event()
    killed = threading.Event()

    def write_on() -> None:  # a live application: lines keep coming while the tail dies and restarts
        for start in range(1000, total, 250):
            if start == total // 2:  # the second half only once the tail is dead, however slow the machine
                killed.wait(60)
            append(log_file, [line(i) for i in range(start, start + 250)])
            time.sleep(0.02)
        done.set()

    writer = threading.Thread(target=write_on)
    with Tail(log_file, store_url, tmp_path / "tail.log", "--commit-lines", "200", "--commit-ms", "50") as tail:
        writer.start()
        deadline = time.monotonic() + 30
        while len(messages(store_url)) < 1500 and time.monotonic() < deadline:
            time.sleep(0.02)
        tail.kill()
        killed.set()
    killed_at = len(messages(store_url))
    assert 0 < killed_at < total
    with Tail(log_file, store_url, tmp_path / "tail.log", "--commit-lines", "200") as tail:
        writer.join(60)
        assert done.is_set()
        got = wait_for(store_url, total, tail, timeout=60)
        assert tail.stop()[0] == 0
    assert got == expected(range(total))


@pytest.mark.parametrize(
    "args, message",
    [
        (["--format", "gelf"], "unknown log format 'gelf'"),
        (["--timezone", "Mars/Olympus"], "unknown time zone 'Mars/Olympus'"),
    ],
)
def test_bad_options_exit_2_naming_the_problem(log_file, sqlite_url, args, message):
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            "import windvane; windvane.main()",
            "tail",
            str(log_file),
            "--store",
            sqlite_url,
            "--tag",
            TAG,
            *args,
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert run.returncode == 2 and message in run.stderr
