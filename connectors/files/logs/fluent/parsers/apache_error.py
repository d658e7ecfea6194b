"""fluentd's ``apache_error`` parser: the regexp parser with Apache's error log as its default expression.

Fields ``level``, ``pid`` and ``client`` (each only where the line has
it) and ``message``; ``time`` (``Wed Oct 11 14:32:52 2000``, fractions
allowed) read by fluentd's default time parsing, as no ``time_format`` is
set. ``expression`` and ``time_format`` may be given, as fluentd allows.
"""

from __future__ import annotations

from typing import ClassVar

from .regexp import RegexpParser

#: fluentd 1.14.6's default expression of the apache_error parser, in its Ruby syntax.
EXPRESSION = (
    r"/^\[[^ ]* (?<time>[^\]]*)\] \[(?<level>[^\]]*)\](?: \[pid (?<pid>[^\]]*)\])?"
    r"( \[client (?<client>[^\]]*)\])? (?<message>.*)$/"
)


class ApacheErrorParser(RegexpParser):
    """fluentd's ``apache_error`` parser (see the module)."""

    DEFAULTS: ClassVar[dict[str, str]] = {"expression": EXPRESSION}
