"""fluentd's ``msgpack`` parser as in_tail runs it: the bytes of each line fed to one msgpack stream.

in_tail splits the file at ``\\n`` bytes (dropping the ``\\n``, and a ``\\r``
before it) and feeds each line to the parser's one unpacker, whose stream
carries on from line to line: each map that ends within a line is a record
of that line. As fluentd does (within a block: the stream is not carried
from one block to the next):

- an object that is not a map rejects its line (fluentd's in_tail fails on
  it: ``no implicit conversion of String into Integer``); what follows it on
  the line stays in the stream and is read with the next line;
- a map cut by a ``0x0a`` byte inside it continues on the next line without
  that byte: a line that ends inside an object has no record (fluentd says
  nothing of it; windvane rejects it, ``incomplete msgpack object``);
- a byte that starts no object rejects its line (``invalid byte``); the
  stream goes on after it;
- an extension type fluentd does not know (any but its EventTime, type 0,
  read as its whole seconds, as fluentd's JSON writes it) stops the stream:
  that line and every later one are rejected, as fluentd's unpacker is stuck
  on it.

Keys that are not strings become their Ruby ``to_s`` (``1`` -> ``"1"``); binary
(``bin``) values text, bytes that are not UTF-8 as ``\\xHH``. No time key by
default (fluentd's msgpack parser has none); ``time_key`` and the other
options as :mod:`..records` says. A line holding several maps makes several
events in fluentd; windvane keeps one row per line and rejects it.
"""

from __future__ import annotations

from typing import Any

import msgpack
import pyarrow as pa

from ...errors import LineError
from ...lines import Lines, Rows
from ...options import LogOptions
from ..config import ParseConfig
from ..records import RecordBuilder
from ..values import ruby_to_s
from .json import record_fields

NOT_A_MAP = "no implicit conversion of String into Integer (a msgpack object that is not a map)"
INCOMPLETE = "incomplete msgpack object (fluentd reads the rest with the next line)"
NOTHING = "no msgpack object (fluentd ignores the line)"


_SCALARS = {str, int, float, bool, type(None)}


class _Stuck(LineError):
    """The unpacker met what it cannot read; fluentd's raises the same error on every later line."""


class MessagePackParser:
    """``parse(lines, options)``: the msgpack maps of the lines' bytes as records."""

    binary = True  # the lines are bytes, not UTF-8 text

    def __init__(self, config: ParseConfig):
        self.time_key = config.effective_time_key
        self.records = RecordBuilder(config)

    def parse(self, lines: Lines, options: LogOptions) -> Rows:
        """Rows of the lines that end one map each; the others are faults."""
        records: list[dict[str, Any]] = []
        faults: dict[int, str] = {}
        pending, stuck = b"", ""
        for i, line in enumerate(lines.text.cast(pa.large_binary()).to_pylist()):
            found: list[dict[str, Any]] = []
            if stuck:
                why = stuck
            else:
                found, why, pending = _objects(pending + line)
                stuck = why.removeprefix("stuck: ") if why.startswith("stuck: ") else ""
                why = stuck or why
            if len(found) == 1 and not why:
                records.append(found[0])
                continue
            faults[i] = why or _no_row(found, pending)
            records.append({})
        return self.records.to_rows(record_fields(records, self.time_key), len(lines), faults, options)


def _no_row(found: list[dict[str, Any]], pending: bytes) -> str:
    """Why a line that raised no error makes no row: several maps, or none (one cut short, or nothing at all)."""
    if found:
        return f"{len(found)} msgpack maps on one line: one row per line"
    return INCOMPLETE if pending else NOTHING


def _objects(data: bytes) -> tuple[list[dict[str, Any]], str, bytes]:
    """The maps that end in ``data`` (what the stream holds once a line is fed), why the line is at fault ("stuck:
    " first when the stream cannot go on), and the bytes left in the stream."""
    unpacker = msgpack.Unpacker(raw=False, unicode_errors="backslashreplace", strict_map_key=False, ext_hook=_ext)
    unpacker.feed(data)
    found: list[dict[str, Any]] = []
    done = 0  # where the last whole object ended (tell() counts a cut object's bytes as read)
    try:
        for obj in unpacker:
            done = unpacker.tell()
            if not isinstance(obj, dict):
                return found, NOT_A_MAP, data[done:]  # the rest of the line waits in the stream
            found.append(_record(obj))
    except _Stuck as exc:
        return found, f"stuck: {exc}", b""
    except RecursionError:
        return found, "nested deeper than windvane reads (fluentd reads it)", data[unpacker.tell() :]
    except (msgpack.FormatError, msgpack.StackError, ValueError) as exc:
        # fluentd's unpacker drops the byte it could not read; the rest waits for the next line
        return found, f"invalid byte ({type(exc).__name__})", data[unpacker.tell() + 1 :]
    return found, "", data[done:]


def _ext(code: int, data: bytes) -> Any:
    """fluentd's EventTime (type 0: seconds and nanoseconds, which its JSON writes as the seconds); any other
    extension stops the stream."""
    if code == 0 and len(data) == 8:
        return int.from_bytes(data[:4], "big")
    raise _Stuck("unexpected extension type")


def _record(obj: dict[Any, Any]) -> dict[str, Any]:
    """A decoded map as a record: text keys, plain values (the usual map is one already)."""
    if set(map(type, obj)) == {str} and set(map(type, obj.values())) <= _SCALARS:
        return obj
    return {_key(k): _plain(v) for k, v in obj.items()}


def _key(key: Any) -> str:
    return _text(key) if isinstance(key, bytes) else ruby_to_s(_plain(key))


def _plain(value: Any) -> Any:
    """A decoded value with text for bytes, lists for arrays, text keys; an unknown extension stops the stream."""
    if isinstance(value, bytes):
        return _text(value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return _record(value)
    if isinstance(value, msgpack.Timestamp):
        raise _Stuck("unexpected extension type")
    return value


def _text(value: bytes) -> str:
    return value.decode("utf-8", "backslashreplace")
