"""MqttSubscriber: a persistent MQTT session whose QoS 1 messages are acknowledged only once committed.

The network runs in paho-mqtt's thread (MQTT v5, ``clean_start`` off, the
broker keeping the session ``session_expiry`` seconds, manual acknowledgement). Each message is decoded
there (:mod:`.decode`) and handed to the event loop of ``windvane serve``,
which submits what arrived while the submissions before it were committed
as one submission (one batch per tag) and sends the PUBACKs of its
messages once ``sink.submit`` has resolved, in the order the messages
arrived. Unacknowledged messages stay with the broker, which sends them
again (with the DUP flag) when the session is resumed.

Stored once: every QoS 1 message is committed with an idempotency key,
``mqtt`` + a 64-bit blake2b of (client id, packet id, topic, payload),
recorded without being checked (``record_keys``); 12 bytes, as every
commit rewrites the second's ledger bucket (:mod:`ingest.ledger`). A
message that arrives with DUP set was sent before, perhaps committed and
killed before its PUBACK; once everything submitted before it is
committed, it is submitted in a submission of its own under its key
(redelivered messages that arrive together still share commits), which
ingest checks: if the key is there, the message is acknowledged and not
stored again. Packet ids are reused once acknowledged, so keys are
checked for DUP messages only: a new message with the packet id, topic and
payload of an earlier one is stored. The one case left: a DUP message
whose first delivery was *not* committed is taken for a duplicate, and not
stored, if an earlier message with the same packet id, topic and
byte-identical payload was committed within the key window (the
committer's ``key_window``, :class:`ingest.config.CommitterConfig`); that
takes a crash or lost connection while such a repeated message was in
flight. Payloads that carry a time or a counter
never meet it. (A 64-bit digest that matches by chance a key among the
ledger's at most 2,000,000 is as rare: below 1e-13 per redelivered message.)

Bounded memory: at most ``max_pending_bytes`` of received messages wait for
their commit; past it the network thread stops reading, so TCP pushes back
on the broker (which queues, or for QoS 0 drops, as it is configured). The
broker also sends at most ``receive_maximum`` unacknowledged QoS 1 messages
at once (MQTT v5's Receive Maximum).

Connections lost are reopened by paho with exponential backoff
(``min_retry`` doubling to ``max_retry`` seconds), logged; the broker
resumes the session. PUBACKs of messages received on a connection that
has since closed are not sent (the broker sends those messages again, and
a PUBACK on the new connection could acknowledge a different message that
reuses the packet id). A submission that fails to commit is retried with
the same backoff while the service runs.

The subscription is listed in :attr:`MqttSubscriber.senders`
(:mod:`connectors.senders`) as one sender: the broker and topics, the
user it connects as, open while connected, and the messages, events and
bytes acknowledged.

Broker: persistence must be on, and its per-client queue large enough for
what is published while windvane is down (mosquitto's ``max_queued_messages``
defaults to 1000 and drops the rest).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

from windvane.connectors.senders import Senders
from windvane.ingest.batch import Batch, Sink
from windvane.ingest.errors import CommitFailed

from .address import BrokerAddress, check_topic_filter
from .config import MqttConfig
from .decode import Events, decode_payload, topic_to_tag
from .errors import BrokerUnavailable
from .inbox import Delivery, Inbox

log = logging.getLogger("windvane.connectors.mqtt")

SOURCE = "mqtt"
_KEY_PREFIX = b"mqtt"


def message_key(client_id: str, mid: int, topic: str, payload: bytes) -> bytes:
    """The idempotency key of a QoS 1 message delivered to session ``client_id`` under packet id ``mid``."""
    digest = hashlib.blake2b(digest_size=8)
    for part in (client_id.encode(), b"\0", mid.to_bytes(2, "big"), topic.encode(), b"\0", payload):
        digest.update(part)
    return _KEY_PREFIX + digest.digest()


def _batches(deliveries: Sequence[Delivery]) -> list[Batch]:
    """One batch per tag of the events of ``deliveries``, in arrival order."""
    by_tag: dict[str, tuple[list[int], list[Any], list[bytes], list[int], dict[int, str]]] = {}
    for d in deliveries:
        if d.events.records:
            times, records, raws, size, faults = by_tag.setdefault(d.tag, ([], [], [], [0], {}))
            faults.update((len(records) + i, why) for i, why in d.events.faults.items())
            times += d.events.times
            records += d.events.records
            raws += d.events.raws
            size[0] += d.size
    return [
        Batch(tag, times, records, raws.__getitem__, SOURCE, size[0], faults=faults or None)
        for tag, (times, records, raws, size, faults) in by_tag.items()
    ]


def _log_connected(broker: BrokerAddress, client_id: str, *, first: bool, resumed: bool) -> None:
    """Log a connection of session ``client_id``: the ``first`` one, or a reconnection that may have lost it."""
    if first:
        log.info("mqtt: connected to %s as %r (%s session)", broker, client_id, "resumed" if resumed else "new")
    elif resumed:
        log.info("mqtt: reconnected to %s, session resumed", broker)
    else:
        log.warning(
            "mqtt: reconnected to %s but the broker did not keep the session of %r: what was published "
            "meanwhile is lost unless the broker persists sessions",
            broker,
            client_id,
        )


class MqttSubscriber:
    """Subscribes to ``topics`` on ``broker`` as ``client_id`` and hands what arrives to ``sink``; see the module
    docstring, and :class:`connectors.mqtt.config.MqttConfig` for the settings and their defaults."""

    def __init__(
        self,
        sink: Sink,
        broker: BrokerAddress,
        topics: Sequence[str] = MqttConfig.topics,
        *,
        client_id: str,
        receive_maximum: int = MqttConfig.receive_maximum,
        session_expiry: int = MqttConfig.session_expiry,
        max_pending_bytes: int = MqttConfig.max_pending_bytes,
        max_in_flight: int = MqttConfig.max_in_flight,
        keepalive: int = MqttConfig.keepalive,
        min_retry: float = MqttConfig.min_retry,
        max_retry: float = MqttConfig.max_retry,
        connect_timeout: float = MqttConfig.connect_timeout,
    ):
        self.sink = sink
        self.broker = broker
        self.topics = [check_topic_filter(t) for t in topics]
        self.client_id = client_id
        self.receive_maximum = receive_maximum
        self.session_expiry = session_expiry
        self.max_pending_bytes = max_pending_bytes
        self.keepalive = keepalive
        self.min_retry = min_retry
        self.max_retry = max_retry
        self.connect_timeout = connect_timeout
        # What happened, for logs and tests: messages stored (or quarantined), DUP copies found committed.
        self.stored = 0
        self.redelivered_duplicates = 0
        #: The subscription as a sender (listed once started): what it acknowledged, and whether it is connected.
        self.senders = Senders(SOURCE)
        self._sender = self.senders.open(self, f"{broker} ({', '.join(self.topics)})", user=broker.username)
        self._sender.open = False  # until connected
        self._client = self._new_client()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()  # orders PUBACKs against connection changes
        self._connection = 0  # bumped on every connect and disconnect (network thread)
        self._connected_once = False
        self._ready: asyncio.Future[None] | None = None  # the first connection's subscriptions are granted
        self._subscriptions: dict[int, list[str]] = {}
        self._inbox = Inbox(max_pending_bytes)
        self._slots = asyncio.Semaphore(max_in_flight)
        self._outstanding: collections.deque[tuple[asyncio.Task[int], list[Delivery]]] = collections.deque()
        self._pump_task: asyncio.Task[None] | None = None
        self._closing = False
        self._stopping = asyncio.Event()

    @property
    def port(self) -> int:
        """The broker's port (for the ``mqtt: host:port`` line ``windvane serve`` prints)."""
        return self.broker.port

    def _new_client(self) -> paho.Client:
        client = paho.Client(
            CallbackAPIVersion.VERSION2, client_id=self.client_id, protocol=paho.MQTTv5, manual_ack=True
        )
        if self.broker.username is not None:
            client.username_pw_set(self.broker.username, self.broker.password)
        if self.broker.tls:
            client.tls_set(ca_certs=self.broker.ca)
        # paho's annotation says int; it waits the seconds given, fractions included.
        client.reconnect_delay_set(self.min_retry, self.max_retry)  # type: ignore[arg-type]
        client.enable_logger(logging.getLogger("windvane.connectors.mqtt.paho"))  # every packet, at debug level
        client.on_connect = self._on_connect
        client.on_connect_fail = self._on_connect_fail
        client.on_subscribe = self._on_subscribe
        client.on_disconnect = self._on_disconnect
        client.on_message = self._on_message
        return client

    # -- life cycle (event loop) ---------------------------------------------------------

    async def start(self) -> None:
        """Connect, resume (or open) the session and subscribe; BrokerUnavailable if the broker cannot be
        reached or refuses the connection or a subscription (later losses are retried, not raised)."""
        self._loop = self._inbox.loop = asyncio.get_running_loop()
        self._ready = self._loop.create_future()
        properties = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]  # paho leaves it unannotated
        properties.SessionExpiryInterval = self.session_expiry
        properties.ReceiveMaximum = self.receive_maximum
        try:
            await asyncio.to_thread(
                self._client.connect,
                self.broker.host,
                self.broker.port,
                self.keepalive,
                clean_start=False,
                properties=properties,
            )
        except (OSError, ValueError) as exc:
            raise BrokerUnavailable(f"cannot reach the MQTT broker at {self.broker}: {exc}") from exc
        self._client.loop_start()
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), self.connect_timeout)
        except BaseException as exc:  # on any way out, cancellation included, the network thread must stop
            await asyncio.to_thread(self._stop_network)
            if isinstance(exc, asyncio.TimeoutError):
                raise BrokerUnavailable(
                    f"the MQTT broker at {self.broker} did not accept the connection and "
                    f"subscriptions within {self.connect_timeout:g} s"
                ) from None
            raise
        self._pump_task = asyncio.create_task(self._pump(), name="windvane-mqtt-pump")

    async def close(self) -> None:
        """Stop taking messages, wait for the submissions made (their PUBACKs go out), disconnect.

        Messages received but not submitted stay unacknowledged: the broker
        keeps them for the session's next connection.
        """
        self._inbox.close()
        self._closing = True
        self._stopping.set()
        if self._pump_task is not None:
            self._pump_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump_task
        await asyncio.gather(*(task for task, _ in list(self._outstanding)), return_exceptions=True)
        await asyncio.to_thread(self._stop_network)
        self.senders.close(self)
        log.info(
            "mqtt: closed the session %r at %s: %d message(s) stored, %d redelivered copies recognised",
            self.client_id,
            self.broker,
            self.stored,
            self.redelivered_duplicates,
        )

    def _stop_network(self) -> None:
        # DISCONNECT after the PUBACKs queued; the session outlives it (its expiry interval is not 0).
        self._client.disconnect()
        self._client.loop_stop()

    # -- the network thread -----------------------------------------------------------------

    def _on_connect(self, client: paho.Client, _userdata: Any, flags: Any, reason: Any, _properties: Any) -> None:
        with self._lock:
            self._connection += 1
        if reason.is_failure:
            message = f"the MQTT broker at {self.broker} refused the connection of client {self.client_id!r}: {reason}"
            log.error("mqtt: %s; retrying", message)
            self._resolve_ready(BrokerUnavailable(message))
            return
        _log_connected(self.broker, self.client_id, first=not self._connected_once, resumed=flags.session_present)
        self._connected_once = True
        self._sender.since = time.time()
        self._sender.open = True
        # Subscribing again is harmless (retain handling 1: retained messages only for a new subscription) and
        # restores the subscriptions if the broker lost the session.
        options = SubscribeOptions(qos=1, retainHandling=SubscribeOptions.RETAIN_SEND_IF_NEW_SUB)
        _, mid = client.subscribe([(topic, options) for topic in self.topics])
        if mid is not None:  # None: not sent (the connection is gone), no SUBACK comes
            self._subscriptions[mid] = self.topics

    def _on_connect_fail(self, _client: paho.Client, _userdata: Any) -> None:
        if not self._closing:
            log.warning(
                "mqtt: cannot reach the broker at %s; retrying with backoff (%g s to %g s)",
                self.broker,
                self.min_retry,
                self.max_retry,
            )

    def _on_subscribe(
        self, _client: paho.Client, _userdata: Any, mid: int, reasons: list[Any], _properties: Any
    ) -> None:
        topics = self._subscriptions.pop(mid, self.topics)
        refused = [f"{topic!r}: {reason}" for topic, reason in zip(topics, reasons) if reason.is_failure]
        if refused:
            message = f"the MQTT broker at {self.broker} refused the subscription(s) {', '.join(refused)}"
            log.error("mqtt: %s", message)
            self._resolve_ready(BrokerUnavailable(message))
        else:
            self._resolve_ready(None)

    def _on_disconnect(self, _client: paho.Client, _userdata: Any, _flags: Any, reason: Any, _properties: Any) -> None:
        with self._lock:
            self._connection += 1
        self._sender.open = False
        if not self._closing:
            log.warning(
                "mqtt: lost the connection to %s (%s); reconnecting with backoff (%g s to %g s)",
                self.broker,
                reason,
                self.min_retry,
                self.max_retry,
            )

    def _resolve_ready(self, error: Exception | None) -> None:
        def resolve() -> None:
            if self._ready is not None and not self._ready.done():
                if error is None:
                    self._ready.set_result(None)
                else:
                    self._ready.set_exception(error)

        if self._loop is not None:
            self._loop.call_soon_threadsafe(resolve)

    def _on_message(self, _client: paho.Client, _userdata: Any, message: paho.MQTTMessage) -> None:
        if self._closing:
            return  # not acknowledged: the broker sends it again to the next connection of the session
        topic = message.topic
        payload = bytes(message.payload)  # bytes already: the same object
        if topic.startswith("$"):  # $SYS and other broker topics are not data
            events = Events([], [], [])
        else:
            events = decode_payload(payload, time.time_ns())
        size = len(payload) + len(topic)
        key = message_key(self.client_id, message.mid, topic, payload) if message.qos == 1 and events.records else None
        delivery = Delivery(
            topic_to_tag(topic), events, size, message.mid, message.qos, bool(message.dup), key, self._connection
        )
        self._inbox.put(delivery)

    # -- submitting and acknowledging (event loop) -------------------------------------------

    async def _pump(self) -> None:
        """Submit what arrived, in order, in runs: new messages together, redelivered ones each under its key."""
        while True:
            await self._inbox.wait()
            while self._inbox:
                run: list[Delivery] = []
                while self._inbox:
                    delivery = self._inbox.popleft()
                    if run and delivery.checked != run[0].checked:
                        await self._submit(run)
                        run = []
                    run.append(delivery)
                if run:
                    await self._submit(run)

    async def _submit(self, run: list[Delivery]) -> None:
        if run[0].checked:
            # Their first deliveries may be in submissions still in flight: those keys must be known first.
            await asyncio.gather(*(task for task, _ in list(self._outstanding)), return_exceptions=True)
        await self._slots.acquire()
        task = asyncio.create_task(self._store(run))
        self._outstanding.append((task, run))
        task.add_done_callback(self._settled)

    async def _store(self, run: list[Delivery]) -> int:
        """Commit ``run``; returns how many of its messages were found committed before (redelivered copies)."""
        delay = self.min_retry
        while True:
            try:
                if run[0].checked:
                    # One submission each, so that each key is checked; they still share commits.
                    receipts = await asyncio.gather(*(self.sink.submit(_batches([d]), key=d.key) for d in run))
                    return sum(r.duplicate for r in receipts)
                batches = _batches(run)
                keys = [d.key for d in run if d.key is not None]
                if batches or keys:
                    await self.sink.submit(batches, record_keys=keys)
            except CommitFailed as exc:
                if self._closing:
                    raise
                # Retrying a run that was partly committed is safe: checked keys are found, and a failed
                # submission stored nothing.
                log.error(  # noqa: TRY400 - an expected failure, said in one line without a traceback
                    "mqtt: %d message(s) could not be committed (%s); not acknowledged, retrying in %g s",
                    len(run),
                    exc,
                    delay,
                )
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), delay)
                delay = min(2 * delay, self.max_retry)
            else:
                return 0

    def _settled(self, _task: asyncio.Task[int]) -> None:
        """Acknowledge the runs that are committed, in the order their messages arrived."""
        self._slots.release()
        while self._outstanding and self._outstanding[0][0].done():
            task, run = self._outstanding.popleft()
            error = task.exception() if not task.cancelled() else asyncio.CancelledError()
            if error is None:
                duplicates = task.result()
                if duplicates:
                    log.info(
                        "mqtt: %d redelivered message(s) were committed before: acknowledged, not stored again",
                        duplicates,
                    )
                self.redelivered_duplicates += duplicates
                self.stored += len(run) - duplicates
                self._acknowledge(run)
            elif not self._closing:
                log.error("mqtt: %d message(s) not committed nor acknowledged: %r", len(run), error)
            size = sum(d.size for d in run)
            if error is None:
                self._sender.acked(sum(len(d.events.records) for d in run), len(run))
                self._sender.bytes += size
            self._inbox.release(size)

    def _acknowledge(self, deliveries: list[Delivery]) -> None:
        with self._lock:  # a connection change waits: no PUBACK crosses onto a connection it does not belong to
            for d in deliveries:
                if d.qos == 1 and d.connection == self._connection:
                    self._client.ack(d.mid, 1)
