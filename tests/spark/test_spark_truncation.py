"""KIP-320 in the "ads" source: a real unclean election truncates records two running streaming queries already
read. The failOnDataLoss=true query fails naming topic, partition and the lost range; the failOnDataLoss=false one
reads the records written into the cut range afterwards (before, both resumed at their old offset and skipped
them). Checkpointed offsets carry the leader epoch they were read in."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.fixtures.truncation import (
    BOTH_HAVE,
    ONLY_LEADER_HAS,
    OVERRIDES,
    elect_unclean,
    write_into_cut,
    write_then_isolate,
)
from tests.fixtures.waiting import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.integration]

STREAM_WAIT_S = 120


@pytest.mark.timeout(600)
def test_unclean_truncation_under_running_queries(spark, fresh_cluster, topic_name, tmp_path):
    from pyspark.errors import StreamingQueryException

    cluster = fresh_cluster(3, overrides=OVERRIDES)
    admin = write_then_isolate(cluster, topic_name)
    read = BOTH_HAVE + ONLY_LEADER_HAS

    def start(fail_on_data_loss: str, name: str):
        return (spark.readStream.format("ads").option("ads.bootstrap.servers", cluster.bootstrap_servers)
                .option("subscribe", topic_name).option("startingOffsets", "earliest")
                .option("failOnDataLoss", fail_on_data_loss).load()
                .selectExpr("CAST(value AS STRING) AS value", "offset")
                .writeStream.format("memory").queryName(name)
                .option("checkpointLocation", str(tmp_path / name)).start())

    strict_name, lenient_name = f"strict_{uuid.uuid4().hex[:6]}", f"lenient_{uuid.uuid4().hex[:6]}"
    strict, lenient = start("true", strict_name), start("false", lenient_name)
    try:
        for query, name in ((strict, strict_name), (lenient, lenient_name)):
            query.processAllAvailable()
            assert spark.table(name).count() == read
        end = json.loads(lenient.lastProgress["sources"][0]["endOffset"])
        assert end["topics"][topic_name]["offsets"] == {"0": read} and "0" in end["topics"][topic_name]["epochs"]

        elect_unclean(cluster, admin, topic_name)
        written = write_into_cut(cluster.bootstrap_servers, topic_name)

        with pytest.raises(StreamingQueryException) as failed:
            strict.awaitTermination(STREAM_WAIT_S)
        assert f"{topic_name}-0: offsets {BOTH_HAVE}..{read - 1} were truncated" in str(failed.value)

        expected = [(value.decode(), BOTH_HAVE + i) for i, value in enumerate(written)]

        def after_cut():
            rows = spark.table(lenient_name).where("value LIKE 'new-%'").collect()
            return sorted((r.value, r.offset) for r in rows) if len(rows) >= len(written) else None

        assert wait_until(after_cut, STREAM_WAIT_S, what="the records written into the cut range") == \
            sorted(expected)
        assert lenient.exception() is None
    finally:
        strict.stop()
        lenient.stop()
        admin.close()
