"""Row logs: the rows of a stream's partly filled last chunk, stored as what each commit added.

A stream's columns are row-chunked arrays appended together. An append that
does not fill a chunk writes its rows to the group's row log
(``<group>/__rows``: zarr v3 reserves node names starting with ``__``, so no
array or group can take it) instead of rewriting the partial chunk of every
column. Each commit adds one revision of that one object holding only the
rows it appended; revisions link back to the one before, and together they
hold the rows past ``base``, the length the columns' stored ``zarr.json``
give. When a chunk fills, its writer stores it whole, moves ``base`` in the
columns' ``zarr.json`` and starts a new chain. History thus holds each row
about twice (in the log, then in its chunk) whatever the number of commits,
and a commit writes one object per stream it touches.

Readers see the columns as if the log's rows were in their chunks:
:func:`overlay` presents each column's ``zarr.json`` with the full length and
makes the last chunk from the stored partial chunk and the chain, so BigArray,
streams, the zarr store view, exports and time travel (a snapshot reads the
chain as of its tid) read exactly what a rewrite would have stored. Writers
that do not keep the log (anything but :class:`~arrays.stream_writer.StreamWriter`)
get it folded first (:func:`fold`): the partial chunk is written, the log
emptied, and their write proceeds on plain arrays. ``store pack`` folds every
log before it drops history, since the chain is history.

A revision is msgpack: ``base``; ``rows`` (pending rows past ``base``, this
revision's included); ``after`` (the chain's revisions were committed after
this tid); ``prev`` (the serial of the revision before in the chain, nil when
this one starts it); ``add`` (per array name: the rows this revision adds,
numbers byte-shuffled, strings and bytes as
zarr's ``vlen-utf8``/``vlen-bytes`` records; :func:`deserialise` reads them back).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import msgpack
import numpy as np

from windvane import neostore

from .codecs import VLenCodec, unshuffled
from .errors import ArrayError
from .metadata import METADATA_KEY, ArrayMeta
from .tail import tail_for

#: The name of a group's row log, beside its arrays.
LOG_NAME = "__rows"


class RowLogError(ArrayError):
    """A row log that cannot be read: its chain is broken or it does not match its arrays."""


def log_key(group: str) -> str:
    return f"{group}/{LOG_NAME}" if group else LOG_NAME


def is_log_key(key: str) -> bool:
    return key == LOG_NAME or key.endswith("/" + LOG_NAME)


def group_of(key: str) -> str:
    """The group whose row log ``key`` is (the inverse of :func:`log_key`)."""
    return key[: -len(LOG_NAME)].rstrip("/")


def logged_array(key: str, group: str, revision: Revision) -> tuple[str, str] | None:
    """``(array path, rest of the key)`` if ``key`` is inside an array of ``group`` that ``revision``
    holds rows for, else None."""
    prefix = f"{group}/" if group else ""
    if not key.startswith(prefix):
        return None
    name, _, rest = key[len(prefix) :].partition("/")
    return (f"{prefix}{name}", rest) if rest and name in revision.add else None


@dataclass(frozen=True)
class Revision:
    """One revision of a row log."""

    base: int
    rows: int
    after: bytes = neostore.ZERO
    prev: bytes | None = None
    add: Mapping[str, bytes] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        packed: bytes = msgpack.packb(
            {"base": self.base, "rows": self.rows, "after": self.after, "prev": self.prev, "add": dict(self.add)},
            use_bin_type=True,
        )
        return packed

    @classmethod
    def from_bytes(cls, raw: bytes, key: str = "") -> Revision:
        try:
            doc = msgpack.unpackb(raw, raw=False)
            return cls(
                int(doc["base"]),
                int(doc["rows"]),
                bytes(doc["after"]),
                None if doc["prev"] is None else bytes(doc["prev"]),
                doc["add"],
            )
        except Exception as exc:  # noqa: BLE001 - any malformed document
            raise RowLogError(f"row log {key!r} is not a row log revision: {exc}") from None


def empty(base: int, after: bytes) -> Revision:
    """The revision of a log holding no rows: every row is in the chunks, ``base`` of them."""
    return Revision(base, 0, after)


# -- rows as the log keeps them ------------------------------------------------------


def deserialise(meta: ArrayMeta, parts: Iterable[bytes], count: int) -> np.ndarray:
    """The ``count`` rows the serialised ``parts`` hold, in order, as the array's working dtype."""
    codec = meta.codec
    inner = meta.shape[1:]
    if isinstance(codec, VLenCodec):
        items = count * int(np.prod(inner, dtype=np.int64))
        rows = codec.deserialize_items(b"".join(parts), items)
    else:
        itemsize = np.dtype(codec.work_dtype).itemsize
        try:
            data = b"".join(unshuffled(part, itemsize) for part in parts)
        except ValueError:
            raise RowLogError(f"a row log holds a part that is not whole {itemsize}-byte items") from None
        rows = np.frombuffer(data, dtype=codec.work_dtype)
    try:
        return rows.reshape((count, *inner))
    except ValueError:
        raise RowLogError(
            f"a row log holds {rows.size} items where {count} rows of shape {inner} were expected"
        ) from None


# -- reading a chain -------------------------------------------------------------------


#: ``(log key, current revision) -> revisions of its chain`` oldest first; see :func:`chain`.
ChainLoader = Callable[[str, Revision], list[Revision]]


def chain(current: Revision, earlier: Iterable[tuple[bytes, bytes]], key: str) -> list[Revision]:
    """The revisions whose rows are pending in ``current``, oldest first.

    ``earlier``: ``(serial, value)`` of the log's revisions committed after
    ``current.after`` (and before ``current``); the chain follows ``prev``
    links through them, skipping any that an undo left off the path.
    """
    path = [current]
    if current.prev is None:
        return path
    by_serial = dict(earlier)
    wanted: bytes | None = current.prev
    while wanted is not None:
        raw = by_serial.get(wanted)
        if raw is None:
            raise RowLogError(
                f"row log {key!r} misses its revision 0x{wanted.hex()}: history it needs was packed away "
                "without folding the log first (pack with `windvane store pack` or arrays.fold_all)"
            )
        revision = Revision.from_bytes(raw, key)
        path.append(revision)
        wanted = revision.prev
    path.reverse()
    return path


def pending_rows(meta: ArrayMeta, name: str, revisions: list[Revision], key: str) -> np.ndarray:
    """The rows of array ``name`` that ``revisions`` (a chain, oldest first) hold past the base."""
    current = revisions[-1]
    parts = [r.add[name] for r in revisions if name in r.add]
    if len(parts) != len(revisions):
        raise RowLogError(f"row log {key!r} has no rows for array {name!r} in every revision")
    return deserialise(meta, parts, current.rows)


# -- what readers see ----------------------------------------------------------------------


def candidate_groups(keys: Iterable[str]) -> set[str]:
    """The groups whose row log could touch ``keys``: each key's ``<group>/<array>/<rest>`` splits."""
    groups: set[str] = set()
    for key in keys:
        parts = key.split("/")
        for cut in range(len(parts) - 1):  # at least an array name and one more part after the group
            groups.add("/".join(parts[:cut]))
    return groups


def last_chunk_key(array: str, meta: ArrayMeta, length: int) -> str:
    """The key of the chunk holding row ``length - 1`` of ``array``."""
    rows = meta.chunks[0]
    index = (length - 1) // rows
    return f"{array}/{meta.chunk_key((index, *(0,) * (len(meta.shape) - 1)))}"


def synthesise_chunk(meta: ArrayMeta, name: str, stored: bytes | None, pending: np.ndarray) -> bytes:
    """The encoded last chunk of an array (``meta``'s shape is its base): ``stored`` (its stored partial
    chunk, if any) with the ``pending`` rows after it, byte for byte what a rewrite stores."""
    rows = meta.chunks[0]
    partial = None
    if stored is not None and meta.shape[0] % rows:
        try:
            partial = meta.codec.decode(stored, meta.chunks)
        except Exception as exc:  # noqa: BLE001 - numcodecs raises many kinds; name the chunk
            raise ArrayError(f"partial chunk of {name!r} does not decode with {meta.codec.names}: {exc}") from None
    jobs = tail_for(name, meta, partial).append(pending)
    return jobs[-1].encode()


@dataclass
class _Logged:
    """A log with pending rows as one read found it."""

    group: str
    key: str
    revision: Revision
    revisions: list[Revision] | None = None  # the chain, loaded when a last chunk is wanted


def overlay(
    keys: list[str],
    raw_get_many: Callable[[list[str]], dict[str, bytes]],
    load_chain: ChainLoader,
) -> dict[str, bytes]:
    """The values of ``keys`` as readers see them: each row log's pending rows in its arrays.

    ``raw_get_many`` reads stored values; ``load_chain`` reads a log's chain.
    Log keys themselves read as missing (they are not part of the zarr
    hierarchy). Costs no extra round trip unless a key is the ``zarr.json``
    or last chunk of an array whose log holds rows.
    """
    logs_wanted = {log_key(g): g for g in candidate_groups(keys)}
    found = raw_get_many(list(dict.fromkeys([*keys, *logs_wanted])))
    values = {k: found[k] for k in keys if k in found and not is_log_key(k)}
    logged: dict[str, _Logged] = {}
    for lkey, group in logs_wanted.items():
        raw = found.get(lkey)
        if raw is None:
            continue
        revision = Revision.from_bytes(raw, lkey)
        if revision.rows:
            logged[group] = _Logged(group, lkey, revision)
    if not logged:
        return values
    # Which requested keys fall under a logged array, and what more that needs.
    touched: list[tuple[str, _Logged, str, str]] = []  # (key, log, array path, rest)
    for key in keys:
        for group, log in logged.items():
            found_array = logged_array(key, group, log.revision)
            if found_array is not None:
                touched.append((key, log, *found_array))
    if not touched:
        return values
    metas_wanted = [f"{array}/{METADATA_KEY}" for _, _, array, _ in touched]
    more = raw_get_many([k for k in dict.fromkeys(metas_wanted) if k not in found])
    docs = {**found, **more}
    metas: dict[str, ArrayMeta] = {}
    for key, log, array, rest in touched:
        raw_meta = docs.get(f"{array}/{METADATA_KEY}")
        if raw_meta is None:
            continue
        meta = metas.get(array) or metas.setdefault(array, ArrayMeta.from_bytes(raw_meta, array))
        if meta.shape[0] != log.revision.base:
            continue  # the array was written past the log (not through windvane): the log does not apply
        length = log.revision.base + log.revision.rows
        if rest == METADATA_KEY:
            values[key] = meta.with_shape((length, *meta.shape[1:])).to_bytes()
        elif key == last_chunk_key(array, meta, length):
            if log.revisions is None:
                log.revisions = load_chain(log.key, log.revision)
            stored = values.get(key) if meta.shape[0] % meta.chunks[0] else None
            pending = pending_rows(meta, array.rpartition("/")[2], log.revisions, log.key)
            values[key] = synthesise_chunk(meta, array, stored, pending)
    return values


def fold_writes(
    group: str,
    revision: Revision,
    revisions: list[Revision],
    raw_get_many: Callable[[list[str]], dict[str, bytes]],
    after: bytes,
) -> dict[str, bytes]:
    """The writes that move a log's pending rows into its arrays: each array's last chunk and
    ``zarr.json``, and an empty log (``after``: the log's current serial)."""
    prefix = f"{group}/" if group else ""
    names = list(revision.add)
    metas_raw = raw_get_many([f"{prefix}{n}/{METADATA_KEY}" for n in names])
    length = revision.base + revision.rows
    writes: dict[str, bytes] = {}
    stored_keys = {}
    for name in names:
        array = f"{prefix}{name}"
        raw = metas_raw.get(f"{array}/{METADATA_KEY}")
        if raw is None:
            continue
        meta = ArrayMeta.from_bytes(raw, array)
        if meta.shape[0] != revision.base:
            continue
        stored_keys[name] = (last_chunk_key(array, meta, length), meta)
    stored = raw_get_many([k for k, meta in stored_keys.values() if meta.shape[0] % meta.chunks[0]])
    for name, (chunk_key, meta) in stored_keys.items():
        pending = pending_rows(meta, name, revisions, log_key(group))
        writes[chunk_key] = synthesise_chunk(meta, f"{prefix}{name}", stored.get(chunk_key), pending)
        writes[f"{prefix}{name}/{METADATA_KEY}"] = meta.with_shape((length, *meta.shape[1:])).to_bytes()
    writes[log_key(group)] = empty(length, after).to_bytes()
    return writes


def pack_keep(store: neostore.Store, tid: bytes) -> dict[bytes, bytes]:
    """For ``store.pack(tid, keep=...)``: per row log, the tid after which its revisions must stay.

    A reader at or after ``tid`` reads the chain of the revision it sees,
    and a chain reaches back to revisions a plain pack would drop.
    """
    keep: dict[bytes, bytes] = {}
    bound = neostore.p64(neostore.u64(tid) + 1)
    for name, oid in store.names_ending(("/" + LOG_NAME).encode()).items():
        try:
            found = store.load_before(oid, bound)
        except neostore.POSKeyError:
            continue
        if found is not None:
            revision = Revision.from_bytes(found[0], name.decode("utf-8", "replace"))
            if revision.rows:
                keep[oid] = revision.after
    return keep
