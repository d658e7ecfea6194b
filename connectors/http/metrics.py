"""Prometheus text exposition (format 0.0.4) from plain samples.

A ``metrics()`` callable (ingest's: events, bytes, commits, rejects, lag per
stream) returns a list of samples, each a 5-tuple of plain data::

    (name, help, type, labels, value)
    ("windvane_events_total", "Events committed.", "counter", {"stream": "app.log"}, 1234)

``type`` is ``"counter"``, ``"gauge"``, ``"histogram"`` or ``"untyped"``; a
histogram's samples are named ``<family>_bucket`` (with an ``le`` label),
``<family>_sum`` and ``<family>_count``, and grouped under ``<family>``;
``labels`` a mapping
of label name to value (any ``str()``-able value); ``value`` an int or float
(``inf`` and ``nan`` allowed). Samples of one name may come in any order and
interleaved with others: :func:`render_metrics` groups them under one
``# HELP``/``# TYPE`` (the first sample's), as the format requires.
:class:`Sample` is a NamedTuple of that shape, so plain tuples work too.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from .errors import InvalidMetric

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
TYPES = frozenset({"counter", "gauge", "histogram", "untyped"})
#: The suffixes of a histogram's samples, each after its family's name.
_HISTOGRAM_PARTS = ("_bucket", "_sum", "_count")
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")


#: What ``render_metrics`` takes: a :class:`Sample` or any tuple of the same five fields.
SampleFields = tuple[str, str, str, Mapping[str, Any], float]


class Sample(NamedTuple):
    """One metric sample: ``(name, help, type, labels, value)``."""

    name: str
    help: str
    type: str
    labels: Mapping[str, Any]
    value: float


def _escape_label(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _format_value(value: Any) -> str:
    if isinstance(value, bool) or isinstance(value, int):
        return str(int(value))
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def _family(name: str) -> str:
    """The family a histogram's sample belongs to: its name without ``_bucket``, ``_sum`` or ``_count``."""
    for suffix in _HISTOGRAM_PARTS:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    raise InvalidMetric(f"histogram sample {name!r} must end in _bucket, _sum or _count")


def render_metrics(samples: Iterable[SampleFields]) -> str:
    """The exposition text of ``samples``; :class:`.errors.InvalidMetric` (a ValueError) names a sample with a bad name, label or type."""
    families: dict[str, tuple[str, str, list[str]]] = {}
    for sample in samples:
        try:
            name, help_text, kind, labels, value = sample
        except (TypeError, ValueError):
            raise InvalidMetric(
                f"a metrics sample must be (name, help, type, labels, value), got {sample!r:.200}"
            ) from None
        if not isinstance(name, str) or not _NAME.match(name):
            raise InvalidMetric(f"metric name {name!r} is not a Prometheus name ([a-zA-Z_:][a-zA-Z0-9_:]*)")
        if kind not in TYPES:
            raise InvalidMetric(f"metric {name}: type {kind!r} is not one of {sorted(TYPES)}")
        parts = []
        for label, label_value in (labels or {}).items():
            if not isinstance(label, str) or not _LABEL.match(label) or label.startswith("__"):
                raise InvalidMetric(f"metric {name}: label name {label!r} is not a Prometheus label name")
            parts.append(f'{label}="{_escape_label(label_value)}"')
        try:
            text_value = _format_value(value)
        except (TypeError, ValueError):
            raise InvalidMetric(f"metric {name}: value {value!r:.50} is not a number") from None
        line = f"{name}{{{','.join(parts)}}} {text_value}" if parts else f"{name} {text_value}"
        family_name = _family(name) if kind == "histogram" else name
        family = families.get(family_name)
        if family is None:
            families[family_name] = (str(help_text), kind, [line])
        else:
            family[2].append(line)
    out = []
    for name, (help_text, kind, lines) in families.items():
        out.append(f"# HELP {name} {_escape_help(help_text)}")
        out.append(f"# TYPE {name} {kind}")
        out.extend(lines)
    return "\n".join(out) + "\n" if out else ""
