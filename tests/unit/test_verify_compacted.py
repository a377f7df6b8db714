"""``ads verify-replicas`` on compacted topics (cli/verify_cmd.compare_compacted): replicas that cleaned
different amounts agree when the latest value of every key below the cleaned point and every record above it
agree; a lost latest value, a wrong value or a record missing above the cleaned point is named."""

from __future__ import annotations

from ads_spark.cli.verify_cmd import compare_replicas

# The log as appended: k1 at 0, 2, 5 (5 is a tombstone), k2 at 1 and 4, k3 at 3, k1 again at 7, k4 at 6.
RAW = [[0, "k1", "a"], [1, "k2", "b"], [2, "k1", "c"], [3, "k3", "d"], [4, "k2", "e"], [5, "k1", None],
       [6, "k4", "f"], [7, "k1", "g"]]


def _status(records, cleaned_up_to, hw=8, start=0, records_end=None):
    return {"high_watermark": hw, "log_start_offset": start, "batches": [], "cleaned_up_to": cleaned_up_to,
            "records": records, "records_end": hw if records_end is None else records_end}


def test_replicas_cleaned_to_different_points_agree_on_what_compaction_keeps():
    cleaned_to_6 = [[3, "k3", "d"], [4, "k2", "e"], [5, "k1", None], [6, "k4", "f"], [7, "k1", "g"]]
    tombstone_gone = [[3, "k3", "d"], [4, "k2", "e"], [6, "k4", "f"], [7, "k1", "g"]]
    assert compare_replicas({1: _status(RAW, 0), 2: _status(cleaned_to_6, 6), 3: _status(tombstone_gone, 6)}) == (
        8, None)


def test_a_lost_latest_value_a_changed_value_or_a_missing_record_above_the_cleaned_point_is_named():
    lost_k2 = [[3, "k3", "d"], [5, "k1", None], [6, "k4", "f"], [7, "k1", "g"]]
    _, difference = compare_replicas({1: _status(RAW, 0), 2: _status(lost_k2, 6)})
    assert "below offset 6" in difference and "k2" in difference and "(4, 'e')" in difference
    stale_k2 = [[1, "k2", "b"], [3, "k3", "d"], [5, "k1", None], [6, "k4", "f"], [7, "k1", "g"]]
    _, difference = compare_replicas({1: _status(RAW, 0), 2: _status(stale_k2, 6)})
    assert "k2" in difference and "(1, 'b')" in difference
    missing_above = [[3, "k3", "d"], [4, "k2", "e"], [5, "k1", None], [7, "k1", "g"]]
    _, difference = compare_replicas({1: _status(RAW, 0), 2: _status(missing_above, 6)})
    assert "above offset 6" in difference and "[6, 'k4', 'f']" in difference


def test_only_the_range_every_replica_committed_and_reported_is_compared():
    behind = _status(RAW[:6], 0, hw=6)
    assert compare_replicas({1: _status(RAW, 0), 2: behind}) == (6, None)
    cut = _status(RAW, 0, records_end=4)  # stopped at RECORDS_REPORTED_MAX
    assert compare_replicas({1: _status(RAW, 0), 2: cut}) == (4, None)


def _log_with(directory, records):
    import pyarrow as pa

    from ads_spark.broker.log import LogConfig
    from ads_spark.broker.log.partition_log import PartitionLog
    from ads_spark.protocol.records import PRODUCE_SCHEMA

    log = PartitionLog.open(directory, LogConfig(segment_bytes=1024, cleanup_policy="compact"), recovery_point=0,
                            clean_shutdown=False, now_ms=0)
    for i in range(0, len(records), 2):
        rows = [{"timestamp": 0, "key": k, "value": v, "headers": []} for k, v in records[i:i + 2]]
        log.append_as_leader(pa.RecordBatch.from_pylist(rows, schema=PRODUCE_SCHEMA), leader_epoch=0, now_ms=0)
        log.roll(0)  # one segment per batch: every segment but the active one is cleanable
    return log


def test_replica_status_of_a_cleaned_and_an_uncleaned_replica_agree_and_a_changed_value_is_found(tmp_path):
    from ads_spark.broker.log.cleaner import clean_log
    from ads_spark.broker.rpc.verify_handlers import compacted_status

    appended = [(b"k%d" % (i % 3), b"v%d" % i) for i in range(12)] + [(b"k0", None), (b"k1", b"last")]
    logs = {"cleaned": appended, "uncleaned": appended,
            "superseded_changed": appended[:5] + [(b"k2", b"other")] + appended[6:],  # k2 at 5: later ones win
            "latest_changed": appended[:-1] + [(b"k1", b"other")]}
    logs = {name: _log_with(tmp_path / f"{name.replace('_', '-')}-0", records) for name, records in logs.items()}
    try:
        hw = logs["cleaned"].log_end_offset
        stats = clean_log(logs["cleaned"], clean_end_offset_exclusive=hw, now_ms=0, delete_retention_ms=10**9,
                          min_compaction_lag_ms=0, key_map_entries_max=100, throttle=lambda _n: None)
        assert stats.records_removed > 0 and stats.cleaned_up_to == hw
        # No checkpoint yet (it is written just after the swap): the cleaned batches' headers say how far.
        status = {name: {"high_watermark": hw, "log_start_offset": 0, "batches": [],
                         **compacted_status(log, hw, 0, checkpointed=None)} for name, log in logs.items()}
        assert status["cleaned"]["cleaned_up_to"] >= hw - 2 and len(status["cleaned"]["records"]) < hw
        assert status["uncleaned"]["cleaned_up_to"] == 0 and len(status["uncleaned"]["records"]) == hw
        assert compare_replicas({1: status["cleaned"], 2: status["uncleaned"]}) == (hw, None)
        # Below the cleaned point only the latest value per key must agree; above it, every record.
        assert compare_replicas({1: status["cleaned"], 2: status["superseded_changed"]}) == (hw, None)
        _, difference = compare_replicas({1: status["uncleaned"], 2: status["superseded_changed"]})
        assert "above offset 0" in difference and "[5, " in difference
        _, difference = compare_replicas({1: status["cleaned"], 2: status["latest_changed"]})
        assert "below offset" in difference and f"({hw - 1}, " in difference
    finally:
        for log in logs.values():
            log.close()
