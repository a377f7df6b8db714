"""PartitionLog: appends, reads, rolls, flushes, timestamp lookup, truncation, retention, errors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from ads_spark.broker.log import LogConfig
from ads_spark.errors import (
    CorruptMessageError, InvalidRequestError, InvariantViolation, OffsetOutOfRangeError, RecordTooLargeError,
    StorageError,
)
from ads_spark.broker.log.fetched import check_fetched_messages
from ads_spark.broker.log.segment import SCHEMA_MESSAGE, encode_sealed_message
from ads_spark.protocol.records import (
    PRODUCE_SCHEMA, RECORD_SCHEMA, REPLICA_MESSAGE_SCHEMA, TIMESTAMP_TYPE_LOG_APPEND_TIME, BatchHeader,
    as_message_batch, message_of, seal, verify,
)
from tests.fixtures.fresh_interpreter import assert_leaves_pandas_unimported
from tests.fixtures.logs import fill, open_log, produce_batch, stored_values, values_for

pytestmark = pytest.mark.timeout(30)


def segment_files(directory):
    return sorted(p for p in directory.iterdir() if p.suffix == ".arrows")


# ---- appends -----------------------------------------------------------------------------

def test_leader_append_assigns_offsets_and_seals_header(tmp_path):
    log = open_log(tmp_path / "t-0")
    h1 = log.append_as_leader(produce_batch(values_for(0, 3)), leader_epoch=4, now_ms=5,
                              producer_id=77, producer_epoch=2, base_sequence=10)
    h2 = log.append_as_leader(produce_batch(values_for(3, 2), [50, 40]), leader_epoch=5, now_ms=6)
    assert (h1.base_offset, h1.record_count, h1.leader_epoch, h1.max_timestamp_ms) == (0, 3, 4, 1002)
    assert (h1.producer_id, h1.producer_epoch, h1.base_sequence) == (77, 2, 10)
    assert (h2.base_offset, h2.record_count, h2.leader_epoch, h2.max_timestamp_ms) == (3, 2, 5, 50)
    assert log.log_end_offset == 5 and log.log_start_offset == 0
    batches = log.read(0, max_bytes=1 << 20)
    assert [h for _, h in batches] == [h1, h2]
    for batch, header in batches:
        assert batch.schema.equals(RECORD_SCHEMA)
        verify(batch, header)
    assert stored_values(log) == {i: b"value-%d" % i for i in range(5)}
    assert batches[1][0].column("timestamp").cast(pa.int64()).to_pylist() == [50, 40]


@pytest.mark.parametrize("max_timestamp_ms", [0, 1_700_000_000_000])  # the second holds ten zeros in a row
def test_one_serialization_seal_equals_seal_then_encode(max_timestamp_ms):
    offsets = pa.array(np.arange(40, 43, dtype=np.int64))
    produced = produce_batch(values_for(40, 3))
    batch = pa.RecordBatch.from_arrays([offsets, *produced.columns], schema=RECORD_SCHEMA)
    unsealed = BatchHeader(40, 3, 7, max_timestamp_ms, 0, 12, 1, 5)
    message, header = encode_sealed_message(batch, unsealed)
    assert header == seal(batch, unsealed) and header.crc != 0
    stream = pa.py_buffer(SCHEMA_MESSAGE + message.to_pybytes())
    decoded, metadata = ipc.open_stream(stream).read_next_batch_with_custom_metadata()
    assert decoded.equals(batch)
    assert BatchHeader.from_metadata(metadata) == header
    verify(decoded, header)


def test_log_append_time_overwrites_record_timestamps(tmp_path):
    log = open_log(tmp_path / "t-0")
    header = log.append_as_leader(produce_batch(values_for(0, 3), [1, 2, 3]), leader_epoch=0, now_ms=9_000,
                                  timestamp_type=TIMESTAMP_TYPE_LOG_APPEND_TIME)
    batch, stored = log.read(0, max_bytes=1 << 20)[0]
    assert stored == header and header.max_timestamp_ms == 9_000 and header.timestamp_type == 1
    assert batch.column("timestamp").cast(pa.int64()).to_pylist() == [9_000] * 3


def test_oversized_batch_is_rejected_and_changes_nothing(tmp_path):
    log = open_log(tmp_path / "t-0", LogConfig(max_message_bytes=2_000))
    fill(log, [2])
    before = (log.log_end_offset, log.size_bytes, [p.read_bytes() for p in segment_files(tmp_path / "t-0")])
    big = produce_batch([b"x" * 5_000])
    with pytest.raises(RecordTooLargeError):
        log.append_as_leader(big, leader_epoch=0, now_ms=0)
    after = (log.log_end_offset, log.size_bytes, [p.read_bytes() for p in segment_files(tmp_path / "t-0")])
    assert after == before and before[0] == 2


@pytest.mark.parametrize("bad", [
    produce_batch([]),
    pa.RecordBatch.from_arrays([pa.array([b"v"])], names=["value"]),
])
def test_malformed_produce_batch_is_rejected(tmp_path, bad):
    log = open_log(tmp_path / "t-0")
    with pytest.raises(InvalidRequestError):
        log.append_as_leader(bad, leader_epoch=0, now_ms=0)
    assert log.log_end_offset == 0 and log.read(0, max_bytes=100) == []


def test_follower_append_copies_leader_batches_exactly(tmp_path):
    leader, follower = open_log(tmp_path / "a-0"), open_log(tmp_path / "b-0")
    fill(leader, [3, 1, 4], epoch=2)
    follower.append_as_follower(leader.read(0, max_bytes=1 << 20), now_ms=0)
    assert follower.log_end_offset == 8
    assert [h for _, h in follower.batches()] == [h for _, h in leader.batches()]
    assert stored_values(follower) == stored_values(leader)
    follower.append_as_follower([], now_ms=0)
    assert follower.log_end_offset == 8


def test_stored_messages_replicate_byte_for_byte(tmp_path):
    leader, follower = open_log(tmp_path / "a-0"), open_log(tmp_path / "b-0")
    fill(leader, [3, 1, 4], epoch=2)
    messages = leader.read(0, max_bytes=1 << 20, as_messages=True)
    assert [h for _, h in messages] == [h for _, h in leader.read(0, max_bytes=1 << 20)]
    # Through the wire form a follower session uses: one row per stored message, no copy on either side.
    carried = [(message_of(as_message_batch(m)), h) for m, h in messages]
    follower.append_encoded(check_fetched_messages(carried, 0), now_ms=0)
    assert segment_files(tmp_path / "b-0")[0].read_bytes() == segment_files(tmp_path / "a-0")[0].read_bytes()
    assert [h for _, h in follower.batches()] == [h for _, h in leader.batches()]


def test_a_carried_message_is_read_back_in_place_from_any_row():
    message = pa.py_buffer(b"stored bytes")
    assert message_of(as_message_batch(message)).address == message.address  # a view, not a copy
    rows = pa.RecordBatch.from_arrays([pa.array([b"first", b"second"], pa.binary())], schema=REPLICA_MESSAGE_SCHEMA)
    assert [message_of(rows.slice(i, 1)).to_pybytes() for i in range(2)] == [b"first", b"second"]


def test_fetched_messages_are_all_checked_before_any_is_written(tmp_path):
    leader = open_log(tmp_path / "a-0")
    fill(leader, [2, 2, 2])
    good = leader.read(0, max_bytes=1 << 20, as_messages=True)
    flipped = bytearray(good[1][0].to_pybytes())
    flipped[-20] ^= 0xFF  # a bit error in the body of the second batch
    for bad, why in [
        ([good[0], (pa.py_buffer(bytes(flipped)), good[1][1]), good[2]], "CRC mismatch"),
        ([good[0], (good[1][0], dataclasses.replace(good[1][1], crc=good[1][1].crc ^ 1))], "CRC mismatch"),
        ([good[0], good[2]], "expected 2"),  # a gap
        ([(good[0][0], dataclasses.replace(good[0][1], record_count=3))], "header says 3"),
        ([(pa.py_buffer(b"not an ipc message"), good[0][1])], "not an IPC record batch"),
    ]:
        with pytest.raises(CorruptMessageError, match=why):
            check_fetched_messages(bad, 0)


def test_follower_append_checks_everything_before_writing(tmp_path):
    leader, follower = open_log(tmp_path / "a-0"), open_log(tmp_path / "b-0")
    fill(leader, [2, 2, 2])
    good = leader.read(0, max_bytes=1 << 20)
    tampered = [good[0], (good[1][0], dataclasses.replace(good[1][1], crc=good[1][1].crc ^ 1)), good[2]]
    with pytest.raises(CorruptMessageError):
        follower.append_as_follower(tampered, now_ms=0)
    with pytest.raises(CorruptMessageError):
        follower.append_as_follower([good[0], good[2]], now_ms=0)  # a gap after a batch the cleaner never wrote
    assert follower.log_end_offset == 0 and follower.size_bytes == segment_files(tmp_path / "b-0")[0].stat().st_size
    assert follower.read(0, max_bytes=1 << 20) == []
    # Starting after the log end is allowed (the leader's cleaner may have left a gap there); below it is not.
    follower.append_as_follower(good[:1], now_ms=0)
    with pytest.raises(InvariantViolation):
        follower.append_as_follower(good[:1], now_ms=0)
    assert follower.log_end_offset == 2


# ---- reads ------------------------------------------------------------------------------------

def test_read_bounds_and_errors(tmp_path):
    log = open_log(tmp_path / "t-0")
    fill(log, [3, 3, 3])  # batches at 0, 3, 6
    with pytest.raises(OffsetOutOfRangeError):
        log.read(10, max_bytes=100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, max_bytes=100)
    assert log.read(9, max_bytes=100) == []
    assert [h.base_offset for _, h in log.read(4, max_bytes=1)] == [3]  # at least one, the one holding 4
    assert [h.base_offset for _, h in log.read(4, max_bytes=1 << 20)] == [3, 6]
    assert [h.base_offset for _, h in log.read(0, max_bytes=1 << 20, end_offset_exclusive=6)] == [0, 3]
    assert [h.base_offset for _, h in log.read(0, max_bytes=1 << 20, end_offset_exclusive=7)] == [0, 3, 6]
    assert log.read(5, max_bytes=1 << 20, end_offset_exclusive=3) == []
    one_size = log.read(0, max_bytes=1)[0][0]
    assert one_size.num_rows == 3


def test_read_max_bytes_counts_stored_batch_sizes(tmp_path):
    log = open_log(tmp_path / "t-0")
    fill(log, [10] * 6)
    size_one = (segment_files(tmp_path / "t-0")[0].stat().st_size - 400) // 6  # roughly one message
    got = log.read(0, max_bytes=size_one * 3)
    assert 2 <= len(got) <= 3
    assert [h.base_offset for _, h in got] == list(range(0, 10 * len(got), 10))


def test_reads_are_memory_mapped_not_copied(tmp_path):
    log = open_log(tmp_path / "t-0", LogConfig(max_message_bytes=4 << 20))
    for i in range(4):
        log.append_as_leader(produce_batch([bytes([i]) * 200_000] * 5), leader_epoch=0, now_ms=0)
    allocated_before = pa.total_allocated_bytes()
    batches = log.read(0, max_bytes=1 << 30)
    assert sum(b.nbytes for b, _ in batches) > 3_000_000
    assert pa.total_allocated_bytes() - allocated_before < 100_000
    assert batches[3][0].column("value")[0].as_py() == bytes([3]) * 200_000


def test_read_crosses_segments(tmp_path):
    log = open_log(tmp_path / "t-0", LogConfig(segment_bytes=3_000))
    fill(log, [5] * 12)
    assert len(log.segment_base_offsets) > 3
    assert [h.base_offset for _, h in log.read(7, max_bytes=1 << 20)] == list(range(5, 60, 5))
    assert stored_values(log) == {i: b"value-%d" % i for i in range(60)}


def test_batches_survive_truncation_and_overwrite(tmp_path):
    log = open_log(tmp_path / "t-0")
    fill(log, [3, 3])
    held = log.read(3, max_bytes=1 << 20)
    log.truncate_to(3)
    log.append_as_leader(produce_batch([b"other-1", b"other-2", b"other-3"]), leader_epoch=1, now_ms=0)
    assert held[0][0].column("value").to_pylist() == values_for(3, 3)
    assert log.read(3, max_bytes=1 << 20)[0][0].column("value").to_pylist() == [b"other-1", b"other-2", b"other-3"]


# ---- segments, rolls, flushes -----------------------------------------------------------------

def test_roll_by_bytes_and_plain_arrow_segments(tmp_path):
    log = open_log(tmp_path / "t-0", LogConfig(segment_bytes=4_000))
    fill(log, [4] * 20)
    files = segment_files(tmp_path / "t-0")
    assert [int(p.stem) for p in files] == log.segment_base_offsets and len(files) >= 4
    assert all(p.stat().st_size <= 4_000 for p in files)
    rows = []
    for path in files:
        with ipc.open_stream(str(path)) as reader:
            assert reader.schema.equals(RECORD_SCHEMA)
            table = reader.read_all()
        rows += table.column("offset").to_pylist()
    assert rows == list(range(80))


def test_roll_by_ms(tmp_path):
    log = open_log(tmp_path / "t-0", LogConfig(segment_ms=1_000), now_ms=0)
    fill(log, [1], now_ms=10)
    fill(log, [1], now_ms=999)
    assert log.segment_base_offsets == [0]
    fill(log, [1], now_ms=1_000)
    assert log.segment_base_offsets == [0, 2]
    fill(log, [1], now_ms=1_500)
    assert log.segment_base_offsets == [0, 2]
    log.roll(now_ms=1_600)
    log.roll(now_ms=1_700)  # the new active segment is empty: no second roll
    assert log.segment_base_offsets == [0, 2, 4]


def test_roll_moves_recovery_point(tmp_path):
    log = open_log(tmp_path / "t-0", LogConfig(segment_bytes=3_000))
    fill(log, [5] * 6)
    assert log.recovery_point == log.segment_base_offsets[-1] > 0


def test_flush_by_messages_moves_recovery_point(tmp_path):
    log = open_log(tmp_path / "t-0", LogConfig(flush_interval_messages=5))
    fill(log, [2, 2])
    assert log.recovery_point == 0
    fill(log, [2])
    assert log.recovery_point == 6
    fill(log, [1])
    assert log.recovery_point == 6
    log.flush()
    assert log.recovery_point == 7


def test_flush_by_ms(tmp_path):
    log = open_log(tmp_path / "t-0", LogConfig(flush_interval_ms=100), now_ms=1_000)
    fill(log, [3])
    log.maybe_flush(1_050)
    assert log.recovery_point == 0
    log.maybe_flush(1_100)
    assert log.recovery_point == 3
    fill(log, [3])
    log.maybe_flush(1_150)
    assert log.recovery_point == 3
    log.maybe_flush(1_200)
    assert log.recovery_point == 6


# ---- timestamps ---------------------------------------------------------------------------------

def test_offset_for_timestamp(tmp_path):
    log = open_log(tmp_path / "t-0", LogConfig(segment_bytes=3_000))
    log.append_as_leader(produce_batch(values_for(0, 3), [100, 300, 200]), leader_epoch=0, now_ms=0)  # 0..2
    log.append_as_leader(produce_batch(values_for(3, 3), [150, 250, 260]), leader_epoch=0, now_ms=0)  # 3..5
    log.append_as_leader(produce_batch(values_for(6, 3), [400, 390, 500]), leader_epoch=0, now_ms=0)  # 6..8
    for _ in range(3):
        log.append_as_leader(produce_batch(values_for(0, 3), [600, 700, 800]), leader_epoch=0, now_ms=0)
    assert len(log.segment_base_offsets) > 1
    assert log.offset_for_timestamp(0) == (0, 100)
    assert log.offset_for_timestamp(101) == (1, 300)
    assert log.offset_for_timestamp(301) == (6, 400)
    assert log.offset_for_timestamp(450) == (8, 500)
    assert log.offset_for_timestamp(650) == (10, 700)
    assert log.offset_for_timestamp(801) is None
    log.advance_log_start_offset(2)
    assert log.offset_for_timestamp(101) == (2, 200)


# ---- truncation -----------------------------------------------------------------------------------

@pytest.mark.parametrize("point, expected_end", [(9, 9), (6, 6), (7, 6), (8, 6), (3, 3), (1, 0), (0, 0), (20, 9)])
def test_truncate_to(tmp_path, point, expected_end):
    log = open_log(tmp_path / "t-0")
    fill(log, [3, 3, 3])
    log.truncate_to(point)
    assert log.log_end_offset == expected_end
    assert stored_values(log) == {i: b"value-%d" % i for i in range(expected_end)}
    header = log.append_as_leader(produce_batch([b"after"]), leader_epoch=1, now_ms=0)
    assert header.base_offset == expected_end
    assert log.read(expected_end, max_bytes=100)[0][0].column("value").to_pylist() == [b"after"]
    rows = ipc.open_stream(str(segment_files(tmp_path / "t-0")[0])).read_all().column("offset").to_pylist()
    assert rows == list(range(expected_end + 1))


def test_truncate_across_segments(tmp_path):
    log = open_log(tmp_path / "t-0", LogConfig(segment_bytes=3_000))
    fill(log, [5] * 12)
    bases = log.segment_base_offsets
    assert len(bases) >= 3
    log.truncate_to(bases[1])  # exactly at a segment boundary: that segment stays, empty
    assert log.log_end_offset == bases[1] and log.segment_base_offsets == bases[:2]
    log.truncate_to(bases[1] - 3)  # straddles the last batch of the first segment
    assert log.log_end_offset == bases[1] - 5 and log.segment_base_offsets == bases[:1]
    assert log.recovery_point <= log.log_end_offset
    fill(log, [2])
    assert stored_values(log)[bases[1] - 4] == b"value-%d" % (bases[1] - 4)


def test_truncate_below_log_start_restarts_the_log(tmp_path):
    log = open_log(tmp_path / "t-0", LogConfig(segment_bytes=3_000))
    fill(log, [5] * 12)
    log.advance_log_start_offset(30)
    log.truncate_to(20)
    assert (log.log_start_offset, log.log_end_offset, log.segment_base_offsets) == (20, 20, [20])
    with pytest.raises(OffsetOutOfRangeError):
        log.read(10, max_bytes=100)


def test_truncate_fully_and_start_at(tmp_path):
    log = open_log(tmp_path / "t-0", LogConfig(segment_bytes=3_000))
    fill(log, [5] * 12)
    log.truncate_fully_and_start_at(1_000)
    assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (1_000, 1_000, 1_000)
    assert [p.name for p in segment_files(tmp_path / "t-0")] == ["00000000000000001000.arrows"]
    fill(log, [2])
    assert stored_values(log) == {1_000: b"value-1000", 1_001: b"value-1001"}


# ---- log start and retention ----------------------------------------------------------------------

def test_advance_log_start_offset(tmp_path):
    log = open_log(tmp_path / "t-0", LogConfig(segment_bytes=3_000))
    fill(log, [5] * 12)
    bases = log.segment_base_offsets
    log.advance_log_start_offset(bases[1] + 2)
    assert log.log_start_offset == bases[1] + 2 and log.segment_base_offsets == bases[1:]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(bases[1] + 1, max_bytes=100)
    first = log.read(bases[1] + 2, max_bytes=1)[0][1]
    assert first.base_offset <= bases[1] + 2 < first.next_offset
    log.advance_log_start_offset(3)  # backwards: ignored
    assert log.log_start_offset == bases[1] + 2
    with pytest.raises(OffsetOutOfRangeError):
        log.advance_log_start_offset(61)
    log.advance_log_start_offset(60)
    assert log.log_start_offset == 60 and log.read(60, max_bytes=10) == []
    assert log.segment_base_offsets == bases[-1:]


def test_retention_by_time_respects_high_watermark_and_active_segment(tmp_path):
    config = LogConfig(segment_bytes=3_000, retention_ms=1_000)
    log = open_log(tmp_path / "t-0", config)
    for i in range(12):
        log.append_as_leader(produce_batch(values_for(5 * i, 5), [i * 100] * 5), leader_epoch=0, now_ms=0)
    bases = log.segment_base_offsets
    assert log.apply_retention(1_000, max_deletable_offset_exclusive=60) == 0  # nothing older than 1 s yet
    assert log.apply_retention(100_000, max_deletable_offset_exclusive=bases[2]) == 2
    assert log.segment_base_offsets == bases[2:] and log.log_start_offset == bases[2]
    assert log.apply_retention(100_000, max_deletable_offset_exclusive=10**9) == len(bases) - 3
    assert log.segment_base_offsets == bases[-1:]  # the active segment is never deleted
    assert log.log_start_offset == bases[-1]
    assert stored_values(log) == {i: b"value-%d" % i for i in range(bases[-1], 60)}


def test_retention_by_bytes(tmp_path):
    log = open_log(tmp_path / "t-0", LogConfig(segment_bytes=3_000, retention_bytes=6_000, retention_ms=-1))
    fill(log, [5] * 20)
    before = log.size_bytes
    assert before > 9_000
    deleted = log.apply_retention(0, max_deletable_offset_exclusive=10**9)
    assert deleted >= 1 and 6_000 <= log.size_bytes < 9_000
    assert log.apply_retention(0, max_deletable_offset_exclusive=10**9) == 0
    unlimited = open_log(tmp_path / "u-0", LogConfig(segment_bytes=3_000, retention_ms=-1))
    fill(unlimited, [5] * 20, now_ms=0)
    assert unlimited.apply_retention(10**12, max_deletable_offset_exclusive=10**9) == 0


# ---- lifecycle -------------------------------------------------------------------------------------

def test_close_and_delete(tmp_path):
    log = open_log(tmp_path / "t-0")
    fill(log, [3])
    log.close()
    assert log.recovery_point == 3
    with pytest.raises(StorageError):
        log.append_as_leader(produce_batch([b"x"]), leader_epoch=0, now_ms=0)
    with pytest.raises(StorageError):
        log.read(0, max_bytes=10)
    reopened = open_log(tmp_path / "t-0", clean_shutdown=True, recovery_point=3)
    assert stored_values(reopened) == {0: b"value-0", 1: b"value-1", 2: b"value-2"}
    reopened.delete()
    assert not (tmp_path / "t-0").exists() and list(tmp_path.iterdir()) == []


def test_reopen_appends_without_second_schema(tmp_path):
    log = open_log(tmp_path / "t-0")
    fill(log, [2])
    log.close()
    log = open_log(tmp_path / "t-0", clean_shutdown=True, recovery_point=2)
    fill(log, [2])
    log.close()
    data = segment_files(tmp_path / "t-0")[0].read_bytes()
    with ipc.open_stream(pa.py_buffer(data)) as reader:
        table = reader.read_all()
    assert table.column("offset").to_pylist() == [0, 1, 2, 3]
    assert np.asarray(table.column("value").to_pylist()).tolist() == values_for(0, 4)
    assert PRODUCE_SCHEMA.names == table.schema.names[1:]


def test_a_broker_appending_does_not_import_pandas(tmp_path):
    """``pa.array`` imports pandas even for an ndarray: every broker did at start (0.29 against 0.17 s to import
    the broker, 123 against 86 MB). A fresh interpreter loads the broker, conforms a batch without timestamps
    and appends it with both timestamp types."""
    assert_leaves_pandas_unimported(
        "from pathlib import Path\nimport pyarrow as pa\nimport ads_spark.broker.broker\n"
        "from ads_spark.broker.log import LogConfig\nfrom ads_spark.broker.log.partition_log import PartitionLog\n"
        "from ads_spark.protocol.records import TIMESTAMP_TYPE_LOG_APPEND_TIME, conform_produce_batch\n"
        "values = pa.Array.from_buffers(pa.binary(), 2, [None, pa.py_buffer(bytes([0, 0, 0, 0, 1, 0, 0, 0,"
        " 3, 0, 0, 0])), pa.py_buffer(b'abc')])\n"
        "batch = conform_produce_batch(pa.RecordBatch.from_arrays([values], names=['value']))\n"
        f"log = PartitionLog.open(Path({str(tmp_path)!r}), LogConfig(), recovery_point=0, clean_shutdown=True,"
        " now_ms=0)\n"
        "log.append_as_leader(batch, leader_epoch=0, now_ms=5)\n"
        "log.append_as_leader(batch, leader_epoch=0, now_ms=5, timestamp_type=TIMESTAMP_TYPE_LOG_APPEND_TIME)\n"
        "assert [b.num_rows for b, _ in log.batches()] == [2, 2]")
