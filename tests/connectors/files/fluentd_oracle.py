"""The real fluentd as an oracle for log parsing: what does fluentd 1.14.6 make of each line?

:func:`run_fluentd` runs ONE fluentd (with its supervisor, as deployments do) for a batch of
:class:`OracleCase` s (one per local time zone the cases ask for, started side by side). Each case gets
its own ``in_tail`` source (``read_from_head``, its own pos file and tag) with the case's ``<parse>``
section; one ``out_stdout`` match writes every record as JSON, with the event time injected as
``%s.%N`` (fluentd keeps nanoseconds that way), into fluentd's log. It waits until in_tail's pos files
show every file read (a record is written before its position), stops fluentd, and returns, per case,
one :class:`Outcome` per input line: the events fluentd emitted for it, or the reason it rejected it.
A line fluentd neither emits nor rejects is a RuntimeError, not a silent gap.

How a line is tied to its outcome: every line of a single-line case is written to a file of its own
(``<case>/<index>.log``, in a glob the source tails), and the source adds the file's path to each record
(``path_key``). Lines the parser does not match come back as ``unmatched_line`` records
(``emit_unmatched_lines``); lines whose parsing raised are logged by ``in_tail`` as ``invalid line
found file="..."``. A ``multiline`` case is one file (its lines belong together); its outcomes are its
events in order (``line`` is None), then one rejected outcome per buffer the log says did not match
(``pattern not matched`` with its text, or ``got incomplete line ... from <file>``).

fluentd's time formatter caches its last two results starting from time 0 with no text, so an event at
exactly the epoch is written with a ``null`` time: that null is read back as 0.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tests.fluent_programs import start_fluentd

#: Keys the oracle adds to every record (removed before the record is returned).
TIME_KEY = "__oracle_time"
PATH_KEY = "__oracle_path"
#: The reason given for a line fluentd's parser did not match (in_tail's own words).
NOT_MATCHED = "pattern not matched"

_INVALID = re.compile(r'invalid line found file="(?P<path>[^"]*)" line=.* error="(?P<error>(?:[^"\\]|\\.)*)"')
_NOT_MATCHED = re.compile(r"\[warn\]: #\d+ pattern not matched: (\".*\")$", re.M)
# A multiline buffer that does not match when it is flushed (by its timer, or at shutdown), and a line before
# any first line: both name the file.
_INCOMPLETE = re.compile(r"\[warn\]: #\d+ got incomplete line (?:at shutdown|before first line) from (\S+): ", re.M)


@dataclass(frozen=True)
class Event:
    """One event fluentd emitted: its time in ns since the epoch (UTC) and its record."""

    time: int
    record: dict


@dataclass
class Outcome:
    """What fluentd made of one input line (``line``: its 0-based index; None within a multiline case)."""

    line: int | None
    events: list[Event] = field(default_factory=list)
    rejected: str | None = None

    @property
    def record(self) -> dict | None:
        """The one record the line became (None when rejected or when it made several or none)."""
        return self.events[0].record if self.rejected is None and len(self.events) == 1 else None


@dataclass(frozen=True)
class OracleCase:
    """A named ``<parse>`` section and the lines to tail with it (bytes, without their newline)."""

    name: str
    parse: str
    lines: Sequence[bytes]
    local_zone: str | None = None  # fluentd's local time zone (TZ) for this case; None: this machine's

    @property
    def multiline(self) -> bool:
        return re.search(r"@type\s+multiline\b", self.parse) is not None


def parse_section(options: Mapping[str, object]) -> str:
    """A ``<parse>`` section from options keyed by fluentd's names (``type`` becomes ``@type``).

    Written here, not taken from windvane: the oracle must not depend on the code it checks.
    """
    lines = ["<parse>"]
    for key, value in options.items():
        name = "@type" if key == "type" else key
        lines.append(f"  {name} {_config_value(value)}")
    lines.append("</parse>")
    return "\n".join(lines)


def _config_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return json.dumps([str(v) for v in value])
    text = str(value)
    if re.fullmatch(r"/.*/[imx]*", text, re.S):  # a regexp literal: fluentd reads it unquoted
        return text
    if text == "" or text != text.strip() or any(c in text for c in "#'\"\\"):
        return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return text


def ruby_inspect(data: bytes) -> str:
    """``String#inspect`` of a binary (ASCII-8BIT) Ruby string, as fluentd's log prints lines."""
    special = {0x22: '\\"', 0x5C: "\\\\", 0x0A: "\\n", 0x09: "\\t", 0x0D: "\\r", 0x0C: "\\f", 0x0B: "\\v"}
    special |= {0x08: "\\b", 0x07: "\\a", 0x1B: "\\e"}
    out = []
    for i, byte in enumerate(data):
        if byte in special:
            out.append(special[byte])
        elif byte == 0x23 and data[i + 1 : i + 2] in (b"{", b"$", b"@"):
            out.append("\\#")
        elif 0x20 <= byte < 0x7F:
            out.append(chr(byte))
        else:
            out.append(f"\\x{byte:02X}")
    return '"' + "".join(out) + '"'


def _source(case: OracleCase, index: int, workdir: Path) -> str:
    folder = workdir / "in" / f"c{index}"
    extra = "  multiline_flush_interval 0.5s\n" if case.multiline else "  emit_unmatched_lines true\n"
    return (
        f"<source>\n  @type tail\n  path {folder}/*.log\n  pos_file {workdir}/pos/c{index}.pos\n"
        f"  @log_level warn\n  read_from_head true\n  tag c{index}\n  path_key {PATH_KEY}\n  enable_stat_watcher false\n"
        f"  refresh_interval 3600\n{extra}{case.parse}\n</source>\n"
    )


#: One output for every case: out_stdout writes each record, synchronously in in_tail's emit (before in_tail
#: records the file's position), to the worker's stdout, which is fluentd's log. (out_file, buffered, was
#: seen to lose the last chunks of a run at shutdown.)
MATCH = (
    "<match **>\n  @type stdout\n  <format>\n    @type json\n  </format>\n"
    f"  <inject>\n    time_key {TIME_KEY}\n    time_type string\n    time_format %s.%N\n  </inject>\n</match>\n"
)


def _write_inputs(cases: Sequence[OracleCase], workdir: Path) -> list[list[Path]]:
    files = []
    (workdir / "pos").mkdir(parents=True, exist_ok=True)
    for index, case in enumerate(cases):
        folder = workdir / "in" / f"c{index}"
        folder.mkdir(parents=True)
        if any(b"\n" in line for line in case.lines):
            raise ValueError(f"case {case.name}: a line holds a newline; give the lines split")
        if case.multiline:
            path = folder / "all.log"
            path.write_bytes(b"".join(line + b"\n" for line in case.lines))
            files.append([path])
            continue
        paths = [folder / f"{n:05d}.log" for n in range(len(case.lines))]
        for path, line in zip(paths, case.lines):
            path.write_bytes(line + b"\n")
        files.append(paths)
    return files


def _all_read(files: list[list[Path]], workdir: Path) -> bool:
    """Whether in_tail's pos files show every input file read to its end (pos is written after the emit)."""
    for index, paths in enumerate(files):
        pos = workdir / "pos" / f"c{index}.pos"
        read = {}
        if pos.exists():
            for entry in pos.read_text(errors="replace").splitlines():
                parts = entry.split("\t")
                if len(parts) == 3:
                    read[parts[0]] = int(parts[1], 16)
        if any(read.get(str(path), -1) < path.stat().st_size for path in paths):
            return False
    return True


def run_fluentd(cases: Sequence[OracleCase], workdir: Path, timeout: float = 120) -> dict[str, list[Outcome]]:
    """Run fluentd over ``cases`` in ``workdir`` (made if missing); outcomes by case name.

    One fluentd for all the cases of one ``local_zone`` (its ``TZ``), multiline cases apart. Skips (fails in
    CI) where fluentd or Ruby is missing. RuntimeError (with fluentd's log) when fluentd does not start or does not read every
    line within ``timeout`` seconds.
    """
    # fluentd's warning about an unmatched multiline buffer names no file, so multiline cases get a
    # fluentd of their own: another case's rejected line cannot be taken for theirs.
    kinds = sorted({(case.local_zone or "", case.multiline) for case in cases})
    batches = [[case for case in cases if ((case.local_zone or ""), case.multiline) == kind] for kind in kinds]
    envs = [{**os.environ, "TZ": zone} if zone else None for zone, _ in kinds]
    with ThreadPoolExecutor(len(kinds) or 1) as pool:  # the fluentd processes start side by side
        runs = [
            pool.submit(_run_batch, b, workdir / f"run{n}", timeout, e) for n, (b, e) in enumerate(zip(batches, envs))
        ]
        return {name: outcomes for run in runs for name, outcomes in run.result().items()}


def _run_batch(
    cases: Sequence[OracleCase], workdir: Path, timeout: float, env: dict[str, str] | None
) -> dict[str, list[Outcome]]:
    workdir.mkdir(parents=True, exist_ok=True)
    files = _write_inputs(cases, workdir)
    config = "".join(_source(case, i, workdir) for i, case in enumerate(cases)) + MATCH
    program = start_fluentd(config, workdir, name="oracle", env=env)
    try:
        deadline = time.monotonic() + timeout
        while not _all_read(files, workdir):
            if time.monotonic() > deadline or not program.running():
                raise RuntimeError(f"fluentd did not read every line in {timeout} s:\n{program.log()}")
            time.sleep(0.2)
        if any(case.multiline for case in cases):
            time.sleep(1.0)  # the last event's flush interval (in_tail also parses it at shutdown)
    finally:
        program.stop(timeout=30)
    raw_log = program.log_path.read_bytes()
    log = raw_log.decode("utf-8", errors="replace")
    events = _read_events(raw_log)
    return {case.name: _outcomes(case, files[i], events, log) for i, case in enumerate(cases)}


def _read_events(log: bytes) -> dict[str, list[dict]]:
    """The records out_stdout wrote to the log, in order, by the input file they came from."""
    found: dict[str, list[dict]] = {}
    for line in log.splitlines():
        if line.startswith(b"{") and PATH_KEY.encode() in line:
            raw = json.loads(line.decode("utf-8", errors="surrogateescape"))
            found.setdefault(raw[PATH_KEY], []).append(raw)
    return found


def _event(raw: dict) -> Event:
    stamp = raw.pop(TIME_KEY)
    raw.pop(PATH_KEY, None)
    if stamp is None:
        return Event(0, raw)
    seconds, _, fraction = stamp.partition(".")
    return Event(int(seconds) * 1_000_000_000 + int(fraction.ljust(9, "0")[:9]), raw)


def _outcomes(case: OracleCase, paths: list[Path], events: dict[str, list[dict]], log: str) -> list[Outcome]:
    if case.multiline:
        return _multiline_outcomes(case, paths[0], events.get(str(paths[0]), []), log)
    by_path = {str(path): Outcome(line) for line, path in enumerate(paths)}
    for raw in (raw for path in by_path for raw in events.get(path, [])):
        outcome = by_path[raw[PATH_KEY]]
        if set(raw) - {TIME_KEY, PATH_KEY} == {"unmatched_line"}:
            outcome.rejected = NOT_MATCHED
        else:
            outcome.events.append(_event(raw))
    for found in _INVALID.finditer(log):
        if found["path"] in by_path:
            by_path[found["path"]].rejected = "invalid line: " + found["error"]
    silent = [o.line for o in by_path.values() if not o.events and o.rejected is None]
    if silent:
        raise RuntimeError(f"case {case.name}: fluentd said nothing about lines {silent}:\n{log[-3000:]}")
    return list(by_path.values())


def _multiline_outcomes(case: OracleCase, path: Path, raws: list[dict], log: str) -> list[Outcome]:
    outcomes = [Outcome(None, [_event(raw)]) for raw in raws]
    # The log does not name the file of an unmatched multiline buffer: match its text against this case's lines.
    text = b"\n".join(case.lines)
    for found in _NOT_MATCHED.finditer(log):
        if _shown_in(found.group(1), text):
            outcomes.append(Outcome(None, rejected=NOT_MATCHED))
    for found in _INVALID.finditer(log):
        if found["path"] == str(path):
            outcomes.append(Outcome(None, rejected="invalid line: " + found["error"]))
    for found in _INCOMPLETE.finditer(log):
        if found.group(1) == str(path):
            outcomes.append(Outcome(None, rejected=NOT_MATCHED))
    return outcomes


def _shown_in(shown: str, text: bytes) -> bool:
    """Whether a line fluentd's log shows (inspected) is a run of whole lines of ``text``."""
    lines = text.split(b"\n")
    for start in range(len(lines)):
        for end in range(start + 1, len(lines) + 1):
            run = b"\n".join(lines[start:end])
            if shown in (ruby_inspect(run), ruby_inspect(run + b"\n")):
                return True
    return False
