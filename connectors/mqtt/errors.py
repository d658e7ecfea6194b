"""Errors of the MQTT connector, each naming what to fix."""

from __future__ import annotations

from windvane.connectors.errors import ConnectorError


class MqttError(ConnectorError):
    """Base class of the MQTT connector's errors."""


class BrokerUrlError(MqttError):
    """``--mqtt`` is not ``mqtt://[user:password@]host[:port]`` or ``mqtts://...``."""


class TopicFilterError(MqttError):
    """A ``--mqtt-topic`` is not a valid MQTT topic filter."""


class BrokerUnavailable(MqttError):
    """The broker could not be reached, refused the connection or a subscription when the service started."""
