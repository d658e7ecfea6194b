"""Streams on a Galera cluster: two writers through two nodes appending at once to one stream and to their own.

Real servers (the suite's 3-node cluster), no mocks. One writer appends with
:meth:`arrays.Stream.append`, the other with an :class:`arrays.StreamWriter`
in transactions, each through a node of its own; an append whose commit
loses to the other node's is run again, as any caller retries a conflict or
a transient error. Every row carries a code naming its writer, its append
and its place, so the final arrays show a row lost, a row twice, or columns
out of line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest

from tests.galera import node_url, ordered_url
from tests.neostore.test_cluster import run_together
from windvane import arrays, neostore

APPENDS = 30  # per writer: half to the shared stream, half to its own
CHUNK_ROWS = 8  # small chunks: appends fill and start chunks often
COLUMNS = [arrays.Column("value", "float64"), arrays.Column("label", "str")]


def rows(codes: np.ndarray) -> dict[str, object]:
    """The columns of rows ``codes``: every column says which row it is."""
    return {"time": codes, "value": codes.astype(np.float64), "label": [str(code) for code in codes.tolist()]}


@dataclass
class Appender:
    """One writer's store, how it appends, and the codes of the rows it got acknowledged, by stream."""

    store: neostore.Store
    number: int
    append: Callable[[str, dict[str, object]], None]
    acknowledged: dict[str, list[int]] = field(default_factory=dict)
    retries: int = 0

    def run(self, own: str) -> None:
        for seq in range(APPENDS):
            tag = "shared" if seq % 2 else own
            codes = self.number * 10**9 + seq * 1000 + np.arange(1 + seq % 5, dtype=np.int64)
            while True:
                try:
                    self.append(tag, rows(codes))
                except neostore.ConflictError:
                    self.retries += 1
                    continue
                except neostore.NeoStoreError as exc:
                    if not self.store.is_transient(exc):
                        raise
                    self.retries += 1
                    continue
                break
            self.acknowledged.setdefault(tag, []).extend(codes.tolist())


def stream_appender(store: neostore.Store, number: int) -> Appender:
    """Appends through :meth:`arrays.Stream.append`, one commit each, on streams opened once."""
    streams: dict[str, arrays.Stream] = {}

    def append(tag: str, columns: dict[str, object]) -> None:
        if tag not in streams:
            streams[tag] = arrays.open_stream(store, tag)
        streams[tag].append(columns)

    return Appender(store, number, append)


def writer_appender(store: neostore.Store, number: int) -> Appender:
    """Appends through :class:`arrays.StreamWriter` objects kept across transactions."""
    writers: dict[str, arrays.StreamWriter] = {}

    def append(tag: str, columns: dict[str, object]) -> None:
        writer = writers.setdefault(tag, arrays.StreamWriter(store, tag))
        with arrays.transaction(store, message=f"writer {number} appends to {tag}") as tx:
            writer.append(tx, columns)

    return Appender(store, number, append)


def read_stream(url: str, tag: str) -> dict[str, list]:
    """Every column of stream ``tag`` as lists, read through ``url``."""
    with neostore.open(url, read_only=True) as store, arrays.open_stream(store, tag) as stream:
        return {name: stream[name][:].tolist() for name in ("time", "value", "label")}


@pytest.mark.slow
def test_two_writers_on_two_nodes_append_every_row_once(galera_cluster, galera_url):
    tags = ["shared", "own1", "own2"]
    with neostore.open(galera_url) as store:
        for tag in tags:
            arrays.create_stream(store, tag, COLUMNS, chunk_rows=CHUNK_ROWS).close()
    appenders = [
        stream_appender(neostore.open(ordered_url(galera_cluster, galera_url, 1, 2, 3)), 1),
        writer_appender(neostore.open(ordered_url(galera_cluster, galera_url, 2, 3, 1)), 2),
    ]
    try:
        run_together(lambda: appenders[0].run("own1"), lambda: appenders[1].run("own2"))
        # Each went through a node of its own the whole time.
        assert [a.store.backend.current for a in appenders] == [0, 0]
    finally:
        for appender in appenders:
            appender.store.close()
    print(f"retries after a conflict or a transient error: {[a.retries for a in appenders]}")

    expected = {
        "shared": sorted(appenders[0].acknowledged["shared"] + appenders[1].acknowledged["shared"]),
        "own1": sorted(appenders[0].acknowledged["own1"]),
        "own2": sorted(appenders[1].acknowledged["own2"]),
    }
    seen = []
    for index in (1, 2, 3):
        url = node_url(galera_cluster, galera_url, index)
        streams = {tag: read_stream(url, tag) for tag in tags}
        for tag, columns in streams.items():
            times = columns["time"]
            # Exactly the rows acknowledged, none twice, every column in line with time.
            assert sorted(times) == expected[tag], (index, tag)
            assert columns["value"] == [float(t) for t in times] and columns["label"] == [str(t) for t in times]
        # Each append stays one run of rows: a writer's rows of one append are never split.
        shared = np.asarray(streams["shared"]["time"]) // 1000
        assert 1 + np.count_nonzero(shared[1:] != shared[:-1]) == len(appenders) * (APPENDS // 2)
        with neostore.open(url, read_only=True) as store:
            seen.append((streams, list(store.iter_transactions())))
    # Every node holds the same streams and the same history.
    assert seen[1] == seen[0] and seen[2] == seen[0]
