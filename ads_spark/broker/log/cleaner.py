"""Log compaction of one partition log: keep the latest record of every key, drop the rest.

``clean_log`` is one cleaning pass, Kafka's ``Cleaner.clean`` for ADS; the broker's cleaner thread
(``cleaner_manager.py``) chooses the log, the bound and the throttle. A pass:

1. snapshot (under the log's lock): the sealed segments below the bound, each with its own memory
   map, so the pass reads without the lock while appends, reads, retention and truncation go on;
2. key map: for the dirty records (offsets from ``first_dirty_offset`` up to the bound) the latest
   offset of every key, built batch by batch with ``dictionary_encode`` and numpy (no Python loop over
   records). It holds the FULL key bytes, so two keys never share an entry and no record that is the
   latest of its key can be dropped. At most ``key_map_entries_max`` keys: when the next batch would
   pass that, the map ends before it and the pass cleans only up to there (``cleaned_up_to``);
3. rewrite: the segments from the first one to the one holding ``cleaned_up_to`` are grouped into runs
   whose sizes sum to at most ``segment.bytes`` and each run is written as one cleaned segment named
   after its first segment's base. A row below ``cleaned_up_to`` is kept when its key is null, absent
   from the map, or mapped to its own offset (``pc.index_in`` against the map), and it is not an
   expired tombstone; batches at or above ``cleaned_up_to`` are copied unchanged;
4. swap (``cleaner_swap.py``), under the log's lock, after checking that none of the segments read
   changed meanwhile (else the pass is dropped: nothing swapped).

Every batch the cleaner writes is marked (``BatchHeader.row_count``, its offset span unchanged), so
offsets are never renumbered and the only gaps in a log follow a cleaned batch. A batch left with no
rows is not written. A run that would come out identical to the one segment it replaces is not
rewritten.

Tombstones (a record with a key and a null value): the first pass that rewrites a batch holding one
sets the batch's ``delete_horizon_ms`` to ``now_ms + delete_retention_ms`` (Kafka's KIP-534); a later
pass with ``now_ms >= delete_horizon_ms`` removes it. ``now_ms`` is the caller's wall clock. Records
with a null key are always kept (a compacted topic refuses them at produce time).

Never cleaned: the active segment, any batch ending above ``clean_end_offset_exclusive`` (the caller
passes min(high watermark, active segment base)), and segments from the first one holding a record
younger than ``min_compaction_lag_ms`` (by the segment's largest timestamp, as Kafka).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from ads_spark.broker.log import cleaner_swap
from ads_spark.broker.log.checkpoints import fsync_directory
from ads_spark.broker.log.index import IndexInconsistent
from ads_spark.broker.log.segment import LogSegment, encode_sealed_message
from ads_spark.errors import CorruptMessageError, InvalidConfigError, StorageError
from ads_spark.protocol.records import NO_DELETE_HORIZON, BatchHeader, check_counts, message_crc

_log = logging.getLogger("ads.log.cleaner")

# Dirty batches are added to the key map in chunks of at least this many keyed rows (and at least the
# map's size), so the map's re-encoding costs amortised O(1) per row.
MAP_CHUNK_ROWS_MIN = 1 << 16
_LARGE_KEYS = pa.large_binary()  # map and lookups in 64-bit offsets: no 2 GiB limit on a chunk's keys


@dataclass(frozen=True, slots=True)
class CleanStats:
    """What one pass did. ``cleaned_up_to``: the new first dirty offset (the cleaner's checkpoint)."""

    bytes_read: int = 0
    bytes_written: int = 0
    records_kept: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0
    cleaned_up_to: int = 0
    segments_before: int = 0  # segments replaced
    segments_after: int = 0  # cleaned segments that replaced them
    abandoned: bool = False  # the log changed under the pass: nothing was swapped
    duration_ms: float = 0.0


# ---- Arrow columns as numpy, through their buffers (to_numpy imports pandas, which a broker never does) --

def _values(array: pa.Array, dtype) -> np.ndarray:
    """The values buffer of a fixed-width column (nulls hold whatever the buffer holds)."""
    if len(array) == 0:
        return np.empty(0, dtype=dtype)
    return np.frombuffer(array.buffers()[1], dtype=dtype, count=len(array) + array.offset)[array.offset:]


def _valid(array: pa.Array) -> np.ndarray:
    bitmap = array.buffers()[0]
    if bitmap is None or array.null_count == 0:
        return np.ones(len(array), dtype=bool)
    bits = np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), bitorder="little")
    return bits[array.offset:array.offset + len(array)].astype(bool)


def _bool_array(mask: np.ndarray) -> pa.Array:
    return pa.Array.from_buffers(pa.bool_(), len(mask), [None, pa.py_buffer(np.packbits(mask, bitorder="little"))])


def _as_large(keys: pa.Array) -> pa.Array:
    return keys if keys.type == _LARGE_KEYS else keys.cast(_LARGE_KEYS)


# ---- the key map --------------------------------------------------------------------------------------

class KeyMap:
    """Latest offset per key (full key bytes) of the dirty records seen so far; at most ``entries_max`` keys."""

    def __init__(self, entries_max: int):
        if entries_max < 1:
            raise InvalidConfigError(f"key map of {entries_max} entries cannot hold any key")
        self.entries_max = entries_max
        self.keys = pa.nulls(0, _LARGE_KEYS)
        self.offsets = np.empty(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.keys)

    def add(self, keys: pa.Array, offsets: np.ndarray, row_ends: list[int]) -> int:
        """Add the keyed rows of as many whole batches as fit; returns how many batches went in.

        ``keys`` (no nulls) and ``offsets`` are the rows of consecutive batches in offset order;
        ``row_ends[i]`` the number of rows of the first i + 1 batches."""
        if not row_ends:
            return 0
        held = len(self.keys)
        encoded = pc.dictionary_encode(pa.concat_arrays([self.keys, _as_large(keys)]))
        codes = _values(encoded.indices, np.int32)
        # Codes are given in order of first appearance (Arrow's memo table): the held keys are 0..held-1,
        # and a chunk row's running maximum + 1 is how many distinct keys the map would hold after it.
        distinct_after = np.maximum(np.maximum.accumulate(codes[held:]) + 1, held) if len(codes) > held else []
        fitting = 0
        for end in row_ends:  # one step per batch, not per record
            if end and distinct_after[end - 1] > self.entries_max:
                break
            fitting += 1
        rows = row_ends[fitting - 1] if fitting else 0
        distinct = int(distinct_after[rows - 1]) if rows else held
        latest = np.full(distinct, -1, dtype=np.int64)
        latest[:held] = self.offsets
        np.maximum.at(latest, codes[held:held + rows], offsets[:rows])
        self.keys = pa.concat_arrays([encoded.dictionary.slice(0, distinct)])  # a copy: frees the rest
        self.offsets = latest
        return fitting

    def latest_offsets(self, keys: pa.Array) -> np.ndarray:
        """The mapped offset of each key, -1 where the key is null or not in the map."""
        if len(self.keys) == 0 or len(keys) == 0:
            return np.full(len(keys), -1, dtype=np.int64)
        found = pc.index_in(_as_large(keys), value_set=self.keys)
        valid = _valid(found)
        positions = np.where(valid, _values(found, np.int32), 0)
        return np.where(valid, self.offsets[positions], -1)


# ---- reading a snapshot of the log ----------------------------------------------------------------------

@dataclass
class _Source:
    """A sealed segment as the pass found it, with its own mapping of the file (valid whatever happens later)."""

    segment: LogSegment
    base_offset: int
    batch_count: int
    size_bytes: int
    max_timestamp_ms: int
    next_offset: int
    mapped: pa.MemoryMappedFile

    def batches(self, throttle: Callable[[int], None]):
        """(message, batch, header) of every batch, in order; throttle called per batch read."""
        self.mapped.seek(0)
        whole = self.mapped.read_buffer()  # zero copy: the messages are slices of the mapping
        self.mapped.seek(0)
        reader = ipc.open_stream(self.mapped)
        position = self.mapped.tell()
        for _ in range(self.batch_count):
            batch, metadata = reader.read_next_batch_with_custom_metadata()
            end = self.mapped.tell()
            header = BatchHeader.from_metadata(metadata)
            message = whole.slice(position, end - position)
            throttle(end - position)
            yield message, batch, header
            position = end


def _snapshot(log, clean_end: int, min_lag_before_ms: int | None) -> tuple[list[_Source], int]:
    """The sealed segments below the bound, mapped now (under the log's lock), and the offset the pass must
    not reach: the bound, or the base of the first segment not taken."""
    sources = []
    with log._lock:
        log._ensure_open()
        for segment in log._segments[:-1]:  # never the active segment
            if segment.base_offset >= clean_end:
                break
            if min_lag_before_ms is not None and segment.max_timestamp_ms > min_lag_before_ms:
                break  # holds a record younger than min.compaction.lag.ms: it and everything after wait
            sources.append(_Source(segment, segment.base_offset, segment.batch_count, segment.size_bytes,
                                   segment.max_timestamp_ms, segment.next_offset, pa.memory_map(str(segment.path))))
        following = log._segments[len(sources)].base_offset
    return sources, min(clean_end, following)


def _build_key_map(sources: list[_Source], key_map: KeyMap, first_dirty: int, clean_end: int,
                   throttle: Callable[[int], None], counters: dict) -> int:
    """Fill ``key_map`` from the dirty batches; returns the offset the map covers up to (exclusive)."""
    covered = first_dirty
    pending_keys, pending_offsets, row_ends, ends = [], [], [], []

    def flush() -> bool:
        nonlocal covered
        if not ends:
            return True
        keys = pa.concat_arrays(pending_keys) if pending_keys else pa.nulls(0, _LARGE_KEYS)
        offsets = np.concatenate(pending_offsets) if pending_offsets else np.empty(0, dtype=np.int64)
        fitting = key_map.add(keys, offsets, row_ends)
        if fitting == 0 and len(key_map) == 0:
            raise InvalidConfigError(f"a key map of {key_map.entries_max} entries cannot hold the keys of the "
                                     f"batch at offset {ends[0][0]}; raise log.cleaner.dedupe.buffer.size")
        if fitting:
            covered = ends[fitting - 1][1]
        complete = fitting == len(ends)
        pending_keys.clear(), pending_offsets.clear(), row_ends.clear(), ends.clear()
        return complete

    for source in sources:
        if source.next_offset <= first_dirty:
            continue  # wholly clean: nothing for the map
        for _message, batch, header in source.batches(throttle):
            counters["bytes_read"] += _message.size
            if header.next_offset <= first_dirty:
                continue
            if header.next_offset > clean_end:
                flush()
                return covered
            keys = batch.column("key")
            keyed = _valid(keys)
            pending_keys.append(_as_large(keys.filter(_bool_array(keyed)) if not keyed.all() else keys))
            pending_offsets.append(_values(batch.column("offset"), np.int64)[keyed])
            row_ends.append((row_ends[-1] if row_ends else 0) + int(keyed.sum()))
            ends.append((header.base_offset, header.next_offset))
            if row_ends[-1] >= max(MAP_CHUNK_ROWS_MIN, len(key_map)) and not flush():
                return covered
    flush()
    return covered


# ---- rewriting -------------------------------------------------------------------------------------------

def _groups(sources: list[_Source], rewrite_end: int, segment_bytes: int) -> list[list[_Source]]:
    """Runs of consecutive segments below ``rewrite_end`` whose sizes sum to at most ``segment_bytes``."""
    groups: list[list[_Source]] = []
    size = 0
    for source in sources:
        if source.base_offset >= rewrite_end:
            break
        if groups and size + source.size_bytes <= segment_bytes:
            groups[-1].append(source)
            size += source.size_bytes
        else:
            groups.append([source])
            size = source.size_bytes
    return groups


def _selections(source: _Source, key_map: KeyMap, rewrite_end: int, now_ms: int,
                throttle: Callable[[int], None], counters: dict):
    """(message, batch, header, keep mask | None, tombstone mask) per batch; None = not cleanable, copy it."""
    items = list(source.batches(throttle))
    counters["bytes_read"] += sum(message.size for message, _, _ in items)
    cleanable = [item for item in items if item[2].next_offset <= rewrite_end]
    if not cleanable:
        return [(message, batch, header, None, None) for message, batch, header in items]
    keys = pa.concat_arrays([_as_large(batch.column("key")) for _, batch, _ in cleanable])
    offsets = np.concatenate([_values(batch.column("offset"), np.int64) for _, batch, _ in cleanable])
    tombstones = _valid(keys) & ~np.concatenate([_valid(batch.column("value")) for _, batch, _ in cleanable])
    horizons = np.repeat(np.array([header.delete_horizon_ms for _, _, header in cleanable], dtype=np.int64),
                         [batch.num_rows for _, batch, _ in cleanable])
    expired = tombstones & (horizons != NO_DELETE_HORIZON) & (now_ms >= horizons)
    keep = (offsets >= key_map.latest_offsets(keys)) & ~expired  # null or unmapped key: latest is -1
    result, row = [], 0
    for message, batch, header in items:
        if header.next_offset > rewrite_end:
            result.append((message, batch, header, None, None))
            continue
        end = row + batch.num_rows
        result.append((message, batch, header, keep[row:end], tombstones[row:end]))
        row = end
    return result


def _check_source(message: pa.Buffer, batch: pa.RecordBatch, header: BatchHeader) -> None:
    """A batch about to be re-sealed must be intact: the new CRC would otherwise launder a corruption."""
    check_counts(batch.num_rows, header)
    if message_crc(message, header) != header.crc:
        raise CorruptMessageError(f"CRC mismatch in batch at offset {header.base_offset} while cleaning; "
                                  "the segment is left as it is")


def _write_group(group: list[_Source], key_map: KeyMap, rewrite_end: int, now_ms: int,
                 delete_retention_ms: int, throttle: Callable[[int], None], counters: dict):
    """Write one run as a cleaned segment; returns its writer, or None when it would equal its one source."""
    writer = cleaner_swap.CleanedSegmentWriter(group[0].segment.directory, group[0].base_offset)
    changed = len(group) > 1
    try:
        for source in group:
            for message, batch, header, keep, tombstones in _selections(source, key_map, rewrite_end, now_ms,
                                                                        throttle, counters):
                if keep is not None:
                    _check_source(message, batch, header)
                    kept = int(keep.sum())
                    counters["records_kept"] += kept
                    counters["records_removed"] += batch.num_rows - kept
                    counters["tombstones_removed"] += int((tombstones & ~keep).sum())
                    if kept == 0:
                        changed = True
                        continue
                    horizon = header.delete_horizon_ms
                    if horizon == NO_DELETE_HORIZON and (tombstones & keep).any():
                        horizon = now_ms + delete_retention_ms
                    cleaned = replace(header, row_count=kept, delete_horizon_ms=horizon)
                    if cleaned != header:
                        changed = True
                        kept_batch = batch if kept == batch.num_rows else batch.filter(_bool_array(keep))
                        message, header = encode_sealed_message(kept_batch, replace(cleaned, crc=0))
                written = writer.append(message, header)
                counters["bytes_written"] += written
                throttle(written)
        if not changed:
            writer.discard()
            return None
        writer.finish()
        return writer
    except BaseException:
        writer.discard()
        raise


# ---- the pass ----------------------------------------------------------------------------------------------

def clean_log(log, *, clean_end_offset_exclusive: int, now_ms: int, delete_retention_ms: int,
              min_compaction_lag_ms: int, key_map_entries_max: int, throttle: Callable[[int], None],
              first_dirty_offset: int | None = None) -> CleanStats:
    """One cleaning pass over ``log`` (a PartitionLog); see the module docstring.

    ``first_dirty_offset``: where the previous pass stopped (the cleaner's checkpoint; None = nothing
    cleaned yet). ``throttle(n)`` is called after every n bytes read or written (it may sleep).
    """
    started = time.monotonic()
    lag_bound = now_ms - min_compaction_lag_ms if min_compaction_lag_ms > 0 else None
    sources, bound = _snapshot(log, clean_end_offset_exclusive, lag_bound)
    first_dirty = 0 if first_dirty_offset is None else first_dirty_offset
    counters = dict.fromkeys(("bytes_read", "bytes_written", "records_kept", "records_removed",
                              "tombstones_removed"), 0)
    key_map = KeyMap(key_map_entries_max)
    covered = _build_key_map(sources, key_map, first_dirty, bound, throttle, counters)
    rewrite_end = min(covered, bound)
    groups = _groups(sources, rewrite_end, log.config.segment_bytes)
    written = []
    try:
        for group in groups:
            writer = _write_group(group, key_map, rewrite_end, now_ms, delete_retention_ms, throttle, counters)
            if writer is not None:
                written.append((group, writer))
        swapped = _swap(log, written, now_ms)
    except BaseException:
        if not (log.directory / cleaner_swap.MANIFEST_NAME).exists():  # committed: recovery needs the files
            for _, writer in written:
                writer.discard()
        raise
    finally:
        for source in sources:
            source.mapped.close()  # batches still referenced elsewhere keep their own hold on the mapping
    if not swapped:
        for _, writer in written:
            writer.discard()
    return CleanStats(
        **counters, cleaned_up_to=max(rewrite_end, first_dirty) if swapped else first_dirty,
        segments_before=sum(len(group) for group, _ in written) if swapped else 0,
        segments_after=len(written) if swapped else 0, abandoned=not swapped,
        duration_ms=(time.monotonic() - started) * 1000.0)


def _swap(log, written: list[tuple[list[_Source], cleaner_swap.CleanedSegmentWriter]], now_ms: int) -> bool:
    """Swap the written segments in (durably, then in memory); False if the log changed under the pass."""
    if not written:
        return True
    directory = written[0][1].directory
    fsync_directory(directory)
    cleaner_swap._step("cleaned-written")
    with log._lock:
        if log._closed:
            return False
        sealed = log._segments[:-1]
        position = {id(segment): i for i, segment in enumerate(sealed)}
        for group, _ in written:
            for source in group:
                i = position.get(id(source.segment))
                if i is None or sealed[i].batch_count != source.batch_count:
                    _log.info("%s: the log changed during cleaning (segment %d); the pass is dropped",
                              directory, source.base_offset)
                    return False
        try:
            cleaner_swap.swap_in(directory, [(group[0].base_offset, [s.base_offset for s in group])
                                             for group, _ in written])
        except OSError as exc:  # the directory no longer matches the log in memory: only a reopen repairs it
            raise StorageError(f"{directory}: swapping cleaned segments in failed ({exc}); the log must be "
                               "reopened, which finishes or rolls back the swap") from exc
        replaced = {id(s.segment): group for group, _ in written for s in group}
        segments = []
        for segment in log._segments:
            group = replaced.get(id(segment))
            if group is None:
                segments.append(segment)
                continue
            segment.close()  # readers keep the batches they hold: those map the old (now unlinked) inodes
            if segment is group[0].segment:
                segments.append(_open_cleaned(directory, group[0].base_offset, now_ms))
        log._segments = segments
        log._bases = [segment.base_offset for segment in segments]
    return True


def _open_cleaned(directory, base_offset: int, now_ms: int) -> LogSegment:
    try:
        return LogSegment.open_trusted(directory, base_offset, now_ms)
    except IndexInconsistent:  # cannot happen short of a disk lying: rebuild from the segment
        return LogSegment.recover(directory, base_offset, now_ms)[0]
