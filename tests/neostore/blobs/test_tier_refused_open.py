"""A store refused at open (its recorded blob location not given) keeps nothing open."""

from __future__ import annotations

import os
import threading

import pytest

from tests.neostore.blobs.conftest import commit
from windvane import neostore


def open_files(path: str) -> int:
    return sum(os.path.realpath(f"/proc/self/fd/{fd}").startswith(path) for fd in os.listdir("/proc/self/fd"))


def test_a_refused_open_closes_what_it_opened(sqlite_url, blobs_option, tmp_path):
    path = sqlite_url.split("sqlite:///")[1].split("?")[0]
    with neostore.open(f"{sqlite_url}?{blobs_option}") as store:
        commit(store, {store.new_oid(): os.urandom(300_000)})
    assert open_files(path) == 0
    threads = threading.active_count()
    with pytest.raises(neostore.BlobLocationError) as caught:
        neostore.open(sqlite_url, read_only=True)
    assert caught.value.__traceback__ is not None  # the frames (and the half-made Store) are still referenced
    assert open_files(path) == 0
    assert threading.active_count() == threads
