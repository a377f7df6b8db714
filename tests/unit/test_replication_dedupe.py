"""Idempotent producer table."""

from ads_spark.replication import dedupe as D
from ads_spark.replication.state import BatchInfo


def table(*batches):
    return D.rebuild(batches)


def test_new_producer_starts_at_zero():
    assert D.check(D.ProducerTable(), 7, 0, 0, 3) == D.Append()
    assert D.check(D.ProducerTable(), 7, 0, 4, 3) == D.UnknownProducerId()


def test_next_sequence_appends_and_gap_is_out_of_order():
    t = table(BatchInfo(0, 3, 0, 7, 0, 0))
    assert D.check(t, 7, 0, 3, 2) == D.Append()
    assert D.check(t, 7, 0, 5, 1) == D.OutOfOrderSequence(3)


def test_retry_is_a_duplicate_with_original_offsets():
    t = table(BatchInfo(10, 3, 0, 7, 0, 0), BatchInfo(13, 2, 0, 7, 0, 3))
    assert D.check(t, 7, 0, 0, 3) == D.Duplicate(10, 12)
    assert D.check(t, 7, 0, 3, 2) == D.Duplicate(13, 14)


def test_only_last_five_batches_are_remembered():
    t = table(*[BatchInfo(i, 1, 0, 7, 0, i) for i in range(7)])
    assert len(t.entries[7].batches) == D.BATCHES_KEPT_PER_PRODUCER
    assert D.check(t, 7, 0, 6, 1) == D.Duplicate(6, 6)
    # Older than the kept window: a duplicate whose offsets are gone, committed once the batch before
    # the oldest kept one is (Kafka's DUPLICATE_SEQUENCE_NUMBER, answered as success).
    assert D.check(t, 7, 0, 0, 1) == D.Duplicate(D.UNKNOWN_OFFSET, 1)
    # A gap is still refused.
    assert D.check(t, 7, 0, 9, 1) == D.OutOfOrderSequence(7)


def test_plain_round_trip():
    t = table(*[BatchInfo(i, 2, 1, 7, 0, 2 * i) for i in range(3)], BatchInfo(9, 1, 1, 8, 4, 0))
    assert D.from_plain(D.to_plain(t)) == t


def test_producer_epochs():
    t = table(BatchInfo(0, 1, 0, 7, 2, 0))
    assert D.check(t, 7, 1, 1, 1) == D.InvalidProducerEpoch(2)
    assert D.check(t, 7, 3, 0, 1) == D.Append()
    assert D.check(t, 7, 3, 5, 1) == D.OutOfOrderSequence(0)
    assert D.record_append(t, BatchInfo(1, 1, 0, 7, 3, 0)).entries[7].producer_epoch == 3


def test_non_idempotent_batches_always_append_and_are_not_tracked():
    assert D.check(D.ProducerTable(), -1, -1, -1, 1) == D.Append()
    assert table(BatchInfo(0, 1, 0)).entries == {}


def test_truncate_forgets_cut_batches():
    t = table(BatchInfo(0, 2, 0, 7, 0, 0), BatchInfo(2, 2, 0, 7, 0, 2), BatchInfo(4, 1, 0, 8, 0, 0))
    cut = D.truncate(t, 2)
    assert [b.first_offset for b in cut.entries[7].batches] == [0]
    assert 8 not in cut.entries
    assert cut == D.rebuild([BatchInfo(0, 2, 0, 7, 0, 0)])


def test_producer_table_is_bounded_by_forgetting_the_least_recent(monkeypatch):
    monkeypatch.setattr(D, "PRODUCERS_KEPT_MAX", 3)
    t = table(*[BatchInfo(i, 1, 0, 100 + i, 0, 0) for i in range(5)])
    assert sorted(t.entries) == [102, 103, 104]
