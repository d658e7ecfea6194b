"""The Forward protocol's shared-key handshake (HELO, PING, PONG), sans-IO, as fluentd's in_forward does it.

1. On connect the server sends ``["HELO", {"nonce": 16 random bytes,
   "auth": 16-byte user-auth salt, "keepalive": true}]``.
2. The client answers ``["PING", client_hostname, shared_key_salt,
   sha512_hex(shared_key_salt + client_hostname + nonce + shared_key),
   username, sha512_hex(auth_salt + username + password)]`` (username and
   its digest are ``""`` without user auth).
3. The server answers ``["PONG", true, "", self_hostname,
   sha512_hex(shared_key_salt + self_hostname + nonce + shared_key)]``, or
   ``["PONG", false, reason, "", ""]`` and closes the connection.

Before its PING is whole a client may send at most :data:`MAX_PING_BYTES`:
a PING is a few hundred bytes (a hostname, a 16-byte salt, two 128-digit
digests and a user name), so 64 KiB leaves room for any real one while a
stranger cannot make the server hold more than that before it knows the
shared key.

User auth is required when the server has :class:`ingest.auth.Users` with
at least one password. Digests are compared in constant time. Reasons and
logs never contain a secret or a digest.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass, field
from typing import Any

from windvane.ingest.auth import Users

#: Bytes a client may send before its PING is whole (see the module docstring).
MAX_PING_BYTES = 64 << 10


def _b(value: Any) -> bytes:
    # Salts and nonces travel as bin (bytes); hostnames and digests as str.
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    raise TypeError


def sha512_hex(*parts: bytes) -> str:
    """Hex SHA-512 of the concatenated ``parts`` (the protocol's only digest)."""
    h = hashlib.sha512()
    for part in parts:
        h.update(part)
    return h.hexdigest()


@dataclass
class Handshake:
    """One connection's handshake: :meth:`helo` to send, then :meth:`check_ping` on the first message."""

    shared_key: str
    self_hostname: str
    users: Users | None = None
    nonce: bytes = field(default_factory=lambda: os.urandom(16))
    auth_salt: bytes = field(default_factory=lambda: os.urandom(16))
    client_hostname: str = ""
    username: str = ""

    @property
    def user_auth(self) -> bool:
        """Whether the PING must carry a user and password (users with passwords were given)."""
        return bool(self.users and self.users.passwords)

    def helo(self) -> list[Any]:
        """The HELO message to send on connect."""
        return ["HELO", {"nonce": self.nonce, "auth": self.auth_salt, "keepalive": True}]

    def check_ping(self, message: Any) -> tuple[bool, list[Any]]:
        """``(accepted, PONG message)`` for the client's PING.

        On refusal the PONG's reason says what failed ("shared_key
        mismatch", "username/password mismatch", "invalid ping message"),
        as in_forward's does; :attr:`client_hostname` and :attr:`username`
        are set when the PING was readable, for the caller's log.
        """
        if not (isinstance(message, list) and len(message) == 6 and message[0] == "PING"):
            return False, self._refuse("invalid ping message")
        _, hostname, salt, key_digest, username, password_digest = message
        try:
            hostname_b, salt_b, username_b = _b(hostname), _b(salt), _b(username)
            key_digest_b, password_digest_b = _b(key_digest), _b(password_digest)
        except TypeError:
            return False, self._refuse("invalid ping message")
        self.client_hostname = hostname_b.decode("utf-8", "replace")
        self.username = username_b.decode("utf-8", "replace")
        expected = sha512_hex(salt_b, hostname_b, self.nonce, self.shared_key.encode()).encode()
        if not hmac.compare_digest(expected, key_digest_b):
            return False, self._refuse("shared_key mismatch")
        if self.user_auth:
            assert self.users is not None
            password = self.users.password(self.username)
            ok = False
            if password is not None:
                wanted = sha512_hex(self.auth_salt, username_b, password.encode()).encode()
                ok = hmac.compare_digest(wanted, password_digest_b)
            if not ok:
                return False, self._refuse("username/password mismatch")
            if not self.users.may(self.username, "send"):
                return False, self._refuse(f"user {self.username!r} does not hold the 'send' role")
        digest = sha512_hex(salt_b, self.self_hostname.encode(), self.nonce, self.shared_key.encode())
        return True, ["PONG", True, "", self.self_hostname, digest]

    @staticmethod
    def _refuse(reason: str) -> list[Any]:
        return ["PONG", False, reason, "", ""]


def ping(
    helo: Any,
    *,
    client_hostname: str,
    shared_key: str,
    username: str = "",
    password: str = "",
    salt: bytes | None = None,
) -> list[Any]:
    """The PING a client sends for ``helo`` (for tests and tools; out_forward builds the same)."""
    options = helo[1]
    nonce, auth = _b(options["nonce"]), _b(options.get("auth", b""))
    salt = os.urandom(16) if salt is None else salt
    key_digest = sha512_hex(salt, client_hostname.encode(), nonce, shared_key.encode())
    password_digest = sha512_hex(auth, username.encode(), password.encode()) if username else ""
    return ["PING", client_hostname, salt, key_digest, username, password_digest]
