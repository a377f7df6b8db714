"""The fault-injection checker finds each anomaly it claims to find, and passes a clean history."""

from __future__ import annotations

from ads_spark.chaos.checker import FAILED, OK, UNKNOWN, Attempt, NemesisWindow, check
from ads_spark.chaos.runner import producers_by_offset


def ok(value, offset, t=1.0, partition=0):
    return Attempt(value, partition, OK, offset, t - 0.01, t)


def test_clean_history_is_valid_and_fully_available():
    attempts = [ok(b"a", 0), ok(b"b", 1, 2.0)]
    v = check(attempts, {0: [(0, b"a"), (1, b"b")]}, consumer_reads=[[(0, 0, b"a"), (0, 1, b"b")]])
    assert v.valid and v.acknowledged == 2 and v.availability == 1.0


def test_lost_duplicated_inconsistent_aborted_and_unseen_are_counted():
    attempts = [ok(b"a", 0), ok(b"b", 1), Attempt(b"c", 0, FAILED, -1, 1, 2), Attempt(b"d", 0, UNKNOWN, -1, 1, 2)]
    final = {0: [(0, b"a"), (1, b"x"), (2, b"a"), (3, b"c")]}
    v = check(attempts, final)
    assert (v.lost, v.duplicated, v.aborted_reads, v.unseen) == (1, 1, 1, 1)
    assert v.inconsistent_offsets == 1  # offset 1 acknowledged for b"b" but holds b"x"
    assert not v.valid


def test_consumer_going_backwards_and_replica_divergence():
    v = check([], {0: []}, consumer_reads=[[(0, 5, b"q"), (0, 3, b"r")]],
              replica_batches={0: {1: [(0, 2, 1)], 2: [(0, 2, 7)]}})
    assert v.non_monotonic == 1 and v.replica_divergence == 1 and not v.valid


def test_longest_outage_names_the_fault_active_then():
    attempts = [ok(b"a", 0, 1.0), Attempt(b"b", 0, FAILED, -1, 1.5, 2.0), ok(b"c", 1, 6.0), ok(b"d", 2, 6.5)]
    v = check(attempts, {0: [(0, b"a"), (1, b"c"), (2, b"d")]}, nemesis=[NemesisWindow("kill-leader", 1.2, 5.0)],
              run_window_s=(0.5, 7.0))
    assert (v.longest_outage_partition, v.longest_outage_s, v.longest_outage_cause) == (0, 5.0, "kill-leader")
    assert v.ok_share == 0.75 and v.errors == {"failed": 1}
    # seconds [0.5, 1.5), [5.5, 6.5) and [6.5, 7.0) saw a success; the 4 in between did not
    assert v.availability == round(3 / 7, 4)


# A second copy under a bumped producer epoch (librdkafka's re-send) versus one (producer, epoch) stored twice.
# Batches as replica_status reports them: base offset, count, leader epoch, CRC, producer id, epoch, sequence.
RESENT_BATCHES = {0: {1: [(0, 2, 0, 11, 7, 0, 0), (2, 1, 0, 12, 7, 0, 2), (3, 1, 0, 13, 7, 1, 0),
                          (4, 1, 0, 14, 7, 1, 1), (5, 1, 0, 15, -1, -1, -1), (6, 1, 0, 16, -1, -1, -1)]}}
RESENT_FINAL = {0: [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"c"), (4, b"b"), (5, b"e"), (6, b"e")]}


def test_a_copy_under_a_higher_epoch_of_the_same_producer_is_counted_apart_from_duplicates():
    producer_at = producers_by_offset(RESENT_BATCHES)
    assert (producer_at(0, 1), producer_at(0, 3), producer_at(0, 9), producer_at(1, 0)) == ((7, 0), (7, 1), None, None)
    v = check([], RESENT_FINAL, producer_at=producer_at)
    # c: epoch 0 then 1 -> re-sent; b: offsets 1 (epoch 0) and 4 (epoch 1) -> re-sent; e: no producer -> duplicate
    assert (v.resent_under_new_epoch, v.duplicated) == (2, 1), v.examples
    assert v.valid is False


def test_without_producer_metadata_every_second_copy_is_a_duplicate():
    v = check([], RESENT_FINAL)
    assert (v.resent_under_new_epoch, v.duplicated) == (0, 3)


def test_two_copies_under_one_producer_epoch_are_a_duplicate_even_with_producer_metadata():
    batches = {0: {1: [(0, 1, 0, 1, 7, 2, 5), (1, 1, 1, 2, 7, 2, 6)]}}
    v = check([], {0: [(0, b"a"), (1, b"a")]}, producer_at=producers_by_offset(batches))
    assert (v.resent_under_new_epoch, v.duplicated) == (0, 1)
