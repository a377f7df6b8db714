"""Storage that no input can poison (issue #20, findings 3 and 4).

* The offset checkpoints: the writer leaves out (and logs) an entry whose line
  would not read back; the reader keeps the good lines of a damaged file and
  names file, line and problem of the others; a count mismatch is a warning. A
  LogManager over hand-damaged checkpoints still opens and recovers every
  partition from its log.
* The leader-epoch checkpoint: a damaged one is rebuilt from the log's batch
  headers (``PartitionLog.leader_epoch_starts``, by bisection).
* Paths: a topic name that is not Kafka's, or a partition directory that
  resolves outside ``log.dirs``, is refused before anything is created or
  deleted.
"""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

from ads_spark.broker.log import LeaderEpochFile, LogConfig, LogManager, OffsetCheckpointFile
from ads_spark.errors import InvalidRequestError, InvalidTopicError
from ads_spark.protocol.names import TOPIC_NAME_RE, is_valid_topic_name, validate_topic_name
from tests.fixtures.logs import open_log, produce_batch, stored_values, values_for

pytestmark = pytest.mark.timeout(30)

CHECKPOINT_LOGGER = "ads.log"


def _messages(caplog, level=logging.WARNING) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == CHECKPOINT_LOGGER and r.levelno >= level]


# ---- topic names ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["orders", "my.topic-x", "a" * 249, "A_1", "..."])
def test_valid_topic_names(name):
    assert is_valid_topic_name(name) and validate_topic_name(name) == name


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "../x", "a/b", "a b", "orders\n", "x\ud800", "é",
                                  "t\x00", None, 7, b"orders"])
def test_invalid_topic_names(name):
    assert not is_valid_topic_name(name)
    with pytest.raises(InvalidTopicError):
        validate_topic_name(name)


def test_topic_name_errors_are_short_and_name_the_field():
    with pytest.raises(InvalidTopicError) as caught:
        validate_topic_name("x" * (1 << 20), where="partitions[0].topic")
    message = str(caught.value)
    assert len(message) < 300 and "partitions[0].topic" in message and "[a-zA-Z0-9._-]" in message
    assert TOPIC_NAME_RE.match("orders\n") is None  # "$" would have matched before the newline


# ---- offset checkpoints: the writer -----------------------------------------------------------------

def test_writer_leaves_out_every_entry_it_could_not_read_back(tmp_path, caplog):
    path = tmp_path / "replication-offset-checkpoint"
    checkpoint = OffsetCheckpointFile(path)
    good = {("orders", 0): 5, ("my.topic-x", 3): 7, ("big", 2**31 - 1): 2**63 - 1}
    poison = {("", 0): 18, ("../x", 1): 2, ("a b", 0): 1, ("t\n9 9", 0): 1, ("x\ud800", 0): 1,
              ("ok", True): 1, ("ok", 1.5): 1, ("ok", -1): 1, ("ok", "2"): 1, ("ok", 3): -4, ("ok", 4): "5",
              ("ok", 5): None, ("ok", 2**31): 0}
    with caplog.at_level(logging.ERROR, logger=CHECKPOINT_LOGGER):
        checkpoint.write({**poison, **good, ("numpy", np.int64(1)): np.int64(9)})
    assert checkpoint.read() == {**good, ("numpy", 1): 9}
    lines = path.read_text().splitlines()
    assert lines[:2] == ["0", "4"] and len(lines) == 6
    errors = _messages(caplog, logging.ERROR)
    assert len(errors) == len(poison) and all(str(path) in e and "would not read back" in e for e in errors)
    assert any("topic ''" in e for e in errors)
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger=CHECKPOINT_LOGGER):
        checkpoint.write({**poison, **good})  # every checkpoint interval: reported once, not each time
    assert _messages(caplog, logging.ERROR) == [] and checkpoint.read() == good


# ---- offset checkpoints: the reader -----------------------------------------------------------------

def test_reader_keeps_the_good_entries_and_names_file_and_line_of_the_bad(tmp_path, caplog):
    path = tmp_path / "recovery-point-offset-checkpoint"
    path.write_bytes(b"0\n6\n"
                     b"orders 0 10\n"          # line 3: good
                     b" 0 18\n"                # line 4: the phantom partition of finding 3 (2 fields)
                     b"orders 1 1x\n"          # line 5: a bad number
                     b"../x 0 5\n"             # line 6: not a topic name
                     b"orders \xff\xfe 3\n"    # line 7: not UTF-8
                     b"my-topic 3 +4\n"        # line 8: int() would take it; the writer never writes it
                     b"\n"
                     b"my-topic 2 4\n")        # line 10: good
    with caplog.at_level(logging.WARNING, logger=CHECKPOINT_LOGGER):
        assert OffsetCheckpointFile(path).read() == {("orders", 0): 10, ("my-topic", 2): 4}
    warnings = "\n".join(_messages(caplog))
    for line, problem in [(4, "expected 3 fields"), (5, "offset '1x' is not a decimal integer"),
                          (6, "topic '../x' is not a valid topic name"), (7, "partition"),
                          (8, "offset '+4' is not a decimal integer"),
                          (2, "the count says 6 entries, the file has 7 entry lines")]:
        assert f"{path}: line {line}: {problem}" in warnings, (line, warnings)


def test_count_mismatch_is_a_warning_and_a_bad_header_loses_only_this_file(tmp_path, caplog):
    path = tmp_path / "log-start-offset-checkpoint"
    path.write_text("0\n18\norders 0 1\norders 1 2\n")
    with caplog.at_level(logging.WARNING, logger=CHECKPOINT_LOGGER):
        assert OffsetCheckpointFile(path).read() == {("orders", 0): 1, ("orders", 1): 2}
        assert "line 2: the count says 18 entries, the file has 2 entry lines" in "\n".join(_messages(caplog))
        for text in ["", "x\n1\norders 0 1\n", "1\n1\norders 0 1\n", "0\nmany\norders 0 1\n"]:
            path.write_text(text)
            expected = {("orders", 0): 1} if text.startswith("0\n") else {}
            assert OffsetCheckpointFile(path).read() == expected, text
    assert "line 1: version 'x', expected 0" in "\n".join(_messages(caplog))


def test_duplicate_entries_keep_the_lower_offset(tmp_path, caplog):
    path = tmp_path / "replication-offset-checkpoint"
    path.write_text("0\n2\norders 0 9\norders 0 4\n")
    with caplog.at_level(logging.WARNING, logger=CHECKPOINT_LOGGER):
        assert OffsetCheckpointFile(path).read() == {("orders", 0): 4}
    assert "line 4: orders-0 appears again" in "\n".join(_messages(caplog))


# ---- a log manager over damaged checkpoints -----------------------------------------------------------

def _fill(manager, topic, partition, batches, records=5):
    log = manager.get_or_create(topic, partition, LogConfig(segment_bytes=3_000), None, now_ms=0)
    for _ in range(batches):
        log.append_as_leader(produce_batch(values_for(log.log_end_offset, records)), leader_epoch=0, now_ms=0)
    return log


def test_log_manager_opens_over_poisoned_checkpoints_and_recovers_the_partitions(tmp_path, caplog):
    manager = LogManager.open(tmp_path, LogConfig(), 0)
    orders0, orders1 = _fill(manager, "orders", 0, 6), _fill(manager, "orders", 1, 6)
    orders1.advance_log_start_offset(12)
    manager.checkpoint_recovery_points()
    for partition_log in (orders0, orders1):
        partition_log.flush()
    last = orders1._segments[-1]
    torn_at = last.index.entry(last.batch_count - 1)
    for partition_log in (orders0, orders1):
        for segment in partition_log._segments:
            segment.close()  # crash: no close(), no clean-shutdown marker
    os.truncate(last.path, torn_at.position + 7)  # orders-1 lost the end of its last batch
    (tmp_path / "recovery-point-offset-checkpoint").write_text("0\n3\n 0 18\norders 1 x9\norders 0 30\n")
    (tmp_path / "log-start-offset-checkpoint").write_text("0\n2\norders 1 12 extra\norders 0 0\n")
    (tmp_path / "replication-offset-checkpoint").write_text("0\n18\norders 0 ten\norders 1 25\n")

    with caplog.at_level(logging.WARNING, logger=CHECKPOINT_LOGGER):
        recovered = LogManager.open(tmp_path, LogConfig(), 0)
    assert set(recovered.logs()) == {("orders", 0), ("orders", 1)}
    orders0, orders1 = recovered.get("orders", 0), recovered.get("orders", 1)
    assert stored_values(orders0) == {i: b"value-%d" % i for i in range(30)}
    # orders-1 had no recovery point left: its whole tail was validated and the torn batch cut off;
    # its log start fell back to the first offset on disk.
    assert orders1.log_end_offset == torn_at.base_offset
    first_on_disk = orders1.segment_base_offsets[0]
    assert 0 < first_on_disk <= 12 and orders1.log_start_offset == first_on_disk
    assert stored_values(orders1) == {i: b"value-%d" % i for i in range(first_on_disk, torn_at.base_offset)}
    assert recovered.read_high_watermarks() == {("orders", 1): 25}
    # The next checkpoint writes clean files again.
    assert OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint").read() == {
        ("orders", 0): 30, ("orders", 1): torn_at.base_offset}
    warnings = "\n".join(_messages(caplog))
    assert "recovery-point-offset-checkpoint: line 3: expected 3 fields" in warnings
    assert "recovery-point-offset-checkpoint: line 4: offset 'x9' is not a decimal integer" in warnings
    assert "log-start-offset-checkpoint: line 3: expected 3 fields" in warnings
    recovered.close()


def test_log_manager_skips_directories_of_invalid_topics(tmp_path, caplog):
    (tmp_path / "bad name-0").mkdir()
    (tmp_path / "good-0").mkdir()
    with caplog.at_level(logging.ERROR, logger=CHECKPOINT_LOGGER):
        manager = LogManager.open(tmp_path, LogConfig(), 0)
    assert set(manager.logs()) == {("good", 0)} and (tmp_path / "bad name-0").is_dir()
    assert "not a valid topic name" in "\n".join(_messages(caplog, logging.ERROR))
    manager.close()


# ---- leader-epoch checkpoint rebuilt from the log ---------------------------------------------------------

def _log_with_epochs(directory, epochs_per_batch):
    log = open_log(directory, LogConfig(segment_bytes=3_000))
    for epoch in epochs_per_batch:
        log.append_as_leader(produce_batch(values_for(log.log_end_offset, 3)), leader_epoch=epoch, now_ms=0)
    return log


def _linear_epoch_starts(log):
    starts = []
    for _, header in log.batches(log.segment_base_offsets[0]):
        if not starts or header.leader_epoch > starts[-1][0]:
            starts.append((header.leader_epoch, header.base_offset))
    return starts


def test_leader_epoch_starts_bisects_to_what_a_full_scan_finds(tmp_path):
    epochs = [0] * 7 + [1] + [2] * 30 + [5] * 3 + [6] + [9] * 40
    log = _log_with_epochs(tmp_path / "t-0", epochs)
    assert len(log.segment_base_offsets) > 3
    expected = _linear_epoch_starts(log)
    assert [e for e, _ in expected] == [0, 1, 2, 5, 6, 9]
    assert log.leader_epoch_starts() == expected
    log.advance_log_start_offset(expected[3][1] + 1)  # inside epoch 5
    assert log.leader_epoch_starts() == [(5, expected[3][1] + 1), (6, expected[4][1]), (9, expected[5][1])]
    log.close()
    assert open_log(tmp_path / "empty").leader_epoch_starts() == []


@pytest.mark.parametrize("content, line", [
    ("0\n3\n0 0\n2 21\n", "line 2: the count says 3 entries"),
    ("0\n2\n0 0\n2\n", "line 4: expected 2 fields"),
    ("0\n2\n0 0\n2 2l\n", "line 4: start offset '2l' is not a decimal integer"),
    ("0\n2\n2 0\n1 5\n", "line 4: entry 1 5 does not follow line 3's 2 0"),
    ("7\n0\n", "line 1: version '7'"),
])
def test_damaged_leader_epoch_checkpoint_is_rebuilt_from_the_log(tmp_path, caplog, content, line):
    log = _log_with_epochs(tmp_path / "t-0", [0, 0, 2, 2, 2, 3])
    path = tmp_path / "t-0" / "leader-epoch-checkpoint"
    path.write_text(content)
    with caplog.at_level(logging.WARNING, logger=CHECKPOINT_LOGGER):
        epochs = LeaderEpochFile(path, rebuild_from=log.leader_epoch_starts)
    assert epochs.entries == [(0, 0), (2, 6), (3, 15)]
    assert path.read_text() == "0\n3\n0 0\n2 6\n3 15\n"  # rewritten, so the next start is quiet
    warning = "\n".join(_messages(caplog))
    assert f"{path}: {line}" in warning and "rebuilt it from the log's batch headers" in warning
    assert LeaderEpochFile(path).entries == [(0, 0), (2, 6), (3, 15)]
    log.close()


# ---- paths stay under log.dirs ---------------------------------------------------------------------------

def _tree(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("topic", ["../../x/victim", "../x/victim", "..", ".", "", "a/b", "/abs", "x\ud800",
                                   "t\n", "x" * 1_000_000])
def test_log_manager_refuses_topics_outside_log_dirs_and_touches_nothing(tmp_path, topic):
    log_dir = tmp_path / "data" / "logs"
    victim = tmp_path / "x" / "victim"
    victim.mkdir(parents=True)
    (victim / "keep.txt").write_text("was here before")
    (tmp_path / "data" / "x").mkdir(parents=True)  # "../x/victim" from log_dir would land here
    manager = LogManager.open(log_dir, LogConfig(), 0)
    before = _tree(tmp_path)
    with pytest.raises(InvalidTopicError) as caught:
        manager.get_or_create(topic, 0, LogConfig(), None, now_ms=0)
    assert len(str(caught.value)) < 300
    with pytest.raises(InvalidTopicError):
        manager.remove(topic, 0)
    manager.checkpoint_recovery_points()
    assert _tree(tmp_path) == before and (victim / "keep.txt").read_text() == "was here before"
    manager.close()


def test_log_manager_refuses_bad_partition_numbers_and_topic_ids(tmp_path):
    manager = LogManager.open(tmp_path, LogConfig(), 0)
    for partition in (-1, True, "0", 2**31, 1.0):
        with pytest.raises(InvalidRequestError):
            manager.get_or_create("orders", partition, LogConfig(), None, now_ms=0)
    with pytest.raises(InvalidRequestError):
        manager.get_or_create("orders", 0, LogConfig(), "id\ntopic_id: other", now_ms=0)
    assert [p.name for p in tmp_path.iterdir() if p.is_dir()] == []
    manager.close()


def test_a_partition_directory_that_resolves_outside_log_dirs_is_refused(tmp_path):
    log_dir, outside = tmp_path / "logs", tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    log_dir.mkdir()
    (log_dir / "evil-0").symlink_to(outside, target_is_directory=True)
    manager = LogManager.open(log_dir, LogConfig(), 0)
    assert manager.logs() == {}  # not loaded at start-up either
    with pytest.raises(InvalidTopicError, match="not directly under the log directory"):
        manager.get_or_create("evil", 0, LogConfig(), None, now_ms=0)
    with pytest.raises(InvalidTopicError):
        manager.remove("evil", 0)
    assert sorted(p.name for p in outside.iterdir()) == ["keep.txt"]
    manager.close()


def test_a_broker_starts_over_damaged_checkpoints_and_rebuilds_the_epoch_cache(tmp_path, caplog):
    from ads_spark.broker.broker import Broker
    from ads_spark.config import BrokerConfig

    manager = LogManager.open(tmp_path, LogConfig(), 0)
    log = manager.get_or_create("orders", 0, LogConfig(), "tid", now_ms=0)
    for epoch in (0, 0, 2, 2, 5):
        log.append_as_leader(produce_batch(values_for(log.log_end_offset, 4)), leader_epoch=epoch, now_ms=0)
    manager.checkpoint_high_watermarks({("orders", 0): 12})
    manager.close()
    (tmp_path / "replication-offset-checkpoint").write_text("0\n2\n 0 20\norders 0 1.2e1\n")
    (tmp_path / "recovery-point-offset-checkpoint").write_text("0\n1\norders 0\n")
    (tmp_path / "orders-0" / "leader-epoch-checkpoint").write_text("0\n3\n0 0\n2 x\n5 16\n")

    config = BrokerConfig({"broker.id": "1", "log.dirs": str(tmp_path), "zookeeper.connect": "127.0.0.1:1",
                           "metrics.port": "-1"})
    with caplog.at_level(logging.WARNING, logger=CHECKPOINT_LOGGER):
        broker = Broker(config)  # no ZooKeeper: storage only
        try:
            broker.start()
            partition = broker.ensure_partition("orders", 0, "tid", {})
            assert partition.log_end_offset == 20 and partition.high_watermark == 0
            assert partition.epochs.entries == [(0, 0), (2, 8), (5, 16)]
        finally:
            broker.stop(controlled=False)
    warnings = "\n".join(_messages(caplog))
    assert "orders-0/leader-epoch-checkpoint: line 4: start offset 'x' is not a decimal integer" in warnings
    assert "replication-offset-checkpoint: line 4: offset '1.2e1' is not a decimal integer" in warnings
