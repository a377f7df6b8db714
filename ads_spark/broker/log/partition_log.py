"""The log of one partition replica: an ordered list of segments with one active tail.

This is Kafka's ``UnifiedLog`` for ADS: it assigns offsets to a leader's
appends, takes a follower's already-sealed batches, serves reads by offset and
by timestamp, truncates for replication, rolls segments, applies retention and
decides when to fsync. It knows nothing about leaders, ISRs or high watermarks
beyond the bounds the broker passes in.

Recovery (``open``) trusts segments wholly below the recovery point when their
indexes agree with the file in O(1), and validates everything from the segment
holding the recovery point on, batch by batch (``segment.scan_segment``). So the
cost of an unclean start grows with the unflushed tail, not with the log.

Typed topics: one schema per segment (a batch of another version rolls); what an append computes first
(stored schema, offsets, per-batch statistics, outside the lock) is in ``appends.py``.

All public methods take the log's lock; batches returned by ``read`` stay valid
after the lock is released and even after a later truncation or deletion
(see ``segment.py`` for why).
"""

from __future__ import annotations

import logging
import shutil
import threading
import uuid
from bisect import bisect_right
from pathlib import Path
from typing import Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from ads_spark.broker.log import cleaner_swap, file_modes
from ads_spark.broker.log.appends import KnownSchemas, stamp, statistics_text, stored_schema_of
from ads_spark.broker.log.checkpoints import fsync_directory
from ads_spark.broker.log.config import LogConfig
from ads_spark.broker.log.fetched import encode_fetched
from ads_spark.broker.log.segment_loading import find_epoch_starts, load_segments, note_epoch_start
from ads_spark.broker.log.segment import (
    LogSegment, encode_sealed_message, parse_segment_file_name, remove_stray_files,
)
from ads_spark.errors import (
    InvalidRequestError, InvariantViolation, OffsetOutOfRangeError,
    RecordTooLargeError, StorageError,
)
from ads_spark.protocol.records import (
    NO_SCHEMA_ID, NO_STATS, TIMESTAMP_TYPE_CREATE_TIME, TIMESTAMP_TYPE_LOG_APPEND_TIME, BatchHeader,
)

log = logging.getLogger("ads.log")

BATCHES_ITERATION_BYTES = 8 << 20  # read granularity of ``batches()``


def _first_batch_from(segment: LogSegment, offset: int) -> int:
    """Index of the batch holding ``offset``, or of the first one after it when ``offset`` is in a gap."""
    i = segment.index.batch_containing(offset)
    if i < 0:
        return 0
    return i if segment.index.entry(i).next_offset > offset else i + 1


def _first_at_or_after(batch: pa.RecordBatch, timestamp_ms: int, min_offset: int) -> tuple[int, int] | None:
    timestamps = batch.column("timestamp").cast(pa.int64())
    offsets = batch.column("offset")
    mask = pc.and_(pc.greater_equal(timestamps, timestamp_ms), pc.greater_equal(offsets, min_offset))
    i = pc.index(mask, True).as_py()
    return None if i < 0 else (offsets[i].as_py(), timestamps[i].as_py())


class PartitionLog:
    """Invariants: ``log_start_offset <= recovery_point <= log_end_offset`` except that the start
    may pass the recovery point; each segment's base offset is at or after the previous
    segment's next offset (after, where the log cleaner left a gap); only the last segment is
    ever appended to."""

    def __init__(self, directory: Path, config: LogConfig, segments: list[LogSegment],
                 log_start_offset: int, now_ms: int):
        self.directory = directory
        self.config = config
        self._segments = segments
        self._bases = [s.base_offset for s in segments]  # for bisection; mirrors _segments
        self._log_start_offset = log_start_offset
        self._recovery_point = self.log_end_offset  # open() leaves everything validated and fsynced
        self._last_flush_ms = now_ms
        self._lock = threading.RLock()
        self._closed = False
        self._truncated_to: int | None = None  # lowest end a truncation left since the cleaner last looked
        # Typed stored schemas by id, for writing messages whose schema is not the active segment's (a
        # follower's append of a new version): noted by ``note_schema`` before the append, outside the lock.
        self._known_schemas = KnownSchemas()

    @classmethod
    def open(cls, directory: Path, config: LogConfig, *, recovery_point: int, clean_shutdown: bool,
             now_ms: int, log_start_offset: int | None = None) -> "PartitionLog":
        directory = Path(directory)
        file_modes.new_directory(directory)
        cleaner_swap.complete_or_roll_back(directory)  # before anything reads the segments
        remove_stray_files(directory)
        bases = sorted(b for b in (parse_segment_file_name(p.name) for p in directory.iterdir()) if b is not None)
        segments = load_segments(directory, bases, recovery_point, clean_shutdown, now_ms)
        if not segments:
            segments = [LogSegment.create(directory, max(log_start_offset or 0, 0), now_ms)]
        end = segments[-1].next_offset
        start = min(max(log_start_offset or 0, segments[0].base_offset), end)
        return cls(directory, config, segments, start, now_ms)

    # ---- state ----------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The next offset to be written."""
        return self._segments[-1].next_offset

    @property
    def recovery_point(self) -> int:
        """Everything below this offset is fsynced."""
        return self._recovery_point

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self._segments)

    @property
    def segment_base_offsets(self) -> list[int]:
        with self._lock:
            return list(self._bases)

    def segment_summaries(self) -> list[tuple[int, int, int, int]]:
        """(base_offset, next_offset, size_bytes, max_timestamp_ms) of each segment, oldest first; the
        last is the active one. For the log cleaner's choice of log and clean end (a snapshot)."""
        with self._lock:
            self._ensure_open()
            return [(s.base_offset, s.next_offset, s.size_bytes, s.max_timestamp_ms) for s in self._segments]

    def update_config(self, config: LogConfig) -> None:
        self.config = config

    # ---- appends ----------------------------------------------------------------------------

    def append_as_leader(self, batch: pa.RecordBatch, *, leader_epoch: int, now_ms: int, producer_id: int = -1,
                         producer_epoch: int = -1, base_sequence: int = -1,
                         timestamp_type: int = TIMESTAMP_TYPE_CREATE_TIME) -> BatchHeader:
        """Assign offsets from the log end, seal and store ``batch`` (in PRODUCE_SCHEMA, or a typed topic's
        produce schema of one version: the broker checked it against the registered version); bad input
        writes nothing. A batch of another schema than the active segment's starts a new segment."""
        stored_schema, schema_id = stored_schema_of(batch.schema)
        stats = statistics_text(batch, self.config.statistics_columns) if schema_id != NO_SCHEMA_ID else NO_STATS
        if batch.num_rows == 0:
            raise InvalidRequestError("an empty batch cannot be appended")
        if batch.nbytes > self.config.max_message_bytes:
            raise RecordTooLargeError(f"batch of {batch.nbytes} bytes exceeds max.message.bytes="
                                      f"{self.config.max_message_bytes} in {self.directory.name}")
        if timestamp_type not in (TIMESTAMP_TYPE_CREATE_TIME, TIMESTAMP_TYPE_LOG_APPEND_TIME):
            raise InvalidRequestError(f"unknown timestamp type {timestamp_type}")
        with self._lock:
            self._ensure_open()
            base = self.log_end_offset
            records, max_timestamp_ms = stamp(batch, stored_schema, base, timestamp_type, now_ms)
            message, header = encode_sealed_message(records, BatchHeader(
                base, batch.num_rows, leader_epoch, max_timestamp_ms, timestamp_type, producer_id, producer_epoch,
                base_sequence, schema_id=schema_id, stats=stats))
            if schema_id != NO_SCHEMA_ID:
                self._known_schemas.note(schema_id, stored_schema)
            self._write_locked([(message, header)], now_ms)
            return header

    def append_as_follower(self, batches: Sequence[tuple[pa.RecordBatch, BatchHeader]], *, now_ms: int) -> None:
        """Store batches sealed by the leader, all or nothing: every one is checked before any is written."""
        first = batches[0][1].base_offset if batches else self.log_end_offset
        self.append_encoded(encode_fetched(batches, first), now_ms=now_ms)

    def append_encoded(self, messages: Sequence[tuple[pa.Buffer, BatchHeader]], *, now_ms: int) -> None:
        """Store messages ``encode_fetched`` checked and encoded; they must start at the log end or
        after it (the leader's log has a cleaner's gap there: the follower keeps it)."""
        with self._lock:
            self._ensure_open()
            if messages and messages[0][1].base_offset < self.log_end_offset:
                raise InvariantViolation(f"{self.directory.name}: follower append at base offset "
                                         f"{messages[0][1].base_offset}, log end offset is {self.log_end_offset}")
            self._write_locked(messages, now_ms)

    def note_schema(self, schema_id: int, stored_schema: pa.Schema) -> None:
        """Make a typed version's stored schema known before appending messages of it (a follower's fetch)."""
        with self._lock:
            self._known_schemas.note(schema_id, stored_schema)

    def _write_locked(self, messages: list[tuple[pa.Buffer, BatchHeader]], now_ms: int) -> None:
        for message, header in messages:
            active = self._segments[-1]
            if header.schema_id != active.schema_id:
                self._start_schema_locked(self._known_schemas.stored(header.schema_id, active, self.directory.name),
                                          now_ms)
            self._maybe_roll(message.size, now_ms)
            self._segments[-1].append(message, header)
        if self.log_end_offset - self._recovery_point >= self.config.flush_interval_messages:
            self._flush_locked(now_ms)

    # ---- rolling and flushing -------------------------------------------------------------

    def _maybe_roll(self, message_bytes: int, now_ms: int) -> None:
        active = self._segments[-1]
        if active.batch_count == 0:
            return
        if (active.size_bytes + message_bytes > self.config.segment_bytes
                or now_ms - active.created_ms >= self.config.segment_ms):
            self._roll_locked(now_ms)

    def _start_schema_locked(self, stored_schema: pa.Schema, now_ms: int) -> None:
        """A batch of another schema is next: roll (one schema per segment), or replace an empty active
        segment by one of the new schema at the same base offset."""
        active = self._segments[-1]
        if active.batch_count:
            self._roll_locked(now_ms, stored_schema)
            return
        created_ms = active.created_ms
        active.delete()
        self._segments[-1] = LogSegment.create(self.directory, active.base_offset, created_ms, stored_schema)

    def roll(self, now_ms: int) -> None:
        """Start a new segment at the log end now (no-op when the active segment is empty)."""
        with self._lock:
            self._ensure_open()
            if self._segments[-1].batch_count:
                self._roll_locked(now_ms)

    def _roll_locked(self, now_ms: int, stored_schema: pa.Schema | None = None) -> None:
        # Kafka fsyncs a segment when it is rolled: sealed segments are then always
        # below the recovery point, which keeps recovery to the active segment.
        old = self._segments[-1]
        old.flush()
        old.close()
        self._recovery_point = self.log_end_offset
        self._start_segment_locked(self.log_end_offset, now_ms, stored_schema or old.schema)

    def _start_segment_locked(self, base_offset: int, now_ms: int, stored_schema: pa.Schema) -> None:
        new = LogSegment.create(self.directory, base_offset, now_ms, stored_schema)
        self._segments.append(new)
        self._bases.append(new.base_offset)

    def maybe_flush(self, now_ms: int) -> None:
        """Flush if ``flush.ms`` has passed since the last flush and something is unflushed."""
        with self._lock:
            if self._closed:
                return
            if now_ms - self._last_flush_ms >= self.config.flush_interval_ms:
                self._flush_locked(now_ms)

    def flush(self) -> None:
        with self._lock:
            if not self._closed:
                self._flush_locked(None)

    def _flush_locked(self, now_ms: int | None) -> None:
        if self.log_end_offset > self._recovery_point:
            self._segments[-1].flush()  # earlier segments were flushed when rolled
        self._recovery_point = self.log_end_offset
        if now_ms is not None:
            self._last_flush_ms = now_ms

    # ---- reads ----------------------------------------------------------------------------------

    def read(self, start_offset_inclusive: int, *, max_bytes: int, end_offset_exclusive: int | None = None,
             as_messages: bool = False) -> list[tuple[pa.RecordBatch | pa.Buffer, BatchHeader]]:
        """Whole stored batches from the one holding ``start_offset_inclusive``.

        ``as_messages``: each batch as its stored IPC message bytes (what a follower
        writes as they are) instead of a decoded record batch.

        At least one batch when any starts below the end (so a consumer progresses
        past a batch larger than ``max_bytes``); never a batch starting at or after
        ``end_offset_exclusive``. The first batch may begin below the requested
        offset (and below the log start offset): the caller slices.
        """
        with self._lock:
            self._ensure_open()
            end = self.log_end_offset
            if start_offset_inclusive < self._log_start_offset or start_offset_inclusive > end:
                raise OffsetOutOfRangeError(f"offset {start_offset_inclusive} is outside "
                                            f"[{self._log_start_offset}, {end}] of {self.directory.name}")
            if end_offset_exclusive is not None:
                end = min(end, end_offset_exclusive)
            if start_offset_inclusive >= end:
                return []
            result: list[tuple[pa.RecordBatch, BatchHeader]] = []
            total_bytes = 0
            first_segment = bisect_right(self._bases, start_offset_inclusive) - 1
            for k, segment in enumerate(self._segments[first_segment:]):
                i = _first_batch_from(segment, start_offset_inclusive) if k == 0 else 0
                for j in range(i, segment.batch_count):
                    entry = segment.index.entry(j)
                    if entry.base_offset >= end or (result and total_bytes + entry.size > max_bytes):
                        return result
                    result.append(segment.read_message(j) if as_messages else segment.read_batch(j))
                    total_bytes += entry.size
            return result

    def locate(self, start_offset_inclusive: int, *, max_bytes: int,
               end_offset_exclusive: int) -> list[tuple[str, list[tuple[int, int, int, int]]]]:
        """Where ``read`` would find its batches: [(segment path, [(position, size, base offset, records)])].

        For readers on this host that map the segment files themselves (the
        local read path); same bounds as ``read``, without touching the data.
        """
        with self._lock:
            self._ensure_open()
            end = min(self.log_end_offset, end_offset_exclusive)
            if start_offset_inclusive < self._log_start_offset or start_offset_inclusive >= end:
                return []
            result: list[tuple[str, list[tuple[int, int, int, int]]]] = []
            total_bytes = 0
            first_segment = bisect_right(self._bases, start_offset_inclusive) - 1
            for k, segment in enumerate(self._segments[first_segment:]):
                i = _first_batch_from(segment, start_offset_inclusive) if k == 0 else 0
                found = []
                for j in range(i, segment.batch_count):
                    entry = segment.index.entry(j)
                    if entry.base_offset >= end or (total_bytes and total_bytes + entry.size > max_bytes):
                        break
                    found.append((entry.position, entry.size, entry.base_offset, entry.record_count))
                    total_bytes += entry.size
                if found:
                    result.append((str(segment.path), found))
                if len(found) < segment.batch_count - i:
                    break
            return result

    def batches(self, start_offset_inclusive: int | None = None) -> Iterator[tuple[pa.RecordBatch, BatchHeader]]:
        """Every stored batch from ``start_offset_inclusive`` (default: the log start) to the end."""
        offset = self._log_start_offset if start_offset_inclusive is None else start_offset_inclusive
        while offset < self.log_end_offset:
            chunk = self.read(offset, max_bytes=BATCHES_ITERATION_BYTES)
            if not chunk:
                return
            yield from chunk
            offset = chunk[-1][1].next_offset

    def leader_epoch_starts(self) -> list[tuple[int, int]]:
        """(leader epoch, first offset) of every epoch that wrote batches here, as a leader-epoch cache.

        For rebuilding a damaged ``leader-epoch-checkpoint``. Epochs never decrease
        along a log, so each segment is bisected between batches of different
        epochs: O(epoch changes x log(batches)) header reads, and no record body is
        decoded. The epoch holding the log start is moved to start there, as
        ``LeaderEpochFile.truncate_from_start`` does.
        """
        with self._lock:
            self._ensure_open()
            starts: list[tuple[int, int]] = []
            for segment in self._segments:
                count = segment.batch_count
                if count == 0:
                    continue
                first = segment.read_batch(0)[1]
                note_epoch_start(starts, first)
                if count > 1:
                    find_epoch_starts(segment, 0, first, count - 1, segment.read_batch(count - 1)[1], starts)
            before = [pair for pair in starts if pair[1] < self._log_start_offset]
            after = [pair for pair in starts if pair[1] >= self._log_start_offset]
            if before and (not after or after[0][1] > self._log_start_offset):
                after.insert(0, (before[-1][0], self._log_start_offset))
            return after

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at/after the log start with timestamp >= ``timestamp_ms``."""
        with self._lock:
            self._ensure_open()
            start = self._log_start_offset
            for segment in self._segments:
                if segment.batch_count == 0 or segment.max_timestamp_ms < timestamp_ms or segment.next_offset <= start:
                    continue
                i = segment.index.first_batch_reaching(timestamp_ms)
                for j in range(i if i is not None else segment.batch_count, segment.batch_count):
                    entry = segment.index.entry(j)
                    if entry.max_timestamp_ms >= timestamp_ms and entry.next_offset > start:
                        found = _first_at_or_after(segment.read_batch(j)[0], timestamp_ms, start)
                        if found is not None:
                            return found
            return None

    # ---- truncation and retention ---------------------------------------------------------------

    def truncate_to(self, end_offset_exclusive: int) -> None:
        """Drop every batch holding an offset >= ``end_offset_exclusive``.

        A batch is never split: one straddling the point is dropped whole, so the
        log end may land below the requested offset (at that batch's base). A point
        in a gap the cleaner left becomes the log end (an empty segment starts there).
        A point below the log start empties the log and restarts it there.
        """
        with self._lock:
            self._ensure_open()
            if end_offset_exclusive >= self.log_end_offset:
                return
            if end_offset_exclusive < self._log_start_offset:
                self._truncate_fully_locked(end_offset_exclusive)
                return
            while len(self._segments) > 1 and self._segments[-1].base_offset > end_offset_exclusive:
                self._segments.pop().delete()
                self._bases.pop()
            fsync_directory(self.directory)
            active = self._segments[-1]
            holder = active.index.batch_containing(end_offset_exclusive)
            in_gap = holder < 0 or active.index.entry(holder).next_offset <= end_offset_exclusive
            active.truncate_batches(_first_batch_from(active, end_offset_exclusive))
            if in_gap and self.log_end_offset < end_offset_exclusive:
                # The point lies in a gap the cleaner left: the log end is the point itself (as the
                # replication core counts it), so an empty segment starts there.
                self._start_segment_locked(end_offset_exclusive, active.created_ms, active.schema)
            self._recovery_point = min(self._recovery_point, self.log_end_offset)
            # Only a straddling batch can take the end below the start; the start follows it down.
            self._log_start_offset = min(self._log_start_offset, self.log_end_offset)
            self._note_truncation_locked()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and restart the log empty at ``offset`` (a follower far behind)."""
        with self._lock:
            self._ensure_open()
            self._truncate_fully_locked(offset)

    def _truncate_fully_locked(self, offset: int) -> None:
        for segment in self._segments:
            segment.delete()
        fsync_directory(self.directory)
        self._segments = [LogSegment.create(self.directory, offset, self._segments[-1].created_ms)]
        self._bases = [offset]
        self._log_start_offset = self._recovery_point = offset
        self._note_truncation_locked()

    def _note_truncation_locked(self) -> None:
        end = self.log_end_offset
        self._truncated_to = end if self._truncated_to is None else min(self._truncated_to, end)

    def take_truncation_point(self) -> int | None:
        """The lowest log end a truncation left since the last call (None: none), for the log cleaner, which
        lowers its checkpoint to it (Kafka's maybeTruncateCheckpoint). Pulled, not pushed: truncation does no
        checkpoint I/O, and a pass ending after a truncation cannot overwrite the lowered checkpoint."""
        with self._lock:
            point, self._truncated_to = self._truncated_to, None
            return point

    def advance_log_start_offset(self, offset: int) -> None:
        """Move the log start forward (DeleteRecords); whole segments below it are deleted."""
        with self._lock:
            self._ensure_open()
            if offset > self.log_end_offset:
                raise OffsetOutOfRangeError(f"cannot move the log start of {self.directory.name} to {offset}, "
                                            f"past the log end {self.log_end_offset}")
            if offset <= self._log_start_offset:
                return
            self._log_start_offset = offset
            self._delete_oldest_while(lambda segment, _size: segment.next_offset <= offset, offset)

    def apply_retention(self, now_ms: int, *, max_deletable_offset_exclusive: int) -> int:
        """Delete the oldest whole segments past retention.ms / retention.bytes; returns how many.

        Never the active segment, and never a segment holding an offset at or above
        ``max_deletable_offset_exclusive`` (the high watermark: uncommitted data stays).
        """
        config = self.config

        def expired(segment: LogSegment, remaining_bytes: int) -> bool:
            by_time = config.retention_ms >= 0 and now_ms - segment.max_timestamp_ms > config.retention_ms
            by_size = config.retention_bytes >= 0 and remaining_bytes - segment.size_bytes >= config.retention_bytes
            return by_time or by_size or segment.next_offset <= self._log_start_offset

        with self._lock:
            self._ensure_open()
            return self._delete_oldest_while(expired, max_deletable_offset_exclusive)

    def _delete_oldest_while(self, predicate, max_deletable_offset_exclusive: int) -> int:
        deleted = 0
        remaining_bytes = self.size_bytes
        while len(self._segments) > 1:
            oldest = self._segments[0]
            if oldest.next_offset > max_deletable_offset_exclusive or not predicate(oldest, remaining_bytes):
                break
            self._segments.pop(0).delete()
            self._bases.pop(0)
            remaining_bytes -= oldest.size_bytes
            deleted += 1
        if deleted:
            fsync_directory(self.directory)
            self._log_start_offset = max(self._log_start_offset, self._segments[0].base_offset)
        return deleted

    # ---- lifecycle ------------------------------------------------------------------------------

    def _ensure_open(self) -> None:
        if self._closed:
            raise StorageError(f"log {self.directory} is closed")

    def close(self) -> None:
        """Flush and release the files; later calls raise StorageError."""
        with self._lock:
            if self._closed:
                return
            self._flush_locked(None)
            for segment in self._segments:
                segment.close()
            self._closed = True

    def delete(self) -> None:
        """Remove the replica's directory and everything in it.

        The directory is first renamed aside (``<name>.<n>-delete``) so a crash in the
        middle of the removal never leaves a half-deleted log that start-up would load.
        """
        with self._lock:
            for segment in self._segments:
                segment.close()
            self._closed = True
            doomed = self.directory.with_name(f"{self.directory.name}.{uuid.uuid4().hex}-delete")
            self.directory.rename(doomed)
            fsync_directory(doomed.parent)
            shutil.rmtree(doomed, ignore_errors=True)
