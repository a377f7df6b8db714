"""The rebalance machinery of a group: preparing, completing the join phase, removal, time.

Kafka's prepareRebalance / DelayedJoin / InitialDelayedJoin / onCompleteJoin /
heartbeat and pending-sync expiry, as pure functions of a ``Group`` and
``now_ms``; ``group_membership`` calls them from its inputs. Kept apart so each
file reads in one sitting; nothing here is called by the shell directly.
"""

from __future__ import annotations

from ads_spark.errors import ErrorCode
from ads_spark.replication.group_values import (
    Effect, Group, GroupState, JoinedMember, JoinReply, Member, PersistGroup, SyncReply)
from ads_spark.replication.state import evolve

E = ErrorCode
__all__ = ["evolve", "set_member", "remove_member", "with_state", "maybe_prepare_rebalance",
           "complete_join_if_ready", "tick_rebalance"]


def with_state(group: Group, state: GroupState, now_ms: int) -> Group:
    return evolve(group, state=state, state_timestamp_ms=now_ms)


def set_member(group: Group, member: Member) -> Group:
    """The group with ``member`` stored under its id (added last if new)."""
    return evolve(group, members={**group.members, member.member_id: member})


def remove_member(group: Group, member_id: str, now_ms: int) -> tuple[Group, list[Effect]]:
    """Drop a member; its waiting requests are answered UNKNOWN_MEMBER_ID; a new leader if it led."""
    member = group.members[member_id]
    effects: list[Effect] = []
    if member.join_handle is not None:
        effects.append(JoinReply(member.join_handle, E.UNKNOWN_MEMBER_ID, member_id=member_id))
    if member.sync_handle is not None:
        effects.append(SyncReply(member.sync_handle, E.UNKNOWN_MEMBER_ID))
    members = {k: m for k, m in group.members.items() if k != member_id}
    static = {k: v for k, v in group.static_members.items() if v != member_id}
    leader = group.leader_id
    if leader == member_id:
        leader = next(iter(members), None)  # Kafka: the first remaining member
    pending_assignments = group.pending_assignments
    if group.persisting_generation is not None:
        pending_assignments = {k: v for k, v in pending_assignments.items() if k != member_id}
    pending_sync = group.pending_sync - {member_id}
    group = evolve(group, members=members, static_members=static, leader_id=leader, pending_sync=pending_sync,
                   sync_deadline_ms=group.sync_deadline_ms if pending_sync else None,
                   pending_assignments=pending_assignments)
    return group, effects


def maybe_prepare_rebalance(group: Group, now_ms: int, initial_delay_ms: int = 0) -> tuple[Group, list[Effect]]:
    """Start a rebalance from EMPTY/COMPLETING/STABLE; while preparing, complete it if everyone is in."""
    if group.state is GroupState.PREPARING_REBALANCE:
        return complete_join_if_ready(group, now_ms)
    effects: list[Effect] = []
    if group.state is GroupState.COMPLETING_REBALANCE:
        # The generation being synced is abandoned: every waiting sync learns it (Kafka's
        # resetAndPropagateAssignmentError).
        members = {}
        for member_id, member in group.members.items():
            if member.sync_handle is not None:
                effects.append(SyncReply(member.sync_handle, E.REBALANCE_IN_PROGRESS))
            members[member_id] = evolve(member, sync_handle=None)
        group = evolve(group, members=members, persisting_generation=None, pending_assignments={})
    group = evolve(group, pending_sync=frozenset(), sync_deadline_ms=None)
    rebalance_ms = group.max_rebalance_timeout_ms()
    if group.state is GroupState.EMPTY and initial_delay_ms > 0:
        group = evolve(with_state(group, GroupState.PREPARING_REBALANCE, now_ms),
                       rebalance_deadline_ms=now_ms + initial_delay_ms, initial_delay_step_ms=initial_delay_ms,
                       initial_delay_remaining_ms=max(rebalance_ms - initial_delay_ms, 0), new_member_added=False)
        return group, effects
    group = evolve(with_state(group, GroupState.PREPARING_REBALANCE, now_ms),
                   rebalance_deadline_ms=now_ms + rebalance_ms)
    group, more = complete_join_if_ready(group, now_ms)
    return group, effects + more


def complete_join_if_ready(group: Group, now_ms: int) -> tuple[Group, list[Effect]]:
    """Kafka's DelayedJoin.tryComplete: every member waits in a join and no KIP-394 id is outstanding."""
    if group.state is not GroupState.PREPARING_REBALANCE or group.initial_delay_step_ms:
        return group, []
    if group.pending_members or not all(m.awaiting_join for m in group.members.values()):
        return group, []
    return complete_join(group, now_ms)


def complete_join(group: Group, now_ms: int) -> tuple[Group, list[Effect]]:
    """The join phase ends: drop who did not rejoin (static members stay), start the next generation."""
    effects: list[Effect] = []
    for member in list(group.members.values()):
        if not member.awaiting_join and member.group_instance_id is None:
            group, removed = remove_member(group, member.member_id, now_ms)
            effects += removed
    base = evolve(group, rebalance_deadline_ms=None, initial_delay_step_ms=0, initial_delay_remaining_ms=0,
                  new_member_added=False)
    if not group.members:
        empty = evolve(with_state(base, GroupState.EMPTY, now_ms), generation_id=group.generation_id + 1,
                       protocol_name=None, leader_id=None)
        return empty, effects + [PersistGroup(empty.group_id, empty.generation_id, empty)]
    joined = [m for m in group.members.values() if m.awaiting_join]
    if not joined:
        # Only static members that did not rejoin: wait another rebalance timeout for their sessions
        # to expire (Kafka postpones the completion the same way).
        return evolve(group, rebalance_deadline_ms=now_ms + group.max_rebalance_timeout_ms()), effects
    leader_id = group.leader_id if group.members[group.leader_id].awaiting_join else joined[0].member_id
    members = {k: evolve(m, join_handle=None, last_heartbeat_ms=now_ms) for k, m in group.members.items()}
    new = evolve(with_state(base, GroupState.COMPLETING_REBALANCE, now_ms), generation_id=group.generation_id + 1,
                 protocol_name=select_protocol(group, leader_id), leader_id=leader_id, members=members,
                 pending_sync=frozenset(members), sync_deadline_ms=now_ms + group.max_rebalance_timeout_ms())
    for member in joined:
        effects.append(_generation_reply(new, member))
    return new, effects


def _generation_reply(group: Group, member: Member) -> JoinReply:
    members: tuple[JoinedMember, ...] = ()
    if member.member_id == group.leader_id:
        members = tuple(JoinedMember(m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name))
                        for m in group.members.values())
    return JoinReply(member.join_handle, E.NONE, member_id=member.member_id, generation_id=group.generation_id,
                     protocol_type=group.protocol_type, protocol_name=group.protocol_name,
                     leader_id=group.leader_id, members=members)


def select_protocol(group: Group, leader_id: str) -> str:
    """Kafka's selectProtocol: among protocols every member supports, each member votes for its first;
    most votes wins, ties going to the earlier one in the leader's list."""
    members = list(group.members.values())
    candidates = [name for name, _ in group.members[leader_id].protocols if all(m.supports(name) for m in members)]
    votes = {name: 0 for name in candidates}
    for member in members:
        first = next(name for name, _ in member.protocols if name in votes)
        votes[first] += 1
    return max(candidates, key=lambda name: (votes[name], -candidates.index(name)))


def tick_rebalance(group: Group, now_ms: int) -> tuple[Group, list[Effect]]:
    effects: list[Effect] = []
    expired_pending = [k for k, t in group.pending_members.items() if t <= now_ms]
    if expired_pending:
        group = evolve(group, pending_members={k: t for k, t in group.pending_members.items() if t > now_ms})
    expired = [m.member_id for m in group.members.values()
               if not m.awaiting_join and not m.awaiting_sync and m.last_heartbeat_ms + m.session_timeout_ms <= now_ms]
    for member_id in expired:
        group, removed = remove_member(group, member_id, now_ms)
        effects += removed
    if expired:
        group, more = maybe_prepare_rebalance(group, now_ms)
        effects += more
    elif expired_pending:
        group, more = complete_join_if_ready(group, now_ms)
        effects += more
    if group.state is GroupState.PREPARING_REBALANCE and group.rebalance_deadline_ms <= now_ms:
        group, more = _rebalance_deadline(group, now_ms)
        effects += more
    if (group.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE) and group.sync_deadline_ms is not None
            and group.sync_deadline_ms <= now_ms):
        # Members that joined but never synced are gone (Kafka 3.2+ pending-sync timeout).
        for member_id in sorted(group.pending_sync):
            group, removed = remove_member(group, member_id, now_ms)
            effects += removed
        group, more = maybe_prepare_rebalance(group, now_ms)
        effects += more
    return group, effects


def _rebalance_deadline(group: Group, now_ms: int) -> tuple[Group, list[Effect]]:
    """The join phase's time is up; an initial delay is extended while members keep arriving."""
    if group.initial_delay_step_ms and group.new_member_added and group.initial_delay_remaining_ms > 0:
        step = min(group.initial_delay_step_ms, group.initial_delay_remaining_ms)
        return evolve(group, rebalance_deadline_ms=now_ms + step, new_member_added=False,
                      initial_delay_remaining_ms=max(group.initial_delay_remaining_ms - step, 0)), []
    return complete_join(group, now_ms)
