"""What a StreamWriter knows of its stream between transactions, and how it keeps that knowledge current.

See :mod:`arrays.stream_writer` for the contract: the state is trusted
only under the commit lock and only if nothing else changed the stream's
keys; it follows the transaction it joined (kept at commit, dropped at
abort).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from windvane import neostore

from . import row_log
from .changes import ChangeLog
from .errors import StreamError, StreamNotFoundError
from .metadata import METADATA_KEY, ArrayMeta
from .stream_schema import TIME, group_attrs, stream_path
from .tail import Tail, row_chunked, tail_for
from .transaction import Transaction
from .workers import weighted_map


@dataclass
class WriterState:
    """The stream as the writer knows it: its group, and one Tail per array (``time`` first)."""

    group_raw: bytes
    tails: dict[str, Tail]
    appends: int = 0  # appends written on top of this state: what a staged append checks
    # Arrays not chunked by whole rows (written by other tools): appends go through Stream.
    foreign: bool = False
    keys: tuple[str, ...] = ()  # whose change invalidates the state
    meta_keys: tuple[str, ...] = ()  # those of them that do not move as rows are added (see _remember)
    names: frozenset[str] | None = None  # the column names, once asked (see held_columns)
    bound: dict[str, bytes] = field(default_factory=dict)  # the oids of those keys that have one
    oids: frozenset[bytes] = frozenset()
    meta_bound: bool = False  # every one of meta_keys is in bound (see _remember)
    # The row log (see arrays.row_log), when every array has the same chunk rows (else
    # appends rewrite partial chunks). ``base``: rows in stored chunks, this transaction's
    # writes included; ``committed``/``committed_base``: length and base as of the last
    # commit; ``log_*``: that commit's log revision (serial None: there is none).
    logged: bool = True
    base: int = 0
    committed: int = 0
    committed_base: int = 0
    log_serial: bytes | None = None
    log_after: bytes = neostore.ZERO
    log_rows: int = 0
    written: row_log.Revision | None = None  # the revision this transaction writes
    bound_until: int = 0  # the chunks before this one have their names bound (see _bind_ahead)
    # With a row log, what ``keys`` follow from: the partial chunk's index and whether there is one.
    keys_at: tuple[int, bool] | None = None
    shed: bool = False  # the tails let go of the partial chunk's rows (the row log keeps them): see shed

    @property
    def logged_from(self) -> int:
        """The row this transaction's log revision starts its rows at (earlier ones are in the log already)."""
        return max(self.committed, self.base)


#: What an append takes: a mapping of column name to values, or a list of them appended in order.


class StateKeeper:
    """The state of a writer of stream ``tag`` of ``store``, loaded under the lock and kept while valid."""

    def __init__(
        self,
        store: neostore.Store,
        tag: str,
        *,
        quarantine: bool = False,
        changes: ChangeLog | None = None,
    ):
        self.store = store
        self.tag = tag
        self.quarantine = quarantine
        self.path = stream_path(tag, quarantine=quarantine)
        self.changes = changes if changes is not None else ChangeLog(store)
        self._group_key = f"{self.path}/{METADATA_KEY}"
        self._log_key = row_log.log_key(self.path)
        self._state: WriterState | None = None
        # The transaction whose writes the state includes (None: the state is
        # the committed stream as of tid ``_seen``), and its write mark after
        # our last write to it; ``_head``: the newest commit when it locked.
        self._tx: Transaction | None = None
        self._mark = 0
        self._head = neostore.ZERO
        self._seen = neostore.ZERO
        self._hooked: Transaction | None = None  # the transaction our callbacks are registered with
        self.loads = 0

    # -- keeping the state current ------------------------------------------------------

    @property
    def state(self) -> WriterState | None:
        """The state held (None: none; :meth:`current` loads it)."""
        return self._state

    @property
    def joined(self) -> bool:
        """Whether the state includes the writes of a transaction still under way."""
        return self._tx is not None

    @property
    def log_key(self) -> str:
        """The key of the stream's row log."""
        return self._log_key

    def drop(self) -> None:
        """Let go of the state: the next :meth:`current` loads it afresh."""
        self._state = None
        self._tx = None

    def wrote(self, tx: Transaction, state: WriterState) -> None:
        """``state`` now includes what its writer just wrote in ``tx``: its own writes keep it valid there."""
        self._remember(tx, state)
        self._mark = tx.write_mark()

    def current(self, tx: Transaction) -> WriterState:
        """The state, valid in ``tx`` under the commit lock: kept if nothing changed it, else reloaded."""
        if tx.state != "open":
            raise StreamError(f"the transaction is {tx.state}; append to stream {self.tag!r} in an open one")
        tx.lock()
        state = self._state
        if state is not None and not self._still_valid(tx, state):
            state = self._state = None
            self._tx = None
        if state is None:
            state = self._load(tx)
        return state

    def _still_valid(self, tx: Transaction, state: WriterState) -> bool:
        if self._tx is not None:
            # Joined a transaction already: valid if it is this one and only we wrote our keys since.
            return self._tx is tx and not tx.written_since(self._mark, state.keys)
        if tx.written_since(0, state.keys):
            return False  # something else in this transaction wrote the stream
        head = tx.head()
        if head != self._seen and self.changes.changed(self._seen, head, state.oids):
            return False
        self._join(tx, head)
        return True

    def _join(self, tx: Transaction, head: bytes) -> None:
        """From now the state includes ``tx``'s writes: follow its end."""
        self._tx = tx
        self._head = head
        self._mark = tx.write_mark()
        if self._hooked is not tx:
            self._hooked = tx
            tx.on_commit(lambda tid: self._committed(tx, tid))
            tx.on_abort(lambda: self._aborted(tx))

    def _committed(self, tx: Transaction, tid: bytes) -> None:
        self._hooked = None
        if self._tx is not tx:
            return
        self._tx = None
        self.changes.record(tid, tx.written_oids(), after=self._head)
        state = self._state
        if state is None or tx.written_since(self._mark, state.keys):
            self._state = None  # written behind our back after our last append: reload next time
            return
        self._seen = tid
        if state.written is not None:
            state.log_serial, state.log_after, state.log_rows = tid, state.written.after, state.written.rows
            state.written = None
        state.committed, state.committed_base = state.base + state.log_rows, state.base

    def _aborted(self, tx: Transaction) -> None:
        self._hooked = None
        if self._tx is tx:
            self.drop()

    def _load(self, tx: Transaction) -> WriterState:
        """Read the group, every array's metadata, partial chunk and row log, in ``tx`` (holding the lock)."""
        self.loads += 1
        head = tx.head()
        if tx.written_since(0, [self._log_key]):
            tx.fold(self.path)  # another writer's log rows in this transaction: into the chunks first
        docs = tx.raw_get_many([self._group_key, self._log_key])
        group_raw = docs.get(self._group_key)
        if group_raw is None:
            raise StreamNotFoundError(f"no stream {self.tag!r} at {self.path!r}; create it with create_stream")
        attrs = group_attrs(group_raw, self.path)
        names = [TIME, *attrs.get("columns", [])]
        meta_keys = {name: f"{self.path}/{name}/{METADATA_KEY}" for name in names}
        metas_raw = tx.raw_get_many(list(meta_keys.values()))
        metas: dict[str, ArrayMeta] = {}
        for name, key in meta_keys.items():
            raw = metas_raw.get(key)
            if raw is None:
                raise StreamError(f"stream {self.tag!r} lists column {name!r} but has no array for it; it is damaged")
            metas[name] = ArrayMeta.from_bytes(raw, f"{self.path}/{name}")
        state = WriterState(group_raw, {})
        if not all(row_chunked(m) for m in metas.values()):
            state.foreign = True
        else:
            state.logged = len({m.chunks[0] for m in metas.values()}) == 1
            log_raw = docs.get(self._log_key)
            revision = None if log_raw is None else row_log.Revision.from_bytes(log_raw, self._log_key)
            pending: dict[str, np.ndarray] = {}
            if revision is not None and revision.rows:
                if any(m.shape[0] != revision.base for m in metas.values()):
                    raise StreamError(
                        f"stream {self.tag!r}: its arrays' lengths {[m.shape[0] for m in metas.values()]} do not "
                        f"match its row log (base {revision.base}); something wrote them outside windvane"
                    )
                revisions = tx.log_chain(self._log_key, revision)
                pending = {n: row_log.pending_rows(m, n, revisions, self._log_key) for n, m in metas.items()}
            state.tails = self._tails(tx, metas, pending)
            state.base = metas[TIME].shape[0]
            state.committed_base = state.base
            state.committed = state.tails[TIME].length
            if revision is not None:
                state.log_serial = self._committed_serial(tx)
                state.log_after, state.log_rows = revision.after, revision.rows
        self._state = state
        self._remember(tx, state)
        self._join(tx, head)
        return state

    def _committed_serial(self, tx: Transaction) -> bytes | None:
        """The serial of the log's latest committed revision (None: it has none)."""
        oid = tx.oids([self._log_key]).get(self._log_key)
        if oid is None:
            return None
        try:
            return self.store.load(oid)[1]
        except neostore.POSKeyError:
            return None  # first written by this transaction

    def _tails(self, tx: Transaction, metas: dict[str, ArrayMeta], pending: dict[str, np.ndarray]) -> dict[str, Tail]:
        partial: dict[str, str] = {}
        for name, meta in metas.items():
            rows = meta.chunks[0]
            if meta.shape[0] % rows:
                partial[name] = row_log.last_chunk_key(f"{self.path}/{name}", meta, meta.shape[0])
        values = tx.raw_get_many(list(partial.values()))

        def decode(name: str) -> tuple[str, np.ndarray | None]:
            meta, value = metas[name], values.get(partial.get(name, ""))
            if value is None:
                return name, None
            try:
                return name, meta.codec.decode(value, meta.chunks)
            except Exception as exc:  # noqa: BLE001 - numcodecs raises many kinds; name the chunk
                raise StreamError(f"chunk {partial[name]!r} does not decode with {meta.codec.names}: {exc}") from None

        weight = sum(metas[n].chunk_nbytes for n in partial)
        chunks = dict(weighted_map(decode, list(metas), weight))
        tails = {name: tail_for(f"{self.path}/{name}", meta, chunks[name]) for name, meta in metas.items()}
        for name, logged in pending.items():
            if any(job.full for job in tails[name].append(logged)):
                raise StreamError(f"stream {self.tag!r}: its row log holds more rows than its last chunk takes")
        return tails

    def _remember(self, tx: Transaction, state: WriterState) -> None:
        """Note the keys (and their oids) whose change by anyone else makes ``state`` stale.

        Keys are looked up when they change (a chunk filled); between, only
        this transaction's new writes are added. A key still unbound then
        (a partial chunk the log holds) is left out until the keys change:
        nothing binds it but a write that also moves the arrays' length or
        empties the log (a chunk filling, a fold), whose keys are watched.
        """
        at = None
        if state.logged:  # every array has the time array's chunk rows and length: its partial chunk tells
            index, rest = divmod(state.tails[TIME].length, state.tails[TIME].rows_per_chunk)
            at = (index, rest != 0)
            if at == state.keys_at and state.meta_bound:
                return  # the keys are as they were, and what is unbound is a partial chunk's key
        state.keys_at = at
        if not state.meta_keys:
            state.meta_keys = (
                self._group_key,
                self._log_key,
                *(f"{self.path}/{name}/{METADATA_KEY}" for name in state.tails),
            )
        keys_now = state.meta_keys + tuple(k for k in (t.partial_key for t in state.tails.values()) if k is not None)
        if keys_now == state.keys:
            if state.meta_bound:
                return  # what is unbound is a partial chunk's key, left out until the keys change
            found = tx.oids([k for k in keys_now if k not in state.bound], written_only=True)
            if not found:
                return
            state.bound.update(found)
        else:
            state.keys, state.bound = keys_now, tx.oids(keys_now)
        state.oids = frozenset(state.bound.values())
        state.meta_bound = all(k in state.bound for k in state.meta_keys)
