"""`windvane import` of real-world headers and types: names a store key cannot hold, blank and repeated
header cells, `--rename`, types from the whole first file, and missing integers and bools.

In-process with click's CliRunner (the real command, real SQLite stores and
files); values are read back through arrays, ``to_pandas()`` and `windvane
export`, so the test sees what a user does.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
import xarray as xr
from click.testing import CliRunner

from windvane import arrays, neostore
from windvane.cli import cli as windvane_cli
from windvane.ingest import Batch
from windvane.ingest.committer import GroupCommitter
from windvane.ingest.errors import SchemaError
from windvane.ingest.schema import SchemaSet, load_schema, parse_schema

T0 = 1_700_000_000
INT64_MIN = -9223372036854775808


def run(*args: str):
    return CliRunner().invoke(windvane_cli, list(args), catch_exceptions=False)


def imported(url: str, path, *args: str, tag: str = "t", rejects: bool = False):
    """Import ``path``; it exits 0, or 3 (rows quarantined) if ``rejects``."""
    result = run("import", str(path), "--store", url, "--tag", tag, *args)
    assert result.exit_code == (3 if rejects else 0), result.output
    return result


def quarantined(url: str, tag: str = "t") -> list[tuple[str, bytes]]:
    q = arrays.open_stream(url, tag, quarantine=True)
    return list(zip(q["reason"][:].tolist(), q["raw"][:].tolist()))


# -- names --------------------------------------------------------------------------------------


UNITS_CSV = "Time,Water flow [l/s],POA [W/m²]\n" + "".join(
    f"2024-06-01T12:00:{i:02d}Z,{1.25 + i},{800 + i}\n" for i in range(5)
)


def test_csv_headers_with_slashes_keep_their_names_end_to_end(sqlite_url, tmp_path):
    path = tmp_path / "plant.csv"
    path.write_text(UNITS_CSV, encoding="utf-8")
    imported(sqlite_url, path)
    s = arrays.open_stream(sqlite_url, "t")
    assert s.columns == ["Water flow [l%2Fs]", "POA [W%2Fm²]"]  # the keys: arrays.column_key's escape
    assert s["Water flow [l/s]"][:].tolist() == [1.25, 2.25, 3.25, 4.25, 5.25]
    assert s["POA [W%2Fm²]"].attrs["name"] == "POA [W/m²]"
    frame = s.to_pandas()
    assert list(frame.columns) == ["Water flow [l/s]", "POA [W/m²]"]
    assert frame["POA [W/m²]"].tolist() == [800, 801, 802, 803, 804]
    assert s.to_arrow().column_names == ["time", "Water flow [l/s]", "POA [W/m²]"]

    for fmt in ("parquet", "csv", "zarr", "netcdf"):
        out = tmp_path / f"out.{fmt}"
        result = run("export", "t", "--store", sqlite_url, "--to", str(out), "--format", fmt)
        assert result.exit_code == 0, result.output
    assert pq.read_table(tmp_path / "out.parquet").to_pydict()["Water flow [l/s]"] == [1.25, 2.25, 3.25, 4.25, 5.25]
    text = (tmp_path / "out.csv").read_text(encoding="utf-8")
    assert text.splitlines()[0] == '"time","Water flow [l/s]","POA [W/m²]"'
    assert pacsv.read_csv(tmp_path / "out.csv").column("POA [W/m²]").to_pylist() == [800, 801, 802, 803, 804]
    # Array formats name variables by key (a "/" would be a group there) and keep the name as an attribute.
    for data in (xr.open_zarr(tmp_path / "out.zarr"), xr.open_dataset(tmp_path / "out.netcdf", engine="h5netcdf")):
        with data:
            assert data["Water flow [l%2Fs]"].attrs["name"] == "Water flow [l/s]"
            assert data["Water flow [l%2Fs]"].values.tolist() == [1.25, 2.25, 3.25, 4.25, 5.25]


def test_parquet_column_names_a_key_cannot_hold(sqlite_url, tmp_path):
    path = tmp_path / "plant.parquet"
    pq.write_table(
        pa.table({"time": [T0, T0 + 1], "a/b..c": [1.5, 2.5], "zarr.json": ["x", "y"], "tab\there": [7, 8]}), path
    )
    imported(sqlite_url, path, "--time-unit", "s")
    s = arrays.open_stream(sqlite_url, "t")
    assert s.columns == ["a%2Fb%2E%2Ec", "zarr%2Ejson", "tab%09here"]
    frame = s.to_pandas()
    assert frame.to_dict("list") == {"a/b..c": [1.5, 2.5], "zarr.json": ["x", "y"], "tab\there": [7, 8]}


def test_rename_names_a_column_otherwise(sqlite_url, tmp_path):
    path = tmp_path / "plant.csv"
    path.write_text(UNITS_CSV, encoding="utf-8")
    imported(sqlite_url, path, "--rename", "Water flow [l/s]=flow_ls", "--rename", "POA [W/m²]=poa")
    s = arrays.open_stream(sqlite_url, "t")
    assert s.columns == ["flow_ls", "poa"] and s["poa"][:].tolist() == [800, 801, 802, 803, 804]


@pytest.mark.parametrize(
    "rename,message",
    [
        ("flow=x", "--rename flow=x: the file has no column 'flow'; it has ['Time', 'Water flow [l/s]', 'POA [W/m²]']"),
        ("POA [W/m²]=Time", "--rename POA [W/m²]=Time: the file has a column 'Time' already"),
        ("flow", "--rename 'flow': write it as OLD=NEW, both names not empty"),
    ],
)
def test_rename_errors_exit_2(sqlite_url, tmp_path, rename, message):
    path = tmp_path / "plant.csv"
    path.write_text(UNITS_CSV, encoding="utf-8")
    result = run("import", str(path), "--store", sqlite_url, "--tag", "t", "--rename", rename)
    assert result.exit_code == 2 and message in result.stderr, result.output
    assert "Traceback" not in result.output


def test_the_printed_schema_pins_the_types_of_a_new_stream(sqlite_url, tmp_path):
    path = tmp_path / "plant.csv"
    path.write_text(UNITS_CSV, encoding="utf-8")
    result = imported(sqlite_url, path, "--verbose")
    hint = (
        f"stream 't' is new: its columns are typed from {path} (integer and bool columns store a missing "
        "value as their 'fill'). To pin them, save this as t.toml and pass --schema t.toml:\n"
    )
    assert hint in result.stderr
    toml = result.stderr.split(hint, 1)[1].split(f"{path}:", 1)[0]
    assert toml == (
        'kind = "sensor"\ntags = ["t"]\nextra = "reject"\n\n'
        '[[fields]]\nname = "Water flow [l/s]"\ndtype = "float64"\n\n'
        f'[[fields]]\nname = "POA [W/m²]"\ndtype = "int64"\nfill = {INT64_MIN}\n'
    )
    (tmp_path / "t.toml").write_text(toml, encoding="utf-8")
    assert [(f.name, f.dtype, f.fill) for f in load_schema(tmp_path / "t.toml").fields] == [
        ("Water flow [l/s]", "float64", None),
        ("POA [W/m²]", "int64", INT64_MIN),
    ]
    again = imported(sqlite_url, path, "--schema", str(tmp_path / "t.toml"), tag="pinned")
    assert "is new" not in again.stderr
    assert arrays.open_stream(sqlite_url, "pinned").to_pandas().equals(arrays.open_stream(sqlite_url, "t").to_pandas())


def test_blank_and_repeated_header_cells_are_named_by_position(sqlite_url, tmp_path):
    path = tmp_path / "logger.csv"
    path.write_text("time,,temp,temp\n2024-01-01T00:00:00Z,1,20.5,21.5\n2024-01-01T00:00:01Z,2,20.25,21.25\n")
    result = imported(sqlite_url, path)
    assert (
        f"note: {path}: column 2 has no name: it is named 'column_2' (--rename column_2=NAME names it otherwise)\n"
    ) in result.stderr
    assert (
        f"note: {path}: column 4 has the name of column 3, 'temp': it is named 'column_4' "
        "(--rename column_4=NAME names it otherwise)\n"
    ) in result.stderr
    frame = arrays.open_stream(sqlite_url, "t").to_pandas()
    assert frame.to_dict("list") == {"column_2": [1, 2], "temp": [20.5, 20.25], "column_4": [21.5, 21.25]}
    imported(sqlite_url, path, "--rename", "column_4=temp_2", tag="renamed")
    assert arrays.open_stream(sqlite_url, "renamed").columns == ["column_2", "temp", "temp_2"]


def test_blank_and_repeated_parquet_column_names(sqlite_url, tmp_path):
    path = tmp_path / "logger.parquet"
    table = pa.Table.from_arrays(
        [pa.array([T0, T0 + 1]), pa.array([1, 2]), pa.array([3.5, 4.5]), pa.array(["a", "b"])],
        names=["time", "", "x", "x"],
    )
    pq.write_table(table, path)
    result = imported(sqlite_url, path, "--time-unit", "s")
    assert f"note: {path}: column 4 has the name of column 3, 'x': it is named 'column_4'" in result.stderr
    frame = arrays.open_stream(sqlite_url, "t").to_pandas()
    assert frame.to_dict("list") == {"column_2": [1, 2], "x": [3.5, 4.5], "column_4": ["a", "b"]}


# -- types --------------------------------------------------------------------------------------


def test_a_decimal_after_60000_integers_makes_the_column_float(sqlite_url, tmp_path):
    path = tmp_path / "flow.csv"
    flows = [str(i % 1000) for i in range(60_000)]
    flows[55_000] = "592.2"
    path.write_text("time,flow\n" + "".join(f"{T0 + i},{v}\n" for i, v in enumerate(flows)))
    result = imported(sqlite_url, path, "--commit-mb", "1", "--verbose")
    assert 'name = "flow"\ndtype = "float64"\n' in result.stderr
    assert f"{path}: 60,000 rows, 0 rejected" in result.stdout
    s = arrays.open_stream(sqlite_url, "t")
    assert s["flow"].dtype == np.float64
    assert s["flow"][:].tolist() == [float(v) for v in flows]


def test_a_word_in_a_float_column_is_quarantined_and_the_column_stays_float(sqlite_url, tmp_path):
    path = tmp_path / "power.csv"
    rows = [f"{T0 + i},{i * 0.5},{i}" for i in range(2000)]
    rows[3] = f"{T0 + 3},abc,3"  # in the first block, whatever --commit-mb is
    path.write_text("time,power,n\n" + "\n".join(rows) + "\n")
    result = imported(sqlite_url, path, rejects=True)
    assert f"{path}: 1,999 rows, 1 rejected" in result.stdout
    assert "first reason: field 'power': 'abc' is not a float64" in result.stdout
    s = arrays.open_stream(sqlite_url, "t")
    assert s["power"].dtype == np.float64 and s["n"].dtype == np.int64
    assert s["power"][:].tolist() == [i * 0.5 for i in range(2000) if i != 3]
    assert quarantined(sqlite_url) == [("field 'power': 'abc' is not a float64", f"{T0 + 3},abc,3".encode())]


def test_a_column_of_words_stays_text(sqlite_url, tmp_path):
    path = tmp_path / "codes.csv"
    codes = ["A1", "12", "B7", "13"] * 10
    path.write_text("time,code\n" + "".join(f"{T0 + i},{c}\n" for i, c in enumerate(codes)))
    imported(sqlite_url, path)
    assert arrays.open_stream(sqlite_url, "t")["code"][:].tolist() == codes


def test_a_later_file_that_does_not_fit_the_stream_says_which_column(sqlite_url, tmp_path):
    first, later = tmp_path / "day1.csv", tmp_path / "day2.csv"
    first.write_text("time,count\n" + "".join(f"{T0 + i},{i}\n" for i in range(10)))
    later.write_text("time,count\n" + "".join(f"{T0 + 10 + i},{i + 0.5}\n" for i in range(3)))
    result = imported(sqlite_url, first)
    again = imported(sqlite_url, later, rejects=True)
    assert "is new" not in again.stderr
    assert f"{later}: 0 rows, 3 rejected" in again.stdout
    assert "first reason: field 'count': '0.5' is not a int64" in again.stdout
    assert [r for r, _ in quarantined(sqlite_url)] == [f"field 'count': '{i + 0.5}' is not a int64" for i in range(3)]
    assert result.exit_code == 0


# -- missing values ------------------------------------------------------------------------------------


def test_missing_integers_and_bools_are_stored_with_their_fill(sqlite_url, tmp_path):
    path = tmp_path / "counts.csv"
    path.write_text(
        "time,count,ok,label\n2024-01-01T00:00:00Z,1,true,a\n2024-01-01T00:00:01Z,,,\n2024-01-01T00:00:02Z,3,false,c\n"
    )
    result = imported(sqlite_url, path, "--verbose")
    assert f"{path}: 3 rows, 0 rejected" in result.stdout
    assert f'name = "count"\ndtype = "int64"\nfill = {INT64_MIN}\n' in result.stderr
    assert 'name = "ok"\ndtype = "bool"\nfill = false\n' in result.stderr
    s = arrays.open_stream(sqlite_url, "t")
    assert s["count"][:].tolist() == [1, INT64_MIN, 3] and s["count"].attrs["missing"] == INT64_MIN
    assert s["ok"][:].tolist() == [True, False, False] and s["label"][:].tolist() == ["a", "", "c"]
    frame = s.to_pandas()
    assert str(frame["count"].dtype) == "Int64" and frame["count"].tolist() == [1, pd.NA, 3]
    assert s.to_arrow().column("count").to_pylist() == [1, None, 3]
    out = tmp_path / "out.parquet"
    assert run("export", "t", "--store", sqlite_url, "--to", str(out), "--format", "parquet").exit_code == 0
    assert pq.read_table(out).column("count").to_pylist() == [1, None, 3]
    out = tmp_path / "out.zarr"
    assert run("export", "t", "--store", sqlite_url, "--to", str(out), "--format", "zarr").exit_code == 0
    with xr.open_zarr(out) as data:
        # xarray honours the export's fill value: the missing count is NaN, not a number
        assert data["count"].values[[0, 2]].tolist() == [1.0, 3.0] and np.isnan(data["count"].values[1])
    with xr.open_zarr(out, mask_and_scale=False) as raw:
        assert raw["count"].values.tolist() == [1, INT64_MIN, 3]
        assert raw["count"].attrs["_FillValue"] == INT64_MIN and raw["count"].attrs["missing"] == INT64_MIN


def test_missing_integers_of_a_parquet_file(sqlite_url, tmp_path):
    path = tmp_path / "counts.parquet"
    pq.write_table(
        pa.table(
            {
                "time": [T0, T0 + 1, T0 + 2],
                "n": pa.array([5, None, 7], pa.int32()),
                "u": pa.array([1, 2, None], pa.uint16()),
            }
        ),
        path,
    )
    result = imported(sqlite_url, path, "--time-unit", "s")
    assert f"{path}: 3 rows, 0 rejected" in result.stdout
    s = arrays.open_stream(sqlite_url, "t")
    assert s["n"][:].tolist() == [5, -2147483648, 7] and s["u"][:].tolist() == [1, 2, 65535]
    frame = s.to_pandas()
    assert [str(t) for t in frame.dtypes] == ["Int32", "UInt16"]
    assert frame["n"].tolist() == [5, pd.NA, 7] and frame["u"].tolist() == [1, 2, pd.NA]
    # A second file into the stream knows the fill from the stream.
    later = tmp_path / "later.parquet"
    pq.write_table(
        pa.table({"time": [T0 + 3], "n": pa.array([None], pa.int32()), "u": pa.array([9], pa.uint16())}), later
    )
    imported(sqlite_url, later, "--time-unit", "s")
    assert arrays.open_stream(sqlite_url, "t")["n"][:].tolist() == [5, -2147483648, 7, -2147483648]


def test_column_key_is_the_name_when_it_can_be():
    assert arrays.column_key("power_kW") == "power_kW"
    assert arrays.column_key("50% [l/s]") == "50%25 [l%2Fs]"  # "%" is escaped only with the rest
    assert arrays.column_key("50%") == "50%"
    assert [arrays.column_key(n) for n in (".", "..", "zarr.json", "a\nb")] == ["%2E", "%2E%2E", "zarr%2Ejson", "a%0Ab"]


def test_a_field_name_is_printable_text_that_fits_a_key():
    fields = [{"name": "Water flow [l/s]", "dtype": "float64"}, {"name": "POA [W/m²]", "dtype": "float32"}]
    schema = parse_schema({"kind": "sensor", "tags": ["t"], "fields": fields}, name="plant")
    assert [f.name for f in schema.fields] == ["Water flow [l/s]", "POA [W/m²]"]
    for name, message in ((" ", "a field name is printable text, not blank"), ("x" * 300, "is 300 bytes of UTF-8")):
        with pytest.raises(SchemaError, match=message):
            parse_schema({"kind": "sensor", "tags": ["t"], "fields": [{"name": name, "dtype": "str"}]}, name="plant")


def test_a_name_too_long_for_a_key_is_a_clear_error(sqlite_url, tmp_path):
    path = tmp_path / "long.csv"
    path.write_text(f"time,{'flow ' * 60}\n{T0},1\n")
    result = run("import", str(path), "--store", sqlite_url, "--tag", "t")
    assert (
        result.exit_code == 2
        and "is 300 bytes of UTF-8; the limit is 255; name the column otherwise with --rename OLD=NEW" in result.stderr
    ), result.output


async def test_served_records_with_such_field_names_are_stored_by_key(sqlite_url):
    """A schema file may name fields as files do: records through the committer land under the escaped key."""
    schema = parse_schema(
        {
            "kind": "sensor",
            "tags": ["plant.**"],
            "fields": [{"name": "Water flow [l/s]", "dtype": "float64"}, {"name": "n", "dtype": "int32", "fill": -1}],
        },
        name="plant",
    )
    with neostore.open(sqlite_url) as store:
        committer = GroupCommitter(store, SchemaSet((schema,)))
        committer.start()
        try:
            receipt = await committer.submit(
                [
                    Batch(
                        "plant.a",
                        [T0, T0 + 1],
                        [{"Water flow [l/s]": 1.5, "n": 3}, {"Water flow [l/s]": 2.5}],
                        source="test",
                        size=100,
                    )
                ]
            )
        finally:
            committer.close()
        assert (receipt.accepted, receipt.quarantined) == (2, 0)
        with arrays.open_stream(store, "plant.a") as s:
            assert s.columns == ["Water flow [l%2Fs]", "n", "extra"]
            assert s["Water flow [l/s]"][:].tolist() == [1.5, 2.5] and s["n"][:].tolist() == [3, -1]
            assert s.to_pandas()["n"].tolist() == [3, pd.NA]


# -- delimiters -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "delimiter"), [("semi.csv", ";"), ("tabs.tsv", "\t"), ("pipes.csv", "|"), ("semi_decimals.csv", ";")]
)
def test_the_delimiter_is_sniffed(sqlite_url, tmp_path, name, delimiter):
    path = tmp_path / name
    comma = name == "semi_decimals.csv"  # European: ';' between fields, ',' in the numbers
    rows = [["2024-01-01T00:00:00Z", "1,5" if comma else "1.5", "30"], ["2024-01-01T00:01:00Z", "2.5", "31"]]
    path.write_text("\n".join(delimiter.join(r) for r in [["date", "temp", "hum"], *rows]) + "\n")
    imported(sqlite_url, path)
    frame = arrays.open_stream(sqlite_url, "t").to_pandas()
    assert list(frame.columns) == ["temp", "hum"]
    assert frame["hum"].tolist() == [30, 31]
    assert frame["temp"].tolist() == (["1,5", "2.5"] if comma else [1.5, 2.5])


def test_delimiter_option_reads_a_file_the_sniffer_cannot(sqlite_url, tmp_path):
    path = tmp_path / "colons.csv"
    path.write_text("time:v\n1700000000:1\n1700000001:2\n")
    result = run("import", str(path), "--store", sqlite_url, "--tag", "t")
    assert result.exit_code == 2 and "the columns are ['time:v']" in result.output
    imported(sqlite_url, path, "--delimiter", ":")
    assert arrays.open_stream(sqlite_url, "t")["v"][:].tolist() == [1, 2]
    tabs = tmp_path / "tabs.txt"
    tabs.write_text("time\tv\n1700000002\t3\n")
    imported(sqlite_url, tabs, "--format", "csv", "--delimiter", "tab")
    assert arrays.open_stream(sqlite_url, "t")["v"][:].tolist() == [1, 2, 3]
    bad = run("import", str(path), "--store", sqlite_url, "--tag", "t", "--delimiter", ";;")
    assert bad.exit_code == 2 and "--delimiter ';;': give one character" in bad.output


# -- times from elsewhere ------------------------------------------------------------------------------------


def test_a_csv_without_a_time_column_takes_row_times(sqlite_url, tmp_path):
    path = tmp_path / "samples.csv"
    path.write_text("temp,hum\n1.5,30\n2.5,31\n3.5\n")  # the last row is short: rejected, still counted
    refused = run("import", str(path), "--store", sqlite_url, "--tag", "t")
    assert refused.exit_code == 2 and "--time-from row --start TIME" in refused.output
    no_start = run("import", str(path), "--store", sqlite_url, "--tag", "t", "--time-from", "row")
    assert no_start.exit_code == 2 and "--time-from row needs --start TIME" in no_start.output
    args = ("--time-from", "row", "--start", "2024-01-01T00:00:00Z", "--row-interval", "0.5")
    imported(sqlite_url, path, *args, rejects=True)
    with path.open("a") as f:  # rows appended since: the resumed import numbers them on
        f.write("4.5,33\n")
    imported(sqlite_url, path, *args)
    s = arrays.open_stream(sqlite_url, "t")
    start = 1_704_067_200 * 10**9
    assert s["time"][:].tolist() == [start, start + 5 * 10**8, start + 15 * 10**8]
    assert s["hum"][:].tolist() == [30, 31, 33]


def test_parquet_rows_take_arrival_or_row_times(sqlite_url, tmp_path):
    path = tmp_path / "values.parquet"
    pq.write_table(pa.table({"v": [1.0, 2.0, 3.0]}), path)
    before = time.time_ns()
    imported(sqlite_url, path, "--time-from", "arrival", tag="arrived")
    after = time.time_ns()
    times = arrays.open_stream(sqlite_url, "arrived")["time"][:].tolist()
    assert len(times) == 3 and all(before <= t <= after for t in times)
    imported(sqlite_url, path, "--time-from", "row", "--start", "1700000000", "--row-interval", "1e-9", tag="rows")
    assert arrays.open_stream(sqlite_url, "rows")["time"][:].tolist() == [T0 * 10**9 + i for i in range(3)]


def test_time_from_with_a_time_column_says_to_rename_it(sqlite_url, tmp_path):
    path = tmp_path / "timed.csv"
    path.write_text("time,v\n1700000000,1\n")
    result = run("import", str(path), "--store", sqlite_url, "--tag", "t", "--time-from", "arrival")
    assert result.exit_code == 2 and "--rename time=NAME" in result.output
    imported(sqlite_url, path, "--time-from", "arrival", "--rename", "time=logged")
    assert arrays.open_stream(sqlite_url, "t")["logged"][:].tolist() == [T0]
    both = run("import", str(path), "--store", sqlite_url, "--tag", "u", "--time-from", "row", "--time-column", "v")
    assert both.exit_code == 2 and "give no --time-column" in both.output


# -- missing-value tokens -----------------------------------------------------------------------------------


def test_na_tokens_are_missing_values_before_typing(sqlite_url, tmp_path):
    path = tmp_path / "nil.csv"
    values = ["nil" if i % 50 == 0 else str(i * 1.5) for i in range(200)]  # 2%: more than the stray words a
    labels = ["-" if i % 3 == 0 else f"l{i}" for i in range(200)]  # number column keeps
    path.write_text("time,v,label\n" + "".join(f"{T0 + i},{v},{lb}\n" for i, (v, lb) in enumerate(zip(values, labels))))
    imported(sqlite_url, path, tag="plain")
    assert arrays.open_stream(sqlite_url, "plain")["v"].dtype != np.float64  # what the user saw: text
    result = imported(sqlite_url, path, "--na", "nil,-", "--verbose", tag="t")
    assert 'name = "v"\ndtype = "float64"\n' in result.stderr
    s = arrays.open_stream(sqlite_url, "t")
    got = s["v"][:]
    assert np.isnan(got[::50]).all() and got[1:50].tolist() == [i * 1.5 for i in range(1, 50)]
    assert s["label"][:].tolist() == ["" if i % 3 == 0 else f"l{i}" for i in range(200)]
