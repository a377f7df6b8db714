"""Log compaction in the storage engine: cleaned batch headers, offset gaps, and ``clean_log``'s rules."""

from __future__ import annotations

import dataclasses
import os
import threading

import numpy as np
import pyarrow as pa
import pytest

from ads_spark.broker.broker import log_config_for
from ads_spark.broker.log import LogConfig, PartitionLog
from ads_spark.broker.log.cleaner import KeyMap, clean_log
from ads_spark.broker.log.fetched import check_fetched_messages, encode_fetched
from ads_spark.errors import CorruptMessageError, InvalidConfigError
from ads_spark.protocol import wire
from ads_spark.protocol.records import PRODUCE_SCHEMA, BatchHeader, seal, verify
from tests.fixtures.fresh_interpreter import assert_leaves_pandas_unimported

pytestmark = pytest.mark.timeout(60)

HEADERS_TYPE = PRODUCE_SCHEMA.field("headers").type


def keyed_batch(pairs, timestamp_ms: int = 1000) -> pa.RecordBatch:
    """A PRODUCE_SCHEMA batch of (key, value) pairs; a None value is a tombstone, a None key has no key."""
    n = len(pairs)
    return pa.RecordBatch.from_arrays(
        [pa.array(np.full(n, timestamp_ms, dtype=np.int64), pa.timestamp("ms")),
         pa.array([k for k, _ in pairs], pa.binary()), pa.array([v for _, v in pairs], pa.binary()),
         pa.nulls(n, HEADERS_TYPE)], schema=PRODUCE_SCHEMA)


def new_log(path, segment_bytes: int = 1 << 30, **config) -> PartitionLog:
    return PartitionLog.open(path, LogConfig(segment_bytes=segment_bytes, **config), recovery_point=0,
                             clean_shutdown=False, now_ms=0)


def append(log, pairs, timestamp_ms: int = 1000) -> BatchHeader:
    return log.append_as_leader(keyed_batch(pairs, timestamp_ms), leader_epoch=0, now_ms=0)


def clean(log, now_ms: int = 0, *, end: int | None = None, retention_ms: int = 1000, lag_ms: int = 0,
          entries_max: int = 1000, first_dirty: int | None = None, throttle=None):
    sealed_end = log.segment_base_offsets[-1]
    return clean_log(log, clean_end_offset_exclusive=sealed_end if end is None else end, now_ms=now_ms,
                     delete_retention_ms=retention_ms, min_compaction_lag_ms=lag_ms, key_map_entries_max=entries_max,
                     throttle=throttle or (lambda n: None), first_dirty_offset=first_dirty)


def records(log) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every stored row, checking offsets strictly increase inside each batch's span."""
    rows, last = [], -1
    for batch, header in log.batches():
        verify(batch, header)
        offsets = batch.column("offset").to_pylist()
        assert all(header.base_offset <= o <= header.last_offset for o in offsets)
        for row in zip(offsets, batch.column("key").to_pylist(), batch.column("value").to_pylist()):
            assert row[0] > last
            last = row[0]
            rows.append(row)
    return rows


# ---- the batch header ---------------------------------------------------------------------------------

def test_an_uncleaned_header_keeps_its_bytes_and_crc_and_a_cleaned_one_carries_its_row_count():
    plain = BatchHeader(5, 10, 1, 100, 0, 7, 1, 3, crc=99)
    assert plain.rows == 10 and not plain.cleaned
    assert plain._fields_without_crc() == b"5,10,1,100,0,7,1,3"  # the string every existing CRC covers
    assert "ads.row_count" not in plain.to_metadata() and "row_count" not in wire.header_to_json(plain)
    cleaned = dataclasses.replace(plain, row_count=4, delete_horizon_ms=77)
    assert cleaned.rows == 4 and cleaned.cleaned and cleaned.next_offset == 15 and cleaned.last_sequence == 12
    for header in (plain, cleaned):
        assert BatchHeader.from_metadata(header.to_metadata()) == header
        assert wire.header_from_json(wire.header_to_json(header)) == header
    assert cleaned._fields_without_crc() != plain._fields_without_crc()


def test_verify_counts_rows_against_the_row_count_not_the_span(tmp_path):
    log = new_log(tmp_path / "t-0")
    append(log, [(b"a", b"1"), (b"a", b"2"), (b"b", b"3")])
    batch, header = log.read(0, max_bytes=1 << 20)[0]
    kept = batch.filter(pa.array([False, True, True]))
    verify(kept, seal(kept, dataclasses.replace(header, row_count=2)))
    for bad in (dataclasses.replace(header, row_count=3), dataclasses.replace(header, row_count=0),
                dataclasses.replace(header, delete_horizon_ms=5)):
        with pytest.raises(CorruptMessageError):
            verify(kept, seal(kept, bad))
    sealed = seal(kept, dataclasses.replace(header, row_count=2))
    with pytest.raises(CorruptMessageError, match="CRC"):  # the delete horizon is covered by the CRC
        verify(kept, dataclasses.replace(sealed, delete_horizon_ms=9))
    assert sealed.crc != seal(kept, dataclasses.replace(header, row_count=2, delete_horizon_ms=9)).crc


# ---- clean_log --------------------------------------------------------------------------------------------

def test_the_latest_record_of_every_key_is_kept_at_its_offset(tmp_path):
    log = new_log(tmp_path / "t-0")
    append(log, [(b"a", b"a1"), (b"b", b"b1"), (None, b"no key")])
    append(log, [(b"a", b"a2"), (b"", b"empty key")])
    append(log, [(b"b", b"b2"), (b"c", b"c1")])
    log.roll(0)
    append(log, [(b"a", b"active")])  # the active segment: never cleaned
    stats = clean(log)
    assert records(log) == [(2, None, b"no key"), (3, b"a", b"a2"), (4, b"", b"empty key"), (5, b"b", b"b2"),
                            (6, b"c", b"c1"), (7, b"a", b"active")]
    assert (stats.records_kept, stats.records_removed, stats.cleaned_up_to) == (5, 2, 7)
    assert log.log_end_offset == 8 and [h.rows for _, h in log.batches()] == [1, 2, 2, 1]
    assert all(h.cleaned for _, h in list(log.batches())[:-1])


def test_nothing_at_or_above_the_clean_end_is_cleaned(tmp_path):
    log = new_log(tmp_path / "t-0", segment_bytes=1)  # one batch per segment
    for i in range(6):
        append(log, [(b"k", b"%d" % i)])
    stats = clean(log, end=3)
    assert [o for o, _, _ in records(log)] == [2, 3, 4, 5] and stats.cleaned_up_to == 3
    stats = clean(log, first_dirty=3)  # up to the active segment (offset 5)
    assert [o for o, _, _ in records(log)] == [4, 5] and stats.cleaned_up_to == 5


def test_segments_younger_than_the_min_compaction_lag_wait(tmp_path):
    log = new_log(tmp_path / "t-0", segment_bytes=1)
    for i, ts in enumerate([100, 200, 300, 400]):
        append(log, [(b"k", b"%d" % i)], timestamp_ms=ts)
    assert clean(log, now_ms=1000, lag_ms=750).cleaned_up_to == 2  # the segment at 2 holds ts 300 > 1000 - 750
    assert [o for o, _, _ in records(log)] == [1, 2, 3]


def test_a_tombstone_lives_delete_retention_after_the_pass_that_first_cleaned_it(tmp_path):
    log = new_log(tmp_path / "t-0", segment_bytes=1)
    append(log, [(b"k", b"v"), (b"j", b"w")])
    append(log, [(b"k", None)])
    append(log, [(b"x", b"filler")])
    stats = clean(log, now_ms=10_000, retention_ms=500)
    assert [(o, v) for o, _, v in records(log)] == [(1, b"w"), (2, None), (3, b"filler")]
    assert stats.tombstones_removed == 0
    tomb_header = [h for b, h in log.batches() if h.base_offset == 2][0]
    assert tomb_header.delete_horizon_ms == 10_500
    assert clean(log, now_ms=10_499, retention_ms=1, first_dirty=3).tombstones_removed == 0
    assert [o for o, _, _ in records(log)] == [1, 2, 3]
    stats = clean(log, now_ms=10_500, retention_ms=1, first_dirty=3)
    assert stats.tombstones_removed == 1 and [o for o, _, _ in records(log)] == [1, 3]


def test_a_full_key_map_cleans_only_up_to_where_it_filled(tmp_path):
    log = new_log(tmp_path / "t-0", segment_bytes=1)
    append(log, [(b"a", b"1"), (b"b", b"1")])
    append(log, [(b"a", b"2"), (b"c", b"1")])  # a third key: does not fit a map of two
    append(log, [(b"a", b"3")])
    stats = clean(log, entries_max=2)
    assert stats.cleaned_up_to == 2 and [o for o, _, _ in records(log)] == [0, 1, 2, 3, 4]
    stats = clean(log, entries_max=2, first_dirty=stats.cleaned_up_to)
    assert stats.cleaned_up_to == 4 and [o for o, _, _ in records(log)] == [1, 2, 3, 4]  # 4 is active
    with pytest.raises(InvalidConfigError, match="dedupe.buffer.size"):
        clean(log, entries_max=1, first_dirty=2)  # the batch at 2 holds two keys


def test_the_key_map_keeps_full_keys_so_no_two_keys_share_an_entry():
    key_map = KeyMap(10)
    keys = [b"", b"a", b"a\x00", b"\x00a", b"ab", b"a" * 1000]
    assert key_map.add(pa.array(keys, pa.binary()), np.arange(len(keys), dtype=np.int64) * 10,
                       list(range(1, len(keys) + 1))) == len(keys)
    assert key_map.add(pa.array([b"a"], pa.binary()), np.array([99], dtype=np.int64), [1]) == 1
    lookups = pa.array([*keys, None, b"b"], pa.binary())
    assert key_map.latest_offsets(lookups).tolist() == [0, 99, 20, 30, 40, 50, -1, -1]


def test_small_cleaned_segments_merge_while_under_segment_bytes(tmp_path):
    log = new_log(tmp_path / "t-0", segment_bytes=1)
    for i in range(8):
        append(log, [(b"k%d" % (i % 2), b"%d" % i)])
    clean(log)
    assert len(log.segment_base_offsets) == 8  # each source segment alone is over segment.bytes=1
    log.update_config(LogConfig(segment_bytes=100_000))
    stats = clean(log, first_dirty=7)
    assert (stats.segments_before, stats.segments_after) == (7, 1)
    assert log.segment_base_offsets == [0, 7] and [o for o, _, _ in records(log)] == [5, 6, 7]
    assert sorted(p.name for p in (tmp_path / "t-0").iterdir() if p.suffix == ".arrows") == [
        "00000000000000000000.arrows", "00000000000000000007.arrows"]


def test_the_throttle_is_told_every_byte_read_and_written(tmp_path):
    log = new_log(tmp_path / "t-0", segment_bytes=1)
    for i in range(5):
        append(log, [(b"k", b"x" * 100)])
    seen = []
    stats = clean(log, throttle=seen.append)
    assert sum(seen) == stats.bytes_read + stats.bytes_written and stats.bytes_written > 0
    assert len(seen) >= 5


def test_readers_holding_batches_keep_them_through_a_clean(tmp_path):
    log = new_log(tmp_path / "t-0", segment_bytes=1)
    for i in range(4):
        append(log, [(b"k", b"value-%d" % i)])
    held = log.read(0, max_bytes=1 << 20)
    clean(log)
    assert [b.column("value").to_pylist() for b, _ in held] == [[b"value-%d" % i] for i in range(4)]
    assert [v for _, _, v in records(log)] == [b"value-2", b"value-3"]


def test_a_pass_is_dropped_when_the_log_changes_under_it(tmp_path):
    log = new_log(tmp_path / "t-0", segment_bytes=1)
    for i in range(4):
        append(log, [(b"k", b"%d" % i)])
    calls = []

    def truncate_midway(n):
        calls.append(n)
        if len(calls) == 3:
            log.truncate_to(1)  # drops segments the pass has read
    stats = clean(log, throttle=truncate_midway)
    assert stats.abandoned and stats.segments_after == 0 and stats.cleaned_up_to == 0
    assert [o for o, _, _ in records(log)] == [0] and log.log_end_offset == 1
    assert not [p for p in (tmp_path / "t-0").iterdir() if p.name.endswith(".cleaned")]
    reopened = PartitionLog.open(tmp_path / "t-0", LogConfig(), recovery_point=0, clean_shutdown=False, now_ms=0)
    assert [o for o, _, _ in records(reopened)] == [0]


def test_clean_log_leaves_pandas_unimported(tmp_path):
    """The broker never imports pandas (``records.int64_column``): the cleaner and the follower's checks of cleaned
    batches read columns through their buffers."""
    assert_leaves_pandas_unimported(f"""
import numpy as np
import pyarrow as pa
from ads_spark.broker.log import LogConfig, PartitionLog
from ads_spark.broker.log.cleaner import clean_log
from ads_spark.broker.log.fetched import check_fetched_messages
from ads_spark.protocol.records import PRODUCE_SCHEMA, int64_column

def binary(values):
    ends = np.cumsum([0] + [len(v) for v in values]).astype(np.int32)
    return pa.Array.from_buffers(pa.binary(), len(values), [None, pa.py_buffer(ends), pa.py_buffer(b"".join(values))])

log = PartitionLog.open({str(tmp_path / 't-0')!r}, LogConfig(segment_bytes=1), recovery_point=0,
                        clean_shutdown=False, now_ms=0)
for i in range(4):
    columns = [int64_column(np.full(2, 5), pa.timestamp("ms")), binary([b"a", b"b%d" % (i % 2)]),
               binary([b"x", b"y"]), pa.nulls(2, PRODUCE_SCHEMA.field("headers").type)]
    log.append_as_leader(pa.RecordBatch.from_arrays(columns, schema=PRODUCE_SCHEMA), leader_epoch=0, now_ms=0)
stats = clean_log(log, clean_end_offset_exclusive=log.segment_base_offsets[-1], now_ms=0, delete_retention_ms=0,
                  min_compaction_lag_ms=0, key_map_entries_max=100, throttle=lambda n: None)
assert stats.records_removed == 3, stats
follower = PartitionLog.open({str(tmp_path / 'f-0')!r}, LogConfig(), recovery_point=0, clean_shutdown=False, now_ms=0)
follower.append_encoded(check_fetched_messages(log.read(0, max_bytes=1 << 20, as_messages=True), 0), now_ms=0)
assert follower.log_end_offset == log.log_end_offset
""")


# ---- offset gaps outside the cleaner --------------------------------------------------------------------

def gapped_log(path, merged: bool = False) -> PartitionLog:
    """One batch per segment: offsets 0-9 in batches of two, 10, 11-12 and 13 (active); cleaned, the
    batches at 0, 4 and 6 are gone and those at 2 and 8 keep their second row (3, 9). ``merged``: a
    second pass merges the sealed segments into one, so the gaps are inside a segment."""
    log = new_log(path, segment_bytes=1)
    for i in range(5):
        append(log, [(b"a", b"%d" % i), (b"b", b"%d" % i)] if i < 2 else [(b"c", b"%d" % i), (b"d", b"%d" % i)])
    append(log, [(b"e", b"10")])
    append(log, [(b"a", b"x"), (b"c", b"y")])  # removes a (0, 2) and c (4 .. 8)
    log.roll(0)
    append(log, [(b"f", b"active")])
    stats = clean(log)
    if merged:
        log.update_config(LogConfig(segment_bytes=1 << 20))
        clean(log, first_dirty=stats.cleaned_up_to)
        assert log.segment_base_offsets == [0, 13]
    return log


@pytest.mark.parametrize("merged", [False, True], ids=["gaps-between-segments", "gaps-inside-a-segment"])
def test_reads_and_locates_from_an_offset_in_a_gap_start_at_the_next_batch(tmp_path, merged):
    log = gapped_log(tmp_path / "t-0", merged)
    assert [o for o, _, _ in records(log)] == [3, 9, 10, 11, 12, 13]
    for offset, first_base in [(0, 2), (1, 2), (3, 2), (4, 8), (6, 8), (9, 8), (10, 10)]:
        batches = log.read(offset, max_bytes=1 << 20)
        assert batches[0][1].base_offset == first_base, offset
        located = log.locate(offset, max_bytes=1 << 20, end_offset_exclusive=log.log_end_offset)
        assert located[0][1][0][2] == first_base, offset
    assert log.read(4, max_bytes=1, end_offset_exclusive=8) == []


def test_a_follower_copies_cleaned_batches_with_their_gaps(tmp_path):
    leader = gapped_log(tmp_path / "a-0", merged=True)
    follower = new_log(tmp_path / "b-0")
    messages = leader.read(0, max_bytes=1 << 20, as_messages=True)
    follower.append_encoded(check_fetched_messages(messages, 0), now_ms=0)
    assert records(follower) == records(leader) and follower.log_end_offset == leader.log_end_offset
    decoded = leader.read(4, max_bytes=1 << 20)  # a fetch from inside a gap: the first batch is at 8
    fresh = new_log(tmp_path / "c-0")
    fresh.append_encoded(encode_fetched(decoded, 4), now_ms=0)
    assert [o for o, _, _ in records(fresh)] == [9, 10, 11, 12, 13] and fresh.log_end_offset == 14
    closed = follower.close() or PartitionLog.open(tmp_path / "b-0", LogConfig(), recovery_point=0,
                                                   clean_shutdown=False, now_ms=0)
    assert records(closed) == records(leader)


def test_a_gap_is_refused_after_a_batch_the_cleaner_never_wrote(tmp_path):
    log = new_log(tmp_path / "t-0")
    for i in range(3):
        append(log, [(b"k", b"%d" % i)])
    plain = log.read(0, max_bytes=1 << 20, as_messages=True)
    with pytest.raises(CorruptMessageError, match="expected 1"):
        check_fetched_messages([plain[0], plain[2]], 0)
    with pytest.raises(CorruptMessageError, match="expected 1"):
        check_fetched_messages([plain[0], plain[0]], 0)


@pytest.mark.parametrize("merged", [False, True], ids=["gaps-between-segments", "gaps-inside-a-segment"])
def test_truncating_into_a_gap_makes_the_point_the_log_end(tmp_path, merged):
    log = gapped_log(tmp_path / "t-0", merged)
    log.truncate_to(6)  # inside the gap 4 .. 8
    assert log.log_end_offset == 6 and [o for o, _, _ in records(log)] == [3]
    append(log, [(b"z", b"after")])
    assert [o for o, _, _ in records(log)] == [3, 6]
    log.close()
    reopened = PartitionLog.open(tmp_path / "t-0", LogConfig(), recovery_point=0, clean_shutdown=False, now_ms=0)
    assert [o for o, _, _ in records(reopened)] == [3, 6] and reopened.log_end_offset == 7


@pytest.mark.parametrize("merged", [False, True], ids=["gaps-between-segments", "gaps-inside-a-segment"])
def test_a_cleaned_log_reopens_trusted_and_recovered(tmp_path, merged):
    log = gapped_log(tmp_path / "t-0", merged)
    expected = records(log)
    end = log.log_end_offset
    log.close()
    for clean_shutdown, recovery_point in [(True, end), (False, 0)]:
        reopened = PartitionLog.open(tmp_path / "t-0", LogConfig(), recovery_point=recovery_point,
                                     clean_shutdown=clean_shutdown, now_ms=0)
        assert records(reopened) == expected and reopened.log_end_offset == end
        reopened.close()


def test_a_corrupt_cleaned_batch_is_cut_by_recovery(tmp_path):
    log = gapped_log(tmp_path / "t-0", merged=True)  # segment 0: batches at 2, 8, 10 and 11 (the last)
    first = tmp_path / "t-0" / "00000000000000000000.arrows"
    log.close()
    data = bytearray(first.read_bytes())
    data[-12] ^= 0xFF  # in the body of the batch at 11
    first.write_bytes(bytes(data))
    reopened = PartitionLog.open(tmp_path / "t-0", LogConfig(), recovery_point=0, clean_shutdown=False, now_ms=0)
    assert [o for o, _, _ in records(reopened)] == [3, 9, 10]  # cut at the damaged batch, later segments dropped
    assert reopened.log_end_offset == 11 and reopened.segment_base_offsets == [0]


# ---- configuration ------------------------------------------------------------------------------------------

def test_log_config_takes_the_compaction_settings_and_refuses_bad_ones():
    config = LogConfig(cleanup_policy="compact,delete", min_cleanable_dirty_ratio=0.2, min_compaction_lag_ms=5,
                       max_compaction_lag_ms=10, delete_retention_ms=0)
    assert config.compact and config.delete and LogConfig().delete and not LogConfig().compact
    assert LogConfig(cleanup_policy="compact").compact and not LogConfig(cleanup_policy="compact").delete
    for bad in ({"cleanup_policy": "shred"}, {"min_cleanable_dirty_ratio": 1.5}, {"min_compaction_lag_ms": -1},
                {"delete_retention_ms": -1}, {"max_compaction_lag_ms": 0}):
        with pytest.raises(InvalidConfigError, match=next(iter(bad))):
            LogConfig(**bad)


def test_log_config_for_maps_the_topic_compaction_keys():
    base = {"segment.bytes": 1000, "segment.ms": 1000, "retention.ms": 5, "retention.bytes": -1,
            "flush.messages": 1, "flush.ms": 1, "max.message.bytes": 1000}
    assert log_config_for(base) == LogConfig(segment_bytes=1000, segment_ms=1000, retention_ms=5,
                                             flush_interval_messages=1, flush_interval_ms=1, max_message_bytes=1000)
    config = log_config_for({**base, "cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.1,
                             "min.compaction.lag.ms": 7, "max.compaction.lag.ms": 8, "delete.retention.ms": 9})
    assert (config.cleanup_policy, config.min_cleanable_dirty_ratio, config.min_compaction_lag_ms,
            config.max_compaction_lag_ms, config.delete_retention_ms) == ("compact", 0.1, 7, 8, 9)


def test_no_cleaner_files_are_left_behind(tmp_path):
    log = gapped_log(tmp_path / "t-0")
    clean(log, first_dirty=0)
    names = os.listdir(tmp_path / "t-0")
    assert not [n for n in names if n.endswith((".cleaned", ".tmp")) or n == "cleaner-swap.json"]


def test_cleaning_runs_beside_appends_and_reads_on_other_threads(tmp_path):
    """The broker's cleaner thread cleans while produce and fetch threads use the log: each pass is swapped in
    or dropped, readers always see strictly increasing offsets, and the end state keeps every key's latest."""
    log = new_log(tmp_path / "t-0", segment_bytes=12_000)
    stop = threading.Event()
    problems: list[str] = []
    latest: dict[bytes, tuple[int, bytes]] = {}

    def produce():
        for i in range(200):
            key = b"k%d" % (i % 7)
            header = append(log, [(key, b"v%d" % i)])
            latest[key] = (header.base_offset, b"v%d" % i)
        stop.set()

    def read():
        while not stop.is_set():
            offsets = [o for b, _ in log.batches() for o in b.column("offset").to_pylist()]
            if offsets != sorted(set(offsets)):
                problems.append(f"offsets out of order: {offsets}")

    threads = [threading.Thread(target=produce), threading.Thread(target=read)]
    for thread in threads:
        thread.start()
    passes, first_dirty = 0, None
    while not stop.is_set() or passes == 0:
        stats = clean(log, first_dirty=first_dirty)
        first_dirty, passes = stats.cleaned_up_to, passes + 1
    for thread in threads:
        thread.join(timeout=30)
    clean(log, first_dirty=first_dirty)
    assert not problems and passes >= 1
    stored = records(log)
    assert {key: (offset, value) for offset, key, value in stored} == latest
    sealed_keys = [key for offset, key, _ in stored if offset < log.segment_base_offsets[-1]]
    assert len(sealed_keys) == len(set(sealed_keys))  # below the active segment: one record per key


def test_a_batch_failing_its_crc_is_never_resealed(tmp_path):
    log = new_log(tmp_path / "t-0", segment_bytes=1)
    for i in range(3):
        append(log, [(b"k", b"value-%d" % i), (b"j", b"other-%d" % i)])
    first = tmp_path / "t-0" / "00000000000000000000.arrows"
    with open(first, "r+b") as handle:  # a bit flip on disk under the running log
        handle.seek(first.stat().st_size - 12)
        byte = handle.read(1)
        handle.seek(-1, os.SEEK_CUR)
        handle.write(bytes([byte[0] ^ 0xFF]))
    bases = log.segment_base_offsets
    with pytest.raises(CorruptMessageError, match="CRC mismatch in batch at offset 0 while cleaning"):
        clean(log)
    assert log.segment_base_offsets == bases
    assert not [p for p in (tmp_path / "t-0").iterdir() if p.name.endswith(".cleaned")]
