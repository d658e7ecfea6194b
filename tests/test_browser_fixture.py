"""The browser fixture (tests.browser) against a real local page served under a Content-Security-Policy.

The page loads a script of its own and the vendored uPlot and htmx from ``console/static/vendor/``, the way
the console's pages do, and carries an inline script that its policy must block: the test proves that the
browser runs and enforces the policy, that the fixture records the violation, and that the vendored files
load and work under the policy.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from tests.browser import REPO, Chromium, browser_page, chromium, screenshot, serve  # noqa: F401 (chromium: a fixture)

VENDOR = REPO / "console" / "static" / "vendor"
#: What the console's pages are served under: scripts and styles from the server's own files only.
POLICY = "default-src 'self'"
# htmx adds an inline <style> of its own unless told not to; the console's policy forbids it.
PAGE = """<!doctype html>
<html>
<head>
<meta charset="utf-8">
<meta name="htmx-config" content='{"includeIndicatorStyles": false}'>
<title>browser fixture</title>
<link rel="stylesheet" href="/vendor/uPlot.min.css">
<script src="/ok.js"></script>
<script src="/vendor/uPlot.iife.min.js"></script>
<script src="/vendor/htmx.min.js"></script>
<script>window.inline = 1;</script>
</head>
<body><p>browser fixture</p><div id="plot"></div></body>
</html>
"""


async def page(request: web.Request) -> web.Response:
    return web.Response(text=PAGE, content_type="text/html")


async def ok_script(request: web.Request) -> web.Response:
    return web.Response(text="window.ok = 1;\n", content_type="text/javascript")


async def no_icon(request: web.Request) -> web.Response:
    """The browser asks for an icon; a 404 would be logged to the page's console."""
    return web.Response(status=204)


async def add_policy(request: web.Request, response: web.StreamResponse) -> None:
    response.headers["Content-Security-Policy"] = POLICY


@pytest.fixture
def page_url() -> Iterator[str]:
    """The page, its script and the vendored files, every response under the policy."""
    app = web.Application()
    app.router.add_get("/", page)
    app.router.add_get("/ok.js", ok_script)
    app.router.add_get("/favicon.ico", no_icon)
    app.router.add_static("/vendor/", VENDOR)
    app.on_response_prepare.append(add_policy)
    with serve(app) as url:
        yield url


def test_page_under_policy(chromium: Chromium, page_url: str) -> None:
    with browser_page(chromium, page_url) as tab:
        tab.page.goto("/")
        tab.settle()
        assert tab.page.evaluate("window.ok") == 1
        assert tab.page.evaluate("typeof window.inline") == "undefined"
        assert tab.page.evaluate("typeof uPlot") == "function"
        assert tab.page.evaluate("typeof htmx") == "object"
        # uPlot draws under the policy: a canvas, with the vendored stylesheet applied.
        tab.page.evaluate(
            """() => new uPlot({width: 320, height: 160, series: [{}, {stroke: "blue"}]},
                [[1, 2, 3], [1, 3, 2]], document.getElementById("plot"))"""
        )
        assert tab.page.locator("#plot canvas").count() == 1
        assert "system-ui" in tab.page.locator("#plot .uplot").evaluate("e => getComputedStyle(e).fontFamily")
        path: Path = screenshot(tab.page, "browser-fixture")
    assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert tab.page_errors == []
    assert len(tab.csp_violations) == 1, tab.csp_violations
    assert tab.csp_violations[0].startswith("script-src-elem blocked inline"), tab.csp_violations
    # The browser logs the same violation; nothing else is logged.
    assert len(tab.console) == 1 and "Content Security Policy" in tab.console[0], tab.console
