"""PackedForward entries whose records hold msgpack bin names and text, decoded as their record type.

fluentd's worker packs every string it read as msgpack bin (it runs in
ASCII-8BIT). msgspec reads bin only as bytes, so such records do not
decode as a schema's record type (a struct, which wants str names and
text), and decoded as maps they cost a dict and a bytes object per name
per record. A bin header and a str header have the same layout: ``c4``,
``c5``, ``c6`` (bin8/16/32) and ``d9``, ``da``, ``db`` (str8/16/32) are
each followed by a length of 1, 2 or 4 bytes, then the bytes. So a copy of
the entries in which every bin header of the records' names and values is
its str twin decodes as the record type, its text checked as UTF-8 by
msgspec as any str is, and gives exactly what the same records sent as str
give.

The headers are found without a Python step per record: msgspec lists the
entries (each a :class:`msgspec.Raw`, checked to be whole msgpack values),
and numpy walks all of them at once, one step per token position: the
entry's time, the record's map header, then its names and values in turn.
Only flat records are read so (names and values that are scalars, nil,
str or bin, at most 15 fields: a fixmap, as a schema's records are); for
anything else :class:`BinAsStr` raises ValueError and the entries are
decoded as they are.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

_ENTRIES = msgspec.msgpack.Decoder(list[msgspec.Raw])
_PAD = 8  # zero bytes after the entries: a header's length field is read without a bounds check


def _token_tables(time: bool) -> tuple[np.ndarray, np.ndarray]:
    """By a token's first byte: its size before any length it carries (0: not read here), and how many bytes
    that length takes (0: none). ``time``: a Forward entry's time, which may also be an EventTime (ext 0)."""
    fixed = np.zeros(256, np.int64)
    length = np.zeros(256, np.int64)
    fixed[0x00:0x80] = 1  # positive fixint
    fixed[0xE0:0x100] = 1  # negative fixint
    fixed[[0xC0, 0xC2, 0xC3]] = 1  # nil, false, true
    fixed[0xA0:0xC0] = 1 + np.arange(32)  # fixstr
    for head, size in ((0xC4, 1), (0xC5, 2), (0xC6, 4), (0xD9, 1), (0xDA, 2), (0xDB, 4)):  # bin and str
        fixed[head], length[head] = 1 + size, size
    fixed[[0xCC, 0xD0]] = 2  # uint8, int8
    fixed[[0xCD, 0xD1]] = 3  # uint16, int16
    fixed[[0xCA, 0xCE, 0xD2]] = 5  # float32, uint32, int32
    fixed[[0xCB, 0xCF, 0xD3]] = 9  # float64, uint64, int64
    if time:
        fixed[0xD7] = 10  # fixext8: an EventTime
        fixed[0xC7], length[0xC7] = 3, 1  # ext8: an EventTime as some senders pack it
    return fixed, length


_FIXED, _LENGTH = _token_tables(time=False)
_TIME_FIXED, _TIME_LENGTH = _token_tables(time=True)
#: Each header byte as it is rewritten: bin8/16/32 to str8/16/32, the others as they are.
_AS_STR = np.arange(256, dtype=np.uint8)
_AS_STR[[0xC4, 0xC5, 0xC6]] = [0xD9, 0xDA, 0xDB]


def _sizes(buf: np.ndarray, at: np.ndarray, fixed: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first bytes of the tokens at ``at`` and their sizes (0 for a token not read here)."""
    heads = buf[at]
    sizes = fixed[heads]
    widths = length[heads]
    widest = int(widths.max())
    if widest:
        first = buf[at + 1].astype(np.int64)
        if widest == 1:  # the common case: names and text under 256 bytes
            return heads, sizes + first * widths
        second, third, fourth = (buf[at + k].astype(np.int64) for k in (2, 3, 4))
        carried = np.where(
            widths == 1,
            first,
            np.where(widths == 2, first << 8 | second, first << 24 | second << 16 | third << 8 | fourth),
        )
        sizes = sizes + np.where(widths > 0, carried, 0)
    return heads, sizes


def as_str(entries: Any) -> memoryview:
    """A copy of ``entries`` (an array header, then PackedForward ``[time, record]`` entries) with every bin
    header of the records' names and values turned into its str twin; ValueError if they are not entries of
    flat records (see the module docstring)."""
    data = memoryview(entries).cast("B")
    buf = np.zeros(len(data) + _PAD, np.uint8)
    buf[: len(data)] = np.frombuffer(data, np.uint8)
    view = buf.data[: len(data)]
    try:
        lengths = np.fromiter(map(len, _ENTRIES.decode(view)), np.int64)
    except (msgspec.MsgspecError, RecursionError) as exc:  # nesting too deep for msgspec is not a flat record
        raise ValueError(f"not msgpack entries: {exc}") from None
    if not len(lengths):
        return view
    ends = np.cumsum(lengths) + (len(data) - int(lengths.sum()))  # after the array header
    at = ends - lengths
    if (buf[at] != 0x92).any():
        raise ValueError("an entry is not a [time, record] array")
    _, sizes = _sizes(buf, at + 1, _TIME_FIXED, _TIME_LENGTH)
    if not sizes.all():
        raise ValueError("an entry's time is neither a number nor an EventTime")
    at += 1 + sizes
    maps = buf[at]
    if ((maps & 0xF0) != 0x80).any():
        raise ValueError("a record is not a map of at most 15 fields")
    tokens = (maps & 0x0F).astype(np.int64) * 2  # a name and a value per field
    at += 1
    alike = tokens.min() == tokens.max()
    for step in range(int(tokens.max())):
        live = None if alike else np.flatnonzero(tokens > step)
        here = at if live is None else at[live]
        heads, sizes = _sizes(buf, here, _FIXED, _LENGTH)
        if not sizes.all():
            raise ValueError("a record holds a value that is not a scalar, str or bin")
        buf[here] = _AS_STR[heads]
        if live is None:
            at += sizes
        else:
            at[live] = here + sizes
    if (at != ends).any():
        raise ValueError("an entry holds more than its time and record")
    return view


class BinAsStr:
    """A decoder of framed entries (see :func:`as_str`) by ``decoder`` once their bin is str: ValueError (or
    msgspec's error) if they are not entries of flat records or do not then decode."""

    def __init__(self, decoder: msgspec.msgpack.Decoder[Any]) -> None:
        self.decoder = decoder

    def decode(self, entries: Any) -> Any:
        return self.decoder.decode(as_str(entries))


def takes_text_only(record_type: type) -> bool:
    """Whether ``record_type`` (a struct) has no field that takes bytes: rewritten bin would not fit one."""
    info = msgspec.inspect.type_info(record_type)
    if not isinstance(info, msgspec.inspect.StructType):
        return False
    kinds = [f.type.types if isinstance(f.type, msgspec.inspect.UnionType) else (f.type,) for f in info.fields]
    return not any(isinstance(k, (msgspec.inspect.BytesType, msgspec.inspect.AnyType)) for ks in kinds for k in ks)
