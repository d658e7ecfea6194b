"""StreamWriter (arrays.stream_writer): state kept across transactions must give what fresh opens give.

Real SQLite files and the suite's real MariaDB; other writers are separate
processes (tests/arrays/stream_worker.py) or separate Store connections.
"""

from __future__ import annotations

import concurrent.futures
import json

import numpy as np
import pytest

from tests.arrays.stream_worker import COLUMNS as WORKER_COLUMNS
from tests.arrays.stream_worker import row_values
from tests.arrays.test_streams import COLUMNS, check_aligned, race_two_appenders, read_line, rows, start_worker
from windvane import arrays, neostore
from windvane.arrays import Column
from windvane.arrays.keys import Snapshot

# Append sizes that start, fill, cross and exactly end chunks of 16 rows.
SIZES = [1, 1, 3, 11, 16, 17, 2, 40, 15, 1, 32, 0, 5, 64, 1]


def chunk_values(store: neostore.Store, path: str) -> dict[str, bytes]:
    """Every key under ``path`` (relative) -> its value, at the newest commit."""
    snapshot = Snapshot.latest(store)
    entries = snapshot.list(path + "/")
    values = snapshot.get_many([e.key for e in entries])
    return {k[len(path) + 1 :]: v for k, v in values.items()}


def assert_same_streams(store: neostore.Store, a: str, b: str) -> None:
    """Streams ``a`` and ``b`` hold the same rows in every column, stored as the same bytes."""
    with arrays.open_stream(store, a) as sa, arrays.open_stream(store, b) as sb:
        assert sa.columns == sb.columns and len(sa) == len(sb)
        for name in ["time", *sa.columns]:
            got, want = sa[name][:], sb[name][:]
            assert got.dtype == want.dtype and got.shape == want.shape, name
            assert got.tolist() == want.tolist(), name
    ours, theirs = chunk_values(store, f"streams/{a}"), chunk_values(store, f"streams/{b}")
    assert sorted(ours) == sorted(theirs)
    for key in ours:
        if key.endswith("zarr.json"):
            assert json.loads(ours[key]) == json.loads(theirs[key]), key
        else:
            assert ours[key] == theirs[key], key  # codecs are deterministic: same chunks, same bytes


def test_reused_state_matches_fresh_opens(store_url):
    store = neostore.open(store_url)
    try:
        for tag in ("kept", "fresh"):
            arrays.create_stream(store, tag, COLUMNS, chunk_rows=16).close()
        writer = arrays.StreamWriter(store, "kept")
        start = 0
        for k, n in enumerate(SIZES):
            data = rows(start, n)
            with arrays.transaction(store, message=f"append {k}") as tx:
                if k % 4 == 3:  # two appends by the writer in one transaction
                    half = {name: values[: n // 2] for name, values in data.items()}
                    rest = {name: values[n // 2 :] for name, values in data.items()}
                    writer.append(tx, half)
                    assert writer.append(tx, rest) == start + n
                else:
                    assert writer.append(tx, data) == start + n
            with arrays.transaction(store) as tx:
                arrays.open_stream(tx, "fresh").append(data)
            start += n
        assert writer.loads == 1  # read once; the other stream's commits did not touch it
        assert_same_streams(store, "kept", "fresh")
    finally:
        store.close()


def test_strings_as_lists_and_arrays_give_the_same_bytes(sqlite_url):
    store = neostore.open(sqlite_url)
    try:
        columns = [Column("msg", "str"), Column("n", "int64")]
        for tag in ("lists", "arrays"):
            arrays.create_stream(store, tag, columns, chunk_rows=8).close()
        lists, fresh = arrays.StreamWriter(store, "lists"), arrays.StreamWriter(store, "arrays")
        for seq in range(5):
            words = [f"wörd {seq}.{i}" * (i % 3) for i in range(seq + 3)]
            t = np.arange(len(words)) + 100 * seq
            with arrays.transaction(store) as tx:
                lists.append(tx, {"time": t, "msg": words, "n": t})
                fresh.append(tx, {"time": t, "msg": np.array(words, dtype=np.dtypes.StringDType()), "n": t})
        assert_same_streams(store, "lists", "arrays")
        with pytest.raises(arrays.ColumnError):
            with arrays.transaction(store) as tx:
                lists.append(tx, {"time": [1], "msg": [None], "n": [1]})
    finally:
        store.close()


def test_another_process_append_is_noticed(store_url):
    arrays.create_stream(store_url, "shared", WORKER_COLUMNS, chunk_rows=50).close()
    store = neostore.open(store_url)
    try:
        writer = arrays.StreamWriter(store, "shared")
        expected = []
        for seq, n in enumerate([7, 30, 1, 49, 12]):
            with arrays.transaction(store) as tx:
                writer.append(tx, row_values(1, seq, n))
            expected.append((1, seq, n))
            other = start_worker("once", store_url, "shared", "--worker", "2", "--seq", str(seq), "--rows", str(n + 3))
            assert read_line(other) == "done"
            assert other.wait(timeout=60) == 0, other.stderr.read()
            expected.append((2, seq, n + 3))
        with arrays.open_stream(store, "shared") as s:
            t = check_aligned(s)
        want = np.concatenate([row_values(w, q, n)["time"] for w, q, n in expected])
        np.testing.assert_array_equal(t, want)  # every row, in commit order, none lost or doubled
        assert writer.loads == 5  # the first, then once after each of the other process's appends
    finally:
        store.close()


def test_another_connection_adding_a_column_is_noticed(sqlite_url):
    store, other = neostore.open(sqlite_url), neostore.open(sqlite_url)
    try:
        arrays.create_stream(store, "s", [Column("a", "float64")], chunk_rows=4).close()
        writer = arrays.StreamWriter(store, "s")
        with arrays.transaction(store) as tx:
            writer.append(tx, {"time": [1, 2, 3], "a": [1.0, 2.0, 3.0]})
        with arrays.open_stream(other, "s") as s:
            s.add_column(Column("b", "str"))
            s.append({"time": [4], "a": [4.0], "b": ["x"]})
        with arrays.transaction(store) as tx:
            assert writer.columns(tx) == ["a", "b"]
            writer.append(tx, {"time": [5, 6], "a": [5.0, 6.0]}, fill_missing=True)
        with arrays.open_stream(store, "s") as s:
            assert s["time"][:].tolist() == [1, 2, 3, 4, 5, 6]
            assert s["a"][:].tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
            assert s["b"][:].tolist() == ["", "", "", "x", "", ""]
    finally:
        store.close()
        other.close()


def test_other_writes_in_the_same_transaction_are_noticed(sqlite_url):
    store = neostore.open(sqlite_url)
    try:
        arrays.create_stream(store, "s", [Column("a", "int64")], chunk_rows=4).close()
        writer = arrays.StreamWriter(store, "s")
        with arrays.transaction(store) as tx:
            writer.append(tx, {"time": [0, 1], "a": [0, 1]})
            arrays.open_stream(tx, "s").append({"time": [2], "a": [2]})  # behind the writer's back
            assert writer.append(tx, {"time": [3, 4], "a": [3, 4]}) == 5
        with arrays.transaction(store) as tx:
            arrays.open_stream(tx, "s").append({"time": [5], "a": [5]})
            assert writer.append(tx, {"time": [6], "a": [6]}) == 7
        with arrays.open_stream(store, "s") as s:
            assert s["a"][:].tolist() == list(range(7)) and s["time"][:].tolist() == list(range(7))
    finally:
        store.close()


def test_abort_drops_state(store_url):
    store = neostore.open(store_url)
    try:
        arrays.create_stream(store, "s", [Column("a", "float64"), Column("m", "str")], chunk_rows=8).close()
        writer = arrays.StreamWriter(store, "s")
        with arrays.transaction(store) as tx:
            writer.append(tx, {"time": [0, 1, 2], "a": [0.0, 1.0, 2.0], "m": ["0", "1", "2"]})
        with pytest.raises(RuntimeError, match="give up"):
            with arrays.transaction(store) as tx:
                writer.append(tx, {"time": [90, 91], "a": [9.0, 9.1], "m": ["no", "no"]})
                raise RuntimeError("give up")
        assert writer.held_columns is None  # the writer knows nothing of the stream any more
        tx = arrays.Transaction(store)
        writer.append(tx, {"time": [80], "a": [8.0], "m": ["no"]})
        tx.abort()
        assert writer.held_columns is None
        with arrays.transaction(store) as tx:
            assert writer.append(tx, {"time": [3], "a": [3.0], "m": ["3"]}) == 4
        with arrays.open_stream(store, "s") as s:
            assert s["time"][:].tolist() == [0, 1, 2, 3]
            assert s["m"][:].tolist() == ["0", "1", "2", "3"]
    finally:
        store.close()


def test_staged_appends_store_what_plain_appends_store(store_url):
    """Staged while the previous commit runs in another thread: the same bytes as plain appends."""
    store = neostore.open(store_url)
    try:
        for tag in ("staged", "plain"):
            arrays.create_stream(store, tag, COLUMNS, chunk_rows=16).close()
        writer, plain = arrays.StreamWriter(store, "staged"), arrays.StreamWriter(store, "plain")
        with concurrent.futures.ThreadPoolExecutor(1) as committer:
            committing = None
            start = 0
            used, fills = [], []
            for n in SIZES:
                staged = writer.stage(rows(start, n))  # against the rows of the commit still running
                if committing is not None:
                    committing.result()
                tx = arrays.Transaction(store)
                assert writer.append(tx, staged) == start + n
                used.append(staged.used)
                fills.append(start % 16 + n >= 16)
                committing = committer.submit(tx.commit)
                start += n
            committing.result()
        start = 0
        for n in SIZES:
            with arrays.transaction(store) as tx:
                plain.append(tx, rows(start, n))
            start += n
        # Stored as staged, whether it fills a chunk (encoded ahead) or not (its rows' records made ahead
        # for the row log), except the first append (it had no state to stage on) and the empty one.
        assert used == [i > 0 and n > 0 for i, n in enumerate(SIZES)] and any(fills[1:]) and not all(fills[1:])
        assert writer.loads == 1
        assert_same_streams(store, "staged", "plain")
    finally:
        store.close()


def test_records_staged_for_the_row_log_are_used_only_where_they_begin_the_commits_rows(store_url):
    """An append that fills no chunk has its rows' records made when staged; they are the log revision's
    only when no rows came between since the last commit, and one part was staged."""
    store = neostore.open(store_url)
    try:
        for tag in ("staged", "plain"):
            arrays.create_stream(store, tag, COLUMNS, chunk_rows=64).close()
        writer, plain = arrays.StreamWriter(store, "staged"), arrays.StreamWriter(store, "plain")
        with arrays.transaction(store) as tx:
            writer.append(tx, rows(0, 2))
            plain.append(tx, rows(0, 2))
        staged = writer.stage(rows(3, 2))
        with arrays.transaction(store) as tx:
            writer.append(tx, rows(2, 1))  # a row between: the log revision holds it too
            writer.append(tx, staged)
            plain.append(tx, rows(2, 1))
            plain.append(tx, rows(3, 2))
        assert not staged.used
        staged = writer.stage([rows(5, 1), rows(6, 2)])
        with arrays.transaction(store) as tx:
            writer.append(tx, staged)
            plain.append(tx, [rows(5, 1), rows(6, 2)])
        assert not staged.used
        staged = writer.stage(rows(8, 3))
        with arrays.transaction(store) as tx:
            writer.append(tx, staged)
            plain.append(tx, rows(8, 3))
        assert staged.used
        assert_same_streams(store, "staged", "plain")
    finally:
        store.close()


def test_a_list_of_parts_stores_what_their_concatenation_stores(sqlite_url):
    store = neostore.open(sqlite_url)
    try:
        for tag in ("parts", "whole"):
            arrays.create_stream(store, tag, COLUMNS, chunk_rows=16).close()
        parts_writer, whole_writer = arrays.StreamWriter(store, "parts"), arrays.StreamWriter(store, "whole")
        start = 0
        for k, sizes in enumerate([[3, 5], [8, 8, 1], [20], [0, 2, 31, 1], [16, 16]]):
            parts, at = [], start
            for n in sizes:
                parts.append(rows(at, n))
                at += n
            whole = rows(start, at - start)
            with arrays.transaction(store) as tx:
                if k % 2:  # staged
                    staged = parts_writer.stage(parts)
                    assert parts_writer.append(tx, staged) == at
                    assert staged.used
                else:
                    assert parts_writer.append(tx, parts) == at
                assert whole_writer.append(tx, whole) == at
            start = at
        with pytest.raises(arrays.ColumnError, match="unknown"):
            with arrays.transaction(store) as tx:
                parts_writer.append(tx, [rows(start, 2), {"time": [1], "zz": [1]}])
        assert_same_streams(store, "parts", "whole")
    finally:
        store.close()


def test_staged_append_after_a_failed_commit_or_another_writer_encodes_afresh(store_url):
    store, other = neostore.open(store_url), neostore.open(store_url)
    try:
        arrays.create_stream(store, "s", [Column("a", "float64"), Column("m", "str")], chunk_rows=8).close()
        writer = arrays.StreamWriter(store, "s")
        with arrays.transaction(store) as tx:
            writer.append(tx, {"time": [0, 1, 2], "a": [0.0, 1.0, 2.0], "m": ["0", "1", "2"]})
        # An append that fills no chunk is not staged: the row log takes its rows, nothing is encoded.
        assert not writer.stage({"time": [3], "a": [3.0], "m": ["3"]}).encoded
        # staged (filling the chunk) on rows of a transaction that then aborts: not stored
        doomed = arrays.Transaction(store)
        writer.append(doomed, {"time": [90, 91], "a": [9.0, 9.1], "m": ["no", "no"]})
        staged = writer.stage({"time": [3, 4, 5], "a": [3.0, 4.0, 5.0], "m": ["3", "4", "5"]})
        assert staged.encoded
        doomed.abort()
        with arrays.transaction(store) as tx:
            assert writer.append(tx, staged) == 6
        assert not staged.used
        # staged, then another connection appends: encoded again after it
        staged = writer.stage({"time": [7, 8], "a": [7.0, 8.0], "m": ["7", "8"]})
        assert staged.encoded
        with arrays.open_stream(other, "s") as s:
            s.append({"time": [6], "a": [6.0], "m": ["6"]})
        with arrays.transaction(store) as tx:
            assert writer.append(tx, staged) == 9
        assert not staged.used
        # faulty columns: staging says nothing, append says what is wrong
        staged = writer.stage({"time": [9], "zz": [1]})
        assert not staged.encoded
        with pytest.raises(arrays.ColumnError, match="unknown"):
            with arrays.transaction(store) as tx:
                writer.append(tx, staged)
        with arrays.open_stream(store, "s") as s:
            assert s["time"][:].tolist() == list(range(9))
            assert s["m"][:].tolist() == [str(i) for i in range(9)]
    finally:
        store.close()
        other.close()


def test_errors(sqlite_url):
    store = neostore.open(sqlite_url)
    try:
        writer = arrays.StreamWriter(store, "nope")
        with pytest.raises(arrays.StreamNotFoundError):
            with arrays.transaction(store) as tx:
                writer.append(tx, {"time": [1]})
        arrays.create_stream(store, "nope", [Column("a", "float64")]).close()
        with arrays.transaction(store) as tx:
            with pytest.raises(arrays.ColumnError, match="missing"):
                writer.append(tx, {"time": [1]})
            with pytest.raises(arrays.ColumnError, match="unknown"):
                writer.append(tx, {"time": [1], "a": [1.0], "zz": [1]})
            with pytest.raises(arrays.ColumnError, match="differ in length"):
                writer.append(tx, {"time": [1, 2], "a": [1.0]})
            with pytest.raises(arrays.ColumnError, match="time"):
                writer.append(tx, {"a": [1.0]}, fill_missing=True)
            assert writer.append(tx, {"time": [1], "a": [1.0]}) == 1
        with pytest.raises(arrays.StreamError):
            writer.append(tx, {"time": [2], "a": [2.0]})  # that transaction has ended
    finally:
        store.close()


def test_writers_sharing_a_change_log_take_turns(sqlite_url):
    """Many streams, each appended now and then, with another connection writing one of them meanwhile."""
    store, other = neostore.open(sqlite_url), neostore.open(sqlite_url)
    try:
        log = arrays.ChangeLog(store)
        tags = [f"t{k}" for k in range(4)]
        for tag in tags:
            arrays.create_stream(store, tag, [Column("a", "int64")], chunk_rows=4).close()
        writers = {tag: arrays.StreamWriter(store, tag, changes=log) for tag in tags}
        counts = dict.fromkeys(tags, 0)
        for step in range(24):
            tag = tags[step * 7 % 3 + (step % 2)]
            with arrays.transaction(store) as tx:
                n = step % 3 + 1
                values = np.arange(counts[tag], counts[tag] + n)
                writers[tag].append(tx, {"time": values, "a": values})
                counts[tag] += n
            if step % 5 == 0:
                victim = tags[step % 4]
                with arrays.open_stream(other, victim) as s:
                    s.append({"time": [counts[victim]], "a": [counts[victim]]})
                counts[victim] += 1
        for tag in tags:
            with arrays.open_stream(store, tag) as s:
                assert s["a"][:].tolist() == list(range(counts[tag])) == s["time"][:].tolist(), tag
    finally:
        store.close()
        other.close()


def test_a_growing_stream_binds_its_chunk_names_in_few_rounds(store_url):
    """Appends filling a chunk each bind the names of later chunks together, not one round each: on MariaDB
    each round is a database commit of its own."""
    store = neostore.open(store_url)
    try:
        arrays.create_stream(store, "grows", COLUMNS, chunk_rows=16).close()
        writer = arrays.StreamWriter(store, "grows")
        rounds = []
        original = store.oids.new_oids  # a round of bindings takes the oids of its names at once
        store.oids.new_oids = lambda count, **kw: (rounds.append(count), original(count, **kw))[1]
        for k in range(300):
            with arrays.transaction(store) as tx:
                writer.append(tx, rows(16 * k, 16))
        assert sum(rounds) >= (len(writer.held_columns) + 1) * 300  # every chunk written has its name
        assert len(rounds) < 300 / 4, rounds  # a round per chunk at first, then a round per many
        with arrays.open_stream(store, "grows") as stream:
            assert stream["time"][:].tolist() == rows(0, 16 * 300)["time"].tolist()
    finally:
        store.close()


def test_writers_in_two_processes_stay_aligned(store_url):
    """Two processes append through kept writers while this one reads snapshots: nothing lost or misaligned."""
    t, _ = race_two_appenders(store_url, "writer", 5, 100)
    key = t // 10**6
    for worker in (1, 2):  # and each worker's appends in its own order
        seqs = (key[t // 10**12 == worker]) % 10**6
        assert np.all(np.diff(seqs) >= 0)


def test_names_grow_with_the_chunks_filled(store_url):
    """A stream binds a name per chunk it fills and one for its time record, one for its row log, and ahead
    of its appends a quarter of the chunks it has filled (none while it has fewer than 8) with their
    records; it lists what it holds."""
    store = neostore.open(store_url)
    try:
        arrays.create_stream(store, "names", COLUMNS, chunk_rows=16).close()
        writer = arrays.StreamWriter(store, "names")

        def bound() -> int:
            return store.query("SELECT COUNT(*) FROM name")[0][0]

        created = bound()
        for k in range(10):
            with arrays.transaction(store) as tx:
                writer.append(tx, rows(20 * k, 20))
            if k == 5:  # 120 rows: 7 chunks filled, nothing bound ahead yet
                assert bound() == created + 1 + (len(writer.held_columns) + 2) * (120 // 16)
        per_chunk = len(writer.held_columns) + 2  # the arrays' chunks (time's too) and the time record
        # 12 chunks filled: chunk 12 is filling, and the 3 after it are bound ahead
        assert bound() == created + 1 + per_chunk * (200 // 16 + 1 + 200 // 16 // 4)
        with arrays.open_stream(store, "names") as stream:
            assert len(stream) == 200 and stream["time"][:].tolist() == rows(0, 200)["time"].tolist()
        listed = [e.key for e in Snapshot.latest(store).list("streams/names/time/")]
        assert len([k for k in listed if not k.endswith("zarr.json")]) == 13  # ceil(200 / 16) chunks
        assert not [e.key for e in Snapshot.latest(store).list("streams/names/") if "__rows" in e.key]
    finally:
        store.close()


def test_a_writer_that_sheds_its_rows_stores_what_fresh_opens_store(store_url):
    """Rows shed after every commit (the row log keeps them): appends that do not fill the chunk go on
    without them, the one that fills it reads them back once; stored bytes are those of fresh opens,
    staged or not."""
    store = neostore.open(store_url)
    try:
        for tag in ("shed", "fresh"):
            arrays.create_stream(store, tag, COLUMNS, chunk_rows=16).close()
        writer = arrays.StreamWriter(store, "shed")
        start, freed, loads_at_fill = 0, [], []
        with concurrent.futures.ThreadPoolExecutor(1) as committer:
            for k, n in enumerate(SIZES):
                data = rows(start, n)
                fills = start % 16 + n >= 16
                loads = writer.loads
                if k % 2:  # staged while nothing is committing, then appended
                    staged = writer.stage(data)
                    tx = arrays.Transaction(store)
                    writer.append(tx, staged)
                    # Never encoded ahead: filling no chunk its rows' records are made ahead for the row
                    # log (the rows shed are not needed), filling one it is encoded after they are read back.
                    assert not staged.encoded and staged.used == (not fills and n > 0), k
                    committer.submit(tx.commit).result()
                else:
                    with arrays.transaction(store) as tx:
                        writer.append(tx, data)
                if k:
                    loads_at_fill.append((fills, writer.loads - loads))
                with arrays.transaction(store) as tx:
                    arrays.open_stream(tx, "fresh").append(data)
                start += n
                held = writer.held_bytes
                freed.append((held, writer.shed()))
                assert writer.held_bytes == 0
        # Read back exactly when a shed writer's append filled the chunk; never otherwise.
        assert all(reads == (1 if fills else 0) for fills, reads in loads_at_fill), loads_at_fill
        assert any(fills for fills, _ in loads_at_fill) and any(not fills for fills, _ in loads_at_fill)
        assert all(got == held for held, got in freed) and any(got for _, got in freed)
        assert_same_streams(store, "shed", "fresh")
    finally:
        store.close()


def test_a_writer_in_a_transaction_or_without_a_row_log_keeps_its_rows(sqlite_url):
    store = neostore.open(sqlite_url)
    try:
        arrays.create_stream(store, "s", COLUMNS, chunk_rows=16).close()
        writer = arrays.StreamWriter(store, "s")
        tx = arrays.Transaction(store)
        writer.append(tx, rows(0, 3))
        assert writer.held_bytes and writer.shed() == 0  # its rows are not committed yet
        tx.commit()
        assert writer.shed() > 0
        # Columns chunked differently keep no row log: their partial chunks are rewritten, so rows are kept.
        columns = [Column("a", "int64", chunk_rows=8), Column("b", "float64", chunk_rows=16)]
        arrays.create_stream(store, "mixed", columns, chunk_rows=16).close()
        mixed = arrays.StreamWriter(store, "mixed")
        with arrays.transaction(store) as tx:
            mixed.append(tx, {"time": np.arange(3), "a": np.arange(3), "b": np.arange(3.0)})
        assert mixed.held_bytes and mixed.shed() == 0
    finally:
        store.close()


def test_change_log_answers_like_the_store_and_keeps_one_entry_per_object(sqlite_url):
    """Its answers match the store's own history (commits of another connection read back and forth), and
    recording thousands of commits of the same objects keeps one entry per object."""
    store, other = neostore.open(sqlite_url), neostore.open(sqlite_url)
    try:
        log = arrays.ChangeLog(store)
        tids, touched, asked = [], [], 0
        for step in range(40):
            keys = [f"k{(step * 3 + j) % 11}" for j in range(1 + step % 3)]
            with arrays.transaction(other if step % 4 else store) as tx:
                for key in keys:
                    tx.set(key, f"{step}".encode())
                oids = tx.oids(keys)
            tids.append(tx.tid)
            touched.append(set(oids.values()))
            every = set().union(*touched)
            # Asked as writers ask: since their last commit, up to the newest (read under the commit lock).
            for since in sorted({step - 1, step // 2, 0} - {-1}):
                for oid in every:
                    truth = any(oid in touched[i] for i in range(since + 1, step + 1))
                    assert log.changed(tids[since], tids[step], [oid]) == truth, (since, step)
                    asked += 1
        assert asked > 500
        assert len(log) <= len(every)  # the memory bound is the point
        before = tids[-1]
        for _ in range(3000):  # our own commits, recorded as they finish: objects, not commits, are kept
            tid = neostore.p64(neostore.u64(before) + 1)
            log.record(tid, every, after=before)
            before = tid
        assert len(log) == len(every)
    finally:
        store.close()
        other.close()


def test_a_kept_writer_of_text_columns_holds_no_more_per_append(sqlite_url):
    """Hundreds of one-row commits of a text column: the writer keeps where the last appends began, not
    every append's, and stores what fresh opens store."""
    store = neostore.open(sqlite_url)
    try:
        for tag in ("kept", "fresh"):
            arrays.create_stream(store, tag, COLUMNS, chunk_rows=1024).close()
        writer = arrays.StreamWriter(store, "kept")
        for i in range(300):
            staged = writer.stage(rows(i, 1)) if i % 2 else None
            with arrays.transaction(store) as tx:
                writer.append(tx, staged if staged is not None else rows(i, 1))
            with arrays.transaction(store) as tx:
                arrays.open_stream(tx, "fresh").append(rows(i, 1))
        assert 0 < writer.remembered_starts <= 3, writer.remembered_starts
        assert_same_streams(store, "kept", "fresh")
    finally:
        store.close()


def test_set_many_writes_keys_known_bound_to_the_oids_given(sqlite_url):
    # A writer keeping state passes the oids it holds: those names are not looked up, the others are bound.
    with arrays.transaction(sqlite_url) as tx:
        tx.set_many({"g/a": b"1", "g/b": b"2"})
    with arrays.transaction(sqlite_url) as tx:
        known = tx.oids(["g/a"])
        tx.set_many({"g/a": b"3", "g/c": b"4"}, oids=known)
        assert tx.oids(["g/a"]) == known
        assert set(tx.oids(["g/c"])) == {"g/c"}
    with neostore.open(sqlite_url) as store:
        assert Snapshot(store).raw_get_many(["g/a", "g/b", "g/c"]) == {"g/a": b"3", "g/b": b"2", "g/c": b"4"}
