"""Objects missing or already there on the real S3 server: absent is not an outage, there already is not an error."""

from __future__ import annotations

import os

import pytest

from windvane import neostore
from windvane.neostore.blobs import parse_location
from windvane.neostore.blobs.s3 import S3BlobStore


def test_a_missing_object_is_absent_not_an_outage(s3_env):
    blobs = S3BlobStore(parse_location(f"s3://{s3_env.new_bucket()}/p"), s3_env.endpoint)
    assert blobs.exists("aa/missing") is False
    with pytest.raises(neostore.BlobNotFoundError, match="no such object"):
        blobs.get("aa/missing")
    with pytest.raises(neostore.BlobNotFoundError):
        blobs.get_range("aa/missing", 0, 10)
    assert blobs.put_new("aa/there", b"x") and blobs.exists("aa/there")
    blobs.close()


@pytest.mark.parametrize("size", [1000, 9 << 20])
def test_sending_a_value_whose_object_exists_says_so(s3_env, size):
    blobs = S3BlobStore(parse_location(f"s3://{s3_env.new_bucket()}/p"), s3_env.endpoint, retries={"max_retries": 0})
    data = os.urandom(size)
    assert blobs.put_new("ab/value", data) is True
    assert blobs.put_new("ab/value", data) is False  # not an error, whatever the server does with the body
    assert blobs.get("ab/value") == data
    blobs.close()
