"""Sans-IO decoding of HTTP ingestion bodies into :class:`ingest.batch.Batch` objects.

Two wire formats, both pure functions of (body, content type, content
encoding, query) with no sockets and no aiohttp:

* :func:`decode_in_http` — what fluentd's ``in_http`` accepts and what
  fluentd's and Fluent Bit's ``out_http`` send in each of their formats:
  ``application/json`` (an object, an array of them, or objects back to
  back), ``application/x-ndjson``, ``application/msgpack`` /
  ``application/x-msgpack`` (a map, an array of maps, concatenated maps, or
  ``[time, record]`` events), ``text/tab-separated-values`` as LTSV, and
  the ``json=`` / ``ndjson=`` / ``msgpack=`` fields of
  ``application/x-www-form-urlencoded`` and ``multipart/form-data`` bodies
  or of the query string.
* :func:`decode_wendelin` — what fluent-plugin-wendelin posts to
  ``.../ingest?reference=<tag>``: a raw msgpack stream of ``[time, record]``
  items (or the old urlencoded ``data_chunk=`` field).

:func:`decompress` undoes ``Content-Encoding`` (gzip, deflate, zstd) with a
limit on the decompressed size.

Contract: every function here either returns or raises a subclass of
:class:`connectors.http.errors.HttpError` (400, 413 or 415) whose message
says what to fix; nothing else escapes (the fuzz tests hold it to that).
Records that are not maps are *kept* in the batch (fluentd drops them
silently); ingest quarantines them with their arrival bytes, which
``Batch.raw(i)`` returns: the NDJSON line, the JSON array element's text, the
msgpack item's bytes. Text that is not UTF-8 (in a JSON string or a
msgpack str) is likewise kept, as a surrogate-escaped str, for ingest to
quarantine its record alone.

Event time (in_http): ``?time=`` (``0``: now) wins for every record; else the
time a msgpack event ``[time, record]`` gives its record (Fluent Bit's
``Format msgpack``); else the record's ``time`` field (``?time_key=<field>``
names another; a request from Fluent Bit, ``User-Agent: Fluent-Bit``,
defaults to ``date``, the key its JSON formats add), which is removed from
the record; else the arrival time. Each is read by windvane's one time rule,
:mod:`ingest.times` (epoch numbers by magnitude, ISO 8601 text, EventTime);
a time field that is not a time makes its record quarantined, verbatim, with
a reason naming the value (fluentd answers 400 for the whole request
instead). A null time field is no time: the record arrives now.

NDJSON: a line that is not JSON is quarantined verbatim with its line
number and the parser's message, and the other lines are stored; a body of
which no line is JSON is a 400. JSON is read as RFC 8259 has it
(:mod:`connectors.json_text`): ``NaN`` and ``Infinity`` are not JSON, and a
number's time is read from its text, exact to the nanosecond.
"""

from __future__ import annotations

import json
import re
import time as _time
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any, NamedTuple
from urllib.parse import parse_qsl

import msgpack

from windvane.ingest.batch import Batch
from windvane.ingest.times import NS as _NS
from windvane.ingest.times import not_a_time, time_ns

from ..json_text import JsonConstant, JsonReader, constant_error, skip_space
from .errors import BadRequest, PayloadTooLarge, UnsupportedEncoding

__all__ = [
    "FLUENT_BIT_AGENT",
    "FORM_FIELDS",
    "decode_in_http",
    "decode_wendelin",
    "decompress",
    "tag_for_path",
]

SOURCE = "http"
# in_http's precedence when several fields are present.
FORM_FIELDS = ("json", "ndjson", "msgpack")
_ZEROS = "000000000"
_JSON_TYPES = ("application/json", "application/csp-report")
_NDJSON_TYPES = ("application/x-ndjson", "application/ndjson")
_MSGPACK_TYPES = ("application/msgpack", "application/x-msgpack")
_FORM = "application/x-www-form-urlencoded"
_MULTIPART = "multipart/form-data"
_SUPPORTED = "application/json, application/x-ndjson, application/msgpack, application/x-msgpack, "
_SUPPORTED += f"text/tab-separated-values (LTSV), {_FORM} or {_MULTIPART} with a json=, ndjson= or msgpack= field"

_TSV_TYPES = ("text/tab-separated-values",)
#: User-Agent prefix of Fluent Bit, whose JSON formats carry the event time in a ``date`` key (json_date_key).
FLUENT_BIT_AGENT = "Fluent-Bit"

_JSONDecodeError = json.JSONDecodeError


class _Decoded(NamedTuple):
    """A body's records, each one's bytes as it arrived, and what the body itself says of their times."""

    records: list[Any]
    raw: Callable[[int], bytes]
    #: Per record, the time the body gave it outside the record (None: none), or None for no such times.
    times: list[int | None] | None = None
    #: Records the body holds but that are not records (an NDJSON line that is not JSON): index -> why.
    faults: dict[int, str] | None = None
    #: The text a JSON body wrote a float as (:meth:`connectors.json_text.JsonReader.text`), for times read from it.
    number_text: Callable[[Any], str | None] | None = None


# ---------------------------------------------------------------- times


def _query_time(query: Mapping[str, str], now_ns: int) -> int | None:
    """The ``?time=`` of the query in ns by :func:`ingest.times.time_ns`, ``now_ns`` for ``time=0`` like in_http, or None."""
    text = query.get("time")
    if text is None:
        return None
    ns = time_ns(text)
    if ns is None:
        raise BadRequest(
            "bad_time",
            f"the time query parameter must be Unix seconds such as 1700000000.5 or ISO 8601, not {text[:40]!r}",
        )
    return now_ns if ns == 0 else ns


def _take_times(
    records: list[Any], fixed_ns: int | None, now_ns: int, key: str, decoded: _Decoded
) -> tuple[list[int], dict[int, str]]:
    """One time per record, removing the ``key`` field (str or bin) it was read from, and the faults.

    ``?time=`` fixes them all; else the time the body gave the record
    (Fluent Bit's ``[[time, metadata], record]``); else the record's
    ``key`` field, read by :func:`ingest.times.time_ns`; else ``now_ns``.
    The faults are the body's own (:attr:`_Decoded.faults`) and, index ->
    :func:`ingest.times.not_a_time`, the records whose ``key`` is not a time.
    """
    faults = dict(decoded.faults or {})
    if fixed_ns is not None:
        return [fixed_ns] * len(records), faults
    bkey = key.encode("utf-8", "surrogateescape")
    given, number_text = decoded.times, decoded.number_text
    times: list[int] = []
    append = times.append
    for i, rec in enumerate(records):
        given_ns = None if given is None else given[i]
        if given_ns is not None:
            append(given_ns)
            continue
        if type(rec) is dict:
            name = key if key in rec else bkey if bkey in rec else None
            if name is not None:
                t = sent = rec.pop(name)
                if type(sent) is float:
                    # The number as the body wrote it, else the float's shortest text: exact either way.
                    text = (number_text and number_text(sent)) or repr(sent)
                    ip, _, fp = text.partition(".")
                    # Inline fast path for epoch seconds: no call and no Decimal per record.
                    if 0.0 <= sent < 1e11 and len(fp) <= 9 and ip.isdigit() and fp.isdigit():
                        append(int(ip) * _NS + int(fp + _ZEROS[len(fp) :]))
                        continue
                    t = Decimal(text)
                ns = now_ns if t is None else time_ns(t)
                if ns is None:
                    rec[name] = sent  # kept: the record is quarantined as it came
                    faults[i] = not_a_time(sent)
                    ns = now_ns
                append(ns)
                continue
        append(now_ns)
    return times, faults


# ---------------------------------------------------------------- content encoding


def decompress(body: bytes, content_encoding: str | None, limit: int) -> bytes:
    """``body`` with its ``Content-Encoding`` undone (codings applied in order, undone in reverse).

    gzip (also concatenated members, and ``x-gzip``), deflate (zlib-wrapped
    as RFC 9110 says, or raw as some clients send), zstd (several frames
    allowed) and identity. Raises :class:`UnsupportedEncoding` for any other
    coding, :class:`PayloadTooLarge` past ``limit`` decompressed bytes (checked
    while decompressing, so a bomb never fills memory), :class:`BadRequest`
    for corrupt or truncated data.
    """
    if not content_encoding:
        return body
    codings = [c.strip().lower() for c in content_encoding.split(",") if c.strip()]
    for coding in reversed(codings):
        if coding == "identity":
            continue
        if coding in ("gzip", "x-gzip"):
            body = _inflate(body, 31, "gzip", limit)
        elif coding == "deflate":
            # A zlib header: CM=8 and the header checksum; anything else is raw deflate.
            zlib_wrapped = len(body) >= 2 and body[0] & 0x0F == 8 and ((body[0] << 8) | body[1]) % 31 == 0
            body = _inflate(body, 15 if zlib_wrapped else -15, "deflate", limit)
        elif coding == "zstd":
            body = _unzstd(body, limit)
        else:
            raise UnsupportedEncoding(
                "unsupported_encoding",
                f"Content-Encoding {coding!r} is not supported; send gzip, deflate, zstd or identity",
            )
    return body


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        "decompressed_too_large",
        f"the body decompresses to more than {limit} bytes (the decompressed size limit); send smaller requests",
    )


def _inflate(data: bytes, wbits: int, name: str, limit: int) -> bytes:
    out: list[bytes] = []
    total = 0
    try:
        while True:
            d = zlib.decompressobj(wbits)
            buf = data
            while not d.eof:
                chunk = d.decompress(buf, limit + 1 - total)
                total += len(chunk)
                if total > limit:
                    raise _too_large(limit)
                out.append(chunk)
                buf = d.unconsumed_tail
                if not chunk and not buf:
                    break  # all input consumed, no output pending: the stream stops short
            if not d.eof:
                raise BadRequest("truncated_body", f"the {name} body is truncated: its compressed stream ends early")
            data = d.unused_data
            if not data:
                break
            if name != "gzip" or data[:2] != b"\x1f\x8b":
                raise BadRequest("bad_encoding", f"{len(data)} bytes follow the end of the {name} stream")
    except zlib.error as exc:
        raise BadRequest("bad_encoding", f"the body is not valid {name} data: {exc}") from None
    return b"".join(out)


def _unzstd(data: bytes, limit: int) -> bytes:
    import zstandard  # imported here: only zstd bodies need it

    # zstandard's stream reader bounds the output but returns a truncated
    # frame's partial output without complaint: check the framing first.
    _check_zstd_frames(data)
    try:
        reader = zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True)
        out = reader.read(limit + 1)
    except zstandard.ZstdError as exc:
        raise BadRequest("bad_encoding", f"the body is not valid zstd data: {exc}") from None
    if len(out) > limit:
        raise _too_large(limit)
    return out


_ZSTD_MAGIC = 0xFD2FB528


def _check_zstd_frames(data: bytes) -> None:
    """Raise :class:`BadRequest` unless ``data`` is whole zstd frames (RFC 8878 framing, blocks not decoded)."""
    pos, n = 0, len(data)

    def need(count: int) -> None:
        if pos + count > n:
            raise BadRequest(
                "truncated_body", f"the zstd body is truncated: a frame needs byte {pos + count}, the body has {n}"
            )

    if not n:
        raise BadRequest("truncated_body", "the zstd body is empty")
    while pos < n:
        need(4)
        magic = int.from_bytes(data[pos : pos + 4], "little")
        pos += 4
        if 0x184D2A50 <= magic <= 0x184D2A5F:  # a skippable frame
            need(4)
            size = int.from_bytes(data[pos : pos + 4], "little")
            pos += 4
            need(size)
            pos += size
            continue
        if magic != _ZSTD_MAGIC:
            raise BadRequest(
                "bad_encoding", f"the body is not valid zstd data: no frame magic number at byte {pos - 4}"
            )
        need(1)
        fhd = data[pos]
        pos += 1
        single_segment = fhd >> 5 & 1
        header = (0 if single_segment else 1) + (0, 1, 2, 4)[fhd & 3] + (single_segment, 2, 4, 8)[fhd >> 6]
        need(header)
        pos += header
        while True:
            need(3)
            block = int.from_bytes(data[pos : pos + 3], "little")
            pos += 3
            kind, size = block >> 1 & 3, block >> 3
            if kind == 3:
                raise BadRequest(
                    "bad_encoding", f"the body is not valid zstd data: reserved block type at byte {pos - 3}"
                )
            size = 1 if kind == 1 else size
            need(size)
            pos += size
            if block & 1:
                break
        if fhd >> 2 & 1:
            need(4)
            pos += 4


# ---------------------------------------------------------------- helpers


def tag_for_path(path: str) -> str:
    """The fluentd tag of a request path: ``/app/log`` -> ``app.log`` (Ruby ``split('/')`` drops trailing empties)."""
    parts = path.lstrip("/").split("/") if path.startswith("/") else path.split("/")
    while parts and not parts[-1]:
        parts.pop()
    return ".".join(parts)


def _media_type(content_type: str | None) -> tuple[str, dict[str, str]]:
    """``(type/subtype lowercased, {param: value})`` of a Content-Type header."""
    if not content_type:
        return "", {}
    head, *params = content_type.split(";")
    out = {}
    for param in params:
        key, sep, value = param.partition("=")
        if sep:
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1]
            out[key.strip().lower()] = value
    return head.strip().lower(), out


def _text(body: bytes) -> str:
    """``body`` as text; bytes that are not UTF-8 become surrogate escapes.

    Inside a JSON string they reach ingest, which quarantines just that
    record (a chunk of a client's log must not be refused for one bad line);
    anywhere else they make the body invalid JSON.
    """
    text = body.decode("utf-8", "surrogateescape")
    return text[1:] if text.startswith("\ufeff") else text


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _parse_form(body: bytes) -> dict[str, bytes]:
    """Fields of an urlencoded body as exact bytes (latin-1 round-trips every percent-escape)."""
    try:
        pairs = parse_qsl(body.decode("latin-1"), keep_blank_values=True, encoding="latin-1", errors="strict")
    except ValueError as exc:
        raise BadRequest("bad_form", f"the urlencoded body is malformed: {exc}") from None
    return {k: v.encode("latin-1") for k, v in pairs}


_DISPOSITION_NAME = re.compile(rb'(?i)content-disposition:[^\r\n]*?\bname="([^"]*)"')


def _parse_multipart(body: bytes, params: Mapping[str, str]) -> dict[str, bytes]:
    """Fields of a ``multipart/form-data`` body (RFC 7578), each part's content verbatim."""
    boundary = params.get("boundary")
    if not boundary:
        raise BadRequest("bad_multipart", "multipart/form-data without a boundary= parameter in Content-Type")
    delimiter = b"\r\n--" + boundary.encode("latin-1", "replace")
    pieces = (b"\r\n" + body).split(delimiter)
    if len(pieces) < 2:
        raise BadRequest("bad_multipart", f"the multipart body never contains its boundary {boundary!r}")
    fields: dict[str, bytes] = {}
    for piece in pieces[1:]:
        if piece.startswith(b"--"):
            return fields
        headers, sep, content = piece.partition(b"\r\n\r\n")
        if not sep:
            raise BadRequest("bad_multipart", "a multipart part has no blank line between its headers and its content")
        match = _DISPOSITION_NAME.search(headers)
        if match:
            fields.setdefault(match.group(1).decode("latin-1"), content)
    raise BadRequest("bad_multipart", f"the multipart body ends without its closing boundary --{boundary}--")


# ---------------------------------------------------------------- JSON / NDJSON / msgpack


def _json_error(exc: _JSONDecodeError, what: str) -> BadRequest:
    return BadRequest("bad_json", f"{what} is not valid JSON: line {exc.lineno}, column {exc.colno}: {exc.msg}")


def _decode_json(body: bytes) -> _Decoded:
    """An object (one record), an array (its elements are records), or objects back to back.

    The last is Fluent Bit's ``Format json_stream``, which it labels
    ``application/json``: values one after another, with or without
    whitespace between them.
    """
    text = _text(body)
    reader = JsonReader()
    try:
        doc = reader.loads(text)
    except _JSONDecodeError as exc:
        if exc.msg != "Extra data":
            raise _json_error(exc, "the body") from None
        return _decode_json_stream(text, reader)
    except RecursionError:
        raise BadRequest("bad_json", "the JSON body nests too deeply") from None
    if type(doc) is not list:
        return _Decoded([doc], lambda i: body, number_text=reader.texts())
    spans: list[tuple[int, int]] = []

    def raw(i: int) -> bytes:
        # Element offsets cost a second parse: computed only when a rejected record needs them.
        if not spans:
            spans.extend(_json_array_spans(text))
        start, end = spans[i]
        return _bytes(text[start:end])

    return _Decoded(doc, raw, number_text=reader.texts())


def _decode_json_stream(text: str, reader: JsonReader) -> _Decoded:
    decode = reader.raw_decode
    records: list[Any] = []
    spans: list[tuple[int, int]] = []
    i, n = skip_space(text, 0), len(text)
    while i < n:
        try:
            obj, end = decode(text, i)
        except _JSONDecodeError as exc:
            raise _json_error(exc, "the body") from None
        except RecursionError:
            raise BadRequest("bad_json", f"the JSON value at character {i} of the body nests too deeply") from None
        records.append(obj)
        spans.append((i, end))
        i = skip_space(text, end)
    return _Decoded(records, lambda k: _bytes(text[spans[k][0] : spans[k][1]]), number_text=reader.texts())


def _json_array_spans(text: str) -> list[tuple[int, int]]:
    decoder = json.JSONDecoder()
    i = skip_space(text, 0) + 1  # past "["
    i = skip_space(text, i)
    spans: list[tuple[int, int]] = []
    if text[i] == "]":
        return spans
    while True:
        _, end = decoder.raw_decode(text, i)
        spans.append((i, end))
        i = skip_space(text, end)
        if text[i] != ",":
            return spans
        i = skip_space(text, i + 1)


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of the non-blank lines of ``text``, split on ``\\r?\\n``."""
    for lineno, line in enumerate(text.split("\n"), 1):
        if line.endswith("\r"):
            line = line[:-1]
        if line:
            yield lineno, line


def _decode_ndjson(body: bytes) -> _Decoded:
    """One JSON value per line, split on ``\\r?\\n``; blank lines are skipped.

    A line that is not JSON is kept as its text, with a fault naming its line
    number and the parser's message (ingest quarantines it verbatim); a body
    none of whose lines is JSON is a :class:`BadRequest` naming the first.
    """
    text = _text(body)
    records: list[Any] = []
    lines: list[str] = []
    faults: dict[int, str] = {}
    append, keep = records.append, lines.append
    reader = JsonReader()
    loads, scan = reader.loads, reader.scan_once
    for lineno, line in _lines(text):
        try:
            # The C scanner straight away: json.loads adds three Python calls and two regex matches per line.
            obj, end = scan(line, 0)
            if end != len(line) and not line[end:].isspace():
                obj = loads(line)  # raises "Extra data" with its column
        except StopIteration:
            # Leading whitespace, a blank line or an error: json.loads tells which, with the column.
            if line.isspace():
                continue
            try:
                obj = loads(line)
            except (_JSONDecodeError, RecursionError) as exc:
                obj = faults[len(records)] = _line_fault(exc, lineno)
        except (_JSONDecodeError, RecursionError) as exc:
            obj = faults[len(records)] = _line_fault(exc, lineno)
        except JsonConstant:
            obj = faults[len(records)] = _line_fault(constant_error(line), lineno)
        append(obj)
        keep(line)
    if faults and len(faults) == len(records):
        raise BadRequest("bad_json", f"the NDJSON body has no valid JSON line: {faults[0]}")
    return _Decoded(records, lambda i: _bytes(lines[i]), faults=faults or None, number_text=reader.texts())


def _line_fault(exc: json.JSONDecodeError | RecursionError, lineno: int) -> str:
    """Why line ``lineno`` of an NDJSON body is not a record."""
    if isinstance(exc, RecursionError):
        return f"line {lineno} of the NDJSON body nests too deeply"
    return f"line {lineno} of the NDJSON body is not valid JSON: column {exc.colno}: {exc.msg}"


def _decode_ltsv(body: bytes) -> _Decoded:
    """LTSV (fluentd's ``<format> @type ltsv``): one record per line, ``label:value`` fields split by tabs.

    Values are text. A line with a field that has no ``:`` is not LTSV: it
    is kept as a text record (ingest quarantines it with the line), so a
    plain TSV body's lines are all quarantined rather than misread.
    """
    text = _text(body)
    records: list[Any] = []
    lines: list[str] = []
    for _, line in _lines(text):
        record: Any = {}
        for field in line.split("\t"):
            label, sep, value = field.partition(":")
            if not sep:
                record = line
                break
            record[label] = value
        records.append(record)
        lines.append(line)
    return _Decoded(records, lambda i: _bytes(lines[i]))


def _unpack_stream(data: bytes, what: str) -> tuple[list[Any], list[int]]:
    """The concatenated msgpack objects of ``data`` and their start offsets (plus the end)."""
    # A str that is not UTF-8 becomes a surrogate-escaped str, as over Forward: ingest quarantines its record.
    unpacker = msgpack.Unpacker(
        raw=False, strict_map_key=False, unicode_errors="surrogateescape", max_buffer_size=max(len(data), 1)
    )
    unpacker.feed(data)
    objs: list[Any] = []
    offsets = [0]
    try:
        for obj in unpacker:
            objs.append(obj)
            offsets.append(unpacker.tell())
    except (
        ValueError,
        TypeError,
        msgpack.UnpackException,
        RecursionError,
        MemoryError,
    ) as exc:  # TypeError: a map key that is a map
        raise BadRequest("bad_msgpack", f"{what} is not valid msgpack after byte {offsets[-1]}: {exc}") from None
    if offsets[-1] != len(data):
        raise BadRequest(
            "truncated_body",
            f"{what} is truncated: a msgpack object starts at byte {offsets[-1]} and the body ends at byte {len(data)}",
        )
    return objs, offsets


def _is_event_time(value: Any) -> bool:
    """Whether ``value`` is a fluentd EventTime (msgpack ext 0): an event's time, read as one or not."""
    return type(value) is msgpack.ExtType and value.code == 0


def _event_pair(obj: Any) -> tuple[int | None, Any, Any] | None:
    """(time, record, the time as sent) of a ``[time, map]`` or Fluent Bit ``[[time, metadata], map]`` item,
    else None; the time is None for an EventTime that is not a time (its record is quarantined)."""
    if type(obj) is not list or len(obj) != 2 or type(obj[1]) is not dict:
        return None
    head = obj[0]
    if type(head) is list and len(head) == 2 and type(head[1]) is dict:
        head = head[0]
    ns = time_ns(head)
    return None if ns is None and not _is_event_time(head) else (ns, obj[1], head)


def _decode_msgpack(body: bytes) -> _Decoded:
    """Maps, arrays of maps (flattened one level), and ``[time, map]`` events, back to back.

    fluentd's ``out_http`` with ``<format> @type msgpack`` sends maps;
    Fluent Bit's ``Format msgpack`` sends its events ``[[EventTime,
    metadata], record]``, whose time is the record's.
    """
    objs, offsets = _unpack_stream(body, "the msgpack body")
    if not any(type(o) is list for o in objs):
        return _Decoded(objs, lambda i: body[offsets[i] : offsets[i + 1]])
    records: list[Any] = []
    times: list[int | None] = []
    faults: dict[int, str] = {}
    # Per record: its (start, end) in body, or (array start, element index) for array elements.
    where: list[tuple[bool, int, int]] = []
    for n, obj in enumerate(objs):
        pair = _event_pair(obj)
        if type(obj) is list and pair is None:
            records.extend(obj)
            times.extend([None] * len(obj))
            where.extend((True, offsets[n], k) for k in range(len(obj)))
        else:
            if pair is not None and pair[0] is None:
                faults[len(records)] = not_a_time(pair[2])
            records.append(obj if pair is None else pair[1])
            times.append(None if pair is None else pair[0])
            where.append((False, offsets[n], offsets[n + 1]))
    element_spans: dict[int, list[tuple[int, int]]] = {}

    def raw(i: int) -> bytes:
        in_array, start, k = where[i]
        if not in_array:
            return body[start:k]
        if start not in element_spans:
            element_spans[start] = _msgpack_element_spans(body, start)
        a, b = element_spans[start][k]
        return body[a:b]

    return _Decoded(records, raw, times, faults or None)


def _msgpack_element_spans(body: bytes, start: int) -> list[tuple[int, int]]:
    unpacker = msgpack.Unpacker(max_buffer_size=max(len(body) - start, 1))
    unpacker.feed(body[start:])
    spans = []
    for _ in range(unpacker.read_array_header()):
        a = unpacker.tell()
        unpacker.skip()
        spans.append((start + a, start + unpacker.tell()))
    return spans


_DECODERS = {"json": _decode_json, "ndjson": _decode_ndjson, "msgpack": _decode_msgpack, "ltsv": _decode_ltsv}


# ---------------------------------------------------------------- the two wire formats


def decode_in_http(
    body: bytes,
    content_type: str | None,
    *,
    tag: str,
    query: Mapping[str, str] | None = None,
    now_ns: int | None = None,
    size: int | None = None,
) -> list[Batch]:
    """Decode an in_http request body (already decompressed) into one batch of ``tag``.

    ``query`` holds the query string's parameters (``time``, and ``json=`` /
    ``ndjson=`` / ``msgpack=`` which fluentd also reads from it; form body
    fields win over query fields; ``time_key``, the record field holding
    the event time, ``time`` unless given: Fluent Bit's is ``date``).
    ``size`` is the bytes the body arrived as (before decompression) for
    metrics; ``now_ns`` the arrival time. An empty JSON array gives no batch.
    """
    query = query or {}
    now = _time.time_ns() if now_ns is None else now_ns
    if not tag:
        raise BadRequest("missing_tag", "POST to /<tag path>, e.g. /app/log for tag app.log; the path is empty")
    fixed = _query_time(query, now)
    fields = _in_http_fields(body, content_type, query)
    for name in (*FORM_FIELDS, "ltsv"):
        if name in fields:
            data = fields[name]
            break
    else:
        if not body:
            raise BadRequest("empty_body", f"the request body is empty; send {_SUPPORTED}")
        raise BadRequest("missing_field", f"the form has no json=, ndjson= or msgpack= field; send {_SUPPORTED}")
    if not data or (name != "msgpack" and data.isspace()):
        raise BadRequest("empty_body", f"the {name} data is empty: send at least one record")
    decoded = _DECODERS[name](data)
    if not decoded.records:
        return []
    key = query.get("time_key") or "time"
    times, faults = _take_times(decoded.records, fixed, now, key, decoded)
    return [
        Batch(
            tag, times, decoded.records, decoded.raw, SOURCE, len(body) if size is None else size, faults=faults or None
        )
    ]


def _in_http_fields(body: bytes, content_type: str | None, query: Mapping[str, str]) -> dict[str, bytes]:
    """The data of an in_http request by format (``json``, ``ndjson``, ``msgpack``, ``ltsv``): the body's, by its
    Content-Type, or its form fields', over the query's; BadRequest for a Content-Type not understood."""
    media, params = _media_type(content_type)
    fields: dict[str, bytes] = {k: query[k].encode("utf-8", "surrogateescape") for k in FORM_FIELDS if k in query}
    if media in _JSON_TYPES:
        fields["json"] = body
    elif media in _NDJSON_TYPES:
        fields["ndjson"] = body
    elif media in _MSGPACK_TYPES:
        fields["msgpack"] = body
    elif media in _TSV_TYPES:
        fields["ltsv"] = body
    elif media == _FORM:
        fields.update((k, v) for k, v in _parse_form(body).items() if k in FORM_FIELDS)
    elif media == _MULTIPART:
        fields.update((k, v) for k, v in _parse_multipart(body, params).items() if k in FORM_FIELDS)
    elif media and not fields:
        raise BadRequest("unsupported_content_type", f"Content-Type {media!r} is not understood; send {_SUPPORTED}")
    elif not fields and body:
        raise BadRequest("unsupported_content_type", f"the request has no Content-Type; send {_SUPPORTED}")
    return fields


_FORM_START = re.compile(rb"[A-Za-z_][A-Za-z0-9_.%+-]*=")


def decode_wendelin(
    body: bytes,
    content_type: str | None,
    *,
    query: Mapping[str, str],
    now_ns: int | None = None,
    size: int | None = None,
) -> list[Batch]:
    """Decode a fluent-plugin-wendelin ``POST .../ingest?reference=<tag>`` body into one batch of the reference.

    The body is a msgpack stream of ``[time, record]`` items, time an int or
    float of seconds or an EventTime (ext 0, ``>II``); Fluent Bit's
    ``[[time, metadata], record]`` is accepted too. Older plugin versions
    send it urlencoded as the ``data_chunk`` field (Ruby's Net::HTTP labels
    even the raw body ``application/x-www-form-urlencoded``, so the body's
    first bytes decide). An item of any other shape is kept whole as a record
    arriving now, for ingest to quarantine (or, for a bare map, to accept).
    """
    now = _time.time_ns() if now_ns is None else now_ns
    tag = query.get("reference", "")
    if not tag:
        raise BadRequest(
            "missing_reference", "POST .../ingest?reference=<tag>: the reference query parameter is missing"
        )
    media, params = _media_type(content_type)
    data = body
    if media == _FORM and _FORM_START.match(body):
        data = _parse_form(body).get("data_chunk", b"")
    elif media == _MULTIPART:
        data = _parse_multipart(body, params).get("data_chunk", b"")
    if not data:
        raise BadRequest(
            "empty_body", "the body (or its data_chunk field) is empty: send a msgpack stream of [time, record]"
        )
    objs, offsets = _unpack_stream(data, "the data chunk")
    times, records, faults = _wendelin_events(objs, now)
    if not records:
        return []
    return [
        Batch(
            tag,
            times,
            records,
            lambda i: data[offsets[i] : offsets[i + 1]],
            SOURCE,
            len(body) if size is None else size,
            faults=faults or None,
        )
    ]


def _wendelin_events(objs: list[Any], now_ns: int) -> tuple[list[int], list[Any], dict[int, str]]:
    """The times and records of a wendelin stream's items: ``[time, record]`` or ``[[time, metadata], record]``;
    any other item is a record of its own, arriving at ``now_ns``. And the faults: index -> why, for the
    records whose EventTime is not a time."""
    times: list[int] = []
    records: list[Any] = []
    faults: dict[int, str] = {}
    for obj in objs:
        if type(obj) is list and len(obj) == 2:
            head = obj[0]
            ns = time_ns(head)
            if ns is None and type(head) is list and head:
                head = head[0]
                ns = time_ns(head)
            if ns is not None or _is_event_time(head):
                if ns is None:
                    faults[len(records)] = not_a_time(head)
                times.append(now_ns if ns is None else ns)
                records.append(obj[1])
                continue
        times.append(now_ns)
        records.append(obj)
    return times, records, faults


def count_events(batches: Sequence[Batch]) -> int:
    """Events in ``batches``."""
    return sum(len(b) for b in batches)
