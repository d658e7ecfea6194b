"""Keys over neostore: the byte values of a zarr hierarchy, read at one snapshot.

A key (``"temperature/c/0/3"``) is a neostore name; its value is the named
object's value. :class:`Snapshot` reads either a fixed point of history
(``before`` = the first tid it must not see) or the head (``before=None``:
every call sees the latest commit).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from windvane import neostore
from windvane.neostore import POSKeyError

from . import row_log, time_index
from .metadata import METADATA_KEY, ArrayMeta


@dataclass(frozen=True)
class Entry:
    """One key as a snapshot sees it."""

    key: str
    oid: bytes
    serial: bytes
    size: int


def encode_key(key: str) -> bytes:
    return key.encode("utf-8")


class LoggedView:
    """Reads through row logs (:mod:`arrays.row_log`): what every reader of arrays should see.

    Subclasses give the stored values (``raw_*``) and the chain of a log;
    the public methods present each log's pending rows in its arrays.
    """

    # -- stored values: what subclasses provide -------------------------------------

    def raw_get_many(self, keys: Iterable[str]) -> dict[str, bytes]:
        raise NotImplementedError

    def raw_get_range(self, key: str, start: int, stop: int | None = None) -> bytes | None:
        raise NotImplementedError

    def raw_size(self, key: str) -> int | None:
        raise NotImplementedError

    def raw_list_under(self, prefixes: Iterable[str]) -> list[Entry]:
        """The keys stored under any of ``prefixes``, sorted (row logs as stored)."""
        raise NotImplementedError

    def log_chain(self, key: str, current: row_log.Revision) -> list[row_log.Revision]:
        """The chain of log ``key`` whose newest revision (as this view sees it) is ``current``."""
        raise NotImplementedError

    def raw_get(self, key: str) -> bytes | None:
        return self.raw_get_many([key]).get(key)

    def raw_list(self, prefix: str = "") -> list[Entry]:
        """The keys stored under ``prefix``, sorted (row logs as stored)."""
        return self.raw_list_under([prefix])

    # -- what readers see ---------------------------------------------------------------

    def get_many(self, keys: Iterable[str]) -> dict[str, bytes]:
        """The values of those ``keys`` that exist, read in bulk."""
        return row_log.overlay(list(keys), self.raw_get_many, self.log_chain)

    def get(self, key: str) -> bytes | None:
        """The value of ``key``, or None if it does not exist."""
        return self.get_many([key]).get(key)

    def _logged(self, key: str) -> bool:
        """Whether a row log with pending rows could change ``key``'s value (one read of the candidate logs)."""
        logs = self.raw_get_many([row_log.log_key(g) for g in row_log.candidate_groups([key])])
        for lkey, raw in logs.items():
            revision = row_log.Revision.from_bytes(raw, lkey)
            if revision.rows and row_log.logged_array(key, row_log.group_of(lkey), revision) is not None:
                return True
        return False

    def get_range(self, key: str, start: int, stop: int | None = None) -> bytes | None:
        """``value[start:stop]`` (negative ``start``: from the end), sliced by the database where it can."""
        if row_log.is_log_key(key):
            return None
        if self._logged(key):
            value = self.get(key)
            return None if value is None else value[slice(start, stop)]
        return self.raw_get_range(key, start, stop)

    def size(self, key: str) -> int | None:
        """The size of ``key``'s value in bytes, or None if it does not exist."""
        if row_log.is_log_key(key):
            return None
        if self._logged(key):
            value = self.get(key)
            return None if value is None else len(value)
        return self.raw_size(key)

    def exists(self, key: str) -> bool:
        return self.size(key) is not None

    def occupied(self, directories: Iterable[str]) -> set[str]:
        """Those of ``directories`` (each ending with ``/``) under which a key exists, row logs aside:
        whether paths are free, for many paths in a few reads."""
        wanted = set(directories)
        if any(not d.endswith("/") for d in wanted):
            raise ValueError("occupied() takes directories, each ending with '/'")
        found: set[str] = set()
        for entry in self.raw_list_under(wanted):
            if row_log.is_log_key(entry.key) or time_index.is_record_key(entry.key):
                continue  # a log or a time record alone holds no array (list() leaves them out too)
            slash = entry.key.find("/")
            while slash != -1:
                if entry.key[: slash + 1] in wanted:
                    found.add(entry.key[: slash + 1])
                slash = entry.key.find("/", slash + 1)
        return found

    def list(self, prefix: str = "") -> list[Entry]:
        """The keys under ``prefix`` that exist, sorted, with their sizes (row logs applied, not listed)."""
        # Streams' time records are no zarr keys: listings leave them out, as they do row logs.
        entries = {e.key: e for e in self.raw_list(prefix) if not time_index.is_record_key(e.key)}
        logs = {k for k in entries if row_log.is_log_key(k)}
        logs |= set(self.raw_get_many([row_log.log_key(g) for g in row_log.candidate_groups([prefix + "x"])]))
        for k in logs:
            entries.pop(k, None)
        if logs:
            # The zarr.json and last chunk of each logged array: sizes as read, and the last
            # chunk listed even when only the log holds its rows.
            logged = self._logged_keys(logs)
            wanted = [k for k in logged if k.startswith(prefix)]
            values = self.get_many(wanted)
            for key, value in values.items():
                oid, serial = logged[key]
                old = entries.get(key)
                entries[key] = Entry(
                    key, old.oid if old else oid, max(serial, old.serial) if old else serial, len(value)
                )
        return [entries[k] for k in sorted(entries, key=encode_key)]

    def _logged_keys(self, logs: Iterable[str]) -> dict[str, tuple[bytes, bytes]]:
        """Per key a log with pending rows changes: the log's (oid, serial)."""
        out: dict[str, tuple[bytes, bytes]] = {}
        found = self.raw_get_many(list(logs))
        entries = {e.key: e for k in found for e in self.raw_list(k) if e.key == k}
        metas_wanted = {}
        for lkey, raw in found.items():
            revision = row_log.Revision.from_bytes(raw, lkey)
            if not revision.rows:
                continue
            group = row_log.group_of(lkey)
            prefix = f"{group}/" if group else ""
            for name in revision.add:
                metas_wanted[f"{prefix}{name}/{METADATA_KEY}"] = (lkey, revision)
        metas = self.raw_get_many(list(metas_wanted))
        for mkey, raw in metas.items():
            lkey, revision = metas_wanted[mkey]
            entry = entries.get(lkey)
            ident = (entry.oid, entry.serial) if entry else (b"", b"")
            array = mkey[: -len(METADATA_KEY) - 1]
            meta = ArrayMeta.from_bytes(raw, array)
            out[mkey] = ident
            out[row_log.last_chunk_key(array, meta, revision.base + revision.rows)] = ident
        return out


class Snapshot(LoggedView):
    """Read-only access to the keys of ``store`` as of ``before`` (None: the head)."""

    def __init__(self, store: neostore.Store, before: bytes | None = None):
        self.store = store
        self.before = before

    @classmethod
    def latest(cls, store: neostore.Store) -> Snapshot:
        """A snapshot pinned at the newest commit: later commits stay invisible to it."""
        return cls(store, next_tid_after(store.last_transaction()))

    def oid(self, key: str) -> bytes | None:
        return self.store.oids_for([encode_key(key)]).get(encode_key(key))

    def raw_get(self, key: str) -> bytes | None:
        oid = self.oid(key)
        if oid is None:
            return None
        try:
            if self.before is None:
                return self.store.load(oid)[0]
            found = self.store.load_before(oid, self.before)
        except POSKeyError:
            return None
        return None if found is None else found[0]

    def raw_get_many(self, keys: Iterable[str]) -> dict[str, bytes]:
        keys = list(keys)
        if not keys:
            return {}
        oids = self.store.oids_for([encode_key(k) for k in keys])
        present = [k for k in keys if encode_key(k) in oids]
        values = self.store.load_many([oids[encode_key(k)] for k in present], before=self.before, skip_missing=True)
        return {k: v for k, (v, _) in zip(present, values) if v is not None}

    def raw_get_range(self, key: str, start: int, stop: int | None = None) -> bytes | None:
        oid = self.oid(key)
        if oid is None:
            return None
        try:
            return self.store.load_range(oid, start, stop, before=self.before)
        except POSKeyError:
            return None

    def raw_list_under(self, prefixes: Iterable[str]) -> list[Entry]:
        return [
            Entry(r.name.decode("utf-8"), r.oid, r.serial, r.size)
            for r in self.store.list_names_under([encode_key(p) for p in prefixes], before=self.before)
        ]

    def raw_size(self, key: str) -> int | None:
        found = self.store.list_names(encode_key(key), before=self.before, exact=True)
        return found[0].size if found else None

    def log_chain(self, key: str, current: row_log.Revision) -> list[row_log.Revision]:
        if current.prev is None:
            return [current]
        oid = self.oid(key)
        earlier = [] if oid is None else self.store.load_revisions(oid, current.after, self.before)
        return row_log.chain(current, earlier, key)


def next_tid_after(tid: bytes) -> bytes:
    """The ``before`` bound that includes ``tid`` and nothing later."""
    return neostore.p64(neostore.u64(tid) + 1)
