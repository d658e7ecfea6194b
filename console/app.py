"""The console's routes on an aiohttp application: pages, the fragments they refresh, plot data, actions.

Routes (every one needs the ``read`` role, actions ``write`` and the
page's token; see :mod:`console.access`):

* ``GET /`` — the overview: health, commits, streams (``q=`` filters the
  tags, ``page=``), quarantines. ``GET /-/console/overview`` is its body
  alone, which the page fetches again every few seconds.
* ``GET /-/console/stream?tag=&at=`` — a stream: figures, columns, a plot
  and a live tail. ``.../stream/plot.json?tag=&column=&from=&to=&width=``
  — a column's points for a plot ``width`` pixels wide (JSON);
  ``.../stream/tail?tag=&n=`` — the newest rows (a fragment). A vibration
  stream's page also draws ``.../stream/rms.json?tag=&column=&from=&to=&width=``
  (RMS per channel over time) and ``.../stream/spectrum.json?tag=&column=&from=&to=&nfft=``
  (the power spectral density of the window dragged across the RMS plot;
  the last second by default).
* ``GET /-/console/stream/download?tag=&format=parquet|csv&from=&to=&at=``
  — the rows of a time range as a file, written by :func:`windvane.export.export`
  (one snapshot, memory bounded) to a temporary file and sent;
  :attr:`ConsoleConfig.downloads` at a time, with no time limit.
* ``GET /-/console/stream/revisions?tag=&at=`` — the stream's last commits, a
  slider between them (a fragment the stream page loads after itself).
* ``GET /-/console/quarantine?tag=`` — a tag's quarantine: reasons, the
  latest records verbatim. ``GET .../quarantine/replay?tag=`` and
  ``.../quarantine/discard?tag=&reason=`` say what the action will do and
  ask to confirm; ``POST`` to the same path does it.
* ``GET /-/console/static/<file>`` — the console's script, style and the
  libraries shipped with it.

Every query runs on :class:`Queries` (a few threads, a time limit, a short
queue): a page waits for a thread or is answered 503 at once, and never
runs on the event loop that acknowledges events. Every response carries a
Content-Security-Policy that allows scripts and styles from the console
alone (no inline script), and every value from the store is escaped by the
templates.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import mimetypes
import shutil
import tempfile
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import jinja2
from aiohttp import web

from windvane.ingest import replay
from windvane.ingest.auth import Users
from windvane.ingest.times import time_ns

from . import views
from .access import TOKEN_FIELD, Access
from .config import ConsoleConfig
from .errors import BadQuery, Busy, Conflict, ConsoleError, NotAuthenticated, TimedOut
from .rates import Rates

log = logging.getLogger(__name__)

T = TypeVar("T")

HERE = Path(__file__).resolve().parent
PREFIX = "/-/console"
#: What a selection can be downloaded as: the export formats of one file each.
DOWNLOADS = ("parquet", "csv")
#: The Content-Security-Policy of every console response: its own scripts, styles and requests only.
POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


class Queries:
    """Runs the console's blocking reads: ``threads`` at a time, ``waiting`` more queued, each given
    ``timeout`` seconds (past it the page is answered 504; the read finishes in its thread).

    :meth:`shared` answers the same read asked again soon with the last answer, and askers of a read
    already running wait for it: ten people watching one page cost one read a refresh, not ten, and the
    threads the reads run in share the interpreter with ingestion. "Soon" is ``fresh_seconds``, or
    ``cost_factor`` times as long as the read took when that is longer: a read that is dear (a plot of
    a long range, a big store's overview) is made again less often, so that the console's reads keep
    to a small share of a core however costly each is.
    """

    def __init__(self, config: ConsoleConfig):
        self.config = config
        self.pool = ThreadPoolExecutor(config.threads, thread_name_prefix="windvane-console")
        self.taken = 0
        # A read's key -> (until when, by the event loop's clock, its answer is given again; the answer), oldest
        # first.
        self._answers: collections.OrderedDict[Hashable, tuple[float, Any]] = collections.OrderedDict()
        self._running: dict[Hashable, asyncio.Future[Any]] = {}

    async def shared(self, key: Hashable, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        found = self._answers.get(key)
        if found is not None and loop.time() < found[0]:
            answer: T = found[1]
            return answer
        running = self._running.get(key)
        if running is not None:
            shared: T = await asyncio.shield(running)
            return shared
        future: asyncio.Future[Any] = loop.create_future()
        self._running[key] = future
        started = loop.time()
        try:
            answer = await self.run(fn, *args)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: an error no one else waited for is not reported twice
            raise
        else:
            future.set_result(answer)
            now = loop.time()
            self._answers[key] = (
                now + max(self.config.fresh_seconds, self.config.cost_factor * (now - started)),
                answer,
            )
            self._answers.move_to_end(key)
            while len(self._answers) > self.config.answers_kept:
                self._answers.popitem(last=False)
            return answer
        finally:
            del self._running[key]

    def forget(self) -> None:
        """Drop every kept answer: an action changed what they show."""
        self._answers.clear()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        if self.taken >= self.config.threads + self.config.waiting:
            raise Busy("the console's queries are all taken: try again in a moment")
        self.taken += 1
        try:
            future = asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)
            try:
                return await asyncio.wait_for(future, self.config.timeout)
            except TimeoutError:
                raise TimedOut(
                    f"the query took longer than {self.config.timeout:g} s, the console's limit: "
                    "narrow it (a shorter time range, a filter)"
                ) from None
        finally:
            self.taken -= 1

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def _int(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    text = request.query.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise BadQuery(f"{name}={text!r} is not a whole number") from None
    if not low <= value <= high:
        raise BadQuery(f"{name}={value} is out of range: give {low} to {high}")
    return value


def _time(request: web.Request, name: str) -> int | None:
    text = request.query.get(name)
    if not text:
        return None
    found = time_ns(text)
    if found is None:
        raise BadQuery(f"{name}={text!r} is not a time: give ISO 8601 text or Unix seconds")
    return found


def _tag(request: web.Request) -> str:
    tag = request.query.get("tag")
    if not tag:
        raise BadQuery("name the stream: ?tag=<tag>")
    return tag


class Console:
    """The console over ``source``: add its routes to an application with :meth:`add_routes`."""

    def __init__(self, source: views.Source, users: Users | None = None, config: ConsoleConfig | None = None):
        self.source = source
        self.config = config or ConsoleConfig()
        self.access = Access(users)
        self.queries = Queries(self.config)
        self.rates = Rates()
        self.latency = Rates()
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self.templates.filters["size"] = _size
        self.templates.filters["seconds"] = _seconds
        self.templates.filters["rate"] = _rate
        self.static = _static_files(HERE / "static")
        self._sampler: asyncio.Task[None] | None = None
        self._downloads = asyncio.Semaphore(self.config.downloads)

    # -- wiring -------------------------------------------------------------------------------

    def add_routes(self, app: web.Application) -> None:
        """Add the console's routes (the module docstring) to ``app``, and its start and stop."""
        get = app.router.add_get
        get("/", self._page(self._overview))
        get(f"{PREFIX}/overview", self._page(self._overview_part))
        get(f"{PREFIX}/stream", self._page(self._stream))
        get(f"{PREFIX}/stream/tail", self._page(self._tail))
        get(f"{PREFIX}/stream/revisions", self._page(self._revisions))
        get(f"{PREFIX}/stream/plot.json", self._plot)
        get(f"{PREFIX}/stream/rms.json", self._rms)
        get(f"{PREFIX}/stream/spectrum.json", self._spectrum)
        get(f"{PREFIX}/stream/download", self._page(self._download))
        get(f"{PREFIX}/quarantine", self._page(self._quarantine))
        for action in ("replay", "discard"):
            get(f"{PREFIX}/quarantine/{action}", self._page(self._confirm))
            app.router.add_post(f"{PREFIX}/quarantine/{action}", self._page(self._act, role="write"))
        get(f"{PREFIX}/static/{{name:.+}}", self._static)
        app.router.add_route("*", f"{PREFIX}/{{rest:.*}}", self._page(self._unknown))
        app.cleanup_ctx.append(self._running)

    async def _running(self, app: web.Application) -> AsyncIterator[None]:
        if self.source.samples is not None:
            self._sampler = asyncio.create_task(self._sample())
        yield
        if self._sampler is not None:
            self._sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sampler
        self.queries.close()

    async def _sample(self) -> None:
        """Record the serving process's per-tag totals now and then, so that rates exist before anyone looks."""
        samples = self.source.samples
        assert samples is not None
        while True:
            try:
                views.record(self.rates, self.latency, await self.queries.run(samples))
            except Exception:  # a missed sample leaves a gap, never stops the sampler
                log.debug("the console could not sample the metrics", exc_info=True)
            await asyncio.sleep(self.config.sample_seconds)

    # -- answering ----------------------------------------------------------------------------

    def _page(
        self, handler: Callable[[web.Request, str | None], Any], role: str = "read"
    ) -> Callable[[web.Request], Any]:
        """``handler`` behind the role check, its ConsoleError answered as an error page, the token cookie
        set where it is new, and the security headers on every answer."""

        async def answer(request: web.Request) -> web.StreamResponse:
            token, new = self.access.token(request)
            try:
                user = self.access.user(request, role)
                body = await handler(request, user)
                response = body if isinstance(body, web.StreamResponse) else self._html(request, *body, token=token)
            except ConsoleError as exc:
                response = self._error(request, exc, token)
            if new:
                self.access.set_token(response, token, secure=request.secure)
            return _secured(response)

        return answer

    def _html(self, request: web.Request, template: str, context: dict[str, Any], *, token: str) -> web.Response:
        text = self.templates.get_template(template).render(
            **context,
            token=token,
            token_field=TOKEN_FIELD,
            prefix=PREFIX,
            label=self.source.label,
            refresh_ms=int(self.config.refresh_seconds * 1000),
        )
        return web.Response(text=text, content_type="text/html", charset="utf-8")

    def _error(self, request: web.Request, exc: ConsoleError, token: str) -> web.Response:
        response = self._html(request, "error.html", {"error": exc}, token=token)
        response.set_status(exc.status)
        if isinstance(exc, NotAuthenticated):
            response.headers["WWW-Authenticate"] = 'Basic realm="windvane", charset="UTF-8"'
        return response

    # -- pages --------------------------------------------------------------------------------

    async def _overview(self, request: web.Request, user: str | None) -> tuple[str, dict[str, Any]]:
        _, context = await self._overview_part(request, user)
        return "overview.html", context

    async def _overview_part(self, request: web.Request, user: str | None) -> tuple[str, dict[str, Any]]:
        query = request.query.get("q", "")
        page = _int(request, "page", 1, 1, 1_000_000)
        data = await self.queries.shared(
            ("overview", query, page), views.overview, self.source, self.rates, self.latency, query, page
        )
        return "overview_part.html", {"o": data, "user": user, "writer": self.access_write(user)}

    def access_write(self, user: str | None) -> bool:
        """Whether ``user`` may act (the pages show the actions only then)."""
        users = self.access.users
        return users is None or users.may(user, "write")

    async def _stream(self, request: web.Request, user: str | None) -> tuple[str, dict[str, Any]]:
        tag = _tag(request)
        at = request.query.get("at") or None
        data = await self.queries.shared(("stream", tag, at), views.stream_page, self.source.store, tag, at)
        plottable = [c.name for c in data.columns if c.plottable]
        column = request.query.get("column") or (plottable[0] if plottable else "")
        channels = next((c.channels for c in data.columns if c.name == column), 1)
        # A vibration stream's blocks: the column of several channels its RMS and spectrum are taken of.
        vibration = next((c.name for c in data.columns if c.plottable and c.channels > 1), None)
        return "stream.html", {
            "s": data,
            "user": user,
            "column": column,
            "channels": channels,
            "channel": _int(request, "channel", 0, 0, max(channels - 1, 0)),
            "vibration": vibration if data.kind == "vibration" else None,
            "plottable": plottable,
            "start": request.query.get("from", ""),
            "stop": request.query.get("to", ""),
            "tail_rows": self.config.tail_rows,
        }

    async def _tail(self, request: web.Request, user: str | None) -> tuple[str, dict[str, Any]]:
        tag = _tag(request)
        count = _int(request, "n", self.config.tail_rows, 1, 1000)
        data = await self.queries.shared(("tail", tag, count), views.tail, self.source.store, tag, count)
        return "tail.html", {"t": data, "tag": tag}

    async def _revisions(self, request: web.Request, user: str | None) -> tuple[str, dict[str, Any]]:
        tag = _tag(request)
        found = await self.queries.run(views.revisions, self.source.store, tag, self.config.revisions)
        at = request.query.get("at") or ""
        tids = [r.tid for r in found]
        selected = tids.index(at) if at in tids else len(found) - 1
        return "revisions.html", {"tag": tag, "revisions": found, "at": at, "selected": selected}

    async def _plot(self, request: web.Request) -> web.StreamResponse:
        async def points(tag: str, column: str, at: str | None) -> dict[str, Any]:
            width = _int(request, "width", 1500, 1, 10_000)
            channel = _int(request, "channel", 0, 0, 1_000_000)
            start, stop = _time(request, "from"), _time(request, "to")
            key = ("plot", tag, column, width, start, stop, at, channel)
            store = self.source.store
            return await self.queries.shared(key, views.plot, store, tag, column, width, start, stop, at, channel)

        return await self._json(request, points)

    async def _rms(self, request: web.Request) -> web.StreamResponse:
        async def points(tag: str, column: str, at: str | None) -> dict[str, Any]:
            width = _int(request, "width", 1500, 1, 10_000)
            start, stop = _time(request, "from"), _time(request, "to")
            key = ("rms", tag, column, width, start, stop, at)
            return await self.queries.shared(key, views.rms, self.source.store, tag, column, width, start, stop, at)

        return await self._json(request, points)

    async def _spectrum(self, request: web.Request) -> web.StreamResponse:
        async def bins(tag: str, column: str, at: str | None) -> dict[str, Any]:
            nfft = _int(request, "nfft", 4096, 64, 65536)
            start, stop = _time(request, "from"), _time(request, "to")
            key = ("spectrum", tag, column, start, stop, at, nfft)
            store = self.source.store
            return await self.queries.shared(key, views.power_spectrum, store, tag, column, start, stop, at, nfft)

        return await self._json(request, bins)

    async def _json(
        self, request: web.Request, answer: Callable[[str, str, str | None], Awaitable[dict[str, Any]]]
    ) -> web.StreamResponse:
        """The data a page's script draws, as JSON (errors too: ``{"error", "message"}`` with their status),
        with the server's time for it."""
        try:
            self.access.user(request, "read")
            started = time.perf_counter()
            data = await answer(_tag(request), request.query.get("column", ""), request.query.get("at") or None)
            data = {**data, "server_seconds": time.perf_counter() - started}
            response = web.Response(text=json.dumps(data), content_type="application/json")
        except ConsoleError as exc:
            response = web.Response(
                status=exc.status,
                text=json.dumps({"error": type(exc).__name__, "message": exc.message}),
                content_type="application/json",
            )
        return _secured(response)

    async def _download(self, request: web.Request, user: str | None) -> web.StreamResponse:
        """The selection as a file: exported in a thread (downloads take as long as their size needs, so
        they have a semaphore of their own, not the page queries' pool and time limit), then sent and
        removed."""
        tag = _tag(request)
        kind = request.query.get("format", "parquet")
        if kind not in DOWNLOADS:
            raise BadQuery(f"format={kind!r}: download as {' or '.join(DOWNLOADS)}")
        _time(request, "from"), _time(request, "to")  # a malformed time is this page's 400, before any work
        start, stop = request.query.get("from") or None, request.query.get("to") or None
        at = request.query.get("at") or None
        if self._downloads.locked():
            raise Busy(f"{self.config.downloads} downloads are being made: try again when one is done")
        async with self._downloads:
            folder = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="windvane-console-"))
            target = folder / f"download.{kind}"
            try:
                await asyncio.to_thread(views.download, self.source.store, tag, target, kind, start, stop, at)
                response = web.FileResponse(target, headers={"Content-Disposition": _attachment(tag, kind)})
                await response.prepare(request)
                await response.write_eof()
            finally:
                await asyncio.to_thread(shutil.rmtree, folder, True)
        return response

    async def _quarantine(self, request: web.Request, user: str | None) -> tuple[str, dict[str, Any]]:
        tag = _tag(request)
        data = await self.queries.run(views.quarantine_page, self.source.store, tag, self.config.quarantine_rows)
        return "quarantine.html", {"q": data, "user": user, "writer": self.access_write(user)}

    async def _confirm(self, request: web.Request, user: str | None) -> tuple[str, dict[str, Any]]:
        tag = _tag(request)
        action = request.path.rsplit("/", 1)[-1]
        reason = request.query.get("reason")
        data = await self.queries.run(views.quarantine_page, self.source.store, tag, 0)
        counts = dict(data.reasons)
        if reason is not None and reason not in counts:
            raise Conflict(f"the quarantine of {tag!r} holds no record quarantined for {reason!r} now")
        count = data.rows if reason is None else counts[reason]
        return "confirm.html", {
            "q": data,
            "action": action,
            "reason": reason,
            "count": count,
            "writer": self.access_write(user),
        }

    async def _act(self, request: web.Request, user: str | None) -> tuple[str, dict[str, Any]]:
        form = await request.post()
        given = form.get(TOKEN_FIELD)
        self.access.check_action(request, given if isinstance(given, str) else None)
        tag = _field(form, "tag")
        action = request.path.rsplit("/", 1)[-1]
        store = self.source.store
        if action == "replay":
            replayed = await self.queries.run(views.replay_quarantine, self.source, tag)
            self.queries.forget()
            return "done.html", {"tag": tag, "action": action, "count": replayed.replayed, "left": replayed.remaining}
        reason = form.get("reason")
        expected = _field(form, "count")
        try:
            wanted = int(expected)
        except ValueError:
            raise BadQuery(f"count={expected!r} is not a whole number") from None
        try:
            gone = await self.queries.run(
                views.discard_quarantine, store, tag, reason if isinstance(reason, str) else None, wanted
            )
        except replay.QuarantineChanged as exc:
            raise Conflict(str(exc)) from None
        self.queries.forget()
        return "done.html", {"tag": tag, "action": action, "count": gone.discarded, "left": gone.remaining}

    async def _unknown(self, request: web.Request, user: str | None) -> tuple[str, dict[str, Any]]:
        from .errors import NotFound

        raise NotFound(f"the console has no page {request.path!r}")

    async def _static(self, request: web.Request) -> web.StreamResponse:
        found = self.static.get(request.match_info["name"])
        if found is None:
            return _secured(web.Response(status=404, text="no such file", content_type="text/plain"))
        body, kind = found
        response = web.Response(body=body, content_type=kind, headers={"Cache-Control": "max-age=3600"})
        return _secured(response)


def _attachment(tag: str, kind: str) -> str:
    """A Content-Disposition naming the file after the tag (RFC 6266: an ASCII fallback, the tag in UTF-8)."""
    plain = "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "_" for c in tag) or "stream"
    return f"attachment; filename=\"{plain}.{kind}\"; filename*=UTF-8''{urllib.parse.quote(tag)}.{kind}"


def _field(form: Any, name: str) -> str:
    value = form.get(name)
    if not isinstance(value, str) or not value:
        raise BadQuery(f"the form has no {name!r}")
    return value


def _secured(response: web.StreamResponse) -> web.StreamResponse:
    headers = response.headers
    headers["Content-Security-Policy"] = POLICY
    headers["X-Content-Type-Options"] = "nosniff"
    headers["Referrer-Policy"] = "same-origin"  # with no-referrer, a form sends "Origin: null"
    headers["X-Frame-Options"] = "DENY"
    if "Cache-Control" not in headers:
        headers["Cache-Control"] = "no-store"
    return response


def _static_files(root: Path) -> dict[str, tuple[bytes, str]]:
    """Every file the console serves from ``root``, by its path under it, read once: a name not listed is
    404, so no request reaches another file."""
    out = {}
    for path in root.rglob("*"):
        if path.is_file() and path.suffix in (".js", ".css", ".svg"):
            kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
            out[path.relative_to(root).as_posix()] = (path.read_bytes(), kind)
    return out


def _size(value: int | None) -> str:
    if value is None:
        return "\u2013"  # an en dash: no value
    size = float(value)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} TB"


def _seconds(value: float | None) -> str:
    if value is None:
        return "\u2013"  # an en dash: no value
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:.1f} s"
    if value < 7200:
        return f"{value / 60:.0f} min"
    if value < 172800:
        return f"{value / 3600:.0f} h"
    return f"{value / 86400:.0f} d"


def _rate(value: float | None) -> str:
    if value is None:
        return "\u2013"  # an en dash: no value
    return f"{value:.0f}/s" if value >= 10 else f"{value:.2f}/s"
