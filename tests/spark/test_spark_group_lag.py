"""A running Spark stream's progress as consumer-group lag (``ads.commitOffsetsToGroup``), end to end.

On the module's secured cluster, as ``User:etl`` (Read and Describe on the topic, Read on the group: what a
standalone commit needs), a stream admits 8 records per 1-second trigger from 16 waiting records:
``ads consumer-groups --describe`` (as the admin) shows lag above 0 while records wait and 0 once the stream
has caught up, with the committed offsets equal to the log end; the coordinator's
``ads_consumer_group_lag`` gauge shows the same. The group never has members (the commits are standalone).
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


def test_stream_lag_shows_in_describe_and_gauge_and_falls_to_zero(spark, secured_cluster, secured_admin, etl,
                                                                  checkpoint_dir, capsys):
    topic, group = new_topic(secured_admin, partitions=2), f"spark-lag-{uuid.uuid4().hex[:8]}"
    etl.grant(read=[topic])
    secured_admin.create_acls([AclBinding("Group", group, "LITERAL", etl.principal, "*", "Read", "ALLOW")])
    # The group's coordinator up before the query (creating __consumer_offsets takes a moment on first use).
    wait_until(lambda: secured_admin.list_consumer_group_offsets(group) == {}, timeout_s=60,
               what="the group's coordinator")
    produce(secured_cluster.client_config(), topic,
            [(p, None, f"v{i}".encode(), None) for p in (0, 1) for i in range(RECORDS_PER_PARTITION)])

    query = (spark.readStream.format("ads").options(**etl.options).option("subscribe", topic)
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "8")
             .option("ads.commitOffsetsToGroup", group).load()
             .selectExpr("CAST(value AS STRING) AS value")
             .writeStream.format("memory").queryName(f"lag_{uuid.uuid4().hex[:8]}")
             .option("checkpointLocation", checkpoint_dir).trigger(processingTime="1 second").start())
    ports = [b["metrics_port"] for b in secured_admin.cluster()["brokers"] if b.get("metrics_port")]
    seen_lags, seen_gauge = [], []
    try:
        def caught_up():
            assert query.exception() is None, query.exception()
            described = describe(capsys, secured_cluster, group)
            if described is None or len(described["partitions"]) < 2:
                return False
            seen_lags.append(sum(r["lag"] for r in described["partitions"]))
            seen_gauge.append(gauge_lag(ports, group, topic))
            return seen_lags[-1] == 0 and seen_gauge[-1] == 0 and described
        final = wait_until(caught_up, timeout_s=STREAM_WAIT_S, what="the stream's group lag to reach 0")
    finally:
        query.stop()
    assert max(seen_lags) > 0, f"the lag was never seen above 0: {seen_lags}"
    assert max(g for g in seen_gauge if g is not None) > 0, f"the gauge never showed lag above 0: {seen_gauge}"
    assert seen_lags == sorted(seen_lags, reverse=True), seen_lags  # progress only moves forward
    assert final["members"] == [] and final["state"] == "Empty"
    assert [(r["current_offset"], r["log_end_offset"]) for r in final["partitions"]] == [
        (RECORDS_PER_PARTITION, RECORDS_PER_PARTITION)] * 2
