"""`windvane arrays ...`, run as the installed console script."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.cli.test_cli_store import windvane
from windvane import arrays, neostore


def test_ls_lists_arrays_with_shape_type_and_chunks(sqlite_url):
    result = windvane("arrays", "ls", sqlite_url)
    assert result.returncode == 2 and "does not exist" in result.stderr  # not created by a look
    assert not os.path.exists(neostore.parse_url(sqlite_url).path)
    neostore.open(sqlite_url).close()
    result = windvane("arrays", "ls", sqlite_url)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "no arrays"
    with arrays.create(sqlite_url, "turbine1/vibration", (0, 3), "float32", chunks=(1000, 3)) as a:
        a.append(np.ones((2500, 3), "float32"))
    with arrays.create(sqlite_url, "turbine2/power", (10,), "int64"):
        pass
    lines = windvane("arrays", "ls", sqlite_url).stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["turbine1/vibration", "turbine2/power"]
    assert "2500x3 float32  chunks 1000x3  bytes+blosc  30,000 bytes" in lines[0]
    only = windvane("arrays", "ls", sqlite_url, "turbine2").stdout.splitlines()
    assert [line.split()[0] for line in only] == ["turbine2/power"]


def test_history_lists_commits_and_refuses_unknown_arrays(sqlite_url):
    with arrays.create(sqlite_url, "s/x", (0,), "float64"):
        with arrays.transaction(sqlite_url, message="calibrated batch", metadata={"batch": 7}) as tx:
            arrays.open(tx, "s/x").append(np.arange(5.0))
    result = windvane("arrays", "history", sqlite_url, "s/x")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 2 and lines[0].split()[-1] == "s/x"
    assert lines[1].endswith("calibrated batch  {'batch': 7}")
    missing = windvane("arrays", "history", sqlite_url, "nope")
    assert missing.returncode == 2 and "no array named 'nope'" in missing.stderr


def test_history_after_a_pack_marks_the_commits_that_cannot_be_opened(store_url):
    with arrays.create(store_url, "s/x", (0,), "float64", chunks=(10,)) as a:
        for i in range(3):
            a.append(np.full(10, float(i)))
    tids = [c.tid for c in arrays.history(store_url, "s/x")]
    assert len(tids) == 4  # the creation, three appends
    halfway = (neostore.tids.tid_time(neostore.u64(tids[1])) + neostore.tids.tid_time(neostore.u64(tids[2]))) / 2
    result = windvane("store", "pack", store_url, "--before", f"{halfway:.9f}")
    assert result.returncode == 0, result.stderr
    # The creation's only revision (the first metadata) is gone; the first append's chunk stays, its commit
    # listed but packed; the later appends open.
    commits = arrays.history(store_url, "s/x")
    assert [(c.tid, c.openable) for c in commits] == [(tids[1], False), (tids[2], True), (tids[3], True)]
    with pytest.raises(arrays.SnapshotError, match="before the last pack"):
        arrays.open(store_url, "s/x", at=tids[1])
    for c in commits[1:]:
        with arrays.open(store_url, "s/x", at=c.tid) as a:
            assert len(a) == 10 * tids.index(c.tid)
    lines = windvane("arrays", "history", store_url, "s/x").stdout.splitlines()
    assert [line.split()[0] for line in lines] == [f"0x{t.hex()}" for t in tids[1:]]
    assert lines[0].endswith("  append 10 rows to s/x  (packed: cannot be opened)")
    assert [line.endswith("(packed: cannot be opened)") for line in lines] == [not c.openable for c in commits]
