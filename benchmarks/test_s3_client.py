"""obstore against boto3 on the same S3 server: PUT and GET of 2 MiB objects, 16 requests in flight.

The measurement behind neostore's S3 client. Both clients talk to one
versitygw (:mod:`s3_bench`), over plain HTTP on the loopback, each from a
pool of 16 threads (both release the GIL while waiting on the network);
``WINDVANE_BENCH_S3_BYTES`` (default 512M) of random values, PUT into a
fresh prefix each round and read back whole. MB/s, median of
``WINDVANE_BENCH_ROUNDS`` (3) rounds, the clients alternating order::

    .venv/bin/python -m pytest benchmarks/test_s3_client.py -p no:cacheprovider --benchmark-enable --benchmark-only -s
"""

from __future__ import annotations

import os
import uuid

import numpy as np
import obstore
import pytest
from obstore.store import S3Store
from s3_bench import CONCURRENCY, ROUNDS, mbps, per_round, random_values, run_all, s3_server, total_of
from test_log_parsing import publish

boto3 = pytest.importorskip("boto3", reason="boto3 is in the bench extra")
from botocore.config import Config  # noqa: E402

TOTAL = os.environ.get("WINDVANE_BENCH_S3_BYTES", "512M")
pytestmark = pytest.mark.timeout(3600)


def clients(server, bucket: str) -> tuple[S3Store, object]:
    ob = S3Store(
        bucket, endpoint=server.endpoint, virtual_hosted_style_request=False, client_options={"allow_http": True}
    )
    bo = boto3.session.Session().client(
        "s3",
        endpoint_url=server.endpoint,
        config=Config(max_pool_connections=CONCURRENCY, s3={"addressing_style": "path"}),
    )
    return ob, bo


def test_s3_client_obstore_vs_boto3(benchmark, bench_results):
    values = random_values(TOTAL)
    nbytes = total_of(values)
    with s3_server() as server:
        bucket = server.new_bucket("bench")
        ob, bo = clients(server, bucket)
        prefixes: dict[str, str] = {}

        def put(client: str) -> float:
            prefix = prefixes[client] = f"{client}-{uuid.uuid4().hex[:8]}"
            if client == "obstore":
                return mbps(nbytes, lambda: run_all(lambda i: obstore.put(ob, f"{prefix}/{i}", values[i]), len(values)))
            return mbps(
                nbytes,
                lambda: run_all(
                    lambda i: bo.put_object(Bucket=bucket, Key=f"{prefix}/{i}", Body=values[i]), len(values)
                ),
            )

        def get(client: str) -> float:
            prefix = prefixes[client]

            def one(i: int) -> None:
                if client == "obstore":
                    got = obstore.get(ob, f"{prefix}/{i}").bytes()
                else:
                    got = bo.get_object(Bucket=bucket, Key=f"{prefix}/{i}")["Body"].read()
                assert len(got) == len(values[i])

            return mbps(nbytes, lambda: run_all(one, len(values)))

        rounds = 1 if benchmark.disabled else ROUNDS
        rates: dict[str, list[float]] = {}

        # PUTs before GETs within a round (the GETs read that round's objects); clients alternate.
        def run() -> None:
            for r in range(rounds):
                order = ["obstore", "boto3"] if r % 2 == 0 else ["boto3", "obstore"]
                for op in ("put", "get"):
                    for client in order:
                        rates.setdefault(f"{op}_{client}", []).append((put if op == "put" else get)(client))

        benchmark.pedantic(run, rounds=1, iterations=1)
    median = {name: float(np.median(v)) for name, v in rates.items()}
    info = {
        "object_bytes": len(values[0]),
        "objects": len(values),
        "concurrency": CONCURRENCY,
        "rounds": rounds,
        "obstore": obstore.__version__,
        "boto3": boto3.__version__,
        "mb_per_s": rates,
        "median_mb_per_s": median,
        "put_obstore_over_boto3": median["put_obstore"] / median["put_boto3"],
        "get_obstore_over_boto3": median["get_obstore"] / median["get_boto3"],
        "per_round_put_obstore_over_boto3": per_round(rates, "put_obstore", "put_boto3"),
        "per_round_get_obstore_over_boto3": per_round(rates, "get_obstore", "get_boto3"),
    }
    publish(benchmark, bench_results, "s3_client", info)
