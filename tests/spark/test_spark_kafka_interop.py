"""Kafka's clients and Spark's ``format("ads")`` agree record for record (issue #25 item 3), on the module's
secured cluster: Kafka clients on its Kafka listener (TLS with the admin's certificate), Spark as ``User:etl``
on Flight holding only the ACLs each test grants.

* confluent-kafka writes keyed records with headers and create times; a Spark batch read returns the same
  keys, values, headers, timestamps, partitions and offsets (chispa);
* a Spark batch write (key, value, headers, timestamp) is read back by a confluent-kafka consumer with the
  same fields, each key on the partition ADS's partitioner picked;
* one set of keys produced by confluent-kafka (murmur2_random), kafka-python and aiokafka (their default
  partitioners) and ADS's own producer lands on one partition per key, as read by Spark.
"""

from __future__ import annotations

import datetime as dt

import pytest
from chispa import assert_df_equality

from ads_spark.protocol.partitioner import key_partition
from tests.fixtures.kafka_clients import (
    PRODUCERS, Item, items, kafka_endpoint, produce_confluent, read_all_confluent,
)
from tests.fixtures.spark import new_topic, produce, reader

pytestmark = [pytest.mark.spark, pytest.mark.integration]

PARTITIONS = 3
RECORDS = 40
COLUMNS = ("key", "value", "topic", "partition", "offset", "CAST(unix_millis(timestamp) AS BIGINT) AS timestamp_ms",
           "timestampType", "headers")


@pytest.fixture(scope="module")
def endpoint(secured_cluster):
    return kafka_endpoint(secured_cluster)


def _headers(headers) -> tuple[tuple[str, bytes], ...]:
    return tuple((h.key, bytes(h.value)) for h in headers or ())


def test_kafka_producer_records_read_by_spark_field_for_field(spark, secured_admin, etl, endpoint):
    topic = new_topic(secured_admin, partitions=PARTITIONS, replication_factor=3)
    etl.grant(read=[topic])
    produced = produce_confluent(endpoint, topic, items(RECORDS, "to-spark"))
    actual = reader(spark, etl.options, subscribe=topic, includeHeaders="true").selectExpr(*COLUMNS)
    expected = spark.createDataFrame(
        [(r.key, r.value, topic, r.partition, r.offset, r.timestamp_ms, 0, [list(h) for h in r.headers])
         for r in produced], actual.schema)
    assert_df_equality(actual, expected, ignore_row_order=True)
    assert all(r.partition == key_partition(r.key, PARTITIONS) for r in produced)


def test_spark_writer_records_read_by_a_kafka_consumer(spark, secured_admin, etl, endpoint):
    topic = new_topic(secured_admin, partitions=PARTITIONS, replication_factor=3)
    etl.grant(write=[topic], idempotent_write=True)
    start = dt.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=dt.timezone.utc)
    written = [Item(f"from-spark-{i}".encode(), f"v{i}".encode(), (("h", str(i).encode()), ("n", b"\x01")),
                    int((start + dt.timedelta(milliseconds=i)).timestamp() * 1000)) for i in range(RECORDS)]
    source = spark.createDataFrame(
        [(w.key, w.value, [list(h) for h in w.headers],
          dt.datetime.fromtimestamp(w.timestamp_ms / 1000, dt.timezone.utc)) for w in written],
        "key binary, value binary, headers array<struct<key: string, value: binary>>, timestamp timestamp")
    source.write.format("ads").mode("append").options(**etl.options).option("topic", topic).save()
    consumed = read_all_confluent(endpoint, topic, PARTITIONS, RECORDS)
    assert sorted((r.key, r.value, r.headers, r.timestamp_ms, r.partition) for r in consumed) == \
        sorted((w.key, w.value, w.headers, w.timestamp_ms, key_partition(w.key, PARTITIONS)) for w in written)
    for partition in range(PARTITIONS):
        offsets = [r.offset for r in consumed if r.partition == partition]
        assert offsets == list(range(len(offsets))), (partition, offsets)


def test_every_client_puts_a_key_on_the_partition_ads_picks(spark, secured_cluster, secured_admin, etl, endpoint):
    topic = new_topic(secured_admin, partitions=PARTITIONS, replication_factor=3)
    etl.grant(read=[topic])
    keys = [f"user-{i}".encode() for i in range(30)]
    for name, produce_with in PRODUCERS.items():
        produce_with(endpoint, topic, [Item(k, name.encode(), (), 1_700_000_000_000) for k in keys])
    produce(secured_cluster.client_config(), topic, [(None, k, b"ads", None) for k in keys])
    rows = reader(spark, etl.options, subscribe=topic).selectExpr("key", "CAST(value AS STRING) AS client",
                                                                   "partition").collect()
    assert sorted({r.client for r in rows}) == sorted([*PRODUCERS, "ads"]) and len(rows) == 4 * len(keys)
    placed = {(bytes(r.key), r.partition) for r in rows}
    assert placed == {(k, key_partition(k, PARTITIONS)) for k in keys}, sorted(placed)[:10]
