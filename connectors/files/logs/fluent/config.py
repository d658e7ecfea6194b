"""A fluentd ``<parse>`` section as plain data: :class:`ParseConfig`.

One field per fluentd option, by fluentd's name and with fluentd's
default, so a section moves over as it is::

    config = ParseConfig.from_mapping({"type": "regexp", "expression": "/^(?<host>\\S+) (?<msg>.*)$/"})
    config.to_fluentd()   # '<parse>\\n  @type regexp\\n  expression /^(?<host>\\S+) (?<msg>.*)$/\\n</parse>\\n'

``from_mapping`` takes what a TOML file or a schema's ``[parse]`` table
holds (``@type`` may be written ``type``; ``format1`` ... ``formatN`` of the
multiline parser, or a list ``formats``). Options a parser type does not
use are allowed, as fluentd allows them; unknown names are refused.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..errors import LogFormatError

#: The option whose default is per parser type (fluentd's ``config_set_default``).
TIME_KEY_DEFAULTS = {
    "regexp": "time",
    "json": "time",
    "msgpack": None,
    "ltsv": "time",
    "csv": None,
    "tsv": None,
    "logfmt": "time",
    "multiline": "time",
    "apache2": "time",
    "apache_error": "time",
    "nginx": "time",
    "syslog": "time",
}
#: ``time_format`` where a parser type sets one (fluentd's config_set_default): it counts as given.
TIME_FORMAT_DEFAULTS = {"nginx": "%d/%b/%Y:%H:%M:%S %z", "syslog": "%b %d %H:%M:%S"}
TIME_TYPES = ("string", "unixtime", "float", "mixed")
#: ``time_type`` where a parser type has its own default, used when the section gives neither ``time_type`` nor
#: ``time_format`` (fluentd's json parser: ``float``, but ``string`` once a time_format is given).
TIME_TYPE_DEFAULTS = {"json": "float"}


class _DefaultTimeType(str):
    """The ``time_type`` a section did not give (equal to ``"string"``): the type's own default may replace it."""


_NOT_GIVEN = _DefaultTimeType("string")


#: What to do, said after fluentd's message when a csv or tsv section gives no ``keys``.
KEYS_HINT = (
    ': name each line\'s fields in order, e.g. keys = ["time", "host", "message"] (fluentd: keys time,host,message)'
)


class ParseConfigError(LogFormatError):
    """A ``<parse>`` section is invalid: an unknown option, a wrong value, a type fluentd does not have."""


@dataclass(frozen=True)
class ParseConfig:
    """A fluentd ``<parse>`` section; each field is the fluentd option of that name (None: fluentd's default)."""

    type: str
    expression: str | None = None
    ignorecase: bool = False
    multiline: bool = False
    time_key: str | None = None
    time_format: str | None = None
    time_type: str = _NOT_GIVEN
    time_format_fallbacks: tuple[str, ...] = ()
    keep_time_key: bool = False
    types: dict[str, str] = field(default_factory=dict)
    null_value_pattern: str | None = None
    null_empty_string: bool = False
    estimate_current_event: bool = True
    timeout: str | None = None  # fluentd's parse time limit: accepted, not enforced
    timezone: str | None = None
    localtime: bool = True
    utc: bool = False
    message_key: str = "message"
    message_format: str = "rfc3164"
    rfc5424_time_format: str | None = None
    with_priority: bool = False
    support_colonless_ident: bool = True
    keys: tuple[str, ...] = ()
    delimiter: str | None = None
    delimiter_pattern: str | None = None
    label_delimiter: str = ":"
    format_firstline: str | None = None
    formats: tuple[str, ...] = ()
    unmatched_lines: str | None = None  # multiline: accepted, no effect (in_tail sets it from its own option)
    json_parser: str = "oj"
    stream_buffer_size: int | None = None
    parser_type: str | None = None
    parser_engine: str | None = None  # the csv parser's engine (normal, fast); parser_type is its alias

    def __post_init__(self) -> None:
        if self.time_type is _NOT_GIVEN and self.time_format is None and self.type in TIME_TYPE_DEFAULTS:
            object.__setattr__(self, "time_type", TIME_TYPE_DEFAULTS[self.type])
        if self.time_type not in TIME_TYPES:
            raise ParseConfigError(f"time_type {self.time_type!r} is not one of {', '.join(TIME_TYPES)}")
        if self.time_type == "mixed" and self.time_format is None and not self.time_format_fallbacks:
            raise ParseConfigError("time_type is mixed but time_format and time_format_fallbacks is empty")
        if (
            (self.time_format or TIME_FORMAT_DEFAULTS.get(self.type)) is None
            and (self.timezone or self.utc or not self.localtime)
            and self.time_type == "string"
        ):
            raise ParseConfigError(
                "timezone or utc needs a time_format (fluentd: specifying timezone requires time format)"
            )

    @property
    def effective_time_key(self) -> str | None:
        """``time_key``, else this parser type's default (``time`` for regexp and json)."""
        return self.time_key if self.time_key is not None else TIME_KEY_DEFAULTS.get(self.type)

    @classmethod
    def from_mapping(cls, doc: Mapping[str, Any], *, where: str = "parse") -> ParseConfig:
        """The section ``doc`` holds (keys: fluentd's option names); ParseConfigError naming a wrong key or value."""
        doc = dict(doc)
        if "@type" in doc:
            doc["type"] = doc.pop("@type")
        if "parser_engine" in doc:  # the syslog parser's option; parser_type is its alias
            doc["parser_type"] = doc.pop("parser_engine")
        numbered = sorted((k for k in doc if k.startswith("format") and k[6:].isdigit()), key=lambda k: int(k[6:]))
        if numbered:
            doc["formats"] = [doc.pop(k) for k in numbered]
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(doc) - set(known))
        if unknown:
            raise ParseConfigError(f"{where}: unknown option(s) {', '.join(unknown)}; known: {', '.join(known)}")
        if "type" not in doc:
            raise ParseConfigError(f"{where}: no type (the parser: regexp, none, json, ...)")
        values = {k: _value(k, v, str(known[k].type), where) for k, v in doc.items()}
        try:
            return cls(**values)
        except TypeError as exc:
            raise ParseConfigError(f"{where}: {exc}") from None

    @classmethod
    def from_toml(cls, path: str | Path) -> ParseConfig:
        """The section a TOML file holds (its top-level keys, or its ``[parse]`` table if it has one)."""
        try:
            doc = tomllib.loads(Path(path).read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ParseConfigError(f"{path}: {exc}") from None
        return cls.from_mapping(doc.get("parse", doc), where=str(path))

    def to_fluentd(self) -> str:
        """This section as fluentd's configuration text, ``<parse> ... </parse>`` (options left at default omitted)."""
        out = ["<parse>", f"  @type {self.type}"]
        defaults = ParseConfig(self.type)
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "type" or value == getattr(defaults, f.name):
                continue
            if f.name == "formats":
                out += [f"  format{n} {v}" for n, v in enumerate(value, 1)]
            elif f.name == "types":
                out.append("  types " + ",".join(f"{k}:{v}" for k, v in value.items()))
            else:
                out.append(f"  {f.name} {_fluentd_text(value)}")
        return "\n".join([*out, "</parse>"]) + "\n"

    def replace(self, **changes: Any) -> ParseConfig:
        """A copy with ``changes``."""
        return dataclasses.replace(self, **changes)


def _value(key: str, value: Any, kind: str, where: str) -> Any:
    """``value`` of option ``key`` as the field's type (``kind``: its annotation text)."""
    if key == "types" and isinstance(value, str):
        value = _types_text(value)
    if kind.startswith("tuple"):
        value = [s.strip() for s in value.split(",")] if isinstance(value, str) else value
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise ParseConfigError(f"{where}: {key} is a list of text (or comma-separated text)")
        return tuple(value)
    if kind == "bool" and isinstance(value, str) and value in ("true", "false"):
        return value == "true"
    expected = {"bool": bool, "str": str, "int | None": int, "dict[str, str]": dict}.get(kind, str)
    if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
        raise ParseConfigError(f"{where}: {key} = {value!r} is not {expected.__name__}")
    if isinstance(value, dict) and not all(isinstance(v, str) for v in value.values()):
        raise ParseConfigError(f"{where}: types maps each field to a type name (text)")
    return value


def _types_text(text: str) -> object:
    """fluentd's ``types`` text, ``a:integer,b:time:%d/%b/%Y`` (or JSON), as a mapping (JSON may hold anything:
    :func:`_value` checks it)."""
    if text.lstrip().startswith("{"):
        parsed: object = json.loads(text)
        return parsed
    out = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, _, kind = item.partition(":")
        out[name] = kind
    return out


def _fluentd_text(value: Any) -> str:
    """``value`` as fluentd's config reads it: text that bare would lose spaces or tabs is double-quoted (JSON's
    escapes are fluentd's); other text bare, as a regexp must be (quoted, its backslashes would be escapes)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        value = ",".join(value)
    text = str(value)
    if not text or text != text.strip() or any(c in text for c in "\t\n\r"):
        return json.dumps(text, ensure_ascii=False)
    return text
