"""Kafka clients and typed topics (issue #26) on a real 3-broker cluster: a typed topic stores Arrow columns,
not key/value records, so a Kafka Produce to it is INVALID_RECORD naming the topic and ADS's Arrow
producer (nothing stored), a Kafka Fetch of it is UNSUPPORTED_FOR_MESSAGE_FORMAT per partition while the
request's other partitions are served, and ListOffsets and Metadata answer as for any topic.
confluent-kafka (librdkafka) shows what an application sees; a raw kio connection shows the exact answer."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaError
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from ads_spark.client import Consumer, Producer, TopicPartition
from ads_spark.kafka.handlers_data import TYPED_TOPIC_FETCH_ERROR, UNSUPPORTED_FOR_MESSAGE_FORMAT
from tests.fixtures.kafka_wire import Wire, produce_fields, valid_batch

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

PRODUCE, FETCH = 0, 1
ROWS = 10


def fetch_fields(*topics: str) -> dict:
    return {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "topics": [
        {"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0, "current_leader_epoch": -1,
                                         "partition_max_bytes": 1 << 20}]} for topic in topics]}


@pytest.fixture(scope="module")
def topics(cluster, admin):
    typed, plain = "typed-for-kafka", "plain-for-kafka"
    admin.create_topic(typed, 1, 3, schema="order_id BIGINT NOT NULL, region STRING")
    leader = admin.describe_topics([typed])[0].partitions[0].leader
    others = [b for b in cluster.broker_ids() if b != leader]
    admin.create_topic(plain, replica_assignment=[[leader, *others]])  # one leader: one fetch serves both
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    try:
        rows = pa.table({"order_id": pa.array(range(ROWS), pa.int64()), "region": ["r"] * ROWS})
        assert producer.produce_arrow(typed, rows, partition=0).result(30) == 0
        assert producer.produce(plain, value=b"kafka-shaped", partition=0).result(30).offset == 0
    finally:
        producer.close(5)
    return typed, plain, leader


def test_a_kafka_produce_to_a_typed_topic_is_refused_naming_the_topic_and_nothing_is_stored(cluster, topics):
    typed, _, leader = topics
    wire = Wire(cluster, leader)
    try:
        answer = wire.call(PRODUCE, 9, produce_fields(typed, {0: bytes(valid_batch())}))
    finally:
        wire.close()
    partition = answer.responses[0].partition_responses[0]
    assert partition.error_code == 87 and partition.base_offset == -1  # INVALID_RECORD
    for named in (f"topic '{typed}' is typed (schema.type=arrow)", "Producer.produce_arrow", "nothing was stored"):
        assert named in partition.error_message, partition.error_message

    reports = []
    producer = KafkaProducer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "acks": "all",
                              "message.timeout.ms": 10000})
    producer.produce(typed, value=b"not columns", partition=0, on_delivery=lambda error, _: reports.append(error))
    assert producer.flush(20) == 0
    assert reports[0] is not None and reports[0].code() == KafkaError.INVALID_RECORD, reports
    assert not reports[0].retriable()
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(typed, 0)) == (0, ROWS)  # nothing stored
    finally:
        consumer.close()


def test_a_kafka_fetch_of_a_typed_topic_fails_that_partition_alone(cluster, topics):
    typed, plain, leader = topics
    wire = Wire(cluster, leader)
    try:
        answer = wire.call(FETCH, 12, fetch_fields(typed, plain))
    finally:
        wire.close()
    by_topic = {t.topic: t.partitions[0] for t in answer.responses}
    assert by_topic[typed].error_code == TYPED_TOPIC_FETCH_ERROR == UNSUPPORTED_FOR_MESSAGE_FORMAT
    assert not by_topic[typed].records
    assert by_topic[plain].error_code == 0 and b"kafka-shaped" in by_topic[plain].records

    consumer = KafkaConsumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": "typed-kafka",
                              "enable.auto.commit": False})
    try:
        metadata = consumer.list_topics(typed, timeout=10).topics[typed]
        assert metadata.error is None and list(metadata.partitions) == [0]
        assert consumer.get_watermark_offsets(KafkaTopicPartition(typed, 0), timeout=10) == (0, ROWS)
        consumer.assign([KafkaTopicPartition(typed, 0, 0)])
        error, deadline = None, time.monotonic() + 20
        while error is None and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None:
                assert message.error() is not None, "a Kafka consumer was given a record of a typed topic"
                error = message.error()
        assert error is not None and error.code() == UNSUPPORTED_FOR_MESSAGE_FORMAT, error
        assert not error.retriable() and not error.fatal()
        print(f"librdkafka surfaced: {error.str()}")
    finally:
        consumer.close()
