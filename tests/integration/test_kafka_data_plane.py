"""Kafka's data plane on a real 3-broker cluster (issue #25 item 3): Produce, Fetch, ListOffsets,
OffsetForLeaderEpoch and Metadata through the Kafka listener, against ADS's own client reading and writing
the same partitions.

confluent-kafka (librdkafka) is the Kafka client; for what a client hides (an error code, a long-poll's
timing, a leader epoch) requests go over a plain socket, encoded with kio at an exact version. The leader
change kills a broker, so it runs last and restarts it.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

import pyarrow as pa
import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from kio.schema.errors import ErrorCode as KafkaErrorCode
from kio.serial import entity_reader

from ads_spark.client import Consumer, Producer, TopicPartition
from ads_spark.kafka import entities
from ads_spark.protocol.partitioner import key_partition
from tests.fixtures.waiting import wait_until

pytestmark = pytest.mark.integration

PRODUCE, FETCH, LIST_OFFSETS, METADATA, EPOCH = 0, 1, 2, 3, 23
SOCKET_TIMEOUT_S = 30
RECORDS = 60
T0_MS = 1_700_000_000_000


class KafkaWire:
    """One Kafka connection speaking kio entities at the version asked: what the clients hide, visible."""

    def __init__(self, address: str):
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=SOCKET_TIMEOUT_S)
        self.correlation_id = 0

    def call(self, api_key: int, version: int, value: dict):
        self.correlation_id += 1
        request_cls = entities.request_class(api_key, version)
        header_cls = request_cls.__header_schema__
        header = entities.build(header_cls, {"request_api_key": api_key, "request_api_version": version,
                                             "correlation_id": self.correlation_id, "client_id": "k3-test"})
        body = entities.encode(header_cls, header) + entities.encode(request_cls, entities.build(request_cls, value))
        self.sock.sendall(struct.pack(">i", len(body)) + body)
        frame = self._read(struct.unpack(">i", self._read(4))[0])
        response_cls = entities.response_class(api_key, version)
        response_header, offset = entity_reader(response_cls.__header_schema__)(frame, 0)
        assert response_header.correlation_id == self.correlation_id
        return entity_reader(response_cls)(frame, offset)[0]

    def _read(self, count: int) -> bytes:
        chunks = []
        while count:
            chunk = self.sock.recv(count)
            assert chunk, "the broker closed the connection"
            chunks.append(chunk)
            count -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self.sock.close()


def kafka_address(cluster, broker_id: int) -> str:
    return f"{cluster.broker_address(broker_id)}:{cluster.kafka_port(broker_id)}"


def partition_metadata(cluster, topic: str, partition: int = 0, avoid: int | None = None):
    """(leader, leader epoch) as Kafka's Metadata v9 says, from a broker other than ``avoid``."""
    wire = KafkaWire(kafka_address(cluster, next(b for b in cluster.broker_ids() if b != avoid)))
    try:
        answer = wire.call(METADATA, 9, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    finally:
        wire.close()
    found = next(p for p in answer.topics[0].partitions if p.partition_index == partition)
    return found.leader_id, found.leader_epoch


def fetch_value(topic: str, offset: int, epoch: int, max_wait_ms: int = 0) -> dict:
    return {"replica_id": -1, "max_wait": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20,
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": offset,
                                                         "current_leader_epoch": epoch,
                                                         "partition_max_bytes": 1 << 20}]}]}


def kafka_producer(cluster, **more) -> KafkaProducer:
    return KafkaProducer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "enable.idempotence": True,
                          "acks": "all", "linger.ms": 5, "partitioner": "murmur2_random", **more})


def produce_all(producer: KafkaProducer, topic: str, records: list[dict], timeout_s: float = 60) -> list:
    """Each record's (partition, offset) as the broker acknowledged it; fails on any delivery error."""
    reports: list = [None] * len(records)

    def delivered(index):
        def report(error, message):
            reports[index] = error if error is not None else (message.partition(), message.offset())
        return report

    for index, record in enumerate(records):
        producer.produce(topic, **record, on_delivery=delivered(index))
        producer.poll(0)
    assert producer.flush(timeout_s) == 0
    assert all(isinstance(report, tuple) for report in reports), [r for r in reports if not isinstance(r, tuple)]
    return reports


def kafka_read(cluster, topic: str, partition: int, count: int, timeout_s: float = 30) -> list[tuple]:
    consumer = KafkaConsumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": "k3-unused",
                              "enable.auto.commit": False})
    try:
        consumer.assign([KafkaTopicPartition(topic, partition, 0)])
        read, deadline = [], time.monotonic() + timeout_s
        while len(read) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            read.append((message.offset(), message.timestamp()[1], message.key(), message.value(),
                         message.headers() or []))
        return read
    finally:
        consumer.close()


def ads_read(cluster, topic: str, partition: int) -> list[tuple]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers})
    try:
        tp = TopicPartition(topic, partition)
        start, end = consumer.get_watermark_offsets(tp)
        table = consumer.fetch_arrow(tp, start, end)
        timestamps_ms = table.column("timestamp").cast(pa.int64()).to_pylist()  # no local-time conversion
        return [(row["offset"], timestamp_ms, row["key"], row["value"],
                 [(h["key"], h["value"]) for h in (row["headers"] or [])])
                for row, timestamp_ms in zip(table.to_pylist(), timestamps_ms)]
    finally:
        consumer.close()


def test_idempotent_kafka_produce_reads_back_identically_through_ads_and_kafka(cluster, admin, topic_name):
    admin.create_topic(topic_name, partitions=3, replication_factor=3)
    records = [{"key": b"user-%d" % (i % 17), "value": b"value-%d" % i, "timestamp": T0_MS + i,
                "headers": [("seq", b"%d" % i), ("empty", b"")]} for i in range(RECORDS)]
    producer = kafka_producer(cluster)
    reports = produce_all(producer, topic_name, records)
    # Kafka's murmur2 partitioner and ADS's agree on every key
    assert [partition for partition, _ in reports] == [key_partition(r["key"], 3) for r in records]
    ads_producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    try:
        placed = ads_producer.produce(topic_name, value=b"from-ads", key=b"user-3").result(30)
    finally:
        ads_producer.close(5)
    assert placed.partition == key_partition(b"user-3", 3)
    for partition in range(3):
        expected = [(offset, r["timestamp"], r["key"], r["value"], r["headers"])
                    for r, (p, offset) in zip(records, reports) if p == partition]
        through_ads = ads_read(cluster, topic_name, partition)
        extra = 1 if partition == placed.partition else 0
        assert through_ads[:len(expected)] == expected
        through_kafka = kafka_read(cluster, topic_name, partition, len(expected) + extra)
        assert through_kafka == through_ads  # the ADS-written record too, offsets and all


def test_fetch_long_poll_returns_when_a_record_is_appended(cluster, admin, topic_name):
    admin.create_topic(topic_name, partitions=1, replication_factor=3)
    leader, epoch = partition_metadata(cluster, topic_name)
    wire = KafkaWire(kafka_address(cluster, leader))
    answer: dict = {}

    def fetch():
        started = time.monotonic()
        answer["response"] = wire.call(FETCH, 12, fetch_value(topic_name, 0, epoch, max_wait_ms=15000))
        answer["elapsed_s"] = time.monotonic() - started

    try:
        waiting = threading.Thread(target=fetch)
        waiting.start()
        time.sleep(1.0)
        assert waiting.is_alive(), "the fetch did not wait for data"
        produce_all(kafka_producer(cluster), topic_name, [{"value": b"wake"}])
        waiting.join(SOCKET_TIMEOUT_S)
    finally:
        wire.close()
    partition = answer["response"].responses[0].partitions[0]
    assert partition.error_code == KafkaErrorCode.none and partition.high_watermark == 1
    assert b"wake" in partition.records
    assert 0.9 <= answer["elapsed_s"] < 10, answer["elapsed_s"]
    print(f"long-poll fetch answered {answer['elapsed_s']:.2f} s after it was sent (append at ~1 s)")


def test_list_offsets_earliest_latest_and_by_time(cluster, admin, topic_name):
    admin.create_topic(topic_name, partitions=1, replication_factor=3)
    produce_all(kafka_producer(cluster), topic_name,
                [{"value": b"%d" % i, "timestamp": T0_MS + 1000 * i} for i in range(3)])
    leader, epoch = partition_metadata(cluster, topic_name)
    wire = KafkaWire(kafka_address(cluster, leader))
    try:
        asked = [-2, -1, T0_MS + 500, T0_MS + 2000, T0_MS + 5000]
        answer = wire.call(LIST_OFFSETS, 6, {"replica_id": -1, "isolation_level": 1, "topics": [
            {"name": topic_name, "partitions": [{"partition_index": 0, "timestamp": ts, "current_leader_epoch": epoch}
                                                for ts in asked[:1]]}]})
        found = [answer.topics[0].partitions[0]]
        for timestamp in asked[1:]:  # one partition per request: a partition named twice is INVALID_REQUEST
            answer = wire.call(LIST_OFFSETS, 6, {"replica_id": -1, "isolation_level": 1, "topics": [
                {"name": topic_name, "partitions": [{"partition_index": 0, "timestamp": timestamp}]}]})
            found.append(answer.topics[0].partitions[0])
        epochs = wire.call(EPOCH, 4, {"replica_id": -1, "topics": [{"topic": topic_name, "partitions": [
            {"partition": 0, "current_leader_epoch": epoch, "leader_epoch": epoch}]}]})
    finally:
        wire.close()
    assert [(p.error_code, p.offset) for p in found] == [(KafkaErrorCode.none, 0), (KafkaErrorCode.none, 3),
                                                         (KafkaErrorCode.none, 1), (KafkaErrorCode.none, 2),
                                                         (KafkaErrorCode.none, -1)]
    assert [p.timestamp for p in found[2:]] == [T0_MS + 1000, T0_MS + 2000, -1]
    assert found[1].leader_epoch == epoch
    end = epochs.topics[0].partitions[0]
    assert (end.error_code, end.leader_epoch, end.end_offset) == (KafkaErrorCode.none, epoch, 3)


def test_metadata_auto_creates_a_topic_a_kafka_producer_names(cluster, topic_name):
    reports = produce_all(kafka_producer(cluster), topic_name, [{"value": b"created"}])
    assert reports == [(0, 0)]
    leader, epoch = partition_metadata(cluster, topic_name)
    assert leader in cluster.broker_ids() and epoch >= 0


@pytest.mark.parametrize("compression", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_kafka_batches_are_stored_as_their_records(cluster, admin, topic_name, compression):
    admin.create_topic(topic_name, partitions=1, replication_factor=3)
    records = [{"key": b"k%d" % i, "value": b"value %d " % i * 20} for i in range(RECORDS)]
    produce_all(kafka_producer(cluster, **{"compression.type": compression}), topic_name, records)
    assert [(key, value) for _, _, key, value, _ in ads_read(cluster, topic_name, 0)] == [
        (r["key"], r["value"]) for r in records]


def test_log_append_time_topics_answer_and_serve_the_brokers_time(cluster, admin, topic_name):
    admin.create_topic(topic_name, partitions=1, replication_factor=3,
                       config={"message.timestamp.type": "LogAppendTime"})
    leader, _ = partition_metadata(cluster, topic_name)
    wire = KafkaWire(kafka_address(cluster, leader))
    try:
        before_ms = int(time.time() * 1000)
        answer = wire.call(PRODUCE, 8, {"acks": -1, "timeout": 5000, "topic_data": [
            {"name": topic_name, "partition_data": [{"index": 0, "records": _one_record_batch()}]}]})
    finally:
        wire.close()
    produced = answer.responses[0].partition_responses[0]
    append_ms = round(produced.log_append_time.timestamp() * 1000)
    assert produced.error_code == KafkaErrorCode.none and before_ms - 1000 <= append_ms <= before_ms + 60_000
    consumer = KafkaConsumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": "k3-unused"})
    try:
        consumer.assign([KafkaTopicPartition(topic_name, 0, 0)])
        message = wait_until(lambda: (lambda m: m if m is not None and m.error() is None else None)(
            consumer.poll(0.5)), timeout_s=30, what="the record")
    finally:
        consumer.close()
    assert message.timestamp() == (2, append_ms)  # TIMESTAMP_LOG_APPEND_TIME, the broker's clock (not T0_MS)


def test_a_leader_change_fences_old_epochs_and_kafka_clients_carry_on(cluster, admin, topic_name):
    """Last in the module: it kills the leader (and restarts it at the end)."""
    admin.create_topic(topic_name, partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
    strict = topic_name + "-all-in-sync"
    admin.create_topic(strict, partitions=1, replication_factor=3, config={"min.insync.replicas": "3"})
    old_leader, old_epoch = partition_metadata(cluster, topic_name)
    producer = kafka_producer(cluster, **{"message.timeout.ms": 60000})
    before = produce_all(producer, topic_name, [{"value": b"%d" % i} for i in range(RECORDS)])
    in_flight: dict = {}

    def produce_during_the_kill():  # records sent while the leader dies: retried by the client, once each
        paced = [{"value": b"%d" % i} for i in range(RECORDS, 2 * RECORDS)]
        for record in paced:
            producer.produce(topic_name, **record, on_delivery=lambda error, message: in_flight.setdefault(
                "reports", []).append(error if error is not None else message.offset()))
            producer.poll(0)
            time.sleep(0.01)
        in_flight["unflushed"] = producer.flush(90)

    sender = threading.Thread(target=produce_during_the_kill)
    sender.start()
    time.sleep(0.2)
    cluster.kill_broker(old_leader)
    try:
        new_leader, new_epoch = wait_until(lambda: (lambda found: found if found[0] not in (old_leader, -1)
                                                    else None)(partition_metadata(cluster, topic_name,
                                                                                  avoid=old_leader)),
                                           timeout_s=60, what="a new leader")
        assert new_epoch > old_epoch
        sender.join(120)
        assert in_flight["unflushed"] == 0 and len(in_flight["reports"]) == RECORDS
        assert [offset for _, offset in before] + sorted(in_flight["reports"]) == list(range(2 * RECORDS))
        read = kafka_read(cluster, topic_name, 0, 2 * RECORDS)
        assert [value for _, _, _, value, _ in read] == [b"%d" % i for i in range(2 * RECORDS)]  # once, in order
        follower = next(b for b in cluster.broker_ids() if b not in (old_leader, new_leader))
        wire = KafkaWire(kafka_address(cluster, new_leader))
        try:
            fenced = wire.call(FETCH, 12, fetch_value(topic_name, 0, old_epoch)).responses[0].partitions[0]
            ahead = wire.call(FETCH, 12, fetch_value(topic_name, 0, new_epoch + 5)).responses[0].partitions[0]
        finally:
            wire.close()
        assert (fenced.error_code, fenced.records) == (KafkaErrorCode.fenced_leader_epoch, b"")
        assert ahead.error_code == KafkaErrorCode.unknown_leader_epoch
        wire = KafkaWire(kafka_address(cluster, follower))
        try:
            batch = _one_record_batch()
            moved = wire.call(PRODUCE, 8, {"acks": -1, "timeout": 5000, "topic_data": [
                {"name": topic_name, "partition_data": [{"index": 0, "records": batch}]}]})
            follower_fetch = wire.call(FETCH, 12, fetch_value(topic_name, 0, new_epoch)).responses[0].partitions[0]
        finally:
            wire.close()
        assert moved.responses[0].partition_responses[0].error_code == KafkaErrorCode.not_leader_or_follower
        assert follower_fetch.error_code == KafkaErrorCode.not_leader_or_follower
        # min.insync.replicas=3 with a replica dead: acks=all is refused, acks=1 is appended (ADS's rule, Kafka's)
        strict_leader = wait_until(lambda: (lambda found: found[0] if found[0] not in (old_leader, -1) else None)(
            partition_metadata(cluster, strict, avoid=old_leader)), timeout_s=60, what="a live leader")
        wire = KafkaWire(kafka_address(cluster, strict_leader))
        try:
            def produce_strict(acks):
                answer = wire.call(PRODUCE, 8, {"acks": acks, "timeout": 5000, "topic_data": [
                    {"name": strict, "partition_data": [{"index": 0, "records": _one_record_batch()}]}]})
                return answer.responses[0].partition_responses[0]
            refused = wait_until(lambda: (lambda answer: answer if answer.error_code != KafkaErrorCode.none else None)(
                produce_strict(-1)), timeout_s=40, what="acks=all refused below min.insync.replicas")
            assert refused.error_code == KafkaErrorCode.not_enough_replicas
            assert produce_strict(1).error_code == KafkaErrorCode.none
        finally:
            wire.close()
    finally:
        producer.flush(10)
        cluster.start_broker(old_leader)


def _one_record_batch() -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 16)
    builder.append(0, T0_MS, None, b"to-a-follower", [])
    return bytes(builder.build())


def test_a_transactional_producer_fails_at_once_naming_adss_lack_of_transactions(cluster):
    """init_transactions ends with a fatal error in well under its timeout (it retried until the timeout
    while the transaction coordinator was answered INVALID_REQUEST)."""
    from confluent_kafka import KafkaException

    producer = KafkaProducer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "transactional.id": "tx-1"})
    started = time.monotonic()
    with pytest.raises(KafkaException, match="ADS has no transactions") as raised:
        producer.init_transactions(30)
    took_s = time.monotonic() - started
    assert raised.value.args[0].fatal() and took_s < 10, (took_s, raised.value)
