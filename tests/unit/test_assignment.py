"""Replica assignment (ads_spark/replication/assignment.py): Kafka's placement, validation, imbalance."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ads_spark.errors import InvalidPartitionsError, InvalidReplicaAssignmentError, InvalidReplicationFactorError
from ads_spark.replication.assignment import (
    RACK_AWARE_DISABLED, RACK_AWARE_SAFE, assign_replicas, leader_imbalance, parse_replica_assignment,
    partitions_to_rebalance, rack_alternated_brokers, validate_replica_assignment,
)

# Reference 001, "Rack-Aware Replication": 6 brokers over 3 availability zones, RF=3.
AZ_RACKS = {0: "us-east-1a", 1: "us-east-1b", 2: "us-east-1c", 3: "us-east-1a", 4: "us-east-1b", 5: "us-east-1c"}


def test_reference_six_brokers_three_racks_one_replica_per_zone():
    assignment = assign_replicas(12, 3, AZ_RACKS, start_index=0, replica_shift=0)
    for partition, replicas in assignment.items():
        assert len(set(replicas)) == 3
        assert {AZ_RACKS[b] for b in replicas} == {"us-east-1a", "us-east-1b", "us-east-1c"}, partition
    assert Counter(r[0] for r in assignment.values()) == {b: 2 for b in AZ_RACKS}
    assert Counter(b for r in assignment.values() for b in r) == {b: 6 for b in AZ_RACKS}
    # Pinned so that a change of the algorithm is a deliberate one.
    assert assignment[0] == [0, 1, 2] and assignment[1] == [1, 2, 3]


def test_rack_alternated_order():
    racks = {0: "a", 1: "a", 2: "b", 3: "c", 4: "c", 5: "a"}
    assert rack_alternated_brokers(racks) == [0, 2, 3, 1, 4, 5]


def test_round_robin_without_racks_matches_kafka():
    assert assign_replicas(5, 3, [0, 1, 2, 3, 4], start_index=0, replica_shift=0) == {
        0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1]}
    # The follower shift grows after every round of brokers.
    assert assign_replicas(2, 2, [0, 1, 2], start_index=0, replica_shift=0, start_partition=3) == {
        3: [0, 2], 4: [1, 0]}


def test_randomness_is_an_input():
    calls = []

    def random_int(bound: int) -> int:
        calls.append(bound)
        return 2

    assert assign_replicas(1, 2, [10, 20, 30], random_int=random_int) == {0: [30, 10]}
    assert calls == [3, 3]


def test_mixed_racks():
    with pytest.raises(InvalidReplicaAssignmentError, match="no broker.rack"):
        assign_replicas(3, 2, {1: "a", 2: None, 3: "b"})
    assert assign_replicas(3, 2, {1: "a", 2: None, 3: "b"}, rack_aware_mode=RACK_AWARE_SAFE, start_index=0,
                           replica_shift=0) == assign_replicas(3, 2, [1, 2, 3], start_index=0, replica_shift=0)
    assert assign_replicas(2, 2, {1: "a", 2: "a", 3: "b"}, rack_aware_mode=RACK_AWARE_DISABLED, start_index=0,
                           replica_shift=0) == {0: [1, 2], 1: [2, 3]}


def test_replication_factor_and_partition_count_errors():
    with pytest.raises(InvalidReplicationFactorError, match="larger than the 2 available brokers"):
        assign_replicas(1, 3, [1, 2])
    with pytest.raises(InvalidReplicationFactorError):
        assign_replicas(1, 0, [1, 2])
    with pytest.raises(InvalidPartitionsError):
        assign_replicas(0, 1, [1, 2])


def test_parse_replica_assignment():
    assert parse_replica_assignment("1:2:3,2:3:1", [1, 2, 3]) == {0: [1, 2, 3], 1: [2, 3, 1]}
    assert parse_replica_assignment(" 4 ") == {0: [4]}
    cases = {
        "1:x": "not a ':'-separated list",
        "1:1": "lists a broker twice",
        "1:2,3": "same replication factor",
        "1:9": "not registered",
        "1:2,": "not a ':'-separated list",
        "-1:2": ">= 0",
    }
    for text, message in cases.items():
        with pytest.raises(InvalidReplicaAssignmentError, match=message):
            parse_replica_assignment(text, [1, 2, 3])


def test_validate_replica_assignment_rejects_gaps_and_large_factors():
    with pytest.raises(InvalidReplicaAssignmentError, match="numbered"):
        validate_replica_assignment({0: [1], 2: [1]})
    validate_replica_assignment({0: [1, 2, 3]}, live_brokers=[1, 2, 3])
    with pytest.raises(InvalidReplicationFactorError, match="larger than the 3 brokers"):
        validate_replica_assignment({0: [1, 2, 3, 4]}, live_brokers=[1, 2, 3])


def test_leader_imbalance_and_rebalance_candidates():
    assignment = {("t", 0): [1, 2], ("t", 1): [1, 2], ("t", 2): [2, 1], ("t", 3): [2, 1]}
    leaders = {("t", 0): 2, ("t", 1): 1, ("t", 2): 2, ("t", 3): 2}
    assert leader_imbalance(assignment, leaders) == {1: 0.5, 2: 0.0}
    assert partitions_to_rebalance(assignment, leaders, [1, 2], imbalance_percent_max=10) == [("t", 0)]
    assert partitions_to_rebalance(assignment, leaders, [2], imbalance_percent_max=10) == []
    assert partitions_to_rebalance(assignment, leaders, [1, 2], imbalance_percent_max=50) == []


@st.composite
def clusters(draw, racked: bool):
    count = draw(st.integers(1, 12))
    ids = draw(st.lists(st.integers(0, 1000), min_size=count, max_size=count, unique=True))
    racks = {b: (f"rack-{draw(st.integers(0, 4))}" if racked else None) for b in ids}
    factor = draw(st.integers(1, count))
    partitions = draw(st.integers(1, 60))
    start = draw(st.integers(0, count - 1))
    shift = draw(st.integers(0, count - 1))
    return racks, factor, partitions, start, shift


def _check_common(assignment, racks, factor, partitions):
    assert sorted(assignment) == list(range(partitions))
    for replicas in assignment.values():
        assert len(replicas) == factor and len(set(replicas)) == factor and set(replicas) <= set(racks)
    leaders = Counter(r[0] for r in assignment.values())
    counts = [leaders.get(b, 0) for b in racks]
    assert max(counts) - min(counts) <= 1, "preferred leaders are spread within one"


@settings(max_examples=300, deadline=None)
@given(clusters(racked=False))
def test_property_round_robin(cluster):
    racks, factor, partitions, start, shift = cluster
    assignment = assign_replicas(partitions, factor, racks, start_index=start, replica_shift=shift)
    _check_common(assignment, racks, factor, partitions)
    if partitions % len(racks) == 0:
        replicas_per_broker = Counter(b for r in assignment.values() for b in r)
        assert set(replicas_per_broker.values()) == {factor * partitions // len(racks)}


@settings(max_examples=300, deadline=None)
@given(clusters(racked=True))
def test_property_rack_aware(cluster):
    racks, factor, partitions, start, shift = cluster
    assignment = assign_replicas(partitions, factor, racks, start_index=start, replica_shift=shift)
    _check_common(assignment, racks, factor, partitions)
    rack_count = len(set(racks.values()))
    for replicas in assignment.values():
        assert len({racks[b] for b in replicas}) == min(factor, rack_count), "racks maximally spread"
