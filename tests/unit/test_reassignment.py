"""Pure reassignment decisions: add first, leave only once in sync, move leadership only to in-sync targets."""

from __future__ import annotations

from ads_spark.errors import ErrorCode
from ads_spark.replication import reassignment as R
from ads_spark.replication.election import PartitionView
from ads_spark.replication.state import NO_LEADER, LeaderAndIsr


def view(replicas, leader, isr, partition_epoch=4, leader_epoch=2):
    return PartitionView("t", 0, tuple(replicas), (), LeaderAndIsr(leader, leader_epoch, tuple(isr),
                                                                   partition_epoch=partition_epoch))


def test_validate_and_begin():
    assert R.validate([1, 2], {1, 2, 3}) is ErrorCode.NONE
    assert R.validate([1, 1], {1, 2}) is ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert R.validate([1, 9], {1, 2}) is ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert R.validate([], {1}) is ErrorCode.INVALID_REPLICA_ASSIGNMENT
    plan = R.begin((1, 2, 3), (2, 3, 4))
    assert plan == R.Plan(replicas=(2, 3, 4, 1), adding=(4,), removing=(1,))


def test_announce_keeps_leader_isr_and_epoch_but_bumps_the_partition_epoch():
    d = R.announce(view((2, 3, 4, 1), 1, (1, 2, 3)), controller_epoch=7)
    assert (d.new_state.leader, d.new_state.leader_epoch, d.new_state.isr) == (1, 2, (1, 2, 3))
    assert d.new_state.partition_epoch == 5 and d.expected_partition_epoch == 4


def test_complete_waits_for_every_target_in_the_isr():
    assert R.complete(view((2, 3, 4, 1), 1, (1, 2, 3)), (2, 3, 4), frozenset({1, 2, 3, 4}), 7) is None


def test_complete_moves_leadership_off_a_removed_replica_to_an_in_sync_target():
    d = R.complete(view((2, 3, 4, 1), 1, (1, 2, 3, 4)), (2, 3, 4), frozenset({1, 2, 3, 4}), 7)
    assert d.new_state.leader == 2 and d.new_state.leader_epoch == 3 and d.new_state.isr == (2, 3, 4)


def test_complete_keeps_a_leader_that_stays():
    d = R.complete(view((1, 2, 3), 1, (1, 2, 3)), (1, 2, 3), frozenset({1, 2, 3}), 7)
    assert d.new_state.leader == 1 and d.new_state.leader_epoch == 2


def test_complete_never_elects_a_dead_or_out_of_sync_target():
    assert R.complete(view((2, 1), 1, (1, 2)), (2,), frozenset({1}), 7) is None
    d = R.complete(view((2, 3, 1), 1, (1, 2, 3)), (2, 3), frozenset({1, 3}), 7)
    assert d is not None and d.new_state.leader == 3
    assert NO_LEADER not in (d.new_state.leader,)


def test_validate_refuses_a_target_that_names_an_observer_of_the_partition():
    assert R.validate([1, 2], {1, 2, 3}, observers=(3,)) is ErrorCode.NONE
    assert R.validate([1, 3], {1, 2, 3}, observers=(3,)) is ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert R.observers_among([4, 3, 1], [1, 3]) == (3, 1)
    assert R.observers_among([1, 2], []) == ()
