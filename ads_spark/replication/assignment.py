"""Replica assignment: which brokers hold each partition, and which of them leads by preference.

Pure decisions for the controller and the admin path (no I/O; randomness comes
in as ``start_index`` / ``replica_shift`` or a ``random_int`` function):

* ``assign_replicas`` places partitions with Kafka's round-robin algorithm.
  Without racks, partition ``p``'s first replica (its preferred leader) is the
  broker at ``(p + start_index) % n`` in id order and the followers follow at a
  shift that grows by one every ``n`` partitions, so leaders and followers both
  spread evenly. With racks, the same walk runs over a rack-alternated broker
  list (a1, b1, c1, a2, b2, ...) and skips a broker whose rack (or itself)
  already holds a replica until every rack has one, so each partition spans
  ``min(replication_factor, racks)`` racks.
* ``parse_replica_assignment`` / ``validate_replica_assignment`` check an
  explicit ``--replica-assignment`` such as ``1:2:3,2:3:1``.
* ``leader_imbalance`` measures, per broker, the share of the partitions it
  should lead that it does not (``auto.leader.rebalance.enable``).
"""

from __future__ import annotations

from typing import Callable, Hashable, Iterable, Mapping, Sequence, TypeVar

from ads_spark.errors import InvalidPartitionsError, InvalidReplicaAssignmentError, InvalidReplicationFactorError

RACK_AWARE_ENFORCED = "enforced"   # every broker must have a rack, or none may (Kafka's default)
RACK_AWARE_SAFE = "safe"           # use racks only if every broker has one
RACK_AWARE_DISABLED = "disabled"   # ignore racks

Assignment = dict[int, list[int]]
K = TypeVar("K", bound=Hashable)


def check_replication_factor(partitions: int, replication_factor: int, broker_count: int) -> None:
    if partitions < 1:
        raise InvalidPartitionsError(f"number of partitions must be at least 1, not {partitions}")
    if replication_factor < 1:
        raise InvalidReplicationFactorError(f"replication factor must be at least 1, not {replication_factor}")
    if replication_factor > broker_count:
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} is larger than the {broker_count} available brokers")


def _broker_racks(brokers: Mapping[int, str | None] | Iterable[int], mode: str) -> tuple[list[int], dict[int, str]]:
    """Sorted broker ids, and their racks if the placement is to be rack aware."""
    racks = dict(brokers) if isinstance(brokers, Mapping) else {int(b): None for b in brokers}
    ids = sorted(int(b) for b in racks)
    if len(set(ids)) != len(ids):
        raise InvalidReplicaAssignmentError(f"broker ids are not distinct: {ids}")
    with_rack = {b: r for b, r in racks.items() if r}
    if mode == RACK_AWARE_DISABLED or not with_rack:
        return ids, {}
    if len(with_rack) < len(ids):
        if mode == RACK_AWARE_ENFORCED:
            missing = sorted(b for b in ids if b not in with_rack)
            raise InvalidReplicaAssignmentError(
                f"brokers {missing} have no broker.rack while others do: set it on every broker, or on none")
        return ids, {}
    return ids, {int(b): str(r) for b, r in with_rack.items()}


def rack_alternated_brokers(racks: Mapping[int, str]) -> list[int]:
    """Brokers taking turns by rack: racks and brokers in sorted order, e.g. a1, b1, c1, a2, b2, c2."""
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(racks):
        by_rack.setdefault(racks[broker], []).append(broker)
    ordered_racks = sorted(by_rack)
    depth = max(len(members) for members in by_rack.values())
    return [by_rack[rack][i] for i in range(depth) for rack in ordered_racks if i < len(by_rack[rack])]


def _follower_index(first_index: int, shift: int, step: int, broker_count: int) -> int:
    """Position of a follower: never the first replica's; ``step`` walks all others in turn."""
    return (first_index + 1 + (shift + step) % (broker_count - 1)) % broker_count


def assign_replicas(partitions: int, replication_factor: int, brokers: Mapping[int, str | None] | Iterable[int],
                    *, start_index: int | None = None, replica_shift: int | None = None,
                    random_int: Callable[[int], int] | None = None, start_partition: int = 0,
                    rack_aware_mode: str = RACK_AWARE_ENFORCED) -> Assignment:
    """Replica lists for partitions ``start_partition`` .. ``start_partition + partitions - 1``.

    ``brokers`` maps broker id to rack (or None), or is just the ids.
    ``start_index`` and ``replica_shift`` fix the placement; left None they come
    from ``random_int(n)`` (a number in [0, n)), or are 0 without it. The first
    replica of each list is the preferred leader.
    """
    ids, racks = _broker_racks(brokers, rack_aware_mode)
    check_replication_factor(partitions, replication_factor, len(ids))
    order = rack_alternated_brokers(racks) if racks else ids
    count = len(order)

    def pick(value: int | None) -> int:
        if value is not None:
            return value
        return random_int(count) if random_int is not None else 0

    start, shift = pick(start_index), pick(replica_shift)
    rack_count = len(set(racks.values())) if racks else 1
    result: Assignment = {}
    for partition in range(max(0, start_partition), max(0, start_partition) + partitions):
        if partition > 0 and partition % count == 0:
            shift += 1
        first = (partition + start) % count
        if racks:
            result[partition] = _rack_aware_replicas(order, racks, first, shift * rack_count, replication_factor,
                                                     rack_count)
        else:
            result[partition] = [order[first]] + [
                order[_follower_index(first, shift, j, count)] for j in range(replication_factor - 1)]
    return result


def assign_added_partitions(existing: Mapping[int, Sequence[int]], total: int,
                            brokers: Mapping[int, str | None] | Iterable[int], *,
                            rack_aware_mode: str = RACK_AWARE_ENFORCED) -> Assignment:
    """Replicas for partitions ``len(existing)`` .. ``total - 1`` of a growing topic (Kafka's
    ``kafka-topics --alter --partitions``); the existing partitions are not touched.

    The walk of ``assign_replicas`` continues from the existing partition count,
    anchored (start index and shift, as Kafka does) at partition 0's preferred
    leader in the broker order, so the new preferred leaders carry on the spread
    rather than all starting over at the first broker. The replication factor is
    partition 0's.
    """
    count = len(existing)
    if count == 0 or sorted(existing) != list(range(count)):
        raise InvalidReplicaAssignmentError(
            f"the existing assignment must number partitions 0..n-1, not {sorted(existing)}")
    if total <= count:
        raise InvalidPartitionsError(f"a topic with {count} partitions can only grow, not go to {total}")
    first = list(existing[0])
    ids, racks = _broker_racks(brokers, rack_aware_mode)
    order = rack_alternated_brokers(racks) if racks else ids
    anchor = order.index(first[0]) if first[0] in order else 0
    return assign_replicas(total - count, len(first), brokers, start_index=anchor, replica_shift=anchor,
                           start_partition=count, rack_aware_mode=rack_aware_mode)


def _rack_aware_replicas(order: Sequence[int], racks: Mapping[int, str], first: int, shift: int,
                         replication_factor: int, rack_count: int) -> list[int]:
    count = len(order)
    replicas = [order[first]]
    used_racks = {racks[order[first]]}
    step = 0
    # Each follower is found within a full walk (count - 1 steps) of the other brokers.
    while len(replicas) < replication_factor:
        if step > replication_factor * count:
            raise InvalidReplicaAssignmentError("rack-aware placement found no broker; this is a bug")
        broker = order[_follower_index(first, shift, step, count)]
        step += 1
        rack_ok = racks[broker] not in used_racks or len(used_racks) == rack_count
        if rack_ok and broker not in replicas:
            replicas.append(broker)
            used_racks.add(racks[broker])
    return replicas


def parse_replica_assignment(text: str, live_brokers: Iterable[int] | None = None) -> Assignment:
    """``"1:2:3,2:3:1"`` -> {0: [1, 2, 3], 1: [2, 3, 1]}, validated (see ``validate_replica_assignment``)."""
    assignment: Assignment = {}
    for partition, item in enumerate(text.strip().split(",")):
        fields = item.strip().split(":")
        try:
            assignment[partition] = [int(f) for f in fields]
        except ValueError:
            raise InvalidReplicaAssignmentError(
                f"partition {partition}: {item.strip()!r} is not a ':'-separated list of broker ids "
                "(expected e.g. 1:2:3,2:3:1)") from None
    validate_replica_assignment(assignment, live_brokers)
    return assignment


def validate_replica_assignment(assignment: Mapping[int, Sequence[int]],
                                live_brokers: Iterable[int] | None = None) -> None:
    """Partitions 0..n-1, each with the same number of distinct, known, non-negative broker ids."""
    if not assignment:
        raise InvalidReplicaAssignmentError("the replica assignment names no partitions")
    if sorted(assignment) != list(range(len(assignment))):
        raise InvalidReplicaAssignmentError(f"partitions must be numbered 0..{len(assignment) - 1}")
    live = None if live_brokers is None else set(live_brokers)
    factor = len(assignment[0])
    if live is not None and factor > len(live):
        raise InvalidReplicationFactorError(f"replication factor {factor} is larger than the {len(live)} brokers")
    for partition, replicas in sorted(assignment.items()):
        if not replicas:
            raise InvalidReplicaAssignmentError(f"partition {partition} has no replicas")
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(f"partition {partition} lists a broker twice: {list(replicas)}")
        if len(replicas) != factor:
            raise InvalidReplicaAssignmentError(
                f"partition {partition} has {len(replicas)} replicas but partition 0 has {factor}; "
                "every partition needs the same replication factor")
        if any(b < 0 for b in replicas):
            raise InvalidReplicaAssignmentError(f"partition {partition}: broker ids must be >= 0: {list(replicas)}")
        if live is not None and not set(replicas) <= live:
            raise InvalidReplicaAssignmentError(
                f"partition {partition} names brokers {sorted(set(replicas) - live)} that are not registered")


def preferred_leader_counts(assignment: Mapping[K, Sequence[int]]) -> dict[int, int]:
    """How many partitions each broker is the preferred (first) replica of."""
    counts: dict[int, int] = {}
    for replicas in assignment.values():
        if replicas:
            counts[replicas[0]] = counts.get(replicas[0], 0) + 1
    return counts


def leader_imbalance(assignment: Mapping[K, Sequence[int]], leaders: Mapping[K, int]) -> dict[int, float]:
    """Per broker: the fraction of the partitions it prefers to lead that another broker leads.

    Kafka rebalances a broker when this exceeds
    ``leader.imbalance.per.broker.percentage`` / 100. A partition missing
    from ``leaders`` (or led by -1) counts as not led by its preferred replica.
    """
    preferred = preferred_leader_counts(assignment)
    misplaced: dict[int, int] = {broker: 0 for broker in preferred}
    for key, replicas in assignment.items():
        if replicas and leaders.get(key, -1) != replicas[0]:
            misplaced[replicas[0]] += 1
    return {broker: misplaced[broker] / preferred[broker] for broker in sorted(preferred)}


def partitions_to_rebalance(assignment: Mapping[K, Sequence[int]], leaders: Mapping[K, int],
                            live_brokers: Iterable[int], imbalance_percent_max: float) -> list[K]:
    """Partitions to move back to a live preferred leader, for brokers over the imbalance limit."""
    live = set(live_brokers)
    over = {b for b, ratio in leader_imbalance(assignment, leaders).items()
            if ratio * 100.0 > imbalance_percent_max and b in live}
    return sorted((key for key, replicas in assignment.items()
                   if replicas and replicas[0] in over and leaders.get(key, -1) != replicas[0]),
                  key=repr)
