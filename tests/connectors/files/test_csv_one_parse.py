"""A new stream's CSV file is parsed once: the parts take the type pass's tables, and store what parsing each
block again stores (values, types, quarantined rows and their reasons)."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from tests.connectors.files.test_import_formats import T0, quarantined, run
from windvane import arrays
from windvane.connectors.files import ReaderOptions
from windvane.connectors.files.csv import CsvReader

ROWS = 400


def messy_csv() -> bytes:
    """Rows whose blocks differ in type from the file: integers (and a "-0") that a late decimal makes floats, a column empty
    until late, text with empty cells, a number column with null markers and one word, a bad time, a field too
    many, quoted text with a newline, CRLF endings."""
    lines = [b"time,n,late,txt,word,label"]
    for i in range(ROWS):
        time = f"2024-03-01T00:{i // 60:02d}:{i % 60:02d}Z"
        n = "1.5" if i == ROWS - 3 else "-0" if i == 300 else str(i)
        late = str(i * 7) if i > ROWS - 40 else ""
        txt = f"w{i}" if i % 5 == 0 else ""
        word = "oops" if i == 200 else ("NULL" if i % 9 == 0 else "" if i % 11 == 0 else str(i % 13))
        label = f'"l{i}, with\nnewline"' if i % 50 == 7 else f"l{i}"
        line = f"{time},{n},{late},{txt},{word},{label}"
        if i == 120:
            line = f"yesterday,{n},{late},{txt},{word},{label}"
        if i == 250:
            line += ",surplus"
        lines.append(line.encode() + (b"\r" if i % 17 == 0 else b""))
    return b"\n".join(lines) + b"\n"


def stored(url: str, tag: str) -> dict[str, object]:
    with arrays.open_stream(url, tag) as s:
        columns = {name: s[name][:] for name in ["time", *s.columns]}
    return {"columns": columns, "quarantined": quarantined(url, tag)}


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "gzip"])
def test_parts_of_the_type_pass_store_what_a_second_parse_does(sqlite_url, tmp_path, compressed):
    data = messy_csv()
    path = tmp_path / ("messy.csv.gz" if compressed else "messy.csv")
    path.write_bytes(gzip.compress(data) if compressed else data)
    results = {}
    # 0: no table kept, every block parsed again; 10,000 bytes: the first blocks kept, the others parsed again.
    for kept in (ReaderOptions().kept_bytes, 10_000, 0):
        tag = f"messy.k{kept}"
        reader = CsvReader(path, ReaderOptions(block_bytes=2048, kept_bytes=kept))
        result = run(sqlite_url, tag, reader, path, commit_bytes=4096)
        assert (result.rows, result.rejected) == (ROWS - 3, 3)
        results[kept] = stored(sqlite_url, tag)
    first, *others = results.values()
    columns = first["columns"]
    assert {name: v.dtype.kind for name, v in columns.items()} == {
        "time": "i",
        "n": "f",  # integers with one decimal late in the file
        "late": "i",  # no value before its last block
        "txt": "T",
        "word": "i",  # its null markers are missing values, its one word a stray one
        "label": "T",
    }
    good = [i for i in range(ROWS) if i not in (120, 200, 250)]
    assert columns["n"].tolist() == [1.5 if i == ROWS - 3 else -0.0 if i == 300 else float(i) for i in good]
    assert np.signbit(columns["n"]).tolist() == [i == 300 for i in good]  # "-0" is -0.0, as parsed as a float
    assert columns["txt"].tolist() == [f"w{i}" if i % 5 == 0 else "" for i in good]
    assert columns["label"].tolist() == [f"l{i}, with\nnewline" if i % 50 == 7 else f"l{i}" for i in good]
    reasons = [reason for reason, _ in first["quarantined"]]
    assert sorted(reasons) == sorted(
        [
            "field 'word': 'oops' is not a int64",
            "7 fields where the header has 6",
            "column 'time': 'yesterday' is not a time (ISO 8601 or an epoch number)",
        ]
    )
    for other in others:
        assert other["quarantined"] == first["quarantined"]
        assert list(other["columns"]) == list(columns)
        for name, values in columns.items():
            np.testing.assert_array_equal(other["columns"][name], values, err_msg=name)
        assert np.signbit(other["columns"]["n"]).tolist() == np.signbit(columns["n"]).tolist()


def test_a_kept_block_whose_text_column_had_no_value_is_parsed_again(tmp_path):
    """A column empty in a block but text in the file keeps "" (not missing) in that block, as parsing it as
    text does: the block's table, where the column has no type, is not taken as it is."""
    path = tmp_path / "late_text.csv"
    path.write_text("time,note\n" + "".join(f"{T0 + i},\n" for i in range(100)) + f"{T0 + 100},x\n")
    reader = CsvReader(path, ReaderOptions(block_bytes=512))
    reader.file_types()
    parts = list(reader(None))
    notes = [v for p in parts for v in p.table.column("note").to_pylist()]
    assert notes == [""] * 100 + ["x"]


def test_words_crowded_at_the_start_of_a_long_file_leave_it_a_number_column(sqlite_url, tmp_path):
    """The tally stops counting a column's words only once they are too many for any rest of the file: words
    that are most of the first blocks but few in the file are stray ones."""
    path = tmp_path / "warmup.csv"
    values = ["warming" if i < 40 else str(i * 0.5) for i in range(5000)]
    path.write_text("time,v\n" + "".join(f"{T0 + i},{v}\n" for i, v in enumerate(values)))
    result = run(sqlite_url, "warmup", CsvReader(path, ReaderOptions(block_bytes=1024)), path, commit_bytes=1 << 20)
    assert (result.rows, result.rejected) == (4960, 40)
    assert arrays.open_stream(sqlite_url, "warmup")["v"][:].tolist() == [i * 0.5 for i in range(40, 5000)]
