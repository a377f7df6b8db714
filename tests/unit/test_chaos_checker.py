"""The fault-injection checker finds each anomaly it claims to find, and passes a clean history."""

from __future__ import annotations

from ads_spark.chaos.checker import FAILED, OK, UNKNOWN, Attempt, NemesisWindow, check


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
