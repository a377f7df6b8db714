"""A running Spark stream's progress as consumer-group lag (``ads.commitOffsetsToGroup``), end to end.

On the module's secured cluster, as ``User:etl`` (Read and Describe on the topic, Read on the group: what a
standalone commit needs), a stream admits 8 records per 1-second trigger from 16 waiting records and catches up:
``ads consumer-groups --describe`` (as the admin) and the coordinator's ``ads_consumer_group_lag`` gauge
read 0. With the stream stopped, 16 more records are exactly the lag both show; the stream restarted from
its checkpoint reads them and the lag falls back to 0, the committed offsets equal to the log end. The group never has members (the commits are standalone).
"""

from __future__ import annotations

import json
import urllib.request
import uuid

import pytest

from ads_spark.cli.main import main
from ads_spark.security.authorizer import AclBinding
from tests.fixtures.spark import new_topic, produce
from tests.fixtures.waiting import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.integration]

STREAM_WAIT_S = 120
RECORDS_PER_PARTITION = 8


def describe(capsys, cluster, group: str) -> dict | None:
    """``ads consumer-groups --describe --json`` as the admin (the state dir's client config); None while the
    group does not exist yet."""
    capsys.readouterr()
    code = main(["consumer-groups", "--dir", str(cluster.dir), "--describe", "--group", group, "--json"])
    out, err = capsys.readouterr()
    if code != 0:
        assert "does not exist" in err, err
        return None
    return json.loads(out)


def gauge_lag(ports: list[int], group: str, topic: str) -> float | None:
    """The lag the brokers export for the group's two partitions of ``topic``, summed (only its coordinator
    exports them); None until both are exported."""
    prefix = f'ads_consumer_group_lag{{group="{group}",'  # prometheus_client writes the labels sorted
    values, exporters = [], set()
    for port in ports:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        for line in text.splitlines():
            if line.startswith(prefix) and f'topic="{topic}"' in line:
                values.append(float(line.rsplit(" ", 1)[1]))
                exporters.add(port)
    assert len(exporters) <= 1, f"more than one broker exports the lag of group {group}"
    return sum(values) if len(values) == 2 else None


def start_stream(spark, etl, topic: str, group: str, checkpoint_dir: str):
    return (spark.readStream.format("ads").options(**etl.options).option("subscribe", topic)
            .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "8")
            .option("ads.commitOffsetsToGroup", group).load()
            .selectExpr("CAST(value AS STRING) AS value")
            .writeStream.format("noop")  # the memory sink cannot restart from a checkpoint
            .option("checkpointLocation", checkpoint_dir).trigger(processingTime="1 second").start())


def wait_for_lag(capsys, cluster, ports, topic: str, group: str, expected_lag: int, query=None) -> dict:
    """Waits until both ``--describe`` and the coordinator's gauge show ``expected_lag`` summed over the two
    partitions; returns the last description. While a stream runs, the lags ``--describe`` shows on the way
    must only fall: its progress moves forward."""
    seen_lags: list[int] = []

    def reached():
        if query is not None:
            assert query.exception() is None, query.exception()
        described = describe(capsys, cluster, group)
        if described is None or len(described["partitions"]) < 2:
            return False
        seen_lags.append(sum(r["lag"] for r in described["partitions"]))
        return (seen_lags[-1] == expected_lag and gauge_lag(ports, group, topic) == expected_lag
                and described)
    final = wait_until(reached, timeout_s=STREAM_WAIT_S,
                       what=f"group {group}'s lag to read {expected_lag} in describe and the gauge")
    if query is not None:
        assert seen_lags == sorted(seen_lags, reverse=True), seen_lags
    return final


def test_stream_lag_shows_in_describe_and_gauge_and_falls_to_zero(spark, secured_cluster, secured_admin, etl,
                                                                  checkpoint_dir, capsys):
    topic, group = new_topic(secured_admin, partitions=2), f"spark-lag-{uuid.uuid4().hex[:8]}"
    etl.grant(read=[topic])
    secured_admin.create_acls([AclBinding("Group", group, "LITERAL", etl.principal, "*", "Read", "ALLOW")])
    # The group's coordinator up before the query (creating __consumer_offsets takes a moment on first use).
    wait_until(lambda: secured_admin.list_consumer_group_offsets(group) == {}, timeout_s=60,
               what="the group's coordinator")
    config = secured_cluster.client_config()
    ports = [b["metrics_port"] for b in secured_admin.cluster()["brokers"] if b.get("metrics_port")]

    def produce_batch(first: int) -> None:
        produce(config, topic, [(p, None, f"v{i}".encode(), None)
                                for p in (0, 1) for i in range(first, first + RECORDS_PER_PARTITION)])

    # 1. Two triggers' worth of records: the stream catches up and both views read 0.
    produce_batch(0)
    query = start_stream(spark, etl, topic, group, checkpoint_dir)
    try:
        wait_for_lag(capsys, secured_cluster, ports, topic, group, 0, query)
    finally:
        query.stop()
    # 2. With the stream stopped, new records are lag, and both views show exactly them: a deterministic
    # lag above 0 (while the stream runs, it may catch up before either view is sampled).
    produce_batch(RECORDS_PER_PARTITION)
    wait_for_lag(capsys, secured_cluster, ports, topic, group, 2 * RECORDS_PER_PARTITION)
    # 3. The stream restarted from its checkpoint reads them, and the lag falls back to 0.
    query = start_stream(spark, etl, topic, group, checkpoint_dir)
    try:
        final = wait_for_lag(capsys, secured_cluster, ports, topic, group, 0, query)
    finally:
        query.stop()
    assert final["members"] == [] and final["state"] == "Empty"
    assert [(r["current_offset"], r["log_end_offset"]) for r in final["partitions"]] == [
        (2 * RECORDS_PER_PARTITION, 2 * RECORDS_PER_PARTITION)] * 2
