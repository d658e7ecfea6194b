"""Row logs (arrays/row_log.py): a commit stores the rows it appends, readers see exactly the stream.

Every reader (streams, BigArray, the zarr store view and zarr-python over
it, time travel, pack) is checked against the values appended, on real
SQLite files and the private MariaDB server.
"""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from tests.arrays.stream_worker import COLUMNS, row_values
from windvane import arrays, neostore
from windvane.arrays import row_log
from windvane.arrays.keys import Snapshot


def _concat(parts: list[dict]) -> dict[str, np.ndarray]:
    out = {}
    for name in parts[0]:
        values = [np.asarray(p[name], dtype=object) if name in ("label", "raw") else np.asarray(p[name]) for p in parts]
        out[name] = np.concatenate(values)
    return out


def _assert_stream(stream: arrays.Stream, expected: dict[str, np.ndarray]) -> None:
    assert len(stream) == len(expected["time"])
    for name, want in expected.items():
        got = stream[name][:]
        if name in ("label", "raw"):
            assert got.tolist() == list(want), name
        else:
            np.testing.assert_array_equal(got, want, err_msg=name)


def _append_all(store: neostore.Store, tag: str, sizes: list[int]) -> tuple[list[dict], list[bytes]]:
    writer = arrays.StreamWriter(store, tag)
    parts, tids = [], []
    for seq, n in enumerate(sizes):
        part = row_values(1, seq, n)
        with arrays.transaction(store) as tx:
            writer.append(tx, part)
        parts.append(part)
        tids.append(store.last_transaction())
    return parts, tids


def test_readers_see_every_row_across_chunk_boundaries(store_url):
    """Appends of 1 to 40 rows into 16-row chunks: the stream, at every commit, is exactly what was appended."""
    arrays.create_stream(store_url, "mixed", COLUMNS, chunk_rows=16).close()
    with neostore.open(store_url) as store:
        sizes = [1, 3, 1, 12, 16, 5, 40, 1, 1, 15, 2, 32, 7]
        parts, tids = _append_all(store, "mixed", sizes)
        with arrays.open_stream(store, "mixed") as stream:
            _assert_stream(stream, _concat(parts))
        for k, tid in enumerate(tids):  # time travel: each commit as it was
            with arrays.open_stream(store, "mixed", at=tid) as stream:
                _assert_stream(stream, _concat(parts[: k + 1]))
        # Only whole chunks were ever written as chunks: the log holds the rest.
        log = row_log.Revision.from_bytes(Snapshot(store).raw_get("streams/mixed/__rows"))
        assert log.base == sum(sizes) // 16 * 16 and log.rows == sum(sizes) % 16


def test_a_commit_stores_what_it_appends(store_url):
    """500 one-row commits: the bytes each commit adds do not grow with the commits before it."""
    arrays.create_stream(
        store_url, "trickle", [arrays.Column("value", "float64"), arrays.Column("msg", "str")], chunk_rows=16384
    ).close()
    with neostore.open(store_url) as store:
        writer = arrays.StreamWriter(store, "trickle")
        stored = []
        for i in range(500):
            with arrays.transaction(store) as tx:
                writer.append(tx, {"time": [i], "value": [i * 0.5], "msg": [f"reading {i}"]})
            if i in (49, 99, 449, 499):
                stored.append(store.value_size())
        early, late = stored[1] - stored[0], stored[3] - stored[2]
        assert late <= early * 1.2, (early, late)  # a rewrite of the partial chunk grows ~10x here
        with arrays.open_stream(store, "trickle") as stream:
            assert stream["msg"][:].tolist() == [f"reading {i}" for i in range(500)]
            np.testing.assert_array_equal(stream["value"][:], np.arange(500) * 0.5)


def test_zarr_sees_the_stream_through_the_store_view(store_url):
    """zarr-python over the store view: full shape, the last chunk made from the log, no log key listed."""
    arrays.create_stream(store_url, "z", COLUMNS, chunk_rows=16).close()
    with neostore.open(store_url) as store:
        parts, _ = _append_all(store, "z", [5, 20, 3])
        expected = _concat(parts)
        view = arrays.ZarrStore(store_url, read_only=True)
        group = zarr.open_group(view, mode="r", path="streams/z")
        np.testing.assert_array_equal(group["value"][:], expected["value"])
        np.testing.assert_array_equal(group["seq"][:], expected["seq"])
        assert group["label"][:].tolist() == list(expected["label"])
        assert "__rows" not in list(group.keys())
        listed = [e.key for e in Snapshot(store).list("streams/z/")]
        assert "streams/z/value/c/1" in listed and not any("__rows" in k for k in listed)
        assert Snapshot(store).size("streams/z/value/c/1") == len(Snapshot(store).get("streams/z/value/c/1"))


def test_other_writers_fold_the_log_first(store_url):
    """A BigArray write to a column, and a Stream append, see and keep the log's rows."""
    arrays.create_stream(store_url, "fold", COLUMNS, chunk_rows=16).close()
    with neostore.open(store_url) as store:
        parts, _ = _append_all(store, "fold", [7, 3])
        with arrays.open_stream(store_url, "fold") as stream:
            stream.append(row_values(2, 0, 4))
        parts.append(row_values(2, 0, 4))
        expected = _concat(parts)
        with arrays.transaction(store) as tx:
            column = arrays.open(tx, "streams/fold/value")
            column[2] = -1.0
        expected["value"][2] = -1.0
        with arrays.open_stream(store, "fold") as stream:
            _assert_stream(stream, expected)
        # The writer that kept the log notices and carries on from the folded stream.
        more, _ = _append_all(store, "fold", [6])
        expected = {k: np.concatenate([v, _concat(more)[k]]) for k, v in expected.items()}
        with arrays.open_stream(store, "fold") as stream:
            _assert_stream(stream, expected)


def test_pack_keeps_the_chains_readers_need(store_url):
    """Pack at a tid inside a chain: the head and every commit from the pack tid on read as before."""
    arrays.create_stream(store_url, "packed", COLUMNS, chunk_rows=16).close()
    with neostore.open(store_url) as store:
        parts, tids = _append_all(store, "packed", [3, 4, 5, 2, 1])
        pack_at = tids[2]
        store.pack(pack_at, keep=row_log.pack_keep(store, pack_at))
        for k in range(2, len(tids)):
            with arrays.open_stream(store, "packed", at=tids[k]) as stream:
                _assert_stream(stream, _concat(parts[: k + 1]))
        # Without keep the chain would be gone: the reader says so rather than return wrong rows.
        store.pack(store.last_transaction())  # the latest revision of the log still needs its chain
        with pytest.raises(row_log.RowLogError, match="packed away"):
            with arrays.open_stream(store, "packed") as stream:
                stream["value"][:]


def test_deleting_a_group_deletes_its_log(store_url):
    """A stream deleted through the zarr store view leaves no log behind for a stream made at its path later."""
    import asyncio

    arrays.create_stream(store_url, "gone", COLUMNS, chunk_rows=16).close()
    with neostore.open(store_url) as store:
        _append_all(store, "gone", [5, 4])
        view = arrays.ZarrStore(store_url)
        asyncio.run(view.delete_dir("streams/gone"))
        view.close()
        assert Snapshot(store).raw_get("streams/gone/__rows") is None
        assert Snapshot(store).raw_list("streams/gone/") == []
        arrays.create_stream(store, "gone", COLUMNS, chunk_rows=16).close()
        parts, _ = _append_all(store, "gone", [3])
        with arrays.open_stream(store, "gone") as stream:
            _assert_stream(stream, _concat(parts))
