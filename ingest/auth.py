"""Users and tokens, and what each may do (``windvane serve --users FILE``, ``windvane console --users FILE``).

The file is TOML, one table per user::

    [users.fluentbit]
    password = "a long random secret"     # HTTP Basic, and the Forward handshake's user auth
    tokens = ["another long secret"]      # HTTP "Authorization: Bearer <token>"
    roles = ["send"]                      # optional: what the user may do (default: send and read)

The roles (:data:`ROLES`): ``send`` posts events over HTTP and connects with
Forward; ``read`` opens the console's pages, ``/metrics`` and ``/streams``;
``write`` acts on stored data from the console (replays or discards
quarantined records). A user whose entry names no roles may send and read,
as every user could before roles were named: ``write`` is granted only by
name, so that a sender's credentials, which sit in every forwarder's
configuration, never delete data.

Passwords are kept in clear because the Forward protocol's user auth proves
knowledge of the password with a salted SHA-512 digest the server must
recompute: keep the file readable by the service only.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .errors import AuthError

#: What a user may be allowed to do: see the module docstring.
ROLES = ("send", "read", "write")
#: The roles of a user whose entry names none.
DEFAULT_ROLES = frozenset({"send", "read"})


class CredentialsError(AuthError):
    """Credentials that are missing, malformed or wrong; the message says which, never what was expected."""


@dataclass(frozen=True)
class Users:
    """Who may do what: user name -> password, bearer token -> user name, user name -> roles."""

    passwords: dict[str, str] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)
    roles: dict[str, frozenset[str]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | Path) -> Users:
        """Read a users file; :class:`AuthError` names what is wrong with it."""
        try:
            doc = tomllib.loads(Path(path).read_text())
        except OSError as exc:
            raise AuthError(f"cannot read users file {path}: {exc.strerror}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise AuthError(f"users file {path} is not valid TOML: {exc}") from exc
        passwords: dict[str, str] = {}
        tokens: dict[str, str] = {}
        roles: dict[str, frozenset[str]] = {}
        users = doc.get("users", {})
        if not isinstance(users, dict) or not users:
            raise AuthError(f"users file {path} has no [users.<name>] table")
        for name, entry in users.items():
            if not isinstance(entry, dict):
                raise AuthError(f"users file {path}: [users.{name}] must be a table")
            password = entry.get("password")
            if password is not None:
                if not isinstance(password, str) or not password:
                    raise AuthError(f"users file {path}: users.{name}.password must be a non-empty string")
                passwords[name] = password
            user_tokens = entry.get("tokens", [])
            if not isinstance(user_tokens, list) or not all(isinstance(t, str) and t for t in user_tokens):
                raise AuthError(f"users file {path}: users.{name}.tokens must be a list of non-empty strings")
            for token in user_tokens:
                if token in tokens:
                    raise AuthError(f"users file {path}: a token of users.{name} is also users.{tokens[token]}'s")
                tokens[token] = name
            if password is None and not user_tokens:
                raise AuthError(f"users file {path}: users.{name} has neither a password nor tokens")
            roles[name] = _roles(path, name, entry.get("roles"))
        return cls(passwords, tokens, roles)

    def __bool__(self) -> bool:
        return bool(self.passwords or self.tokens)

    def password(self, user: str) -> str | None:
        """The password of ``user`` (the Forward handshake needs it), or None."""
        return self.passwords.get(user)

    def check_password(self, user: str, password: str) -> bool:
        """Whether ``password`` is ``user``'s, compared in constant time."""
        expected = self.passwords.get(user)
        return expected is not None and hmac.compare_digest(expected.encode(), password.encode())

    def may(self, user: str | None, role: str) -> bool:
        """Whether ``user`` holds ``role``; with no users configured (``user`` None) everyone may do everything."""
        if user is None:
            return not self
        return role in self.roles.get(user, DEFAULT_ROLES)

    def authenticate(self, header: str | None) -> str:
        """The user an ``Authorization`` header (HTTP Basic or Bearer) names; :class:`CredentialsError` if it
        is missing, malformed or wrong."""
        if not header:
            raise CredentialsError(
                "credentials required: send HTTP Basic user:password or Authorization: Bearer <token>"
            )
        scheme, _, credentials = header.strip().partition(" ")
        scheme = scheme.lower()
        credentials = credentials.strip()
        if scheme == "basic":
            try:
                user, sep, password = base64.b64decode(credentials, validate=True).decode("utf-8").partition(":")
            except (binascii.Error, UnicodeDecodeError, ValueError):
                raise CredentialsError("the Basic credentials are not base64 of UTF-8 user:password") from None
            if sep and self.check_password(user, password):
                return user
            raise CredentialsError("wrong user or password")
        if scheme == "bearer":
            token_user = self.user_for_token(credentials)
            if token_user is not None:
                return token_user
            raise CredentialsError("unknown bearer token")
        raise CredentialsError(f"authorization scheme {scheme!r} is not supported: use Basic or Bearer")

    def user_for_token(self, token: str) -> str | None:
        """The user a bearer token belongs to, or None."""
        for known, user in self.tokens.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                return user
        return None


def _roles(path: str | Path, name: str, given: object) -> frozenset[str]:
    """The roles a user's entry names (:data:`DEFAULT_ROLES` when none); AuthError for a list that is not one."""
    if given is None:
        return DEFAULT_ROLES
    if not isinstance(given, list) or not all(isinstance(r, str) for r in given):
        raise AuthError(f"users file {path}: users.{name}.roles must be a list of role names ({', '.join(ROLES)})")
    unknown = sorted(set(given) - set(ROLES))
    if unknown:
        raise AuthError(
            f"users file {path}: users.{name}.roles names {', '.join(unknown)}: the roles are {', '.join(ROLES)}"
        )
    return frozenset(given)
