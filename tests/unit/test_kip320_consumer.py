"""KIP-320, the consumer half, pure: where a position diverged from the leader's log, and what the "ads" source
does about it (truncation.py), with the epochs its checkpointed offsets carry (offsets.py)."""

import json
import logging

import pytest

from ads_spark.errors import InvalidRequestError, LogTruncationError, OffsetOutOfRangeError
from ads_spark.protocol import request_schemas as rs
from ads_spark.replication.epochs import (
    UNDEFINED_EPOCH,
    UNDEFINED_OFFSET,
    consumer_divergence,
    end_offset_for,
    from_pairs,
)
from ads_spark.spark.source import truncation
from ads_spark.spark.source.offsets import PartitionState, SourceOffset, TopicState, latest_of
from ads_spark.spark.source.planning import DataLossError, plan_ranges

# The unclean election of the integration tests: offsets 0..119 read in epoch 1, the new leader had 0..19.
NEW_LEADER = from_pairs([(0, 0), (1, 5), (3, 20)])


def ask(position, epoch, cache=NEW_LEADER, log_end=170):
    return consumer_divergence(position, epoch, end_offset_for(cache, epoch, log_end), log_end)


def test_a_position_past_the_end_of_its_epoch_diverges_at_that_end():
    assert ask(120, 1) == (20, 1)  # records 20..119 read in epoch 1 are gone; resume at 20


def test_a_position_inside_its_epoch_or_at_its_end_has_not_diverged():
    assert ask(20, 1) is None
    assert ask(7, 1) is None
    assert ask(160, 3) is None  # the leader's latest epoch ends at its log end


def test_a_position_beyond_the_log_end_in_the_latest_epoch_diverges_at_the_log_end():
    assert ask(200, 3) == (170, 3)


def test_an_epoch_the_leader_skipped_ends_where_the_next_one_starts():
    assert ask(120, 2) == (20, 1)  # epoch 2 never wrote here: the largest epoch <= 2 is 1, ending at 20


def test_an_unknown_epoch_or_nothing_read_is_not_checked():
    assert ask(120, UNDEFINED_EPOCH) is None
    assert ask(0, 1) is None


def test_an_epoch_older_than_the_leaders_log_diverges_at_its_first_offset():
    cache = from_pairs([(4, 50)])
    assert ask(120, 1, cache) == (50, UNDEFINED_EPOCH)


def test_a_leader_that_knows_no_epoch_bounds_the_common_prefix_by_its_log_end():
    assert consumer_divergence(120, 9, (UNDEFINED_EPOCH, UNDEFINED_OFFSET), 30) == (30, UNDEFINED_EPOCH)


def test_log_truncation_error_names_the_partition_and_range_and_is_an_out_of_range_error():
    error = LogTruncationError("orders", 2, 20, 120)
    assert isinstance(error, OffsetOutOfRangeError)
    assert "orders-2" in str(error) and "20..119" in str(error)
    assert (error.divergent_offset, error.lost_to_offset_exclusive) == (20, 120)


def test_the_offset_for_leader_epoch_request_is_checked_at_the_boundary():
    check = rs.checker("offset_for_leader_epoch")
    check({"partitions": [{"topic": "t", "partition": 0, "leader_epoch": 3, "current_leader_epoch": 4}]})
    for bad in ({"partitions": [{"topic": "t", "partition": 0, "leader_epoch": -1}]},
                {"partitions": [{"topic": "t", "partition": 0}]},
                {"partitions": [{"topic": "t", "partition": 0, "leader_epoch": "3"}]}):
        with pytest.raises(InvalidRequestError):
            check(bad)


# ---- the source's offsets carry epochs, and old offsets still read ----------------------------------


def snap(epoch, hw=170):
    return {"orders": TopicState("id1", {0: PartitionState(0, hw, epoch), 1: PartitionState(0, 40, 1)})}


def test_offsets_json_carries_epochs_and_reads_back():
    offset = latest_of(snap(3))
    as_json = offset.to_json_dict()
    assert as_json["topics"]["orders"]["epochs"] == {"0": 3, "1": 1}
    assert SourceOffset.from_json_dict(json.loads(json.dumps(as_json))) == offset


def test_offsets_without_epochs_keep_their_old_json_and_are_not_checked():
    old = {"version": 1, "topics": {"orders": {"topic_id": "id1", "offsets": {"0": 120, "1": 40}}}}
    offset = SourceOffset.from_json_dict(old)
    assert offset.epochs == {} and offset.to_json_dict() == old
    assert truncation.offsets_to_check(offset, snap(3)) == {}
    kafka_form = SourceOffset.from_json_dict({"orders": {"0": 120}})
    assert truncation.offsets_to_check(kafka_form, snap(3)) == {}


def checkpoint(offset0=120, epoch0=1):
    return SourceOffset({"orders": "id1"}, {("orders", 0): offset0, ("orders", 1): 40},
                        {("orders", 0): epoch0, ("orders", 1): 1})


def test_only_offsets_read_in_another_epoch_than_the_leaders_are_checked():
    assert truncation.offsets_to_check(checkpoint(), snap(3)) == {("orders", 0): 1}
    assert truncation.offsets_to_check(checkpoint(), snap(1)) == {}
    recreated = {"orders": TopicState("id2", snap(3)["orders"].partitions)}
    assert truncation.offsets_to_check(checkpoint(), recreated) == {}  # reconcile reports a re-created topic


ANSWER = {("orders", 0): {"leader_epoch": 1, "end_offset": 20, "log_end_offset": 170, "current_leader_epoch": 3}}


def test_failOnDataLoss_true_fails_naming_topic_partition_and_range():
    found = truncation.truncations(checkpoint(), ANSWER)
    with pytest.raises(DataLossError) as failure:
        truncation.rewind(checkpoint(), found, fail_on_data_loss=True)
    assert "orders-0: offsets 20..119 were truncated" in str(failure.value)


def test_failOnDataLoss_false_logs_the_range_and_rewinds_to_the_divergence_point(caplog):
    found = truncation.truncations(checkpoint(), ANSWER)
    with caplog.at_level(logging.WARNING, logger="ads.spark.source"):
        rewound = truncation.rewind(checkpoint(), found, fail_on_data_loss=False)
    assert "orders-0: offsets 20..119" in caplog.text
    assert rewound.offsets == {("orders", 0): 20, ("orders", 1): 40}
    assert rewound.epochs == {("orders", 0): 3, ("orders", 1): 1}
    # The rewinding batch reads nothing; the batch after it reads what the log holds from 20.
    assert plan_ranges(checkpoint(), rewound, {}) == []
    assert [(r.start_offset_inclusive, r.end_offset_exclusive) for r in plan_ranges(
        rewound, latest_of(snap(3)), {})] == [(20, 170)]


def test_an_answer_at_or_past_the_offset_is_no_truncation():
    fine = {("orders", 0): {**ANSWER[("orders", 0)], "end_offset": 120}}
    assert truncation.truncations(checkpoint(), fine) == []
    assert truncation.rewind(checkpoint(), [], fail_on_data_loss=True) is None


def test_planned_ends_are_labelled_with_the_epoch_they_were_read_in():
    end = SourceOffset({"orders": "id1"}, {("orders", 0): 170, ("orders", 1): 40, ("orders", 2): 9})
    start = SourceOffset({"orders": "id1"}, {("orders", 2): 9}, {("orders", 2): 7})
    labelled = truncation.with_epochs(end, start, snap(3))
    assert labelled.epochs == {("orders", 0): 3, ("orders", 1): 1, ("orders", 2): 7}  # 2: absent, unmoved


# ---- the Consumer's check, with the leader's answer stood in (no broker) --------------------------------


class _AnsweringConsumer:
    """A real Consumer whose offset_for_leader_epoch answers come from a table instead of a broker."""

    def __new__(cls, reset: str, end_offset: int):
        from ads_spark.client.consumer import Consumer

        consumer = Consumer({"bootstrap.servers": "127.0.0.1:1", "auto.offset.reset": reset})
        consumer._positions = {("orders", 0): 120}
        consumer._position_epochs = {("orders", 0): 1}
        consumer.offsets_for_leader_epochs = lambda epochs: {
            key: {"leader_epoch": 1, "end_offset": end_offset, "log_end_offset": 170, "current_leader_epoch": 3}
            for key in epochs}
        return consumer


def test_consumer_check_with_reset_none_raises_and_keeps_the_position():
    consumer = _AnsweringConsumer("none", end_offset=20)
    try:
        assert consumer._needs_validation(("orders", 0), 3) and not consumer._needs_validation(("orders", 0), 1)
        with pytest.raises(LogTruncationError, match="orders-0: offsets 20..119"):
            consumer._validate_position(("orders", 0), 120)
        assert consumer._positions[("orders", 0)] == 120
    finally:
        consumer.close()


def test_consumer_check_with_a_reset_policy_moves_to_the_divergence_point_and_logs(caplog):
    consumer = _AnsweringConsumer("latest", end_offset=20)
    try:
        with caplog.at_level(logging.WARNING, logger="ads.client.consumer"):
            assert consumer._validate_position(("orders", 0), 120) == 20
        assert "orders-0: offsets 20..119" in caplog.text
        assert consumer._positions[("orders", 0)] == 20 and consumer._position_epochs[("orders", 0)] == 3
    finally:
        consumer.close()


def test_consumer_check_without_divergence_adopts_the_leaders_epoch():
    consumer = _AnsweringConsumer("none", end_offset=150)
    try:
        assert consumer._validate_position(("orders", 0), 120) == 120
        assert consumer._position_epochs[("orders", 0)] == 3  # not asked again in this epoch
    finally:
        consumer.close()


def test_an_out_of_range_answer_is_checked_once_per_position_then_surfaces():
    from types import SimpleNamespace

    from ads_spark.client.poll_fetcher import PollFetcher

    consumer = _AnsweringConsumer("none", end_offset=150)
    checked = []
    validate = consumer._validate_position
    consumer._validate_position = lambda key, position: checked.append(position) or validate(key, position)
    consumer._connections = SimpleNamespace(
        leader_of=lambda topic, partition: (SimpleNamespace(leader=1, leader_epoch=1), None), mark_stale=lambda: None)
    fetcher = PollFetcher(consumer)
    try:
        out_of_range = {"topic": "orders", "partition": 0, "error_code": 1, "message": "beyond the log end"}
        assert fetcher._answer_from(("orders", 0), 120, out_of_range, []).error is None  # held for the check
        fetcher._in_flight.add(1)  # no fetch is sent: only the check before it runs
        fetcher._send_fetches({("orders", 0): 120})
        assert checked == [120]
        # The check kept the position: out of range again there is the caller's error, not another check.
        assert isinstance(fetcher._answer_from(("orders", 0), 120, out_of_range, []).error, OffsetOutOfRangeError)
    finally:
        fetcher.close()
        consumer._connections = SimpleNamespace(close=lambda: None)
        consumer.close()
