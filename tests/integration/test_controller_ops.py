"""Controller operations with real processes: preferred leader election (on demand and automatic).

A broker that stops hands its leadership away (controlled shutdown); when it
comes back and catches up, leadership should return to it: on demand with
``ads leader-election --election-type preferred``, or by itself when
``auto.leader.rebalance.enable`` finds the broker over the imbalance limit.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from ads_spark.client import Admin
from tests.integration.test_replication_failover import wait_until

pytestmark = pytest.mark.integration


def leaders(admin: Admin, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    return {p.partition: (p.leader, list(p.replicas), list(p.isr)) for p in admin.describe_topics([topic])[0].partitions}


def balanced(admin: Admin, topic: str) -> bool:
    return all(leader == replicas[0] and len(isr) == len(replicas)
               for leader, replicas, isr in leaders(admin, topic).values())


def ads(cluster, *argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ads_spark.cli.main", *argv, "--bootstrap-server",
                           cluster.bootstrap_servers], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("automatic", [False, True], ids=["on-demand", "automatic"])
def test_preferred_leaders_come_back_after_a_restart(fresh_cluster, topic_name, automatic):
    overrides = (["leader.imbalance.check.interval.seconds=1"] if automatic
                 else ["auto.leader.rebalance.enable=false"])
    cluster = fresh_cluster(3, overrides=overrides)
    admin = Admin({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topic(topic_name, partitions=3, replication_factor=3, config={"min.insync.replicas": "2"})
    wait_until(lambda: balanced(admin, topic_name), what="preferred leaders at creation")
    cluster.stop_broker(1)
    assert all(leader != 1 for leader, _, _ in leaders(admin, topic_name).values())
    cluster.start_broker(1)
    wait_until(lambda: all(len(isr) == 3 for _, _, isr in leaders(admin, topic_name).values()),
               what="broker 1 back in every ISR")
    if not automatic:
        assert not balanced(admin, topic_name)  # nothing moves leadership back by itself here
        result = ads(cluster, "leader-election", "--election-type", "preferred", "--all-topic-partitions")
        assert result.returncode == 0, result.stdout + result.stderr
        assert "elected" in result.stdout
    wait_until(lambda: balanced(admin, topic_name), what="leadership back on the preferred replicas")
    again = ads(cluster, "leader-election", "--election-type", "preferred", "--topic", topic_name,
                "--partition", "0")
    assert again.returncode == 0 and "ELECTION_NOT_NEEDED" in again.stdout, again.stdout + again.stderr
    bad = ads(cluster, "leader-election", "--election-type", "preferred", "--topic", topic_name)
    assert bad.returncode != 0 and "--partition" in bad.stderr
    admin.close()


def test_failover_of_many_partitions_is_one_batched_pass(fresh_cluster, topic_name, record_property):
    """Kill a broker leading a third of 201 partitions: every partition is led again, in a few seconds."""
    import time

    cluster = fresh_cluster(3)
    admin = Admin({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topic(topic_name, partitions=201, replication_factor=2, config={"min.insync.replicas": "1"})
    wait_until(lambda: all(leader >= 0 and len(isr) == 2 for leader, _, isr in leaders(admin, topic_name).values()),
               timeout_s=120, what="201 partitions led with a full ISR")
    led_by_1 = [p for p, (leader, _, _) in leaders(admin, topic_name).items() if leader == 1]
    assert len(led_by_1) == 67
    killed = time.monotonic()
    cluster.kill_broker(1)
    wait_until(lambda: all(leader not in (1, -1) for leader, _, _ in leaders(admin, topic_name).values()),
               timeout_s=120, what="every partition led by a live broker")
    failover_s = time.monotonic() - killed
    record_property("failover_201_partitions_s", round(failover_s, 2))
    print(f"201 partitions: all led again {failover_s:.2f}s after the kill (session timeout 6 s)")
    assert failover_s < 30
    admin.close()
