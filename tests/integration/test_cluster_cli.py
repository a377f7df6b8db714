"""The foundation's acceptance tests against real processes: ZooKeeper and 3 brokers on 127.0.0.1.

The `ads` CLI round trip (produce 1,000 lines, consume the same 1,000), Kafka-style
describe output, bad input that gets a clear error while the broker keeps
serving, and a broker killed with SIGKILL mid-write that recovers every
acknowledged record.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from ads_spark.client import Admin, Consumer, Producer, TopicPartition
from ads_spark.protocol import wire
from ads_spark.errors import (
    AdsError,
    InvalidConfigError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def ads(cluster, *argv, stdin: str | None = None, timeout_s: float = 120):
    return subprocess.run([sys.executable, "-m", "ads_spark.cli.main", *argv,
                           "--bootstrap-server", cluster.bootstrap_servers],
                          input=stdin, capture_output=True, text=True, timeout=timeout_s)


def test_cli_produce_then_consume_returns_the_same_lines(cluster, topic_name):
    created = ads(cluster, "topics", "create", "--topic", topic_name, "--partitions", "3",
                  "--replication-factor", "3")
    assert created.returncode == 0, created.stderr
    lines = [f"line-{i:04d}" for i in range(1000)]
    produced = ads(cluster, "produce", "--topic", topic_name, stdin="\n".join(lines) + "\n")
    assert produced.returncode == 0, produced.stderr
    consumed = ads(cluster, "consume", "--topic", topic_name, "--from-beginning", "--max-messages", "1000",
                   "--timeout-ms", "20000")
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(consumed.stdout.splitlines()) == lines


def test_describe_prints_kafka_style_lines_and_json(cluster, topic_name):
    Admin({"bootstrap.servers": cluster.bootstrap_servers}).create_topic(topic_name, 3, 3)
    described = ads(cluster, "topics", "describe", "--topic", topic_name)
    assert described.returncode == 0, described.stderr
    rows = described.stdout.splitlines()
    assert len(rows) == 3
    for number, row in enumerate(rows):
        fields = dict(field.split(": ", 1) for field in row.split("\t"))
        assert fields["Topic"] == topic_name and fields["Partition"] == str(number)
        replicas = fields["Replicas"].split(",")
        assert sorted(replicas) == ["1", "2", "3"] and fields["Leader"] in replicas
        assert sorted(fields["Isr"].split(",")) == ["1", "2", "3"]
    leaders = {dict(f.split(": ", 1) for f in row.split("\t"))["Leader"] for row in rows}
    assert len(leaders) == 3, "preferred leaders should be spread over the 3 brokers"
    as_json = json.loads(ads(cluster, "topics", "describe", "--topic", topic_name, "--json").stdout)
    partitions = as_json["topics"][0]["partitions"]
    assert [p["partition"] for p in partitions] == [0, 1, 2]
    assert all(p["leader_epoch"] >= 0 and len(p["isr"]) == 3 for p in partitions)


def test_bad_input_gets_clear_errors_and_the_broker_keeps_serving(cluster, topic_name):
    config = {"bootstrap.servers": cluster.bootstrap_servers}
    admin = Admin(config)
    admin.create_topic(topic_name, 1, 3)
    with Producer({**config, "acks": "all"}) as producer:
        producer.produce(topic_name, value=b"before").result(timeout=30)

    missing = ads(cluster, "consume", "--topic", "no-such-topic", "--max-messages", "1")
    assert missing.returncode != 0 and "no-such-topic" in missing.stderr
    bad_config = ads(cluster, "topics", "create", "--topic", topic_name + "x", "--partitions", "1",
                     "--replication-factor", "1", "--config", "retention.msec=5")
    assert bad_config.returncode != 0 and "retention.msec" in bad_config.stderr
    with pytest.raises(InvalidConfigError, match="min.insync.replicas"):
        admin.create_topic(topic_name + "y", 1, 2, config={"min.insync.replicas": "3"})

    consumer = Consumer(config)
    with pytest.raises(OffsetOutOfRangeError):
        consumer.fetch_chunk(TopicPartition(topic_name, 0), 10_000)
    with pytest.raises(UnknownTopicOrPartitionError):
        consumer.fetch_chunk(TopicPartition(topic_name, 7), 0)

    leader = admin.describe_topics([topic_name])[0].partitions[0].leader
    port = next(b["port"] for b in cluster.state["brokers"] if b["id"] == leader)
    raw = flight.connect(f"grpc+tcp://127.0.0.1:{port}")
    with pytest.raises(flight.FlightError) as malformed:
        raw.do_get(flight.Ticket(b"{not json")).read_all()
    assert isinstance(wire.to_ads_error(malformed.value), InvalidRequestError)
    with pytest.raises(flight.FlightError) as negative:
        raw.do_get(flight.Ticket(wire.dumps({"type": "fetch", "partitions": [
            {"topic": topic_name, "partition": 0, "fetch_offset": -5}]}))).read_all()
    assert "fetch_offset: must be >= 0" in str(wire.to_ads_error(negative.value))
    wrong_schema = pa.record_batch({"value": pa.array([1, 2, 3])})
    writer, reader = raw.do_put(flight.FlightDescriptor.for_command(wire.dumps({"type": "produce"})),
                                wrong_schema.schema)
    writer.write_with_metadata(wrong_schema, pa.py_buffer(wire.dumps(
        {"correlation_id": 1, "topic": topic_name, "partition": 0, "acks": "all"})))
    writer.done_writing()
    response = json.loads(reader.read().to_pybytes())
    writer.close()
    assert response["error_code"] == int(InvalidRequestError.code), response
    assert "value" in response["message"]

    # The broker still serves and nothing was appended by the bad requests.
    with Producer({**config, "acks": "all"}) as producer:
        producer.produce(topic_name, value=b"after").result(timeout=30)
    values = consumer.fetch_arrow(TopicPartition(topic_name, 0), 0, 100).column("value").to_pylist()
    assert values == [b"before", b"after"]


def test_oversized_batch_is_rejected_and_changes_nothing(cluster, topic_name):
    config = {"bootstrap.servers": cluster.bootstrap_servers}
    Admin(config).create_topic(topic_name, 1, 1, config={"max.message.bytes": "10000"})
    with Producer({**config, "acks": "1", "retries": 0}) as producer:
        future = producer.produce_arrow(topic_name, pa.record_batch({"value": pa.array([b"z" * 20000])}),
                                        partition=0)
        with pytest.raises(Exception, match="RECORD_TOO_LARGE"):
            future.result(timeout=30)
    low, high = Consumer(config).get_watermark_offsets(TopicPartition(topic_name, 0))
    assert (low, high) == (0, 0)


def test_sigkill_mid_write_recovers_every_acknowledged_record(fresh_cluster, topic_name):
    cluster = fresh_cluster(brokers=1)
    config = {"bootstrap.servers": cluster.bootstrap_servers}
    Admin(config).create_topic(topic_name, 1, 1)
    acknowledged: list[bytes] = []
    stop = threading.Event()

    def produce_forever():
        with Producer({**config, "acks": "1", "linger.ms": 1, "delivery.timeout.ms": 3000}) as producer:
            i = 0
            while not stop.is_set():
                value = f"v{i}".encode()
                try:
                    future = producer.produce(topic_name, value=value, partition=0)
                except AdsError:  # the broker is gone and produce() could not learn the partition's leader
                    return
                future.add_done_callback(
                    lambda f, v=value: acknowledged.append(v) if f.exception() is None else None)
                i += 1
                if i % 200 == 0:
                    time.sleep(0.005)

    writer = threading.Thread(target=produce_forever, daemon=True)
    writer.start()
    time.sleep(2.0)
    cluster.kill_broker(1)
    stop.set()
    writer.join(15)
    assert len(acknowledged) > 100
    cluster.start_broker(1)
    deadline = time.monotonic() + 60
    while True:
        try:
            consumer = Consumer(config)
            _, high = consumer.get_watermark_offsets(TopicPartition(topic_name, 0))
            values = set(consumer.fetch_arrow(TopicPartition(topic_name, 0), 0, high).column("value").to_pylist())
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    missing = [v for v in acknowledged if v not in values]
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:3]}"


def _send_raw(cluster, topic: str, values: list[bytes], producer_id: int, base_sequence: int, acks: str = "all"):
    """One produce batch on the wire with explicit idempotence fields; returns the broker's answer."""
    from concurrent.futures import Future

    from ads_spark.protocol.connection import Connections
    from ads_spark.client.producer_channel import BrokerChannel
    from ads_spark.protocol.records import conform_produce_batch

    connections = Connections({"bootstrap.servers": cluster.bootstrap_servers})
    try:
        meta, address = connections.leader_of(topic, 0)
        channel = BrokerChannel(connections.client_for(address.host, address.port), meta.leader, 30_000)
        answer: Future = Future()
        batch = conform_produce_batch(pa.record_batch({"value": pa.array(values, pa.binary())}))
        item = type("Item", (), {"batch": batch})()
        channel.send(item, {"topic": topic, "partition": 0, "acks": acks, "timeout_ms": 10_000,
                             "producer_id": producer_id, "producer_epoch": 0, "base_sequence": base_sequence},
                     lambda _item, base, error: answer.set_result((base, error)))
        result = answer.result(timeout=30)
        channel.close()
        return result
    finally:
        connections.close()


def test_idempotent_resend_gets_its_first_offset_and_gaps_are_refused(cluster, topic_name):
    config = {"bootstrap.servers": cluster.bootstrap_servers}
    Admin(config).create_topic(topic_name, 1, 3, config={"min.insync.replicas": "2"})
    producer_id = Admin(config)._connections.call_any(wire.ACTION_INIT_PRODUCER_ID, {})["producer_id"]
    assert _send_raw(cluster, topic_name, [b"a", b"b"], producer_id, 0) == (0, None)
    assert _send_raw(cluster, topic_name, [b"c"], producer_id, 2) == (2, None)
    # The same batch again (a retry after a lost answer): its original offset, nothing appended.
    assert _send_raw(cluster, topic_name, [b"a", b"b"], producer_id, 0) == (0, None)
    base, error = _send_raw(cluster, topic_name, [b"z"], producer_id, 7)  # sequences 3..6 never sent
    assert base is None and error.code.name == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    consumer = Consumer(config)
    values = consumer.fetch_arrow(TopicPartition(topic_name, 0), 0, 3).column("value").to_pylist()
    assert values == [b"a", b"b", b"c"]
    assert consumer.get_watermark_offsets(TopicPartition(topic_name, 0)) == (0, 3)


def test_admin_reads_wait_out_a_broker_restart(fresh_cluster, topic_name):
    """Kafka's admin client retries retriable errors up to default.api.timeout.ms; so does ours for reads."""
    cluster = fresh_cluster(brokers=1)
    admin = Admin({"bootstrap.servers": cluster.bootstrap_servers, "default.api.timeout.ms": 60_000})
    try:
        admin.create_topic(topic_name, 2, 1)
        cluster.kill_broker(1)
        answers: list = []
        reader = threading.Thread(target=lambda: answers.append(admin.describe_topics([topic_name])), daemon=True)
        reader.start()
        time.sleep(1.0)
        assert reader.is_alive() and not answers  # retrying, not failed
        cluster.start_broker(1)
        reader.join(60)
        assert [len(d.partitions) for d in answers[0]] == [2]
    finally:
        admin.close()
