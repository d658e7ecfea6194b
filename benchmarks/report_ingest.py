"""Print the issue-4 ingestion table from pytest-benchmark's JSON output.

.venv/bin/python benchmarks/report_ingest.py /tmp/ingest.json [--markdown]
"""

from __future__ import annotations

import sys

from report import parse_report_args, table

EVENTS = [
    ("Forward PackedForward, ~200 B log records", "forward_packed_logs", 300_000),
    ("HTTP NDJSON, ~200 B log records", "http_ndjson_logs", 100_000),
    ("Forward, light load (1 connection, 100-event chunks)", "forward_latency_light_load", None),
]


def main(argv: list[str] | None = None) -> int:
    args, doc, benches = parse_report_args(__doc__.splitlines()[0], argv)
    print(f"run: {doc.get('datetime', '?')}\n")
    rows = []
    for label, kind, goal in EVENTS:
        for backend in ("sqlite", "mariadb"):
            row = benches.get(f"{kind}[{backend}]")
            if row is None:
                continue
            e = row["extra"]
            status = "-" if goal is None else ("MET" if e["events_per_s"] >= goal else "MISSED") + f" (>= {goal:,})"
            rows.append(
                [
                    f"{label}, {backend}",
                    f"{e['events']:,}",
                    f"{e['events_per_s']:,.0f}",
                    f"{e['events_per_s_worst']:,.0f}-{e['events_per_s_best']:,.0f}",
                    f"{e['latency_p50_ms']:.1f} / {e['latency_p99_ms']:.1f}",
                    status,
                ]
            )
    print(
        table(
            rows,
            ["benchmark", "events", "events/s (median)", "range", "ack latency p50 / p99 ms", "goal"],
            args.markdown,
        )
    )
    rows = []
    for backend in ("sqlite", "mariadb"):
        row = benches.get(f"vibration_forward[{backend}]")
        if row is None or "mbps" not in row or "ratio_vs_baseline" not in row["extra"]:
            continue
        e = row["extra"]
        ratio, pairs = e["ratio_vs_baseline"], e["pair_ratios"]
        rows.append(
            [
                f"vibration over Forward, {backend}",
                f"{row['mbps']:.0f}",
                f"{e['baseline_mbps']:.0f}",
                f"{ratio:.2f} ({len(pairs)} pairs, {min(pairs):.2f}-{max(pairs):.2f})",
                f"{e['latency_p50_ms']:.1f} / {e['latency_p99_ms']:.1f}",
                ("MET" if ratio >= 0.8 else "MISSED") + " (>= 0.8)",
            ]
        )
    print()
    print(
        table(
            rows,
            [
                "benchmark",
                "MB/s (median)",
                "arrays append, 64 MiB slabs, MB/s (median)",
                "ratio (median of pairs)",
                "ack p50 / p99 ms",
                "goal",
            ],
            args.markdown,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
