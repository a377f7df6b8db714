"""The broker's log cleaner thread (broker/log/cleaner_manager.py): its pure choices and its checkpoint.

Which log is cleaned (the filthiest above its ratio, or one past max.compaction.lag.ms), how far (never the
active segment, the uncommitted tail or records younger than min.compaction.lag.ms), at what pace (the I/O
throttle), where it got to (cleaner-offset-checkpoint per log dir, read back by the next broker), and that
retention spares compact-only topics. The rewrite itself is cleaner.clean_log's (tests/unit/test_cleaner*.py).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from ads_spark.broker.log.cleaner_manager import (
    CLEANER_CHECKPOINT, CleanerSettings, CleanerStopped, LogCleanerManager, LogToClean, SegmentSummary, Throttle,
    choose_log_to_clean, clean_end_offset, compaction_overdue, dirty_ratio, first_dirty_offset, retention_deletes,
    throttle_sleep_s,
)
from ads_spark.config_compaction import UNLIMITED_BYTES_PER_SECOND

NOW_MS = 1_000_000


def _segments(*sizes: int, records_each: int = 10, max_timestamp_ms: int = NOW_MS - 60_000) -> tuple:
    """Contiguous segments of ``records_each`` offsets each; the last is the active one."""
    return tuple(SegmentSummary(i * records_each, (i + 1) * records_each, size, max_timestamp_ms)
                 for i, size in enumerate(sizes))


def _log(segments, *, first_dirty=0, hw=None, ratio=0.5, min_lag_ms=0, max_lag_ms=2**63 - 1, key=("t", 0)):
    hw = segments[-1].next_offset if hw is None else hw
    return LogToClean(key, segments, first_dirty, hw, ratio, min_lag_ms, max_lag_ms)


# ---- clean end ------------------------------------------------------------------------------------------


def test_the_clean_end_is_below_the_active_segment_the_high_watermark_and_young_records():
    segments = _segments(100, 100, 100, 100)  # offsets 0..39, active from 30
    assert clean_end_offset(_log(segments), NOW_MS) == 30  # the active segment's base
    assert clean_end_offset(_log(segments, hw=25), NOW_MS) == 25  # uncommitted records stay
    young = segments[:1] + (SegmentSummary(10, 20, 100, NOW_MS - 10),) + segments[2:]
    assert clean_end_offset(_log(young, min_lag_ms=1000), NOW_MS) == 10  # the segment holding a young record
    assert clean_end_offset(_log(young, min_lag_ms=0), NOW_MS) == 30
    assert clean_end_offset(_log(young, min_lag_ms=5), NOW_MS) == 30  # 10 ms old: past a 5 ms lag


# ---- dirty ratio and the choice --------------------------------------------------------------------------


def test_the_dirty_ratio_counts_whole_segments_between_the_checkpoint_and_the_clean_end():
    segments = _segments(100, 300, 600, 50)
    assert dirty_ratio(_log(segments), 30) == 1.0  # never cleaned
    assert dirty_ratio(_log(segments, first_dirty=10), 30) == pytest.approx(900 / 1000)
    assert dirty_ratio(_log(segments, first_dirty=20), 30) == pytest.approx(600 / 1000)
    assert dirty_ratio(_log(segments, first_dirty=30), 30) == 0.0  # cleaned up to the active segment
    assert dirty_ratio(_log(segments, first_dirty=10), 20) == pytest.approx(300 / 400)  # the end cuts it
    assert dirty_ratio(_log(_segments(100)), 0) == 0.0  # only an active segment


def test_the_filthiest_log_above_its_ratio_is_chosen():
    a = _log(_segments(500, 500, 100, 10), first_dirty=20, key=("a", 0))  # 100 / 1100
    b = _log(_segments(500, 500, 1500, 10), first_dirty=20, key=("b", 0))  # 1500 / 2500
    c = _log(_segments(100, 900, 10), first_dirty=10, key=("c", 0), ratio=0.95)  # 0.9, below its own 0.95
    choice, highest = choose_log_to_clean([a, b, c], NOW_MS)
    assert choice.log.key == ("b", 0) and choice.clean_end_offset == 30 and choice.dirty_ratio == 0.6
    assert highest == pytest.approx(0.9)
    # Kafka's test is strict: a ratio equal to the threshold waits.
    assert choose_log_to_clean([_log(_segments(500, 500, 10), first_dirty=10)], NOW_MS)[0] is None
    assert choose_log_to_clean([], NOW_MS) == (None, 0.0)


def test_a_log_past_max_compaction_lag_is_cleaned_whatever_its_ratio():
    old = _segments(1000, 10, 10, max_timestamp_ms=NOW_MS - 10_000)  # dirty 10 / 1010
    lazy = _log(old, first_dirty=10, ratio=0.99, max_lag_ms=5_000)
    assert compaction_overdue(lazy, 20, NOW_MS)
    assert choose_log_to_clean([lazy], NOW_MS)[0].log is lazy
    patient = _log(old, first_dirty=10, ratio=0.99, max_lag_ms=20_000)
    assert not compaction_overdue(patient, 20, NOW_MS) and choose_log_to_clean([patient], NOW_MS)[0] is None
    clean = _log(old, first_dirty=20, ratio=0.99, max_lag_ms=5_000)  # nothing dirty: nothing to do
    assert not compaction_overdue(clean, 20, NOW_MS) and choose_log_to_clean([clean], NOW_MS)[0] is None


def test_the_checkpoint_is_used_only_within_the_log():
    assert first_dirty_offset(None, 5, 50) == 5
    assert first_dirty_offset(30, 5, 50) == 30
    assert first_dirty_offset(3, 5, 50) == 5  # retention moved the start past it
    assert first_dirty_offset(60, 5, 50) == 5  # truncated or recreated below it: clean again from the start


@pytest.mark.parametrize("policy, deletes", [("delete", True), ("compact", False), ("compact,delete", True)])
def test_retention_deletes_unless_the_policy_is_compact_alone(policy, deletes):
    assert retention_deletes(policy) is deletes


# ---- throttle ----------------------------------------------------------------------------------------------


def test_the_throttle_pauses_to_keep_the_rate_and_gives_up_when_the_broker_stops():
    assert throttle_sleep_s(1000, 0.5, 1000.0) == pytest.approx(0.5)
    assert throttle_sleep_s(1000, 2.0, 1000.0) == 0.0
    assert throttle_sleep_s(10**12, 0.0, UNLIMITED_BYTES_PER_SECOND) == 0.0
    clock = SimpleNamespace(now=0.0)
    waits: list[float] = []

    class _Stop(threading.Event):
        def wait(self, timeout=None):
            waits.append(timeout)
            clock.now += timeout
            return self.is_set()

    stop = _Stop()
    throttle = Throttle(1000.0, stop, clock=lambda: clock.now)
    throttle(400)  # 0.4 s of budget needed, none elapsed
    assert waits == [pytest.approx(0.4)] and throttle.paused_s == pytest.approx(0.4)
    throttle(2000)  # 2.4 s in all: 2.0 s more, paused in bounded steps
    assert sum(waits) == pytest.approx(2.4) and max(waits) <= 0.5
    stop.set()
    with pytest.raises(CleanerStopped):
        throttle(1)


# ---- the manager ---------------------------------------------------------------------------------------------


@dataclass
class _Log:
    directory: Path
    segments: tuple
    config: SimpleNamespace = field(default_factory=lambda: SimpleNamespace(
        cleanup_policy="compact", min_cleanable_dirty_ratio=0.5, min_compaction_lag_ms=0,
        max_compaction_lag_ms=2**63 - 1, delete_retention_ms=1234))

    def segment_summaries(self):
        return [(s.base_offset, s.next_offset, s.size_bytes, s.max_timestamp_ms) for s in self.segments]

    @property
    def log_start_offset(self):
        return self.segments[0].base_offset

    @property
    def log_end_offset(self):
        return self.segments[-1].next_offset

    def take_truncation_point(self):
        return None


def _partition(log_dir: Path, topic: str, segments, hw=None, policy="compact"):
    partition_log = _Log(log_dir / f"{topic}-0", segments)
    partition_log.config.cleanup_policy = policy
    return SimpleNamespace(key=(topic, 0), log=partition_log,
                           high_watermark=segments[-1].next_offset if hw is None else hw)


class _Cleaner:
    def __init__(self):
        self.calls = []

    def __call__(self, log, **kwargs):
        self.calls.append((log, kwargs))
        kwargs["throttle"](100)
        return SimpleNamespace(bytes_read=1000, bytes_written=400, records_removed=7,
                               cleaned_up_to=kwargs["clean_end_offset_exclusive"])


def test_a_pass_cleans_the_filthiest_compacted_log_and_checkpoints_where_it_got_to(tmp_path):
    partitions = [_partition(tmp_path, "plain", _segments(100, 100, 10), policy="delete"),
                  _partition(tmp_path, "small", _segments(100, 10)),
                  _partition(tmp_path, "big", _segments(100, 100, 100, 10), hw=25)]
    cleaner = _Cleaner()
    settings = CleanerSettings(key_map_entries_max=99, backoff_ms=10)
    manager = LogCleanerManager(settings, [tmp_path], lambda: partitions, clean=cleaner, now_ms=lambda: NOW_MS)
    assert manager.clean_once()
    log, kwargs = cleaner.calls[0]
    assert log is partitions[1].log or log is partitions[2].log  # both never cleaned: ratio 1.0
    assert kwargs["key_map_entries_max"] == 99 and kwargs["delete_retention_ms"] == 1234
    assert kwargs["now_ms"] == NOW_MS and kwargs["min_compaction_lag_ms"] == 0 and kwargs["first_dirty_offset"] == 0
    assert manager.clean_once()
    cleaned = {call[0].directory.name: call[1]["clean_end_offset_exclusive"] for call in cleaner.calls}
    assert cleaned == {"small-0": 10, "big-0": 25}  # the HW, below the active segment's base 30
    assert not manager.clean_once()  # both clean up to their end now; "plain" is never cleaned
    assert (manager.runs, manager.bytes_read, manager.bytes_written) == (2, 2000, 800)
    assert manager.max_dirty_ratio == pytest.approx(1 / 3)  # big: 25..29 of segment 20 (below its 0.5)
    text = (tmp_path / CLEANER_CHECKPOINT).read_text().split("\n")
    assert text[:2] == ["0", "2"] and sorted(text[2:4]) == ["big 0 25", "small 0 10"]
    # A new broker reads it back: the big log is dirty only past 25 (one segment of three below the end).
    partitions[2].high_watermark = 40
    partitions[2].log.config.min_cleanable_dirty_ratio = 0.2
    restarted = LogCleanerManager(settings, [tmp_path], lambda: partitions, clean=cleaner, now_ms=lambda: NOW_MS)
    assert restarted.checkpointed_offset(("big", 0)) == 25
    assert restarted.clean_once() and cleaner.calls[-1][1]["clean_end_offset_exclusive"] == 30
    assert cleaner.calls[-1][1]["first_dirty_offset"] == 25
    assert restarted.max_dirty_ratio == pytest.approx(1 / 3)


def test_the_thread_starts_with_the_broker_backs_off_and_stops_within_its_bound(tmp_path):
    passes = threading.Semaphore(0)

    def partitions():
        passes.release()
        return []

    manager = LogCleanerManager(CleanerSettings(backoff_ms=60_000), [tmp_path], partitions)
    manager.start()
    assert passes.acquire(timeout=5)  # one pass, then the 60 s backoff
    assert not passes.acquire(timeout=0.3)
    started = time.monotonic()
    manager.stop()
    assert time.monotonic() - started < 2 and not manager._thread.is_alive()
    disabled = LogCleanerManager(CleanerSettings(enabled=False), [tmp_path], partitions)
    disabled.start()
    assert disabled._thread is None
    disabled.stop()


# ---- truncation below the checkpoint --------------------------------------------------------------------------


def _real_log(log_dir: Path):
    from ads_spark.broker.log import LogConfig, PartitionLog

    partition_log = PartitionLog.open(log_dir / "t-0", LogConfig(cleanup_policy="compact"), recovery_point=0,
                                      clean_shutdown=False, now_ms=0)
    return SimpleNamespace(key=("t", 0), log=partition_log, high_watermark=0)


def _append(partition, *pairs: tuple[bytes, bytes]) -> None:
    """One batch per record (so that a truncation can fall between any two), then the HW at the log end."""
    import pyarrow as pa

    from ads_spark.protocol.records import PRODUCE_SCHEMA

    for key, value in pairs:
        batch = pa.RecordBatch.from_pylist([{"timestamp": 1000, "key": key, "value": value, "headers": []}],
                                           schema=PRODUCE_SCHEMA)
        partition.log.append_as_leader(batch, leader_epoch=0, now_ms=0)
    partition.high_watermark = partition.log.log_end_offset


def _rows(partition_log) -> list[tuple[int, bytes, bytes]]:
    return [row for batch, _ in partition_log.batches() for row in zip(*(batch.column(name).to_pylist()
                                                                         for name in ("offset", "key", "value")))]


def _checkpoint_file(log_dir: Path) -> list[str]:
    return (log_dir / CLEANER_CHECKPOINT).read_text().split("\n")[2:-1]


def test_records_written_again_below_the_checkpoint_after_a_truncation_are_cleaned_as_dirty(tmp_path):
    from ads_spark.broker.log.cleaner import clean_log

    partition = _real_log(tmp_path)
    passes = []

    def clean(log, **kwargs):
        passes.append(kwargs["first_dirty_offset"])
        return clean_log(log, **kwargs)

    manager = LogCleanerManager(CleanerSettings(), [tmp_path], lambda: [partition], clean=clean,
                                now_ms=lambda: NOW_MS)
    try:
        _append(partition, (b"a", b"a1"), (b"b", b"b1"), (b"c", b"c1"), (b"d", b"d1"))
        partition.log.roll(0)
        assert manager.clean_once() and _checkpoint_file(tmp_path) == ["t 0 4"]  # cleaned to X = 4
        partition.log.truncate_to(2)  # Y = 2 (a follower truncating to its new leader's log)
        _append(partition, (b"c", b"c2"), (b"c", b"c3"), (b"e", b"e1"))  # c2 at 2 and c3 at 3, below X
        partition.log.roll(0)
        assert manager.clean_once()
        # Dirty from Y: c2 is superseded by c3 (both below X) and goes. Before, the pass started at X = 4 and
        # its key map saw only e, so c2 stayed.
        assert passes == [0, 2]
        assert _rows(partition.log) == [(0, b"a", b"a1"), (1, b"b", b"b1"), (3, b"c", b"c3"), (4, b"e", b"e1")]
        assert _checkpoint_file(tmp_path) == ["t 0 5"] and manager.checkpointed_offset(("t", 0)) == 5
    finally:
        partition.log.close()


def test_a_truncation_lowers_the_checkpoint_in_memory_and_on_disk_at_the_next_round(tmp_path):
    partition = _real_log(tmp_path)
    settings = CleanerSettings()
    manager = LogCleanerManager(settings, [tmp_path], lambda: [partition], clean=_Cleaner(), now_ms=lambda: NOW_MS)
    try:
        _append(partition, *[(b"k%d" % i, b"v") for i in range(8)])
        partition.log.roll(0)
        assert manager.clean_once() and manager.checkpointed_offset(("t", 0)) == 8
        partition.log.truncate_to(20)  # above the log end: not a truncation
        partition.log.truncate_to(6)
        partition.log.truncate_to(3)
        _append(partition, *[(b"k%d" % i, b"w") for i in range(3, 12)])  # past 8 again
        assert not manager.clean_once()  # nothing sealed to clean, but the checkpoint follows the lowest cut
        assert manager.checkpointed_offset(("t", 0)) == 3 and _checkpoint_file(tmp_path) == ["t 0 3"]
        restarted = LogCleanerManager(settings, [tmp_path], lambda: [partition], clean=_Cleaner())
        assert restarted.checkpointed_offset(("t", 0)) == 3  # a new broker reads the lowered one back
        partition.log.truncate_to(10)  # above the checkpoint: it stays
        assert not manager.clean_once() and manager.checkpointed_offset(("t", 0)) == 3
        partition.log.truncate_fully_and_start_at(1)  # a follower restarting at its leader's log start
        assert not manager.clean_once() and _checkpoint_file(tmp_path) == ["t 0 1"]
    finally:
        partition.log.close()


# ---- produce to a compacted topic ----------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
def test_a_batch_with_a_keyless_record_is_refused_on_a_compacted_topic_naming_topic_and_policy(policy):
    import pyarrow as pa

    from ads_spark.broker.rpc.data_handlers import check_keys_for_policy
    from ads_spark.errors import ErrorCode, InvalidRecordError
    from ads_spark.protocol.records import PRODUCE_SCHEMA

    def batch(keys):
        return pa.RecordBatch.from_pylist([{"timestamp": 0, "key": k, "value": b"v", "headers": []} for k in keys],
                                          schema=PRODUCE_SCHEMA)

    check_keys_for_policy(batch([b"a", b"b"]), "t", policy)
    check_keys_for_policy(batch([b"a", None]), "t", "delete")
    with pytest.raises(InvalidRecordError, match=f"'t' has cleanup.policy={policy}.*record 1") as refused:
        check_keys_for_policy(batch([b"a", None, b"c"]), "t", policy)
    assert refused.value.code == ErrorCode.INVALID_RECORD
