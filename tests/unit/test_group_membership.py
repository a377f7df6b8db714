"""The pure group membership core (replication/group_membership.py): Kafka's classic protocol rules."""

from __future__ import annotations

import itertools

import pytest

from ads_spark.errors import ErrorCode, InvalidRequestError
from ads_spark.replication import group_membership as gm
from ads_spark.replication.group_membership import GroupConfig, GroupState, JoinReply, PersistGroup, SyncReply

E = ErrorCode
NO_DELAY = GroupConfig(min_session_timeout_ms=1000, max_session_timeout_ms=60_000, initial_rebalance_delay_ms=0)
SESSION_MS = 10_000
REBALANCE_MS = 20_000
_ids = itertools.count()


def join_request(member_id="", client="c", instance=None, protocols=(("range", b"t0"),), session_ms=SESSION_MS,
                 rebalance_ms=REBALANCE_MS, protocol_type="consumer", group_id="g"):
    return gm.JoinRequest(group_id, member_id, instance, client, "/10.0.0.1", session_ms, rebalance_ms,
                          protocol_type, tuple(protocols))


def do_join(group, now_ms, config=NO_DELAY, **kw):
    handle = next(_ids)
    group, effects = gm.join(group, join_request(**kw), handle, config=config, now_ms=now_ms,
                             fresh_id=f"u{handle}")
    return group, handle, effects


def reply_to(effects, handle):
    found = [e for e in effects if isinstance(e, (JoinReply, SyncReply)) and e.handle == handle]
    assert len(found) <= 1, f"handle {handle} answered twice: {found}"
    return found[0] if found else None


def new_member(group, now_ms, config=NO_DELAY, **kw):
    """KIP-394's two steps: learn the id, then join with it. Returns (group, member_id, join handle, effects)."""
    group, handle, effects = do_join(group, now_ms, config, **kw)
    first = reply_to(effects, handle)
    if kw.get("instance") is not None:  # static members skip KIP-394's first step
        return group, group.static_members[kw["instance"]], handle, effects
    assert first.error is E.MEMBER_ID_REQUIRED and first.member_id.startswith(kw.get("client", "c") + "-")
    group, handle, effects = do_join(group, now_ms, config, **{**kw, "member_id": first.member_id})
    return group, first.member_id, handle, effects


def leader_sync(group, leader_id, now_ms, assignments=None):
    assignments = assignments or {m: f"A:{m}".encode() for m in group.members}
    handle = next(_ids)
    group, effects = gm.sync(group, gm.SyncRequest("g", leader_id, None, group.generation_id,
                                                   tuple(assignments.items())), handle, now_ms=now_ms)
    return group, handle, effects


def stable_group(clients=("a", "b"), now_ms=0, instances=None, session_ms=SESSION_MS):
    """A STABLE group with one member per client, through join, sync and the persisted assignment."""
    group = None
    ids = []
    handles = []
    for i, client in enumerate(clients):
        instance = instances[i] if instances else None
        group, member_id, handle, effects = new_member(group, now_ms, client=client, instance=instance,
                                                       session_ms=session_ms)
        ids.append(member_id)
        handles.append(handle)
        if i < len(clients) - 1:
            assert group.state is GroupState.PREPARING_REBALANCE or i == 0
        # the earlier members rejoin for the rebalance this join started
        for j, other in enumerate(ids[:-1]):
            if group.state is GroupState.PREPARING_REBALANCE and not group.members[other].awaiting_join:
                group, _, effects = do_join(group, now_ms, client=clients[j], member_id=other,
                                            instance=instances[j] if instances else None, session_ms=session_ms)
    assert group.state is GroupState.COMPLETING_REBALANCE, group.state
    group, handle, effects = leader_sync(group, group.leader_id, now_ms)
    (persist,) = [e for e in effects if isinstance(e, PersistGroup)]
    assert persist.answers_syncs and group.state is GroupState.COMPLETING_REBALANCE
    group, effects = gm.persist_done(group, persist.generation_id, E.NONE, now_ms=now_ms)
    assert group.state is GroupState.STABLE
    return group, ids


def test_first_join_gets_member_id_required_and_a_coordinator_minted_id_kip394():
    group, handle, effects = do_join(None, 0, client="app")
    (reply,) = effects
    assert reply.error is E.MEMBER_ID_REQUIRED and reply.member_id == f"app-u{handle}"
    assert group.state is GroupState.EMPTY and not group.members and reply.member_id in group.pending_members
    # the id is only pending: a lost answer leaves no member; it expires after the session timeout
    group, effects = gm.tick(group, now_ms=SESSION_MS)
    assert not group.pending_members


def test_a_single_member_forms_generation_1_as_leader_with_every_members_metadata():
    group, member_id, handle, effects = new_member(None, 0, client="a", protocols=(("range", b"meta-a"),))
    reply = reply_to(effects, handle)
    assert reply.error is E.NONE and reply.generation_id == 1 and reply.leader_id == member_id
    assert reply.protocol_name == "range" and reply.protocol_type == "consumer"
    assert [(m.member_id, m.metadata) for m in reply.members] == [(member_id, b"meta-a")]
    assert group.state is GroupState.COMPLETING_REBALANCE


def test_the_leaders_assignment_is_persisted_before_any_sync_is_answered():
    group, (a, b) = stable_group()
    # a new member: a rebalance, both rejoin, generation 3 (1: a alone, 2: a+b)
    assert group.generation_id == 2 and group.leader_id == a
    follower_handle = next(_ids)
    group2, _, _, _ = new_member(group, 5, client="c")
    group2, _, effects = do_join(group2, 5, client="a", member_id=a)
    group2, _, effects2 = do_join(group2, 5, client="b", member_id=b)
    assert group2.state is GroupState.COMPLETING_REBALANCE and group2.generation_id == 3
    group2, effects = gm.sync(group2, gm.SyncRequest("g", b, None, 3), follower_handle, now_ms=6)
    assert effects == []  # the follower waits for the leader
    group2, leader_handle, effects = leader_sync(group2, a, 7)
    (persist,) = effects
    assert isinstance(persist, PersistGroup) and persist.group.state is GroupState.STABLE
    assert persist.group.members[b].assignment == f"A:{b}".encode()
    group2, effects = gm.persist_done(group2, 3, E.NONE, now_ms=8)
    replies = {e.handle: e for e in effects}
    assert replies[follower_handle].assignment == f"A:{b}".encode() and replies[follower_handle].error is E.NONE
    assert replies[leader_handle].assignment == f"A:{a}".encode()
    assert group2.state is GroupState.STABLE and all(m.assignment_generation == 3 for m in group2.members.values())


def test_a_failed_assignment_write_answers_the_syncs_with_the_error_and_rebalances():
    group, member_id, _, _ = new_member(None, 0, client="a")
    group, handle, effects = leader_sync(group, member_id, 1)
    group, effects = gm.persist_done(group, 1, E.NOT_COORDINATOR, now_ms=2)
    assert reply_to(effects, handle).error is E.NOT_COORDINATOR
    assert group.state is GroupState.PREPARING_REBALANCE


def test_protocol_chosen_is_one_every_member_supports_by_vote():
    group, a, _, _ = new_member(None, 0, client="a", protocols=(("roundrobin", b""), ("range", b"")))
    group, b, _, _ = new_member(group, 0, client="b", protocols=(("range", b""), ("roundrobin", b"")))
    group, c, hc, _ = new_member(group, 0, client="c", protocols=(("range", b""),))
    group, _, _ = do_join(group, 0, client="a", member_id=a, protocols=(("roundrobin", b""), ("range", b"")))
    group, _, effects = do_join(group, 0, client="b", member_id=b, protocols=(("range", b""), ("roundrobin", b"")))
    assert group.protocol_name == "range"  # c supports only range
    # a member supporting nothing in common is refused, changing nothing
    before = group
    group, h, effects = do_join(group, 0, client="d", protocols=(("sticky", b""),))
    assert reply_to(effects, h).error is E.INCONSISTENT_GROUP_PROTOCOL and group is before
    group, h, effects = do_join(group, 0, client="d", protocol_type="connect")
    assert reply_to(effects, h).error is E.INCONSISTENT_GROUP_PROTOCOL


def test_heartbeat_errors_rebalance_in_progress_illegal_generation_unknown_member():
    group, (a, b) = stable_group()
    hb = lambda g, m, gen, now: gm.heartbeat(g, gm.HeartbeatRequest("g", m, None, gen), now_ms=now)  # noqa: E731
    assert hb(group, a, 2, 1)[1] is E.NONE
    assert hb(group, a, 1, 1)[1] is E.ILLEGAL_GENERATION
    assert hb(group, "nobody", 2, 1)[1] is E.UNKNOWN_MEMBER_ID
    assert hb(None, a, 2, 1)[1] is E.UNKNOWN_MEMBER_ID
    group, _, _ = do_join(group, 2, client="b", member_id=b, protocols=(("range", b"t0,t1"),))  # new metadata
    assert group.state is GroupState.PREPARING_REBALANCE
    assert hb(group, a, 2, 3)[1] is E.REBALANCE_IN_PROGRESS


def test_session_expiry_removes_the_member_and_the_others_rebalance_without_it():
    group, (a, b) = stable_group()
    group, _ = gm.heartbeat(group, gm.HeartbeatRequest("g", a, None, 2), now_ms=SESSION_MS - 1)
    group, effects = gm.tick(group, now_ms=SESSION_MS)  # b's session (from 0) is over; a's is not
    assert set(group.members) == {a} and group.state is GroupState.PREPARING_REBALANCE
    group, h, effects = do_join(group, SESSION_MS + 1, client="a", member_id=a)
    reply = reply_to(effects, h)
    assert reply.generation_id == 3 and reply.leader_id == a and [m.member_id for m in reply.members] == [a]


def test_a_member_that_does_not_rejoin_within_the_rebalance_timeout_is_removed():
    group, (a, b) = stable_group()
    group, h, effects = do_join(group, 100, client="a", member_id=a, protocols=(("range", b"t9"),))
    assert group.state is GroupState.PREPARING_REBALANCE and reply_to(effects, h) is None
    assert gm.next_deadline_ms(group) <= 100 + REBALANCE_MS
    group, effects = gm.tick(group, now_ms=100 + REBALANCE_MS)
    assert set(group.members) == {a} and reply_to(effects, h).generation_id == 3


def test_leader_removed_hands_leadership_to_a_remaining_member():
    group, (a, b) = stable_group()
    group, result, effects = gm.leave(group, gm.LeaveRequest("g", (gm.LeaveMember(a),)), now_ms=5)
    assert result.members[0][1] is E.NONE and group.leader_id == b
    group, h, effects = do_join(group, 6, client="b", member_id=b)
    assert reply_to(effects, h).leader_id == b and group.generation_id == 3


def test_last_member_leaving_empties_the_group_with_a_new_generation_persisted():
    group, (a, b) = stable_group()
    group, result, effects = gm.leave(group, gm.LeaveRequest("g", (gm.LeaveMember(a), gm.LeaveMember(b),
                                                                   gm.LeaveMember("ghost"))), now_ms=9)
    assert [e for _, e in result.members] == [E.NONE, E.NONE, E.UNKNOWN_MEMBER_ID]
    assert group.state is GroupState.EMPTY and group.generation_id == 3 and group.state_timestamp_ms == 9
    (persist,) = effects
    assert persist.group.state is GroupState.EMPTY and not persist.answers_syncs


def test_known_member_rejoining_stable_with_same_metadata_gets_the_current_generation():
    group, (a, b) = stable_group()
    group, h, effects = do_join(group, 1, client="b", member_id=b)
    reply = reply_to(effects, h)
    assert group.state is GroupState.STABLE and reply.generation_id == 2 and reply.members == ()
    # the leader rejoining starts a rebalance (it may want to reassign), as in Kafka
    group, h, effects = do_join(group, 1, client="a", member_id=a)
    assert group.state is GroupState.PREPARING_REBALANCE and reply_to(effects, h) is None


def test_static_member_rejoining_with_a_new_id_fences_the_old_one_without_a_rebalance_kip345():
    group, (a, b) = stable_group(instances=("i-a", "i-b"))
    assert group.static_members == {"i-a": a, "i-b": b}
    group, h, effects = do_join(group, 50, client="a", instance="i-a")  # the restarted instance
    reply = reply_to(effects, h)
    new_a = reply.member_id
    assert reply.error is E.NONE and new_a != a and reply.generation_id == 2
    assert reply.leader_id == a  # the old id: the replaced leader does not reassign
    assert group.state is GroupState.STABLE and group.leader_id == new_a and group.static_members["i-a"] == new_a
    assert group.members[new_a].assignment == f"A:{a}".encode()
    assert any(isinstance(e, PersistGroup) and not e.answers_syncs for e in effects)
    assert gm.heartbeat(group, gm.HeartbeatRequest("g", a, "i-a", 2), now_ms=51)[1] is E.FENCED_INSTANCE_ID
    handle = next(_ids)
    _, effects = gm.sync(group, gm.SyncRequest("g", a, "i-a", 2), handle, now_ms=51)
    assert reply_to(effects, handle).error is E.FENCED_INSTANCE_ID
    _, effects = gm.sync(group, gm.SyncRequest("g", new_a, "i-a", 2), handle, now_ms=51)
    assert reply_to(effects, handle).assignment == f"A:{a}".encode()


def test_static_member_rejoining_with_new_metadata_rebalances_only_if_the_group_protocol_would_change():
    """Kafka's updateStaticMemberAndRebalance: a restarted cooperative-sticky member sends new user data
    (its generation, -1 after a restart); only a change of the selected protocol rebalances."""
    group, (a, b) = stable_group(instances=("i-a", "i-b"))
    group, h, effects = do_join(group, 50, client="a", instance="i-a", protocols=(("range", b"new user data"),))
    assert reply_to(effects, h).error is E.NONE and group.state is GroupState.STABLE and group.generation_id == 2
    group, (a,) = stable_group(clients=("a",), instances=("i-a",))
    group, h, effects = do_join(group, 60, client="a", instance="i-a",
                                protocols=(("roundrobin", b"t0"), ("range", b"t0")))  # its vote now changes it
    reply = reply_to(effects, h)  # a one-member group's rebalance completes at once: a new generation
    assert reply.error is E.NONE and (reply.generation_id, reply.protocol_name) == (2, "roundrobin")


def test_static_member_that_does_not_rejoin_stays_through_the_rebalance():
    group, (a, b) = stable_group(instances=("i-a", "i-b"), session_ms=50_000)  # b is restarting, say
    group, c, h, _ = new_member(group, 10, client="c", instance="i-c")
    group, _, _ = do_join(group, 10, client="a", member_id=a, instance="i-a")
    group, effects = gm.tick(group, now_ms=10 + REBALANCE_MS)
    assert set(group.members) == {a, b, c} and reply_to(effects, h).member_id == c
    assert group.state is GroupState.COMPLETING_REBALANCE and group.generation_id == 3


def test_leave_by_group_instance_id_alone():
    group, (a, b) = stable_group(instances=("i-a", "i-b"))
    group, result, _ = gm.leave(group, gm.LeaveRequest("g", (gm.LeaveMember("", "i-b"),
                                                            gm.LeaveMember("", "i-zz"))), now_ms=1)
    assert [e for _, e in result.members] == [E.NONE, E.UNKNOWN_MEMBER_ID] and set(group.members) == {a}


def test_group_max_size_refuses_one_member_too_many():
    config = GroupConfig(1000, 60_000, 0, max_size=1)
    group, a, _, _ = new_member(None, 0, config, client="a")
    group, h, effects = do_join(group, 0, config, client="b")
    assert reply_to(effects, h).error is E.GROUP_MAX_SIZE_REACHED and set(group.members) == {a}
    assert not group.pending_members


def test_request_checks_session_timeout_group_id_and_unknown_member():
    _, h, effects = do_join(None, 0, session_ms=999)
    assert reply_to(effects, h).error is E.INVALID_SESSION_TIMEOUT
    _, h, effects = do_join(None, 0, group_id="")
    assert reply_to(effects, h).error is E.INVALID_GROUP_ID
    group, h, effects = do_join(None, 0, member_id="made-up")
    assert group is None and reply_to(effects, h).error is E.UNKNOWN_MEMBER_ID
    with pytest.raises(InvalidRequestError, match="rebalance_timeout_ms"):
        do_join(None, 0, rebalance_ms=-1)
    with pytest.raises(InvalidRequestError, match="each protocol once"):
        do_join(None, 0, protocols=(("range", b""), ("range", b"x")))
    assert gm.check_group_id("x" * 255) is E.NONE and gm.check_group_id("x" * 256) is E.INVALID_GROUP_ID


def test_initial_rebalance_delay_waits_and_extends_while_members_join_bounded_by_the_rebalance_timeout():
    config = GroupConfig(1000, 60_000, initial_rebalance_delay_ms=3000)
    group, a, ha, effects = new_member(None, 0, config, client="a", rebalance_ms=7000)
    assert group.state is GroupState.PREPARING_REBALANCE and reply_to(effects, ha) is None
    group, effects = gm.tick(group, now_ms=2999)
    assert reply_to(effects, ha) is None
    group, b, hb_, _ = new_member(group, 2000, config, client="b", rebalance_ms=7000)
    group, effects = gm.tick(group, now_ms=3000)  # b joined during the delay: wait another 3000 ms
    assert group.state is GroupState.PREPARING_REBALANCE and group.rebalance_deadline_ms == 6000
    group, effects = gm.tick(group, now_ms=6000)
    assert group.state is GroupState.COMPLETING_REBALANCE and reply_to(effects, ha).generation_id == 1
    assert {m.member_id for m in reply_to(effects, ha).members} == {a, b}


def test_a_member_that_never_syncs_is_removed_after_the_rebalance_timeout():
    group, (a, b) = stable_group()
    group, _, _ = do_join(group, 0, client="a", member_id=a)
    group, _, _ = do_join(group, 0, client="b", member_id=b)
    group, _, _ = leader_sync(group, a, 1)
    group, _ = gm.persist_done(group, 3, E.NONE, now_ms=1)
    assert group.state is GroupState.STABLE and group.pending_sync == {b}
    for now_ms in (9_000, 18_000):  # both heartbeat; only a synced
        for member_id in (a, b):
            group, error = gm.heartbeat(group, gm.HeartbeatRequest("g", member_id, None, 3), now_ms=now_ms)
            assert error is E.NONE
    group, effects = gm.tick(group, now_ms=REBALANCE_MS)
    assert set(group.members) == {a} and group.state is GroupState.PREPARING_REBALANCE


def test_unload_answers_every_waiting_request_not_coordinator():
    group, a, _, _ = new_member(None, 0, GroupConfig(1000, 60_000, 3000), client="a")
    (reply,) = gm.unload(group)
    assert reply.error is E.NOT_COORDINATOR


def test_an_outstanding_kip394_id_holds_the_rebalance_until_it_joins_or_expires():
    group, (a,) = stable_group(clients=("a",))
    group, h, effects = do_join(group, 0, client="c")  # c learns its id, then goes quiet
    (pending_reply,) = effects
    assert pending_reply.error is E.MEMBER_ID_REQUIRED and group.state is GroupState.STABLE
    group, h, effects = do_join(group, 1, client="a", member_id=a)  # the leader rejoins: a rebalance
    assert group.state is GroupState.PREPARING_REBALANCE and reply_to(effects, h) is None
    group, effects = gm.tick(group, now_ms=SESSION_MS)  # c's id expired: the join completes without it
    assert reply_to(effects, h).generation_id == 2 and set(group.members) == {a}


def test_a_member_that_lost_its_join_answer_gets_the_generation_again_while_completing():
    group, (a, b) = stable_group()
    group, _, _ = do_join(group, 1, client="a", member_id=a)
    group, _, _ = do_join(group, 1, client="b", member_id=b)
    assert group.state is GroupState.COMPLETING_REBALANCE
    group, h, effects = do_join(group, 2, client="a", member_id=a)
    reply = reply_to(effects, h)
    assert reply.generation_id == 3 and {m.member_id for m in reply.members} == {a, b}
    assert group.state is GroupState.COMPLETING_REBALANCE


def test_a_stale_persist_done_is_ignored():
    group, (a, b) = stable_group()
    assert gm.persist_done(group, 1, E.NONE, now_ms=5) == (group, [])
