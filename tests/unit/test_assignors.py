"""The leader's assignors (client/assignors.py): range, roundrobin and cooperative-sticky, by Kafka's rules,
with hypothesis properties: every partition assigned exactly once (cooperative: at most once, exactly once
after the follow-up rebalance), counts within 1 for roundrobin and sticky with equal subscriptions, and
sticky keeps what it can."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ads_spark.client.assignors import (
    COOPERATIVE, COOPERATIVE_STICKY, EAGER, RANGE, ROUNDROBIN, MemberSubscription, assign, encode_user_data,
    generation_from, parse_strategies, rebalance_protocol,
)
from ads_spark.errors import InvalidConfigError


def members_of(*specs):
    """specs: (member_id, topics[, owned[, generation[, instance id]]])."""
    return {spec[0]: MemberSubscription(spec[0], tuple(spec[1]), *spec[2:]) for spec in specs}


def test_range_gives_each_member_a_contiguous_range_per_topic_the_first_ones_one_more():
    members = members_of(("c", ["t", "u"]), ("a", ["t", "u"]), ("b", ["t"]))
    result = assign(RANGE, members, {"t": 7, "u": 3, "absent": 4})
    assert result == {"a": [("t", 0), ("t", 1), ("t", 2), ("u", 0), ("u", 1)],
                      "b": [("t", 3), ("t", 4)],
                      "c": [("t", 5), ("t", 6), ("u", 2)]}


def test_static_members_come_first_ordered_by_instance_id():
    members = members_of(("a", ["t"]), ("z-1", ["t"], (), -1, "host-2"), ("y-9", ["t"], (), -1, "host-1"))
    assert assign(RANGE, members, {"t": 3}) == {"y-9": [("t", 0)], "z-1": [("t", 1)], "a": [("t", 2)]}


def test_roundrobin_deals_partitions_in_turn_skipping_members_not_subscribed():
    members = members_of(("a", ["t", "u"]), ("b", ["u"]), ("c", ["t", "u"]))
    result = assign(ROUNDROBIN, members, {"t": 3, "u": 3})
    # t-1 skips b (not subscribed to t) for c; the turn then goes on after c.
    assert result == {"a": [("t", 0), ("t", 2), ("u", 2)], "b": [("u", 0)], "c": [("t", 1), ("u", 1)]}


def test_sticky_keeps_owned_partitions_and_moves_only_what_balance_needs():
    owned = {"a": [("t", p) for p in range(3)], "b": [("t", p) for p in range(3, 6)]}
    members = members_of(("a", ["t"], tuple(owned["a"]), 4), ("b", ["t"], tuple(owned["b"]), 4), ("c", ["t"]))
    first = assign(COOPERATIVE_STICKY, members, {"t": 6})
    # c's two partitions come one from a and one from b; both are revoked first and held back this round.
    assert first["a"] == [("t", 1), ("t", 2)] and first["b"] == [("t", 4), ("t", 5)] and first["c"] == []
    second = assign(COOPERATIVE_STICKY, members_of(("a", ["t"], tuple(first["a"]), 5),
                                                   ("b", ["t"], tuple(first["b"]), 5), ("c", ["t"], (), 5)), {"t": 6})
    assert second == {"a": [("t", 1), ("t", 2)], "b": [("t", 4), ("t", 5)], "c": [("t", 0), ("t", 3)]}


def test_sticky_claims_of_an_older_generation_lose_and_equal_claims_cancel():
    members = members_of(("a", ["t"], (("t", 0),), 3), ("b", ["t"], (("t", 0), ("t", 1)), 2))
    result = assign(COOPERATIVE_STICKY, members, {"t": 2})
    assert result["a"] == [("t", 0)]
    assert result["b"] == [("t", 1)]
    tie = members_of(("a", ["t"], (("t", 0),), 3), ("b", ["t"], (("t", 0),), 3))
    tied = assign(COOPERATIVE_STICKY, tie, {"t": 1})
    # Nobody validly owns t-0: it goes as a new partition would (to a, first in order), and b, which claimed
    # it too, sees it gone (Kafka's rule: a's own claim means it is not "added" to a, so not held back).
    assert tied == {"a": [("t", 0)], "b": []}


def test_strategy_names_and_kafka_class_names_and_the_rebalance_protocol():
    assert parse_strategies("range,cooperative-sticky") == (RANGE, COOPERATIVE_STICKY)
    assert parse_strategies("org.apache.kafka.clients.consumer.RoundRobinAssignor") == (ROUNDROBIN,)
    assert parse_strategies(["org.apache.kafka.clients.consumer.CooperativeStickyAssignor"]) == (COOPERATIVE_STICKY,)
    assert rebalance_protocol((RANGE, COOPERATIVE_STICKY)) == EAGER
    assert rebalance_protocol((COOPERATIVE_STICKY,)) == COOPERATIVE
    for bad in ("sticky", "", "range,,org.example.Mine"):
        with pytest.raises(InvalidConfigError, match="partition.assignment.strategy"):
            parse_strategies(bad)


def test_the_sticky_generation_travels_in_user_data_as_kafka_writes_it():
    assert encode_user_data(COOPERATIVE_STICKY, 7) == b"\x00\x00\x00\x07"
    assert encode_user_data(RANGE, 7) is None
    assert generation_from(b"\x00\x00\x00\x07", -1) == 7
    assert generation_from(None, 9) == 9 and generation_from(b"xx", -1) == -1


# ---- properties ----------------------------------------------------------------------------

TOPIC_NAMES = ["t0", "t1", "t2"]


@st.composite
def groups(draw, equal_subscriptions: bool):
    counts = {t: draw(st.integers(0, 9)) for t in TOPIC_NAMES}
    member_count = draw(st.integers(1, 6))
    all_partitions = [(t, p) for t, n in counts.items() for p in range(n)]
    shared = draw(st.lists(st.sampled_from(TOPIC_NAMES), min_size=1, unique=True))
    members = {}
    for index in range(member_count):
        topics = shared if equal_subscriptions else draw(
            st.lists(st.sampled_from(TOPIC_NAMES), min_size=1, unique=True))
        owned = draw(st.lists(st.sampled_from(all_partitions), unique=True)) if all_partitions else []
        # Static members' instance ids sort in another order than their member ids.
        instance = f"i{member_count - index}" if draw(st.booleans()) else None
        members[f"m{index}"] = MemberSubscription(f"m{index}", tuple(topics), tuple(owned),
                                                  draw(st.integers(-1, 3)), instance)
    return members, counts


def subscribed_partitions(members, counts):
    return {(t, p) for m in members.values() for t in m.topics for p in range(counts[t])}


def check_each_once(result, members, counts, *, at_most=False):
    flat = [tp for partitions in result.values() for tp in partitions]
    assert len(flat) == len(set(flat)), "a partition assigned twice"
    for member_id, partitions in result.items():
        assert all(t in members[member_id].topics for t, _ in partitions), "assigned a topic not subscribed"
    expected = subscribed_partitions(members, counts)
    assert set(flat) <= expected if at_most else set(flat) == expected


@settings(max_examples=200, deadline=None)
@given(groups(equal_subscriptions=False), st.sampled_from([RANGE, ROUNDROBIN]))
def test_eager_assignors_assign_every_partition_exactly_once(group, strategy):
    members, counts = group
    check_each_once(assign(strategy, members, counts), members, counts)


@settings(max_examples=200, deadline=None)
@given(groups(equal_subscriptions=True), st.sampled_from([ROUNDROBIN, COOPERATIVE_STICKY]))
def test_with_equal_subscriptions_counts_are_within_one(group, strategy):
    members, counts = group
    result = assign(strategy, members, counts)
    if strategy == COOPERATIVE_STICKY:  # after the follow-up rebalance, when nothing is held back
        result = assign(strategy, {m: MemberSubscription(m, members[m].topics, tuple(result[m]), 9)
                                   for m in members}, counts)
    check_each_once(result, members, counts)
    sizes = [len(p) for p in result.values()]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=200, deadline=None)
@given(groups(equal_subscriptions=False))
def test_cooperative_sticky_two_phases_never_give_a_partition_to_two_members(group):
    members, counts = group
    first = assign(COOPERATIVE_STICKY, members, counts)
    check_each_once(first, members, counts, at_most=True)
    # Nothing a member owned goes to another member in the same round (it is revoked first).
    for member_id, partitions in first.items():
        for tp in partitions:
            assert not any(tp in other.owned for other in members.values() if other.member_id != member_id) \
                or tp in members[member_id].owned
    # Follow-up rebalances (each owner revoked what it lost) until nothing is held back: a few at most.
    second = first
    for generation in range(10, 14):
        follow_up = {m: MemberSubscription(m, members[m].topics, tuple(second[m]), generation,
                                           members[m].group_instance_id) for m in members}
        second, previous = assign(COOPERATIVE_STICKY, follow_up, counts), second
        check_each_once(second, members, counts, at_most=True)
        if second == previous and len(sum(second.values(), [])) == len(subscribed_partitions(members, counts)):
            break
    check_each_once(second, members, counts)
    # No single move from one member to an eligible one holding two fewer remains.
    for source, held in second.items():
        for topic, _ in held:
            for target, other in second.items():
                if topic in members[target].topics:
                    assert len(held) - len(other) <= 1


@settings(max_examples=200, deadline=None)
@given(groups(equal_subscriptions=True))
def test_sticky_keeps_what_it_can(group):
    members, counts = group
    # One valid, uncontested generation of ownership: what each member owned of the subscribed partitions.
    valid = subscribed_partitions(members, counts)
    taken, owned = set(), {}
    for member_id in sorted(members):
        owned[member_id] = [tp for tp in members[member_id].owned if tp in valid and tp not in taken]
        taken.update(owned[member_id])
    current = {m: MemberSubscription(m, members[m].topics, tuple(owned[m]), 4) for m in members}
    result = assign(COOPERATIVE_STICKY, current, counts)
    floor = len(valid) // len(members)
    for member_id in members:
        kept = set(result[member_id]) & set(owned[member_id])
        assert len(kept) >= min(len(owned[member_id]), floor)
        assert set(result[member_id]) >= set(owned[member_id]) or len(owned[member_id]) > floor
