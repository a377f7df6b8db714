"""What a consumer fetch yields: partition names, offsets sentinels and committed-record chunks.

Shared by the consumer (``consumer.py``) and its poll path (``poll_fetcher.py``), which both turn
fetched batches into a ``FetchedChunk``; kept here so that neither has to import the other's module.
Building a chunk never imports pandas (``tests/unit/test_consumer_chunk.py`` holds it to that).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from ads_spark.protocol.records import RECORD_SCHEMA

OFFSET_BEGINNING = -2
OFFSET_END = -1
OFFSET_INVALID = -1001


class TopicPartition(NamedTuple):
    topic: str
    partition: int
    offset: int = OFFSET_INVALID
    # A committed offset's metadata and leader epoch (Consumer.commit / committed, as confluent-kafka's
    # TopicPartition has them); None: not given / unknown.
    metadata: str | None = None
    leader_epoch: int | None = None

    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)


@dataclass
class FetchedChunk:
    table: pa.Table
    high_watermark: int
    log_start_offset: int
    next_offset: int
    # The leader epoch the records were read in (the broker checked it): every record here has an epoch at
    # or below it, which is what KIP-320's check of the next position needs. -1: unknown.
    leader_epoch: int = -1


def empty_table() -> pa.Table:
    # Not ``Schema.empty_table()``: it imports pandas (150-300 ms), at a consumer's first empty answer.
    return pa.Table.from_batches([], schema=RECORD_SCHEMA)


def fetched_chunk(batches: list[pa.RecordBatch], start: int, high_watermark: int,
                  log_start_offset: int, leader_epoch: int = -1, span_end: int | None = None) -> FetchedChunk:
    """The committed records of ``batches`` from ``start`` (below the HW), with where the next read starts.

    ``span_end``: the answer's ``next_offset`` (the end of the last batch's offset span, or the bound when
    nothing was stored up to it). A compacted log has gaps: the last row + 1 may be an offset nobody holds, so
    the next read starts at the later of the two (capped at the HW), never asking for a gap twice."""
    # A typed read's batches are in its projected schema (all alike); an empty answer is RECORD_SCHEMA's.
    table = pa.Table.from_batches(batches, schema=batches[0].schema if batches else RECORD_SCHEMA)
    table = slice_offsets(table, start, high_watermark)
    next_offset = int(table.column("offset")[-1].as_py()) + 1 if table.num_rows else start
    if span_end is not None:
        next_offset = max(next_offset, min(int(span_end), high_watermark))
    return FetchedChunk(table, high_watermark, log_start_offset, next_offset, leader_epoch)


def slice_offsets(table: pa.Table, start_inclusive: int, end_exclusive: int) -> pa.Table:
    """The rows of ``table`` with offsets in [start_inclusive, end_exclusive)."""
    if table.num_rows == 0:
        return table
    offsets = table.column("offset")
    first, last = offsets[0].as_py(), offsets[-1].as_py()
    if first >= start_inclusive and last < end_exclusive:
        return table
    if last - first + 1 != table.num_rows:
        # Gaps (a compacted log): offsets still strictly increase, so the bounds are found by binary search over
        # the offset column (8 bytes a row), and the rows are still a zero-copy slice.
        column = _offsets_array(offsets)
        begin, end = (int(i) for i in np.searchsorted(column, [start_inclusive, end_exclusive], side="left"))
        return table.slice(begin, max(0, end - begin))
    # Offsets are contiguous and increasing within a partition: a zero-copy slice, no filter pass.
    begin = min(max(0, start_inclusive - first), table.num_rows)
    end = min(max(begin, end_exclusive - first), table.num_rows)
    return table.slice(begin, end - begin)


def _offsets_array(offsets: pa.ChunkedArray) -> np.ndarray:
    """The offset column as numpy, viewing each chunk's buffer (non-null int64). Not ``to_numpy``: pyarrow
    imports pandas for it, 150-300 ms of a consumer's first read."""
    views = [np.frombuffer(chunk.buffers()[1], dtype=np.int64, count=len(chunk), offset=8 * chunk.offset)
             for chunk in offsets.chunks]
    return views[0] if len(views) == 1 else np.concatenate(views)
