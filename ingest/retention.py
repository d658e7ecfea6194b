"""Retention: each schema's ``retention = "90d"`` applied to its streams, as ``windvane store pack --schemas`` does.

A stream follows the schema it was created with (the name its attributes
record), or else the schema whose tag patterns match its tag. Its rows
older than the retention (from now) are trimmed, one commit per stream
(:func:`ingest.stream_admin.trim`); the pack that follows then drops them
from history. Quarantine streams are left as they are.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from windvane import arrays, neostore

from . import stream_admin
from .schema import Schema, SchemaSet


@dataclass(frozen=True)
class Trimmed:
    """One stream a retention applies to, and what trimming it did."""

    schema: Schema
    retention: float  # the schema's retention in seconds
    before_ns: int  # rows older than this were dropped
    change: stream_admin.Change


def _schema_of(store: neostore.Store, tag: str, schemas: SchemaSet) -> Schema | None:
    name = arrays.open_stream(store, tag, cache_bytes=0).attrs.get("schema")
    return next((s for s in schemas if s.name == name), None) or schemas.for_tag(tag)


def apply_retention(store: neostore.Store, schemas: SchemaSet, now: float | None = None) -> list[Trimmed]:
    """Trim every stream whose schema has a retention, as of ``now`` (Unix time; default: the clock)."""
    now = time.time() if now is None else now
    done: list[Trimmed] = []
    for tag in arrays.list_streams(store):
        schema = _schema_of(store, tag, schemas)
        if schema is None or schema.retention is None:
            continue
        before_ns = int((now - schema.retention) * 1e9)
        done.append(Trimmed(schema, schema.retention, before_ns, stream_admin.trim(store, tag, before_ns)))
    return done


def report_lines(done: list[Trimmed]) -> Iterator[str]:
    """What retention did, one line per stream it applies to."""
    for t in done:
        cutoff = str(np.datetime64(t.before_ns, "ns").astype("datetime64[s]")).replace("T", " ") + " UTC"
        what = f"trimmed {t.change.rows:,} rows" if t.change.rows else "nothing to trim"
        yield (
            f"retention: stream {t.change.tag}: {what} older than {cutoff} "
            f"(schema {t.schema.name} keeps {_duration(t.retention)})"
        )


def _duration(seconds: float) -> str:
    for unit, size in (("w", 7 * 86400), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"
