"""`windvane info` and the service's health on a Galera cluster and with read replicas (real servers)."""

from __future__ import annotations

import json

import pytest

from tests.ops.test_info import fill, windvane
from windvane import neostore

pytestmark = pytest.mark.mariadb


@pytest.mark.xdist_group("galera")
def test_info_shows_each_node_and_the_one_written_to(galera_cluster, galera_url):
    fill(galera_url)
    result = windvane("info", "--store", galera_url)
    assert result.returncode == 0, result.stderr
    nodes = [line for line in result.stdout.splitlines() if line.startswith("node:")]
    assert len(nodes) == 3
    assert nodes[0].endswith("(written to): Synced, Primary, cluster size 3")
    assert all(line.endswith("Synced, Primary, cluster size 3") for line in nodes[1:])
    data = json.loads(windvane("info", "--json", "--store", galera_url).stdout)
    assert [n["written"] for n in data["nodes"]] == [True, False, False]
    assert data["backend"]["cluster"].startswith("3 nodes named, writing through ")


@pytest.mark.xdist_group("replicas")
def test_info_shows_how_far_each_replica_is_behind(replicated_servers, replicated_url):
    fill(replicated_url.url)
    with neostore.open(replicated_url.url) as store:
        # The replicas apply what the primary committed: a few polls at most.
        for _ in range(100):
            if all(state.behind == 0 for state in store.replica_states()):
                break
    result = windvane("info", "--store", replicated_url.url)
    assert result.returncode == 0, result.stderr
    replicas = [line for line in result.stdout.splitlines() if line.startswith("replica:")]
    assert len(replicas) == 2
    assert all(line.endswith(": 0 commits, 0.0 s behind") for line in replicas), replicas
