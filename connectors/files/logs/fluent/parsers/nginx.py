"""fluentd's ``nginx`` parser: the regexp parser with nginx's combined log as its default expression.

Fields ``remote host user method path code size referer agent`` and
``http_x_forwarded_for`` (a last field after the agent, quoted or not),
``time`` read with ``%d/%b/%Y:%H:%M:%S %z``; all text unless ``types``
says otherwise, ``-`` kept as it is (null only by ``null_value_pattern``).
``expression`` and ``time_format`` may be given, as fluentd allows.
"""

from __future__ import annotations

from typing import ClassVar

from ..access_split import NGINX as EXPRESSION
from ..config import TIME_FORMAT_DEFAULTS
from .regexp import RegexpParser


class NginxParser(RegexpParser):
    """fluentd's ``nginx`` parser (see the module)."""

    DEFAULTS: ClassVar[dict[str, str]] = {"expression": EXPRESSION, "time_format": TIME_FORMAT_DEFAULTS["nginx"]}
