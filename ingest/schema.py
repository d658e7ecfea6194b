"""Stream schemas: one TOML file per kind of stream, loaded from a directory at start.

A schema says which tags it takes (fluentd match patterns), what kind of
stream they become, and the fields of a record. See ``schemas/README.md``
for the format; :func:`load_schemas` raises :class:`SchemaError` naming the
file and the key that is wrong.
"""

from __future__ import annotations

import dataclasses
import json
import re
import tomllib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import msgspec
import numpy as np

from windvane.arrays import ColumnError, column_key

from .errors import SchemaError
from .times import duration_seconds
from .toml_types import convert


class Kind(StrEnum):
    """What the streams of a schema hold; a schema file names it (``kind = "vibration"``).

    Code asks the kind (or the schema) what it needs rather than comparing
    names, so that a kind's behaviour is stated here once.
    """

    SENSOR = "sensor"
    VIBRATION = "vibration"
    LOG = "log"

    @property
    def holds_blocks(self) -> bool:
        """Whether a record is a block of samples (many rows), not a row of fields."""
        return self is Kind.VIBRATION

    @property
    def default_codec(self) -> str | None:
        """The codec of the number columns when the schema names none: lz4 for blocks (see ingest.streams)."""
        return "lz4" if self.holds_blocks else None

    @classmethod
    def of_table(cls, has_text: bool) -> Kind:
        """The kind of a table of fields: a log if some field holds text, else a sensor."""
        return cls.LOG if has_text else cls.SENSOR


#: What a schema does with a record's undeclared fields.
ExtraPolicy = Literal["keep", "drop", "reject"]
NumericDtype = Literal[
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64"
]
#: Field dtypes a schema may name: numpy's numeric names, "str" and "bytes".
FieldDtype = Literal[NumericDtype, "str", "bytes"]
VibrationDtype = Literal["int16", "int32", "float32", "float64"]
#: What a schema's ``codec`` may name for its number columns (see schemas/README.md).
Codec = Literal["blosc", "lz4", "zstd", "none"]

#: The choices as tuples, for code that checks a value it did not read from a schema file.
KINDS: tuple[str, ...] = tuple(k.value for k in Kind)
NUMERIC_DTYPES: tuple[str, ...] = get_args(NumericDtype)
VIBRATION_DTYPES: tuple[str, ...] = get_args(VibrationDtype)
#: Column names the stream layout itself uses.
RESERVED = ("time", "extra")


@dataclass(frozen=True)
class Field:
    """One field of a record: stored as the column of the same name."""

    name: str
    dtype: str
    unit: str = ""
    required: bool = False
    fill: Any = None  # stored when an optional field is missing
    description: str = ""

    @property
    def is_float(self) -> bool:
        return self.dtype.startswith("float")

    @property
    def is_int(self) -> bool:
        return self.dtype.startswith(("int", "uint"))


@dataclass(frozen=True)
class Vibration:
    """How a vibration record's block of samples becomes rows of a 2-D ``samples`` column."""

    channels: int
    dtype: str = "float32"
    sample_rate: float | None = None  # None: each record carries it in ``rate_field``
    unit: str = ""
    samples_field: str = "samples"
    rate_field: str = "sample_rate"


@dataclass(frozen=True)
class Schema:
    """What the streams of matching tags hold."""

    name: str
    kind: Kind  # a kind's name is taken too, and made a Kind
    tags: tuple[str, ...]
    fields: tuple[Field, ...] = ()
    extra: str = "keep"
    chunk_rows: int | None = None  # None: sized by bytes from the columns (arrays.chunk_rows_for)
    codec: str | None = None
    vibration: Vibration | None = None
    description: str = ""
    path: str = ""
    _patterns: tuple[re.Pattern[str], ...] = field(default=(), compare=False, repr=False)
    retention: float | None = None  # seconds of rows `windvane store pack --schemas` keeps; None: all
    # its [parse] table: the fluentd <parse> section `windvane tail`/`import` read its logs with (checked there)
    parse: dict[str, Any] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", Kind(self.kind))

    @property
    def holds_blocks(self) -> bool:
        """Whether its records are blocks of samples (see :attr:`Kind.holds_blocks`)."""
        return self.kind.holds_blocks

    def __hash__(self) -> int:
        # Schemas key caches that every event asks: hash the fields once, not at each question.
        known = self.__dict__.get("_hash")
        if known is None:
            known = hash(tuple(getattr(self, f.name) for f in dataclasses.fields(self) if f.compare))
            object.__setattr__(self, "_hash", known)
        return known

    def __getstate__(self) -> dict[str, Any]:
        # Not the cached hash: str hashes differ between processes (schemas are sent to workers).
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def matches(self, tag: str) -> bool:
        return any(p.fullmatch(tag) for p in self._patterns)

    def field(self, name: str) -> Field | None:
        return next((f for f in self.fields if f.name == name), None)


def tag_pattern(pattern: str) -> re.Pattern[str]:
    """A fluentd ``<match>`` pattern as a regex.

    ``*`` matches one tag part, ``**`` zero or more parts (``a.**`` matches
    ``a`` too), ``{x,y}`` any of the alternatives; everything else literally.
    """
    if not pattern or pattern != pattern.strip():
        raise ValueError(f"tag pattern {pattern!r} is empty or has surrounding spaces")
    out: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**", i):
            # "a.**" also matches "a": swallow the dot before "**" into the optional group.
            if out and out[-1] == r"\.":
                out[-1] = r"(?:\..*)?"
            else:
                out.append(r"(?:.*)")
                if pattern.startswith("**.", i):
                    out[-1] = r"(?:.*\.)?"
                    i += 1
            i += 2
        elif c == "*":
            out.append(r"[^.]+")
            i += 1
        elif c == "{":
            end = pattern.find("}", i)
            if end < 0:
                raise ValueError(f"tag pattern {pattern!r} has an unclosed '{{'")
            alternatives = pattern[i + 1 : end].split(",")
            out.append("(?:" + "|".join(tag_pattern(a).pattern for a in alternatives) + ")")
            i = end + 1
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("".join(out))


class FieldTable(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A ``[[fields]]`` entry of a schema file as written (:class:`Field` is what it becomes)."""

    name: str
    dtype: FieldDtype
    unit: str = ""
    required: bool = False
    fill: Any = None
    description: str = ""


class VibrationTable(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A schema file's ``[vibration]`` table as written (:class:`Vibration` is what it becomes)."""

    channels: Annotated[int, msgspec.Meta(ge=1, description="channels must be at least 1")]
    dtype: VibrationDtype = "float32"
    sample_rate: (
        Annotated[float, msgspec.Meta(gt=0, description="sample_rate must be positive (samples per second)")] | None
    ) = None
    unit: str = ""
    samples_field: str = "samples"
    rate_field: str = "sample_rate"


class SchemaFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A schema file as written: the format of schemas/README.md, each key with the type it takes.

    :func:`parse_schema` checks what types cannot say (a field name a store
    key can hold, a fill of the field's dtype, [vibration] for the vibration
    kind only) and makes it a :class:`Schema`.
    """

    kind: Kind
    tags: Annotated[
        list[str],
        msgspec.Meta(
            min_length=1, description="'tags' must be a non-empty list of tag patterns such as \"turbine.*.scada\""
        ),
    ]
    description: str = ""
    extra: ExtraPolicy = "keep"
    chunk_rows: Annotated[int, msgspec.Meta(ge=1, description="chunk_rows must be at least 1")] | None = None
    codec: Codec | None = None
    fields: list[FieldTable] = msgspec.field(default_factory=list)
    vibration: VibrationTable | None = None
    retention: str | None = None
    # the fluentd <parse> section `windvane tail`/`import` read its logs with (checked there)
    parse: dict[str, Any] | None = None


def _field(table: FieldTable, where: str) -> Field:
    name, dtype, required, fill = table.name, table.dtype, table.required, table.fill
    if not name.strip() or not name.isprintable() or name in RESERVED:
        raise SchemaError(
            f"{where}: a field name is printable text, not blank and not one of {', '.join(RESERVED)} "
            "(a name a store key cannot hold is stored escaped: see arrays.column_key)"
        )
    try:
        column_key(name)
    except ColumnError as exc:
        raise SchemaError(f"{where}: {exc}") from None
    if fill is not None and required:
        raise SchemaError(f"{where}: a required field has no use for 'fill'")
    if not required:
        if fill is None and (dtype.startswith(("int", "uint")) or dtype == "bool"):
            # A missing integer has no natural marker (floats have NaN, strings ""):
            # make the user pick one rather than store a silent 0.
            raise SchemaError(
                f"{where}: an optional {dtype} field needs 'fill', the value stored when it is missing "
                "(or make it required = true)"
            )
        if fill is not None:
            try:
                fill = _coerce_fill(fill, dtype)
            except (TypeError, ValueError, OverflowError) as exc:
                raise SchemaError(f"{where}: fill {fill!r} is not a {dtype}: {exc}") from exc
    return Field(name, dtype, table.unit, required, fill, table.description)


def _coerce_fill(fill: Any, dtype: str) -> Any:
    if dtype == "str":
        if not isinstance(fill, str):
            raise TypeError("expected a string")
        return fill
    if dtype == "bytes":
        if not isinstance(fill, str):
            raise TypeError("expected a string (stored as its UTF-8 bytes)")
        return fill.encode()
    if dtype == "bool":
        if not isinstance(fill, bool):
            raise TypeError("expected true or false")
        return fill
    if isinstance(fill, bool):
        raise TypeError("expected a number")
    value = np.array(fill).astype(dtype)
    if value.item() != fill and not (np.isnan(value) if dtype.startswith("float") else False):
        raise ValueError(f"it does not fit in {dtype}")
    return value.item()


def parse_schema(doc: dict[str, Any], *, name: str, path: str = "") -> Schema:
    """A :class:`Schema` from a parsed TOML document; ``name`` is the file's stem."""
    where = path or name
    file = convert(doc, SchemaFile, where)
    try:
        patterns = tuple(tag_pattern(t) for t in file.tags)
    except ValueError as exc:
        raise SchemaError(f"{where}: {exc}") from None
    fields = tuple(_field(f, f"{where} [[fields]] #{i + 1} ({f.name!r})") for i, f in enumerate(file.fields))
    names = [f.name for f in fields]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise SchemaError(f"{where}: field(s) {', '.join(duplicated)} declared more than once")
    vibration = None
    if file.kind.holds_blocks:
        if file.vibration is None:
            raise SchemaError(f"{where}: a vibration schema needs a [vibration] table (channels, dtype, sample_rate)")
        table = file.vibration
        vibration = Vibration(
            table.channels, table.dtype, table.sample_rate, table.unit, table.samples_field, table.rate_field
        )
        if fields:
            raise SchemaError(
                f"{where}: a vibration stream holds time and samples only; remove [[fields]] "
                "and send other values to a sensor stream"
            )
    elif file.vibration is not None:
        raise SchemaError(f'{where}: [vibration] only belongs to kind = "vibration"')
    return Schema(
        name,
        file.kind,
        tuple(file.tags),
        fields,
        file.extra,
        file.chunk_rows,
        file.codec,
        vibration,
        file.description,
        path,
        patterns,
        retention=_retention(file.retention, where),
        parse=file.parse,
    )


def _retention(text: str | None, where: str) -> float | None:
    """A ``retention`` such as ``"90d"`` in seconds (None if not given)."""
    if text is None:
        return None
    seconds = duration_seconds(text)
    if not seconds:
        raise SchemaError(
            f"{where}: retention {text!r} is not a duration: give a positive number and a unit, "
            's, m, h, d or w ("90d", "12h", "2w")'
        )
    return seconds


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a TOML basic string
    if isinstance(value, float) and value != value:
        return "nan"
    return repr(value)


def schema_toml(schema: Schema) -> str:
    """``schema`` (a sensor or log schema) as the TOML text :func:`load_schema` reads back as it."""
    lines = [
        f"kind = {_toml_value(schema.kind)}",
        f"tags = [{', '.join(map(_toml_value, schema.tags))}]",
        f"extra = {_toml_value(schema.extra)}",
    ]
    for f in schema.fields:
        lines += ["", "[[fields]]", f"name = {_toml_value(f.name)}", f"dtype = {_toml_value(f.dtype)}"]
        if f.required:
            lines.append("required = true")
        if f.fill is not None and not f.is_float and f.dtype not in ("str", "bytes"):
            lines.append(f"fill = {_toml_value(f.fill)}")
    return "\n".join(lines) + "\n"


def load_schema(path: str | Path) -> Schema:
    """Read one schema file."""
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text())
    except OSError as exc:
        raise SchemaError(f"cannot read schema {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise SchemaError(f"schema {path} is not valid TOML: {exc}") from exc
    return parse_schema(doc, name=path.stem, path=str(path))


#: Tags whose schema a SchemaSet remembers, at most.
_FOUND_LIMIT = 100_000


@dataclass(frozen=True)
class SchemaSet:
    """The schemas of a service, in the order their tags are tried (file name order)."""

    schemas: tuple[Schema, ...]
    # tag -> its schema, as found: every event asks, and a plant's tags are many but not endless.
    _found: dict[str, Schema | None] = field(default_factory=dict, compare=False, repr=False)

    def for_tag(self, tag: str) -> Schema | None:
        """The first schema whose patterns match ``tag``, or None."""
        try:
            return self._found[tag]
        except KeyError:
            pass
        found = next((schema for schema in self.schemas if schema.matches(tag)), None)
        if len(self._found) >= _FOUND_LIMIT:
            self._found.clear()  # bounded: matching again is only slower
        self._found[tag] = found
        return found

    def __iter__(self) -> Iterator[Schema]:
        return iter(self.schemas)

    def __len__(self) -> int:
        return len(self.schemas)


def load_schemas(directory: str | Path, files: Sequence[str | Path] = ()) -> SchemaSet:
    """Every ``*.toml`` of ``directory`` (sorted by name), plus ``files``."""
    directory = Path(directory)
    if not directory.is_dir():
        raise SchemaError(f"schema directory {directory} does not exist or is not a directory")
    paths = sorted(directory.glob("*.toml")) + [Path(f) for f in files]
    if not paths:
        raise SchemaError(f"schema directory {directory} has no *.toml schema files")
    return SchemaSet(tuple(load_schema(p) for p in paths))
