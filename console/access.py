"""Who may look, who may act, and whether an action came from the console's own page.

Users and roles are the ones ``--users`` gives the HTTP API
(:class:`windvane.ingest.auth.Users`): every page needs ``read``, every
action (replay, discard) ``write``. Without users everyone may do both, as
everyone may post events then.

Actions also need the page's token (a double-submit cookie): the console
sets a random token in a ``SameSite=Strict`` cookie and writes the same
token into each form it renders; an action is taken only when the form's
token equals the cookie's. Another site can make a browser send the
cookie, never read it, so it cannot forge the form. The check needs no
state on the server, so any worker of ``windvane serve --workers N``
accepts a form another rendered. A request that says it comes from another
origin (``Origin``, ``Sec-Fetch-Site``) is refused as well.
"""

from __future__ import annotations

import hmac
import secrets

from aiohttp import web

from windvane.ingest.auth import CredentialsError, Users

from .errors import CsrfRefused, Forbidden, NotAuthenticated

#: The cookie and the form field that carry the token.
TOKEN_COOKIE = "windvane_console"
TOKEN_FIELD = "token"
#: What a token is made of: random bytes, URL-safe text.
_TOKEN_BYTES = 32


class Access:
    """Checks requests against ``users`` (None or empty: no credentials asked)."""

    def __init__(self, users: Users | None):
        self.users = users if users else None

    def user(self, request: web.Request, role: str) -> str | None:
        """The user the request authenticates as (None without users); NotAuthenticated or Forbidden."""
        if self.users is None:
            return None
        try:
            user = self.users.authenticate(request.headers.get("Authorization"))
        except CredentialsError as exc:
            raise NotAuthenticated(f"{exc}. The console asks for the users of --users.") from None
        if not self.users.may(user, role):
            raise Forbidden(f"user {user!r} does not hold the {role!r} role: give it in the users file's roles = [...]")
        return user

    @staticmethod
    def token(request: web.Request) -> tuple[str, bool]:
        """The request's token and whether it is new (the response must then set the cookie)."""
        given = request.cookies.get(TOKEN_COOKIE, "")
        if len(given) >= _TOKEN_BYTES:
            return given, False
        return secrets.token_urlsafe(_TOKEN_BYTES), True

    @staticmethod
    def set_token(response: web.StreamResponse, token: str, secure: bool) -> None:
        response.set_cookie(TOKEN_COOKIE, token, path="/", httponly=True, samesite="Strict", secure=secure)

    @staticmethod
    def check_action(request: web.Request, form_token: str | None) -> None:
        """CsrfRefused unless the action's form carries the cookie's token and comes from this origin."""
        site = request.headers.get("Sec-Fetch-Site")
        if site is not None and site not in ("same-origin", "none"):
            raise CsrfRefused(f"the action came from another site ({site}); take it from the console's page")
        origin = request.headers.get("Origin")
        if origin is not None and origin != f"{request.scheme}://{request.host}":
            raise CsrfRefused("the action came from another origin; take it from the console's page")
        cookie = request.cookies.get(TOKEN_COOKIE, "")
        if not cookie or not form_token or not hmac.compare_digest(cookie.encode(), form_token.encode()):
            raise CsrfRefused("the action's form does not carry the console's token: reload the page and confirm again")
