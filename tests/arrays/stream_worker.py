"""A separate process that appends to a stream, for tests/arrays/test_streams.py.

Run from the repository root as ``python -m tests.arrays.stream_worker MODE ...``.
(No ``test_`` prefix: pytest must not collect it.) Output is one line per
event, flushed.

Modes:

``append URL TAG --worker K --seconds S``
    Prints ``ready``, waits for ``go`` on stdin, then appends to stream
    ``TAG`` (columns of :func:`row_values`) for ``S`` seconds, each append a
    random number of rows. Row ``i`` of append ``seq`` carries
    ``(K, seq, i)`` in every column, so the parent can check that every
    row is the same row in every column and that appends stayed whole.
    Ends with ``result {"worker": K, "appends": .., "rows": ..}``.

``writer URL TAG --worker K --seconds S``
    The same through one :class:`arrays.StreamWriter` kept across
    transactions (each append one ``arrays.transaction``).

``once URL TAG --worker K --seq SEQ --rows N``
    One append of ``row_values(K, SEQ, N)`` through a freshly opened stream; prints ``done``.
"""

from __future__ import annotations

import argparse

import numpy as np

from tests.arrays.arrays_worker import append_until
from windvane import arrays, neostore

COLUMNS = [
    arrays.Column("value", "float64"),
    arrays.Column("seq", "int64", inner=(2,)),
    arrays.Column("label", "str"),
    arrays.Column("raw", "bytes"),
]


def row_values(worker: int, seq: int, n: int) -> dict[str, object]:
    """The columns of append ``seq`` by ``worker``: every column encodes ``(worker, seq, i)``."""
    i = np.arange(n, dtype=np.int64)
    code = worker * 10**12 + seq * 10**6 + i
    return {
        "time": code,
        "value": code.astype(np.float64),
        "seq": np.stack([np.full(n, worker * 10**6 + seq), i], axis=1),
        "label": [f"{worker}:{seq}:{k}" for k in range(n)],
        "raw": [f"{worker}:{seq}:{k}".encode() + b"\x00" for k in range(n)],
    }


def run_append(url: str, tag: str, worker: int, seconds: float) -> None:
    with arrays.open_stream(url, tag) as stream:
        append_until(worker, seconds, 120, lambda appends, n: stream.append(row_values(worker, appends, n)))


def run_writer(url: str, tag: str, worker: int, seconds: float) -> None:
    store = neostore.open(url)
    try:
        writer = arrays.StreamWriter(store, tag)

        def append(appends: int, n: int) -> None:
            with arrays.transaction(store, message=f"worker {worker} append {appends}") as tx:
                writer.append(tx, row_values(worker, appends, n))

        append_until(worker, seconds, 120, append)
    finally:
        store.close()


def run_once(url: str, tag: str, worker: int, seq: int, rows: int) -> None:
    with arrays.open_stream(url, tag) as stream:
        stream.append(row_values(worker, seq, rows))
    print("done", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.arrays.stream_worker")
    parser.add_argument("mode", choices=["append", "writer", "once"])
    parser.add_argument("url")
    parser.add_argument("tag")
    parser.add_argument("--worker", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--seq", type=int, default=0)
    parser.add_argument("--rows", type=int, default=1)
    args = parser.parse_args(argv)
    if args.mode == "append":
        run_append(args.url, args.tag, args.worker, args.seconds)
    elif args.mode == "writer":
        run_writer(args.url, args.tag, args.worker, args.seconds)
    else:
        run_once(args.url, args.tag, args.worker, args.seq, args.rows)


if __name__ == "__main__":
    main()
