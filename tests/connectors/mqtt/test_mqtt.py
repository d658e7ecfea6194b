"""The MQTT subscriber against a real Mosquitto broker, real paho publishers and real stores.

Payload decoding and URL/topic checks are pure functions, tested directly.
Everything else goes through a private mosquitto (tests/connectors/mqtt/mosquitto.py): the
subscriber in-process on a real GroupCommitter where the test needs to
reach inside (stats, the exact moment of a broker restart), and
``windvane serve`` as a subprocess where it is killed with -9.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import msgpack
import numpy as np
import paho.mqtt.client as paho
import pytest
from click.testing import CliRunner

from tests.connectors.mqtt.mosquitto import Mosquitto
from tests.serve_process import Serve, free_port
from windvane import arrays, neostore
from windvane.cli import cli as windvane_cli
from windvane.connectors.mqtt import (
    BrokerUrlError,
    MqttSubscriber,
    TopicFilterError,
    check_topic_filter,
    decode_payload,
    default_client_id,
    message_key,
    parse_broker_url,
    topic_to_tag,
)
from windvane.ingest import Batch
from windvane.ingest.batch import INVALID_TIME
from windvane.ingest.committer import GroupCommitter
from windvane.ingest.schema import load_schemas
from windvane.ingest.times import not_a_time

SCHEMA = """\
kind = "sensor"
tags = ["plant.**"]
extra = "keep"

[[fields]]
name = "value"
dtype = "float64"
required = true

[[fields]]
name = "seq"
dtype = "int64"
fill = -1

[[fields]]
name = "unit"
dtype = "str"
"""
T0 = 1_700_000_000_000_000_000  # ns


@pytest.fixture(scope="module")
def schemas(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("schemas")
    (directory / "plant.toml").write_text(SCHEMA)
    return directory


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Mosquitto:
    with Mosquitto(tmp_path_factory.mktemp("mosquitto")) as running:
        yield running


class Publisher:
    """A real paho client publishing QoS 1 messages; ``send`` returns once the broker acknowledged them all."""

    def __init__(self, port: int, client_id: str = "test-publisher"):
        self.client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=paho.MQTTv5)
        self.client.max_inflight_messages_set(1000)
        self.client.max_queued_messages_set(0)
        self.client.reconnect_delay_set(0.1, 1)
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()

    def send(self, messages, qos: int = 1, timeout: float = 60) -> None:
        infos = [self.client.publish(topic, payload, qos=qos) for topic, payload in messages]
        deadline = time.monotonic() + timeout
        for info in infos:
            info.wait_for_publish(max(0.1, deadline - time.monotonic()))
            assert info.is_published(), "the broker did not acknowledge a publication in time"

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def rows(url: str, tag: str, quarantine: bool = False) -> int:
    try:
        with arrays.open_stream(url, tag, quarantine=quarantine) as stream:
            return len(stream)
    except arrays.StreamNotFoundError:
        return 0


def wait_for(condition, timeout: float = 60, what: str = "the condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def seqs(url: str, tags) -> np.ndarray:
    parts = []
    for tag in tags:
        with arrays.open_stream(url, tag) as stream:
            parts.append(stream["seq"][:])
    return np.sort(np.concatenate(parts))


# -- decoding (pure) ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload, times, records",
    [
        (b'{"value": 1.5, "time": 1700000000.25}', [T0 + 250_000_000], [{"value": 1.5}]),
        (b'{"value": 1, "timestamp": "2023-11-14T22:13:20.123456789Z"}', [T0 + 123456789], [{"value": 1}]),
        (b'{"value": 1, "timestamp": "2023-11-14T23:13:20+01:00"}', [T0], [{"value": 1}]),
        (b'{"value": 1, "time": "2023-11-14 22:13:20"}', [T0], [{"value": 1}]),  # no zone: UTC
        (b'{"value": 1, "time": 1700000000000}', [T0], [{"value": 1}]),  # milliseconds by magnitude
        (b'{"value": 1, "time": 1700000000000000}', [T0], [{"value": 1}]),  # microseconds
        (b'{"value": 1, "time": 1700000000000000000}', [T0], [{"value": 1}]),  # nanoseconds
        (b'{"value": 1, "time": "yesterday"}', [42], [{"value": 1, "time": "yesterday"}]),  # kept, a fault
        (b'{"value": 2}', [42], [{"value": 2}]),
        (b' [{"value": 1}, {"value": 2, "time": 1700000000}] ', [42, T0], [{"value": 1}, {"value": 2}]),
        (b'[1700000000.5, {"value": 3}]', [T0 + 500_000_000], [{"value": 3}]),
        (b'["not a time", {"value": 3}]', [INVALID_TIME], [{"value": 3}]),
        (msgpack.packb({"value": 4, "time": 1700000000}), [T0], [{"value": 4}]),
        (
            msgpack.packb([{"value": 5}, [msgpack.Timestamp(1700000000, 7), {"value": 6}]]),
            [42, T0 + 7],
            [{"value": 5}, {"value": 6}],
        ),
        (
            msgpack.packb([msgpack.ExtType(0, (1700000000).to_bytes(4, "big") + (9).to_bytes(4, "big")), {"v": 1}]),
            [T0 + 9],
            [{"v": 1}],
        ),
        (b"[]", [], []),
    ],
)
def test_payloads_decode_to_events_with_their_times(payload, times, records):
    events = decode_payload(payload, 42)
    assert events.times == times
    assert events.records == records


def test_times_that_are_not_times_are_faults_naming_the_value():
    events = decode_payload(b'[{"value": 1, "time": "yesterday"}, ["soon", {"value": 2}], {"value": 3}]', 42)
    assert events.faults == {0: not_a_time("yesterday"), 1: not_a_time("soon")}
    assert not_a_time("yesterday").startswith("the event time 'yesterday' is not a time")


def test_json_number_times_are_exact_and_nan_is_not_json():
    events = decode_payload(b'[{"time": 1709294400.123456789}, [1709294400.000000001, {"v": 1}]]', 42)
    assert events.times == [1709294400_123456789, 1709294400_000000001]
    assert decode_payload(b'{"v": NaN}', 42).faults == {0: "unreadable MQTT payload (invalid JSON: line 1 column 7)"}


def test_array_elements_keep_the_bytes_they_arrived_as():
    events = decode_payload(b'[ {"value": 1} ,"x", [1700000000, {"value": 2}]]', 42)
    assert events.raws == [b'{"value": 1}', b'"x"', b'[1700000000, {"value": 2}]']
    packed = msgpack.packb([{"a": 1}, "x"])
    assert decode_payload(packed, 0).raws == [msgpack.packb({"a": 1}), msgpack.packb("x")]


@pytest.mark.parametrize(
    "payload, why",
    [
        (b'{"value": ', "invalid JSON: line 1 column 11"),
        (b"[1 2]", "invalid JSON: line 1 column 4"),
        (b'{"a": "\xff"}', "JSON that is not UTF-8 (byte 7)"),
        (b"hello", "not JSON nor msgpack: 4 extra bytes"),
        (msgpack.packb([1, 2, 3])[:-1], "not JSON nor msgpack: truncated"),
        (b"", "empty"),
        (b"  \n", "empty"),
    ],
)
def test_undecodable_payloads_become_one_event_whose_fault_says_why(payload, why):
    events = decode_payload(payload, 42)
    assert events.times == [42] and events.raws == [payload]
    assert events.faults == {0: f"unreadable MQTT payload ({why})"}


def test_topics_urls_and_client_ids():
    assert topic_to_tag("plant/a/scada") == "plant.a.scada"
    assert parse_broker_url("mqtt://u%40x:p%3Aw@broker.example") == parse_broker_url(
        "mqtt://u%40x:p%3Aw@broker.example:1883"
    )
    address = parse_broker_url("mqtts://host:8884?ca=/etc/ca.pem")
    assert (address.host, address.port, address.tls, address.ca) == ("host", 8884, True, "/etc/ca.pem")
    assert (
        parse_broker_url("mqtt://u%40x:p%3Aw@h").username == "u@x"
        and parse_broker_url("mqtt://u:p%3Aw@h").password == "p:w"
    )
    for bad, words in [
        ("tcp://h:1883", "scheme"),
        ("mqtt://h:99999", "port"),
        ("mqtt://:1883", "no host"),
        ("mqtt://h/topic", "--mqtt-topic"),
        ("mqtt://h?ca=x", "mqtts"),
    ]:
        with pytest.raises(BrokerUrlError, match=words):
            parse_broker_url(bad)
    for good in ("#", "a/+/c", "a/#", "+", "$SYS/#"):
        assert check_topic_filter(good) == good
    for bad, words in [("", "empty"), ("a/#/b", "last"), ("a#", "whole level"), ("a/b+", r"'\+' must be")]:
        with pytest.raises(TopicFilterError, match=words):
            check_topic_filter(bad)
    assert (
        default_client_id("sqlite:///a.db")
        == default_client_id("sqlite:///a.db")
        != default_client_id("sqlite:///b.db")
    )
    assert len(default_client_id("sqlite:///a.db")) <= 23  # MQTT 3.1.1's limit every broker accepts


# -- the committer's record_keys (added for MQTT) --------------------------------------------------


def test_record_keys_are_committed_unchecked_and_recognised_when_checked(sqlite_url, schemas, tmp_path):
    async def scenario(committer: GroupCommitter) -> list:
        batch = Batch("plant.k", [T0], [{"value": 1.0}], source="test")
        first = await committer.submit([batch], record_keys=[b"k1", b"k2"])
        again = await committer.submit([batch], record_keys=[b"k1"])  # a reused packet id: not checked, stored
        resent = await committer.submit([batch], key=b"k2")  # a redelivery: checked, found
        return [first, again, resent]

    committer = GroupCommitter(neostore.open(sqlite_url), load_schemas(str(schemas)))
    committer.start()
    try:
        first, again, resent = asyncio.run(scenario(committer))
    finally:
        committer.close()
        committer.store.close()
    assert (first.accepted, again.accepted, resent.duplicate, resent.accepted) == (1, 1, True, 0)
    assert rows(sqlite_url, "plant.k") == 2
    # Across a restart too: the keys were committed with the rows.
    restarted = GroupCommitter(neostore.open(sqlite_url), load_schemas(str(schemas)))
    restarted.start()
    try:
        assert b"k1" in restarted.ledger and b"k2" in restarted.ledger
    finally:
        restarted.close()
        restarted.store.close()


# -- in-process subscriber, real broker and store ------------------------------------------------


async def _subscribe(
    url: str, schemas: Path, broker_port: int, work, *, client_id: str, sink_wrapper=None, **options
) -> MqttSubscriber:
    """Run a subscriber on a real GroupCommitter while ``work(subscriber)`` (a blocking function) runs in a thread."""
    committer = GroupCommitter(neostore.open(url), load_schemas(str(schemas)))
    await asyncio.to_thread(committer.start)
    sink = committer if sink_wrapper is None else sink_wrapper(committer)
    subscriber = MqttSubscriber(
        sink,
        parse_broker_url(f"mqtt://127.0.0.1:{broker_port}"),
        ["plant/#"],
        client_id=client_id,
        min_retry=0.1,
        max_retry=1.0,
        **options,
    )
    try:
        await subscriber.start()
        await asyncio.to_thread(work, subscriber)
    finally:
        await subscriber.close()
        await asyncio.to_thread(committer.close)
        await asyncio.to_thread(committer.store.close)
    return subscriber


def test_json_and_msgpack_from_several_topics_land_exactly_and_bad_payloads_are_quarantined(
    store_url, schemas, broker, request
):
    messages = []
    for i in range(60):
        record = {"value": i / 4, "seq": i, "unit": f"kW-é{i}", "time": (T0 // 10**9) + i}
        topic = f"plant/t{i % 3}/power"
        messages.append((topic, json.dumps(record) if i % 2 else msgpack.packb(record)))
    bad = [
        ("plant/t0/power", b'{"value": '),
        ("plant/t1/power", b"\x00\xc1 junk"),
        ("plant/t2/power", b'{"value": "high"}'),
    ]  # the last decodes but does not fit the schema
    messages[20:20] = bad
    publisher = Publisher(broker.port, f"pub-{request.node.name}")

    def work(subscriber: MqttSubscriber) -> None:
        publisher.send(messages)
        wait_for(lambda: subscriber.stored >= len(messages), what="every message committed")

    try:
        # A budget of one byte: every message waits for the one before to commit; nothing deadlocks or drops.
        asyncio.run(
            _subscribe(
                store_url,
                schemas,
                broker.port,
                work,
                client_id=f"sub-{request.node.name}",
                max_pending_bytes=1 if "sqlite" in request.node.name else 64 << 20,
            )
        )
    finally:
        publisher.close()
    reasons = []
    for k in range(3):
        with arrays.open_stream(store_url, f"plant.t{k}.power") as stream:
            table = stream.to_pandas()
        expected = [i for i in range(60) if i % 3 == k]
        assert table["seq"].tolist() == expected
        assert table["value"].tolist() == [i / 4 for i in expected]
        assert table["unit"].tolist() == [f"kW-é{i}" for i in expected]
        assert stream_times(store_url, f"plant.t{k}.power") == [T0 + i * 10**9 for i in expected]
        with arrays.open_stream(store_url, f"plant.t{k}.power", quarantine=True) as q:
            quarantined = q.to_pandas()
        assert quarantined["raw"].tolist() == [bad[k][1]]
        assert quarantined["source"].tolist() == ["mqtt"]
        reasons += quarantined["reason"].tolist()
    assert reasons[0] == "unreadable MQTT payload (invalid JSON: line 1 column 11)"
    assert reasons[1].startswith("unreadable MQTT payload (not JSON nor msgpack")
    assert "field 'value': expected float64, got str 'high'" in reasons[2]


def test_a_time_that_is_not_a_time_is_quarantined_naming_it(sqlite_url, schemas, broker, request):
    """Over a real broker: ISO 8601 and epoch ms are times; a word is quarantined verbatim, its reason naming it."""
    messages = [
        ("plant/times/power", b'{"value": 1.0, "seq": 1, "time": "2024-05-01T12:00:00Z"}'),
        ("plant/times/power", b'{"value": 2.0, "seq": 2, "time": 1714564800250}'),
        ("plant/times/power", b'{"value": 3.0, "seq": 3, "time": "soon"}'),
    ]
    publisher = Publisher(broker.port, f"pub-{request.node.name}")

    def work(subscriber: MqttSubscriber) -> None:
        publisher.send(messages)
        wait_for(lambda: subscriber.stored >= len(messages), what="every message committed")

    try:
        asyncio.run(_subscribe(sqlite_url, schemas, broker.port, work, client_id=f"sub-{request.node.name}"))
    finally:
        publisher.close()
    assert stream_times(sqlite_url, "plant.times.power") == [1714564800 * 10**9, 1714564800250 * 10**6]
    with arrays.open_stream(sqlite_url, "plant.times.power", quarantine=True) as q:
        quarantined = q.to_pandas()
    assert quarantined["raw"].tolist() == [messages[2][1]]
    assert quarantined["reason"].tolist() == [not_a_time("soon")]


def stream_times(url: str, tag: str) -> list[int]:
    with arrays.open_stream(url, tag) as stream:
        return stream["time"][:].tolist()


@pytest.mark.crash
def test_broker_restart_mid_stream_redelivers_what_was_not_acknowledged_and_nothing_is_stored_twice(
    sqlite_url, schemas, tmp_path
):
    """The broker is stopped right after the first submission commits, before its PUBACKs can go out: the
    subscriber reconnects with backoff, the broker redelivers those messages with DUP set, and they are
    recognised as committed. The sink is the real committer; the wrapper only places the restart."""
    mosquitto = Mosquitto(tmp_path / "broker").start()
    first = 400
    published, restarted = threading.Event(), threading.Event()

    class StopBrokerAfterFirstCommit:
        def __init__(self, committer: GroupCommitter):
            self.committer = committer
            self.accepts_undecoded = committer.accepts_undecoded
            self.stopped = False

        async def submit(self, batches, **kwargs):
            receipt = await self.committer.submit(batches, **kwargs)
            if not self.stopped:
                self.stopped = True
                # Not before the publisher is done: a publication the broker took but could not acknowledge
                # would be sent again by the publisher, a second message that QoS 1 rightly stores twice.
                await asyncio.to_thread(published.wait, 60)
                await asyncio.to_thread(mosquitto.stop)  # SIGTERM: it saves the session and its unacked messages
                await asyncio.to_thread(restart)
            return receipt

    def restart() -> None:
        time.sleep(0.5)  # the subscriber sees the connection drop and retries meanwhile
        mosquitto.start()
        restarted.set()

    messages = [(f"plant/r{i % 2}", json.dumps({"value": float(i), "seq": i})) for i in range(first + 200)]

    def work(subscriber: MqttSubscriber) -> None:
        publisher = Publisher(mosquitto.port, "pub-restart")
        publisher.send(messages[:first])
        publisher.close()
        published.set()
        assert restarted.wait(60), "the broker was not restarted"
        publisher = Publisher(mosquitto.port, "pub-restart-2")
        publisher.send(messages[first:])
        publisher.close()
        wait_for(
            lambda: (
                rows(sqlite_url, "plant.r0") + rows(sqlite_url, "plant.r1") >= len(messages)
                and subscriber.redelivered_duplicates > 0
            ),
            what="every message, and the redelivered ones recognised",
        )

    try:
        subscriber = asyncio.run(
            _subscribe(
                sqlite_url,
                schemas,
                mosquitto.port,
                work,
                client_id="sub-restart",
                sink_wrapper=StopBrokerAfterFirstCommit,
            )
        )
    finally:
        mosquitto.kill()
    assert seqs(sqlite_url, ["plant.r0", "plant.r1"]).tolist() == list(range(len(messages)))
    assert subscriber.redelivered_duplicates > 0  # reconnected, session resumed, DUP copies found committed


# -- windvane serve, killed ----------------------------------------------------------------------


@pytest.mark.crash
@pytest.mark.parametrize("backend", ["sqlite", "mariadb"])
def test_kill_9_mid_stream_loses_nothing_and_stores_nothing_twice(backend, schemas, broker, tmp_path, request):
    url = request.getfixturevalue(f"{backend}_url")
    total = 10_000
    topics = [f"plant/k{backend}/{k}" for k in range(4)]
    tags = [topic_to_tag(t) for t in topics]
    messages = [(topics[i % 4], json.dumps({"value": i * 0.5, "seq": i})) for i in range(total + 100)]
    messages, tail = messages[:total], messages[total:]
    args = ("--mqtt", broker.url, "--mqtt-topic", f"plant/k{backend}/#", "--decode-workers", "0")
    publisher = Publisher(broker.port, f"pub-kill-{backend}")
    sending = threading.Thread(target=publisher.send, args=(messages,), daemon=True)
    log = tmp_path / "serve.log"
    try:
        with Serve(url, schemas, log, *args, forward=None, http=None) as serve:
            assert serve.addresses["mqtt"] == ("127.0.0.1", broker.port)
            sending.start()
            wait_for(lambda: sum(rows(url, tag) for tag in tags) >= total // 5, what="a fifth stored")
            serve.kill()
        stored_at_kill = sum(rows(url, tag) for tag in tags)
        # The rest is published while windvane is down: the broker queues it in the session.
        sending.join(120)
        assert not sending.is_alive(), "the publisher did not finish"
        with Serve(url, schemas, log, *args, forward=None, http=None) as serve:
            # And the stream goes on after the restart.
            publisher.send(tail)
            total += len(tail)
            wait_for(lambda: sum(rows(url, tag) for tag in tags) >= total, what="every message stored")
            time.sleep(0.3)  # anything stored twice would show up now
            assert serve.stop() == 0
    finally:
        publisher.close()
    assert stored_at_kill < total, "the kill came too late to test anything"
    assert seqs(url, tags).tolist() == list(range(total))
    assert "session resumed" in log.read_text() or "resumed session" in log.read_text()


# -- the command line --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, words",
    [
        (["--mqtt", "tcp://localhost"], "scheme must be mqtt:// or mqtts://"),
        (["--mqtt", "mqtt://localhost", "--mqtt-topic", "a/#/b"], "'#' must be a whole level and the last one"),
        (["--forward", "off", "--http", "off"], "nothing to serve"),
    ],
)
def test_bad_mqtt_options_exit_2_with_the_reason(args, words, schemas, sqlite_url):
    result = CliRunner().invoke(windvane_cli, ["serve", "--store", sqlite_url, "--schemas", str(schemas), *args])
    assert result.exit_code == 2, result.output
    assert words in result.output


def test_an_unreachable_broker_exits_2_naming_it(schemas, sqlite_url):
    port = free_port()
    result = CliRunner().invoke(
        windvane_cli,
        [
            "serve",
            "--store",
            sqlite_url,
            "--schemas",
            str(schemas),
            "--forward",
            "off",
            "--http",
            "off",
            "--decode-workers",
            "0",
            "--mqtt",
            f"mqtt://127.0.0.1:{port}",
        ],
    )
    assert result.exit_code == 2, result.output
    assert f"cannot reach the MQTT broker at 127.0.0.1:{port}" in result.output


def test_message_keys_differ_by_every_part():
    base = message_key("c", 1, "t", b"p")
    assert len(base) == 12 and base.startswith(b"mqtt")
    assert (
        len(
            {
                base,
                message_key("d", 1, "t", b"p"),
                message_key("c", 2, "t", b"p"),
                message_key("c", 1, "u", b"p"),
                message_key("c", 1, "t", b"q"),
            }
        )
        == 5
    )
