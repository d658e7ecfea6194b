"""Real-browser tests: Playwright's sync API driving Debian's chromium (``/usr/bin/chromium``).

The console's pages are checked where they run, in a browser: their scripts load under the console's
Content-Security-Policy, htmx swaps what the server sends, uPlot draws. A test imports the :func:`chromium`
fixture, opens a page with :func:`browser_page` and asserts that the page logged nothing, raised nothing and
broke no rule of its policy::

    from tests.browser import browser_page, chromium, screenshot, serve

    def test_overview(chromium):
        with serve(console_app()) as url, browser_page(chromium, url) as tab:
            tab.page.goto("/")
            screenshot(tab.page, "overview")
        assert tab.problems() == []

Playwright's browsers are never downloaded (``playwright install`` is not part of the setup): the fixture
launches the chromium Debian packages, which ``scripts/test install`` installs along with the ``playwright``
package. Without either the fixture fails, naming what to install: CI runs these tests, so they never skip.

Playwright's sync API runs its own asyncio loop, and refuses to start inside a running one: browser tests are
plain ``def`` tests (not ``async def``, and using no async fixture), and the server they talk to runs in a
thread (:func:`serve` runs an aiohttp application there) or a process of its own. While Playwright runs, it marks its loop as the thread's running loop between
calls, which would stop every asyncio test that comes after it in the same process; :func:`browser_page` hands
the loop over only while a page is open, so that browser tests and asyncio tests share a worker.
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from aiohttp import web

if TYPE_CHECKING:
    from playwright.sync_api import Browser, ConsoleMessage, Error, HttpCredentials, Page, Playwright

REPO = Path(__file__).resolve().parent.parent
#: The browser: Debian's chromium, never one Playwright downloads.
CHROMIUM = Path("/usr/bin/chromium")
INSTALL = "run scripts/test install (it installs Debian's chromium and the playwright package)"

#: Reports each violation of the page's Content-Security-Policy to :attr:`BrowserPage.csp_violations`.
#: It runs before the page's own scripts, as the browser's own code, which the policy does not restrict.
_CSP_LISTENER = """
document.addEventListener("securitypolicyviolation", (event) => {
    window.__windvaneCspViolation(
        `${event.effectiveDirective} blocked ${event.blockedURI || "inline"} (${event.sourceFile}:${event.lineNumber})`
    );
});
"""


def artifacts() -> Path:
    """Where tests leave files for people to look at: ``$WINDVANE_TEST_ARTIFACTS``, else ``test-artifacts/``.

    A CI run can point the variable at the folder it keeps; git ignores the default one.
    """
    folder = Path(os.environ.get("WINDVANE_TEST_ARTIFACTS") or REPO / "test-artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@dataclass
class Chromium:
    """The session's browser, with the Playwright driver that runs it (whose loop :func:`browser_page` needs)."""

    playwright: Playwright
    browser: Browser
    loop: asyncio.AbstractEventLoop


def _mark_running(loop: asyncio.AbstractEventLoop | None) -> None:
    """Mark ``loop`` as the thread's running loop, or none (None), as Playwright's own sync calls do.

    asyncio has no public call for it; this one it exports for loops run by other means, Playwright's included.
    """
    asyncio.events._set_running_loop(loop)  # noqa: SLF001 (the hand-over the module's docstring describes)


@pytest.fixture(scope="session")
def chromium() -> Iterator[Chromium]:
    """Debian's chromium, headless, for the session (each test opens its own context with :func:`browser_page`).

    Fails, never skips, when chromium or Playwright is missing: CI must run the browser tests.
    """
    try:
        from playwright.sync_api import Error as PlaywrightError
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail(f"the playwright package is not installed: {INSTALL}", pytrace=False)
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} not found: {INSTALL}", pytrace=False)
    playwright = sync_playwright().start()
    try:
        # Chromium's sandbox needs a user namespace that root in a container does not get.
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox"] if os.geteuid() == 0 else []
        )
    except PlaywrightError as error:
        playwright.stop()
        pytest.fail(f"{CHROMIUM} did not start: {error.message}", pytrace=False)
    # Playwright's loop, which its last call left marked as running: unmarked until browser_page needs it.
    loop = asyncio.get_running_loop()
    _mark_running(None)
    yield Chromium(playwright, browser, loop)
    _mark_running(loop)
    try:
        browser.close()
    finally:
        playwright.stop()


@dataclass
class BrowserPage:
    """A page in a fresh browser context, and what went wrong in it, each as a line of text.

    ``console``: every message the page logged (``"error: ..."``, ``"warning: ..."``, ``"log: ..."``),
    ``page_errors``: exceptions its scripts did not catch, ``csp_violations``: what its Content-Security-Policy
    blocked (the browser also logs each to ``console``).
    """

    page: Page
    console: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    csp_violations: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        """Everything recorded: a test of a page that should work asserts that this is empty."""
        return [*self.console, *self.page_errors, *(f"CSP: {line}" for line in self.csp_violations)]

    def settle(self) -> None:
        """Let the page dispatch what it has queued, so that the lists hold the violations reported so far.

        The browser dispatches a violation's event in a task of its own, after the script or load it blocked:
        a task queued now runs after it, and its answer reaches the test after the report of the violation.
        """
        self.page.evaluate("() => new Promise((resolve) => setTimeout(resolve, 0))")


def _console_line(message: ConsoleMessage) -> str:
    location = message.location
    where = f" ({location['url']}:{location['lineNumber']})" if location.get("url") else ""
    return f"{message.type}: {message.text}{where}"


def _error_line(error: Error) -> str:
    return f"{error.name}: {error.message}"


@contextmanager
def browser_page(
    chromium: Chromium, base_url: str, *, user: str | None = None, password: str | None = None
) -> Iterator[BrowserPage]:
    """A page in a context of its own (no cookies or cache from other tests), recording what went wrong.

    ``page.goto("/path")`` resolves against ``base_url``; with ``user``, the context answers HTTP Basic
    authentication with ``user`` and ``password``. Without, a page that asks for it does not load
    (``net::ERR_INVALID_AUTH_CREDENTIALS``): ``tab.page.request.get(path)`` shows its 401. The context is
    closed on the way out; the lists stay, for the test's assertions after the ``with``.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("browser_page drives Playwright's sync API: use it in a plain def test, not an async one")
    _mark_running(chromium.loop)
    try:
        credentials: HttpCredentials | None = None if user is None else {"username": user, "password": password or ""}
        context = chromium.browser.new_context(base_url=base_url, http_credentials=credentials)
        try:
            page = context.new_page()
            tab = BrowserPage(page)
            page.on("console", lambda message: tab.console.append(_console_line(message)))
            page.on("pageerror", lambda error: tab.page_errors.append(_error_line(error)))
            page.expose_function("__windvaneCspViolation", lambda line: tab.csp_violations.append(line))
            page.add_init_script(_CSP_LISTENER)
            yield tab
        finally:
            context.close()
    finally:
        _mark_running(None)


def screenshot(page: Page, name: str) -> Path:
    """Save the whole page as ``<artifacts>/<name>.png`` and return its path, for people to look at."""
    path = artifacts() / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', name)}.png"
    page.screenshot(path=path, full_page=True)
    return path


@contextmanager
def serve(app: web.Application) -> Iterator[str]:
    """Serve ``app`` on a free port of 127.0.0.1 from a thread running an asyncio loop of its own; yield its URL.

    A browser test is a plain ``def`` test, whose thread belongs to Playwright's loop: the application runs
    beside it, its startup and cleanup hooks included, and stops on the way out.
    """
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app, access_log=None)

    async def start() -> str:
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        host, port = runner.addresses[0][:2]
        return f"http://{host}:{port}"

    thread = threading.Thread(target=loop.run_forever, name="browser-test-server", daemon=True)
    thread.start()
    try:
        yield asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=60)
    finally:
        try:
            asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=60)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            loop.close()
