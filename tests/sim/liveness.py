"""The liveness phase: once the faults stop, the cluster must come back whole within a bound.

Owns the end of every random schedule (``runner.run_schedule`` calls ``run_liveness``
after its random steps), as TigerBeetle's VOPR ends each run: every link is
healed, every broker restarted, no fault is injected any more, and the cluster
runs (the producer still retrying what it has in flight, sending nothing new)
until all of these hold, at most ``LIVENESS_BOUND_MS`` of simulated time:

1. every partition has a leader: the broker ZooKeeper names is alive and its
   ``Partition`` is LEADER in that leader epoch;
2. the ISR holds every live replica, in ZooKeeper and in the leader's state;
3. every acknowledged (acks=all) record the checker holds the cluster to is
   readable by a consumer of the leader (below its HW, at its offset);
4. the live replicas are identical below the leader's HW.

No operator steps in. A partition whose every ISR and ELR member came back from
an unclean shutdown (a crash; ``crash_all`` schedules do this to every partition)
is led again by the controller's unclean recovery (KIP-966,
``election.recovery_waits_for``) once its last known ELR members are back, and
the checker holds it to every acknowledged record as any other partition: the
recovery elects the longest log, so it may lose only what no replica kept (a
crash that took the last copy voids the partition, checker invariant 7).

The safety invariants are checked at every step as before. If the bound passes
first, the checker records a violation naming the condition that still fails
("liveness: ..."), so the seed is printed like any other failure. Why a bound
and not "eventually": a schedule must end, and everything the cluster waits on
here (session expiry, the controller channel's retries, ISR updates, the
producer's retries) is bounded far below it.
"""

from __future__ import annotations

import random

from ads_spark.errors import AdsError

# Simulated time the cluster gets to heal. Far above what it needs (a restarted broker waits for its old
# session to expire, registers, is sent its role, catches up and is added back to the ISR: a few hundred
# ms with the model's timers) and below what would make the phase a throughput cost when it does fail.
LIVENESS_BOUND_MS = 3_000


def run_liveness(cluster, producer, rng: random.Random, bound_ms: int = LIVENESS_BOUND_MS) -> None:
    """Heal, restart, and run until every condition holds or the bound passes (then a violation)."""
    cluster.heal()
    for b in cluster.brokers:
        cluster.restart(b)
    deadline = cluster.now + bound_ms
    checker = cluster.checker
    while True:
        failing = unmet(cluster)
        if failing is None or checker.violations:
            return
        if cluster.now >= deadline:
            checker.fail("liveness", f"{failing}, {bound_ms} ms after the faults stopped")
            return
        cluster.step(rng.randint(1, 6))
        producer.tick()


def unmet(cluster) -> str | None:
    """The first liveness condition that does not hold now, described; None when all hold."""
    for p in sorted(cluster.zk.partitions):
        failing = _unmet_in(cluster, p)
        if failing is not None:
            return f"p{p} {failing}"
    return None


def _unmet_in(cluster, p: int) -> str | None:
    lai = cluster.zk.partitions[p]
    leader = cluster.leader_state(p)
    if leader is None:
        return f"has no leader (ZooKeeper names {lai.leader} in epoch {lai.leader_epoch})"
    live = [r for r in cluster.assignment[p] if cluster.brokers[r].alive]
    missing = [r for r in live if r not in lai.isr or r not in leader.isr]
    if missing:
        return f"ISR (ZooKeeper {list(lai.isr)}, leader {list(leader.isr)}) lacks live replicas {missing}"
    leader_log = cluster.brokers[lai.leader].disks[p]
    try:
        readable = cluster.brokers[lai.leader].partitions[p].consumer_read_bound(-1, 0, allow_follower=False)
    except AdsError as exc:
        return f"leader {lai.leader} refuses a consumer ({exc})"
    for offset, rid in cluster.checker.acked_records(p):
        if offset >= readable or leader_log.rids[offset] != rid:
            return (f"acknowledged record {rid} at offset {offset} not readable from leader {lai.leader} "
                    f"(readable below {readable})")
    below = leader_log.rids[:leader.high_watermark]
    for r in live:
        if cluster.brokers[r].disks[p].rids[:leader.high_watermark] != below:
            return f"replica {r} differs from leader {lai.leader} below its HW {leader.high_watermark}"
    return None
