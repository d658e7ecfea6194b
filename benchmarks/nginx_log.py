"""A deterministic nginx access log (the default ``combined`` format) for the log parsing benchmark.

    $remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent"

A realistic mix: IPv4 and some IPv6 clients, mostly anonymous, times one
to a few hundred milliseconds apart in two zones, GET-heavy requests over
a few hundred paths with query strings, HTTP/1.0, 1.1 and 2.0, a few
requests that are not HTTP (a TLS handshake sent to the plain port,
written by nginx as ``\\xHH`` escapes, status 400) and ``"-"``, statuses
and sizes as a site serves them, referers and user agents from real
browsers, bots and tools. Every line has the same ten space-separated
fields, so pyarrow's CSV reader reads it too.

The file is made once per size and generator version in a cache directory
(``WINDVANE_BENCH_CACHE``, default ``/tmp/windvane-bench-cache``) and kept.
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import numpy as np

VERSION = 1
SEED = 20261126
CACHE = Path(os.environ.get("WINDVANE_BENCH_CACHE", "/tmp/windvane-bench-cache"))
T0 = datetime.datetime(2026, 11, 1, tzinfo=datetime.UTC)
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
AGENTS = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Safari/605.1.15",
    "Mozilla/5.0 (X11; Linux x86_64; rv:132.0) Gecko/20100101 Firefox/132.0",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148",
    "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Mobile Safari/537.36",
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
    "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)",
    "curl/8.5.0",
    "python-requests/2.32.3",
    "Go-http-client/1.1",
    "Prometheus/2.54.1",
    "kube-probe/1.31",
    "-",
)
REFERERS = ("-", "-", "-", "https://www.example.com/", "https://www.google.com/", "https://shop.example.com/cart")
PATHS = tuple(
    [f"/static/{kind}/app.{i:04x}.{kind}" for kind in ("js", "css") for i in range(40)]
    + [f"/api/v2/items/{i}" for i in range(120)]
    + [f"/api/v2/search?q=term{i}&page={i % 7}&sort=price" for i in range(60)]
    + [f"/blog/{y}/{m:02d}/post-{m * y % 97}" for y in (2024, 2025, 2026) for m in range(1, 13)]
    + ["/", "/index.html", "/favicon.ico", "/robots.txt", "/healthz", "/metrics", "/login", "/wp-login.php"]
)
METHODS = ("GET",) * 85 + ("POST",) * 9 + ("HEAD",) * 3 + ("PUT", "DELETE", "OPTIONS")
PROTOCOLS = ("HTTP/1.1",) * 7 + ("HTTP/2.0",) * 2 + ("HTTP/1.0",)
STATUSES = (200,) * 80 + (304,) * 6 + (301, 302) * 2 + (404,) * 4 + (403, 401, 500, 502, 503, 499)
ODD_REQUESTS = ("-", "\\x16\\x03\\x01\\x02\\x00\\x01\\x00\\x01\\xFC\\x03\\x03\\xB4\\x1E", "GET /")
USERS = ("-",) * 60 + ("alice", "bob", "svc-backup")


def _times(rng: np.random.Generator, first: int, count: int) -> list[str]:
    """``count`` nginx $time_local stamps, the n-th at ``T0 + (first + n) * ~50 ms``, in +0000 or +0100."""
    steps = (first + np.arange(count)) * 50 + rng.integers(0, 40, count)
    offsets = np.where(rng.random(count) < 0.3, 3600, 0)
    out = []
    for ms, offset in zip(steps.tolist(), offsets.tolist()):
        t = T0 + datetime.timedelta(milliseconds=ms + offset * 1000)
        zone = "+0100" if offset else "+0000"
        out.append(f"{t.day:02d}/{MONTHS[t.month - 1]}/{t.year}:{t.hour:02d}:{t.minute:02d}:{t.second:02d} {zone}")
    return out


def _requests(rng: np.random.Generator, count: int) -> list[str]:
    methods = rng.integers(0, len(METHODS), count)
    paths = rng.integers(0, len(PATHS), count)
    protocols = rng.integers(0, len(PROTOCOLS), count)
    odd = rng.random(count) < 0.002
    return [
        ODD_REQUESTS[p % len(ODD_REQUESTS)] if o else f"{METHODS[m]} {PATHS[p]} {PROTOCOLS[v]}"
        for m, p, v, o in zip(methods.tolist(), paths.tolist(), protocols.tolist(), odd.tolist())
    ]


def _addresses(rng: np.random.Generator, count: int) -> list[str]:
    octets = rng.integers(1, 255, (count, 4)).tolist()
    six = (rng.random(count) < 0.1).tolist()
    return [f"2001:db8::{a:x}:{b:x}" if s else f"{a}.{b}.{c}.{d}" for (a, b, c, d), s in zip(octets, six)]


def lines(first: int, count: int) -> str:
    """Lines ``first`` to ``first + count`` of the log (each ends with a newline)."""
    rng = np.random.default_rng([SEED, first])
    statuses = np.array(STATUSES)[rng.integers(0, len(STATUSES), count)]
    sizes = np.where(statuses == 304, 0, rng.lognormal(8, 1.5, count).astype(np.int64))
    users = rng.integers(0, len(USERS), count).tolist()
    referers = rng.integers(0, len(REFERERS), count).tolist()
    agents = rng.integers(0, len(AGENTS), count).tolist()
    parts = zip(
        _addresses(rng, count),
        users,
        _times(rng, first, count),
        _requests(rng, count),
        statuses.tolist(),
        sizes.tolist(),
    )
    return "".join(
        f'{addr} - {USERS[u]} [{when}] "{request}" {status} {size} "{REFERERS[r]}" "{AGENTS[a]}"\n'
        for (addr, u, when, request, status, size), r, a in zip(parts, referers, agents)
    )


def access_log(nbytes: int) -> tuple[Path, int]:
    """The cached log of about ``nbytes`` (whole lines, at least ``nbytes``), and its line count."""
    path = CACHE / f"nginx-access-v{VERSION}-{nbytes}.log"
    count_path = path.with_suffix(".count")
    if path.exists() and count_path.exists():
        return path, int(count_path.read_text())
    CACHE.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    written = count = 0
    per = 1 << 16
    with open(partial, "w", encoding="ascii") as f:
        while written < nbytes:
            text = lines(count, per)
            f.write(text)
            written += len(text)
            count += per
    os.replace(partial, path)
    count_path.write_text(str(count))
    return path, count
