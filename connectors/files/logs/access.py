"""Web server access logs, NCSA combined (and common) format, as nginx and Apache write them, to columns.

``%h %l %u [%d/%b/%Y:%H:%M:%S %z] "%r" %>s %b "%{Referer}i" "%{User-Agent}i"``;
the common format stops after the size (referer and user_agent are then
""); whatever follows the user agent (nginx's ``"$http_x_forwarded_for"``,
Apache's ``%D``...) is kept as text in ``rest``. The time keeps its zone
(to UTC). Quoted fields are unescaped as both servers escape them: ``\\"``,
``\\\\``, ``\\n``, ``\\r``, ``\\t``, ``\\b``, ``\\v`` and ``\\xHH`` bytes (nginx
writes every non-ASCII byte so); the bytes are then read as UTF-8, and a
byte sequence that is not UTF-8 stays written as ``\\xHH``. ``-`` (nothing)
reads as "" in ident, remote_user, referer and user_agent, and as 0 in
bytes_sent. The request splits into method, path and protocol
(``GET /a?b=1 HTTP/1.1``); a request that is not such a line (``-``, a TLS
handshake sent to a plain HTTP port) has no method or protocol, and path
holds it whole (a ``-`` request: "").
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .lines import Lines, Rows, add_faults
from .options import LogOptions

COLUMNS = {
    "time": pa.int64(),
    "remote_addr": pa.large_string(),
    "ident": pa.large_string(),
    "remote_user": pa.large_string(),
    "method": pa.large_string(),
    "path": pa.large_string(),
    "protocol": pa.large_string(),
    "status": pa.int16(),
    "bytes_sent": pa.int64(),
    "referer": pa.large_string(),
    "user_agent": pa.large_string(),
    "rest": pa.large_string(),
}

_QUOTED = r'"((?:[^"\\]|\\.)*)"'
LINE = (
    r"^(?P<addr>\S+) (?P<ident>\S+) (?P<user>\S+) \[(?P<ts>[^\]]*)\] "
    + _QUOTED.replace("((", "(?P<req>(", 1)
    + r" (?P<status>\d{3}) (?P<bytes>\d{1,18}|-)(?: "
    + _QUOTED.replace("((", "(?P<ref>(", 1)
    + " "
    + _QUOTED.replace("((", "(?P<ua>(", 1)
    + r")?(?: (?P<rest>.*))?$"
)
REQUEST = r"^(?P<method>[A-Za-z][A-Za-z0-9_\-]*) (?P<path>.*?)(?: (?P<proto>HTTP/\d(?:\.\d)?))?$"
TIME_FORMAT = "%d/%b/%Y:%H:%M:%S %z"
EXPECTED = (
    "not a combined or common access log line (expected HOST IDENT USER [dd/Mon/yyyy:hh:mm:ss +zzzz] "
    '"REQUEST" STATUS BYTES ["REFERER" "USER-AGENT"])'
)

_ESCAPE = re.compile(rb'\\(x[0-9A-Fa-f]{2}|["\\nrtbv])')
_CONTROL = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"b": b"\b", b"v": b"\v"}


def _unescaped(match: re.Match[bytes]) -> bytes:
    code: bytes = match.group(1)
    if len(code) == 3:
        return bytes([int(code[1:], 16)])
    return _CONTROL.get(code, code)


def unescape(text: str) -> str:
    """A quoted field as nginx or Apache escaped it, back to the text it was."""
    return _ESCAPE.sub(_unescaped, text.encode()).decode("utf-8", "backslashreplace")


def _field(column: pa.Array, nil: str | None = "-") -> pa.Array:
    """``column`` with nulls as "", ``nil`` as "" and escapes undone."""
    column = pc.fill_null(column, "").cast(pa.large_string())
    if nil is not None:
        column = pc.if_else(pc.equal(column, nil), "", column)
    escaped = np.flatnonzero(pc.match_substring(column, "\\").to_numpy(zero_copy_only=False))
    if len(escaped):
        values = column.to_pylist()
        for i in escaped.tolist():
            values[i] = unescape(values[i])
        column = pa.array(values, pa.large_string())
    return column


def parse_combined(lines: Lines, options: LogOptions) -> Rows:
    """Access log lines to :data:`COLUMNS`."""
    faults: dict[int, str] = {}
    found = pc.extract_regex(lines.text, LINE)
    add_faults(faults, ~found.is_valid().to_numpy(zero_copy_only=False), EXPECTED)
    f = {found.type.field(k).name: column for k, column in enumerate(found.flatten())}
    stamp = pc.fill_null(f["ts"], "")
    time = pc.strptime(stamp, format=TIME_FORMAT, unit="ns", error_is_null=True)
    missing = time.is_null().to_numpy(zero_copy_only=False)
    add_faults(faults, missing, lambda i: f"[{stamp[i].as_py()}] is not a time dd/Mon/yyyy:hh:mm:ss +zzzz")
    request = _field(f["req"])
    parts = pc.extract_regex(request, REQUEST)
    split = parts.is_valid()
    size = pc.fill_null(f["bytes"], "0")
    return Rows(
        {
            "time": pc.fill_null(time.cast(pa.int64()), 0),
            "remote_addr": _field(f["addr"], None),
            "ident": _field(f["ident"]),
            "remote_user": _field(f["user"]),
            "method": pc.if_else(split, parts.field("method"), "").cast(pa.large_string()),
            "path": pc.if_else(split, parts.field("path"), request).cast(pa.large_string()),
            "protocol": pc.if_else(split, parts.field("proto"), "").cast(pa.large_string()),
            "status": pc.cast(pc.fill_null(f["status"], "0"), pa.int16()),
            "bytes_sent": pc.cast(pc.if_else(pc.equal(size, "-"), "0", size), pa.int64()),
            "referer": _field(f["ref"]),
            "user_agent": _field(f["ua"]),
            "rest": _field(f["rest"], None),
        },
        faults,
    )
