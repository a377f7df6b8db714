"""A group coordinator in the simulation: offset commits in a replicated offsets partition, across failovers.

Kafka keeps committed offsets in ``__consumer_offsets``; the leader of a group's
partition of it (``group_records.partition_for``) is the group's coordinator.
Here every partition of the simulated topic is such an offsets partition (RF 3,
min ISR 2, the real ``Partition`` shell per replica, as cluster.py runs it), and
each broker process runs a ``SimCoordinator`` beside it, made of the real pure
group core:

* a commit (``CommitReq``: standalone, generation -1 and no member, or a member's
  with its generation) is checked by ``group_offsets.check_commit``, turned into ``group_records.offset_commit_record``
  records, appended through ``Partition.produce`` with acks=all, and applied to the
  coordinator's cache (``group_offsets.apply_commit``) only when that append is
  acknowledged; only then is the client answered (``CommitResp``);
* a replica that becomes leader of an offsets partition (a new leader epoch) loads
  its log with ``group_records.replay`` and serves fetches from the result
  (``group_offsets.fetch_offsets``); one that stops leading drops it. A crash drops
  every cache (process state); what survives is the log on the disk;
* joins, syncs and heartbeats of the members of one group go through the real
  membership core, and its group records through the log (coordinator_members.py).

The simulated log stores record ids, not bytes: ``cluster.payloads`` maps each id
to the (key, value) bytes the coordinator encoded for it, which is what the
replica's log holds. ``CommitClient`` commits increasing offsets for a few groups
and topic-partitions, one request in flight per group (abandoned after
``COMMIT_ABANDON_MS``, longer than any request can take to be appended or refused,
so a group's records are in the order its client sent them); ``coordinator_checker``
holds every current coordinator to the commits and generations acknowledged so far,
after every step. Loader bugs can be planted (``coordinator_mutation``).
"""

from __future__ import annotations

import itertools
import random
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

from ads_spark.errors import AdsError, ErrorCode
from ads_spark.replication import group_offsets as offsets_core
from ads_spark.replication import group_records
from ads_spark.replication.state import Role

from tests.sim import runner
from tests.sim.cluster import MAX_MESSAGE_BYTES, PRODUCE_TIMEOUT_MS, Cluster, SimBroker, SimConfig
from tests.sim.coordinator_checker import CoordinatorChecker
from tests.sim.coordinator_members import (
    MEMBER_GROUP, MEMBERS, GroupReq, GroupResp, MemberClient, on_group_request, run_group_liveness, tick_groups,
    unload_groups,
)
from tests.sim.disk import SimBatch
from tests.sim.liveness import run_liveness
from tests.sim.model import CLIENT

METADATA_MAX_BYTES = 4096  # offset.metadata.max.bytes
COMMIT_ABANDON_MS = 400  # > network delay + the produce timeout + the answer's delay: the request is over by then
GROUPS = ("orders-etl", "audit", "spark-lag", "billing")
TOPIC_PARTITIONS = (("orders", 0), ("orders", 1), ("clicks", 0))


@dataclass(frozen=True)
class CommitReq:
    req_id: int
    group_id: str
    partitions: tuple[offsets_core.CommitPartition, ...]
    generation_id: int = -1  # -1 with member "": a standalone commit
    member_id: str = ""


@dataclass(frozen=True)
class CommitResp:
    req_id: int
    error: ErrorCode
    base_offset: int
    leader_epoch: int
    rids: tuple[int, ...]  # the record ids the commit's records got (the checker follows them in the log)


# --------------------------------------------------------------------- loading (a patch point for mutations)


def load_end_offset(log, state) -> int:
    """Where a new coordinator stops reading its log: the log end (Kafka's loader reads to the LEO; every
    acknowledged commit is below the old leader's HW, hence in the new leader's log, not always below its HW)."""
    return log.log_end_offset


def _to_high_watermark(log, state) -> int:
    """load_to_hw: the new leader loads only below its own HW, which lags the old leader's by a fetch round."""
    return min(state.high_watermark, log.log_end_offset)


def _without_last_batch(log, state) -> int:
    """drop_tail: the loader stops before the last batch of the log."""
    return log.headers[-1].base_offset if log.headers else log.log_end_offset


def load_groups(records, now_ms: int) -> dict[str, group_records.LoadedGroup]:
    """What a new coordinator makes of its log's records."""
    return group_records.replay(records, now_ms=now_ms)


def _offsets_only(records, now_ms: int) -> dict[str, group_records.LoadedGroup]:
    """skip_group_records: the loader keeps the commits and drops the group metadata records."""
    kept = [r for r in records if not isinstance(group_records.decode_key(r[0]), group_records.GroupKey)]
    return group_records.replay(kept, now_ms=now_ms)


# name -> (the function of this module it replaces, the mutant)
MUTANTS: dict[str, tuple[str, Callable]] = {"load_to_hw": ("load_end_offset", _to_high_watermark),
                                            "drop_tail": ("load_end_offset", _without_last_batch),
                                            "skip_group_records": ("load_groups", _offsets_only)}


@contextmanager
def coordinator_mutation(name: str | None) -> Iterator[None]:
    """Plant the loader bug ``name`` (none for None) until the block exits, even on error."""
    module = globals()
    saved = {attr: module[attr] for attr, _ in MUTANTS.values()}
    try:
        if name:
            attr, mutant = MUTANTS[name]
            module[attr] = mutant
        yield
    finally:
        module.update(saved)


# --------------------------------------------------------------------- the coordinator of one broker process


@dataclass
class Loaded:
    leader_epoch: int
    groups: dict[str, group_records.LoadedGroup]


class SimCoordinator:
    """One broker process's group coordinator: a cache per offsets partition it leads, loaded from the log."""

    def __init__(self, broker: "CoordinatorBroker"):
        self.broker = broker
        self.loaded: dict[int, Loaded] = {}
        # finished group-record appends, for persist_done on the next tick (coordinator_members.tick_groups)
        self.deferred: list[tuple] = []

    def on_state(self, p: int, state) -> None:
        """After every call into partition ``p``: load on leading in a new epoch, unload on not leading."""
        if state.role is Role.LEADER:
            current = self.loaded.get(p)
            if current is None or current.leader_epoch != state.leader_epoch:
                if current is not None:
                    unload_groups(self, current)
                self._load(p, state)
        elif p in self.loaded:
            unload_groups(self, self.loaded.pop(p))

    def tick(self, now_ms: int) -> None:
        tick_groups(self, now_ms)

    def _load(self, p: int, state) -> None:
        c = self.broker.c
        log = self.broker.disks[p]
        end = load_end_offset(log, state)
        records = (c.payloads[rid] for rid in log.rids[log.log_start_offset:end])
        self.loaded[p] = Loaded(state.leader_epoch, load_groups(records, c.now))
        c.checker.coordinator_loads += 1
        c.checker.coordinator_loads_with_commits += bool(self.loaded[p].groups)

    def serving(self, p: int, leader_epoch: int) -> Loaded | None:
        current = self.loaded.get(p)
        return current if current is not None and current.leader_epoch == leader_epoch else None

    def fetch(self, p: int, group_id: str, tp: tuple[str, int]) -> offsets_core.OffsetAndMetadata | None:
        """OffsetFetch of one partition, as the coordinator answers it (None: nothing committed)."""
        loaded = self.loaded[p]
        group = loaded.groups.get(group_id)
        return offsets_core.fetch_offsets(group.offsets if group else {}, [tp])[0][1]

    def on_commit(self, msg: CommitReq) -> int | None:
        """Check, append acks=all, answer when acknowledged; returns the partition it produced to (if any)."""
        b, c = self.broker, self.broker.c
        p, _ = c.coordinator_of(msg.group_id)
        state = b.states[p]
        loaded = self.loaded.get(p) if state.is_leader else None
        if loaded is None or loaded.leader_epoch != state.leader_epoch:
            self._answer(msg.req_id, ErrorCode.NOT_COORDINATOR)
            return None
        entry = loaded.groups.get(msg.group_id)
        req = offsets_core.CommitRequest(msg.group_id, msg.generation_id, msg.member_id, None, msg.partitions)
        group, decision = offsets_core.check_commit(entry.group if entry else None, req,
                                                    metadata_max_bytes=METADATA_MAX_BYTES, now_ms=c.now)
        if decision.error is not ErrorCode.NONE:
            self._answer(msg.req_id, decision.error)
            return None
        if entry is not None:  # a member's commit counts as its heartbeat
            loaded.groups[msg.group_id] = group_records.LoadedGroup(group, entry.offsets)
        rids = c.new_records([group_records.offset_commit_record(msg.group_id, t, q, om)
                              for (t, q), om in decision.to_write.items()])

        def complete(base: int, failure: Exception | None) -> None:
            if failure is None and self.serving(p, loaded.leader_epoch) is loaded:
                old = loaded.groups.get(msg.group_id)
                committed = offsets_core.apply_commit(old.offsets if old else {}, decision.to_write)
                loaded.groups[msg.group_id] = group_records.LoadedGroup(old.group if old else group, committed)
            error = ErrorCode.NONE if failure is None else failure.code
            self._answer(msg.req_id, error, base, loaded.leader_epoch, rids)

        try:
            b.partitions[p].produce(SimBatch(rids), acks=-1, timeout_ms=PRODUCE_TIMEOUT_MS,
                                    max_message_bytes=MAX_MESSAGE_BYTES, now_ms=c.now, producer=(-1, -1, -1),
                                    complete=complete)
        except AdsError as exc:
            self._answer(msg.req_id, exc.code)
        return p

    def _answer(self, req_id: int, error: ErrorCode, base: int = -1, epoch: int = -1, rids: tuple = ()) -> None:
        c = self.broker.c
        c.net.send(c.now, self.broker.id, CLIENT, CommitResp(req_id, error, base, epoch, rids))


class CoordinatorBroker(SimBroker):
    """The simulated broker with a group coordinator in its process."""

    def recover(self) -> None:
        self.coordinator = SimCoordinator(self)  # a new process: nothing loaded
        super().recover()

    def crash(self) -> None:
        super().crash()
        self.coordinator = SimCoordinator(self)

    def _after(self, p: int) -> None:
        super()._after(p)
        self.coordinator.on_state(p, self.states[p])

    def receive(self, src: int, msg) -> None:
        if isinstance(msg, CommitReq):
            p = self.coordinator.on_commit(msg)
        elif isinstance(msg, GroupReq):
            p = on_group_request(self.coordinator, msg)
        else:
            super().receive(src, msg)
            return
        if p is not None:
            self._after(p)  # the append it made: the state changed

    def tick(self, now: int) -> None:
        self.coordinator.tick(now)  # before the partitions' ticks, which read what its appends changed
        super().tick(now)


class CoordinatorCluster(Cluster):
    """A cluster whose topic is the offsets topic; ``payloads`` holds each record id's (key, value) bytes."""

    broker_class = CoordinatorBroker

    def __init__(self, *args, **kwargs):
        self.payloads: dict[int, tuple[bytes, bytes | None]] = {}
        self._record_ids = itertools.count(1)
        self._member_ids = itertools.count(1)
        self._partition_of: dict[str, int] = {}
        super().__init__(*args, **kwargs)

    def fresh_member_id(self) -> str:
        """The shell's randomness input to ``group_membership.join``: unique per call, as a uuid is."""
        return f"uuid-{next(self._member_ids)}"

    def new_records(self, records: list[tuple[bytes, bytes | None]]) -> tuple[int, ...]:
        rids = tuple(next(self._record_ids) for _ in records)
        self.payloads.update(zip(rids, records))
        return rids

    def coordinator_of(self, group_id: str) -> tuple[int, int]:
        """(offsets partition, broker ZooKeeper names its leader): where a client's FindCoordinator points."""
        p = self._partition_of.get(group_id)
        if p is None:  # the checker asks for every group after every step: hashing once is enough
            p = self._partition_of[group_id] = group_records.partition_for(group_id, self.cfg.partitions)
        return p, self.zk.partitions[p].leader


# --------------------------------------------------------------------- the committing clients


@dataclass
class Pending:
    group_id: str
    partitions: tuple[offsets_core.CommitPartition, ...]
    sent_ms: int
    member: MemberClient | None = None


class CommitClient:
    """Standalone committers of every group in ``GROUPS`` and the ``MEMBERS`` members of ``MEMBER_GROUP``
    (coordinator_members.py), whose commits it sends: each commit names some of ``TOPIC_PARTITIONS`` with
    offsets above every earlier attempt's, one request in flight per group. The cluster's ``producer``: the
    one receiver of client answers; ``tick`` abandons requests past ``COMMIT_ABANDON_MS``."""

    def __init__(self, cluster: CoordinatorCluster, rng: random.Random):
        self.c = cluster
        self.rng = rng
        self.req_ids = itertools.count(1)
        self.next_offset = {(g, tp): 0 for g in (*GROUPS, MEMBER_GROUP) for tp in TOPIC_PARTITIONS}
        self.sent: dict[int, Pending] = {}  # every request not answered yet, abandoned or not
        self.inflight: dict[str, int] = {}  # group -> its request in flight
        self.members = [MemberClient(self, f"member-{i}", self.req_ids) for i in range(MEMBERS)]

    def commit(self, group_id: str, member: MemberClient | None = None) -> None:
        """A commit of ``group_id``: standalone, or by ``member`` with its member id and generation."""
        if group_id in self.inflight:
            return
        tps = self.rng.sample(TOPIC_PARTITIONS, self.rng.randint(1, len(TOPIC_PARTITIONS)))
        parts = []
        for t, q in sorted(tps):
            offset = self.next_offset[(group_id, (t, q))] + self.rng.randint(1, 5)
            self.next_offset[(group_id, (t, q))] = offset
            parts.append(offsets_core.CommitPartition(t, q, offset, offset % 7, f"m{offset}"))
        req_id = next(self.req_ids)
        self.sent[req_id] = Pending(group_id, tuple(parts), self.c.now, member)
        self.inflight[group_id] = req_id
        self.c.checker.on_commit_sent(group_id, tuple(parts))
        _, leader = self.c.coordinator_of(group_id)
        req = CommitReq(req_id, group_id, tuple(parts))
        if member is not None:
            req = CommitReq(req_id, group_id, tuple(parts), member.generation, member.member_id)
        if leader > 0:
            self.c.net.send(self.c.now, CLIENT, leader, req, self.c.brokers[leader].incarnation)

    def on_response(self, msg) -> None:
        if isinstance(msg, GroupResp):
            for member in self.members:
                member.on_response(msg)
            return
        if not isinstance(msg, CommitResp):
            return
        pending = self.sent.pop(msg.req_id, None)
        if pending is None:
            return
        if self.inflight.get(pending.group_id) == msg.req_id:
            del self.inflight[pending.group_id]
        if pending.member is not None:
            pending.member.on_error(msg.error)
        if msg.error is ErrorCode.NONE and msg.rids:
            p, _ = self.c.coordinator_of(pending.group_id)
            self.c.checker.on_ack(p, -1, msg.base_offset, msg.rids, msg.leader_epoch)
            self.c.checker.on_commit_acked(p, pending.group_id, pending.partitions, msg.leader_epoch)

    def tick(self) -> None:
        for member in self.members:
            member.tick()
        for req_id, pending in list(self.sent.items()):
            if self.c.now - pending.sent_ms > COMMIT_ABANDON_MS:
                del self.sent[req_id]
                if self.inflight.get(pending.group_id) == req_id:
                    del self.inflight[pending.group_id]



# --------------------------------------------------------------------- random schedules


def random_coordinator_config(rng: random.Random) -> SimConfig:
    """The offsets topic as Kafka creates it: RF 3, min ISR 2, unclean election off; one or two partitions."""
    return SimConfig(brokers=rng.choice((3, 3, 4, 5)), partitions=rng.choice((1, 2)), replication_factor=3,
                     min_insync_replicas=2, unclean=False, drop_prob=rng.choice((0.0, 0.02, 0.05)))


def run_coordinator_schedule(seed: int, steps: int = 220, mutation_name: str | None = None,
                             fault_prob: float = 0.06) -> tuple[CoordinatorChecker, list[str]]:
    """One random schedule of commits (standalone, and by the members of ``MEMBER_GROUP``) under runner.py's
    faults (crashes losing unflushed tails, cut links, ZooKeeper cuts, whole-cluster crashes in one seed of
    eight), then runner's liveness phase and the group's (it re-forms); checked every step."""
    rng = random.Random(seed)
    cfg = random_coordinator_config(rng)
    checker = CoordinatorChecker()
    faults: list[str] = []
    crash_all_at = runner.crash_all_step(seed, steps)
    with coordinator_mutation(mutation_name):
        cluster = CoordinatorCluster(cfg, rng, checker)
        client = CommitClient(cluster, rng)
        cluster.producer = client
        for step_no in range(steps):
            cluster.step(rng.randint(1, 6))
            if step_no == crash_all_at:
                faults.append(f"t={cluster.now} " + runner.crash_all(cluster))
            if rng.random() < fault_prob and cluster.now > 30:
                faults.append(f"t={cluster.now} " + runner.inject_fault(cluster, rng))
            if rng.random() < 0.03:
                cluster.heal()
                for b in cluster.brokers:
                    cluster.restart(b)
            if rng.random() < 0.5:
                client.commit(rng.choice(GROUPS))
            if rng.random() < 0.2:
                rng.choice(client.members).commit()
            client.tick()
            if checker.violations:
                break
        if not checker.violations:
            run_liveness(cluster, client, rng)
        if not checker.violations:
            run_group_liveness(cluster, client, rng)
    return checker, faults


# --------------------------------------------------------------------- a scripted failover


def failover_after_acknowledged_commit(mutation_name: str | None = None) -> CoordinatorCluster:
    """The coordinator's broker dies the moment a commit is acknowledged: its followers hold the commit's
    record but not yet the HW that covers it (the answer telling them is cut off with the leader). The new
    leader must load the commit and serve it. No drops, short delays, one offsets partition."""
    cfg = SimConfig(brokers=3, partitions=1, replication_factor=3, min_insync_replicas=2, drop_prob=0.0,
                    delay_ms=(1, 2))
    rng = random.Random(1)
    with coordinator_mutation(mutation_name):
        c = CoordinatorCluster(cfg, rng, CoordinatorChecker())
        client = c.producer = CommitClient(c, rng)
        group = GROUPS[0]
        for _ in range(100):  # a few acknowledged commits first
            c.step(2)
            client.commit(group)
            client.tick()
        while group in client.inflight:
            c.step(1)
        p, old = c.coordinator_of(group)
        before = c.brokers[old].states[p].log_end_offset
        client.commit(group)
        c.checker.commit_at_crash = client.sent[client.inflight[group]]
        c.checker.old_coordinator = old
        for _ in range(200):  # until the leader appended the commit and its HW covers it: it answers now
            c.step(1)
            s = c.brokers[old].states[p]
            if s.log_end_offset > before and s.high_watermark == s.log_end_offset:
                break
        c.isolate_from_brokers(old)
        c.crash(old)
        for _ in range(200):
            c.step(2)
            client.tick()
        c.checker.new_coordinator = c.coordinator_of(group)[1]
        c.heal()
        c.restart(old)
        for _ in range(300):
            c.step(2)
            client.commit(group)
            client.tick()
    return c
