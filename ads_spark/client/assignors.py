"""Partition assignors a group's leader runs: range, roundrobin and cooperative-sticky (Kafka's rules).

Pure functions: members' subscriptions and the partition count of each topic in, each member's
partitions out. No I/O, no clock, no randomness; the same input gives the same assignment, whichever
member happens to lead.

Members are ordered as Kafka orders them: members with a ``group.instance.id`` first, by it, then the
others by member id (so a static member keeps its place across restarts).

* ``range``: per topic, the subscribed members in order; the first ``partitions % members`` get one
  more than ``partitions // members``; each gets a contiguous range.
* ``roundrobin``: every subscribed partition, by topic then partition, dealt to the members in order,
  skipping members not subscribed to its topic.
* ``cooperative-sticky``: a member keeps the partitions it owned (its subscription's owned
  partitions; when two claim one, the claim of the newer generation wins, and equal claims cancel)
  unless balance needs them elsewhere; new partitions go to the eligible member with the fewest; then
  single moves from the fullest member to an eligible one holding at least two fewer, moving a partition
  it did not own before one it did, until none helps (with equal subscriptions: counts within 1).
  Cooperative rebalancing (KIP-429): a partition that some member owned and now goes to another is
  left out of everyone's assignment this round. Its owner sees it gone, revokes it and rejoins; the
  follow-up rebalance, in which nobody owns it, gives it to its new member. So a partition is never
  consumed by two members at once, and the members keep consuming what does not move.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Mapping

from ads_spark.errors import InvalidConfigError

RANGE = "range"
ROUNDROBIN = "roundrobin"
COOPERATIVE_STICKY = "cooperative-sticky"
EAGER, COOPERATIVE = "eager", "cooperative"
# Kafka's assignor names and Java class names, as partition.assignment.strategy takes them.
STRATEGY_ALIASES = {
    RANGE: RANGE, "org.apache.kafka.clients.consumer.RangeAssignor": RANGE,
    ROUNDROBIN: ROUNDROBIN, "org.apache.kafka.clients.consumer.RoundRobinAssignor": ROUNDROBIN,
    COOPERATIVE_STICKY: COOPERATIVE_STICKY,
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": COOPERATIVE_STICKY,
}
# The rebalance protocols each assignor supports (Kafka's supportedProtocols()).
SUPPORTED_PROTOCOLS = {RANGE: (EAGER,), ROUNDROBIN: (EAGER,), COOPERATIVE_STICKY: (EAGER, COOPERATIVE)}

TopicPartitionKey = tuple[str, int]
_GENERATION = struct.Struct(">i")


@dataclass(frozen=True)
class MemberSubscription:
    member_id: str
    topics: tuple[str, ...]
    owned: tuple[TopicPartitionKey, ...] = ()
    generation_id: int = -1  # the generation the owned partitions were assigned in (-1: unknown)
    group_instance_id: str | None = None


def parse_strategies(value, *, name: str = "partition.assignment.strategy") -> tuple[str, ...]:
    """The configured assignors, in preference order, by their protocol names; unknown ones refused."""
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    names = []
    for item in (str(i).strip() for i in items):
        if not item:
            continue
        if item not in STRATEGY_ALIASES:
            raise InvalidConfigError(f"invalid value {value!r} for '{name}': unknown assignor {item!r} (known: "
                                     f"{RANGE}, {ROUNDROBIN}, {COOPERATIVE_STICKY} or their Kafka class names)")
        if STRATEGY_ALIASES[item] not in names:
            names.append(STRATEGY_ALIASES[item])
    if not names:
        raise InvalidConfigError(f"invalid value {value!r} for '{name}': names no assignor")
    return tuple(names)


def rebalance_protocol(strategies: tuple[str, ...]) -> str:
    """Cooperative when every configured assignor supports it, else eager (Kafka's consumer rule)."""
    if all(COOPERATIVE in SUPPORTED_PROTOCOLS[s] for s in strategies):
        return COOPERATIVE
    return EAGER


def encode_user_data(strategy: str, generation_id: int) -> bytes | None:
    """What a member puts in its subscription's user data: the cooperative-sticky assignor's generation
    (an INT32, as Kafka's CooperativeStickyAssignor writes it); nothing for the others."""
    return _GENERATION.pack(generation_id) if strategy == COOPERATIVE_STICKY else None


def generation_from(user_data: bytes | None, generation_field: int) -> int:
    """A subscription's generation: its v2+ field when set, else the cooperative-sticky user data."""
    if generation_field >= 0:
        return generation_field
    if user_data is not None and len(user_data) == _GENERATION.size:
        return _GENERATION.unpack(user_data)[0]
    return -1


def assign(strategy: str, members: Mapping[str, MemberSubscription],
           partitions_per_topic: Mapping[str, int]) -> dict[str, list[TopicPartitionKey]]:
    """Each member's partitions (every member present, maybe with none). Topics that do not exist (not in
    ``partitions_per_topic``) are skipped, as Kafka's assignors skip topics without metadata."""
    if not members:
        return {}
    if strategy == RANGE:
        return _range(members, partitions_per_topic)
    if strategy == ROUNDROBIN:
        return _roundrobin(members, partitions_per_topic)
    if strategy == COOPERATIVE_STICKY:
        return _cooperative(members, _sticky(members, partitions_per_topic))
    raise InvalidConfigError(f"unknown assignor {strategy!r}")


def _member_order(member: MemberSubscription) -> tuple:
    if member.group_instance_id:
        return (0, member.group_instance_id, member.member_id)
    return (1, member.member_id, "")


def _ordered(members: Mapping[str, MemberSubscription]) -> list[str]:
    return [m.member_id for m in sorted(members.values(), key=_member_order)]


def _range(members, partitions_per_topic) -> dict[str, list[TopicPartitionKey]]:
    result: dict[str, list[TopicPartitionKey]] = {m: [] for m in members}
    order = _ordered(members)
    topics = sorted({t for m in members.values() for t in m.topics if t in partitions_per_topic})
    for topic in topics:
        subscribed = [m for m in order if topic in members[m].topics]
        count = partitions_per_topic[topic]
        per_member, extra = divmod(count, len(subscribed))
        for index, member_id in enumerate(subscribed):
            start = per_member * index + min(index, extra)
            length = per_member + (1 if index < extra else 0)
            result[member_id].extend((topic, p) for p in range(start, start + length))
    return result


def _roundrobin(members, partitions_per_topic) -> dict[str, list[TopicPartitionKey]]:
    result: dict[str, list[TopicPartitionKey]] = {m: [] for m in members}
    order = _ordered(members)
    topics = sorted({t for m in members.values() for t in m.topics if t in partitions_per_topic})
    cursor = 0
    for topic in topics:
        for partition in range(partitions_per_topic[topic]):
            # Some member subscribes to this topic, so the search ends within one turn of the circle.
            while topic not in members[order[cursor % len(order)]].topics:
                cursor += 1
            result[order[cursor % len(order)]].append((topic, partition))
            cursor += 1
    return result


def _owners(members, eligible: Mapping[TopicPartitionKey, list[str]]) -> dict[TopicPartitionKey, str]:
    """The member that validly owns each claimed partition: subscribed to its topic, the partition exists,
    and its claim is of a newer generation than every other claim (equal claims: nobody owns it)."""
    claims: dict[TopicPartitionKey, list[tuple[int, str]]] = {}
    for member in members.values():
        for tp in set(member.owned):
            if tp in eligible and member.member_id in eligible[tp]:
                claims.setdefault(tp, []).append((member.generation_id, member.member_id))
    owners = {}
    for tp, found in claims.items():
        newest = max(generation for generation, _ in found)
        winners = [member_id for generation, member_id in found if generation == newest]
        if len(winners) == 1:
            owners[tp] = winners[0]
    return owners


def _sticky(members, partitions_per_topic) -> dict[str, list[TopicPartitionKey]]:
    order = _ordered(members)
    rank = {m: i for i, m in enumerate(order)}
    topics = sorted({t for m in members.values() for t in m.topics if t in partitions_per_topic})
    eligible = {(t, p): [m for m in order if t in members[m].topics]
                for t in topics for p in range(partitions_per_topic[t])}
    owners = _owners(members, eligible)
    held: dict[str, set[TopicPartitionKey]] = {m: set() for m in members}
    for tp, member_id in owners.items():
        held[member_id].add(tp)
    for tp in sorted(eligible):
        if tp not in owners:
            target = min(eligible[tp], key=lambda m: (len(held[m]), rank[m]))
            held[target].add(tp)
    # Each move lowers the sum of squared counts, so this ends; the bound is a guard against a bug.
    for _ in range(len(eligible) * max(1, len(members)) + 1):
        move = _improving_move(held, order, rank, eligible, owners)
        if move is None:
            break
        tp, source, target = move
        held[source].discard(tp)
        held[target].add(tp)
    return {m: sorted(held[m]) for m in members}


def _improving_move(held, order, rank, eligible, owners):
    """(partition, from, to): from the fullest member that has one, a partition it did not own if it can,
    to the eligible member with the fewest, holding at least two fewer; None when no such move exists."""
    for source in sorted(order, key=lambda m: (-len(held[m]), rank[m])):
        candidates = sorted(held[source], key=lambda tp: (owners.get(tp) == source, tp))
        for tp in candidates:
            targets = [m for m in eligible[tp] if len(held[source]) - len(held[m]) > 1]
            if targets:
                return tp, source, min(targets, key=lambda m: (len(held[m]), rank[m]))
    return None


def _cooperative(members, target: dict[str, list[TopicPartitionKey]]) -> dict[str, list[TopicPartitionKey]]:
    """Kafka's cooperative adjustment: a partition another member claims and must give up is held back
    from the member it goes to until a later rebalance, after its owner revoked it."""
    revoked = set()
    for member in members.values():
        revoked.update(set(member.owned) - set(target[member.member_id]))
    return {member_id: [tp for tp in partitions if tp in set(members[member_id].owned) or tp not in revoked]
            for member_id, partitions in target.items()}
