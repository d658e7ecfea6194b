"""The web console in a real browser (Debian's chromium, driven by Playwright) against a real ``windvane serve``.

Each test leaves screenshots of the pages it saw in the test artifacts
(:func:`tests.browser.artifacts`). Every page must load without a console
message, an uncaught error or a violation of its Content-Security-Policy.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from tests.browser import Chromium, browser_page, chromium, screenshot  # noqa: F401 - chromium is a fixture
from tests.connectors.forward.test_fluentbit_forward import TAG as FB_TAG
from tests.connectors.forward.test_fluentbit_forward import fluent_bit_config
from tests.console.test_console_http import HOSTILE_KEY, HOSTILE_TAG, HOSTILE_VALUE, USERS, base_of, post_events
from tests.fluent_programs import Program, start_fluent_bit
from tests.serve_process import Serve, event_schema, start_serve

pytestmark = pytest.mark.timeout(300)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g} s: {what}")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    """One server for the module's tests: each sends to tags of its own."""
    schemas = {"plant.toml": event_schema("plant.*"), "fb.toml": event_schema("fb.*")}
    with start_serve(tmp_path_factory.mktemp("console"), schemas) as serve:
        yield serve


def lines(start: int, count: int) -> str:
    now = datetime.now(UTC)
    stamp = now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}+0000"
    return "".join(
        json.dumps({"t": stamp, "seq": i, "msg": f"line {i}", "value": i * 0.25}) + "\n"
        for i in range(start, start + count)
    )


def fluent_bit(tmp_path: Path, source: Path, port: int) -> Program:
    """Real Fluent Bit tailing ``source`` (JSON lines) into the Forward port, as the Forward tests run it."""
    return start_fluent_bit(fluent_bit_config(tmp_path, source, port), tmp_path)


def rows_shown(page, tag: str) -> int:  # type: ignore[no-untyped-def]
    cell = page.locator(f'#streams tr[data-tag="{tag}"] td.rows')
    return int(cell.inner_text()) if cell.count() else 0


def test_a_live_fluent_bit_run_updates_the_overview_and_the_tail_without_reload(
    chromium: Chromium, served: Serve, tmp_path: Path
):
    source = tmp_path / "events.log"
    source.write_text(lines(0, 50))
    with fluent_bit(tmp_path, source, served.forward_port), browser_page(chromium, base_of(served)) as tab:
        page = tab.page
        page.goto("/")
        page.evaluate("window.__loadedOnce = true")  # a reload would drop it
        wait_for(lambda: rows_shown(page, FB_TAG) == 50, "the first 50 events shown")
        with source.open("a") as f:
            f.write(lines(50, 70))
        wait_for(lambda: rows_shown(page, FB_TAG) == 120, "the overview counting the next 70 without reload")
        assert page.evaluate("window.__loadedOnce") is True
        # Fluent Bit is a sender: its connections (it opens one a flush) add up to every event it sent.
        wait_for(lambda: forward_events_listed(page) == 120, "Fluent Bit's 120 events in the senders table")
        screenshot(page, "console-overview-live")

        page.goto(f"/-/console/stream?tag={FB_TAG}")
        page.evaluate("window.__loadedOnce = true")
        wait_for(lambda: "120 rows" in page.locator("#tail").inner_text(), "the tail at 120 rows")
        with source.open("a") as f:
            f.write(lines(120, 5))
        wait_for(lambda: "125 rows" in page.locator("#tail").inner_text(), "the tail showing the new rows")
        assert "line 124" in page.locator("#tail tbody tr").first.inner_text()  # newest first
        # Paused, the tail keeps what it shows while rows arrive; resumed, it catches up.
        page.click("#tail-toggle")
        with source.open("a") as f:
            f.write(lines(125, 5))
        wait_for(lambda: rows_shown_by_metrics(served) >= 130, "the server committing 130 events")
        time.sleep(2.5)
        assert "125 rows" in page.locator("#tail").inner_text()
        page.click("#tail-toggle")
        wait_for(lambda: "130 rows" in page.locator("#tail").inner_text(), "the resumed tail at 130 rows")
        assert page.evaluate("window.__loadedOnce") is True
        screenshot(page, "console-stream-live-tail")
    assert tab.problems() == []


def forward_events_listed(page) -> int:  # type: ignore[no-untyped-def]
    rows = page.locator("#senders tbody tr", has_text="forward")
    return sum(int(rows.nth(i).locator("td.n").first.inner_text()) for i in range(rows.count()))


def rows_shown_by_metrics(serve: Serve) -> int:
    import urllib.request

    with urllib.request.urlopen(base_of(serve) + "/metrics", timeout=10) as response:
        text = response.read().decode()
    for line in text.splitlines():
        if line.startswith(f'windvane_stream_events_total{{tag="{FB_TAG}"}}'):
            return int(float(line.split()[-1]))
    return 0


def test_a_plot_draws_the_points_the_server_chose_and_zooming_asks_again(chromium: Chromium, served: Serve):
    base = base_of(served)
    start = time.time() - 3600
    records = [{"seq": i, "msg": "m", "value": float((i % 100) - 50), "time": start + i * 0.5} for i in range(5000)]
    assert post_events(base, "plant.plot", records) == 200
    width = 800
    with browser_page(chromium, base) as tab:
        page = tab.page
        page.set_viewport_size({"width": width + 100, "height": 900})
        page.goto("/-/console/stream?tag=plant.plot&column=value")
        page.wait_for_selector("#plot canvas")
        wait_for(lambda: page.get_attribute("#plot", "data-points") is not None, "the plot's points")
        points = int(page.get_attribute("#plot", "data-points") or 0)
        assert int(page.get_attribute("#plot", "data-rows") or 0) == 5000
        plot_width = page.evaluate("document.getElementById('plot').clientWidth")
        assert 0 < points <= 4 * plot_width  # M4: at most four points a pixel column, never every row
        # The canvas is not blank, and the axes are labelled.
        assert page.evaluate(
            """() => { const c = document.querySelector('#plot canvas');
                       const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
                       for (let i = 3; i < d.length; i += 4) if (d[i] !== 0) return true; return false; }"""
        )
        labels = page.locator("#plot .u-label").all_inner_texts()
        assert "time (UTC)" in labels and "value" in labels
        screenshot(page, "console-plot")
        first_from = float(page.get_attribute("#plot", "data-from") or 0)
        first_to = float(page.get_attribute("#plot", "data-to") or 0)
        # Drag across the middle fifth of the plot: the server is asked for that range alone.
        box = page.locator("#plot .u-over").bounding_box()
        assert box is not None
        y = box["y"] + box["height"] / 2
        page.mouse.move(box["x"] + box["width"] * 0.4, y)
        page.mouse.down()
        page.mouse.move(box["x"] + box["width"] * 0.6, y, steps=5)
        with page.expect_response(lambda r: "plot.json" in r.url and "from=" in r.url) as answered:
            page.mouse.up()
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(answered.value.url).query)
        zoomed_from, zoomed_to = float(query["from"][0]), float(query["to"][0])
        assert first_from < zoomed_from < zoomed_to < first_to
        wait_for(lambda: float(page.get_attribute("#plot", "data-from") or 0) == zoomed_from, "the zoomed plot")
        rows = int(page.get_attribute("#plot", "data-rows") or 0)
        assert 0 < rows < 5000
        shown = datetime.fromisoformat(page.input_value("#plot-form input[name=from]").replace("Z", "+00:00"))
        assert abs(shown.timestamp() - zoomed_from) < 0.001  # the form says the range, as ISO 8601
        screenshot(page, "console-plot-zoomed")
    assert tab.problems() == []


def test_quarantine_actions_in_the_browser_discard_and_replay(chromium: Chromium, served: Serve):
    base = base_of(served)
    assert post_events(base, "plant.q", [{"msg": "no seq", "value": 1.0}, {"msg": "no seq", "value": 2.0}]) == 200
    assert post_events(base, "plant.q", [{"seq": "x", "msg": "bad seq", "value": 3.0}]) == 200
    with browser_page(chromium, base) as tab:
        page = tab.page
        page.goto("/")
        page.click('#quarantines a:text("plant.q")')
        page.wait_for_selector("#reasons")
        assert "3 records" in page.inner_text("main")
        screenshot(page, "console-quarantine")
        page.click("#reasons tr:has-text(\"'seq' is missing\") a.action")
        assert "This deletes 2 records" in page.inner_text("#what")
        screenshot(page, "console-confirm-discard")
        page.click("#confirm")
        assert "2 records discarded; 1 remain" in page.inner_text("#result")
        screenshot(page, "console-discarded")
        page.goto("/-/console/quarantine?tag=plant.q")
        page.click("#replay")
        page.click("#confirm")
        # The remaining record still does not fit ("x" is no seq): it stays, with its reason.
        assert "0 records moved into the stream; 1 remain" in page.inner_text("#result")
    assert tab.problems() == []


def test_hostile_tags_keys_and_values_are_text(chromium: Chromium, served: Serve):
    base = base_of(served)
    assert post_events(base, "plant.h", [{"seq": 1, "msg": HOSTILE_VALUE, "value": 1.0, HOSTILE_KEY: "v"}]) == 200
    assert post_events(base, "plant.h", [{"msg": HOSTILE_VALUE}]) == 200
    assert post_events(base, HOSTILE_TAG, [{"seq": 1, "msg": HOSTILE_VALUE, "value": 1.0}]) == 200
    pages = [
        "/",
        "/-/console/stream?tag=plant.h",
        "/-/console/quarantine?tag=plant.h",
        "/-/console/quarantine?tag=" + urllib.parse.quote(HOSTILE_TAG),
    ]
    with browser_page(chromium, base) as tab:
        page = tab.page
        for path in pages:
            page.goto(path)
            page.wait_for_timeout(1500)  # a refresh or two of the live parts
            assert page.evaluate("window.pwned") is None, path
            assert page.locator("img").count() == 0, path
            screenshot(page, "console-hostile-" + path.split("?")[0].strip("/").replace("/", "-") or "overview")
        page.goto("/-/console/quarantine?tag=plant.h")
        assert HOSTILE_VALUE in page.inner_text("#records")  # shown as the text it is
        page.goto("/")
        assert HOSTILE_TAG in page.inner_text("#quarantines")
    assert tab.problems() == []


def test_users_in_the_browser(chromium: Chromium, tmp_path: Path):
    users = tmp_path / "users.toml"
    users.write_text(USERS)
    schemas = {"plant.toml": event_schema("plant.*")}
    with start_serve(tmp_path, schemas, "--users", str(users), "--http-auth", "users", forward=None) as serve:
        base = base_of(serve)
        assert post_events(base, "plant.u", [{"msg": "no seq"}], ("sender", "sender-secret")) == 200
        with browser_page(chromium, base) as tab:
            answer = tab.page.request.get(base + "/")
            assert answer.status == 401 and "Sign in" in answer.text()
        with browser_page(chromium, base, user="reader", password="reader-secret") as tab:
            page = tab.page
            page.goto("/-/console/quarantine?tag=plant.u")
            assert "1 records" in page.inner_text("main")
            assert page.locator("a.action").count() == 0  # a reader is offered no action
            page.goto("/-/console/quarantine/replay?tag=plant.u")
            assert page.locator("#confirm").count() == 0
            screenshot(page, "console-reader")
            # Sent anyway (with the page's own token): refused for the role.
            token = next(c["value"] for c in page.context.cookies() if c["name"] == "windvane_console")
            answer = page.request.post(
                base + "/-/console/quarantine/replay", form={"tag": "plant.u", "count": "1", "token": token}
            )
            assert answer.status == 403 and "write" in answer.text()
            # Without the token: refused even for a user who may act (checked after the role).
        with browser_page(chromium, base, user="operator", password="operator-secret") as tab:
            page = tab.page
            answer = page.request.post(base + "/-/console/quarantine/replay", form={"tag": "plant.u", "count": "1"})
            assert answer.status == 403 and "token" in answer.text()
            page.goto("/-/console/quarantine?tag=plant.u")
            assert page.locator("#replay").count() == 1
        # The reader's page loaded nothing it should not: its 403s were requests, not page loads.
        assert [p for p in tab.problems() if "403" not in p] == []


def test_the_history_slider_shows_the_stream_as_an_earlier_commit_left_it(chromium: Chromium, served: Serve):
    base = base_of(served)
    for first in (0, 10, 20):
        records = [{"seq": i, "msg": f"batch from {first}", "value": float(i)} for i in range(first, first + 10)]
        assert post_events(base, "plant.history", records) == 200
    with browser_page(chromium, base) as tab:
        page = tab.page
        page.goto("/-/console/stream?tag=plant.history")
        assert page.inner_text("#stream-rows") == "30"
        page.wait_for_selector("#history")
        slider = page.locator("#history")
        last = int(slider.get_attribute("max") or 0)
        assert last >= 2 and slider.input_value() == str(last)
        # Two commits back: the stream held the first batch alone.
        slider.fill(str(last - 2))
        assert "0x" in page.inner_text("#history-label")
        page.click("#history-form button[type=submit]")
        page.wait_for_selector("#history")
        assert page.inner_text("#stream-rows") == "10"
        assert "as of 0x" in page.inner_text("section.figures")
        assert page.locator("#history").input_value() == str(last - 2)
        screenshot(page, "console-history")
    assert tab.problems() == []


VIBRATION_SCHEMA = """
kind = "vibration"
tags = ["vib.*"]
[vibration]
channels = 3
dtype = "float32"
sample_rate = 25600
"""


def test_a_vibration_stream_shows_its_rms_and_the_spectrum_of_a_window(chromium: Chromium, tmp_path: Path):
    rate, block = 25600, 2560
    t = np.arange(block * 20) / rate
    # 1 kHz on channel 0, 3 kHz on channel 1, noise on channel 2; louder in the second half.
    gain = np.where(t < t[-1] / 2, 1.0, 3.0)
    samples = np.stack(
        [gain * np.sin(2 * np.pi * 1000 * t), gain * np.sin(2 * np.pi * 3000 * t), 0.1 * np.cos(t)], axis=1
    ).astype("<f4")
    start = time.time() - 10
    with start_serve(tmp_path, {"vib.toml": VIBRATION_SCHEMA}, forward=None) as serve:
        base = base_of(serve)
        records = [
            {"time": start + i * block / rate, "samples": samples[i * block : (i + 1) * block].tolist()}
            for i in range(20)
        ]
        assert post_events(base, "vib.pump", records) == 200
        with browser_page(chromium, base) as tab:
            page = tab.page
            page.set_viewport_size({"width": 1100, "height": 1400})
            page.goto("/-/console/stream?tag=vib.pump")
            page.wait_for_selector("#rms canvas")
            page.wait_for_selector("#spectrum canvas")
            wait_for(lambda: page.get_attribute("#spectrum", "data-bins") is not None, "the first spectrum")
            assert int(page.get_attribute("#rms", "data-points") or 0) > 10
            legend = page.locator("#rms .u-legend").inner_text()
            assert "channel 0" in legend and "channel 2" in legend
            # The default spectrum is the last second: 25,600 rows.
            assert page.get_attribute("#spectrum", "data-rows") == "25600"
            assert "sampled at 25600 Hz" in page.inner_text("#spectrum-info")
            screenshot(page, "console-vibration")
            # Drag across the first quarter of the RMS plot: the spectrum of that window is asked for.
            box = page.locator("#rms .u-over").bounding_box()
            assert box is not None
            y = box["y"] + box["height"] / 2
            page.mouse.move(box["x"] + 2, y)
            page.mouse.down()
            page.mouse.move(box["x"] + box["width"] * 0.25, y, steps=5)
            with page.expect_response(lambda r: "spectrum.json" in r.url and "from=" in r.url) as answered:
                page.mouse.up()
            data = answered.value.json()
            peak = [int(np.argmax(np.nan_to_num(np.array(ch, dtype=float)))) for ch in data["channels"][:2]]
            assert [round(data["x"][i]) for i in peak] == [1000, 3000]
            wait_for(lambda: page.get_attribute("#spectrum", "data-rows") == str(data["rows"]), "the window's spectrum")
            assert int(data["rows"]) < 25600 * 2
            screenshot(page, "console-vibration-window")
        assert tab.problems() == []
