"""Group membership: join, sync, heartbeat, leave and time, as Kafka's classic GroupCoordinator.

The inputs are ``join``, ``sync``, ``heartbeat``, ``leave``, ``tick``,
``persist_done`` and ``unload``; each takes the group (None when the shell has
none of that id) and ``now_ms`` and returns the new group (None: drop it) with
the effects to carry out in list order: replies to deliver by handle and
``PersistGroup`` writes. Randomness is an input too: ``join`` takes a fresh
uuid string per call, used only when it mints a member id.

States (Kafka's)::

    EMPTY --first member joins--> PREPARING_REBALANCE (initial delay: waits
      group.initial.rebalance.delay.ms, extended while members keep joining,
      bounded by the largest rebalance timeout)
    PREPARING_REBALANCE --every member rejoined, or the rebalance timeout (members
      that did not rejoin are removed, static ones kept)--> COMPLETING_REBALANCE
      with generation + 1, a protocol every member supports, join replies (the
      leader's names every member's metadata); or EMPTY (generation + 1) if none is left
    COMPLETING_REBALANCE --leader's sync written (PersistGroup, persist_done)--> STABLE
    STABLE / COMPLETING_REBALANCE --a member joins, changes metadata, leaves or
      expires, or the leader rejoins--> PREPARING_REBALANCE

What is persisted when: the group record is written when the leader's
assignment arrives (syncs answered after the write), when the group becomes
EMPTY, and when a static member is replaced in STABLE. A new coordinator loads
the last record (``group_records.replay``): STABLE with those members, or EMPTY.
"""

from __future__ import annotations

from ads_spark.errors import ErrorCode, InvalidRequestError, InvariantViolation
from ads_spark.replication.group_values import (
    CONSUMER_PROTOCOL_TYPE,
    GROUP_ID_MAX_CHARS,
    NO_GENERATION,
    UNKNOWN_TIMESTAMP,
    Effect,
    Group,
    GroupConfig,
    GroupState,
    Handle,
    HeartbeatRequest,
    JoinedMember,
    JoinReply,
    JoinRequest,
    LeaveMember,
    LeaveRequest,
    LeaveResult,
    Member,
    PersistGroup,
    SyncReply,
    SyncRequest,
    check_invariants,
)
from ads_spark.replication.group_rebalance import (
    complete_join_if_ready,
    evolve,
    maybe_prepare_rebalance,
    remove_member,
    select_protocol,
    set_member,
    tick_rebalance,
    with_state,
)

E = ErrorCode
__all__ = [
    # values, requests and effects (group_values), re-exported so the shell imports one module
    "CONSUMER_PROTOCOL_TYPE", "GROUP_ID_MAX_CHARS", "NO_GENERATION", "UNKNOWN_TIMESTAMP", "Effect", "Group",
    "GroupConfig", "GroupState", "Handle", "HeartbeatRequest", "JoinedMember", "JoinReply", "JoinRequest",
    "LeaveMember", "LeaveRequest", "LeaveResult", "Member", "PersistGroup", "SyncReply", "SyncRequest",
    "check_invariants",
    # inputs and helpers
    "new_group", "check_group_id", "join", "sync", "persist_done", "heartbeat", "leave", "tick",
    "next_deadline_ms", "unload", "validate_member", "join_reply",
]


def new_group(group_id: str, now_ms: int) -> Group:
    return Group(group_id=group_id, state_timestamp_ms=now_ms)


def check_group_id(group_id: object) -> ErrorCode:
    """INVALID_GROUP_ID unless a str of 1..255 characters without NUL or surrogates."""
    if not isinstance(group_id, str) or not 1 <= len(group_id) <= GROUP_ID_MAX_CHARS or "\x00" in group_id:
        return E.INVALID_GROUP_ID
    try:
        group_id.encode("utf-8")
    except UnicodeEncodeError:
        return E.INVALID_GROUP_ID
    return E.NONE


def _finish(old: Group | None, new: Group | None) -> Group | None:
    """Check the invariants of a changed group and that its generation did not go back."""
    if new is None or new is old:
        return new
    check_invariants(new)
    if old is not None and new.generation_id < old.generation_id:
        raise InvariantViolation(
            f"group {new.group_id}: generation went back {old.generation_id} -> {new.generation_id}")
    return new


def _check_join_request(req: JoinRequest) -> None:
    for name in ("session_timeout_ms", "rebalance_timeout_ms"):
        value = getattr(req, name)
        if not isinstance(value, int) or value < 0:
            raise InvalidRequestError(f"join_group: {name} must be an integer >= 0, not {value!r}")
    if not isinstance(req.protocols, tuple) or len({name for name, _ in req.protocols}) != len(req.protocols):
        raise InvalidRequestError("join_group: protocols must name each protocol once")


# ---------------------------------------------------------------------- join


def join(group: Group | None, req: JoinRequest, handle: Handle, *, config: GroupConfig, now_ms: int,
         fresh_id: str) -> tuple[Group | None, list[Effect]]:
    """A JoinGroup; its reply comes now or when the rebalance completes (a JoinReply for ``handle``)."""
    _check_join_request(req)

    def refuse(error: ErrorCode, member_id: str = req.member_id):
        return group, [JoinReply(handle, error, member_id=member_id)]

    if check_group_id(req.group_id) is not E.NONE:
        return refuse(E.INVALID_GROUP_ID)
    if not config.min_session_timeout_ms <= req.session_timeout_ms <= config.max_session_timeout_ms:
        return refuse(E.INVALID_SESSION_TIMEOUT)
    if group is None:
        if req.member_id:
            return refuse(E.UNKNOWN_MEMBER_ID)
        created = new_group(req.group_id, now_ms)
        new, effects = _join_checked(created, req, handle, config, now_ms, fresh_id)
        if new is created or (not new.members and not new.pending_members and new.generation_id == 0):
            return None, effects  # nothing worth keeping: Kafka would leave an empty group to expire
        return _finish(None, new), effects
    new, effects = _join_checked(group, req, handle, config, now_ms, fresh_id)
    return _finish(group, new), effects


def _join_checked(group: Group, req: JoinRequest, handle: Handle, config: GroupConfig, now_ms: int,
                  fresh_id: str) -> tuple[Group, list[Effect]]:
    if not _accepts_joining_member(group, req.member_id, config.max_size):
        effects: list[Effect] = [JoinReply(handle, E.GROUP_MAX_SIZE_REACHED, member_id=req.member_id)]
        if req.member_id in group.members:  # Kafka removes a member it refuses (the group shrank its bound)
            group, removed = remove_member(group, req.member_id, now_ms)
            group, more = maybe_prepare_rebalance(group, now_ms)
            effects += removed + more
        return group, effects
    if not req.member_id:
        return _join_new_member(group, req, handle, config, now_ms, fresh_id)
    return _join_known_member(group, req, handle, config, now_ms)


def _accepts_joining_member(group: Group, member_id: str, max_size: int) -> bool:
    """Kafka's acceptJoiningMember: counts waiting members while preparing, members otherwise."""
    member = group.members.get(member_id)
    if group.state is GroupState.EMPTY:
        return True
    if group.state is GroupState.PREPARING_REBALANCE:
        awaiting = sum(1 for m in group.members.values() if m.awaiting_join)
        return (member is not None and member.awaiting_join) or awaiting < max_size
    return member is not None or len(group.members) < max_size


def _supports_protocols(group: Group, member_id: str, protocol_type: str,
                        protocols: tuple[tuple[str, bytes], ...]) -> bool:
    """Kafka's supportsProtocols: same type, and one protocol every other member supports."""
    others = [m for m in group.members.values() if m.member_id != member_id]
    if not protocol_type or not protocols:
        return False
    if not others:
        return not group.members or protocol_type == group.protocol_type
    return protocol_type == group.protocol_type and any(
        all(m.supports(name) for m in others) for name, _ in protocols)


def _new_member(req: JoinRequest, member_id: str, handle: Handle, now_ms: int) -> Member:
    return Member(member_id=member_id, group_instance_id=req.group_instance_id, client_id=req.client_id,
                  client_host=req.client_host, session_timeout_ms=req.session_timeout_ms,
                  rebalance_timeout_ms=req.rebalance_timeout_ms, protocol_type=req.protocol_type,
                  protocols=req.protocols, last_heartbeat_ms=now_ms, join_handle=handle)


def _join_new_member(group: Group, req: JoinRequest, handle: Handle, config: GroupConfig, now_ms: int,
                     fresh_id: str) -> tuple[Group, list[Effect]]:
    if not _supports_protocols(group, "", req.protocol_type, req.protocols):
        return group, [JoinReply(handle, E.INCONSISTENT_GROUP_PROTOCOL)]
    member_id = f"{req.group_instance_id or req.client_id}-{fresh_id}"
    if member_id in group.members or member_id in group.pending_members:
        raise InvalidRequestError(f"join_group: the fresh member id {member_id} is already taken")
    if req.group_instance_id is not None:
        old_id = group.static_members.get(req.group_instance_id)
        if old_id is not None:
            return _replace_static_member(group, old_id, member_id, req, handle, now_ms)
        return _add_member_and_rebalance(group, _new_member(req, member_id, handle, now_ms), config, now_ms)
    # KIP-394: a dynamic member learns its id first, then joins with it (a lost answer leaves no member).
    pending = dict(group.pending_members)
    pending[member_id] = now_ms + req.session_timeout_ms
    return evolve(group, pending_members=pending), [JoinReply(handle, E.MEMBER_ID_REQUIRED, member_id=member_id)]


def _add_member_and_rebalance(group: Group, member: Member, config: GroupConfig,
                              now_ms: int) -> tuple[Group, list[Effect]]:
    changes: dict = {}
    if not group.members:
        changes["protocol_type"] = member.protocol_type
    if group.leader_id is None:
        changes["leader_id"] = member.member_id
    if member.group_instance_id is not None:
        changes["static_members"] = {**group.static_members, member.group_instance_id: member.member_id}
    if group.state is GroupState.PREPARING_REBALANCE and group.generation_id == 0:
        changes["new_member_added"] = True  # extends the initial rebalance delay
    pending = {k: v for k, v in group.pending_members.items() if k != member.member_id}
    group = evolve(group, pending_members=pending, **changes)
    group = set_member(group, member)
    return maybe_prepare_rebalance(group, now_ms, config.initial_rebalance_delay_ms)


def _replace_static_member(group: Group, old_id: str, new_id: str, req: JoinRequest, handle: Handle,
                           now_ms: int) -> tuple[Group, list[Effect]]:
    """KIP-345: a known instance rejoined with a new id; the old id is fenced (FENCED_INSTANCE_ID)."""
    old = group.members[old_id]
    effects: list[Effect] = []
    if old.join_handle is not None:
        effects.append(JoinReply(old.join_handle, E.FENCED_INSTANCE_ID, member_id=old_id))
    if old.sync_handle is not None:
        effects.append(SyncReply(old.sync_handle, E.FENCED_INSTANCE_ID))
    previous_leader = group.leader_id
    replaced = evolve(old, member_id=new_id, client_id=req.client_id, client_host=req.client_host,
                      session_timeout_ms=req.session_timeout_ms, rebalance_timeout_ms=req.rebalance_timeout_ms,
                      protocols=req.protocols, last_heartbeat_ms=now_ms, join_handle=handle, sync_handle=None)
    members = {(new_id if k == old_id else k): (replaced if k == old_id else m) for k, m in group.members.items()}
    rename = lambda k: new_id if k == old_id else k  # noqa: E731
    group = evolve(group, members=members, static_members={**group.static_members, req.group_instance_id: new_id},
                   leader_id=rename(group.leader_id), pending_sync=frozenset(map(rename, group.pending_sync)),
                   pending_assignments={rename(k): v for k, v in group.pending_assignments.items()})
    if group.state is GroupState.STABLE and select_protocol(group, group.leader_id) == group.protocol_name:
        # Kafka's rule (updateStaticMemberAndRebalance): only a change of the group's protocol rebalances; new
        # metadata alone does not (a restarted cooperative-sticky member sends generation -1 in its user data).
        # Answer at once with the current generation; the leader id is the one before the swap so a replaced
        # leader does not reassign (Kafka does the same).
        replaced = evolve(replaced, join_handle=None)
        group = set_member(group, replaced)
        effects.append(JoinReply(handle, E.NONE, member_id=new_id, generation_id=group.generation_id,
                                 protocol_type=group.protocol_type, protocol_name=group.protocol_name,
                                 leader_id=previous_leader))
        effects.append(PersistGroup(group.group_id, group.generation_id, group))
        return group, effects
    if group.state is GroupState.PREPARING_REBALANCE:
        group, more = complete_join_if_ready(group, now_ms)
    else:
        group, more = maybe_prepare_rebalance(group, now_ms)
    return group, effects + more


def _join_known_member(group: Group, req: JoinRequest, handle: Handle, config: GroupConfig,
                       now_ms: int) -> tuple[Group, list[Effect]]:
    if req.member_id in group.pending_members:
        if not _supports_protocols(group, req.member_id, req.protocol_type, req.protocols):
            return group, [JoinReply(handle, E.INCONSISTENT_GROUP_PROTOCOL, member_id=req.member_id)]
        return _add_member_and_rebalance(group, _new_member(req, req.member_id, handle, now_ms), config, now_ms)
    error = validate_member(group, req.member_id, req.group_instance_id)
    if error is E.NONE and not _supports_protocols(group, req.member_id, req.protocol_type, req.protocols):
        error = E.INCONSISTENT_GROUP_PROTOCOL
    if error is not E.NONE:
        return group, [JoinReply(handle, error, member_id=req.member_id)]
    member = group.members[req.member_id]
    same = member.protocols == req.protocols
    if group.state is GroupState.COMPLETING_REBALANCE and same or (
            group.state is GroupState.STABLE and same and req.member_id != group.leader_id):
        # The member lost the answer to its join: give it the current generation again.
        group = set_member(group, evolve(member, last_heartbeat_ms=now_ms))
        return group, [join_reply(group, req.member_id, handle)]
    effects: list[Effect] = []
    if member.join_handle is not None:  # superseded by this request (Kafka drops the old callback)
        effects.append(JoinReply(member.join_handle, E.REBALANCE_IN_PROGRESS, member_id=req.member_id))
    member = evolve(member, protocols=req.protocols, session_timeout_ms=req.session_timeout_ms,
                    rebalance_timeout_ms=req.rebalance_timeout_ms, client_id=req.client_id,
                    client_host=req.client_host, last_heartbeat_ms=now_ms, join_handle=handle)
    group = set_member(group, member)
    group, more = maybe_prepare_rebalance(group, now_ms)
    return group, effects + more


def validate_member(group: Group, member_id: str, group_instance_id: str | None) -> ErrorCode:
    """Kafka's validateCurrentMember: a static id fenced by a newer member id, or an unknown member."""
    if group_instance_id is not None:
        current = group.static_members.get(group_instance_id)
        if current is not None and current != member_id:
            return E.FENCED_INSTANCE_ID
    return E.NONE if member_id in group.members else E.UNKNOWN_MEMBER_ID


def join_reply(group: Group, member_id: str, handle: Handle) -> JoinReply:
    """The current generation as ``member_id`` sees it; the leader gets every member's metadata."""
    members: tuple[JoinedMember, ...] = ()
    if member_id == group.leader_id:
        members = tuple(JoinedMember(m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name))
                        for m in group.members.values())
    return JoinReply(handle, E.NONE, member_id=member_id, generation_id=group.generation_id,
                     protocol_type=group.protocol_type, protocol_name=group.protocol_name,
                     leader_id=group.leader_id, members=members)


# ---------------------------------------------------------------------- sync


def sync(group: Group | None, req: SyncRequest, handle: Handle, *, now_ms: int) -> tuple[Group | None, list[Effect]]:
    """A SyncGroup: the leader's assignment is written, then every member gets its own."""
    if group is None:
        return None, [SyncReply(handle, E.UNKNOWN_MEMBER_ID)]
    error = validate_member(group, req.member_id, req.group_instance_id)
    if error is E.NONE and req.generation_id != group.generation_id:
        error = E.ILLEGAL_GENERATION
    if error is E.NONE and (req.protocol_type not in (None, group.protocol_type)
                            or req.protocol_name not in (None, group.protocol_name)):
        error = E.INCONSISTENT_GROUP_PROTOCOL
    if error is E.NONE and group.state is GroupState.PREPARING_REBALANCE:
        error = E.REBALANCE_IN_PROGRESS
    if error is not E.NONE:
        return group, [SyncReply(handle, error)]
    member = group.members[req.member_id]
    pending_sync = group.pending_sync - {req.member_id}
    group = evolve(group, pending_sync=pending_sync,
                   sync_deadline_ms=group.sync_deadline_ms if pending_sync else None)
    if group.state is GroupState.STABLE:
        group = set_member(group, evolve(member, last_heartbeat_ms=now_ms))
        return _finish(group, group), [SyncReply(handle, E.NONE, member.assignment, group.protocol_type,
                                                 group.protocol_name)]
    effects: list[Effect] = []
    if member.sync_handle is not None:
        effects.append(SyncReply(member.sync_handle, E.REBALANCE_IN_PROGRESS))
    old = group
    group = set_member(group, evolve(member, last_heartbeat_ms=now_ms, sync_handle=handle))
    if req.member_id == group.leader_id and group.persisting_generation is None:
        given = dict(req.assignments)
        assignments = {member_id: given.get(member_id, b"") for member_id in group.members}
        group = evolve(group, persisting_generation=group.generation_id, pending_assignments=assignments)
        effects.append(PersistGroup(group.group_id, group.generation_id, _as_stable(group), answers_syncs=True))
    return _finish(old, group), effects


def _as_stable(group: Group) -> Group:
    """The group as it will be once the leader's assignment is stored (what the record says)."""
    members = {k: evolve(m, assignment=group.pending_assignments[k], assignment_generation=group.generation_id,
                         sync_handle=None)
               for k, m in group.members.items()}
    return evolve(group, state=GroupState.STABLE, members=members, persisting_generation=None,
                  pending_assignments={})


def persist_done(group: Group | None, generation_id: int, error: ErrorCode, *,
                 now_ms: int) -> tuple[Group | None, list[Effect]]:
    """A PersistGroup's append finished; only the leader's assignment write has anything waiting on it."""
    if group is None or group.persisting_generation != generation_id:
        return group, []  # a stale or fire-and-forget write
    effects: list[Effect] = []
    if error is E.NONE:
        stable = with_state(_as_stable(group), GroupState.STABLE, now_ms)
        for member in group.members.values():
            if member.sync_handle is not None:
                effects.append(SyncReply(member.sync_handle, E.NONE, stable.members[member.member_id].assignment,
                                         group.protocol_type, group.protocol_name))
        return _finish(group, stable), effects
    members = {k: evolve(m, sync_handle=None) for k, m in group.members.items()}
    for member in group.members.values():
        if member.sync_handle is not None:
            effects.append(SyncReply(member.sync_handle, error))
    new = evolve(group, members=members, persisting_generation=None, pending_assignments={})
    new, more = maybe_prepare_rebalance(new, now_ms)
    return _finish(group, new), effects + more


# ------------------------------------------------------- heartbeat and leave


def heartbeat(group: Group | None, req: HeartbeatRequest, *, now_ms: int) -> tuple[Group | None, ErrorCode]:
    if group is None:
        return None, E.UNKNOWN_MEMBER_ID
    error = validate_member(group, req.member_id, req.group_instance_id)
    if error is E.NONE and req.generation_id != group.generation_id:
        error = E.ILLEGAL_GENERATION
    if error is not E.NONE:
        return group, error
    group = set_member(group, evolve(group.members[req.member_id], last_heartbeat_ms=now_ms))
    if group.state is GroupState.PREPARING_REBALANCE:
        return group, E.REBALANCE_IN_PROGRESS
    return group, E.NONE


def leave(group: Group | None, req: LeaveRequest, *, now_ms: int) -> tuple[Group | None, LeaveResult, list[Effect]]:
    """LeaveGroup v3+: several members at once, each answered; then one rebalance."""
    if group is None:
        return None, LeaveResult(E.NONE, tuple((m, E.UNKNOWN_MEMBER_ID) for m in req.members)), []
    old = group
    answers: list[tuple[LeaveMember, ErrorCode]] = []
    effects: list[Effect] = []
    for leaving in req.members:
        if not leaving.member_id and leaving.group_instance_id is not None:
            member_id = group.static_members.get(leaving.group_instance_id)
            error = E.UNKNOWN_MEMBER_ID if member_id is None else E.NONE
        elif leaving.member_id in group.pending_members:
            pending = {k: v for k, v in group.pending_members.items() if k != leaving.member_id}
            group = evolve(group, pending_members=pending)
            answers.append((leaving, E.NONE))
            continue
        else:
            member_id = leaving.member_id
            error = validate_member(group, member_id, leaving.group_instance_id)
        answers.append((leaving, error))
        if error is E.NONE:
            group, removed = remove_member(group, member_id, now_ms)
            effects += removed
    group, more = maybe_prepare_rebalance(group, now_ms)
    return _finish(old, group), LeaveResult(E.NONE, tuple(answers)), effects + more


# ---------------------------------------------------------------------- time


def tick(group: Group | None, *, now_ms: int) -> tuple[Group | None, list[Effect]]:
    """Session and pending-member expiry, the rebalance timeout, the initial delay, the sync timeout."""
    if group is None:
        return None, []
    new, effects = tick_rebalance(group, now_ms)
    return _finish(group, new), effects


def next_deadline_ms(group: Group) -> int | None:
    """The earliest time a ``tick`` may change this group (None: only a request can)."""
    times = [m.last_heartbeat_ms + m.session_timeout_ms for m in group.members.values()
             if not m.awaiting_join and not m.awaiting_sync]
    times += list(group.pending_members.values())
    times += [t for t in (group.rebalance_deadline_ms, group.sync_deadline_ms) if t is not None]
    return min(times, default=None)


def unload(group: Group | None) -> list[Effect]:
    """This broker stopped coordinating the group: answer every waiting request NOT_COORDINATOR."""
    if group is None:
        return []
    effects: list[Effect] = []
    for member in group.members.values():
        if member.join_handle is not None:
            effects.append(JoinReply(member.join_handle, E.NOT_COORDINATOR, member_id=member.member_id))
        if member.sync_handle is not None:
            effects.append(SyncReply(member.sync_handle, E.NOT_COORDINATOR))
    return effects
