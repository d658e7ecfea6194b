"""Where the broker is and what to subscribe to: ``--mqtt`` URLs, topic filters, the session's client id."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

from .config import DEFAULT_PORTS
from .errors import BrokerUrlError, TopicFilterError

_EXAMPLE = f"mqtt://localhost:{DEFAULT_PORTS['mqtt']}"


@dataclass(frozen=True)
class BrokerAddress:
    """A broker from ``mqtt://[user:password@]host[:port]`` or ``mqtts://...[?ca=/path/ca.pem]``.

    ``tls`` with ``ca`` None trusts the system's certificate authorities.
    """

    host: str
    port: int
    tls: bool = False
    username: str | None = None
    password: str | None = None
    ca: str | None = None

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_broker_url(url: str) -> BrokerAddress:
    """The :class:`BrokerAddress` of ``url``; :class:`BrokerUrlError` naming the fault otherwise."""
    parts = urlsplit(url.strip())
    if parts.scheme not in DEFAULT_PORTS:
        raise BrokerUrlError(
            f"MQTT broker URL {url!r}: the scheme must be mqtt:// or mqtts:// "
            f"(e.g. {_EXAMPLE}), not {parts.scheme + '://' if parts.scheme else 'missing'}"
        )
    try:
        port = parts.port
    except ValueError:
        raise BrokerUrlError(f"MQTT broker URL {url!r}: the port is not a number in 0-65535") from None
    if not parts.hostname:
        raise BrokerUrlError(f"MQTT broker URL {url!r} names no host (e.g. {_EXAMPLE})")
    if parts.path not in ("", "/"):
        raise BrokerUrlError(
            f"MQTT broker URL {url!r}: unexpected path {parts.path!r}; topics are given with --mqtt-topic"
        )
    query = parse_qs(parts.query)
    unknown = set(query) - {"ca"}
    if unknown or (query and parts.scheme != "mqtts"):
        raise BrokerUrlError(f"MQTT broker URL {url!r}: the only query parameter is ca=/path/ca.pem, for mqtts://")
    return BrokerAddress(
        host=parts.hostname,
        port=port or DEFAULT_PORTS[parts.scheme],
        tls=parts.scheme == "mqtts",
        username=unquote(parts.username) if parts.username is not None else None,
        password=unquote(parts.password) if parts.password is not None else None,
        ca=query["ca"][-1] if "ca" in query else None,
    )


def check_topic_filter(pattern: str) -> str:
    """``pattern`` if it is a valid MQTT topic filter (``+`` a whole level, ``#`` the last); else TopicFilterError."""
    if not pattern:
        raise TopicFilterError("an MQTT topic filter cannot be empty; '#' subscribes to every topic")
    if "\0" in pattern or len(pattern.encode("utf-8", "surrogatepass")) > 65535:
        raise TopicFilterError(f"MQTT topic filter {pattern!r} holds a NUL character or is longer than 65535 bytes")
    levels = pattern.split("/")
    for i, level in enumerate(levels):
        if "#" in level and (level != "#" or i != len(levels) - 1):
            raise TopicFilterError(
                f"MQTT topic filter {pattern!r}: '#' must be a whole level and the last one (e.g. 'plant/#')"
            )
        if "+" in level and level != "+":
            raise TopicFilterError(f"MQTT topic filter {pattern!r}: '+' must be a whole level (e.g. 'plant/+/scada')")
    return pattern


def default_client_id(store_url: str) -> str:
    """The client id of the persistent session when none is given: derived from the store URL, so that a
    restarted ``windvane serve`` on the same store resumes its session (and gets what arrived meanwhile)."""
    return "windvane-" + hashlib.blake2b(store_url.encode(), digest_size=6).hexdigest()
