"""The console's errors: each is a page (or, for the data a script fetches, JSON) with an HTTP status and a
message that says what to do; :class:`ConsoleError` is their root."""

from __future__ import annotations


class ConsoleError(Exception):
    """A request the console answers with an error page: ``status``, a short ``title`` and the message."""

    status = 500
    title = "Internal error"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class BadQuery(ConsoleError):
    """A parameter of the request is malformed (a time, a width, a revision)."""

    status, title = 400, "Bad request"


class NotAuthenticated(ConsoleError):
    """The console needs credentials, and the request has none or wrong ones."""

    status, title = 401, "Sign in"


class Forbidden(ConsoleError):
    """The user does not hold the role the page or action needs."""

    status, title = 403, "Not allowed"


class CsrfRefused(Forbidden):
    """An action came without the page's token, or from another site."""

    title = "Refused: not sent from the console"


class NotFound(ConsoleError):
    """No such stream, quarantine or page."""

    status, title = 404, "Not found"


class Conflict(ConsoleError):
    """What an action was confirmed for changed before it ran; nothing was done."""

    status, title = 409, "Changed meanwhile"


class Busy(ConsoleError):
    """Every query worker is taken and the queue is full: the console sheds load before ingestion does."""

    status, title = 503, "Busy"


class TimedOut(ConsoleError):
    """A query ran past the console's time limit."""

    status, title = 504, "Too slow"
