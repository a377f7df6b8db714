"""Named failure scenarios of references 001 and 002 and KIP-966, scripted on the simulated cluster.

Each scenario drives the same Cluster as the random runs (no drops, short
fixed delays) and returns the checker, whose violations the tests inspect.
"""

from __future__ import annotations

import random

from ads_spark.replication.state import Role

from tests.sim.checker import Checker
from tests.sim.cluster import Cluster, SimConfig
from tests.sim.runner import SimProducer

STEP_MS = 2


def make(min_isr: int = 2, unclean: bool = False, brokers: int = 3, seed: int = 1) -> tuple[Cluster, SimProducer]:
    cfg = SimConfig(brokers=brokers, partitions=1, replication_factor=3, min_insync_replicas=min_isr,
                    unclean=unclean, drop_prob=0.0, delay_ms=(1, 2))
    cluster = Cluster(cfg, random.Random(seed), Checker())
    cluster.producer = SimProducer(cluster)
    run(cluster, 60)
    return cluster, cluster.producer


def run(cluster: Cluster, ms: int, produce: int = 0, acks: int = -1) -> None:
    """Advance ``ms``; meanwhile keep ``produce``-sized batches flowing (0: none)."""
    for _ in range(ms // STEP_MS):
        cluster.step(STEP_MS)
        if produce:
            cluster.producer.send(0, produce, acks)
        cluster.producer.tick()


def leader_id(cluster: Cluster) -> int:
    return cluster.zk.partitions[0].leader


def single_broker_failure() -> Cluster:
    """001 scenario 1: RF 3, min ISR 2, the leader crashes; another ISR member leads, writes continue."""
    c, _ = make()
    run(c, 200, produce=2)
    old = leader_id(c)
    c.crash(old)
    run(c, 400, produce=2)
    c.restart(old)
    run(c, 400, produce=2)
    return c


def two_broker_failures() -> Cluster:
    """001 scenario 2: two of three crash; the survivor leads but acks=all is refused until one returns."""
    c, _ = make()
    run(c, 200, produce=2)
    first = leader_id(c)
    others = [b for b in c.brokers if b != first]
    c.crash(first)
    c.crash(others[0])
    run(c, 400, produce=2)
    c.checker.acked_while_two_down = c.checker.acked_all
    run(c, 200, produce=2)
    c.checker.acked_while_two_down = c.checker.acked_all - c.checker.acked_while_two_down
    c.restart(others[0])
    run(c, 500, produce=2)
    return c


def leader_crash_with_unreplicated_data() -> Cluster:
    """001 scenario 3: the leader has a tail its followers lack (acks=1); it crashes; it is truncated on return."""
    c, _ = make(min_isr=1)
    run(c, 200, produce=2)
    old = leader_id(c)
    for o in c.brokers:
        if o != old:
            c.cut_one_way(old, o)  # followers' fetches get no answers: the tail stays on the leader
    run(c, 60, produce=3, acks=1)
    c.brokers[old].disks[0].flush()  # the unreplicated tail survives the crash on disk
    c.crash(old)
    c.heal()
    run(c, 400, produce=2)
    c.restart(old)
    run(c, 500, produce=2)
    return c


def jepsen_isolated_leader(min_isr: int, unclean: bool) -> Cluster:
    """002: the ISR shrinks to the leader, then the leader is cut off from ZooKeeper too and a new leader is elected."""
    c, _ = make(min_isr=min_isr, unclean=unclean)
    run(c, 200, produce=2)
    old = leader_id(c)
    c.isolate_from_brokers(old)  # followers cannot fetch; ZooKeeper still sees the leader
    run(c, 300, produce=2)  # the leader shrinks the ISR to itself and keeps acknowledging (min ISR 1)
    c.isolate_from_zk(old)
    c.isolate_from_clients(old)
    run(c, 400, produce=2)  # session expires; the controller elects (uncleanly, if allowed)
    c.heal()
    run(c, 600, produce=2)
    return c


def last_replica_standing() -> Cluster:
    """KIP-966: ISR {1,2,3}, min ISR 2. One follower crashes, the other is cut off from brokers and
    leaves the ISR (-> ELR, HW frozen); then the last ISR member crashes losing its unflushed tail.
    The ELR member is elected; Kafka before KIP-966 would wait for the last ISR member and lose data."""
    c, _ = make(min_isr=2)
    c.cfg.flush_every_ms = 10**9  # nothing is flushed: a crash loses the whole unflushed log
    run(c, 200, produce=2)
    lead = leader_id(c)
    a, b = [x for x in c.brokers if x != lead]
    c.crash(a)
    run(c, 300, produce=2)
    c.isolate_from_brokers(b)  # b stays alive and registered, but lags: the leader shrinks the ISR to itself
    run(c, 300, produce=2, acks=1)
    c.checker.elr_before_crash = c.zk.partitions[0].elr
    c.crash(lead)  # the last replica standing dies with its tail unflushed
    c.heal()
    run(c, 400)
    c.checker.leader_after_crash = leader_id(c)
    c.restart(lead)
    c.restart(a)
    run(c, 600, produce=2)
    return c


def leader_roles(c: Cluster) -> list[int]:
    return [b.id for b in c.brokers.values() if b.alive and b.states[0].role is Role.LEADER and not b.states[0].fenced]



def restarted_member_added_late() -> Cluster:
    """The leader's write adding a follower lands after that follower crashed (losing records below the HW)
    and registered again: the race random seed 1034869 once found, scripted. Partition 1 of two (replicas
    2, 3, 1): broker 2 leads it, broker 1 is the controller, broker 3 the follower. The follower, cut from
    ZooKeeper (its session expires), catches up; the leader proposes it back into the ISR and at once loses
    ZooKeeper for a while (its write is retried); the follower crashes, restarts (cut from the other
    brokers, so it cannot fetch back what it lost) and registers again. The
    leader's write then lands naming the follower's earlier registration, and the leader loses ZooKeeper
    again before it can take the follower out: only the check of recorded broker epochs
    (``election.restarted_members``) keeps the controller from taking the follower for in sync."""
    cfg = SimConfig(brokers=3, partitions=2, replication_factor=3, min_insync_replicas=1, drop_prob=0.0,
                    delay_ms=(1, 2), flush_every_ms=10**9)  # a crash loses the whole log
    c = Cluster(cfg, random.Random(1), Checker())
    c.producer = SimProducer(c)
    p, leader, follower = 1, 2, 3

    def run_p(ms: int) -> None:
        for _ in range(ms // STEP_MS):
            c.step(STEP_MS)
            c.producer.send(p, 2)
            c.producer.tick()

    def named() -> bool:
        return follower in c.zk.partitions[p].isr

    run_p(100)
    c.isolate_from_brokers(follower)
    c.isolate_from_zk(follower)
    run_p(300)  # out of the ISR, its session gone
    c.net.cut.clear()  # it fetches again (still cut from ZooKeeper)
    for _ in range(500):
        run_p(STEP_MS)
        pending = c.brokers[leader].states[p].pending_isr
        if pending is not None and follower in pending.proposed.isr:
            break
    c.isolate_from_zk(leader)  # the write is in flight: it fails, and is retried
    c.crash(follower)
    c.restart(follower)
    c.isolate_from_brokers(follower)  # it cannot fetch what it lost back before the write lands
    c.zk_cut.discard(follower)  # registers again at once (its old session expired)
    run_p(20)
    c.zk_cut.discard(leader)
    for _ in range(100):  # the leader's write lands
        run_p(STEP_MS)
        if named():
            break
    c.isolate_from_zk(leader)  # it cannot write the follower (now of another registration) out
    run_p(60)
    c.heal()
    run_p(400)
    return c


def whole_cluster_crash(staggered: bool = False) -> Cluster:
    """KIP-966 unclean recovery: every broker crashes at once under acks=all load and comes back after an
    unclean shutdown, so no ISR or ELR member may lead cleanly. Only broker ``keeper`` (not the leader, not
    first in replica order) had flushed its whole log: the others lose their unflushed tails, acknowledged
    records among them. The controller must wait for every last known ELR member, ask them where their logs
    end and elect ``keeper``, the longest log, with no operator: every acknowledged record stays readable.
    ``staggered``: the brokers come back one at a time (each pass over broker changes shrinks the ELR),
    else all at once."""
    c, _ = make(min_isr=2)
    c.cfg.flush_every_ms = 10**9  # nothing is flushed but what the scenario flushes
    run(c, 200, produce=2)
    for b in c.brokers.values():
        b.disks[0].flush()
    run(c, 200, produce=2)
    lead = leader_id(c)
    keeper = [b for b in c.assignment[0] if b != lead][-1]
    c.brokers[keeper].disks[0].flush()  # its page cache survived (SIGKILL, not a power loss), say
    c.checker.keeper = keeper
    c.checker.acked_before_crash = c.checker.acked_all
    for b in sorted(c.brokers):
        c.crash(b)
    run(c, 300)  # every session expires; nobody leads
    c.checker.offline_while_down = leader_id(c) < 0 or not c.brokers[leader_id(c)].alive
    for b in sorted(c.brokers, reverse=True):
        c.restart(b)
        if staggered:
            run(c, 200)
    run(c, 600, produce=2)
    return c


def whole_cluster_crash_one_replica_lost() -> Cluster:
    """KIP-966 unclean recovery past ``unclean.recovery.timeout.ms``: a follower fell out of the ISR (cut
    off), then every broker crashed; the two ISR members (the last known ELR) come back, the follower never
    does. Until the timeout the partition waits for it (it might hold more); after, the longer of the two
    leads, and the election is reported as unclean."""
    c, _ = make(min_isr=1)
    run(c, 200, produce=2)
    lead = leader_id(c)
    lost = [b for b in c.assignment[0] if b != lead][-1]
    c.isolate_from_brokers(lost)
    run(c, 300, produce=2)  # out of the ISR
    c.checker.isr_before_crash = c.zk.partitions[0].isr
    for b in sorted(c.brokers):
        c.crash(b)
    c.heal()
    run(c, 300)
    for b in sorted(c.brokers):
        if b != lost:
            c.restart(b)
    timeout_ms = c.controllers.config.unclean_recovery_timeout_ms
    run(c, timeout_ms // 2)
    c.checker.offline_before_timeout = leader_id(c) < 0
    run(c, timeout_ms + 400, produce=2)
    return c
