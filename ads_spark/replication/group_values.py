"""The values a consumer group's state machine is made of: the group, its members, requests, effects.

Kafka's classic group protocol (GroupCoordinator/GroupMetadata), protocol-neutral:
member metadata and assignments are opaque bytes, nothing here knows JSON or
Flight. Every value is frozen and every mapping inside one is replaced, never
mutated, so the broker shell, the simulation and the tests can keep old values.
The transitions live in ``group_membership``; the invariants of each field are
written beside it and checked by ``check_invariants`` after every transition
(a broken one raises ``InvariantViolation``: a bug, never an answer).

A *handle* is whatever hashable value the shell uses to find a waiting request
(an int request id, say): the core stores it in the member and gives it back in
the reply effect, possibly many calls later.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Hashable, Mapping, Union

from ads_spark.errors import ErrorCode, InvariantViolation

Handle = Hashable
CONSUMER_PROTOCOL_TYPE = "consumer"  # Kafka's ConsumerProtocol.PROTOCOL_TYPE
GROUP_ID_MAX_CHARS = 255
NO_GENERATION = -1  # the generation of a standalone (non-member) offset commit
UNKNOWN_TIMESTAMP = -1


class GroupState(Enum):
    """Kafka's group states; ``value`` is Kafka's display name (describe/list answers show it)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"  # only ever seen by the shell as "drop the group": the core returns None instead


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """The coordinator's broker keys that rule membership (config_groups.GROUP_BROKER_KEYS)."""

    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3000
    max_size: int = 1000


@dataclass(frozen=True, slots=True)
class Member:
    member_id: str
    group_instance_id: str | None  # static membership (KIP-345); None: dynamic
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str  # == the group's protocol_type
    protocols: tuple[tuple[str, bytes], ...]  # (name, metadata) in the client's order of preference
    assignment: bytes = b""
    assignment_generation: int = -1  # the generation ``assignment`` was given in; -1: none yet
    last_heartbeat_ms: int = 0
    join_handle: Handle | None = None  # a JoinGroup waiting for the rebalance to complete
    sync_handle: Handle | None = None  # a SyncGroup waiting for the leader's assignment to be stored

    @property
    def awaiting_join(self) -> bool:
        return self.join_handle is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_handle is not None

    def supports(self, protocol_name: str) -> bool:
        return any(name == protocol_name for name, _ in self.protocols)

    def metadata_for(self, protocol_name: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol_name:
                return metadata
        raise InvariantViolation(f"member {self.member_id} does not support protocol {protocol_name}")


@dataclass(frozen=True, slots=True)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0  # only grows (checked across every transition in group_membership)
    protocol_type: str | None = None  # set by the first member; None: only standalone commits so far
    protocol_name: str | None = None  # set in COMPLETING_REBALANCE and STABLE: every member supports it
    leader_id: str | None = None  # a member whenever there are members, None otherwise
    members: Mapping[str, Member] = field(default_factory=dict)  # member id -> Member, join order
    static_members: Mapping[str, str] = field(default_factory=dict)  # instance id -> member id, both ways exact
    pending_members: Mapping[str, int] = field(default_factory=dict)  # KIP-394 ids handed out -> expiry ms
    pending_sync: frozenset[str] = frozenset()  # members of this generation that have not synced (a subset)
    state_timestamp_ms: int = UNKNOWN_TIMESTAMP  # when the group entered its state (KIP-211 reads EMPTY's)
    rebalance_deadline_ms: int | None = None  # set exactly in PREPARING_REBALANCE
    initial_delay_step_ms: int = 0  # > 0: PREPARING_REBALANCE of an empty group waits (InitialDelayedJoin)
    initial_delay_remaining_ms: int = 0
    new_member_added: bool = False  # a member joined during the initial delay: extend it
    sync_deadline_ms: int | None = None  # members still in pending_sync at this time are removed
    persisting_generation: int | None = None  # the leader's assignment is being written (COMPLETING only)
    pending_assignments: Mapping[str, bytes] = field(default_factory=dict)  # member id -> assignment being written

    @property
    def is_empty(self) -> bool:
        return not self.members

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)


# ------------------------------------------------------------------ requests


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str  # "" the first time (KIP-394: answered MEMBER_ID_REQUIRED with a new id)
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class SyncRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    generation_id: int
    assignments: tuple[tuple[str, bytes], ...] = ()  # the leader's: member id -> assignment
    protocol_type: str | None = None  # when given, must be the group's (Kafka's SyncGroup v5)
    protocol_name: str | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    generation_id: int


@dataclass(frozen=True, slots=True)
class LeaveMember:
    member_id: str  # "" with a group_instance_id: the static member of that instance
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveRequest:
    group_id: str
    members: tuple[LeaveMember, ...]


@dataclass(frozen=True, slots=True)
class LeaveResult:
    error: ErrorCode
    members: tuple[tuple[LeaveMember, ErrorCode], ...] = ()


# ------------------------------------------------------------------- effects


@dataclass(frozen=True, slots=True)
class JoinedMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes  # for the selected protocol


@dataclass(frozen=True, slots=True)
class JoinReply:
    handle: Handle
    error: ErrorCode
    member_id: str = ""
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: tuple[JoinedMember, ...] = ()  # only in the leader's reply


@dataclass(frozen=True, slots=True)
class SyncReply:
    handle: Handle
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True, slots=True)
class PersistGroup:
    """Append ``group_records.group_metadata_record(group)`` acks=all, then call ``persist_done``.

    ``answers_syncs``: the leader's assignment; the waiting syncs are answered only
    once ``persist_done`` says the write succeeded (Kafka's storeGroup callback).
    Otherwise the write is Kafka's fire-and-forget (group emptied, static member
    replaced) and ``persist_done``'s error is ignored.
    """

    group_id: str
    generation_id: int
    group: Group
    answers_syncs: bool = False


Effect = Union[JoinReply, SyncReply, PersistGroup]


# ----------------------------------------------------------------- invariants


def check_invariants(group: Group) -> None:
    """Raise InvariantViolation naming the first broken rule."""

    def fail(rule: str) -> None:
        raise InvariantViolation(f"group {group.group_id!r} in {group.state.value}: {rule}")

    state, members = group.state, group.members
    if group.generation_id < 0:
        fail("generation is negative")
    if state is GroupState.DEAD:
        fail("a DEAD group is never kept (the core returns None)")
    if state is GroupState.EMPTY and members:
        fail("an EMPTY group has members")
    if state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE) and not members:
        fail("a group with a generation in progress has no members")
    if (group.leader_id is None) != (not members) or (members and group.leader_id not in members):
        fail(f"leader {group.leader_id!r} is not a member")
    for instance_id, member_id in group.static_members.items():
        if member_id not in members or members[member_id].group_instance_id != instance_id:
            fail(f"static member {instance_id!r} -> {member_id!r} is not that member")
    for member in members.values():
        instance_id = member.group_instance_id
        if instance_id is not None and group.static_members.get(instance_id) != member.member_id:
            fail(f"member {member.member_id} of instance {member.group_instance_id!r} is not in the static map")
        if member.protocol_type != group.protocol_type:
            fail(f"member {member.member_id} has protocol type {member.protocol_type!r}")
    if set(group.pending_members) & set(members):
        fail("a pending member id is also a member")
    if (group.rebalance_deadline_ms is not None) != (state is GroupState.PREPARING_REBALANCE):
        fail("a rebalance deadline exists exactly while preparing a rebalance")
    if group.initial_delay_step_ms and state is not GroupState.PREPARING_REBALANCE:
        fail("an initial delay outside PREPARING_REBALANCE")
    _check_generation_invariants(group, fail)


def _check_generation_invariants(group: Group, fail) -> None:
    state, members = group.state, group.members
    in_generation = state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE)
    if in_generation:
        if group.protocol_name is None:
            fail("no protocol selected")
        unsupported = [m.member_id for m in members.values() if not m.supports(group.protocol_name)]
        if unsupported:
            fail(f"members {unsupported} do not support the selected protocol {group.protocol_name}")
        if any(m.awaiting_join for m in members.values()):
            fail("a join is still waiting after the join phase completed")
    if not in_generation and (group.pending_sync or group.sync_deadline_ms is not None):
        fail("pending syncs outside a generation")
    if not group.pending_sync <= set(members):
        fail("a pending sync names a non-member")
    if state is not GroupState.COMPLETING_REBALANCE and any(m.awaiting_sync for m in members.values()):
        fail("a sync is waiting outside COMPLETING_REBALANCE")
    if group.persisting_generation is not None:
        if state is not GroupState.COMPLETING_REBALANCE or group.persisting_generation != group.generation_id:
            fail("an assignment is being written outside its generation's COMPLETING_REBALANCE")
        if set(group.pending_assignments) != set(members):
            fail("the assignment being written does not cover exactly the members")
    elif group.pending_assignments:
        fail("assignments pending with no write in flight")
    if state is GroupState.STABLE:
        stale = [m.member_id for m in members.values() if m.assignment_generation != group.generation_id]
        if stale:
            fail(f"members {stale} have no assignment of generation {group.generation_id}")
