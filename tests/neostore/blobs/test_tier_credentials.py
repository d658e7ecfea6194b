"""Where the blob tier's credentials come from: the AWS variables, or the shared files the AWS CLI writes.

Never the URL (tests/neostore/blobs/test_tier_url.py). Wrong keys are a
BlobStoreError saying to check the credentials, at once (no retrying a
refusal).
"""

from __future__ import annotations

import os

import pytest

from tests.neostore.blobs.conftest import commit
from tests.s3 import ACCESS_KEY, REGION, SECRET_KEY
from windvane import neostore
from windvane.neostore.blobs.credentials import shared_file_settings

AWS_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION")


@pytest.fixture
def no_aws_variables(monkeypatch, tmp_path):
    """No AWS variable set, and a HOME without ~/.aws: only what a test writes counts."""
    for name in (
        *AWS_VARIABLES,
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_SHARED_CREDENTIALS_FILE",
        "AWS_CONFIG_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return monkeypatch


def write_shared_files(tmp_path, monkeypatch, profile: str = "default") -> None:
    credentials = tmp_path / "credentials"
    config = tmp_path / "config"
    credentials.write_text(
        "[default]\naws_access_key_id = not-this-one\naws_secret_access_key = nor-this\n\n"
        f"[{profile}]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n"
    )
    section = "default" if profile == "default" else f"profile {profile}"
    config.write_text(f"[{section}]\nregion = {REGION}\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    if profile != "default":
        monkeypatch.setenv("AWS_PROFILE", profile)


def test_the_shared_files_are_read_for_the_profile(tmp_path, no_aws_variables):
    write_shared_files(tmp_path, no_aws_variables, profile="windvane")
    assert shared_file_settings() == {"access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY, "region": REGION}
    no_aws_variables.delenv("AWS_PROFILE")
    assert shared_file_settings()["access_key_id"] == "not-this-one"  # the default profile


def test_the_environment_wins_over_the_shared_files(tmp_path, no_aws_variables):
    write_shared_files(tmp_path, no_aws_variables)
    no_aws_variables.setenv("AWS_ACCESS_KEY_ID", "from-env")
    assert shared_file_settings() == {}  # the client reads the environment itself
    no_aws_variables.delenv("AWS_ACCESS_KEY_ID")
    no_aws_variables.setenv("AWS_REGION", "eu-west-1")
    assert "region" not in shared_file_settings()  # the variable's region, not the file's


def test_missing_or_broken_files_give_nothing(tmp_path, no_aws_variables):
    assert shared_file_settings() == {}
    (tmp_path / "broken").write_text("this is [not an ini file\n= =\n")
    no_aws_variables.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "broken"))
    assert shared_file_settings() == {}


def test_a_store_works_with_credentials_from_the_shared_files(tmp_path, store_url, s3_server, no_aws_variables):
    write_shared_files(tmp_path, no_aws_variables, profile="windvane")
    url = f"{store_url}{'&' if '?' in store_url else '?'}blobs=s3://{s3_server.new_bucket()}/p&endpoint={s3_server.endpoint}"
    value = os.urandom(300_000)
    with neostore.open(url) as store:
        oid = store.new_oid()
        tid = commit(store, {oid: value})
        assert store.tier.requests["PUT"] == 1
    with neostore.open(url, read_only=True) as store:
        assert store.load(oid) == (value, tid)


def test_wrong_keys_are_refused_at_once_saying_to_check_the_credentials(tiered_url, s3_env, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "a-wrong-secret")
    with neostore.open(tiered_url) as store:  # opening sends nothing to the object store
        oid = store.new_oid()
        with pytest.raises(neostore.BlobStoreError, match="check the AWS credentials") as caught:
            commit(store, {oid: os.urandom(300_000)})
        assert not isinstance(caught.value, neostore.StorageUnavailableError)  # not a retry-later failure
        assert "a-wrong-secret" not in str(caught.value)
        assert store.tier.requests["PUT"] == 1
        with pytest.raises(neostore.POSKeyError):
            store.load(oid)


def test_no_credentials_at_all_is_a_setup_error_not_an_outage(store_url, s3_server, no_aws_variables):
    url = f"{store_url}{'&' if '?' in store_url else '?'}blobs=s3://{s3_server.new_bucket()}/p&endpoint={s3_server.endpoint}"
    with neostore.open(url, blob_retry_timeout=2.0) as store:
        oid = store.new_oid()
        with pytest.raises(
            neostore.BlobStoreError, match=r"no AWS credentials found.*check the AWS credentials"
        ) as caught:
            commit(store, {oid: os.urandom(300_000)})
        assert not isinstance(caught.value, neostore.StorageUnavailableError)  # retrying would never help
        commit(store, {oid: b"small values need no object store"})
