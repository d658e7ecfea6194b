"""Syslog lines, RFC 3164 (what rsyslog and syslog-ng write to files) and RFC 5424, to columns.

RFC 3164 (format ``syslog``): ``[<PRI>]TIMESTAMP HOST [APP[[PID]]:] MESSAGE``,
TIMESTAMP ``Mmm dd hh:mm:ss`` (no year, no zone: see :func:`times.bsd_to_ns`)
or RFC 3339 (rsyslog's high-precision file format, with its zone). Files
usually have no ``<PRI>``; then facility and severity are -1. A line whose
text after the host does not start with ``APP:`` or ``APP[PID]:`` has no
tag: app_name and pid are "" and the whole text is the message.

RFC 5424 (format ``syslog5424``): ``<PRI>VERSION TIMESTAMP HOST APP PROCID
MSGID [SD]... [MESSAGE]``. The nil value ``-`` reads as "" (a nil timestamp
as the time the line was read); a UTF-8 BOM opening the message is dropped;
structured data is kept as JSON text, ``{"id": {"name": "value"}}`` (a
parameter repeated within an element: a list of its values), "" when nil.

The pid is text in both (RFC 5424's PROCID need not be a number).
"""

from __future__ import annotations

import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windvane.ingest.times import iso_column_ns

from .lines import Lines, Rows, add_faults
from .options import LogOptions
from .times import bsd_to_ns

COLUMNS_3164 = {
    "time": pa.int64(),
    "facility": pa.int8(),
    "severity": pa.int8(),
    "hostname": pa.large_string(),
    "app_name": pa.large_string(),
    "pid": pa.large_string(),
    "message": pa.large_string(),
}
COLUMNS_5424 = {
    "time": pa.int64(),
    "facility": pa.int8(),
    "severity": pa.int8(),
    "version": pa.int16(),
    "hostname": pa.large_string(),
    "app_name": pa.large_string(),
    "pid": pa.large_string(),
    "msgid": pa.large_string(),
    "structured_data": pa.large_string(),
    "message": pa.large_string(),
}

_RFC3339 = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)"
LINE_3164 = (
    r"^(?:<(?P<pri>\d{1,3})>)?"
    r"(?:(?P<mon>[A-Z][a-z]{2}) (?P<day>[ \d]?\d) (?P<clock>\d\d:\d\d:\d\d)|(?P<iso>" + _RFC3339 + r"))"
    r" (?P<host>\S+)(?: (?P<app>[^\s\[\]:]+)(?:\[(?P<pid>[^\]\s]*)\])?:)?(?: (?P<msg>.*))?$"
)
_NAME = r'[^\s=\]"]+'
_VALUE = r'"(?:[^"\\]|\\.)*"'
_ELEMENT = r"\[" + _NAME + r"(?: " + _NAME + "=" + _VALUE + r")*\]"
LINE_5424 = (
    r"^<(?P<pri>\d{1,3})>(?P<version>[1-9]\d{0,2}) (?P<ts>\S+) (?P<host>\S+) (?P<app>\S+)"
    r" (?P<procid>\S+) (?P<msgid>\S+) (?P<sd>-|(?:" + _ELEMENT + r")+)(?: (?P<msg>.*))?$"
)

SD_ELEMENT = re.compile(r"\[(" + _NAME + r")((?: " + _NAME + "=" + _VALUE + r")*)\]")
SD_PARAM = re.compile(r" (" + _NAME + r')="((?:[^"\\]|\\.)*)"')
SD_ESCAPE = re.compile(r'\\(["\\\]])')

EXPECTED_3164 = "not an RFC 3164 syslog line (expected [<PRI>]Mmm dd hh:mm:ss HOST [APP[PID]:] MESSAGE)"
EXPECTED_5424 = (
    "not an RFC 5424 syslog line (expected <PRI>VERSION TIMESTAMP HOST APP PROCID MSGID STRUCTURED-DATA [MESSAGE])"
)


def _match(lines: Lines, pattern: str, expected: str, faults: dict[int, str]) -> dict[str, pa.Array]:
    found = pc.extract_regex(lines.text, pattern)
    add_faults(faults, ~found.is_valid().to_numpy(zero_copy_only=False), expected)
    # flatten(), not field(): unmatched lines are null in every field, not "".
    return {found.type.field(k).name: column for k, column in enumerate(found.flatten())}


def _priority(pri: pa.Array, faults: dict[int, str]) -> tuple[pa.Array, pa.Array]:
    """Facility and severity of ``<PRI>`` ("" when absent: -1 for both)."""
    given = pc.not_equal(pc.fill_null(pri, ""), "").to_numpy(zero_copy_only=False)
    value = np.full(len(pri), -1, dtype=np.int64)
    if given.any():
        value[given] = pc.cast(pri.filter(pa.array(given)), pa.int64()).to_numpy()
    add_faults(faults, value > 191, lambda i: f"PRI {value[i]} is out of range 0-191")
    value = np.where(value > 191, -1, value)
    facility = np.where(value < 0, -1, value // 8).astype(np.int8)
    severity = np.where(value < 0, -1, value % 8).astype(np.int8)
    return pa.array(facility), pa.array(severity)


def _text(column: pa.Array, nil: str | None = None) -> pa.Array:
    column = pc.fill_null(column, "").cast(pa.large_string())
    if nil is not None:
        column = pc.if_else(pc.equal(column, nil), "", column)
    return column


def parse_3164(lines: Lines, options: LogOptions) -> Rows:
    """RFC 3164 lines to :data:`COLUMNS_3164`."""
    faults: dict[int, str] = {}
    f = _match(lines, LINE_3164, EXPECTED_3164, faults)
    facility, severity = _priority(f["pri"], faults)
    iso = pc.not_equal(pc.fill_null(f["iso"], ""), "").to_numpy(zero_copy_only=False)
    time = np.zeros(len(lines), dtype=np.int64)
    bsd = np.flatnonzero(~iso & ~np.isin(np.arange(len(lines)), list(faults)))
    if len(bsd):
        picked = [f[k].take(pa.array(bsd)) for k in ("mon", "day", "clock")]
        month, day, clock = picked
        values, bad = bsd_to_ns(month, day, clock, options.syslog_zone, options.written_ns)
        time[bsd] = values
        stamp = {int(i): " ".join(c[k].as_py() for c in picked) for k, i in enumerate(bsd) if bad[k]}
        add_faults(faults, np.isin(np.arange(len(lines)), bsd[bad]), lambda i: f"no such date or time: {stamp[i]!r}")
    _iso_times(lines, f["iso"], iso, time, faults, options)
    return Rows(
        {
            "time": pa.array(time),
            "facility": facility,
            "severity": severity,
            "hostname": _text(f["host"]),
            "app_name": _text(f["app"]),
            "pid": _text(f["pid"]),
            "message": _text(f["msg"]),
        },
        faults,
    )


def _iso_times(
    lines: Lines, text: pa.Array, where: np.ndarray, time: np.ndarray, faults: dict[int, str], options: LogOptions
) -> None:
    """Fill ``time`` at ``where`` from the RFC 3339 strings of ``text``; fault the impossible ones."""
    rows = np.flatnonzero(where)
    if not len(rows):
        return
    picked = text.take(pa.array(rows))
    values, bad = iso_column_ns(picked, options.syslog_zone)
    time[rows] = values
    for k in np.flatnonzero(bad).tolist():
        faults.setdefault(int(rows[k]), f"{picked[k].as_py()!r} is not an RFC 3339 time")


def structured_data_json(sd: str) -> str:
    """RFC 5424 STRUCTURED-DATA (already matched as well-formed) as JSON text; ValueError for a repeated SD-ID."""
    elements: dict[str, dict[str, str | list[str]]] = {}
    for match in SD_ELEMENT.finditer(sd):
        sd_id = match.group(1)
        if sd_id in elements:
            raise ValueError(f"structured data element {sd_id!r} appears twice (RFC 5424 allows it once)")
        params: dict[str, str | list[str]] = {}
        for name, value in SD_PARAM.findall(match.group(2)):
            value = SD_ESCAPE.sub(r"\1", value)
            held = params.get(name)
            params[name] = value if held is None else [*held, value] if isinstance(held, list) else [held, value]
        elements[sd_id] = params
    return json.dumps(elements, ensure_ascii=False, separators=(",", ":"))


def parse_5424(lines: Lines, options: LogOptions) -> Rows:
    """RFC 5424 lines to :data:`COLUMNS_5424`."""
    faults: dict[int, str] = {}
    f = _match(lines, LINE_5424, EXPECTED_5424, faults)
    facility, severity = _priority(f["pri"], faults)
    version = pc.cast(pc.if_else(pc.is_null(f["version"]), "0", f["version"]), pa.int16())
    ts = pc.fill_null(f["ts"], "-")
    nil = pc.equal(ts, "-").to_numpy(zero_copy_only=False)
    time = np.full(len(lines), options.now_ns, dtype=np.int64)
    _iso_times(lines, ts, ~nil & ~np.isin(np.arange(len(lines)), list(faults)), time, faults, options)
    sd = _text(f["sd"], "-").to_pylist()
    for i, text in enumerate(sd):
        if text and i not in faults:
            try:
                sd[i] = structured_data_json(text)
            except ValueError as exc:
                faults[i] = str(exc)
    message = pc.replace_substring_regex(_text(f["msg"]), "^\ufeff", "")
    return Rows(
        {
            "time": pa.array(time),
            "facility": facility,
            "severity": severity,
            "version": version,
            "hostname": _text(f["host"], "-"),
            "app_name": _text(f["app"], "-"),
            "pid": _text(f["procid"], "-"),
            "msgid": _text(f["msgid"], "-"),
            "structured_data": pa.array(sd, pa.large_string()),
            "message": message,
        },
        faults,
    )
