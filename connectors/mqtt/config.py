"""The MQTT subscriber's configuration and its defaults, held here once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: The broker's port when its URL names none, by scheme (MQTT's registered ports).
DEFAULT_PORTS = {"mqtt": 1883, "mqtts": 8883}

#: The :class:`MqttConfig` fields that tune the subscriber's session (keyword arguments of ``MqttSubscriber``).
SESSION_SETTINGS = (
    "receive_maximum",
    "session_expiry",
    "max_pending_bytes",
    "max_in_flight",
    "keepalive",
    "min_retry",
    "max_retry",
    "connect_timeout",
)


@dataclass(frozen=True)
class MqttConfig:
    """The broker to subscribe to, the topic filters (QoS 1), the persistent session's client id, and how
    the session is kept (see :mod:`connectors.mqtt.subscriber`).

    * ``url``: ``mqtt://[user:pw@]host[:port]`` or ``mqtts://...``
      (:func:`connectors.mqtt.parse_broker_url`).
    * ``client_id``: None: derived from the store URL
      (:func:`connectors.mqtt.default_client_id`), so that a restart resumes
      the same session.
    * ``receive_maximum``: unacknowledged QoS 1 messages the broker may send at once.
    * ``session_expiry``: seconds the broker keeps the session while windvane is away (a week).
    * ``max_pending_bytes``: bytes of received messages waiting for their commit; past them the
      network thread stops reading.
    * ``max_in_flight``: submissions waiting for their commit at once.
    * ``keepalive``: seconds between MQTT pings.
    * ``min_retry``, ``max_retry``: seconds of the reconnect (and failed commit) backoff, doubling.
    * ``connect_timeout``: seconds the first connection and its subscriptions may take.
    """

    url: str
    topics: tuple[str, ...] = ("#",)
    client_id: str | None = None
    receive_maximum: int = 1000
    session_expiry: int = 7 * 24 * 3600
    max_pending_bytes: int = 64 << 20
    max_in_flight: int = 2
    keepalive: int = 30
    min_retry: float = 0.5
    max_retry: float = 30.0
    connect_timeout: float = 10.0

    def session(self) -> dict[str, Any]:
        """The :data:`SESSION_SETTINGS`, as keyword arguments of ``MqttSubscriber``."""
        return {name: getattr(self, name) for name in SESSION_SETTINGS}
