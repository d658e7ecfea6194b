"""The blob tier's URL options: what is refused, how, and that no secret ever shows in a message."""

from __future__ import annotations

import pytest

from tests.conftest import with_blobs
from windvane import neostore

PASSWORD = "s3cr3t-Pw"


@pytest.fixture(params=["sqlite", "mariadb"])
def any_url(request, tmp_path) -> str:
    """A store URL of each scheme (nothing is opened: these URLs are refused while parsed)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/s.db"
    return f"mariadb://user:{PASSWORD}@127.0.0.1:3306/db"


@pytest.mark.parametrize(
    ("option", "named"),
    [
        ("blob=s3://b/p", "'blob'"),
        ("blobs=s3://b/p&blob_treshold=1000", "'blob_treshold'"),
        ("blobs=s3://b/p&endpiont=http://h:1", "'endpiont'"),
    ],
)
def test_a_misspelt_option_is_refused_by_name(any_url, option, named):
    with pytest.raises(neostore.InvalidURLError, match=f"unknown option {named}") as caught:
        neostore.open(with_blobs(any_url, option))
    assert "blobs, endpoint, blob_threshold" in str(caught.value)  # says what it takes
    assert PASSWORD not in str(caught.value)


@pytest.mark.parametrize("option", ["endpoint=http://127.0.0.1:9000", "blob_threshold=1000"])
def test_tier_options_without_blobs_are_refused(any_url, option):
    with pytest.raises(neostore.InvalidURLError, match="belong with blobs=s3://bucket/prefix") as caught:
        neostore.open(with_blobs(any_url, option))
    assert PASSWORD not in str(caught.value)


@pytest.mark.parametrize("threshold", ["0", "-5", "abc", "1.5", ""])
def test_a_bad_threshold_is_refused(any_url, threshold):
    with pytest.raises(neostore.InvalidURLError, match="is not a positive number of bytes") as caught:
        neostore.open(with_blobs(any_url, f"blobs=s3://b/p&blob_threshold={threshold}"))
    assert PASSWORD not in str(caught.value)


@pytest.mark.parametrize("location", ["http://b/p", "s3://", "b/p", "s3:///p", "s3://b/p?x=1"])
def test_a_bad_location_is_refused(any_url, location):
    with pytest.raises(neostore.InvalidURLError, match=r"s3://bucket/prefix|no .options") as caught:
        neostore.open(with_blobs(any_url, f"blobs={location}"))
    assert PASSWORD not in str(caught.value)


def test_a_bad_endpoint_is_refused(any_url):
    with pytest.raises(neostore.InvalidURLError, match="not an http:// or https:// address") as caught:
        neostore.open(with_blobs(any_url, "blobs=s3://b/p&endpoint=ftp://h:21"))
    assert PASSWORD not in str(caught.value)


@pytest.mark.parametrize(
    "option",
    [
        "blobs=s3://AKIDEXAMPLE:wJalrXUtnFEMI@bucket/p",
        "blobs=s3://bucket/p&aws_secret_access_key=wJalrXUtnFEMI",
        "blobs=s3://bucket/p&endpoint=http://AKIDEXAMPLE:wJalrXUtnFEMI@127.0.0.1:9000",
    ],
)
def test_credentials_in_the_url_are_refused_without_showing_them(any_url, option):
    with pytest.raises(neostore.InvalidURLError) as caught:
        neostore.open(with_blobs(any_url, option))
    message = str(caught.value)
    assert "wJalrXUtnFEMI" not in message and PASSWORD not in message
    assert "AWS_ACCESS_KEY_ID" in message or "unknown option 'aws_secret_access_key'" in message


def test_a_good_url_parses_with_its_options():
    url = neostore.parse_url(
        f"mariadb://user:{PASSWORD}@h:3306/db?blobs=s3://b/some/prefix&endpoint=http://h:9000&blob_threshold=4096"
    )
    assert (url.blobs, url.endpoint, url.blob_threshold) == ("s3://b/some/prefix", "http://h:9000", 4096)
    assert neostore.parse_url("sqlite:///x.db?blobs=s3://b").blob_threshold == neostore.BLOB_THRESHOLD


def test_redacted_hides_only_the_password():
    assert (
        neostore.redacted("mariadb://app:s3cret@db:3306/w?blobs=s3://b/p")
        == "mariadb://app:***@db:3306/w?blobs=s3://b/p"
    )
    assert neostore.redacted("sqlite:////tmp/x.db") == "sqlite:////tmp/x.db"
    assert neostore.redacted("mariadb://app@/w?unix_socket=/s") == "mariadb://app@/w?unix_socket=/s"
