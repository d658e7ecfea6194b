"""The MQTT subscriber's configuration and its defaults, held here once."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MqttConfig:
    """The broker to subscribe to, the topic filters (QoS 1) and the persistent session's client id.

    ``url`` is ``mqtt://[user:pw@]host[:port]`` or ``mqtts://...``
    (:func:`connectors.mqtt.parse_broker_url`); ``client_id`` None: derived
    from the store URL (:func:`connectors.mqtt.default_client_id`), so that a
    restart resumes the same session.
    """

    url: str
    topics: tuple[str, ...] = ("#",)
    client_id: str | None = None
