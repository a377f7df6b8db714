"""Leader-epoch cache, OffsetsForLeaderEpoch and divergence (KIP-101/279/320)."""

import pytest

from ads_spark.errors import InvariantViolation
from ads_spark.replication import epochs as E
from ads_spark.replication.state import BatchInfo


def cache(*pairs):
    return E.from_pairs(pairs)


def test_assign_appends_new_epoch_and_ignores_repeat():
    c = E.assign(E.EpochCache(), 0, 0)
    c = E.assign(c, 2, 10)
    assert E.assign(c, 2, 15) == c
    assert c.as_pairs() == [(0, 0), (2, 10)]


def test_assign_drops_empty_epochs_at_same_start():
    assert E.assign(cache((0, 0), (1, 5)), 2, 5).as_pairs() == [(0, 0), (2, 5)]


def test_assign_older_epoch_is_a_bug():
    with pytest.raises(InvariantViolation):
        E.assign(cache((3, 0)), 2, 5)


def test_end_offset_for_latest_is_log_end():
    assert E.end_offset_for(cache((0, 0), (2, 10)), 2, 17) == (2, 17)


def test_end_offset_for_known_epoch_is_next_start():
    assert E.end_offset_for(cache((0, 0), (2, 10), (5, 20)), 2, 30) == (2, 20)


def test_end_offset_for_skipped_epoch_answers_floor_epoch():
    # epoch 3 never had a leader here: its history ends where epoch 5 starts, as epoch 2
    assert E.end_offset_for(cache((0, 0), (2, 10), (5, 20)), 3, 30) == (2, 20)


def test_end_offset_for_unknown_epochs():
    assert E.end_offset_for(E.EpochCache(), 1, 0) == (E.UNDEFINED_EPOCH, E.UNDEFINED_OFFSET)
    assert E.end_offset_for(cache((3, 7)), 9, 10) == (E.UNDEFINED_EPOCH, E.UNDEFINED_OFFSET)
    assert E.end_offset_for(cache((3, 7), (4, 9)), 1, 10) == (E.UNDEFINED_EPOCH, 7)


def test_no_divergence_for_a_prefix():
    leader = cache((0, 0), (1, 5))
    assert E.diverging_epoch(leader, 12, 5, 0) is None
    assert E.diverging_epoch(leader, 12, 9, 1) is None
    assert E.diverging_epoch(leader, 12, 0, E.UNDEFINED_EPOCH) is None


def test_reference_001_leader_epoch_example():
    # Old leader wrote offset 5 in epoch 0 and crashed; new leader (epoch 1) wrote a
    # different record at 5. The old leader fetches at 6 with last epoch 0.
    leader = cache((0, 0), (1, 5))
    div = E.diverging_epoch(leader, 8, 6, 0)
    assert div == (0, 5)
    assert E.truncation_target(cache((0, 0)), 6, div) == 5


def test_truncation_never_uses_a_stale_hw():
    # the follower's HW (say 3) is stale; the common prefix is 9 and nothing below it is dropped
    follower, leader = cache((0, 0), (1, 4)), cache((0, 0), (1, 4), (2, 9))
    div = E.diverging_epoch(leader, 20, 11, 1)
    assert div == (1, 9)
    assert E.truncation_target(follower, 11, div) == 9


def test_kip279_repeated_fast_leader_changes_resolve_in_rounds():
    # A: (0,0),(1,4)  led epoch 1, wrote 4..7 then lost leadership unreplicated.
    # B: (0,0),(2,4)  led epoch 2, wrote 4..5, then lost it. C: (0,0),(3,4) leads now.
    a, a_leo = cache((0, 0), (1, 4)), 8
    c, c_leo = cache((0, 0), (3, 4)), 10
    div = E.diverging_epoch(c, c_leo, a_leo, a.latest_epoch)
    assert div == (0, 4)
    target = E.truncation_target(a, a_leo, div)
    assert target == 4
    a = E.truncate_from_end(a, target)
    assert E.diverging_epoch(c, c_leo, target, a.latest_epoch) is None


def test_follower_epoch_newer_than_leader_bounds_at_leader_log():
    assert E.diverging_epoch(cache((0, 0)), 5, 7, 4) == (0, 5)


def test_truncate_from_start_and_end():
    c = cache((0, 0), (1, 5), (2, 9))
    assert E.truncate_from_end(c, 9).as_pairs() == [(0, 0), (1, 5)]
    assert E.truncate_from_start(c, 6).as_pairs() == [(1, 6), (2, 9)]


def test_rebuild_from_batches():
    batches = [BatchInfo(0, 2, 0), BatchInfo(2, 3, 0), BatchInfo(5, 1, 3)]
    assert E.rebuild(batches).as_pairs() == [(0, 0), (3, 5)]


def test_the_last_record_epoch_skips_entries_with_no_record_in_the_log():
    """What a replica reports to unclean recovery: an entry at or past the log end (a leader elected that
    wrote nothing, or whose records a crash took) holds no record."""
    cache = E.from_pairs([(0, 0), (3, 40), (5, 60)])
    assert E.last_record_epoch(cache, 70) == 5
    assert E.last_record_epoch(cache, 60) == 3
    assert E.last_record_epoch(cache, 0) == E.UNDEFINED_EPOCH
    assert E.last_record_epoch(E.from_pairs([]), 10) == E.UNDEFINED_EPOCH
