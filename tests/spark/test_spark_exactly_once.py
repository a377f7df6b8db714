"""No duplicates on replay: a streaming copy ADS -> ADS stopped in the middle of micro-batches.

The query reads a source topic, passes rows through a slow ``mapInArrow`` and
writes to a sink topic. As soon as the sink holds part of a micro-batch that is
not committed yet, the test stops the query (what a driver crash does to it) and
starts it again from its checkpoint, so the same micro-batch runs again. The
sink derives its producer id from (query id, batch id, task) and the brokers
drop the batches they already hold: the sink topic ends with every source value
exactly once. With idempotence turned off the same schedule duplicates records
(checked by hand when this was written; see the closing note).

The cluster is secured (``secured_cluster``: mutual TLS listeners, the ACL authorizer) and the query runs
as ``User:etl`` (``etl``, not a super user) holding Read and Describe on the source, Write and Describe on
the sink, IdempotentWrite on the cluster and Read on the sink for the check; the admin makes the topics,
the source records and the sink counts.
"""

from __future__ import annotations

import time
import uuid

import pytest

from tests.fixtures.spark import new_topic, produce, reader

pytestmark = [pytest.mark.spark, pytest.mark.integration]

FAILURES = 10
RECORDS = 4000
RESTARTS_MAX = FAILURES + 10


def slow_copy(seconds_per_batch: float):
    """A mapInArrow function that takes its time, so a stop lands in the middle of a micro-batch."""

    def run(batches):
        for batch in batches:
            time.sleep(seconds_per_batch)
            yield batch

    return run


@pytest.fixture
def small_arrow_batches(spark):
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(key)
    spark.conf.set(key, "50")
    yield
    spark.conf.set(key, before)


def sink_count(admin, topic: str) -> int:
    from ads_spark.client import TopicPartition

    partitions = admin.describe_topics([topic])[0].partitions
    return sum(admin.list_offsets([TopicPartition(topic, p.partition)], "latest")[TopicPartition(topic, p.partition)]
               for p in partitions)


@pytest.fixture(scope="module")
def admin(secured_admin):
    """The secured cluster's admin client (topics and sink counts as a super user)."""
    return secured_admin


def test_replayed_micro_batches_write_each_record_once(spark, admin, secured_cluster, etl, tmp_path,
                                                       small_arrow_batches):
    source, sink = new_topic(admin, partitions=2), new_topic(admin, partitions=3, replication_factor=3)
    etl.grant(read=[source, sink], write=[sink], idempotent_write=True)
    values = [f"v{i}".encode() for i in range(RECORDS)]
    produce(secured_cluster.client_config(), source, [(i % 2, None, v, None) for i, v in enumerate(values)])
    checkpoint = str(tmp_path / "checkpoint")
    interrupted = 0
    for _attempt in range(RESTARTS_MAX):
        query = (spark.readStream.format("ads").options(**etl.options)
                 .option("subscribe", source).option("startingOffsets", "earliest")
                 .option("maxOffsetsPerTrigger", str(RECORDS // 10)).load()
                 .selectExpr("key", "value")
                 .mapInArrow(slow_copy(0.15), "key binary, value binary")
                 .writeStream.format("ads").options(**etl.options).option("topic", sink)
                 .option("checkpointLocation", checkpoint).queryName(f"replay_{uuid.uuid4().hex[:6]}")
                 .trigger(availableNow=True).start())
        if interrupted < FAILURES:
            # Stop ("crash") as soon as the sink holds records of a micro-batch that is not committed yet.
            before = sink_count(admin, sink)
            deadline = time.monotonic() + 60
            while query.isActive and sink_count(admin, sink) == before and time.monotonic() < deadline:
                time.sleep(0.05)
            if query.isActive:
                query.stop()
                interrupted += 1
                continue
        query.awaitTermination(300)
        if query.exception() is None and sink_count(admin, sink) >= RECORDS and not query.isActive:
            if interrupted >= FAILURES:
                break
    written = reader(spark, etl.options, subscribe=sink).select("value").collect()
    got = [bytes(r.value) for r in written]
    duplicated = len(got) - len(set(got))
    lost = len(set(values) - set(got))
    print(f"{interrupted} queries stopped mid-batch and restarted from the checkpoint; sink holds {len(got)} "
          f"records: lost={lost} duplicated={duplicated}")
    assert interrupted >= FAILURES
    assert (lost, duplicated, len(got)) == (0, 0, RECORDS)
