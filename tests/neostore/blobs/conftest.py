"""Fixtures of the blob tier tests: a counting, fault-injecting relay in front of the session's S3 server."""

from __future__ import annotations

import pytest

from tests.conftest import with_blobs
from tests.s3_relay import S3Relay
from windvane.neostore import POSKeyError, p64


@pytest.fixture
def relay(s3_env) -> S3Relay:
    """A relay to the session's S3 server (tests/s3_relay.py), closed after the test."""
    relay = S3Relay(s3_env.port)
    yield relay
    relay.close()


@pytest.fixture
def relayed_url(store_url, s3_env, relay) -> str:
    """A fresh store URL per backend whose blob tier (a fresh bucket) is reached through ``relay``."""
    return with_blobs(store_url, f"blobs=s3://{s3_env.new_bucket()}/store&endpoint={relay.endpoint}")


def bucket_of(url: str) -> str:
    """The bucket a tiered store URL names."""
    return url.split("blobs=s3://")[1].split("/")[0].split("&")[0]


def commit(store, values: dict[bytes, bytes]) -> bytes:
    """Write ``{oid: value}`` (new or latest serials) in one transaction; its tid.

    The serials come from the history, which reads no value: nothing here adds to the object store's requests.
    """
    txn = store.begin()
    for oid, value in values.items():
        try:
            serial = store.history(oid, 1)[0].tid
        except POSKeyError:
            serial = None
        txn.write(oid, serial, value)
    txn.vote()
    return txn.finish()


def commit_new(store, values: list[bytes]) -> list[bytes]:
    """Write ``values`` to fresh oids in one transaction; the oids."""
    oids = new_oids(store, len(values))
    commit(store, dict(zip(oids, values)))
    return oids


def new_oids(store, count: int) -> list[bytes]:
    """``count`` fresh oids, as bytes."""
    return [p64(n) for n in store.new_oids(count)]
