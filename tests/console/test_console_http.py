"""The web console of a real ``windvane serve``, over HTTP: pages, roles, the action token, replay and discard.

What a browser does with the pages (scripts, plots, live updates) is in
``test_console_browser.py``; here each answer is read as it comes off the
socket.
"""

from __future__ import annotations

import http.cookiejar
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.serve_process import Serve, event_schema, start_serve

HOSTILE_TAG = 'plant.<img src=x onerror="window.pwned=1">'
HOSTILE_VALUE = "<script>window.pwned=2</script>"
HOSTILE_KEY = '"><img src=x onerror=window.pwned=3>'

USERS = """
[users.reader]
password = "reader-secret"
roles = ["read"]

[users.operator]
password = "operator-secret"
roles = ["read", "write"]

[users.sender]
password = "sender-secret"
roles = ["send"]

[users.legacy]
password = "legacy-secret"
"""


class Browserless:
    """An HTTP client keeping cookies, as a browser would, with optional Basic credentials."""

    def __init__(self, base: str, user: str | None = None, password: str | None = None):
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        handlers: list[Any] = [urllib.request.HTTPCookieProcessor(self.jar)]
        if user is not None:
            manager = urllib.request.HTTPPasswordMgrWithPriorAuth()
            manager.add_password(None, base, user, password, is_authenticated=True)
            handlers.append(urllib.request.HTTPBasicAuthHandler(manager))
        self.opener = urllib.request.build_opener(*handlers)

    def request(
        self, path: str, data: dict[str, str] | bytes | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], str]:
        body = urllib.parse.urlencode(data).encode() if isinstance(data, dict) else data
        request = urllib.request.Request(self.base + path, data=body, headers=headers or {})
        try:
            with self.opener.open(request, timeout=30) as response:
                return response.status, dict(response.headers), response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read().decode()

    def token(self) -> str:
        return next(c.value for c in self.jar if c.name == "windvane_console")


def post_events(base: str, tag: str, records: list[dict[str, Any]], auth: tuple[str, str] | None = None) -> int:
    client = Browserless(base, *auth) if auth else Browserless(base)
    status, _, _ = client.request(
        "/" + urllib.parse.quote(tag.replace(".", "/")),
        json.dumps(records).encode(),
        {"Content-Type": "application/json"},
    )
    return status


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    """One server for the module's tests: each sends to tags of its own."""
    directory = tmp_path_factory.mktemp("console")
    with start_serve(directory, {"plant.toml": event_schema("plant.*")}, forward=None) as serve:
        yield serve


def base_of(serve: Serve) -> str:
    return f"http://127.0.0.1:{serve.http_port}"


def test_every_page_answers_with_its_security_headers_and_escapes_what_senders_sent(served: Serve):
    base = base_of(served)
    assert post_events(base, "plant.a", [{"seq": i, "msg": f"m{i}", "value": i / 2} for i in range(10)]) == 200
    assert post_events(base, "plant.a", [{"seq": 10, "msg": HOSTILE_VALUE, "value": 1.0, HOSTILE_KEY: "x"}]) == 200
    assert post_events(base, "plant.a", [{"msg": HOSTILE_VALUE, "value": 1.0}]) == 200  # no seq: quarantined
    assert post_events(base, HOSTILE_TAG, [{"seq": 1, "msg": "x", "value": 2.0}]) == 200  # no schema: quarantined
    client = Browserless(base)
    pages = [
        "/",
        "/-/console/overview",
        "/-/console/stream?tag=plant.a",
        "/-/console/stream/tail?tag=plant.a&n=5",
        "/-/console/quarantine?tag=plant.a",
        "/-/console/quarantine?tag=" + urllib.parse.quote(HOSTILE_TAG),
        "/-/console/quarantine/discard?tag=plant.a",
        "/-/console/quarantine/replay?tag=plant.a",
    ]
    for path in pages:
        status, headers, body = client.request(path)
        assert status == 200, (path, body[:500])
        assert headers["Content-Type"].startswith("text/html"), path
        policy = headers["Content-Security-Policy"]
        assert "script-src 'self'" in policy and "'unsafe-inline'" not in policy, path
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert headers["X-Frame-Options"] == "DENY"
        # What senders control never becomes markup: every < they sent arrives as &lt;.
        assert "<img" not in body and "<script>window" not in body, (path, body)
        assert not re.search(r"<script(?![^>]*\bsrc=)", body), f"{path} has an inline script"
    _, _, overview = client.request("/")
    assert "&lt;img src=x onerror=" in overview  # the hostile tag, in the quarantine table, as text
    _, _, quarantine = client.request("/-/console/quarantine?tag=plant.a")
    assert "&lt;script&gt;window.pwned=2&lt;/script&gt;" in quarantine  # the record, verbatim, escaped
    assert "required field &#39;seq&#39; is missing" in quarantine
    _, _, tail = client.request("/-/console/stream/tail?tag=plant.a&n=5")
    assert "&lt;script&gt;window.pwned=2&lt;/script&gt;" in tail


def test_errors_are_pages_that_say_what_is_wrong(served: Serve):
    client = Browserless(base_of(served))
    status, headers, body = client.request("/-/console/stream?tag=nosuch")
    assert status == 404 and "there is no stream &#39;nosuch&#39;" in body
    assert "Content-Security-Policy" in headers
    status, _, body = client.request("/-/console/stream?tag=")
    assert status == 400 and "name the stream" in body
    status, _, body = client.request("/-/console/stream/tail?tag=plant.a&n=0")
    assert status == 400 and "n=0 is out of range" in body
    status, _, body = client.request("/-/console/nothing-here")
    assert status == 404 and "has no page" in body
    status, _, body = client.request("/-/console/static/../app.py")
    assert status == 404
    status, headers, body = client.request("/-/console/static/console.js")
    assert status == 200 and headers["Content-Type"].startswith(("text/javascript", "application/javascript"))


def test_actions_need_the_pages_token_and_come_from_the_console_itself(served: Serve):
    base = base_of(served)
    assert post_events(base, "plant.b", [{"msg": "no seq", "value": 1.0}]) == 200
    client = Browserless(base)
    status, _, page = client.request("/-/console/quarantine/discard?tag=plant.b")
    assert status == 200
    token = client.token()
    assert f'value="{token}"' in page  # the form carries the cookie's token
    form = {"tag": "plant.b", "count": "1"}
    status, _, body = client.request("/-/console/quarantine/discard", form)
    assert status == 403 and "does not carry the console" in body
    status, _, body = client.request("/-/console/quarantine/discard", {**form, "token": "x" * 43})
    assert status == 403
    stranger = Browserless(base)  # another browser: the right form, its own (missing) cookie
    status, _, body = stranger.request("/-/console/quarantine/discard", {**form, "token": token})
    assert status == 403
    status, _, body = client.request(
        "/-/console/quarantine/discard", {**form, "token": token}, {"Origin": "http://evil.example"}
    )
    assert status == 403 and "another origin" in body
    status, _, body = client.request(
        "/-/console/quarantine/discard", {**form, "token": token}, {"Sec-Fetch-Site": "cross-site"}
    )
    assert status == 403 and "another site" in body
    # Nothing was discarded by any of those.
    _, _, page = client.request("/-/console/quarantine?tag=plant.b")
    assert "1 records" in page
    status, _, body = client.request("/-/console/quarantine/discard", {**form, "token": token})
    assert status == 200, body
    assert "1 records discarded; 0 remain" in body


def test_discard_deletes_what_was_confirmed_or_nothing(served: Serve):
    base = base_of(served)
    assert post_events(base, "plant.c", [{"msg": "no seq", "value": 1.0}] * 3) == 200
    assert post_events(base, "plant.c", [{"seq": "not a number", "msg": "m", "value": 1.0}]) == 200
    client = Browserless(base)
    _, _, page = client.request("/-/console/quarantine?tag=plant.c")
    reasons = dict(re.findall(r'<td class="reason">([^<]+)</td><td class="n">(\d+)</td>', page))
    missing = "required field &#39;seq&#39; is missing"
    assert reasons[missing] == "3" and len(reasons) == 2
    reason = missing.replace("&#39;", "'")
    client.request("/-/console/quarantine/discard?tag=plant.c&reason=" + urllib.parse.quote(reason))
    form = {"tag": "plant.c", "reason": reason, "count": "3", "token": client.token()}
    # Another of that reason arrives between the confirmation and the action: nothing is deleted.
    assert post_events(base, "plant.c", [{"msg": "late", "value": 2.0}]) == 200
    status, _, body = client.request("/-/console/quarantine/discard", form)
    assert status == 409 and "holds 4 of the records" in body
    status, _, body = client.request("/-/console/quarantine/discard", {**form, "count": "4"})
    assert status == 200 and "4 records discarded; 1 remain" in body
    _, _, page = client.request("/-/console/quarantine?tag=plant.c")
    assert "1 records" in page and "is missing" not in page.split('id="records"')[0]


def test_replay_after_a_schema_fix_moves_the_records_into_the_stream_once(tmp_path: Path):
    strict = event_schema("plant.*", required=("seq", "value"))
    with start_serve(tmp_path, {"plant.toml": strict}, forward=None) as serve:
        base = base_of(serve)
        assert post_events(base, "plant.d", [{"seq": 1, "msg": "ok", "value": 1.0}]) == 200
        assert post_events(base, "plant.d", [{"seq": 2, "msg": "no value"}, {"seq": 3, "msg": "no value"}]) == 200
        assert serve.stop() == 0
    fixed = event_schema("plant.*", required=("seq",))
    with start_serve(tmp_path, {"plant.toml": fixed}, forward=None) as serve:
        client = Browserless(base_of(serve))
        status, _, page = client.request("/-/console/quarantine/replay?tag=plant.d")
        assert status == 200 and "moves those that fit into the stream" in page
        form = {"tag": "plant.d", "count": "2", "token": client.token()}
        status, _, body = client.request("/-/console/quarantine/replay", form)
        assert status == 200 and "2 records moved into the stream; 0 remain" in body, body
        status, _, body = client.request("/-/console/quarantine/replay", form)  # again: nothing more moves
        assert status == 200 and "0 records moved into the stream; 0 remain" in body
        _, _, tail = client.request("/-/console/stream/tail?tag=plant.d&n=10")
        assert "3 rows" in tail
        assert tail.count("no value") == 2


def test_users_and_roles(tmp_path: Path):
    users = tmp_path / "users.toml"
    users.write_text(USERS)
    schemas = {"plant.toml": event_schema("plant.*")}
    with start_serve(tmp_path, schemas, "--users", str(users), "--http-auth", "users", forward=None) as serve:
        base = base_of(serve)
        # Sending needs "send": the sender and a user whose entry names no roles may, the reader may not.
        assert post_events(base, "plant.e", [{"msg": "no seq"}], ("sender", "sender-secret")) == 200
        assert post_events(base, "plant.e", [{"msg": "no seq"}], ("legacy", "legacy-secret")) == 200
        assert post_events(base, "plant.e", [{"seq": 1}], ("reader", "reader-secret")) == 403
        # Pages need "read".
        status, headers, body = Browserless(base).request("/")
        assert status == 401 and headers["WWW-Authenticate"].startswith("Basic") and "<html" in body
        assert Browserless(base, "reader", "wrong").request("/")[0] == 401
        assert Browserless(base, "sender", "sender-secret").request("/")[0] == 403
        assert Browserless(base, "legacy", "legacy-secret").request("/")[0] == 200
        reader = Browserless(base, "reader", "reader-secret")
        status, _, page = reader.request("/-/console/quarantine?tag=plant.e")
        assert status == 200 and "2 records" in page
        assert "discard these" not in page  # a reader is not offered the actions
        # Acting needs "write", even with the page's token.
        reader.request("/-/console/quarantine/discard?tag=plant.e")
        form = {"tag": "plant.e", "count": "2", "token": reader.token()}
        status, _, body = reader.request("/-/console/quarantine/discard", form)
        assert status == 403 and "does not hold the &#39;write&#39; role" in body
        operator = Browserless(base, "operator", "operator-secret")
        status, _, page = operator.request("/-/console/quarantine?tag=plant.e")
        assert "discard these" in page
        operator.request("/-/console/quarantine/discard?tag=plant.e")
        status, _, body = operator.request("/-/console/quarantine/discard", {**form, "token": operator.token()})
        assert status == 200 and "2 records discarded" in body
        # /health stays open for probes; /metrics needs "read".
        assert Browserless(base).request("/health")[0] == 200
        assert Browserless(base, "sender", "sender-secret").request("/metrics")[0] == 403
        assert reader.request("/metrics")[0] == 200


def test_a_selection_downloads_as_parquet_and_csv(served: Serve):
    import io

    import pyarrow.csv
    import pyarrow.parquet

    base = base_of(served)
    records = [{"seq": i, "msg": f"m{i}", "value": i / 4, "time": 1_700_000_000 + i} for i in range(100)]
    assert post_events(base, "plant.dl", records) == 200
    client = Browserless(base)
    status, _, _ = client.request("/-/console/stream/download?tag=plant.dl&format=xml")
    assert status == 400
    request = "/-/console/stream/download?tag=plant.dl&format=parquet&from=2023-11-14T22:13:40Z&to=1700000030"
    raw = client.opener.open(base + request, timeout=30)
    assert raw.status == 200
    assert raw.headers["Content-Disposition"].startswith('attachment; filename="plant.dl.parquet"')
    table = pyarrow.parquet.read_table(io.BytesIO(raw.read()))
    assert table.column("seq").to_pylist() == list(range(20, 30))  # [from, to): 1700000020 .. 1700000029
    raw = client.opener.open(base + "/-/console/stream/download?tag=plant.dl&format=csv", timeout=30)
    table = pyarrow.csv.read_csv(io.BytesIO(raw.read()))
    assert table.num_rows == 100 and table.column("value").to_pylist()[-1] == 99 / 4
    status, _, _ = client.request("/-/console/stream/download?tag=nosuch&format=csv")
    assert status == 404
