"""format("ads") end to end: a real broker cluster, a real SparkSession, data compared with chispa.

One secured cluster for the module (``secured_cluster``: mutual TLS listeners, the ACL authorizer), one
SparkSession for the run (``spark``); every test makes its own topics as the admin and grants ``User:etl``
(``etl``: a client certificate of the cluster's CA, not a super user) only what its queries need: Read and
Describe on the topics they read, Write and Describe on those they write plus IdempotentWrite on the
cluster (the sink is idempotent). Every ``format("ads")`` read and write runs as ``User:etl``; data set up
and checked outside Spark goes through the admin's client config. Covers batch reads with offsets and
timestamps, batch writes with key/partition/topic routing, a streaming copy with
admission control under Trigger.AvailableNow, incremental micro-batches, and
failOnDataLoss on a topic that is deleted and re-created under a running query.
"""

from __future__ import annotations

import uuid

import pytest
from chispa import assert_df_equality

from ads_spark.protocol.partitioner import key_partition
from tests.fixtures.spark import new_topic, produce, reader

pytestmark = [pytest.mark.spark, pytest.mark.integration]

STREAM_WAIT_S = 180


@pytest.fixture(scope="module")
def admin(secured_admin):
    """The secured cluster's admin client (topics are created and checked as a super user)."""
    return secured_admin


@pytest.fixture(scope="module")
def as_admin(secured_cluster):
    """The admin's client config, for the records produced outside Spark."""
    return secured_cluster.client_config()


def test_batch_read_matches_what_was_produced(spark, admin, as_admin, etl):
    topic = new_topic(admin, partitions=2)
    etl.grant(read=[topic])
    produce(as_admin, topic, [(i % 2, f"k{i}".encode(), f"v{i}".encode(), [("h", f"{i}".encode())])
                               for i in range(10)])
    df = reader(spark, etl.options, subscribe=topic, includeHeaders="true")
    actual = df.selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "topic", "partition",
                           "offset", "timestampType", "headers[0].key AS header_key",
                           "CAST(headers[0].value AS STRING) AS header_value")
    expected = spark.createDataFrame(
        [(f"k{i}", f"v{i}", topic, i % 2, i // 2, 0, "h", f"{i}") for i in range(10)],
        actual.schema)
    assert_df_equality(actual, expected, ignore_row_order=True)
    assert df.where("timestamp IS NULL").count() == 0


def test_batch_read_offsets_json_and_timestamps(spark, admin, as_admin, etl):
    topic = new_topic(admin, partitions=2)
    etl.grant(read=[topic])
    produce(as_admin, topic, [(i % 2, None, f"v{i}".encode(), None) for i in range(12)])
    ranged = reader(spark, etl.options, subscribe=topic,
                    startingOffsets=f'{{"{topic}":{{"0":2,"1":-2}}}}',
                    endingOffsets=f'{{"{topic}":{{"0":4,"1":-1}}}}')
    assert sorted((r.partition, r.offset) for r in ranged.select("partition", "offset").collect()) == \
        [(0, 2), (0, 3)] + [(1, o) for o in range(6)]
    assigned = reader(spark, etl.options, assign=f'{{"{topic}":[1]}}')
    assert assigned.select("partition").distinct().collect()[0].partition == 1 and assigned.count() == 6
    last_ms = max(r.ts for r in reader(spark, etl.options, subscribe=topic).selectExpr(
        "CAST(unix_micros(timestamp) / 1000 AS BIGINT) AS ts").collect())
    with pytest.raises(Exception, match=f"{topic}-0 has no record with a timestamp at or after {last_ms + 1} ms"):
        reader(spark, etl.options, subscribe=topic, startingTimestamp=str(last_ms + 1)).count()
    assert reader(spark, etl.options, subscribe=topic, startingTimestamp=str(last_ms + 1),
                  startingOffsetsByTimestampStrategy="latest").count() == 0
    assert reader(spark, etl.options, subscribe=topic, endingTimestamp=str(last_ms + 1)).count() == 12


def test_batch_read_splits_into_min_partitions(spark, admin, as_admin, etl):
    topic = new_topic(admin, partitions=1)
    etl.grant(read=[topic])
    produce(as_admin, topic, [(0, None, b"x", None) for _ in range(20)])
    df = reader(spark, etl.options, subscribe=topic, minPartitions="4")
    assert df.rdd.getNumPartitions() == 4 and df.count() == 20
    assert reader(spark, etl.options, subscribe=topic, maxRecordsPerPartition="3").rdd.getNumPartitions() == 7


def test_batch_write_routes_by_key_partition_and_topic(spark, admin, as_admin, etl):
    first, second = new_topic(admin, partitions=3), new_topic(admin, partitions=2)
    etl.grant(read=[first, second], write=[first, second], idempotent_write=True)
    rows = [(f"k{i}", f"v{i}", first if i % 2 else second, 1 if i == 4 else None) for i in range(20)]
    source = spark.createDataFrame(rows, "key string, value string, topic string, partition int")
    source.write.format("ads").mode("append").options(**etl.options).save()
    written = reader(spark, etl.options, subscribePattern=f"{first}|{second}")
    actual = written.selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "topic",
                                "partition")
    counts = {first: 3, second: 2}
    expected = spark.createDataFrame(
        [(k, v, t, p if p is not None else key_partition(k.encode(), counts[t])) for k, v, t, p in rows],
        actual.schema)
    assert_df_equality(actual, expected, ignore_row_order=True)


def test_batch_write_with_topic_option_and_headers(spark, admin, as_admin, etl):
    topic = new_topic(admin, partitions=1)
    etl.grant(read=[topic], write=[topic], idempotent_write=True)
    source = spark.createDataFrame([("a", "ignored")], "value string, topic string").selectExpr(
        "value", "topic", "array(named_struct('key', 'h', 'value', CAST('1' AS BINARY))) AS headers")
    source.write.format("ads").mode("append").options(**etl.options) \
        .option("topic", topic).save()
    row = reader(spark, etl.options, subscribe=topic, includeHeaders="true").collect()[0]
    assert (row.value, row.key, row.headers[0].key, bytes(row.headers[0].value)) == (b"a", None, "h", b"1")


def test_records_without_headers_read_back_as_null_and_round_trip(spark, admin, as_admin, etl):
    topic, copy = new_topic(admin, partitions=1), new_topic(admin, partitions=1)
    etl.grant(read=[topic, copy], write=[copy], idempotent_write=True)
    produce(as_admin, topic, [(0, None, b"bare", None), (0, None, b"empty", []), (0, None, b"one", [("h", b"1")])])
    df = reader(spark, etl.options, subscribe=topic, includeHeaders="true")
    assert {r.value: r.headers for r in df.select("value", "headers").collect()}[b"bare"] is None
    assert df.where("headers IS NULL").count() == 2
    df.select("value", "headers").write.format("ads").mode("append").options(**etl.options) \
        .option("topic", copy).save()
    back = {bytes(r.value): r.headers for r in reader(spark, etl.options, subscribe=copy, includeHeaders="true")
            .select("value", "headers").collect()}
    assert back[b"bare"] is None and back[b"empty"] is None and back[b"one"][0].key == "h"


def test_batch_dataframe_run_again_resolves_earliest_and_latest_then(spark, admin, as_admin, etl):
    topic = new_topic(admin, partitions=2)
    etl.grant(read=[topic])
    produce(as_admin, topic, [(i % 2, None, b"x", None) for i in range(6)])
    df = reader(spark, etl.options, subscribe=topic, minPartitions="3")
    assert df.count() == 6
    produce(as_admin, topic, [(1, None, b"y", None) for _ in range(5)])
    assert df.count() == 11  # Spark's connector resolves latest when the read runs, not when first planned
    assert sorted(r.offset for r in df.where("partition = 1").select("offset").collect()) == list(range(8))


def test_batch_write_to_missing_topic_fails_the_task(spark, etl):
    missing = f"missing-{uuid.uuid4().hex[:6]}"
    etl.grant(write=[missing], idempotent_write=True)  # may see it: else the answer is not "does not exist"
    df = spark.createDataFrame([("a",)], "value string")
    with pytest.raises(Exception) as excinfo:
        df.write.format("ads").mode("append").options(**etl.options).option("topic", missing).save()
    assert "does not exist" in str(excinfo.value)


def test_stream_copy_available_now_with_max_offsets(spark, admin, as_admin, etl, checkpoint_dir):
    source, sink = new_topic(admin, partitions=2), new_topic(admin, partitions=2)
    etl.grant(read=[source, sink], write=[sink], idempotent_write=True)  # reads the sink back to check it
    produce(as_admin, source, [(i % 2, f"k{i}".encode(), f"v{i}".encode(), None) for i in range(20)])
    query = (spark.readStream.format("ads").options(**etl.options)
             .option("subscribe", source).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "6")
             .load().selectExpr("key", "value")
             .writeStream.format("ads").options(**etl.options).option("topic", sink)
             .option("checkpointLocation", checkpoint_dir).trigger(availableNow=True).start())
    assert query.awaitTermination(STREAM_WAIT_S)
    assert query.exception() is None
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 20 and max(sizes) <= 6
    copied = reader(spark, etl.options, subscribe=sink).selectExpr("CAST(key AS STRING) AS key",
                                                                 "CAST(value AS STRING) AS value")
    expected = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(20)], copied.schema)
    assert_df_equality(copied, expected, ignore_row_order=True)


def test_stream_picks_up_new_records_and_new_partitions(spark, admin, as_admin, etl, checkpoint_dir):
    topic = new_topic(admin, partitions=1)
    etl.grant(read=[topic, f"{topic}-b"])  # the second topic is created under the running query
    produce(as_admin, topic, [(0, None, b"before", None)])
    query_name = f"q_{uuid.uuid4().hex[:8]}"
    query = (spark.readStream.format("ads").options(**etl.options)
             .option("subscribePattern", f"{topic}.*").load()
             .selectExpr("CAST(value AS STRING) AS value", "topic")
             .writeStream.format("memory").queryName(query_name)
             .option("checkpointLocation", checkpoint_dir).start())
    try:
        query.processAllAvailable()
        produce(as_admin, topic, [(0, None, b"after", None)])
        other = f"{topic}-b"
        admin.create_topic(other, partitions=1, replication_factor=1)
        produce(as_admin, other, [(0, None, b"new-topic", None)])
        query.processAllAvailable()
        seen = {(r.value, r.topic) for r in spark.table(query_name).collect()}
        assert seen == {("after", topic), ("new-topic", other)}  # startingOffsets=latest skips "before"
        assert query.lastProgress["sources"][0]["latestOffset"] is not None
    finally:
        query.stop()


def test_stream_fails_on_recreated_topic_unless_told_not_to(spark, admin, as_admin, etl, tmp_path):
    topic = new_topic(admin, partitions=1)
    etl.grant(read=[topic])  # ACLs name the topic, not one incarnation of it: the re-created topic keeps them
    produce(as_admin, topic, [(0, None, b"one", None)])

    def start(fail_on_data_loss: str, name: str):
        return (spark.readStream.format("ads").options(**etl.options)
                .option("subscribe", topic).option("startingOffsets", "earliest")
                .option("failOnDataLoss", fail_on_data_loss).load().selectExpr("CAST(value AS STRING) AS value")
                .writeStream.format("memory").queryName(name)
                .option("checkpointLocation", str(tmp_path / name)).start())

    strict, lenient = start("true", f"strict_{uuid.uuid4().hex[:6]}"), start("false", f"lenient_{uuid.uuid4().hex[:6]}")
    try:
        strict.processAllAvailable()
        lenient.processAllAvailable()
        admin.delete_topic(topic)
        admin.create_topic(topic, partitions=1, replication_factor=1)
        produce(as_admin, topic, [(0, None, b"two", None)])
        with pytest.raises(Exception) as excinfo:
            strict.processAllAvailable()
        assert "failOnDataLoss=false" in str(excinfo.value)
        lenient.processAllAvailable()
        assert sorted(r.value for r in spark.table(lenient.name).collect()) == ["one", "two"]
    finally:
        strict.stop()
        lenient.stop()
