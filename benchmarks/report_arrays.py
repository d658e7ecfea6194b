"""Print the issue-3 arrays table from pytest-benchmark's JSON output.

    .venv/bin/python benchmarks/report_arrays.py /tmp/arrays.json [--markdown]

Throughput is MB/s (10^6 bytes per second) of the array's raw bytes, from
each benchmark's median round (worst-best in brackets). Ratios to zarr's
LocalStore are recomputed here from the medians (and, in square brackets,
from the best rounds: on a noisy machine the best round is the steadier
figure), so they do not depend on the order the tests ran in.
"""

from __future__ import annotations

import sys

from report import fmt_mbps, parse_report_args, table

# (label, test, baseline test, goal or None)
THROUGHPUT = [
    ("write, zarr LocalStore", "write_localstore", None, None),
    ("write, zarr LocalStore, concurrency 64", "write_localstore_tuned", "write_localstore", None),
    ("write, Icechunk 1.1 (local fs)", "write_icechunk", "write_localstore", None),
    ("write, BigArray on SQLite", "write_bigarray_sqlite", "write_localstore", 0.9),
    ("write, BigArray on SQLite", "write_bigarray_sqlite", "write_localstore_tuned", 0.9),
    ("write, BigArray on MariaDB", "write_bigarray_mariadb", "write_localstore", 0.9),
    ("write, BigArray on MariaDB", "write_bigarray_mariadb", "write_localstore_tuned", 0.9),
    ("write, BigArray on SQLite, one transaction", "write_bigarray_sqlite_one_transaction", "write_localstore", 0.9),
    ("read, zarr LocalStore", "read_localstore", None, None),
    ("read, zarr LocalStore, concurrency 64", "read_localstore_tuned", "read_localstore", None),
    ("read, Icechunk 1.1 (local fs)", "read_icechunk", "read_localstore", None),
    ("read, BigArray on SQLite", "read_bigarray_sqlite", "read_localstore", 0.9),
    ("read, BigArray on SQLite", "read_bigarray_sqlite", "read_localstore_tuned", 0.9),
    ("read, BigArray on MariaDB", "read_bigarray_mariadb", "read_localstore", 0.9),
    ("read, BigArray on MariaDB", "read_bigarray_mariadb", "read_localstore_tuned", 0.9),
    ("dedup re-write, BigArray on SQLite", "dedup_bigarray_sqlite", "write_bigarray_sqlite", None),
]

APPENDS = [
    ("zarr Array.append, LocalStore", "append_localstore"),
    ("BigArray.append, SQLite", "append_bigarray_sqlite"),
    ("BigArray.append, MariaDB", "append_bigarray_mariadb"),
]


def main(argv: list[str] | None = None) -> int:
    args, doc, benches = parse_report_args(__doc__.splitlines()[0], argv)
    benches = {name.removeprefix("arrays_"): row for name, row in benches.items()}

    machine = doc.get("machine_info", {})
    wv = machine.get("windvane", {})
    print(
        f"run: {doc.get('datetime', '?')}  python {machine.get('python_version', '?')}  "
        f"machine: {wv.get('nproc', '?')} x {wv.get('cpu_model', '?')}, {wv.get('mem_total_gib', '?')} GiB RAM"
    )
    any_row = next(iter(benches.values()), None)
    if any_row:
        extra = any_row["extra"]
        print(
            f"codec: {extra.get('codec')}, chunks {extra.get('chunks')}; data compresses "
            f"{extra.get('data_ratio_blosc_shuffle', float('nan')):.2f}x with it, "
            f"{extra.get('data_ratio_zstd', float('nan')):.2f}x with plain zstd at the same level"
        )
    sizes = {row["bytes"] for row in benches.values() if row["bytes"]}
    print(
        f"array size: {', '.join(f'{s / 2**20:.0f} MiB' for s in sorted(sizes))}; "
        "MB/s = 10^6 raw bytes/s, median round (worst-best); ratio of medians [ratio of best rounds]\n"
    )

    rows = []
    for label, name, base, goal in THROUGHPUT:
        row = benches.get(name)
        if row is None or "mbps" not in row:
            rows.append([label, "-", "-", "-", "-", "not run"])
            continue
        ratio = "-"
        status = ""
        if base and base in benches and "mbps" in benches[base]:
            value = row["mbps"] / benches[base]["mbps"]
            best = row["mbps_best"] / benches[base]["mbps_best"]
            ratio = f"{value:.2f} [{best:.2f}] (vs {base})"
            if goal is not None:
                status = "MET" if value >= goal else "MISSED"
        stored = row["extra"].get("stored_bytes")
        rows.append(
            [
                label,
                str(row["rounds"]),
                fmt_mbps(row),
                ratio,
                f"{stored / 1e6:.0f}" if stored else "-",
                (f"goal >= {goal:g}: " if goal else "") + status,
            ]
        )
    print(table(rows, ["benchmark", "rounds", "MB/s", "ratio", "stored MB", "status"], args.markdown))
    print()

    rows = []
    for label, name in APPENDS:
        row = benches.get(name)
        if row is None or "first_window_s" not in row["extra"]:
            rows.append([label] + ["-"] * 7 + ["not run"])
            continue
        e = row["extra"]
        vs = e.get("per_append_vs_baseline")
        rows.append(
            [
                label,
                str(e["appends"]),
                f"{e['first_window_s']:.2f}",
                f"{e['last_window_s']:.2f}",
                f"{e['last_over_first']:.2f}",
                f"{e['append_ms_median_first']:.1f} / {e['append_ms_median_last']:.1f}",
                f"{e['appends_per_s']:.0f}",
                f"{vs:.2f}x" if vs else "-",
                ("MET" if e["last_over_first"] <= 1.2 else "MISSED") + " (<= 1.2)",
            ]
        )
    window = next((b["extra"]["window"] for b in benches.values() if "window" in b["extra"]), "?")
    print(
        table(
            rows,
            [
                "appends of 1,000 rows",
                "appends",
                f"first {window} s",
                f"last {window} s",
                "last/first",
                "median ms first/last",
                "appends/s",
                "time vs zarr",
                "status",
            ],
            args.markdown,
        )
    )

    dedup = benches.get("dedup_bigarray_sqlite")
    if dedup:
        e = dedup["extra"]
        print(
            f"\ndedup: a second array with the same data grew the stored values by {e['value_growth']:.2%} "
            f"({e['values_before'] / 1e6:.0f} -> {e['values_after'] / 1e6:.0f} MB) and the SQLite file by "
            f"{e['file_growth']:.2%} (goal < 2%: {'MET' if e['value_growth'] < 0.02 else 'MISSED'})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
