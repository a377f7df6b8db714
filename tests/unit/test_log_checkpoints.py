"""LeaderEpochFile, OffsetCheckpointFile and LogManager (recovery, checkpoints, metadata files)."""

from __future__ import annotations

import os

import pytest

from ads_spark.broker.log import LeaderEpochFile, LogConfig, LogManager, OffsetCheckpointFile
from ads_spark.errors import InconsistentTopicIdError, InvalidConfigError, InvariantViolation, StorageError
from tests.fixtures.logs import produce_batch, stored_values, values_for

pytestmark = pytest.mark.timeout(30)


# ---- leader epochs ------------------------------------------------------------------------------

def test_leader_epoch_file_format_and_persistence(tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    epochs = LeaderEpochFile(path)
    assert epochs.entries == [] and epochs.latest_epoch == -1 and not path.exists()
    epochs.assign(0, 0)
    epochs.assign(2, 10)
    epochs.assign(2, 15)  # same epoch: ignored
    epochs.assign(1, 20)  # older epoch: ignored
    assert path.read_text() == "0\n2\n0 0\n2 10\n"
    assert LeaderEpochFile(path).entries == [(0, 0), (2, 10)]
    assert LeaderEpochFile(path).latest_epoch == 2
    assert [p.name for p in tmp_path.iterdir()] == ["leader-epoch-checkpoint"]


def test_leader_epoch_assign_replaces_epochs_that_wrote_nothing(tmp_path):
    epochs = LeaderEpochFile(tmp_path / "lec")
    epochs.assign(1, 0)
    epochs.assign(3, 50)
    epochs.assign(4, 50)  # epoch 3 appended nothing before epoch 4 started at the same offset
    assert epochs.entries == [(1, 0), (4, 50)]
    epochs.assign(5, 40)
    assert epochs.entries == [(1, 0), (5, 40)]


def test_leader_epoch_truncation(tmp_path):
    epochs = LeaderEpochFile(tmp_path / "lec")
    for epoch, start in [(0, 0), (1, 10), (3, 20), (4, 30)]:
        epochs.assign(epoch, start)
    epochs.truncate_from_end(25)
    assert epochs.entries == [(0, 0), (1, 10), (3, 20)]
    epochs.truncate_from_end(20)
    assert epochs.entries == [(0, 0), (1, 10)]
    epochs.assign(3, 20)
    epochs.truncate_from_start(15)
    assert epochs.entries == [(1, 15), (3, 20)]
    epochs.truncate_from_start(20)
    assert epochs.entries == [(3, 20)]
    epochs.truncate_from_start(25)
    assert LeaderEpochFile(tmp_path / "lec").entries == [(3, 25)]


def test_leader_epoch_file_rejects_malformed_content(tmp_path):
    path = tmp_path / "lec"
    path.write_text("0\n3\n0 0\n")
    with pytest.raises(StorageError):
        LeaderEpochFile(path)
    path.write_text("0\n2\n2 0\n1 5\n")
    with pytest.raises(StorageError):
        LeaderEpochFile(path)
    epochs = LeaderEpochFile(tmp_path / "ok")
    epochs._entries = [(2, 5), (1, 9)]
    with pytest.raises(InvariantViolation):
        epochs._persist()


# ---- offset checkpoints ---------------------------------------------------------------------------

def test_offset_checkpoint_round_trip(tmp_path):
    checkpoint = OffsetCheckpointFile(tmp_path / "replication-offset-checkpoint")
    assert checkpoint.read() == {}
    checkpoint.write({("orders", 1): 42, ("my.topic-x", 0): 7})
    assert (tmp_path / "replication-offset-checkpoint").read_text() == "0\n2\nmy.topic-x 0 7\norders 1 42\n"
    assert checkpoint.read() == {("orders", 1): 42, ("my.topic-x", 0): 7}
    # A damaged file costs its bad entries, never the broker's start (tests/unit/test_log_damaged_inputs.py).
    (tmp_path / "replication-offset-checkpoint").write_text("0\n2\norders one 42\norders 2 5\n")
    assert checkpoint.read() == {("orders", 2): 5}
    (tmp_path / "replication-offset-checkpoint").write_text("9\n0\n")
    assert checkpoint.read() == {}


# ---- log manager -------------------------------------------------------------------------------------

def append(log, n):
    first = log.log_end_offset
    return log.append_as_leader(produce_batch(values_for(first, n)), leader_epoch=0, now_ms=0)


def test_log_manager_lifecycle_and_clean_restart(tmp_path):
    manager = LogManager.open(tmp_path, LogConfig(), 0, broker_id=1, cluster_id="c1")
    assert manager.logs() == {} and manager.get("orders", 0) is None
    orders = manager.get_or_create("orders", 0, LogConfig(), "tid-1", now_ms=0)
    other = manager.get_or_create("my-topic", 3, LogConfig(), "tid-2", now_ms=0)
    assert manager.get_or_create("orders", 0, LogConfig(segment_bytes=5_000), "tid-1") is orders
    assert orders.config.segment_bytes == 5_000
    for _ in range(3):
        append(orders, 4)
    append(other, 2)
    manager.checkpoint_high_watermarks({("orders", 0): 8, ("my-topic", 3): 2})
    manager.close()
    assert (tmp_path / ".clean-shutdown").exists()
    assert (tmp_path / "orders-0" / "partition.metadata").read_text() == "version: 0\ntopic_id: tid-1\n"
    assert "broker.id=1\n" in (tmp_path / "meta.properties").read_text()
    assert OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint").read() == {
        ("orders", 0): 12, ("my-topic", 3): 2}

    reopened = LogManager.open(tmp_path, LogConfig(), 0, broker_id=1)
    assert not (tmp_path / ".clean-shutdown").exists()  # a crash from now on is unclean
    assert set(reopened.logs()) == {("orders", 0), ("my-topic", 3)}
    assert reopened.read_high_watermarks() == {("orders", 0): 8, ("my-topic", 3): 2}
    assert stored_values(reopened.get("orders", 0)) == {i: b"value-%d" % i for i in range(12)}
    reopened.remove("my-topic", 3)
    assert reopened.get("my-topic", 3) is None and not (tmp_path / "my-topic-3").exists()
    reopened.close()


def test_log_manager_unclean_restart_recovers_tails_and_log_start(tmp_path):
    manager = LogManager.open(tmp_path, LogConfig(), 0)
    log = manager.get_or_create("t", 0, LogConfig(segment_bytes=3_000), None, now_ms=0)
    for _ in range(12):
        append(log, 5)
    log.advance_log_start_offset(17)
    manager.checkpoint_recovery_points()
    last = log._segments[-1]
    entry = last.index.entry(last.batch_count - 1)
    for segment in log._segments:
        segment.close()  # crash: no close(), no marker
    os.truncate(last.path, entry.position + 7)
    recovered = LogManager.open(tmp_path, LogConfig(), 0)
    log = recovered.get("t", 0)
    assert log.log_end_offset == entry.base_offset and log.log_start_offset == 17
    assert stored_values(log) == {i: b"value-%d" % i for i in range(17, entry.base_offset)}
    assert recovered.read_recovery_points()[("t", 0)] == entry.base_offset


def test_log_manager_refuses_foreign_directories(tmp_path):
    LogManager.open(tmp_path, LogConfig(), 0, broker_id=1, cluster_id="c1").close()
    with pytest.raises(InvalidConfigError, match="broker.id=1"):
        LogManager.open(tmp_path, LogConfig(), 0, broker_id=2)
    with pytest.raises(InvalidConfigError, match="cluster c1"):
        LogManager.open(tmp_path, LogConfig(), 0, broker_id=1, cluster_id="c2")
    manager = LogManager.open(tmp_path, LogConfig(), 0, broker_id=1, cluster_id="c1")
    manager.get_or_create("t", 0, LogConfig(), "old-id", now_ms=0)
    with pytest.raises(InconsistentTopicIdError):
        manager.get_or_create("t", 0, LogConfig(), "new-id")
    manager.close()
    with pytest.raises(StorageError):
        manager.get_or_create("t", 1, LogConfig(), "x")


def test_log_manager_ignores_unrelated_entries_and_finishes_removals(tmp_path):
    (tmp_path / "notes.txt").write_text("hi")
    (tmp_path / "not-a-partition-x").mkdir()
    (tmp_path / "t-0.abc-delete").mkdir()
    manager = LogManager.open(tmp_path, LogConfig(), 0)
    assert manager.logs() == {}
    assert not (tmp_path / "t-0.abc-delete").exists() and (tmp_path / "notes.txt").exists()
    manager.close()
