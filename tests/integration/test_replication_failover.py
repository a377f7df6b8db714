"""Replication with real processes: leader failover under acks=all, min ISR, re-sync and verification.

Three brokers, RF=3, min.insync.replicas=2, a producer sending unique values
with acks=all throughout. SIGKILL the leader: a new leader comes from the ISR
and every acknowledged value stays readable. SIGKILL a second broker: the ISR
falls below the minimum, acks=all writes fail with NOT_ENOUGH_REPLICAS while
committed records stay readable. Restart both: they re-sync, the ISR is whole
again and ``ads verify-replicas`` finds the replicas identical below the HW.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from ads_spark.broker.zk.client import ZkClient
from ads_spark.client import Admin, Producer
from ads_spark.errors import AdsError, NotEnoughReplicasAfterAppendError, NotEnoughReplicasError
from tests.fixtures.cluster import leader_of, read_all, scrape
from tests.fixtures.waiting import wait_until

pytestmark = pytest.mark.integration


class AckedWriter:
    """Sends unique values with acks=all until stopped; remembers which were acknowledged, and when."""

    def __init__(self, bootstrap: str, topic: str):
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2,
                                  "delivery.timeout.ms": 60_000, "request.timeout.ms": 5_000})
        self.topic = topic
        self.acked: dict[bytes, int] = {}
        # (produced at, acknowledged at), monotonic seconds: failover is timed by writes produced after the
        # kill, since answers the old leader sent just before it died still arrive after it.
        self.ack_times: list[tuple[float, float]] = []
        self.errors: list[AdsError] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._next = 0

    def start(self) -> "AckedWriter":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            value = f"v-{self._next}".encode()
            self._next += 1
            produced_at = time.monotonic()
            future = self.producer.produce(self.topic, value=value, partition=0)
            future.add_done_callback(lambda f, v=value, at=produced_at: self._done(f, v, at))
            if self._next % 50 == 0:
                self.producer.flush(70)

    def _done(self, future, value: bytes, produced_at: float) -> None:
        if future.exception() is None:
            self.acked[value] = future.result().offset
            self.ack_times.append((produced_at, time.monotonic()))
        else:
            self.errors.append(future.exception())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(90)
        self.producer.flush(70)
        self.producer.close()


def replicated_topic_under_load(fresh_cluster, topic: str):
    """3 brokers, one partition with RF=3 and min ISR 2, and an acks=all writer with 300 writes acknowledged."""
    cluster = fresh_cluster(3)
    admin = Admin({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topic(topic, partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
    wait_until(lambda: len(leader_of(admin, topic)[1]) == 3, what="a full ISR")
    writer = AckedWriter(cluster.bootstrap_servers, topic).start()
    wait_until(lambda: len(writer.acked) >= 300, what="300 acknowledged writes")
    return cluster, admin, writer


def test_failover_min_isr_resync_and_verify(fresh_cluster, topic_name, record_property):
    cluster, admin, writer = replicated_topic_under_load(fresh_cluster, topic_name)
    try:
        old_leader, _ = leader_of(admin, topic_name)
        killed_at = time.monotonic()
        cluster.kill_broker(old_leader)
        new_leader = wait_until(lambda: (lambda l: l if l not in (old_leader, -1) else None)(
            leader_of(admin, topic_name)[0]), what="a new leader")
        first_ack_after = wait_until(
            lambda: next((acked for produced, acked in writer.ack_times if produced > killed_at), None),
            what="the first acks=all write produced after the kill")
        failover_s = first_ack_after - killed_at
        record_property("failover_s", round(failover_s, 2))
        print(f"failover: leader {old_leader} killed, {new_leader} leads, first acks=all write after "
              f"{failover_s:.2f}s")
        acked_before = len(writer.acked)
        wait_until(lambda: len(writer.acked) >= acked_before + 300, what="300 more acknowledged writes")
    finally:
        writer.stop()

    # A second failure: the ISR falls below min.insync.replicas; writes are refused, reads go on.
    follower = next(b for b in leader_of(admin, topic_name)[1] if b != new_leader)
    cluster.kill_broker(follower)
    wait_until(lambda: leader_of(admin, topic_name)[1] == [new_leader], what="the ISR to shrink to the leader")
    refused = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                        "delivery.timeout.ms": 3_000, "request.timeout.ms": 2_000})
    future = refused.produce(topic_name, value=b"refused", partition=0)
    refused.flush(10)
    assert isinstance(future.exception(), (NotEnoughReplicasError, NotEnoughReplicasAfterAppendError))
    values = read_all(cluster.bootstrap_servers, topic_name)
    lost = [v for v in writer.acked if v not in set(values)]
    assert not lost, f"{len(lost)} acknowledged values lost, e.g. {lost[:5]}"
    assert len(values) == len(set(values)), "a value was stored twice"
    assert b"refused" not in values

    # Both come back, re-sync, and rejoin the ISR; every replica agrees below the HW.
    cluster.start_broker(old_leader)
    cluster.start_broker(follower)
    wait_until(lambda: sorted(leader_of(admin, topic_name)[1]) == [1, 2, 3], what="the ISR to grow back to 3")
    # The write that re-admitted them names the incarnations the leader heard from, which the controller
    # checks before it elects one (a member that restarted since may lack committed records).
    zk = ZkClient(cluster.zookeeper_connect).connect()
    try:
        recorded = dict(zk.read_partition_state(topic_name, 0).state.isr_broker_epochs)
        registered = {b: int(info["broker_epoch"]) for b, info in zk.live_brokers().items()}
    finally:
        zk.close()
    assert recorded == {b: registered[b] for b in (old_leader, follower)}
    # The same idempotent producer writes again: the refused batch's sequence numbers are not a hole
    # the leader waits for (the producer bumped its epoch for the partition and renumbered).
    after = refused.produce(topic_name, value=b"after-refusal", partition=0)
    refused.flush(20)
    assert after.exception(timeout=1) is None, after.exception()
    refused.close()
    verify = subprocess.run([sys.executable, "-m", "ads_spark.cli.main", "verify-replicas", "--bootstrap-server",
                             cluster.bootstrap_servers, "--topic", topic_name],
                            capture_output=True, text=True, timeout=60)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "identical" in verify.stdout
    admin.close()


def test_controlled_shutdown_moves_leadership_with_no_failed_write(fresh_cluster, topic_name, record_property):
    cluster, admin, writer = replicated_topic_under_load(fresh_cluster, topic_name)
    try:
        leader, _ = leader_of(admin, topic_name)
        started = time.monotonic()
        cluster.stop_broker(leader)  # SIGTERM: controlled shutdown, then exit
        stop_s = time.monotonic() - started
        new_leader, isr = leader_of(admin, topic_name)
        assert new_leader not in (leader, -1) and leader not in isr
        acked_before = len(writer.acked)
        wait_until(lambda: len(writer.acked) >= acked_before + 300, what="writes to go on after the shutdown")
    finally:
        writer.stop()
    record_property("controlled_shutdown_s", round(stop_s, 2))
    print(f"controlled shutdown of leader {leader} took {stop_s:.2f}s; {new_leader} leads")
    assert writer.errors == [], f"acks=all writes failed during a controlled shutdown: {writer.errors[:3]}"
    values = set(read_all(cluster.bootstrap_servers, topic_name))
    assert all(v in values for v in writer.acked)
    admin.close()


def test_offline_until_unclean_election_is_enabled_and_the_loss_is_counted(fresh_cluster, topic_name):
    cluster = fresh_cluster(2, overrides=["replica.lag.time.max.ms=1500"])
    admin = Admin({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topic(topic_name, partitions=1, replication_factor=2, config={"min.insync.replicas": "1"})
    wait_until(lambda: len(leader_of(admin, topic_name)[1]) == 2, what="a full ISR")
    leader, _ = leader_of(admin, topic_name)
    follower = 3 - leader
    config = {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"}
    with Producer(config) as producer:
        committed = [producer.produce(topic_name, value=b"c%d" % i, partition=0) for i in range(100)]
    assert all(f.exception() is None for f in committed)
    cluster.kill_broker(follower)
    wait_until(lambda: leader_of(admin, topic_name)[1] == [leader], what="the ISR to shrink to the leader")
    with Producer(config) as producer:  # acknowledged by the only ISR member (min ISR 1)
        only_on_leader = [producer.produce(topic_name, value=b"l%d" % i, partition=0) for i in range(50)]
    assert all(f.exception() is None for f in only_on_leader)
    cluster.kill_broker(leader)
    cluster.start_broker(follower)
    time.sleep(3)  # the controller has seen both changes; the stale follower must not lead
    assert leader_of(admin, topic_name)[0] == -1, "an out-of-sync replica was elected with unclean election off"
    describe = subprocess.run([sys.executable, "-m", "ads_spark.cli.main", "topics", "describe", "--bootstrap-server",
                               cluster.bootstrap_servers, "--topic", topic_name, "--unavailable-partitions"],
                              capture_output=True, text=True, timeout=60)
    assert "Leader: none" in describe.stdout, describe.stdout + describe.stderr
    assert scrape(cluster, follower, "ads_offline_partitions_count") == 1  # the only live broker is the controller

    admin.alter_configs(topic_name, {"unclean.leader.election.enable": "true"})
    assert wait_until(lambda: leader_of(admin, topic_name)[0] == follower, what="the unclean election")
    values = read_all(cluster.bootstrap_servers, topic_name)
    assert values == [b"c%d" % i for i in range(100)]  # the 50 records only the old leader had are gone
    controller = wait_until(lambda: admin.cluster().get("controller_id"), what="a controller")
    assert scrape(cluster, controller, "ads_unclean_leader_elections_total") >= 1
    admin.close()


def drop_unflushed_tail(cluster, broker_id: int, topic: str, partition: int) -> tuple[int, int]:
    """After a SIGKILL: lose what the page cache held (everything past the recovery point), as a power cut would.

    Returns (log end before, log end after).
    """
    from ads_spark.broker.log import LogConfig, PartitionLog
    from ads_spark.broker.log.checkpoints import OffsetCheckpointFile

    data = cluster.dir / f"broker-{broker_id}" / "data"
    recovery_point = OffsetCheckpointFile(data / "recovery-point-offset-checkpoint").read().get((topic, partition), 0)
    log = PartitionLog.open(data / f"{topic}-{partition}", LogConfig(), recovery_point=recovery_point,
                            clean_shutdown=False, now_ms=0)
    before = log.log_end_offset
    log.truncate_to(min(recovery_point, before))
    after = log.log_end_offset
    log.close()
    return before, after


def test_last_replica_standing_loses_nothing_kip966(fresh_cluster, topic_name):
    """ISR {L, A, B}, min ISR 2. B dies; A stalls and leaves the ISR while it is below the minimum, so A
    becomes an eligible leader (ELR) and the HW freezes; then L, the last ISR member, crashes and loses
    its unflushed tail. Kafka before KIP-966 could only wait for L and elect it, losing committed records;
    here A leads, and every acknowledged record is still there."""
    import os
    import signal

    cluster = fresh_cluster(3, overrides=["replica.lag.time.max.ms=1500"])
    # A short request timeout: the admin must move on quickly from the broker the test pauses.
    admin = Admin({"bootstrap.servers": cluster.bootstrap_servers, "request.timeout.ms": 2000})
    admin.create_topic(topic_name, partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
    wait_until(lambda: len(leader_of(admin, topic_name)[1]) == 3, what="a full ISR")
    config = {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"}
    with Producer(config) as producer:
        acked = [producer.produce(topic_name, value=b"c%d" % i, partition=0) for i in range(500)]
    assert all(f.exception() is None for f in acked)
    leader, isr = leader_of(admin, topic_name)
    stalled, dead = [b for b in isr if b != leader]
    cluster.kill_broker(dead)
    wait_until(lambda: sorted(leader_of(admin, topic_name)[1]) == sorted([leader, stalled]), what="B out of the ISR")
    stalled_pid = cluster.broker_pid(stalled)
    os.kill(stalled_pid, signal.SIGSTOP)  # a long GC pause: it stops fetching, its session lives on for a while
    try:
        described = wait_until(lambda: (lambda p: p if list(p.isr) == [leader] else None)(
            admin.describe_topics([topic_name])[0].partitions[0]), timeout_s=20, what="A out of the ISR")
        assert list(described.elr) == [stalled], f"A should be an eligible leader, ELR is {described.elr}"
        cluster.kill_broker(leader)
        before, after = drop_unflushed_tail(cluster, leader, topic_name, 0)
        assert after < before, "the test needs the crashed leader to lose committed records"
    finally:
        os.kill(stalled_pid, signal.SIGCONT)
    assert wait_until(lambda: leader_of(admin, topic_name)[0] == stalled, what="the ELR member to lead")
    cluster.start_broker(leader)  # back after an unclean shutdown, with less data: must not lead, must catch up
    values = read_all(cluster.bootstrap_servers, topic_name)
    assert [v for v in (b"c%d" % i for i in range(500)) if v not in set(values)] == []
    wait_until(lambda: leader in leader_of(admin, topic_name)[1], what="the crashed leader to re-sync and rejoin")
    assert leader_of(admin, topic_name)[0] == stalled
    admin.close()


def test_isr_members_back_from_expired_sessions_lead_again(fresh_cluster, topic_name):
    """Every ISR member pauses past its ZooKeeper session (a network partition would do the same): the
    partition goes offline, its members kept as eligible leaders. When the same processes return, having
    lost nothing, one of them leads again with every acknowledged record. A broker that first started on
    an empty log directory registers as an unclean start; each registration after an expired session was
    taken for a new unclean start, which dropped it from the ELR for good and left the partition offline
    (found by ``ads chaos run --scenario partition-random --seed 29``)."""
    import os
    import signal

    cluster = fresh_cluster(3)  # zookeeper.session.timeout.ms=6000
    admin = Admin({"bootstrap.servers": cluster.bootstrap_servers, "request.timeout.ms": 2000})
    controller = wait_until(lambda: (lambda c: c if c is not None and c >= 0 else None)(
        admin.cluster().get("controller_id")), what="a controller")
    members = [b for b in (1, 2, 3) if b != controller]
    admin.create_topic(topic_name, config={"min.insync.replicas": "2"}, replica_assignment=[members])
    wait_until(lambda: len(leader_of(admin, topic_name)[1]) == 2, what="a full ISR")
    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"}) as producer:
        acked = [producer.produce(topic_name, value=b"s%d" % i, partition=0) for i in range(200)]
    assert all(f.exception() is None for f in acked)
    pids = [cluster.broker_pid(b) for b in members]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        offline = wait_until(lambda: (lambda p: p if p.leader < 0 else None)(
            admin.describe_topics([topic_name])[0].partitions[0]), timeout_s=30, what="the partition offline")
        assert sorted(offline.elr) == members, f"both members should stay eligible, ELR is {offline.elr}"
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    assert wait_until(lambda: leader_of(admin, topic_name)[0] in members, timeout_s=40,
                      what="a member back from an expired session to lead")
    values = set(read_all(cluster.bootstrap_servers, topic_name))
    assert [v for v in (b"s%d" % i for i in range(200)) if v not in values] == []
    admin.close()


def test_offline_partition_comes_back_with_its_last_isr_member(fresh_cluster, topic_name):
    """Unclean election off: when the last ISR member stops the partition is offline (not led by the stale
    replica), and it is led again, with every acknowledged record, when that member returns from a clean
    shutdown. (One that returns from a crash may have lost its unflushed tail: KIP-966 keeps it from leading,
    and with no other ISR/ELR member only an operator's unclean election brings the partition back.)"""
    cluster = fresh_cluster(2, overrides=["replica.lag.time.max.ms=1500"])
    admin = Admin({"bootstrap.servers": cluster.bootstrap_servers, "request.timeout.ms": 3000})
    admin.create_topic(topic_name, partitions=1, replication_factor=2, config={"min.insync.replicas": "1"})
    wait_until(lambda: len(leader_of(admin, topic_name)[1]) == 2, what="a full ISR")
    leader, _ = leader_of(admin, topic_name)
    follower = 3 - leader
    cluster.kill_broker(follower)
    wait_until(lambda: leader_of(admin, topic_name)[1] == [leader], what="the ISR to shrink to the leader")
    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"}) as producer:
        acked = [producer.produce(topic_name, value=b"a%d" % i, partition=0) for i in range(200)]
    assert all(f.exception() is None for f in acked)
    cluster.stop_broker(leader)  # SIGTERM: nobody to hand leadership to, so it stops holding it
    cluster.start_broker(follower)
    time.sleep(3)
    assert leader_of(admin, topic_name)[0] == -1  # the stale replica is alive but must not lead
    cluster.start_broker(leader)
    assert wait_until(lambda: leader_of(admin, topic_name)[0] == leader, what="the ISR member to lead again")
    assert read_all(cluster.bootstrap_servers, topic_name) == [b"a%d" % i for i in range(200)]
    wait_until(lambda: sorted(leader_of(admin, topic_name)[1]) == [1, 2], what="the stale replica to catch up")
    admin.close()
