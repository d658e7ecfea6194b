"""What the S3 benchmarks share: a versitygw of their own (as the suite runs it), random 2 MiB values, timing.

The server is :class:`tests.s3.S3Server` (versitygw's posix backend on a
private directory and port); its AWS variables are set in this process so
that neostore's and obstore's clients find them as they would on AWS.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from obstore.store import S3Store
from sensor_data import VALUE_BYTES, parse_size

from tests.s3 import S3Server

#: Requests in flight at once, for every client measured (neostore's tier runs this many).
CONCURRENCY = 16
ROUNDS = int(os.environ.get("WINDVANE_BENCH_ROUNDS", "3"))


@contextmanager
def s3_server() -> Iterator[S3Server]:
    """A started versitygw on a fresh directory, with the AWS variables its clients need set; removed after."""
    server = S3Server(Path(tempfile.mkdtemp(prefix="wvb-s3-", dir="/tmp")) / "data")
    server.start()
    saved = {name: os.environ.get(name) for name in (*server.env(), "AWS_PROFILE", "AWS_ENDPOINT_URL")}
    os.environ.update(server.env())
    os.environ.pop("AWS_PROFILE", None)
    os.environ.pop("AWS_ENDPOINT_URL", None)
    try:
        yield server
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        server.remove()
        shutil.rmtree(server.root.parent, ignore_errors=True)  # its log beside the data


def raw_store(server: S3Server, bucket: str, prefix: str | None = None) -> S3Store:
    """A plain obstore client of ``bucket`` on ``server``: the baseline the tier's requests are measured against."""
    return S3Store(
        bucket,
        prefix=prefix,
        endpoint=server.endpoint,
        virtual_hosted_style_request=False,
        client_options={"allow_http": True},
    )


def random_values(total: int | str) -> list[bytes]:
    """``total`` bytes of incompressible values of ``VALUE_BYTES`` each."""
    total = parse_size(str(total)) if isinstance(total, str) else total
    rng = np.random.default_rng(20261126)
    return [rng.bytes(VALUE_BYTES) for _ in range(max(1, total // VALUE_BYTES))]


def run_all(fn: Callable[[int], object], count: int, workers: int = CONCURRENCY) -> None:
    """``fn(i)`` for every ``i < count``, ``workers`` at a time; errors raised."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for _ in pool.map(fn, range(count)):
            pass


def mbps(nbytes: int, fn: Callable[[], object]) -> float:
    """MB/s (10^6 bytes) of ``nbytes`` moved by ``fn()``."""
    started = time.perf_counter()
    fn()
    return nbytes / (time.perf_counter() - started) / 1e6


def alternate(targets: dict[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Each target once a round, in the reverse order of the round before."""
    rates: dict[str, list[float]] = {name: [] for name in targets}
    for r in range(rounds):
        for name in list(targets) if r % 2 == 0 else list(reversed(targets)):
            rates[name].append(targets[name]())
    return rates


def per_round(rates: dict[str, list[float]], name: str, baseline: str) -> list[float]:
    return [a / b for a, b in zip(rates[name], rates[baseline], strict=True)]


def total_of(values: Iterable[bytes]) -> int:
    return sum(len(v) for v in values)
