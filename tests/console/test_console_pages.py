"""The overview's health part from plain data: a cluster's nodes and read replicas as ``/health`` gives them."""

from __future__ import annotations

from windvane.console.app import Console
from windvane.console.views import Overview, Source


def render_health(health: dict) -> str:
    console = Console(Source(None, "store", lambda: health))  # type: ignore[arg-type]  # the template reads no store
    overview = Overview("00", health, [], 0, 1, 1, "", [], None, None, 0)
    return console.templates.get_template("overview_part.html").render(
        o=overview,
        user=None,
        writer=False,
        token="t",
        token_field="token",
        prefix="/-/console",
        label="x",
        refresh_ms=1,
    )


def test_a_clusters_nodes_and_replicas_are_shown_with_what_is_wrong():
    html = render_health(
        {
            "status": "ok",
            "warnings": ["node n2 does not serve: Donor/Desynced"],
            "nodes": [
                {"node": "n1", "state": "Synced", "serving": True},
                {"node": "n2", "state": "Donor", "serving": False},
            ],
            "replicas": [
                {"node": "r1", "behind": 3, "lag_seconds": 0.4, "error": None},
                {"node": "<r2>", "behind": None, "lag_seconds": None, "error": "out of reach"},
            ],
        }
    )
    assert "<td>n1</td><td>Synced</td><td>yes</td>" in html and "<td>n2</td><td>Donor</td><td>no</td>" in html
    assert '<td>r1</td><td class="n">3</td><td class="n">400 ms</td><td>following</td>' in html
    assert "<td>&lt;r2&gt;</td>" in html and "out of reach" in html
    assert 'class="warning">node n2 does not serve' in html


def test_a_store_without_a_cluster_shows_neither_table():
    html = render_health({"status": "ok"})
    assert 'class="nodes"' not in html and 'class="replicas"' not in html
