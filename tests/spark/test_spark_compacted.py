"""format("ads") reads a compacted topic: offsets with gaps, in batch and streaming queries.

Spark's own Kafka connector stumbles on non-consecutive offsets; this source must not. The topic's logs are
cleaned by the log cleaner itself (``clean_log``, one pass below the active segment, on the stopped broker
holding both partitions, which is then started again): offsets disappear inside batches (a cleaned batch
keeps its span), between them (emptied batches are dropped) and so at the end of planned ranges. Running the
pass directly keeps these tests independent of the cleaner thread's scheduling (its own tests:
``tests/integration/test_compaction*.py``). What the reads must return is what the cleaned logs hold, read
straight from their segments.

One secured cluster for the module (``secured_cluster``), the shared SparkSession, every read as ``User:etl``
holding Read and Describe on the topic only.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from chispa import assert_df_equality

from tests.fixtures.spark import produce, reader
from tests.fixtures.waiting import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.integration]

STREAM_WAIT_S = 180
PARTITIONS = 2
KEYS = 4
ROUNDS = 6  # produce calls per partition: each flushes, so each is at least one stored batch
SEGMENT_BYTES = 1024  # the smallest segment.bytes: a segment rolls every batch or two


def clean_stopped_partition(directory: Path) -> list[tuple[int, str, str]]:
    """One pass of the log cleaner (``broker/log/cleaner.clean_log``) over a stopped broker's partition log, as
    the broker's cleaner thread would run it (below the active segment); the (offset, key, value) it holds
    after, read straight from its segments."""
    from ads_spark.broker.log.cleaner import clean_log
    from ads_spark.broker.log.config import LogConfig
    from ads_spark.broker.log.partition_log import PartitionLog

    now_ms = int(time.time() * 1000)
    log = PartitionLog.open(directory, LogConfig(segment_bytes=SEGMENT_BYTES), recovery_point=0, clean_shutdown=True,
                            now_ms=now_ms)
    try:
        active_base = log.segment_summaries()[-1][0]
        stats = clean_log(log, clean_end_offset_exclusive=active_base, now_ms=now_ms, delete_retention_ms=0,
                          min_compaction_lag_ms=0, key_map_entries_max=1000, throttle=lambda _bytes: None)
        assert stats.records_removed and not stats.abandoned, stats
        table = pa.Table.from_batches([batch for batch, _ in log.batches()])
    finally:
        log.close()
    return list(zip(table.column("offset").to_pylist(), [k.decode() for k in table.column("key").to_pylist()],
                    [v.decode() for v in table.column("value").to_pylist()]))


@pytest.fixture(scope="module")
def compacted(secured_cluster, secured_admin, etl):
    """A topic of PARTITIONS partitions on one broker, produced in ROUNDS batches per partition, then compacted
    on that stopped broker: (topic, {partition: [(offset, key, value) kept]}, {partition: log end})."""
    from ads_spark.client import TopicPartition

    broker_id = secured_cluster.broker_ids()[0]
    topic = f"compacted-{uuid.uuid4().hex[:8]}"
    # Small segments, so that most of the log is below the active segment, which the cleaner never touches.
    secured_admin.create_topic(topic, replica_assignment=[[broker_id]] * PARTITIONS,
                               config={"segment.bytes": SEGMENT_BYTES})
    etl.grant(read=[topic])
    as_admin = secured_cluster.client_config()
    produced: dict[int, list] = {p: [] for p in range(PARTITIONS)}
    for round_ in range(ROUNDS + 1):
        # Keys repeat across rounds (older values go); the last round is one record of a unique key per partition,
        # so each log keeps its last offset and its HW.
        keys = [f"k{(round_ + i) % KEYS}" for i in range(3)] if round_ < ROUNDS else [f"end-{uuid.uuid4().hex[:6]}"]
        records = [(p, key.encode(), f"{key}@{round_}.{i}".encode(), None)
                   for p in range(PARTITIONS) for i, key in enumerate(keys)]
        for (p, key, value, _), meta in zip(records, produce(as_admin, topic, records)):
            produced[p].append((meta.offset, key.decode(), value.decode()))
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    log_ends = {tp.partition: end for tp, end in secured_admin.list_offsets(tps, "latest").items()}
    secured_cluster.stop_broker(broker_id)
    kept = {p: clean_stopped_partition(secured_cluster.dir / f"broker-{broker_id}" / "data" / f"{topic}-{p}")
            for p in range(PARTITIONS)}
    secured_cluster.start_broker(broker_id)
    wait_until(lambda: {tp.partition: end for tp, end in secured_admin.list_offsets(tps, "latest").items()}
               == log_ends, 60, what=f"{topic} led again at its log ends {log_ends}")
    for p, records in kept.items():  # what was produced less what the cleaner removed: gaps, not damage
        assert set(records) < set(produced[p]) and records[-1] == produced[p][-1]
    return topic, kept, log_ends


def expected_frame(spark, schema, topic, kept, below=None):
    rows = [(topic, p, offset, key, value) for p, records in kept.items() for offset, key, value in records
            if below is None or offset < below[p]]
    return spark.createDataFrame(rows, schema)


COLUMNS = ("topic", "partition", "offset", "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value")


def test_batch_read_of_a_compacted_topic_returns_exactly_the_records_present(spark, etl, compacted):
    topic, kept, _ = compacted
    actual = reader(spark, etl.options, subscribe=topic).selectExpr(*COLUMNS)
    assert_df_equality(actual, expected_frame(spark, actual.schema, topic, kept), ignore_row_order=True)
    # Ranges ending just after a removed offset, so the last offset of each is gone (and, cut in pieces of 3
    # offsets, many pieces hold no record at all): each completes, nothing is reported lost (failOnDataLoss is
    # true by default).
    ends = {p: _last_removed(records) + 1 for p, records in kept.items()}
    ranged = reader(spark, etl.options, subscribe=topic, endingOffsets=_offsets_json(topic, ends),
                    maxRecordsPerPartition="3").selectExpr(*COLUMNS)
    assert_df_equality(ranged, expected_frame(spark, ranged.schema, topic, kept, below=ends), ignore_row_order=True)


def test_streaming_read_of_a_compacted_topic_in_offset_order(spark, etl, compacted, checkpoint_dir):
    topic, kept, log_ends = compacted
    name = f"compacted_{uuid.uuid4().hex[:8]}"
    # Over Flight fetches (the batch test above reads the segment files: the local read path's locate).
    query = (spark.readStream.format("ads").options(**etl.options).option("ads.local.reads", "false")
             .option("subscribe", topic).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "5")
             .load().selectExpr(*COLUMNS)
             .writeStream.format("memory").queryName(name)
             .option("checkpointLocation", checkpoint_dir).trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(STREAM_WAIT_S) and query.exception() is None
        actual = spark.table(name)
        assert_df_equality(actual, expected_frame(spark, actual.schema, topic, kept), ignore_row_order=True)
        # maxOffsetsPerTrigger counts offset distance (as Spark's Kafka source): a trigger never holds more
        # records than that, fewer where compaction removed offsets, and the query still ends at the log ends.
        sizes = [progress["numInputRows"] for progress in query.recentProgress]
        assert max(sizes) <= 5 and len(sizes) >= sum(log_ends.values()) // 5
        for p, records in kept.items():  # each partition in offset order within and across micro-batches
            offsets = [r.offset for r in actual.where(f"partition = {p}").collect()]
            assert offsets == [offset for offset, _, _ in records]
    finally:
        query.stop()


def _last_removed(records) -> int:
    """The last offset a compacted partition no longer holds, below its last record."""
    present = {offset for offset, _, _ in records}
    return max(offset for offset in range(records[-1][0]) if offset not in present)


def _offsets_json(topic: str, offsets: dict[int, int]) -> str:
    return "{" + f'"{topic}":' + "{" + ",".join(f'"{p}":{o}' for p, o in sorted(offsets.items())) + "}}"
