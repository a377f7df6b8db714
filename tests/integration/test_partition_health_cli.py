"""Partition health where operators read it, against real processes with a broker down.

One 3-broker cluster for the module, broker 3 killed (SIGKILL) after three topics are made:
``strict`` (RF 3, min.insync.replicas=3: every partition under min ISR once broker 3 is gone),
``relaxed`` (RF 3, the default min ISR 1: under-replicated only) and ``single`` (RF 1 on broker 3:
offline). Checks ``ads topics describe --under-min-isr-partitions`` (the effective min ISR, not a
default of 1), ``--json``'s topic config, the note on an under-min-ISR partition (the HW stops:
a departure from Kafka) and ``ads cluster status``'s partition counts and controller.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ads_spark.client import Admin
from ads_spark.cluster import LocalCluster
from tests.fixtures.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

DOWN = 3


def ads(*argv: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ads_spark.cli.main", *argv], capture_output=True, text=True,
                          timeout=timeout_s)


@pytest.fixture(scope="module")
def degraded(tmp_path_factory):
    """(cluster, bootstrap of the live brokers): the three topics made, then broker 3 killed and out of every ISR."""
    cluster = LocalCluster(tmp_path_factory.mktemp("ads-health"))
    try:
        cluster.up(brokers=3)
        admin = Admin({"bootstrap.servers": cluster.bootstrap_servers})
        admin.create_topic("strict", 3, 3, config={"min.insync.replicas": "3"})
        admin.create_topic("relaxed", 2, 3)
        admin.create_topic("single", replica_assignment=[[DOWN]])
        admin.close()
        cluster.kill_broker(DOWN)
        bootstrap = ",".join(f"{cluster.broker_address(b['id'])}:{b['port']}" for b in cluster.state["brokers"]
                             if b["id"] != DOWN)
        admin = Admin({"bootstrap.servers": bootstrap})

        def settled() -> bool:
            partitions = [p for d in admin.describe_topics(["strict", "relaxed", "single"]) for p in d.partitions]
            return all((p.leader < 0) if p.topic == "single" else (p.leader >= 0 and DOWN not in p.isr)
                       for p in partitions)

        wait_until(settled, 90, what=f"broker {DOWN} out of every ISR and 'single' offline")
        admin.close()
        yield cluster, bootstrap
    finally:
        cluster.down()


def test_under_min_isr_partitions_uses_the_topics_min_isr(degraded):
    _, bootstrap = degraded
    listed = ads("topics", "describe", "--under-min-isr-partitions", "--bootstrap-server", bootstrap)
    assert listed.returncode == 0, listed.stderr
    rows = [dict(field.split(": ", 1) for field in line.split("\t")) for line in listed.stdout.splitlines()]
    assert sorted((r["Topic"], r["Partition"]) for r in rows) == [
        ("single", "0"), ("strict", "0"), ("strict", "1"), ("strict", "2")]


def test_describe_json_carries_topic_configs(degraded):
    _, bootstrap = degraded
    described = ads("topics", "describe", "--json", "--bootstrap-server", bootstrap)
    assert described.returncode == 0, described.stderr
    topics = {t["topic"]: t for t in json.loads(described.stdout)["topics"]}
    assert topics["strict"]["config"] == {"min.insync.replicas": "3"}
    assert topics["relaxed"]["config"] == {}
    assert (topics["strict"]["min_insync_replicas"], topics["relaxed"]["min_insync_replicas"]) == (3, 1)


def test_an_under_min_isr_partition_says_its_high_watermark_stops(degraded):
    _, bootstrap = degraded
    text = ads("topics", "describe", "--bootstrap-server", bootstrap).stdout.splitlines()
    notes = {(row["Topic"], row["Partition"]): row.get("Note")
             for row in (dict(field.split(": ", 1) for field in line.split("\t")) for line in text)}
    for number in range(3):
        assert "min.insync.replicas=3" in notes[("strict", str(number))]
        assert "acknowledged but not readable" in notes[("strict", str(number))]
    assert notes[("relaxed", "0")] is None and notes[("single", "0")] is None  # not below min ISR; no leader
    as_json = json.loads(ads("topics", "describe", "--topic", "strict", "--json", "--bootstrap-server",
                             bootstrap).stdout)
    assert all("high watermark stops" in p["note"] for p in as_json["topics"][0]["partitions"])


def test_cluster_status_counts_partition_health_and_names_the_controller(degraded):
    cluster, _ = degraded
    status = ads("cluster", "status", "--dir", str(cluster.dir), "--json")
    assert status.returncode == 0, status.stderr
    answer = json.loads(status.stdout)
    assert answer["partitions"] == {"total": 6, "under_replicated": 5, "under_min_isr": 4, "offline": 1}
    assert answer["controller_id"] in (1, 2)
    assert [b["id"] for b in answer["brokers"] if b["controller"]] == [answer["controller_id"]]
    text = ads("cluster", "status", "--dir", str(cluster.dir)).stdout
    assert f"Controller: {answer['controller_id']}" in text
    assert "Partitions: 6 total, 5 under-replicated, 4 under min ISR, 1 offline" in text
