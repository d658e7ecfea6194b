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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np

from windvane.arrays import ColumnError, column_key

from .errors import SchemaError
from .times import duration_seconds


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


KINDS = tuple(k.value for k in Kind)
EXTRA_POLICIES = ("keep", "drop", "reject")
#: Column names the stream layout itself uses.
RESERVED = ("time", "extra")
#: Field dtypes a schema may name: numpy's numeric names, "str" and "bytes".
NUMERIC_DTYPES = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float32",
    "float64",
)
FIELD_DTYPES = NUMERIC_DTYPES + ("str", "bytes")
VIBRATION_DTYPES = ("int16", "int32", "float32", "float64")
DEFAULT_CHUNK_ROWS = 16384
#: What a schema's ``codec`` may name for its number columns (see schemas/README.md).
CODECS = ("blosc", "lz4", "zstd", "none")


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
    chunk_rows: int = DEFAULT_CHUNK_ROWS
    codec: str | None = None
    vibration: Vibration | None = None
    description: str = ""
    path: str = ""
    _patterns: tuple[re.Pattern, ...] = field(default=(), compare=False, repr=False)
    retention: float | None = None  # seconds of rows `windvane store pack --schemas` keeps; None: all
    # its [parse] table: the fluentd <parse> section `windvane tail`/`import` read its logs with (checked there)
    parse: dict | None = field(default=None, compare=False)

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

    def __getstate__(self) -> dict:
        # Not the cached hash: str hashes differ between processes (schemas are sent to workers).
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def matches(self, tag: str) -> bool:
        return any(p.fullmatch(tag) for p in self._patterns)

    def field(self, name: str) -> Field | None:
        return next((f for f in self.fields if f.name == name), None)


def tag_pattern(pattern: str) -> re.Pattern:
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


def _need(doc: dict, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in doc:
        raise SchemaError(f"{where}: '{key}' is required")
    value = doc[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    # TOML booleans are Python ints too: refuse them where a number is meant.
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise SchemaError(f"{where}: '{key}' must be {_type_words(kind)}, not {value!r}")
    return value


def _opt(doc: dict, key: str, kind: type | tuple[type, ...], default: Any, where: str) -> Any:
    return _need(doc, key, kind, where) if key in doc else default


def _type_words(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    words = {
        str: "a string",
        int: "an integer",
        float: "a number",
        bool: "true or false",
        list: "a list",
        dict: "a table",
    }
    return " or ".join(words.get(k, k.__name__) for k in kinds)


def _check_keys(doc: dict, allowed: Iterable[str], where: str) -> None:
    unknown = sorted(set(doc) - set(allowed))
    if unknown:
        raise SchemaError(
            f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(sorted(allowed))}"
        )


def _field(doc: Any, where: str) -> Field:
    if not isinstance(doc, dict):
        raise SchemaError(f"{where}: each [[fields]] entry must be a table")
    _check_keys(doc, ("name", "dtype", "unit", "required", "fill", "description"), where)
    name = _need(doc, "name", str, where)
    where = f"{where} ({name!r})"
    if not name.strip() or not name.isprintable() or name in RESERVED:
        raise SchemaError(
            f"{where}: a field name is printable text, not blank and not one of {', '.join(RESERVED)} "
            "(a name a store key cannot hold is stored escaped: see arrays.column_key)"
        )
    try:
        column_key(name)
    except ColumnError as exc:
        raise SchemaError(f"{where}: {exc}") from None
    dtype = _need(doc, "dtype", str, where)
    if dtype not in FIELD_DTYPES:
        raise SchemaError(f"{where}: dtype {dtype!r} is not one of {', '.join(FIELD_DTYPES)}")
    required = _opt(doc, "required", bool, False, where)
    fill = doc.get("fill")
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
    return Field(
        name, dtype, _opt(doc, "unit", str, "", where), required, fill, _opt(doc, "description", str, "", where)
    )


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


def _vibration(doc: Any, where: str) -> Vibration:
    where = f"{where} [vibration]"
    if not isinstance(doc, dict):
        raise SchemaError(f"{where}: must be a table")
    _check_keys(doc, ("channels", "dtype", "sample_rate", "unit", "samples_field", "rate_field"), where)
    channels = _need(doc, "channels", int, where)
    if channels < 1:
        raise SchemaError(f"{where}: channels must be at least 1")
    dtype = _opt(doc, "dtype", str, "float32", where)
    if dtype not in VIBRATION_DTYPES:
        raise SchemaError(f"{where}: dtype {dtype!r} is not one of {', '.join(VIBRATION_DTYPES)}")
    rate = _opt(doc, "sample_rate", (int, float), None, where)
    if rate is not None and not rate > 0:
        raise SchemaError(f"{where}: sample_rate must be positive (samples per second)")
    return Vibration(
        channels,
        dtype,
        None if rate is None else float(rate),
        _opt(doc, "unit", str, "", where),
        _opt(doc, "samples_field", str, "samples", where),
        _opt(doc, "rate_field", str, "sample_rate", where),
    )


SCHEMA_KEYS = (
    "kind",
    "tags",
    "description",
    "extra",
    "chunk_rows",
    "codec",
    "fields",
    "vibration",
    "retention",
    "parse",
)


def parse_schema(doc: dict, *, name: str, path: str = "") -> Schema:
    """A :class:`Schema` from a parsed TOML document; ``name`` is the file's stem."""
    where = path or name
    _check_keys(doc, SCHEMA_KEYS, where)
    kind = _need(doc, "kind", str, where)
    if kind not in KINDS:
        raise SchemaError(f"{where}: kind {kind!r} is not one of {', '.join(KINDS)}")
    tags = _need(doc, "tags", list, where)
    if not tags or not all(isinstance(t, str) for t in tags):
        raise SchemaError(f"{where}: 'tags' must be a non-empty list of tag patterns such as \"turbine.*.scada\"")
    try:
        patterns = tuple(tag_pattern(t) for t in tags)
    except ValueError as exc:
        raise SchemaError(f"{where}: {exc}") from None
    fields = tuple(
        _field(f, f"{where} [[fields]] #{i + 1}") for i, f in enumerate(_opt(doc, "fields", list, [], where))
    )
    names = [f.name for f in fields]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise SchemaError(f"{where}: field(s) {', '.join(duplicated)} declared more than once")
    extra = _opt(doc, "extra", str, "keep", where)
    if extra not in EXTRA_POLICIES:
        raise SchemaError(f"{where}: extra {extra!r} is not one of {', '.join(EXTRA_POLICIES)}")
    chunk_rows = _opt(doc, "chunk_rows", int, DEFAULT_CHUNK_ROWS, where)
    if chunk_rows < 1:
        raise SchemaError(f"{where}: chunk_rows must be at least 1")
    codec = _opt(doc, "codec", str, None, where)
    if codec is not None and codec not in CODECS:
        raise SchemaError(f"{where}: codec {codec!r} is not one of {', '.join(CODECS)}")
    vibration = None
    if Kind(kind).holds_blocks:
        if "vibration" not in doc:
            raise SchemaError(f"{where}: a vibration schema needs a [vibration] table (channels, dtype, sample_rate)")
        vibration = _vibration(doc["vibration"], where)
        if fields:
            raise SchemaError(
                f"{where}: a vibration stream holds time and samples only; remove [[fields]] "
                "and send other values to a sensor stream"
            )
    elif "vibration" in doc:
        raise SchemaError(f'{where}: [vibration] only belongs to kind = "vibration"')
    return Schema(
        name,
        kind,
        tuple(tags),
        fields,
        extra,
        chunk_rows,
        codec,
        vibration,
        _opt(doc, "description", str, "", where),
        path,
        patterns,
        retention=_retention(_opt(doc, "retention", str, None, where), where),
        parse=_opt(doc, "parse", dict, None, where),
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

    def __iter__(self):
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
