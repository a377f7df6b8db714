"""The messages a segment keeps from its last appends: the same bytes as the file, bounded, and forgotten
when the log is cut (broker/log/segment.py, ``RECENT_*``)."""

from __future__ import annotations

import pytest

from ads_spark.broker.log import LogConfig
from ads_spark.broker.log.segment import RECENT_BYTES_MAX, RECENT_MESSAGES_MAX
from ads_spark.errors import StorageError
from tests.fixtures.logs import open_log, produce_batch, values_for

pytestmark = pytest.mark.timeout(30)

CONFIG = LogConfig(max_message_bytes=8 << 20)


def _append(log, values):
    return log.append_as_leader(produce_batch(values), leader_epoch=0, now_ms=0)


def _messages(log):
    return [(message.to_pybytes(), header) for message, header in log.read(0, max_bytes=1 << 30, as_messages=True)]


def _decoded(log):
    return [(batch.to_pylist(), header) for batch, header in log.read(0, max_bytes=1 << 30)]


def test_kept_messages_are_the_bytes_the_file_holds(tmp_path):
    log = open_log(tmp_path / "t-0", CONFIG)
    for i in range(12):  # more than are kept, and one too large to keep
        _append(log, values_for(i * 3, 3) if i != 5 else [b"x" * (RECENT_BYTES_MAX + 1)])
    kept, decoded = _messages(log), _decoded(log)
    assert 0 < len(log._segments[-1]._recent) <= RECENT_MESSAGES_MAX
    log.close()
    from_file = open_log(tmp_path / "t-0", CONFIG, clean_shutdown=True)
    assert from_file._segments[-1]._recent == {}
    assert _messages(from_file) == kept
    assert _decoded(from_file) == decoded


def test_kept_messages_are_bounded_by_count_and_bytes(tmp_path):
    log = open_log(tmp_path / "t-0", CONFIG)
    for i in range(3 * RECENT_MESSAGES_MAX):
        _append(log, [b"%d" % i])
    segment = log._segments[-1]
    assert sorted(segment._recent) == list(range(2 * RECENT_MESSAGES_MAX, 3 * RECENT_MESSAGES_MAX))
    for _ in range(3):
        _append(log, [b"y" * (RECENT_BYTES_MAX // 2 - 1000)])
    assert segment._recent_bytes == sum(message.size for message, _ in segment._recent.values())
    assert segment._recent_bytes <= RECENT_BYTES_MAX


def test_truncation_forgets_what_was_cut(tmp_path):
    log = open_log(tmp_path / "t-0", CONFIG)
    for i in range(4):
        _append(log, values_for(i * 2, 2))
    log.truncate_to(4)
    assert sorted(log._segments[-1]._recent) == [0, 1]
    assert log.read(4, max_bytes=1 << 20, end_offset_exclusive=8) == []
    _append(log, [b"other"])
    assert [batch.column("value").to_pylist() for batch, _ in log.read(0, max_bytes=1 << 20)] == [
        values_for(0, 2), values_for(2, 2), [b"other"]]
    assert _messages(log) == [(m.to_pybytes(), h) for m, h in log.read(0, max_bytes=1 << 20, as_messages=True)]


def test_a_kept_message_that_disagrees_with_the_index_is_refused(tmp_path):
    log = open_log(tmp_path / "t-0", CONFIG)
    _append(log, [b"a"])
    _append(log, [b"bb"])
    segment = log._segments[-1]
    segment._recent[1] = segment._recent[0]  # what a missed invalidation would leave
    with pytest.raises(StorageError, match="is not the one the index holds"):
        log.read(1, max_bytes=1 << 20, as_messages=True)
