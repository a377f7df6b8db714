"""Controller operations with real processes: preferred leader election (on demand and automatic).

A broker that stops hands its leadership away (controlled shutdown); when it
comes back and catches up, leadership should return to it: on demand with
``ads leader-election --election-type preferred``, or by itself when
``auto.leader.rebalance.enable`` finds the broker over the imbalance limit.
"""

from __future__ import annotations

import subprocess
import time
import sys

import pytest

from ads_spark.client import Admin
from tests.fixtures.waiting import wait_until

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


def test_rack_aware_placement_and_same_rack_follower_reads(fresh_cluster, topic_name):
    """Six brokers on three racks: every partition spans three racks; a rack-b consumer reads from rack b."""
    import pyarrow.flight as flight

    from ads_spark.client import Consumer, Producer, TopicPartition
    from ads_spark.protocol import wire
    from ads_spark.errors import ErrorCode

    racks = ["a", "b", "c"]
    cluster = fresh_cluster(6, racks=racks)
    admin = Admin({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topic(topic_name, partitions=6, replication_factor=3, config={"min.insync.replicas": "2"})
    rack_of = {b["id"]: b["rack"] for b in cluster.state["brokers"]}
    placement = leaders(admin, topic_name)
    assert all(len({rack_of[r] for r in replicas}) == 3 for _, replicas, _ in placement.values())
    preferred = sorted(replicas[0] for _, replicas, _ in placement.values())
    assert preferred == [1, 2, 3, 4, 5, 6]  # leadership spread evenly
    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"}) as producer:
        futures = [producer.produce(topic_name, value=b"r%d" % i, partition=0) for i in range(50)]
    assert all(f.exception() is None for f in futures)
    leader, replicas, _ = placement[0]
    wait_until(lambda: len(leaders(admin, topic_name)[0][2]) == 3, what="a full ISR")
    follower = next(r for r in replicas if r != leader)
    port = next(b["port"] for b in cluster.state["brokers"] if b["id"] == follower)

    def fetch_from_follower(client_rack):
        request = {"type": wire.FETCH, "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                   "client_rack": client_rack,
                   "partitions": [{"topic": topic_name, "partition": 0, "fetch_offset": 0,
                                   "partition_max_bytes": 1 << 20}]}
        client = flight.connect(f"grpc+tcp://127.0.0.1:{port}")
        try:
            chunks = list(client.do_get(flight.Ticket(wire.dumps(request))))
        finally:
            client.close()
        infos, _ = wire.split_fetch_answer((wire.loads(c.app_metadata, "fetch"), c.data) for c in chunks)
        rows = sum(c.data.num_rows for c in chunks)
        return infos[(topic_name, 0)], rows

    # A consumer on the follower's rack is served by it (KIP-392), up to the follower's HW ...
    meta, rows = wait_until(lambda: (lambda r: r if r[1] == 50 else None)(fetch_from_follower(rack_of[follower])),
                            what="the follower to serve its rack")
    assert meta["error_code"] == 0 and meta["high_watermark"] == 50
    # ... while anyone else is sent to the leader.
    meta, rows = fetch_from_follower(None)
    assert meta["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER and rows == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "client.rack": rack_of[follower]})
    try:
        table = consumer.fetch_arrow(TopicPartition(topic_name, 0), 0, 50)
        assert table.column("value").to_pylist() == [b"r%d" % i for i in range(50)]
    finally:
        consumer.close()
    admin.close()


def test_reassignment_raises_rf_then_moves_a_replica_with_no_loss(fresh_cluster, topic_name, tmp_path):
    """RF=1 -> RF=3 (new replicas catch up under a throttle before anything is dropped), then 1,2,3 -> 2,3,4."""
    import json

    from ads_spark.client import Producer

    cluster = fresh_cluster(4)
    admin = Admin({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topic(topic_name, partitions=1, replication_factor=1)
    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"}) as producer:
        futures = [producer.produce(topic_name, value=b"x" * 1000, partition=0) for _ in range(2000)]
    assert all(f.exception() is None for f in futures)
    first = leaders(admin, topic_name)[0][1][0]
    grown = [first] + [b for b in (1, 2, 3, 4) if b != first][:2]

    def reassign(replicas, *extra):
        plan = tmp_path / f"plan-{'-'.join(map(str, replicas))}.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": topic_name, "partition": 0, "replicas": replicas}]}))
        return ads(cluster, "reassign-partitions", "--reassignment-json-file", str(plan), *extra)

    executed = reassign(grown, "--execute", "--throttle", "1000000", "--timeout-s", "90")
    assert executed.returncode == 0, executed.stdout + executed.stderr
    assert "1/1 done" in executed.stdout
    leader, replicas, isr = leaders(admin, topic_name)[0]
    assert replicas == grown and sorted(isr) == sorted(grown) and leader == first
    moved = [b for b in (1, 2, 3, 4) if b != first][:3]  # drop the original replica, add the fourth broker
    executed = reassign(moved, "--execute", "--timeout-s", "90")
    assert executed.returncode == 0, executed.stdout + executed.stderr
    verified = reassign(moved, "--verify")
    assert verified.returncode == 0 and "is complete" in verified.stdout, verified.stdout + verified.stderr
    leader, replicas, isr = leaders(admin, topic_name)[0]
    assert replicas == moved and sorted(isr) == sorted(moved) and leader in moved
    check = ads(cluster, "verify-replicas", "--topic", topic_name)
    assert check.returncode == 0 and "2000 offsets" in check.stdout, check.stdout + check.stderr
    assert not (cluster.dir / f"broker-{first}" / "data" / f"{topic_name}-0").exists()  # removed replica deleted
    admin.close()


def test_observers_replicate_but_never_join_the_isr_nor_lead(fresh_cluster, topic_name):
    """Broker 4 observes every partition: its log grows with the leader's (under each leader), it stays out
    of the ISR, it answers the reads of consumers on its rack itself, and it is never elected."""
    from ads_spark.client import Consumer, Producer, TopicPartition
    from tests.fixtures.cluster import scrape

    cluster = fresh_cluster(4, racks=["a", "a", "a", "remote"])
    admin = Admin({"bootstrap.servers": cluster.bootstrap_servers})
    as_config = ads(cluster, "topics", "create", "--topic", topic_name, "--partitions", "1", "--replication-factor",
                    "2", "--config", "observers=4")
    assert as_config.returncode != 0 and "'observers' is not a topic config" in as_config.stderr, as_config.stderr
    created = ads(cluster, "topics", "create", "--topic", topic_name, "--partitions", "2", "--replication-factor",
                  "2", "--observers", "4", "--config", "min.insync.replicas=1")
    assert created.returncode == 0, created.stdout + created.stderr
    observer_leo = f'ads_log_end_offset{{partition="0",topic="{topic_name}"}}'  # labels as exposed: sorted
    served_by_observer = 'ads_requests_total{request="fetch_follower_read"}'

    def produce(first: int, count: int) -> None:
        with Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"}) as producer:
            futures = [producer.produce(topic_name, value=b"o%d" % i, partition=0) for i in range(first, first + count)]
        assert all(f.exception() is None for f in futures)

    produce(0, 100)
    wait_until(lambda: scrape(cluster, 4, observer_leo) == 100, what="the observer's log to reach the leader's")
    for _, replicas, isr in leaders(admin, topic_name).values():
        assert 4 not in replicas and 4 not in isr  # caught up, yet never added to the ISR
    described = ads(cluster, "topics", "describe", "--topic", topic_name)
    assert "Observers: 4" in described.stdout, described.stdout
    served_before = scrape(cluster, 4, served_by_observer)
    remote = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "client.rack": "remote"})
    try:
        values = wait_until(lambda: (lambda t: t if t.num_rows == 100 else None)(
            remote.fetch_arrow(TopicPartition(topic_name, 0), 0, 100)), what="the observer to serve its rack")
        assert values.column("value").to_pylist() == [b"o%d" % i for i in range(100)]
    finally:
        remote.close()
    assert scrape(cluster, 4, served_by_observer) > served_before  # answered by broker 4, not the leader
    leader, replicas, _ = leaders(admin, topic_name)[0]
    cluster.kill_broker(leader)
    survivor = next(r for r in replicas if r != leader)
    assert wait_until(lambda: leaders(admin, topic_name)[0][0] == survivor, what="failover to the other replica")
    produce(100, 50)
    wait_until(lambda: scrape(cluster, 4, observer_leo) == 150, what="the observer to follow the new leader")
    assert 4 not in leaders(admin, topic_name)[0][2]
    cluster.kill_broker(survivor)
    time.sleep(8)  # a session timeout and more: the observer, the only live copy, must not be elected
    assert leaders(admin, topic_name)[0][0] == -1
    admin.close()


def test_controller_failover_resumes_every_duty_and_metrics_follow(fresh_cluster, topic_name):
    """Kill the controller's broker: another broker takes over (higher epoch), elects leaders for what the
    dead one led, creates new topics, and the metrics endpoints report the under-replicated partitions."""
    from tests.fixtures.cluster import scrape

    cluster = fresh_cluster(3)
    admin = Admin({"bootstrap.servers": cluster.bootstrap_servers, "request.timeout.ms": 5000})
    admin.create_topic(topic_name, partitions=3, replication_factor=3, config={"min.insync.replicas": "2"})
    wait_until(lambda: all(len(isr) == 3 for _, _, isr in leaders(admin, topic_name).values()), what="full ISRs")
    old = wait_until(lambda: admin.cluster().get("controller_id"), what="a controller")
    assert scrape(cluster, old, "ads_active_controller_count") == 1
    cluster.kill_broker(old)
    new = wait_until(lambda: (lambda c: c if c not in (None, -1, old) else None)(admin.cluster().get("controller_id")),
                     what="a new controller")
    wait_until(lambda: all(leader not in (old, -1) for leader, _, _ in leaders(admin, topic_name).values()),
               what="every partition led by a live broker")
    second = topic_name + "-after"
    admin.create_topic(second, partitions=2, replication_factor=2)  # waits until every partition has a leader
    live = [b for b in (1, 2, 3) if b != old]
    assert scrape(cluster, new, "ads_active_controller_count") == 1
    assert sum(scrape(cluster, b, "ads_active_controller_count") for b in live) == 1
    assert scrape(cluster, new, "ads_offline_partitions_count") == 0
    assert scrape(cluster, new, "ads_leader_elections_total") >= 1  # at least the dead controller's leaderships
    assert scrape(cluster, new, "ads_leader_election_seconds_sum") > 0
    wait_until(lambda: sum(scrape(cluster, b, "ads_under_replicated_partitions") for b in live) == 3,
               what="3 under-replicated partitions reported by their leaders")
    under = ads(cluster, "topics", "describe", "--topic", topic_name, "--under-replicated-partitions")
    assert under.stdout.count("Partition:") == 3, under.stdout
    cluster.start_broker(old)
    wait_until(lambda: sum(scrape(cluster, b, "ads_under_replicated_partitions") for b in (1, 2, 3)) == 0,
               what="no under-replicated partition once the old controller is back")
    assert admin.cluster().get("controller_id") == new  # it did not take the role back
    admin.close()


def test_an_isr_write_naming_an_old_incarnation_is_undone_by_the_controller(fresh_cluster, topic_name):
    """A leader's ISR write can land after a member it names restarted (its write was in flight). The
    controller, told of the ISR change, writes that member out (it had done so only on broker changes);
    the leader then adds it back under the incarnation it hears from. Planted here by writing the znode as
    such a late write would, with its notification."""
    from dataclasses import replace

    from ads_spark.broker.zk.client import ZkClient
    from ads_spark.client import Producer

    cluster = fresh_cluster(3)
    admin = Admin({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topic(topic_name, 1, 3, config={"min.insync.replicas": "2"})
    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"}) as producer:
        producer.produce(topic_name, value=b"before", partition=0).result(30)
    wait_until(lambda: len(leaders(admin, topic_name)[0][2]) == 3, what="a full ISR")
    zk = ZkClient(cluster.zookeeper_connect).connect()
    try:
        registered = {b: int(info["broker_epoch"]) for b, info in zk.live_brokers().items()}
        current = zk.read_partition_state(topic_name, 0)
        followers = sorted(b for b in current.state.isr if b != current.state.leader)
        member = followers[0]  # recorded under an incarnation before the one registered now
        late = replace(current.state, isr_broker_epochs=tuple(
            (b, registered[b] - 1 if b == member else registered[b]) for b in followers))
        assert isinstance(zk.update_isr(topic_name, 0, late, current.zk_version), int)

        def member_recorded_rightly() -> bool:
            state = zk.read_partition_state(topic_name, 0).state
            return dict(state.isr_broker_epochs).get(member) == registered[member] and member in state.isr

        wait_until(member_recorded_rightly, what=f"broker {member}'s old incarnation written out and back")
    finally:
        zk.close()
    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"}) as producer:
        producer.produce(topic_name, value=b"after", partition=0).result(30)
    admin.close()
