"""The values a partition replica's state machine is made of.

Everything here is a frozen value: a transition builds a new value and never
mutates the old one (mappings stored in a state are never mutated either; they
are replaced). The invariants of each field are written beside it and checked
by ``check_invariants`` after every step of the dispatcher, raising
``InvariantViolation``: a broken invariant is a bug, never a response.

Vocabulary (Kafka's): LEO = log end offset, the offset the next record will get;
HW = high watermark, every offset strictly below it is committed; ISR = in-sync
replicas; ELR = eligible leader replicas (KIP-966), replicas that left the ISR
while it was below min.insync.replicas and still hold every committed record.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from enum import Enum
from typing import Mapping

from ads_spark.errors import InvariantViolation
from ads_spark.replication.dedupe import ProducerTable
from ads_spark.replication.epochs import EpochCache

NO_LEADER = -1
UNKNOWN_OFFSET = -1  # a follower's LEO before its first fetch in the current leader epoch
UNKNOWN_BROKER_EPOCH = -1


def evolve(value, **changes):
    """``dataclasses.replace`` for this package's frozen, slotted values, about twice as fast.

    The core steps once per partition for every follower fetch, and ``replace``'s
    per-field loop plus the frozen ``__init__`` (one ``object.__setattr__`` per
    field) were ~20% of a leader's Python time with 30 idle partitions (py-spy).
    Values are built field by field through their slots; a class with a
    ``__post_init__`` or without slots goes through ``replace``.
    """
    cls = type(value)
    if cls not in _EVOLVE_SLOTS:
        _EVOLVE_SLOTS[cls] = _slots_of(cls)
    slots = _EVOLVE_SLOTS[cls]
    if slots is None:
        return replace(value, **changes)
    new = object.__new__(cls)
    for name, slot in slots:
        slot.__set__(new, changes.pop(name) if name in changes else slot.__get__(value, cls))
    if changes:
        raise TypeError(f"{cls.__name__} has no field(s) {sorted(changes)}")
    return new


_EVOLVE_SLOTS: dict[type, tuple | None] = {}


def _slots_of(cls: type) -> tuple | None:
    if hasattr(cls, "__post_init__") or "__slots__" not in cls.__dict__:
        return None
    return tuple((f.name, cls.__dict__[f.name]) for f in fields(cls))


class Role(str, Enum):
    """What this broker is for the partition; transitions live in roles.py."""

    NONE = "none"  # hosts no replica the controller told it about, or was told to stop
    LEADER = "leader"
    FOLLOWER = "follower"


@dataclass(frozen=True, slots=True)
class PartitionConfig:
    """Topic/broker settings that the decisions read, with Kafka's names."""

    min_insync_replicas: int = 1  # >= 1
    replica_lag_time_max_ms: int = 30_000  # a follower not caught up for this long leaves the ISR
    isr_update_retry_ms: int = 500  # re-send an unanswered ISR proposal after this long
    unclean_leader_election_enable: bool = False


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    """The partition state znode: what the controller decides and the leader's ISR writes change.

    partition_epoch is the znode version; every write is conditional on it and
    bumps it by one. leader_epoch grows only with leader elections.
    """

    leader: int  # NO_LEADER when offline
    leader_epoch: int  # >= 0, never decreases for a partition
    isr: tuple[int, ...]  # subset of replicas, never observers; contains leader unless offline
    elr: tuple[int, ...] = ()  # disjoint from isr; non-empty only while len(isr) < min ISR
    partition_epoch: int = 0  # znode version
    controller_epoch: int = 0  # epoch of the controller that last wrote it
    # (member, broker epoch) sorted by member: the incarnation of each ISR member the leader last heard
    # from when it wrote this ISR (KIP-903's broker epochs in AlterPartition). A member that registered
    # since with another epoch may have lost records the HW covered, so the controller does not elect it
    # (election.without_restarted_members). A member without an entry is not checked (unknown).
    isr_broker_epochs: tuple[tuple[int, int], ...] = ()
    # KIP-966: the members that could hold committed records when crashes (unclean starts) took every ISR and
    # ELR member out, accumulated while no one leads. Non-empty only while leader is NO_LEADER and isr is
    # empty; unclean recovery waits for all of them to be back (election.recovery_waits_for).
    last_known_elr: tuple[int, ...] = ()

    def recorded_broker_epoch(self, member: int) -> int | None:
        return broker_epoch_recorded(self.isr_broker_epochs, member)


def broker_epoch_recorded(pairs: tuple[tuple[int, int], ...], member: int) -> int | None:
    """The broker epoch ``pairs`` (an ``isr_broker_epochs``) records for ``member``; None without an entry."""
    for recorded_member, broker_epoch in pairs:
        if recorded_member == member:
            return broker_epoch
    return None


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """What the core needs of a stored batch: a pure mirror of records.BatchHeader.

    Offsets base_offset .. last_offset inclusive. Any object with these
    attributes (a BatchHeader) can be passed where a BatchInfo is expected.
    """

    base_offset: int
    record_count: int  # > 0
    leader_epoch: int
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.record_count - 1

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.record_count


@dataclass(frozen=True, slots=True)
class FollowerProgress:
    """The leader's view of one follower (or observer), reset at each leader epoch."""

    log_end_offset: int = UNKNOWN_OFFSET  # its last fetch offset in this epoch; <= leader LEO
    last_caught_up_ms: int = 0  # last time its fetch reached the leader's LEO (Kafka's rule)
    last_fetch_ms: int = 0
    last_fetch_leader_leo: int = UNKNOWN_OFFSET  # leader LEO when it last fetched
    broker_epoch: int = UNKNOWN_BROKER_EPOCH  # incarnation that made the last fetch; never goes back


@dataclass(frozen=True, slots=True)
class PendingIsrChange:
    """An ISR write in flight (Kafka's PendingExpandIsr / PendingShrinkIsr).

    While in flight the HW is computed over ``maximal_isr`` = committed ISR union
    proposed ISR, so that whichever way ZooKeeper answers, no ISR member is ever
    behind the HW.
    """

    proposed: LeaderAndIsr  # partition_epoch = the version the write is conditional on
    maximal_isr: frozenset[int]
    sent_at_ms: int


@dataclass(frozen=True, slots=True)
class PendingProduce:
    """An acks=all produce waiting in purgatory for the HW to pass its last offset."""

    request_id: int
    base_offset: int
    last_offset: int  # inclusive; completes when high_watermark > last_offset
    deadline_ms: int


@dataclass(frozen=True, slots=True)
class PartitionState:
    """One broker's replica of one partition: the whole input and output of step()."""

    topic: str
    partition: int
    broker_id: int
    config: PartitionConfig = PartitionConfig()
    role: Role = Role.NONE
    leader: int = NO_LEADER
    leader_epoch: int = -1  # never decreases (within this process's life)
    partition_epoch: int = -1  # never decreases within a leader epoch
    replicas: tuple[int, ...] = ()  # preferred leader first
    observers: tuple[int, ...] = ()  # replicate but never join the ISR nor lead (KIP-392 style)
    isr: frozenset[int] = frozenset()  # last ISR committed to ZooKeeper as this broker knows it
    elr: frozenset[int] = frozenset()
    log_start_offset: int = 0  # <= high_watermark
    log_end_offset: int = 0  # >= high_watermark
    high_watermark: int = 0  # never decreases except by a reported truncation below it
    epochs: EpochCache = EpochCache()
    progress: Mapping[int, FollowerProgress] = field(default_factory=dict)  # leader only
    pending_isr: PendingIsrChange | None = None  # leader only; at most one write in flight
    pending_produces: tuple[PendingProduce, ...] = ()  # leader only; sorted by last_offset
    producers: ProducerTable = ProducerTable()
    fenced: bool = False  # leader whose ISR write met a newer leader: acknowledges nothing more
    leader_epoch_start_offset: int = 0  # LEO when this leader epoch began (leader only)
    # LeaderAndIsr.isr_broker_epochs of the ISR this broker last adopted: for members this leader has not
    # heard from, the incarnation the ISR was written for (kept in its own writes, and a first fetch from a
    # newer one is a restart).
    recorded_broker_epochs: tuple[tuple[int, int], ...] = ()

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER and not self.fenced

    @property
    def maximal_isr(self) -> frozenset[int]:
        if self.pending_isr is None:
            return self.isr
        return self.pending_isr.maximal_isr


def check_invariants(state: PartitionState) -> None:
    """Raise InvariantViolation if ``state`` breaks a field invariant."""
    where = f"{state.topic}-{state.partition} on broker {state.broker_id}"
    if not state.log_start_offset <= state.high_watermark <= state.log_end_offset:
        raise InvariantViolation(
            f"{where}: need log_start {state.log_start_offset} <= hw {state.high_watermark}"
            f" <= leo {state.log_end_offset}"
        )
    if state.isr & state.elr:
        raise InvariantViolation(f"{where}: isr {sorted(state.isr)} and elr {sorted(state.elr)} overlap")
    if state.role is Role.LEADER:
        if state.broker_id not in state.isr and not state.fenced:
            raise InvariantViolation(f"{where}: leader not in its own ISR {sorted(state.isr)}")
        if set(state.observers) & state.maximal_isr:
            raise InvariantViolation(f"{where}: observer in ISR {sorted(state.maximal_isr)}")
        for replica, prog in state.progress.items():
            if prog.log_end_offset > state.log_end_offset:
                raise InvariantViolation(
                    f"{where}: follower {replica} LEO {prog.log_end_offset} > leader LEO {state.log_end_offset}"
                )
    elif state.pending_isr is not None or state.pending_produces:
        raise InvariantViolation(f"{where}: a {state.role.value} holds leader-only pending work")
    latest = state.epochs.latest_start_offset
    if latest is not None and latest > state.log_end_offset:
        raise InvariantViolation(f"{where}: epoch cache starts at {latest} beyond LEO {state.log_end_offset}")
