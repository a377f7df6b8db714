"""Committed offsets of a group (replication/group_offsets.py): commit checks, expiry (KIP-211), deletes."""

from __future__ import annotations

import pytest

from ads_spark.errors import ErrorCode, InvalidRequestError
from ads_spark.replication import group_membership as gm
from ads_spark.replication import group_offsets as go
from ads_spark.replication.group_membership import GroupConfig, GroupState, PersistGroup
from ads_spark.replication.group_offsets import CommitPartition, CommitRequest, OffsetAndMetadata

E = ErrorCode
CONFIG = GroupConfig(1000, 60_000, 0)
RETENTION_MS = 7 * 24 * 3600 * 1000
HOUR_MS = 3600 * 1000


def topics_of(metadata: bytes):
    """The tests' subscription format: comma-separated topics; b"?" cannot be decoded."""
    if metadata == b"?":
        return None
    return frozenset(metadata.decode().split(",")) if metadata else frozenset()


def one_member_group(subscription=b"t0", protocol_type="consumer", instance=None, now_ms=0):
    """A STABLE group with a single member: (group, member id)."""
    def join(group, member_id):
        req = gm.JoinRequest("g", member_id, instance, "c", "h", 10_000, 20_000, protocol_type,
                             (("range", subscription),))
        return gm.join(group, req, object(), config=CONFIG, now_ms=now_ms, fresh_id="u")

    group, (reply,) = join(None, "")
    if instance is None:
        group, effects = join(group, reply.member_id)
    member_id = group.leader_id
    group, effects = gm.sync(group, gm.SyncRequest("g", member_id, instance, 1, ((member_id, b"x"),)), 1,
                             now_ms=now_ms)
    (persist,) = [e for e in effects if isinstance(e, PersistGroup)]
    group, _ = gm.persist_done(group, 1, E.NONE, now_ms=now_ms)
    assert group.state is GroupState.STABLE
    return group, member_id


def commit(group, *parts, generation=-1, member="", instance=None, now_ms=100, max_bytes=4096):
    req = CommitRequest("g", generation, member, instance,
                        tuple(CommitPartition(t, p, o, 7, m) for t, p, o, m in parts))
    return go.check_commit(group, req, metadata_max_bytes=max_bytes, now_ms=now_ms)


def test_member_commit_is_checked_written_then_applied_and_counts_as_a_heartbeat():
    group, member_id = one_member_group()
    group, decision = commit(group, ("t0", 0, 42, "meta"), ("t0", 1, 7, ""), generation=1, member=member_id,
                             now_ms=5000)
    assert decision.error is E.NONE and set(decision.partition_errors.values()) == {E.NONE}
    assert decision.to_write[("t0", 0)] == OffsetAndMetadata(42, 7, "meta", 5000)
    assert group.members[member_id].last_heartbeat_ms == 5000
    offsets = go.apply_commit({}, decision.to_write)
    assert go.fetch_offsets(offsets, [("t0", 0), ("t9", 0)]) == [(("t0", 0), offsets[("t0", 0)]), (("t9", 0), None)]
    assert [tp for tp, _ in go.fetch_offsets(offsets, None)] == [("t0", 0), ("t0", 1)]


@pytest.mark.parametrize("generation,member,instance,expected", [
    (2, "MEMBER", None, E.ILLEGAL_GENERATION),
    (1, "stranger", None, E.UNKNOWN_MEMBER_ID),
    (-1, "", None, E.UNKNOWN_MEMBER_ID),  # standalone commits only while the group has no members
])
def test_commit_refusals_change_nothing(generation, member, instance, expected):
    group, member_id = one_member_group()
    member = member_id if member == "MEMBER" else member
    after, decision = commit(group, ("t0", 0, 1, ""), generation=generation, member=member, instance=instance)
    assert after is group and decision.error is expected and decision.partition_errors == {("t0", 0): expected}
    assert not decision.to_write


def test_static_member_commit_with_an_old_member_id_is_fenced():
    group, member_id = one_member_group(instance="i-1")
    _, decision = commit(group, ("t0", 0, 1, ""), generation=1, member="i-1-old", instance="i-1")
    assert decision.error is E.FENCED_INSTANCE_ID


def test_commit_while_completing_rebalance_is_rebalance_in_progress_and_allowed_while_preparing():
    group, a = one_member_group()
    req = gm.JoinRequest("g", "", None, "c", "h", 10_000, 20_000, "consumer", (("range", b"t0"),))
    group, (reply,) = gm.join(group, req, 1, config=CONFIG, now_ms=0, fresh_id="v")
    group, _ = gm.join(group, gm.JoinRequest(**{**_fields(req), "member_id": reply.member_id}), 2, config=CONFIG,
                       now_ms=0, fresh_id="w")
    assert group.state is GroupState.PREPARING_REBALANCE
    _, decision = commit(group, ("t0", 0, 1, ""), generation=1, member=a)
    assert decision.error is E.NONE  # the generation has not changed yet (Kafka allows it)
    group, _ = gm.join(group, gm.JoinRequest(**{**_fields(req), "member_id": a}), 3, config=CONFIG, now_ms=0,
                       fresh_id="x")
    assert group.state is GroupState.COMPLETING_REBALANCE
    _, decision = commit(group, ("t0", 0, 1, ""), generation=2, member=a)
    assert decision.error is E.REBALANCE_IN_PROGRESS


def _fields(value):
    return {name: getattr(value, name) for name in value.__slots__}


def test_standalone_commit_creates_an_empty_group_without_members():
    group, decision = commit(None, ("t0", 0, 5, ""), now_ms=9)
    assert decision.error is E.NONE and group.state is GroupState.EMPTY and group.protocol_type is None
    _, decision = commit(None, ("t0", 0, 5, ""), generation=3, member="m")
    assert decision.error is E.ILLEGAL_GENERATION


def test_metadata_too_large_is_refused_per_partition_and_the_others_written():
    _, decision = commit(None, ("t0", 0, 5, "é" * 3), ("t0", 1, 5, "abcde"), max_bytes=5)
    assert decision.partition_errors == {("t0", 0): E.OFFSET_METADATA_TOO_LARGE, ("t0", 1): E.NONE}
    assert list(decision.to_write) == [("t0", 1)]


def test_malformed_commit_is_refused_naming_the_field():
    with pytest.raises(InvalidRequestError, match="named twice"):
        commit(None, ("t0", 0, 5, ""), ("t0", 0, 6, ""))
    with pytest.raises(InvalidRequestError, match="offset of t0-0"):
        commit(None, ("t0", 0, -5, ""))


def test_standalone_offsets_expire_retention_after_their_commit():
    group, decision = commit(None, ("t0", 0, 5, ""), now_ms=0)
    offsets = go.apply_commit({}, decision.to_write)
    _, decision = commit(group, ("t0", 1, 5, ""), now_ms=HOUR_MS)
    offsets = go.apply_commit(offsets, decision.to_write)
    expire = lambda now: go.expire_offsets(group, offsets, now_ms=now, retention_ms=RETENTION_MS,  # noqa: E731
                                           subscribed_topics=topics_of)
    assert expire(RETENTION_MS - 1).expired == ()
    assert expire(RETENTION_MS) == go.ExpireDecision((("t0", 0),), group_dead=False)
    assert expire(RETENTION_MS + HOUR_MS) == go.ExpireDecision((("t0", 0), ("t0", 1)), group_dead=True)


def test_empty_groups_offsets_expire_retention_after_the_group_became_empty_kip211():
    group, member_id = one_member_group()
    group, decision = commit(group, ("t0", 0, 5, ""), generation=1, member=member_id, now_ms=0)
    offsets = go.apply_commit({}, decision.to_write)
    became_empty_ms = RETENTION_MS * 3  # the member consumed for a long time, then left
    group, _, _ = gm.leave(group, gm.LeaveRequest("g", (gm.LeaveMember(member_id),)), now_ms=became_empty_ms)
    assert group.state is GroupState.EMPTY
    decide = lambda now: go.expire_offsets(group, offsets, now_ms=now, retention_ms=RETENTION_MS,  # noqa: E731
                                           subscribed_topics=topics_of)
    assert decide(became_empty_ms + RETENTION_MS - 1).expired == ()
    assert decide(became_empty_ms + RETENTION_MS) == go.ExpireDecision((("t0", 0),), group_dead=True)


def test_stable_consumer_group_expires_only_topics_no_member_subscribes_to():
    group, member_id = one_member_group(subscription=b"t0")
    group, decision = commit(group, ("t0", 0, 5, ""), ("old", 0, 5, ""), generation=1, member=member_id, now_ms=0)
    offsets = go.apply_commit({}, decision.to_write)
    decision = go.expire_offsets(group, offsets, now_ms=RETENTION_MS, retention_ms=RETENTION_MS,
                                 subscribed_topics=topics_of)
    assert decision == go.ExpireDecision((("old", 0),), group_dead=False)
    undecodable, _ = one_member_group(subscription=b"?")
    assert go.expire_offsets(undecodable, offsets, now_ms=RETENTION_MS, retention_ms=RETENTION_MS,
                             subscribed_topics=topics_of).expired == ()


def test_an_explicit_expire_timestamp_wins():
    group = gm.new_group("g", 0)
    offsets = {("t0", 0): OffsetAndMetadata(1, -1, "", 0, expire_timestamp_ms=10)}
    assert go.expire_offsets(group, offsets, now_ms=10, retention_ms=RETENTION_MS,
                             subscribed_topics=topics_of).expired == (("t0", 0),)


def test_offset_delete_refused_for_subscribed_topics_kip496():
    group, member_id = one_member_group(subscription=b"t0")
    offsets = {("t0", 0): OffsetAndMetadata(1), ("t1", 0): OffsetAndMetadata(2)}
    decision = go.delete_offsets(group, offsets, [("t0", 0), ("t1", 0)], subscribed_topics=topics_of)
    assert decision.partition_errors == {("t0", 0): E.GROUP_SUBSCRIBED_TO_TOPIC, ("t1", 0): E.NONE}
    assert decision.to_delete == (("t1", 0),) and not decision.group_dead
    assert go.apply_delete(offsets, decision.to_delete) == {("t0", 0): OffsetAndMetadata(1)}
    other, _ = one_member_group(protocol_type="connect")
    assert go.delete_offsets(other, offsets, [("t1", 0)], subscribed_topics=topics_of).error is E.NON_EMPTY_GROUP
    assert go.delete_offsets(None, offsets, [("t1", 0)], subscribed_topics=topics_of).error is E.GROUP_ID_NOT_FOUND
    undecodable, _ = one_member_group(subscription=b"?")
    decision = go.delete_offsets(undecodable, offsets, [("t1", 0)], subscribed_topics=topics_of)
    assert decision.partition_errors == {("t1", 0): E.GROUP_SUBSCRIBED_TO_TOPIC}


def test_offset_delete_of_an_empty_groups_last_offsets_kills_it():
    group = gm.new_group("g", 0)
    decision = go.delete_offsets(group, {("t0", 0): OffsetAndMetadata(1)}, [("t0", 0)], subscribed_topics=topics_of)
    assert decision.to_delete == (("t0", 0),) and decision.group_dead


def test_delete_group_only_when_empty():
    group, member_id = one_member_group()
    offsets = {("t0", 0): OffsetAndMetadata(1)}
    assert go.delete_group(group, offsets).error is E.NON_EMPTY_GROUP
    assert go.delete_group(None, offsets).error is E.GROUP_ID_NOT_FOUND
    group, _, _ = gm.leave(group, gm.LeaveRequest("g", (gm.LeaveMember(member_id),)), now_ms=1)
    assert go.delete_group(group, offsets) == go.DeleteGroupDecision(E.NONE, (("t0", 0),))
