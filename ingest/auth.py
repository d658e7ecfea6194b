"""Users and tokens that may send data (``windvane serve --users FILE``).

The file is TOML, one table per user::

    [users.fluentbit]
    password = "a long random secret"     # HTTP Basic, and the Forward handshake's user auth
    tokens = ["another long secret"]      # HTTP "Authorization: Bearer <token>"

Passwords are kept in clear because the Forward protocol's user auth proves
knowledge of the password with a salted SHA-512 digest the server must
recompute: keep the file readable by the service only.
"""

from __future__ import annotations

import hmac
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .errors import AuthError


@dataclass(frozen=True)
class Users:
    """Who may send: user name -> password, bearer token -> user name."""

    passwords: dict[str, str] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)

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
        return cls(passwords, tokens)

    def __bool__(self) -> bool:
        return bool(self.passwords or self.tokens)

    def password(self, user: str) -> str | None:
        """The password of ``user`` (the Forward handshake needs it), or None."""
        return self.passwords.get(user)

    def check_password(self, user: str, password: str) -> bool:
        """Whether ``password`` is ``user``'s, compared in constant time."""
        expected = self.passwords.get(user)
        return expected is not None and hmac.compare_digest(expected.encode(), password.encode())

    def user_for_token(self, token: str) -> str | None:
        """The user a bearer token belongs to, or None."""
        for known, user in self.tokens.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                return user
        return None
