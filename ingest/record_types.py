"""Record types: msgspec types mirroring schemas, so a connector can decode and check records in one C pass.

A connector that decodes msgpack or JSON may ask for the record type of a
tag (:attr:`ingest.batch.Undecoded.typed`). A record decodes as that type
exactly when it fits the schema as it stands: every required field present
and not nil, every value storable in its column as it is, and no undeclared
field unless the schema drops them. If every record of a batch decodes, the
connector hands the records over as instances of the type
(:attr:`ingest.batch.Batch.typed`) and ingest takes the columns without
checking them again; if any record does not, the connector decodes the
batch as usual and ingest checks it record by record, naming the faults.

The type is an accelerator only: the values it yields are the ones a plain
decode would have given (an integer in a float field stays an integer, nil
and absent both read as None), so a batch is stored the same either way.

A vibration record's type takes its block of samples as a ``memoryview``
of the bytes it arrived in (msgpack bin only) and its sample rate if it
carries one, and ignores any other field, as the plain path does: the
block is not copied to be decoded. Its frames and rate are still checked
by ingest (:func:`ingest.columns.batch_columns`), which names the faults.

Records whose field names arrive as msgpack bin (fluentd's worker runs in
ASCII-8BIT and packs all its text so) do not decode as a struct as they
are: msgspec reads bin only as bytes. A connector may read their bin as
str first (the Forward connector does, where no field takes bytes) and
decode them as the type. A map type also has :data:`BinKeyedRecord` beside
it (:attr:`FieldsRecord.bin_keyed`): maps of bin names to plain values,
which msgspec decodes in C where the struct does not fit, and which ingest
turns into columns a column at a time, bin text checked as UTF-8 in C; a
batch with any record that does not fit as it is takes the checked path,
which names the fault. Maps cost more than structs (a dict and its names
per record).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from operator import attrgetter
from typing import Annotated, Any, ClassVar

import msgspec
import numpy as np

from .schema import Field, Schema, SchemaSet, Vibration

#: A record of a map type as it decodes where its names are msgpack bin: bin names to bin text and plain
#: values (a str value does not fit: msgspec takes one of str and bytes in a union; the checked path reads it).
BinKeyedRecord = dict[bytes, bytes | int | float | bool | None]


class FieldsRecord(msgspec.Struct, gc=False):
    """The base of the record types of schemas whose records are maps of fields (not blocks).

    ``bin_keyed`` is what such records decode as where their names are msgpack bin; a connector reads it
    from the type the sink gives (:meth:`ingest.batch.Sink.record_type`), as ``getattr(t, "bin_keyed", None)``.
    """

    bin_keyed: ClassVar[Any] = BinKeyedRecord


def _value_type(f: Field) -> Any:
    if f.is_float:
        kind: Any = int | float  # an integer stays one, as a plain decode leaves it
    elif f.is_int:
        info = np.iinfo(f.dtype)
        kind = Annotated[int, msgspec.Meta(ge=int(info.min), le=int(info.max))]
    elif f.dtype == "bool":
        kind = bool
    elif f.dtype == "str":
        kind = str
    else:  # bytes: msgpack bin only (a str there takes the checked path, which accepts and encodes it)
        kind = bytes
    return kind if f.required else kind | None


@functools.lru_cache(maxsize=256)
def record_type(schema: Schema) -> type[msgspec.Struct] | None:
    """The msgspec type of the records ``schema`` takes as they are (a vibration schema's: its blocks), or None."""
    if schema.holds_blocks:  # blocks, decoded on their own path; the other kinds' records are maps of fields
        return None if schema.vibration is None else _block_type(schema.name, schema.vibration)
    # Attribute names are positional (field names need not be identifiers); ``rename`` maps them to the keys.
    fields = [
        (f"f{i}", _value_type(f)) if f.required else (f"f{i}", _value_type(f), None)
        for i, f in enumerate(schema.fields)
    ]
    fields.sort(key=len)  # msgspec wants the fields without a default first
    return msgspec.defstruct(
        f"Record_{schema.name}",
        fields,
        bases=(FieldsRecord,),
        rename={f"f{i}": f.name for i, f in enumerate(schema.fields)},
        forbid_unknown_fields=schema.extra != "drop",  # "keep" and "reject" need the checked path
        gc=False,  # instances hold no containers, so they need no cycle tracking
    )


def _block_type(name: str, v: Vibration) -> type[msgspec.Struct] | None:
    if v.rate_field == v.samples_field:
        return None  # the plain path tells the sender what is wrong with that
    return msgspec.defstruct(
        f"Block_{name}",
        [("samples", memoryview), ("rate", int | float | None, None)],
        rename={"samples": v.samples_field, "rate": v.rate_field},
        gc=False,
    )


def record_type_for(schemas: SchemaSet, tag: str) -> type[msgspec.Struct] | None:
    """The record type of the schema ``tag`` is routed to, or None if there is none."""
    schema = schemas.for_tag(tag)
    return None if schema is None else record_type(schema)


def field_values(schema: Schema, records: Sequence[Any]) -> list[list[Any]]:
    """Each declared field's values (None where nil or absent), in schema order, from records of :func:`record_type`."""
    return [list(map(attrgetter(f"f{i}"), records)) for i in range(len(schema.fields))]
