"""MQTT subscriber for ``windvane serve``: topics to tags, JSON or msgpack payloads, QoS 1 acknowledged once committed.

``config`` holds :class:`MqttConfig`, the subscriber's settings and their
defaults; ``decode`` turns a message into events (sans-IO), ``address``
parses the broker URL and topic filters, ``subscriber`` keeps the
persistent session and acknowledges only what the sink committed. The
decoder and the subscriber (paho-mqtt, asyncio) are imported when first
asked for: the command line reads :class:`MqttConfig` without them.
"""

from windvane.connectors.lazy import lazy_attributes

from .address import BrokerAddress, check_topic_filter, default_client_id, parse_broker_url
from .config import MqttConfig
from .errors import BrokerUnavailable, BrokerUrlError, MqttError, TopicFilterError

__all__ = [
    "UNREADABLE",
    "BrokerAddress",
    "BrokerUnavailable",
    "BrokerUrlError",
    "MqttConfig",
    "MqttError",
    "MqttSubscriber",
    "TopicFilterError",
    "check_topic_filter",
    "decode_payload",
    "default_client_id",
    "message_key",
    "parse_broker_url",
    "topic_to_tag",
]

__getattr__ = lazy_attributes(
    __name__,
    {
        **dict.fromkeys(("UNREADABLE", "decode_payload", "topic_to_tag"), "decode"),
        **dict.fromkeys(("MqttSubscriber", "message_key"), "subscriber"),
    },
)
