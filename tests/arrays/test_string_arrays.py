"""Variable-length string and bytes BigArrays, against numpy and zarr 3.1.6, on real SQLite and MariaDB.

zarr's own ``create_array(dtype=str)`` is the reference: it must read our
arrays, we must read (and append to) its arrays, and both must write the
same chunk bytes (so dedup sees them as one value).
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import zarr
from zarr.core.dtype import VariableLengthBytes

from windvane import arrays, neostore
from windvane.arrays.keys import Snapshot

STRINGS = ["", "a", "héllo wörld", "日本語のログ", "emoji 🚀", "x" * 100_000, "tab\tnew\nline", "nul\x00inside", ""]
BLOBS = [b"", b"\x00", b"\x00\x01\x02\x00", b"plain", bytes(range(256)) * 300, b"trailing nul\x00\x00"]
S = np.dtypes.StringDType()


@pytest.fixture(autouse=True)
def _zarr_bytes_warning():
    # zarr warns when *it* opens a variable_length_bytes array (no v3 spec yet); expected here.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=zarr.errors.UnstableSpecificationWarning)
        yield


def test_strings_round_trip_across_partial_chunks(store_url):
    a = arrays.create(store_url, "logs/msg", (0,), str, chunks=4)
    try:
        assert a.dtype == S and a.fill_value == "" and [c["name"] for c in a.codec] == ["vlen-utf8", "zstd"]
        expected: list[str] = []
        for start in range(0, len(STRINGS), 2):  # appends of 2 into chunks of 4: every other one rewrites
            part = STRINGS[start : start + 2]
            a.append(part)
            expected += part
        a.append(np.array(["numpy", "array"]))  # fixed-width numpy input
        a.append(np.array(["string", "dtype"], dtype=S))
        expected += ["numpy", "array", "string", "dtype"]
        got = a[:]
        assert got.dtype == S and got.tolist() == expected
        assert a[3:8].tolist() == expected[3:8] and a[::-3].tolist() == expected[::-3] and a[-1] == "dtype"
    finally:
        a.close()
    with arrays.open(store_url, "logs/msg") as b:  # a fresh view reads from the database
        assert b[:].tolist() == expected and b.chunks_loaded == -(-len(expected) // 4)


def test_bytes_round_trip_keeps_nuls(store_url):
    with arrays.create(store_url, "raw", (0, 2), bytes, chunks=(3, 2)) as a:
        assert a.dtype == np.dtype(object) and a.fill_value == b""
        rows = np.array([[BLOBS[i], BLOBS[-1 - i]] for i in range(len(BLOBS))], dtype=object)
        a.append(rows[:4])
        a.append(rows[4:])
        a.append(np.array([[b"ba\x00", b"mv"]]))  # numpy fixed-width bytes (which cannot keep trailing NULs)
    with arrays.open(store_url, "raw") as b:
        got = b[:]
        assert got.dtype == object and got.shape == (len(BLOBS) + 1, 2)
        assert got[:-1].tolist() == rows.tolist() and got[-1].tolist() == [b"ba", b"mv"]
        assert all(type(v) is bytes for v in got.reshape(-1))


def test_setitem_and_unwritten_chunks_read_as_fill(sqlite_url):
    with arrays.create(sqlite_url, "grid", (6, 3), str, chunks=(4, 2), fill_value="?") as a:
        ref = np.full((6, 3), "?", dtype=object)
        assert a[:].tolist() == ref.tolist()  # nothing written: the fill value
        a[1:5, 1] = ["b", "c", "d", "e"]
        ref[1:5, 1] = ["b", "c", "d", "e"]
        a[5] = "last"
        ref[5] = "last"
        assert a[:].tolist() == ref.tolist()
        assert a[::2, ::-1].tolist() == ref[::2, ::-1].tolist()


def test_zarr_reads_string_arrays_byte_for_byte(store_url):
    values = np.array(STRINGS * 3, dtype=S)
    with arrays.create(store_url, "g/s", (0,), str, chunks=(10,)) as a:
        a.append(values)
    z = zarr.open_array(arrays.ZarrStore(store_url, read_only=True), path="g/s", mode="r")
    got = z[...]
    assert got.dtype == S and got.tolist() == values.tolist() and z.fill_value == ""
    # zarr's own array of the same data: the same zarr.json codecs and the same chunk bytes.
    zarr_keys: dict = {}  # what zarr's MemoryStore holds, by key
    mem = zarr.storage.MemoryStore(zarr_keys)
    zarr.create_array(mem, name="s", shape=values.shape, chunks=(10,), dtype=str)[...] = values
    theirs_doc = json.loads(zarr_keys["s/zarr.json"].to_bytes())
    with neostore.open(store_url) as s:
        snapshot = Snapshot(s)
        ours_doc = json.loads(snapshot.get("g/s/zarr.json"))
        ours = snapshot.get_many([f"g/s/c/{i}" for i in range(3)])
    assert ours_doc["data_type"] == theirs_doc["data_type"] == "string"
    assert ours_doc["codecs"] == theirs_doc["codecs"] and ours_doc["fill_value"] == theirs_doc["fill_value"]
    assert [ours[f"g/s/c/{i}"] for i in range(3)] == [zarr_keys[f"s/c/{i}"].to_bytes() for i in range(3)]


def test_zarr_reads_bytes_arrays_byte_for_byte(sqlite_url):
    values = np.array(BLOBS * 2, dtype=object)
    with warnings.catch_warnings():
        warnings.simplefilter("error", zarr.errors.UnstableSpecificationWarning)  # we silence it where we create
        with arrays.create(sqlite_url, "b", (0,), bytes, chunks=(5,)) as a:
            a.append(values)
    z = zarr.open_array(arrays.ZarrStore(sqlite_url, read_only=True), path="b", mode="r")
    assert z[...].tolist() == values.tolist()
    zarr_keys: dict = {}  # what zarr's MemoryStore holds, by key
    mem = zarr.storage.MemoryStore(zarr_keys)
    zarr.create_array(mem, name="b", shape=values.shape, chunks=(5,), dtype=VariableLengthBytes())[...] = values
    with neostore.open(sqlite_url) as s:
        ours = Snapshot(s).get_many([f"b/c/{i}" for i in range(3)])
    assert [ours[f"b/c/{i}"] for i in range(3)] == [zarr_keys[f"b/c/{i}"].to_bytes() for i in range(3)]


def test_bigarray_reads_and_appends_to_zarr_string_arrays(store_url):
    z = zarr.create_array(arrays.ZarrStore(store_url), name="z/words", shape=(5, 2), chunks=(2, 2), dtype=str)
    ref = np.array([[f"w{i}{j}é" for j in range(2)] for i in range(5)], dtype=S)
    z[...] = ref
    with arrays.open(store_url, "z/words") as a:
        assert a.dtype == S and a.chunks == (2, 2)
        assert a[:].tolist() == ref.tolist()
        a.append([["new", ""], ["", "x" * 5000]])
    z = zarr.open_array(arrays.ZarrStore(store_url, read_only=True), path="z/words", mode="r")
    assert z[...].tolist() == [*ref.tolist(), ["new", ""], ["", "x" * 5000]]


@pytest.mark.parametrize("codec", [None, "zstd", "gzip", "blosc", "none", {"name": "zstd", "level": 9}])
def test_codec_selection(sqlite_url, codec):
    values = [f"line {i} {'é' * (i % 7)}" for i in range(500)]
    with arrays.create(sqlite_url, "c", (0,), str, chunks=128, codec=codec) as a:
        a.append(values)
        names = [c["name"] for c in a.codec]
    assert names[0] == "vlen-utf8" and names[1:] == (
        [] if codec == "none" else ["zstd" if codec is None else codec if isinstance(codec, str) else codec["name"]]
    )
    with arrays.open(sqlite_url, "c") as b:
        assert b[:].tolist() == values
    z = zarr.open_array(arrays.ZarrStore(sqlite_url, read_only=True), path="c", mode="r")
    assert z[...].tolist() == values


def test_identical_string_chunks_are_stored_once(sqlite_url):
    """Encoding is deterministic: the same strings give the same chunk bytes, which neostore stores once."""
    values = [f"sensor-{i % 13} reading {i * 7}" for i in range(4000)]
    with neostore.open(sqlite_url) as store:
        with arrays.create(store, "one", (0,), str, chunks=1000) as a:
            a.append(values)
        before = store.value_size()
        with arrays.create(store, "two", (0,), str, chunks=1000) as b:
            b.append(np.array(values, dtype=object))  # another input type, the same strings
        grown = store.value_size() - before
        first = Snapshot(store).get_many([f"one/c/{i}" for i in range(4)])
        second = Snapshot(store).get_many([f"two/c/{i}" for i in range(4)])
    assert list(first.values()) == list(second.values())
    assert grown < 4096  # only the new zarr.json documents


def test_wrong_items_are_refused_before_writing(sqlite_url):
    with arrays.create(sqlite_url, "s", (0,), str) as s, arrays.create(sqlite_url, "b", (0,), bytes) as b:
        with pytest.raises(TypeError, match="None"):
            s.append(["ok", None])
        with pytest.raises(TypeError, match="encode the strings first"):
            b.append([b"ok", "text"])
        with pytest.raises(TypeError, match="int"):
            b.append([b"ok", 5])
        assert len(s) == 0 and len(b) == 0  # nothing was committed
    with pytest.raises(arrays.UnsupportedArrayError, match=r"str .*bytes"):
        arrays.create(sqlite_url, "o", (3,), object)  # ambiguous: say str or bytes
    with pytest.raises(arrays.UnsupportedArrayError):
        arrays.create(sqlite_url, "u", (3,), "U5")  # fixed-width strings are not variable-length ones


def test_dtype_spellings(sqlite_url):
    with neostore.open(sqlite_url) as store:
        for i, spelling in enumerate([str, "str", "string", S, np.dtype(str)]):
            assert arrays.create(store, f"s{i}", (1,), spelling).dtype == S
        for i, spelling in enumerate([bytes, "bytes", np.dtype(bytes)]):
            assert arrays.create(store, f"b{i}", (1,), spelling).dtype == np.dtype(object)


def test_blocks_and_time_travel_on_strings(store_url):
    with arrays.create(store_url, "t", (0,), str, chunks=100) as a:
        a.append([f"first {i}" for i in range(250)])
        first = a.tid
        a.append([f"second {i}" for i in range(250)])
        assert [len(block) for _, block in a.blocks(rows=120)] == [120, 120, 120, 120, 20]
        assert np.concatenate([block for _, block in a.blocks()]).tolist() == a[:].tolist()
    with arrays.open(store_url, "t", at=first) as old:
        assert old.shape == (250,) and old[-1] == "first 249"
