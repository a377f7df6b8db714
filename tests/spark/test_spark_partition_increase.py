"""A running streaming query reads the partitions added to its topic from offset 0, as Spark's Kafka source does.

The query subscribes to one topic by name (``subscribe``), with the default
``startingOffsets=latest``; the topic then grows from 2 to 4 partitions
(``Admin.create_partitions``, what ``ads topics alter --partitions`` calls) and
records are written to the new partitions before the query's next trigger:
every one of them is read, from offset 0 of its partition, and nothing twice.
"""

from __future__ import annotations

import uuid

import pytest

from tests.fixtures.spark import new_topic, produce

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(300)]


def test_a_running_stream_reads_added_partitions_from_offset_zero(spark, admin, bootstrap, checkpoint_dir):
    topic = new_topic(admin, partitions=2)
    produce(bootstrap, topic, [(0, None, b"before", None)])  # before the query: skipped (latest)
    name = f"q_{uuid.uuid4().hex[:8]}"
    query = (spark.readStream.format("ads").option("ads.bootstrap.servers", bootstrap).option("subscribe", topic)
             .load().selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
             .writeStream.format("memory").queryName(name).option("checkpointLocation", checkpoint_dir).start())
    try:
        query.processAllAvailable()
        produce(bootstrap, topic, [(0, None, b"p0-after", None), (1, None, b"p1-after", None)])
        query.processAllAvailable()
        admin.create_partitions(topic, 4)
        produce(bootstrap, topic, [(2, None, b"p2-first", None), (2, None, b"p2-second", None),
                                   (3, None, b"p3-first", None), (0, None, b"p0-later", None)])
        query.processAllAvailable()
        rows = sorted((r.partition, r.offset, r.value) for r in spark.table(name).collect())
        assert rows == [(0, 1, "p0-after"), (0, 2, "p0-later"), (1, 0, "p1-after"),
                        (2, 0, "p2-first"), (2, 1, "p2-second"), (3, 0, "p3-first")]
    finally:
        query.stop()
