"""Offset planning, pure: resolving, data loss, new partitions, admission control, splitting."""

import json
import pickle

import pytest

from ads_spark.errors import InvalidConfigError
from ads_spark.spark.source.offsets import PartitionState, SourceOffset, TopicState, earliest_of, latest_of
from ads_spark.spark.source.options import OffsetSpec
from ads_spark.spark.source.planning import (
    AdmissionLimits,
    DataLossError,
    OffsetRange,
    admit,
    fair_shares,
    initial_offset,
    next_end,
    partitions_without_start,
    plan_batch,
    plan_ranges,
    proportional_shares,
    reconcile,
    split_ranges,
    timestamp_lookups,
)


def snap(**topics):
    """snap(orders=("id1", {0: (0, 100), 1: (10, 50)})) -> Snapshot"""
    return {t: TopicState(tid, {p: PartitionState(*v) for p, v in parts.items()}) for t, (tid, parts) in topics.items()}


SNAP = snap(orders=("id1", {0: (0, 100), 1: (10, 50)}), audit=("id2", {0: (0, 7)}))


def offset(ids, **offsets):
    return SourceOffset(ids, {(t.split("_")[0], int(t.split("_")[1])): o for t, o in offsets.items()})


# ---- offsets JSON ------------------------------------------------------------------


def test_offsets_json_is_canonical_and_carries_incarnation():
    a = SourceOffset({"orders": "id1", "audit": "id2"}, {("orders", 10): 5, ("orders", 2): 3, ("audit", 0): 7})
    b = SourceOffset({"audit": "id2", "orders": "id1"}, {("audit", 0): 7, ("orders", 2): 3, ("orders", 10): 5})
    assert json.dumps(a.to_json_dict()) == json.dumps(b.to_json_dict())
    assert a.to_json_dict() == {"version": 1, "topics": {
        "audit": {"topic_id": "id2", "offsets": {"0": 7}},
        "orders": {"topic_id": "id1", "offsets": {"2": 3, "10": 5}}}}
    assert list(a.to_json_dict()["topics"]["orders"]["offsets"]) == ["2", "10"]
    assert SourceOffset.from_json_dict(json.loads(json.dumps(a.to_json_dict()))) == a


def test_kafka_form_offsets_have_unknown_incarnation():
    o = SourceOffset.from_json_dict({"orders": {"0": 5}})
    assert o.topic_ids == {"orders": ""} and o.offsets == {("orders", 0): 5}


# ---- resolving startingOffsets / endingOffsets ----------------------------------------


def test_initial_offset_earliest_latest_and_json():
    assert initial_offset(OffsetSpec("earliest"), SNAP, {}, True) == earliest_of(SNAP)
    assert initial_offset(OffsetSpec("latest"), SNAP, {}, True) == latest_of(SNAP)
    spec = OffsetSpec("offsets", (("audit", 0, -1), ("orders", 0, 42), ("orders", 1, -2)), option="startingOffsets")
    assert initial_offset(spec, SNAP, {}, True).offsets == {("audit", 0): 7, ("orders", 0): 42, ("orders", 1): 10}


def test_json_must_cover_exactly_the_partitions_read():
    spec = OffsetSpec("offsets", (("orders", 0, 1),), option="startingOffsets")
    with pytest.raises(InvalidConfigError, match="missing: audit-0, orders-1"):
        initial_offset(spec, SNAP, {}, True)
    spec = OffsetSpec("offsets", (("audit", 0, 1), ("orders", 0, 1), ("orders", 1, 11), ("orders", 9, 1)),
                      option="startingOffsets")
    with pytest.raises(InvalidConfigError, match="orders-9"):
        initial_offset(spec, SNAP, {}, True)


def test_starting_offset_below_log_start_is_data_loss():
    spec = OffsetSpec("offsets", (("audit", 0, 0), ("orders", 0, 0), ("orders", 1, 3)), option="startingOffsets")
    with pytest.raises(DataLossError, match="orders-1: offsets 3..9 were removed by retention.*failOnDataLoss=false"):
        initial_offset(spec, SNAP, {}, True)
    assert initial_offset(spec, SNAP, {}, False).offsets[("orders", 1)] == 10


def test_starting_offset_beyond_hw_is_rejected():
    spec = OffsetSpec("offsets", (("audit", 0, 8), ("orders", 0, 0), ("orders", 1, 10)), option="startingOffsets")
    with pytest.raises(InvalidConfigError, match="offset 8 of audit-0 is beyond its high watermark 7"):
        initial_offset(spec, SNAP, {}, True)


def test_timestamps_are_looked_up_then_used():
    spec = OffsetSpec("timestamp", timestamp_ms=1000)
    assert timestamp_lookups(spec, SNAP) == {1000: [("audit", 0), ("orders", 0), ("orders", 1)]}
    by_partition = OffsetSpec("timestamps", (("audit", 0, 5), ("orders", 0, 5), ("orders", 1, 9)))
    assert timestamp_lookups(by_partition, SNAP) == {5: [("audit", 0), ("orders", 0)], 9: [("orders", 1)]}
    found = {("audit", 0): 3, ("orders", 0): 60, ("orders", 1): 50}
    assert initial_offset(spec, SNAP, found, True).offsets == found


def test_batch_ranges():
    ending = OffsetSpec("offsets", (("audit", 0, -1), ("orders", 0, 40), ("orders", 1, 10)), option="endingOffsets")
    ranges = plan_batch(OffsetSpec("earliest"), ending, SNAP, {}, {}, True)
    assert ranges == [OffsetRange("audit", 0, "id2", 0, 7), OffsetRange("orders", 0, "id1", 0, 40)]
    too_far = OffsetSpec("offsets", (("audit", 0, 8), ("orders", 0, 1), ("orders", 1, 10)), option="endingOffsets")
    with pytest.raises(InvalidConfigError, match="beyond its high watermark"):
        plan_batch(OffsetSpec("earliest"), too_far, SNAP, {}, {}, True)
    start = OffsetSpec("offsets", (("audit", 0, 5), ("orders", 0, 0), ("orders", 1, 10)), option="startingOffsets")
    end = OffsetSpec("offsets", (("audit", 0, 4), ("orders", 0, 0), ("orders", 1, 10)), option="endingOffsets")
    with pytest.raises(InvalidConfigError, match="audit-0: the ending offset 4 is before the starting offset 5"):
        plan_batch(start, end, SNAP, {}, {}, True)


# ---- streaming: reconcile -----------------------------------------------------------


def test_new_partitions_and_topics_start_from_earliest_without_loss():
    start = offset({"orders": "id1"}, orders_0=90)
    resume, losses = reconcile(start, SNAP)
    assert resume == {("orders", 0): 90, ("orders", 1): 10, ("audit", 0): 0} and losses == []


def test_deleted_and_recreated_topics_are_loss():
    start = offset({"orders": "old", "gone": "id9"}, orders_0=90, orders_1=20, gone_0=3)
    resume, losses = reconcile(start, SNAP)
    assert resume[("orders", 0)] == 0 and resume[("orders", 1)] == 10
    reasons = [loss.describe() for loss in losses]
    assert reasons[0] == "gone: the topic was deleted"
    assert "orders: the topic was deleted and re-created (incarnation old -> id1)" in reasons[1]
    with pytest.raises(DataLossError, match="re-created"):
        next_end(start, SNAP, None, now_ms=0, last_trigger_ms=0, record_bytes={}, target=None,
                 fail_on_data_loss=True)


def test_retention_loss_resumes_at_log_start_and_hw_lag_is_not_loss():
    start = offset({"orders": "id1", "audit": "id2"}, orders_0=100, orders_1=4, audit_0=9)
    resume, losses = reconcile(start, SNAP)
    assert resume == {("orders", 0): 100, ("orders", 1): 10, ("audit", 0): 9}
    assert [loss.partition for loss in losses] == [1]
    end = next_end(start, SNAP, None, now_ms=0, last_trigger_ms=0, record_bytes={}, target=None,
                   fail_on_data_loss=False)
    assert end.offsets == {("orders", 0): 100, ("orders", 1): 50, ("audit", 0): 9}


def test_empty_answer_never_logs_an_empty_offset_map_spark_41375():
    start = offset({"orders": "id1", "audit": "id2"}, orders_0=60, orders_1=20, audit_0=5)
    for fail in (True, False):
        assert next_end(start, {}, None, now_ms=0, last_trigger_ms=0, record_bytes={}, target=None,
                        fail_on_data_loss=fail) == start


def test_a_topic_missing_from_the_answer_keeps_its_offsets_and_resumes_there():
    start = offset({"orders": "id1", "audit": "id2"}, orders_0=60, orders_1=20, audit_0=5)
    without_audit = {"orders": SNAP["orders"]}
    end = next_end(start, without_audit, None, now_ms=0, last_trigger_ms=0, record_bytes={}, target=None,
                   fail_on_data_loss=False)
    assert end.topic_ids == {"orders": "id1", "audit": "id2"}
    assert end.offsets == {("orders", 0): 100, ("orders", 1): 50, ("audit", 0): 5}
    back = next_end(end, SNAP, None, now_ms=0, last_trigger_ms=0, record_bytes={}, target=None,
                    fail_on_data_loss=True)
    assert plan_ranges(end, back, {}) == [OffsetRange("audit", 0, "id2", 5, 7)]  # not re-read from 0
    # reported once: the planner passes the topics it already reported as absent
    assert reconcile(end, without_audit, reported_absent={"audit"})[1] == []
    with pytest.raises(DataLossError, match="audit: the topic was deleted"):
        next_end(end, without_audit, None, now_ms=0, last_trigger_ms=0, record_bytes={}, target=None,
                 fail_on_data_loss=True)


# ---- admission control ------------------------------------------------------------------


def test_fair_shares_is_max_min_fair_and_exact():
    assert fair_shares({"a": 2, "b": 100, "c": 100}, 50) == {"a": 2, "b": 24, "c": 24}
    assert fair_shares({"a": 5, "b": 5}, 100) == {"a": 5, "b": 5}
    shares = fair_shares({"a": 100, "b": 100, "c": 100}, 10)
    assert sum(shares.values()) == 10 and max(shares.values()) - min(shares.values()) <= 1


def test_max_offsets_per_trigger_split_in_proportion_to_backlog_as_spark():
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}
    hw = {("t", 0): 3, ("t", 1): 1000, ("t", 2): 1000}
    end = admit(start, hw, AdmissionLimits(max_offsets=100), now_ms=0, last_trigger_ms=0, record_bytes={})
    # Spark: 100 * 3/2003 rounds up to 1, 100 * 1000/2003 rounds down to 49; here the cap is used exactly.
    assert end == {("t", 0): 1, ("t", 1): 50, ("t", 2): 49}
    assert admit(start, hw, None, now_ms=0, last_trigger_ms=0, record_bytes={}) == hw
    skewed = admit(start, {("t", 0): 100, ("t", 1): 300, ("t", 2): 600}, AdmissionLimits(max_offsets=10),
                   now_ms=0, last_trigger_ms=0, record_bytes={})
    assert skewed == {("t", 0): 1, ("t", 1): 3, ("t", 2): 6}


def test_proportional_shares_never_exceed_the_cap_and_are_deterministic():
    assert proportional_shares({"a": 5, "b": 5}, 100) == {"a": 5, "b": 5}
    assert proportional_shares({"a": 1, "b": 1, "c": 1, "d": 0}, 2) == {"a": 1, "b": 1, "c": 0, "d": 0}
    for budget in range(0, 40):
        demands = {"a": 7, "b": 1, "c": 31, "d": 0, "e": 12}
        shares = proportional_shares(demands, budget)
        assert sum(shares.values()) == min(budget, sum(demands.values()))
        assert all(0 <= shares[k] <= demands[k] for k in demands)
        assert shares == proportional_shares(dict(reversed(list(demands.items()))), budget)


def test_min_offsets_waits_until_max_trigger_delay():
    start, hw = {("t", 0): 0}, {("t", 0): 5}
    limits = AdmissionLimits(min_offsets=10, max_trigger_delay_ms=1000)
    assert admit(start, hw, limits, now_ms=500, last_trigger_ms=0, record_bytes={}) == start
    assert admit(start, hw, limits, now_ms=1000, last_trigger_ms=0, record_bytes={}) == hw
    assert admit(start, {("t", 0): 10}, limits, now_ms=1, last_trigger_ms=0, record_bytes={}) == {("t", 0): 10}


def test_bytes_limit_uses_record_size_estimates_and_never_stalls():
    start = {("t", 0): 0, ("t", 1): 0}
    hw = {("t", 0): 1000, ("t", 1): 1000}
    sizes = {("t", 0): 100.0, ("t", 1): 1000.0}
    end = admit(start, hw, AdmissionLimits(max_bytes=20_000), now_ms=0, last_trigger_ms=0, record_bytes=sizes)
    assert end == {("t", 0): 100, ("t", 1): 10}
    tiny = admit(start, hw, AdmissionLimits(max_bytes=10), now_ms=0, last_trigger_ms=0, record_bytes=sizes)
    assert sum(tiny.values()) == 1


def test_available_now_stops_at_offsets_seen_at_start():
    target = latest_of(snap(orders=("id1", {0: (0, 100)})))
    later = snap(orders=("id1", {0: (0, 150), 1: (0, 20)}))
    start = offset({"orders": "id1"}, orders_0=60)
    end = next_end(start, later, AdmissionLimits(max_offsets=30), now_ms=0, last_trigger_ms=0, record_bytes={},
                   target=target, fail_on_data_loss=True)
    assert end.offsets == {("orders", 0): 90, ("orders", 1): 0}
    end = next_end(end, later, AdmissionLimits(max_offsets=30), now_ms=0, last_trigger_ms=0, record_bytes={},
                   target=target, fail_on_data_loss=True)
    assert end.offsets == {("orders", 0): 100, ("orders", 1): 0}
    again = next_end(end, later, AdmissionLimits(max_offsets=30), now_ms=0, last_trigger_ms=0, record_bytes={},
                     target=target, fail_on_data_loss=True)
    assert again == end


# ---- ranges and splitting -----------------------------------------------------------------


def test_plan_ranges_new_partitions_use_looked_up_start():
    start = offset({"orders": "id1"}, orders_0=10)
    end = offset({"orders": "id1", "audit": "id2"}, orders_0=30, orders_1=5, audit_0=7)
    assert partitions_without_start(start, end) == [("audit", 0), ("orders", 1)]
    ranges = plan_ranges(start, end, {("audit", 0): 0, ("orders", 1): 0})
    assert ranges == [OffsetRange("audit", 0, "id2", 0, 7), OffsetRange("orders", 0, "id1", 10, 30),
                      OffsetRange("orders", 1, "id1", 0, 5)]
    recreated = offset({"orders": "id3"}, orders_0=4)
    assert partitions_without_start(start, recreated) == [("orders", 0)]


def test_split_min_partitions_and_max_records():
    ranges = [OffsetRange("t", 0, "i", 0, 90), OffsetRange("t", 1, "i", 0, 10)]
    pieces = split_ranges(ranges, min_partitions=10, max_records_per_partition=None)
    assert len(pieces) >= 10 and sum(p.record_count for p in pieces) == 100
    assert [p for p in pieces if p.partition == 1] == [ranges[1]]
    pieces = split_ranges(ranges, None, max_records_per_partition=25)
    assert [(p.start_offset_inclusive, p.end_offset_exclusive) for p in pieces if p.partition == 0] == \
        [(0, 23), (23, 46), (46, 68), (68, 90)]
    assert split_ranges(ranges, 2, None) == ranges


def test_offset_range_pickles():
    r = OffsetRange("t", 0, "i", 0, 10)
    assert pickle.loads(pickle.dumps(r)) == r
