"""Random schedules: a seed picks every fault, delay, produce and read; the checker judges each step.

``run_schedule(seed)`` is deterministic: the same seed replays the same run
(``ADS_SIM_SEED=<seed> pytest tests/sim -k random``).
"""

from __future__ import annotations

import random
from contextlib import contextmanager
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Callable, Iterator

from ads_spark.errors import AdsError, ErrorCode
from ads_spark.replication import controller_decisions as decide
from ads_spark.replication import election, hw
from ads_spark.replication import partition as core
from ads_spark.replication.state import UNKNOWN_OFFSET

from tests.sim.checker import Checker
from tests.sim.cluster import Cluster, SimConfig
from tests.sim.liveness import run_liveness
from tests.sim.model import ProduceResp

PRODUCE_TIMEOUT_MS = 120
PRODUCE_RETRIES_MAX = 6
RETRIABLE = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_ENOUGH_REPLICAS,
             ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT}


@dataclass
class InFlight:
    req_id: int
    acks: int
    rids: tuple[int, ...]
    seq: int
    sent_ms: int
    retries: int = 0


class SimProducer:
    """acks=all idempotent producer (one batch in flight per partition) plus plain acks=1 sends."""

    def __init__(self, cluster: Cluster, pid: int = 7):
        self.c = cluster
        self.pid = pid
        self.pepoch = 0
        self.next_seq = {p: 0 for p in cluster.zk.partitions}
        self.inflight: dict[int, InFlight] = {}  # partition -> batch
        self.by_req: dict[int, int] = {}
        self.next_rid = 1

    def _rids(self, n: int) -> tuple[int, ...]:
        rids = tuple(range(self.next_rid, self.next_rid + n))
        self.next_rid += n
        return rids

    def send(self, p: int, n: int = 1, acks: int = -1) -> None:
        if acks != -1:
            req = self.c.send_produce(p, acks, self._rids(n))
            self.by_req[req] = -1
            return
        if p in self.inflight:
            return
        rids = self._rids(n)
        seq = self.next_seq[p]
        req = self.c.send_produce(p, -1, rids, self.pid, self.pepoch, seq)
        self.inflight[p] = InFlight(req, -1, rids, seq, self.c.now)
        self.by_req[req] = p

    def _resend(self, p: int) -> None:
        f = self.inflight[p]
        if f.retries >= PRODUCE_RETRIES_MAX:
            del self.inflight[p]  # give up on this batch; a new epoch restarts the sequences
            self.pepoch += 1
            self.next_seq = {q: 0 for q in self.next_seq}
            for q in list(self.inflight):
                del self.inflight[q]
            return
        req = self.c.send_produce(p, -1, f.rids, self.pid, self.pepoch, f.seq)
        self.inflight[p] = InFlight(req, -1, f.rids, f.seq, self.c.now, f.retries + 1)
        self.by_req[req] = p

    def on_response(self, msg: ProduceResp) -> None:
        p = self.by_req.pop(msg.req_id, None)
        if p is None:
            return
        meta = self.c.requests[msg.req_id]
        if p == -1:
            if msg.error is ErrorCode.NONE:
                self.c.checker.on_ack(meta.p, meta.acks, msg.base_offset, meta.rids, msg.leader_epoch)
            return
        f = self.inflight.get(p)
        if f is None or f.req_id != msg.req_id:
            return
        if msg.error is ErrorCode.NONE:
            self.c.checker.on_ack(p, -1, msg.base_offset, f.rids, msg.leader_epoch)
            del self.inflight[p]
            self.next_seq[p] = f.seq + len(f.rids)
        elif msg.error in RETRIABLE:
            self._resend(p)
        else:
            self.inflight[p] = InFlight(f.req_id, -1, f.rids, f.seq, f.sent_ms, PRODUCE_RETRIES_MAX)
            self._resend(p)

    def tick(self) -> None:
        for p, f in list(self.inflight.items()):
            if self.c.now - f.sent_ms > PRODUCE_TIMEOUT_MS and p in self.inflight:
                self._resend(p)


def consume(cluster: Cluster, rng: random.Random, p: int, follower: bool) -> None:
    """A consumer read of everything below the HW, from the leader or (KIP-392) a follower."""
    candidates = [b for b in cluster.brokers.values() if b.alive]
    if not candidates:
        return
    b = rng.choice(candidates)
    try:  # as the broker's data handler bounds a consumer fetch from offset 0
        end = b.partitions[p].consumer_read_bound(-1, 0, allow_follower=follower)
    except AdsError:
        return
    cluster.checker.on_consume(b, p, 0, end)


# Planted bugs: each replaces pure functions of the core, which it looks up in its module at call time,
# by mutants that return the wrong thing.

def _max_isr_log_end(leader_id, leader_log_end_offset, isr, progress) -> int:
    """hw_max: the HW candidate as the largest LEO over the ISR instead of the smallest."""
    ends = hw.isr_log_ends(leader_id, leader_log_end_offset, isr, progress)
    return UNKNOWN_OFFSET if ends is None else max(ends)


def _own_high_watermark(state, *_) -> int:
    """truncate_to_hw: a new or diverged follower cuts its log to its own, maybe stale, HW (pre-KIP-101)."""
    return state.high_watermark


def _any_available_replica(view, available, ineligible) -> tuple[int, ...]:
    """elect_any_replica: every available replica is a clean candidate, in sync or not, eligible or not."""
    return tuple(r for r in view.replicas if r in available)


def _no_restarted_members(view, live_broker_epochs) -> frozenset[int]:
    """ignore_restarted_members: no ISR member is taken for restarted since the ISR was written."""
    return frozenset()


def _every_replica_eligible(state, views) -> list:
    """elect_outside_isr: the views the controller core's elections take (``decision_views``) name every
    replica outside the ISR in the ELR, so a replica without the committed records may be elected cleanly."""
    epochs = decide.live_broker_epochs(state)
    out = []
    for view in views:
        view = election.without_restarted_members(view, epochs)
        outside = tuple(r for r in view.replicas if r not in view.state.isr)
        out.append(replace(view, state=replace(view.state, elr=outside)))
    return out


def _first_reported(view, candidates, log_ends) -> int:
    """recovery_in_replica_order: unclean recovery takes the first replica that reported, not the longest log."""
    return next((r for r in view.replicas if r in candidates and r in log_ends), -1)


MUTANTS: dict[str, tuple[tuple[ModuleType, str, Callable], ...]] = {
    "hw_max": ((hw, "candidate_high_watermark", _max_isr_log_end),),
    "truncate_to_hw": ((core, "truncation_on_becoming_follower", _own_high_watermark),
                       (core, "truncation_on_divergence", _own_high_watermark)),
    "elect_any_replica": ((election, "clean_candidates", _any_available_replica),),
    "ignore_restarted_members": ((election, "restarted_members", _no_restarted_members),),
    "elect_outside_isr": ((decide, "decision_views", _every_replica_eligible),),
    "recovery_in_replica_order": ((election, "most_complete_replica", _first_reported),),
}
PATCH_POINTS: tuple[tuple[ModuleType, str], ...] = tuple(
    dict.fromkeys((module, attr) for planted in MUTANTS.values() for module, attr, _ in planted))

Saved = dict[tuple[ModuleType, str], Callable]


def patched_functions() -> Saved:
    """The functions now at every patch point: what ``restore`` puts back."""
    return {(module, attr): getattr(module, attr) for module, attr in PATCH_POINTS}


def plant(name: str) -> None:
    """Replace the functions of mutation ``name`` by its mutants, until the enclosing ``mutation`` exits
    (or ``restore``). Callable mid-run, e.g. from a checker hook, to plant a bug at a given event."""
    for module, attr, mutant in MUTANTS[name]:
        setattr(module, attr, mutant)


def restore(saved: Saved) -> None:
    """Put back the functions ``patched_functions`` returned."""
    for (module, attr), function in saved.items():
        setattr(module, attr, function)


@contextmanager
def mutation(name: str | None) -> Iterator[None]:
    """Plant the known bug ``name`` (none for None) in the core; on exit, even on error, every patch point
    gets back the function it had on entry, also for bugs ``plant``ed inside."""
    saved = patched_functions()
    try:
        if name:
            plant(name)
        yield
    finally:
        restore(saved)


UNCLEAN_SEED_MODULUS, UNCLEAN_SEED_REMAINDER = 8, 3  # no regression seed is 3 mod 8
# One schedule in CRASH_ALL_SEED_MODULUS crashes every broker at once, at a step drawn from the seed alone
# (KIP-966's whole-cluster crash: every ISR and ELR member comes back unclean, unclean recovery must lead).
# No regression seed is 4 mod 8, and none is 3 (the unclean seeds keep their schedules).
CRASH_ALL_SEED_MODULUS, CRASH_ALL_SEED_REMAINDER = 8, 4


def random_config(rng: random.Random) -> SimConfig:
    brokers = rng.choice((3, 3, 4, 5))
    rf = 3
    return SimConfig(brokers=brokers, partitions=rng.choice((1, 1, 2)), replication_factor=rf,
                     min_insync_replicas=rng.choice((1, 2, 2, 2)), unclean=False,
                     drop_prob=rng.choice((0.0, 0.02, 0.05)))


FAULTS = ("crash", "crash", "restart", "isolate_brokers", "isolate_zk", "cut_one_way", "heal", "clients")


def crash_all_step(seed: int, steps: int) -> int | None:
    """The step at which a crash-all schedule crashes every broker (None: not one of those schedules).
    From the seed, not the schedule's generator, so the draws of every other seed stay as they were."""
    if seed % CRASH_ALL_SEED_MODULUS != CRASH_ALL_SEED_REMAINDER:
        return None
    return random.Random(seed * 7919 + 1).randrange(steps // 4, max(steps // 4 + 1, steps * 3 // 4))


def crash_all(cluster: Cluster) -> str:
    for b in sorted(cluster.brokers):
        cluster.crash(b)
    return "crash_all"


def inject_fault(cluster: Cluster, rng: random.Random) -> str:
    ids = sorted(cluster.brokers)
    kind = rng.choice(FAULTS)
    b = rng.choice(ids)
    if kind == "crash":
        cluster.crash(b)
    elif kind == "restart":
        for x in ids:
            cluster.restart(x)
    elif kind == "isolate_brokers":
        cluster.isolate_from_brokers(b)
    elif kind == "isolate_zk":
        cluster.isolate_from_zk(b)
    elif kind == "cut_one_way":
        cluster.cut_one_way(b, rng.choice([x for x in ids if x != b]))
    elif kind == "clients":
        cluster.isolate_from_clients(b)
    else:
        cluster.heal()
    return f"{kind} {b}"


def run_schedule(seed: int, steps: int = 220, mutation_name: str | None = None,
                 fault_prob: float = 0.05) -> tuple[Checker, list[str]]:
    """One random schedule, then the liveness phase (liveness.py); returns the checker (violations, stats)
    and the fault log."""
    rng = random.Random(seed)
    cfg = random_config(rng)
    # One schedule in UNCLEAN_SEED_MODULUS runs with unclean election on (unclean recovery, divergent logs
    # to truncate). Chosen from the seed, not drawn, so every other seed replays the schedule it always had.
    if seed % UNCLEAN_SEED_MODULUS == UNCLEAN_SEED_REMAINDER:
        cfg = replace(cfg, unclean=True)
    checker = Checker(rebase_after_unclean=cfg.unclean)
    faults: list[str] = []
    crash_all_at = crash_all_step(seed, steps)
    with mutation(mutation_name):
        cluster = Cluster(cfg, rng, checker)
        producer = SimProducer(cluster)
        cluster.producer = producer
        for step_no in range(steps):
            cluster.step(rng.randint(1, 6))
            if step_no == crash_all_at:
                faults.append(f"t={cluster.now} " + crash_all(cluster))
            if rng.random() < fault_prob and cluster.now > 30:
                faults.append(f"t={cluster.now} " + inject_fault(cluster, rng))
            if rng.random() < 0.03:  # heal and restart eventually, so schedules keep making progress
                cluster.heal()
                for b in cluster.brokers:
                    cluster.restart(b)
            p = rng.randrange(cfg.partitions)
            if rng.random() < 0.6:
                producer.send(p, rng.randint(1, 3), acks=-1 if rng.random() < 0.85 else 1)
            if rng.random() < 0.2:
                consume(cluster, rng, p, follower=rng.random() < 0.3)
            producer.tick()
            if checker.violations:
                break
        if not checker.violations:
            run_liveness(cluster, producer, rng)
    return checker, faults
