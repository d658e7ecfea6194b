"""Print the issue-2 table from pytest-benchmark's JSON output.

    .venv/bin/python benchmarks/report.py /tmp/bench.json [--markdown]

Throughput is MB/s (10^6 bytes per second) of the values' raw bytes, from
each benchmark's median round (best and worst rounds in brackets). Ratios
are recomputed here from the medians, so they do not depend on the order
the tests ran in.
"""

from __future__ import annotations

import argparse
import json
import sys

MB = 1e6

# (label, neostore test, baseline test, how the ratio reads, goal or None)
COMPARISONS = [
    ("1. commit, MariaDB", "commit_mariadb_neostore", "commit_mariadb_raw", "neostore / raw", 0.8),
    (
        "1. commit, MariaDB (vs 1 INSERT/value)",
        "commit_mariadb_neostore",
        "commit_mariadb_raw_per_row",
        "neostore / raw",
        0.8,
    ),
    ("1. commit, SQLite", "commit_sqlite_neostore", "commit_sqlite_raw", "neostore / raw", 0.8),
    ("2. commit vs NEO-like path", "commit_mariadb_neostore", "commit_mariadb_neo_like", "neostore faster by", None),
    ("3. re-commit (dedup), MariaDB", "recommit_mariadb_neostore", "commit_mariadb_neostore", "vs first commit", 5.0),
    ("3. re-commit (dedup), SQLite", "recommit_sqlite_neostore", "commit_sqlite_neostore", "vs first commit", 5.0),
    ("4. read, MariaDB", "read_mariadb_neostore", "read_mariadb_raw", "neostore / raw", 0.8),
    ("4. read, SQLite", "read_sqlite_neostore", "read_sqlite_raw", "neostore / raw", 0.8),
    ("4b. read via load_many, MariaDB", "read_mariadb_neostore_load_many", "read_mariadb_raw", "neostore / raw", 0.8),
    ("4b. read via load_many, SQLite", "read_sqlite_neostore_load_many", "read_sqlite_raw", "neostore / raw", 0.8),
    ("4c. read, SQLite, vs memory-mapped raw", "read_sqlite_neostore", "read_sqlite_raw_mmap", "neostore / raw", 0.8),
    (
        "4c. read via load_many, SQLite, vs memory-mapped raw",
        "read_sqlite_neostore_load_many",
        "read_sqlite_raw_mmap",
        "neostore / raw",
        0.8,
    ),
]


def load(path: str) -> tuple[dict, dict[str, dict]]:
    with open(path) as f:
        doc = json.load(f)
    benches = {}
    for bench in doc["benchmarks"]:
        name = bench["name"].removeprefix("test_")
        stats = bench["stats"]
        nbytes = bench["extra_info"].get("bytes")
        row = {
            "group": bench.get("group"),
            "rounds": stats["rounds"],
            "median": stats["median"],
            "min": stats["min"],
            "max": stats["max"],
            "bytes": nbytes,
            "extra": bench["extra_info"],
        }
        if nbytes:
            row["mbps"] = nbytes / stats["median"] / MB
            row["mbps_best"] = nbytes / stats["min"] / MB
            row["mbps_worst"] = nbytes / stats["max"] / MB
        benches[name] = row
    return doc, benches


def fmt_mbps(row: dict) -> str:
    return f"{row['mbps']:.0f} ({row['mbps_worst']:.0f}-{row['mbps_best']:.0f})"


def table(rows: list[list[str]], header: list[str], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths)), "  ".join("-" * w for w in widths)]
    out += ["  ".join(str(x).ljust(w) for x, w in zip(r, widths)) for r in rows]
    return "\n".join(out)


def parse_report_args(description: str, argv: list[str] | None) -> tuple[argparse.Namespace, dict, dict[str, dict]]:
    """The report scripts' command line (a results JSON, ``--markdown``), and the loaded results."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("json", help="pytest-benchmark --benchmark-json output")
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables")
    args = parser.parse_args(argv)
    doc, benches = load(args.json)
    return args, doc, benches


def main(argv: list[str] | None = None) -> int:
    args, doc, benches = parse_report_args(__doc__.splitlines()[0], argv)

    machine = doc.get("machine_info", {})
    cpu = machine.get("cpu", {})
    print(
        f"run: {doc.get('datetime', '?')}  python {machine.get('python_version', '?')}  "
        f"cpu: {cpu.get('brand_raw', '?')} x{cpu.get('count', '?')}  node: {machine.get('node', '?')}"
    )
    wv = machine.get("windvane")
    if wv:
        dirty = wv.get("neostore_uncommitted_diff_sha1")
        print(
            f"code: {wv.get('commit')}{' + uncommitted neostore diff ' + dirty if dirty else ''}, "
            f"default zstd level {wv.get('neostore_default_zstd_level')}; {wv.get('mariadbd')}; "
            f"sqlite {wv.get('sqlite')}"
        )
        if wv.get("neostore_changed_during_run"):
            print("note: neostore/ was edited during the run (the pack subprocesses may have run newer code)")
        print(
            f"machine: {wv.get('nproc')} x {wv.get('cpu_model')}, {wv.get('mem_total_gib')} GiB RAM, "
            f"disk {wv.get('disk')!r}, /tmp on {wv.get('tmp_fs')!r}"
        )
    sizes = {row["bytes"] for row in benches.values() if row["bytes"]}
    print(
        f"data per benchmark: {', '.join(f'{s / 2**20:.0f} MiB' for s in sorted(sizes))}; "
        "MB/s = 10^6 bytes/s of raw value bytes, median round (worst-best)\n"
    )

    every = []
    for name, row in benches.items():
        if "mbps" not in row:
            continue
        every.append([name, row["group"] or "", str(row["rounds"]), f"{row['median']:.2f}", fmt_mbps(row)])
    print(table(every, ["benchmark", "group", "rounds", "median s", "MB/s"], args.markdown))
    print()

    rows = []
    for label, ours, base, reads_as, goal in COMPARISONS:
        if ours not in benches or base not in benches:
            if not label.startswith("4b."):
                rows.append([label, "-", "-", reads_as, "-", "-", "not run"])
            continue
        a, b = benches[ours], benches[base]
        ratio = a["mbps"] / b["mbps"]
        met = "" if goal is None else ("MET" if ratio >= goal else "MISSED")
        rows.append(
            [
                label,
                f"{a['mbps']:.0f}",
                f"{b['mbps']:.0f} ({base})",
                reads_as,
                f"{ratio:.2f}x" if goal is None or goal > 1 else f"{ratio:.2f}",
                "-" if goal is None else (f">= {goal:g}x" if goal > 1 else f">= {goal:g}"),
                met,
            ]
        )
    print(
        table(rows, ["benchmark", "neostore MB/s", "baseline MB/s", "ratio", "value", "goal", "status"], args.markdown)
    )
    print()

    packs = []
    for kind in ("mariadb", "sqlite"):
        row = benches.get(f"pack_{kind}_neostore")
        if row is None:
            continue
        extra = row["extra"]
        peak = extra.get("peak_rss_mb")
        before, after = extra.get("counts_before", {}), extra.get("counts_after", {})
        packs.append(
            [
                f"5. pack, {kind}",
                f"{extra.get('pack_seconds', float('nan')):.2f}",
                f"{row['median']:.2f}",
                f"{peak:.0f}" if peak is not None else "?",
                f"{extra.get('rss_before_pack_mb', float('nan')):.0f}",
                str(extra.get("revisions_deleted")),
                str(extra.get("data_deleted")),
                f"{before.get('obj')}->{after.get('obj')} / {before.get('data')}->{after.get('data')}",
                "MET" if peak is not None and peak < 200 else "MISSED",
            ]
        )
    if packs:
        print(
            table(
                packs,
                [
                    "benchmark",
                    "pack s",
                    "process s",
                    "peak RSS MB",
                    "RSS before MB",
                    "obj rows removed",
                    "data rows deleted",
                    "obj / data rows",
                    "RSS < 200 MB",
                ],
                args.markdown,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
