"""HTTP ingestion compatible with fluentd's in_http / out_http and fluent-plugin-wendelin.

``decode`` turns request bodies into :class:`ingest.batch.Batch` objects
(sans-IO); ``app`` serves them over aiohttp and acknowledges only what the
sink committed. See :mod:`connectors.http.app` for routes and status codes.
"""

from .app import HttpServer, make_app
from .errors import BadRequest, HttpError, PayloadTooLarge, Unauthorized, UnsupportedEncoding
from .metrics import Sample, render_metrics

__all__ = [
    "BadRequest",
    "HttpError",
    "HttpServer",
    "PayloadTooLarge",
    "Sample",
    "Unauthorized",
    "UnsupportedEncoding",
    "make_app",
    "render_metrics",
]
