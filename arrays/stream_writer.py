"""StreamWriter: appends to one stream in transaction after transaction, keeping what it needs between them.

Opening a stream per transaction re-reads its ``zarr.json`` documents and the
partial last chunk of every column, and decodes them, before appending one
row. A :class:`StreamWriter` lives across transactions instead::

    writer = arrays.StreamWriter(store, "turbine1")
    with arrays.transaction(store) as tx:
        writer.append(tx, {"time": t_ns, "speed": v, "msg": lines})

Contract:

- **Correct first.** Every append takes the commit lock, then trusts its
  state only if nothing else changed it: no later commit touched the
  stream's group, the columns' ``zarr.json`` or their partial chunks (the
  newest tid is the one it last saw, or :class:`~arrays.changes.ChangeLog`
  lists no change to those oids since), and nothing else in the current
  transaction wrote those keys. Otherwise it reloads them, under the lock,
  as :meth:`arrays.Stream.append` does; so writers in any number of
  processes never lose or misalign rows.
- **State follows the transaction.** An append updates the state at once;
  if the transaction commits the state is the committed stream, if it
  aborts (or its commit fails, or the append itself fails) the state is
  dropped and the next append reloads.
- **Same bytes.** Chunks and metadata are what ``Stream.append`` writes.
- **Encode ahead.** :meth:`StreamWriter.stage` encodes an append's chunks
  outside any transaction, against the state as it stands (the rows of a
  transaction still committing included), so that the encoding overlaps that
  commit. ``append(tx, staged)`` then stores those bytes if the state is
  still the one they were encoded against, and encodes afresh otherwise
  (the commit failed, another process wrote the stream): staging only ever
  spends work, it never changes what is stored. An append that fills no
  chunk of a stream keeping a row log encodes no chunk: staging checks its
  rows and makes their records as the log keeps them, so that the append,
  under the commit lock, only adds them to the log.
- **Rows held or not.** Between transactions a writer whose stream keeps a
  row log may :meth:`~StreamWriter.shed` the rows of the partial chunk it
  holds (the log has them): appends go on without them, and the append
  that fills the chunk reads them back. Thousands of slow streams thus
  keep their writers for the price of their metadata.
- One writer is used by one thread at a time (the commit of a transaction it
  joined may run in another, while that thread stages the next append);
  several writers (of different streams) may join one transaction.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from windvane import neostore

from . import appending, row_log, time_index
from .appending import ChunkJob, Encoded
from .changes import ChangeLog
from .errors import ColumnError, StreamError
from .metadata import METADATA_KEY
from .stream import Stream
from .stream_registry import open_stream
from .stream_schema import TIME, check_column_names
from .tail import Rows, Tail
from .transaction import Transaction
from .writer_state import StateKeeper, WriterState

#: Chunk names bound ahead of a stream that fills chunks, at most: binding is a database commit of its own
#: on MariaDB, which a stream filling chunks in every commit would otherwise pay in each. A quarter of the
#: chunks the stream has filled, so that a small stream binds little it may never write.
_BIND_AHEAD = 64


Columns = Mapping[str, Any] | Sequence[Mapping[str, Any]]


def _parts(columns: Columns) -> list[Mapping[str, Any]]:
    if isinstance(columns, Mapping):
        return [columns]
    if isinstance(columns, (list, tuple)) and all(isinstance(c, Mapping) for c in columns):
        return list(columns)
    raise TypeError(
        f"append takes a mapping of column name to values (or a list of them), not {type(columns).__name__}"
    )


class Staged:
    """An append encoded ahead of its transaction by :meth:`StreamWriter.stage`; pass it to ``append``."""

    def __init__(self, columns: Columns, fill_missing: bool):
        self.columns = columns
        self.fill_missing = fill_missing
        # Set when the encoding could be done: the state and append count it
        # builds on, the tails after it, and the chunks as (key, bytes, compressed, hash).
        self.base: WriterState | None = None
        self.appends = -1
        self.tails: dict[str, Tail] = {}
        self.chunks: list[Encoded] = []
        # Set instead when the append fills no chunk of a stream keeping a row log: the state its rows
        # were checked against, the rows, and (for one part) their records as the log keeps them.
        self.checked_for: WriterState | None = None
        self.rows: list[dict[str, Rows]] = []
        self.records: dict[str, bytes] | None = None
        self.used = False  # set by append: whether it stored what was staged (False: it began afresh)

    @property
    def encoded(self) -> bool:
        return self.base is not None


class StreamWriter:
    """Appends to stream ``tag`` (in ``quarantine/`` if ``quarantine``) of ``store``; see the module docstring.

    ``changes``: a ChangeLog shared by the writers of ``store`` in this
    process (each writer makes its own if not given; sharing one spares a
    query per append when many streams take turns). ``loads``: how many
    times the state was read from the database (a statistic). The state
    kept between appends, and whether it is still valid, is its
    :class:`~arrays.writer_state.StateKeeper`'s.
    """

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
        self._keeper = StateKeeper(store, tag, quarantine=quarantine, changes=changes)
        self.path = self._keeper.path

    @property
    def changes(self) -> ChangeLog:
        """The ChangeLog that tells whether others changed the stream since this writer's last commit."""
        return self._keeper.changes

    @property
    def loads(self) -> int:
        """How many times the state was read from the database."""
        return self._keeper.loads

    def __repr__(self) -> str:
        state = self._keeper.state
        held = "no state" if state is None else f"{len(state.tails)} arrays held"
        return f"<StreamWriter {self.path!r} {held}>"

    # -- the API -------------------------------------------------------------------

    def append(self, tx: Transaction, columns: Columns | Staged, *, fill_missing: bool = False) -> int:
        """Add ``n`` rows to every column of the stream in ``tx``; returns the stream's new length.

        ``columns`` maps each column name, ``"time"`` included, to ``n``
        values, as :meth:`arrays.Stream.append` takes them (numpy arrays;
        str columns may be lists of str); or is a list of such mappings,
        appended in order as one append (sparing the caller concatenating
        them); or is what :meth:`stage` made of either (``fill_missing`` is
        then the staged one). ``fill_missing``: columns left out get their
        fill value (``time`` may not be left out). Takes the commit lock.
        ColumnError for unknown, missing or misshapen columns (nothing
        written); StreamNotFoundError if there is no such stream.
        """
        staged: Staged | None = None
        if isinstance(columns, Staged):
            staged, fill_missing = columns, columns.fill_missing
            parts = _parts(columns.columns)
        else:
            parts = _parts(columns)
        state = self._keeper.current(tx)
        if state.shed and self._needs_rows(state, parts):
            self._keeper.drop()  # the append fills the chunk: read its rows back
            state = self._keeper.current(tx)
        if state.foreign:
            length = len(open_stream(tx, self.tag, quarantine=self.quarantine))
            for part in parts:
                length = self._append_through_stream(tx, part, fill_missing)
            return length
        try:
            if staged is not None and staged.base is state and staged.appends == state.appends:
                state.tails = staged.tails
                self._store(tx, state, staged.chunks)
                staged.used = True
            else:
                checked = staged if staged is not None and staged.checked_for is state else None
                data = checked.rows if checked is not None else self._coerce(state.tails, parts, fill_missing)
                self._forget(state, state.tails)
                if state.logged and not self._needs_rows(state, data):
                    # The staged records are the log's rows since the last commit only if none came between.
                    fresh = checked is not None and state.logged_from == state.tails[TIME].length
                    records = checked.records if checked is not None and fresh else None
                    for part in data:  # the row log takes the rows: no chunk to encode, none to store
                        for name, tail in state.tails.items():
                            tail.extend(part[name])
                    self._store(tx, state, (), records)
                    if staged is not None:
                        staged.used = records is not None
                else:
                    self._store(tx, state, self._encode(state.tails, data, state.logged))
        except BaseException as exc:
            if not isinstance(exc, ColumnError):
                self._keeper.drop()  # a failed write may have advanced the state past what tx holds
            raise
        return state.tails[TIME].length

    def stage(self, columns: Columns, *, fill_missing: bool = False) -> Staged:
        """Encode an append of ``columns`` now, without a transaction; see "Encode ahead" above.

        Encodes against the state the writer holds, if it holds one (the
        rows of a transaction it joined that is still committing included);
        never raises for the columns (``append`` reports their faults) and
        never changes the state.
        """
        staged = Staged(columns, fill_missing)
        state = self._keeper.state
        if state is None or state.foreign:
            return staged
        try:
            fills = self._needs_rows(state, _parts(columns))
        except (ColumnError, TypeError):
            return staged
        if not fills and state.logged:
            # No chunk to encode (the row log takes the rows): check them, and make their records.
            try:
                staged.rows = self._coerce(state.tails, _parts(columns), fill_missing)
            except (ColumnError, StreamError, TypeError):
                return staged
            if len(staged.rows) == 1:
                staged.records = {name: state.tails[name].serialised(rows) for name, rows in staged.rows[0].items()}
            staged.checked_for = state
            return staged
        if state.shed:
            return staged  # append reads the rows back, under the lock, and encodes then
        appends = state.appends
        tails = {name: tail.copy() for name, tail in state.tails.items()}
        try:
            data = self._coerce(tails, _parts(columns), fill_missing)
        except (ColumnError, StreamError, TypeError):
            return staged
        self._forget(state, tails)
        staged.chunks = list(self._encode(tails, data, state.logged))
        staged.base, staged.appends, staged.tails = state, appends, tails
        # Chunks a codec compressed are written incompressible: their uploads to a blob tier can go now,
        # while the commit before this append's is still being made.
        try:
            self.store.send_ahead({digest: value for _, value, compressed, digest in staged.chunks if compressed})
        except neostore.NeoStoreError:
            pass  # the object store is away: the commit sends them, and says so if it cannot
        return staged

    def columns(self, tx: Transaction) -> list[str]:
        """The stream's column names (``time`` left out), current as of ``tx``; takes the commit lock.

        StreamNotFoundError if there is no such stream.
        """
        return [name for name in self._keeper.current(tx).tails if name != TIME]

    @property
    def held_columns(self) -> frozenset[str] | None:
        """The column names (``time`` left out) of the stream as this writer last knew it, without a
        look at the store (None: it knows nothing). Columns are only ever added: the stream has these at
        least, unless it was removed since (an append then says so)."""
        state = self._keeper.state
        if state is None:
            return None
        if state.names is None:
            state.names = frozenset(name for name in state.tails if name != TIME)
        return state.names

    @property
    def held_bytes(self) -> int:
        """Bytes of the stream's pending rows this writer holds in memory (0 when it holds no state)."""
        state = self._keeper.state
        return 0 if state is None else sum(tail.held_bytes for tail in state.tails.values())

    @property
    def remembered_starts(self) -> int:
        """The most rows where appends began that one column's tail remembers (0 when it holds no state):
        what a trickle of appends to a text column keeps between chunks."""
        state = self._keeper.state
        return 0 if state is None else max(tail.remembered_starts for tail in state.tails.values())

    def shed(self) -> int:
        """Let go of the partial chunk's rows held, if the stream's row log keeps them and no transaction
        is under way; returns the bytes freed (0: none, or it could not)."""
        state = self._keeper.state
        if state is None or self._keeper.joined or state.foreign or not state.logged:
            return 0
        freed = sum(tail.shed() for tail in state.tails.values())
        state.shed = True
        return freed

    @staticmethod
    def _forget(state: WriterState, tails: dict[str, Tail]) -> None:
        """The next log revision holds the rows from the committed length on: the tails may forget before."""
        for tail in tails.values():
            tail.forget_before(state.logged_from)

    @staticmethod
    def _needs_rows(state: WriterState, parts: Sequence[Mapping[str, Any]]) -> bool:
        """Whether appending ``parts`` fills the partial chunk (so needs the rows ``state`` may have shed)."""
        rows = 0
        for part in parts:
            if TIME not in part:
                raise ColumnError("an append needs a 'time' column")
            rows += len(part[TIME])
        return state.tails[TIME].fills(rows)

    # -- appending -------------------------------------------------------------------

    def _coerce(
        self, tails: dict[str, Tail], parts: list[Mapping[str, Any]], fill_missing: bool
    ) -> list[dict[str, Rows]]:
        """Each part as rows of every array (ColumnError, before anything changes, if one does not fit)."""
        # Loops rather than dicts and sets of lengths: a trickle stages an append of a row per stream.
        length = tails[TIME].length
        for tail in tails.values():
            if tail.length != length:
                stored = {name: tail.length for name, tail in tails.items()}
                raise StreamError(
                    f"the arrays of stream {self.tag!r} differ in length {stored}: something wrote them outside "
                    "Stream.append; cut them to one length before appending"
                )
        out = []
        for columns in parts:
            if columns.keys() != tails.keys():
                check_column_names(
                    self.tag,
                    [n for n in tails if n not in columns and (not fill_missing or n == TIME)],
                    [n for n in columns if n not in tails],
                    list(tails),
                )
            data = {}
            for name, tail in tails.items():
                if name in columns:
                    data[name] = tail.coerce(self.tag, name, columns[name])
            n = len(data[TIME])
            for rows in data.values():
                if len(rows) != n:
                    lengths = {name: len(v) for name, v in data.items()}
                    raise ColumnError(f"append to stream {self.tag!r}: the columns differ in length: {lengths}")
            if n:
                for name, tail in tails.items():
                    if name not in data:
                        data[name] = tail.blank(n)
                out.append(data)
        return out

    def _encode(self, tails: dict[str, Tail], parts: list[dict[str, Rows]], logged: bool = True) -> Iterator[Encoded]:
        """Advance ``tails`` by each part (coerced) now; the chunks to store, as (key, bytes, compressed,
        hash), encoded as they are taken (so a large append is stored batch by batch, not held whole),
        then the time records of the time chunks filled (:mod:`arrays.time_index`).

        The codec threads hash what they encode: the commit then need not
        (under the commit lock, where no other work overlaps it)."""
        jobs: dict[str, ChunkJob] = {}
        filled: dict[int, np.ndarray] = {}
        for data in parts:
            for name, tail in tails.items():
                for job in tail.append(data[name], encoded=not logged):
                    # A chunk two parts fill is encoded once, by the later job: it
                    # reads the chunk as the tail holds it after both.
                    jobs[job.key] = job
                    if name == TIME and job.full and job.values is not None:
                        filled[job.index] = job.values
        todo = [j for j in jobs.values() if j.full or not logged]
        records = time_index.records(self.path, filled.items())
        return itertools.chain(
            appending.encode(todo, sum(j.weight for j in todo) if len(todo) > 1 else 0),
            ((key, value, False, neostore.value_hash(value)) for key, value in records.items()),
        )

    def _store(
        self, tx: Transaction, state: WriterState, chunks: Iterable[Encoded], records: dict[str, bytes] | None = None
    ) -> None:
        """Write ``chunks`` (those that filled; every one touched when the stream keeps no row log), the
        row log and, when chunks filled, the arrays' metadata, in ``tx``; the state now includes them.
        ``records``: the records of the log's rows since the last commit, when staging made them."""
        batches = appending.Batches(tx, raw=True)
        batches.add(chunks)
        length = state.tails[TIME].length
        if batches.chunks:
            self._bind_ahead(tx, state, length // state.tails[TIME].rows_per_chunk)
        documents: dict[str, bytes] = {}
        if state.logged:
            rows = state.tails[TIME].rows_per_chunk
            base = max(state.base, length - length % rows)
            if base != state.base:
                state.base = base
                for name, tail in state.tails.items():
                    documents[f"{self.path}/{name}/{METADATA_KEY}"] = tail.meta.with_shape(
                        (base, *tail.meta.shape[1:])
                    ).to_bytes()
            documents[self._keeper.log_key] = self._revision(state, length, records).to_bytes()
        else:
            for name, tail in state.tails.items():
                documents[f"{self.path}/{name}/{METADATA_KEY}"] = tail.meta.to_bytes()
        batches.flush(documents, oids=state.bound)
        state.appends += 1
        self._keeper.wrote(tx, state)

    def _bind_ahead(self, tx: Transaction, state: WriterState, current: int) -> None:
        """Bind the names of the chunks after chunk ``current`` (the one filling now) that the stream is
        likely to fill soon, and of their time records, when fewer than half of those are bound: see
        :data:`_BIND_AHEAD`."""
        ahead = min(_BIND_AHEAD, current // 4)
        if ahead < 2 or state.bound_until - current > ahead // 2:
            return
        start, stop = max(state.bound_until, current + 1), current + 1 + ahead
        keys = [key for tail in state.tails.values() for key in tail.chunk_keys(start, stop)]
        tx.bind(keys + [time_index.record_key(self.path, index) for index in range(start, stop)])
        state.bound_until = stop

    def _revision(self, state: WriterState, length: int, records: dict[str, bytes] | None) -> row_log.Revision:
        """The log revision after this transaction's appends so far: the rows it added past the base
        (``records``: theirs, when the caller has them)."""
        if state.base > state.committed_base or not state.log_rows:
            # A chunk filled in this transaction, or the committed log holds no rows: a new chain.
            prev, after = None, state.log_serial or neostore.ZERO
        else:
            prev, after = state.log_serial, state.log_after
        if length <= state.base:
            add = {}
        elif records is not None:
            add = records
        else:
            add = {name: tail.serialised_since(state.logged_from) for name, tail in state.tails.items()}
        state.written = row_log.Revision(state.base, length - state.base, after, prev, add)
        return state.written

    def _append_through_stream(self, tx: Transaction, columns: Mapping[str, Any], fill_missing: bool) -> int:
        """Arrays not chunked by rows: the general (slower) path, keeping no state."""
        self._keeper.drop()
        stream: Stream = open_stream(tx, self.tag, quarantine=self.quarantine)
        if fill_missing:
            columns = dict(columns)
            for name in stream.columns:
                if name not in columns:
                    array = stream[name]
                    columns[name] = np.full(
                        (len(columns[TIME]), *array.shape[1:]), array.fill_value, dtype=array.meta.codec.work_dtype
                    )
        return stream.append(columns)
