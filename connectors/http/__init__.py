"""HTTP ingestion compatible with fluentd's in_http / out_http and fluent-plugin-wendelin.

``config`` holds :class:`HttpConfig`, the server's settings and their
defaults; ``decode`` turns request bodies into :class:`ingest.batch.Batch`
objects (sans-IO); ``app`` serves them over aiohttp and acknowledges only
what the sink committed. See :mod:`connectors.http.app` for routes and
status codes. The server (aiohttp) is imported when first asked for: the
command line reads :class:`HttpConfig` without it.
"""

from windvane.connectors.lazy import lazy_attributes

from .config import HttpConfig
from .errors import BadRequest, HttpError, PayloadTooLarge, Unauthorized, UnsupportedEncoding
from .metrics import Sample, render_metrics

__all__ = [
    "BadRequest",
    "HttpConfig",
    "HttpError",
    "HttpServer",
    "PayloadTooLarge",
    "Sample",
    "Unauthorized",
    "UnsupportedEncoding",
    "make_app",
    "render_metrics",
]

__getattr__ = lazy_attributes(__name__, {"HttpServer": "app", "make_app": "app"})
