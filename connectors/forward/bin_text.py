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

The copy is made and walked in C (``_bin_text.c``), a token at a time,
the entry's time, the record's map header, then its names and values in
turn. Only flat records are read so (names and values that are scalars,
nil, str or bin, at most 15 fields: a fixmap, as a schema's records are);
for anything else :func:`as_str` raises ValueError and the entries are
decoded as they are.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ._bin_text import as_str


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
