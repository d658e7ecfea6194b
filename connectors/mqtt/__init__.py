"""MQTT subscriber for ``windvane serve``: topics to tags, JSON or msgpack payloads, QoS 1 acknowledged once committed.

``decode`` turns a message into events (sans-IO), ``address`` parses the
broker URL and topic filters, ``subscriber`` keeps the persistent session
and acknowledges only what the sink committed.
"""

from .address import BrokerAddress, check_topic_filter, default_client_id, parse_broker_url
from .decode import UnreadablePayload, decode_payload, topic_to_tag
from .errors import BrokerUnavailable, BrokerUrlError, MqttError, TopicFilterError
from .subscriber import MqttSubscriber, message_key

__all__ = [
    "BrokerAddress",
    "BrokerUnavailable",
    "BrokerUrlError",
    "MqttError",
    "MqttSubscriber",
    "TopicFilterError",
    "UnreadablePayload",
    "check_topic_filter",
    "decode_payload",
    "default_client_id",
    "message_key",
    "parse_broker_url",
    "topic_to_tag",
]
