"""VLenRows (arrays.vlen_rows): str and bytes rows appended as the records their chunks hold.

Appended through a StreamWriter they must store exactly what the same
values appended as lists or arrays store, and read back as the same values:
every chunk, partial or full, every append crossing chunk boundaries, staged
or shed. Real SQLite files and the suite's real MariaDB.
"""

from __future__ import annotations

import concurrent.futures

import numpy as np
import pyarrow as pa
import pytest

from tests.arrays.test_stream_writer import SIZES, assert_same_streams
from tests.arrays.test_streams import COLUMNS, rows
from windvane import arrays, neostore
from windvane.arrays import Column, VLenRows
from windvane.arrays.codecs import codec_for

TEXTS = ["", "héllo", "日本語", "x" * 20_000, "tab\tline\n", "🚀", "", "\x00nul"]
BLOBS = [b"", b"\x00\xff", "日本".encode(), b"y" * 5_000, b""]


def serialised(rows: dict[str, object]) -> dict[str, object]:
    """``rows`` with its str and bytes columns as VLenRows made from Arrow arrays."""
    out = dict(rows)
    out["msg"] = VLenRows.from_arrow(pa.array(rows["msg"], pa.large_string()))
    out["raw"] = VLenRows.from_arrow(pa.array(rows["raw"], pa.binary()))
    return out


@pytest.mark.parametrize("kind", [pa.string(), pa.large_string(), pa.binary(), pa.large_binary()])
def test_records_are_the_codecs_own(kind):
    values = TEXTS if pa.types.is_string(kind) or pa.types.is_large_string(kind) else BLOBS
    text = values is TEXTS
    codec = codec_for(None, np.dtypes.StringDType() if text else np.dtype(object))
    array = pa.array(values * 3, kind).slice(2, 9)  # an offset into the buffers, as a part's slice has
    rows = VLenRows.from_arrow(array)
    items = array.to_pylist()
    assert len(rows) == len(items) and rows.text == text
    assert bytes(rows.records) == codec.serialize_items(np.array(items, dtype=object))
    assert rows.to_numpy().tolist() == items
    assert rows.to_numpy().dtype == (np.dtypes.StringDType() if text else np.dtype(object))
    assert np.asarray(rows).tolist() == items
    for start, stop in [(0, 0), (0, 9), (3, 7), (8, 9), (5, 2)]:
        part = rows[start:stop]
        assert part.to_numpy().tolist() == items[start:stop]
        assert bytes(part.records) == codec.serialize_items(np.array(items[start:stop], dtype=object))
    # Slices joined (each begins inside the buffer): the rows end to end, as records and as values.
    joined = VLenRows.concat([rows[3:5], rows[0:0], rows[8:9], rows[1:2]])
    assert joined.to_numpy().tolist() == items[3:5] + items[8:9] + items[1:2]
    assert bytes(joined.records) == codec.serialize_items(np.array(items[3:5] + items[8:9] + items[1:2], dtype=object))
    assert joined.offsets.dtype == np.int64 and joined.offsets[0] == 0


def test_empty_arrays_and_what_is_refused():
    assert len(VLenRows.from_arrow(pa.array([], pa.large_string()))) == 0
    assert VLenRows.from_arrow(pa.array([""], pa.string())).to_numpy().tolist() == [""]
    assert VLenRows.from_arrow(pa.array([], pa.string())).to_numpy().dtype == np.dtypes.StringDType()
    with pytest.raises(arrays.ColumnError, match="null"):
        VLenRows.from_arrow(pa.array(["a", None], pa.large_string()))
    with pytest.raises(arrays.ColumnError, match="int64"):
        VLenRows.from_arrow(pa.array([1, 2]))
    with pytest.raises(IndexError):
        VLenRows.from_arrow(pa.array(["a", "b"]))[::2]


def test_appends_store_what_lists_store(store_url):
    """Appends that start, fill, cross and exactly end chunks, two in a transaction, a list of parts
    mixing VLenRows and lists: the same chunks, byte for byte, and the same values read back."""
    store = neostore.open(store_url)
    try:
        for tag in ("vlen", "lists"):
            arrays.create_stream(store, tag, COLUMNS, chunk_rows=16).close()
        writer, plain = arrays.StreamWriter(store, "vlen"), arrays.StreamWriter(store, "lists")
        start = 0
        for k, n in enumerate(SIZES):
            data = rows(start, n)
            with arrays.transaction(store) as tx:
                if k % 3 == 2:  # a list of parts, one serialised, one not
                    half = n // 2
                    first = {name: values[:half] for name, values in data.items()}
                    rest = {name: values[half:] for name, values in data.items()}
                    assert writer.append(tx, [serialised(first), rest]) == start + n
                else:
                    assert writer.append(tx, serialised(data)) == start + n
                plain.append(tx, data)
            start += n
        assert_same_streams(store, "vlen", "lists")
        with arrays.open_stream(store, "vlen") as stream:
            assert stream["msg"].dtype == np.dtypes.StringDType()
            assert stream["msg"][:].tolist() == rows(0, start)["msg"]
            assert stream["raw"][:].tolist() == rows(0, start)["raw"]
    finally:
        store.close()


def test_staged_and_shed_appends_store_what_lists_store(sqlite_url):
    """Staged while the commit before runs, and with the partial chunk's rows shed after each commit."""
    store = neostore.open(sqlite_url)
    try:
        for tag in ("vlen", "lists"):
            arrays.create_stream(store, tag, COLUMNS, chunk_rows=16).close()
        writer, plain = arrays.StreamWriter(store, "vlen"), arrays.StreamWriter(store, "lists")
        start = 0
        with concurrent.futures.ThreadPoolExecutor(1) as committer:
            for k, n in enumerate(SIZES):
                data = rows(start, n)
                staged = writer.stage(serialised(data))
                tx = arrays.Transaction(store)
                assert writer.append(tx, staged) == start + n
                committer.submit(tx.commit).result()
                if k % 2:
                    writer.shed()
                with arrays.transaction(store) as tx:
                    plain.append(tx, data)
                start += n
        assert_same_streams(store, "vlen", "lists")
    finally:
        store.close()


def test_a_new_writer_goes_on_from_a_partial_chunk_of_vlen_rows(sqlite_url):
    """A partial chunk written from VLenRows is read back (decoded) by a writer made afresh."""
    store = neostore.open(sqlite_url)
    try:
        for tag in ("vlen", "lists"):
            arrays.create_stream(store, tag, COLUMNS, chunk_rows=16).close()
        start = 0
        for n in (5, 7, 9, 30):
            data = rows(start, n)
            with arrays.transaction(store) as tx:
                arrays.StreamWriter(store, "vlen").append(tx, serialised(data))
                arrays.StreamWriter(store, "lists").append(tx, data)
            start += n
        assert_same_streams(store, "vlen", "lists")
    finally:
        store.close()


def test_stream_append_takes_them_too(sqlite_url):
    """The general path (Stream.append) converts them to values."""
    for tag in ("vlen", "lists"):
        arrays.create_stream(sqlite_url, tag, COLUMNS, chunk_rows=16).close()
    with arrays.open_stream(sqlite_url, "vlen") as vlen, arrays.open_stream(sqlite_url, "lists") as lists:
        vlen.append(serialised(rows(0, 21)))
        lists.append(rows(0, 21))
    store = neostore.open(sqlite_url)
    try:
        assert_same_streams(store, "vlen", "lists")
    finally:
        store.close()


def test_a_column_of_another_kind_refuses_them(sqlite_url):
    columns = [Column("msg", "str"), Column("raw", "bytes"), Column("pair", "str", inner=(2,))]
    arrays.create_stream(sqlite_url, "s", columns, chunk_rows=16).close()
    store = neostore.open(sqlite_url)
    try:
        writer = arrays.StreamWriter(store, "s")
        text, blobs = VLenRows.from_arrow(pa.array(["a"])), VLenRows.from_arrow(pa.array([b"a"]))
        good = {"time": [1], "msg": text, "raw": blobs, "pair": np.array([["a", "b"]], dtype=np.dtypes.StringDType())}
        for name, wrong in [("msg", blobs), ("raw", text), ("pair", text)]:
            with pytest.raises(arrays.ColumnError, match=name):
                with arrays.transaction(store) as tx:
                    writer.append(tx, {**good, name: wrong})
        with arrays.transaction(store) as tx:
            assert writer.append(tx, good) == 1
    finally:
        store.close()
