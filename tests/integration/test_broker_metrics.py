"""Every metric INTERFACES.md names, read from the brokers' Prometheus endpoints in known states (issue #22 item 8).

One 3-broker cluster walks through four states of one RF=3 partition (min.insync.replicas=2) led by
the active controller, so that stopping the two followers moves no controller:

1. healthy: log end offset and log size equal on every replica (the size equal to the segment files on
   disk), nothing under-replicated, one active controller, the election histogram filled, a fetch out of
   range counted as a failed fetch;
2. one follower killed after the partition's state znode was rewritten behind the leader's back: the
   leader's ISR write is refused (a failed ISR update), then the ISR shrinks: the partition is
   under-replicated (in total and in its per-partition gauge), not under min ISR;
3. the other follower killed: under min ISR; acks=all produces fail (counted as failed produces);
4. both back: the ISR expands, nothing under-replicated, every replica at the same log end offset;
5. the leader (the controller) killed: another broker becomes controller and elects a leader: the
   election counted and timed in its histogram.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import pytest
from kazoo.client import KazooClient
from prometheus_client.parser import text_string_to_metric_families

from ads_spark.client import Admin, Consumer, Producer, TopicPartition
from ads_spark.errors import AdsError
from tests.fixtures.cluster import leader_of
from tests.fixtures.waiting import wait_until

pytestmark = pytest.mark.integration

RECORDS = 300
WAIT_S = 40


def metrics_ports(cluster) -> dict[int, int]:
    """Broker id -> metrics port, as ``ads cluster status`` reports them (a restart picks a new port)."""
    status = subprocess.run([sys.executable, "-m", "ads_spark.cli.main", "cluster", "status", "--dir",
                             str(cluster.dir), "--json"], capture_output=True, text=True, timeout=60)
    return {b["id"]: b["metrics_port"] for b in json.loads(status.stdout)["brokers"] if b.get("metrics_port")}


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) -> value for every sample a broker's endpoint serves."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


class Brokers:
    """Scrapes of the live brokers, by id."""

    def __init__(self, cluster, topic: str):
        self.cluster, self.labels = cluster, (("partition", "0"), ("topic", topic))
        self.ports = metrics_ports(cluster)

    def refresh_ports(self) -> None:
        self.ports = metrics_ports(self.cluster)

    def value(self, broker: int, name: str, per_partition: bool = False, labels: tuple = ()) -> float | None:
        """The sample's value (0 when absent); None while the broker's endpoint does not answer (a broker
        just restarted may still be listed at the port of its previous life: the ports are read again)."""
        key = (name, self.labels if per_partition else labels)
        try:
            return scrape(self.ports[broker]).get(key, 0.0)
        except (OSError, KeyError):
            self.refresh_ports()
            return None

    def everywhere(self, brokers, name: str, per_partition: bool = False) -> list[float]:
        return [self.value(b, name, per_partition) for b in brokers]


def segment_bytes(cluster, broker: int, topic: str) -> int:
    return sum(path.stat().st_size for path in (cluster.dir / f"broker-{broker}").rglob(f"{topic}-0/*.arrows"))


def test_every_named_metric_in_known_states(fresh_cluster, topic_name):
    cluster = fresh_cluster(3, overrides=["replica.lag.time.max.ms=1500"])
    admin = Admin({"bootstrap.servers": cluster.bootstrap_servers, "request.timeout.ms": 5000})
    try:
        controller = wait_until(lambda: (lambda c: c if c is not None and c >= 0 else None)(
            admin.cluster().get("controller_id")), what="a controller")
        first, second = [b for b in (1, 2, 3) if b != controller]
        admin.create_topic(topic_name, config={"min.insync.replicas": "2"},
                           replica_assignment=[[controller, first, second]])
        wait_until(lambda: len(leader_of(admin, topic_name)[1]) == 3, what="a full ISR")
        brokers = Brokers(cluster, topic_name)
        _healthy(cluster, brokers, admin, topic_name, controller)
        _one_follower_down(cluster, brokers, topic_name, controller, first)
        _under_min_isr(cluster, brokers, topic_name, controller, second)
        _both_back(cluster, brokers, admin, topic_name, controller, (first, second))
        _leader_and_controller_killed(cluster, brokers, admin, topic_name, controller)
    finally:
        admin.close()


def _healthy(cluster, brokers: Brokers, admin, topic: str, leader: int) -> None:
    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"}) as producer:
        acked = [producer.produce(topic, value=b"m%d" % i, partition=0) for i in range(RECORDS)]
    assert all(f.exception() is None for f in acked)
    everyone = (1, 2, 3)
    wait_until(lambda: brokers.everywhere(everyone, "ads_log_end_offset", True) == [RECORDS] * 3, timeout_s=WAIT_S,
               what="log end offset 300 on every replica")
    sizes = brokers.everywhere(everyone, "ads_log_size_bytes", True)
    assert sizes == [segment_bytes(cluster, b, topic) for b in everyone] and min(sizes) > 0
    for name in ("ads_under_replicated_partitions", "ads_under_min_isr_partition_count",
                 "ads_offline_partitions_count", "ads_unclean_leader_elections_total",
                 "ads_isr_shrinks_total"):
        assert brokers.everywhere(everyone, name) == [0, 0, 0], name
    assert brokers.everywhere(everyone, "ads_partition_under_replicated", True) == [0, 0, 0]
    assert [brokers.value(b, "ads_active_controller_count") for b in everyone].count(1) == 1
    assert brokers.value(leader, "ads_active_controller_count") == 1
    failed_fetches = brokers.value(leader, "ads_failed_fetch_requests_total")
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "request.timeout.ms": 5000,
                         "local.reads": "false"})
    try:
        with pytest.raises(AdsError):
            consumer.fetch_chunk(TopicPartition(topic, 0), RECORDS + 1000)
    finally:
        consumer.close()
    assert brokers.value(leader, "ads_failed_fetch_requests_total") >= failed_fetches + 1


def _rewrite_partition_state(cluster, topic: str) -> None:
    """Set the state znode to the value it holds: its version moves, so the leader's next ISR write is stale."""
    zk = KazooClient(hosts=cluster.zookeeper_connect, timeout=10)
    zk.start(timeout=10)
    try:
        path = f"/ads/brokers/topics/{topic}/partitions/0/state"
        data, _stat = zk.get(path)
        zk.set(path, data)
    finally:
        zk.stop()
        zk.close()


def _one_follower_down(cluster, brokers: Brokers, topic: str, leader: int, follower: int) -> None:
    failed_before = brokers.value(leader, "ads_failed_isr_updates_total")
    _rewrite_partition_state(cluster, topic)
    cluster.kill_broker(follower)
    wait_until(lambda: brokers.value(leader, "ads_isr_shrinks_total") >= 1, timeout_s=WAIT_S, what="an ISR shrink")
    assert brokers.value(leader, "ads_failed_isr_updates_total") >= failed_before + 1
    assert brokers.value(leader, "ads_under_replicated_partitions") == 1
    assert brokers.value(leader, "ads_partition_under_replicated", True) == 1
    assert brokers.value(leader, "ads_under_min_isr_partition_count") == 0


def _under_min_isr(cluster, brokers: Brokers, topic: str, leader: int, follower: int) -> None:
    cluster.kill_broker(follower)
    wait_until(lambda: brokers.value(leader, "ads_under_min_isr_partition_count") == 1, timeout_s=WAIT_S,
               what="the partition under min ISR")
    assert brokers.value(leader, "ads_isr_shrinks_total") >= 2
    assert brokers.value(leader, "ads_partition_under_replicated", True) == 1
    failed_before = brokers.value(leader, "ads_failed_produce_requests_total")
    config = {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "request.timeout.ms": 1000,
              "delivery.timeout.ms": 2000, "linger.ms": 0}
    with Producer(config) as producer:
        refused = producer.produce(topic, value=b"refused", partition=0)
        assert isinstance(refused.exception(30), AdsError)
    assert brokers.value(leader, "ads_failed_produce_requests_total") >= failed_before + 1
    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "1"}) as producer:
        producer.produce(topic, value=b"acks-1", partition=0).result(30)


def _both_back(cluster, brokers: Brokers, admin, topic: str, leader: int, followers: tuple[int, int]) -> None:
    for follower in followers:
        cluster.start_broker(follower)
    brokers.refresh_ports()
    wait_until(lambda: len(leader_of(admin, topic)[1]) == 3, timeout_s=WAIT_S, what="the ISR whole again")
    assert brokers.value(leader, "ads_isr_expands_total") >= 1
    assert brokers.value(leader, "ads_under_replicated_partitions") == 0
    assert brokers.value(leader, "ads_under_min_isr_partition_count") == 0
    assert brokers.value(leader, "ads_partition_under_replicated", True) == 0
    end = brokers.value(leader, "ads_log_end_offset", True)
    assert end >= RECORDS + 1  # the acks=1 record, and maybe the refused one (acks=all refusals may be appended)
    wait_until(lambda: brokers.everywhere((1, 2, 3), "ads_log_end_offset", True) == [end] * 3, timeout_s=WAIT_S,
               what="the same log end offset on every replica")


def _leader_and_controller_killed(cluster, brokers: Brokers, admin, topic: str, leader: int) -> None:
    cluster.kill_broker(leader)
    live = [b for b in (1, 2, 3) if b != leader]
    new_leader = wait_until(lambda: (lambda found: found if found in live else None)(leader_of(admin, topic)[0]),
                            timeout_s=WAIT_S, what="a new leader")
    assert new_leader in live
    controller = wait_until(lambda: next((b for b in live if brokers.value(b, "ads_active_controller_count") == 1),
                                         None), timeout_s=WAIT_S, what="a new active controller")
    assert brokers.value(controller, "ads_leader_elections_total") >= 1
    assert brokers.value(controller, "ads_unclean_leader_elections_total") == 0
    # The histogram: every election in a bucket, +Inf holding them all, a positive time in the sum.
    count = brokers.value(controller, "ads_leader_election_seconds_count")
    assert count >= 1 and brokers.value(controller, "ads_leader_election_seconds_sum") > 0
    assert brokers.value(controller, "ads_leader_election_seconds_bucket", labels=(("le", "+Inf"),)) == count
    assert brokers.value(controller, "ads_offline_partitions_count") == 0
