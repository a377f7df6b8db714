"""A batch on its way to a leader, and how queued batches of one partition share a produce request.

``OpenBatch`` holds the records ``produce()`` calls add to a partition, column by
column, until the batch is sealed; ``ProducerBatch`` is a sealed batch (or a
``produce_arrow`` one) from its queueing to its last answer.

Each produce request costs the brokers a fixed amount of CPU whatever its size
(measured on this machine, RF=3 acks=all: ~3 ms on the leader and ~1 ms on
each follower for a one-record request, against ~1.6 ms per MiB per broker for
the bytes themselves), so a producer with a backlog sends fewer, larger
requests: when a partition's queue holds several batches that have never been
sent, they leave as one request of at most ``max.request.size`` bytes, stored
as one batch. Nothing waits for this: only batches already queued behind the
head are taken, so an idle producer's latency is unchanged.

A coalesced request keeps each part's future: the broker answers with one base
offset and the parts' offsets follow from their record counts. Only batches
never sent before are coalesced: a batch that went out once may already be in
the log under its own sequence numbers, so a retry must resend it as it was.

A batch put back on its queue (a retry, or a part of a refused coalesced
request) goes back to its place in call order (``put_back``), not to the head:
several requests of a partition are in flight at once and their answers come
back one by one, so putting each at the head would reverse them. An
idempotent partition's queue out of sequence order stalls: the broker takes
only the next sequence, the window fills with later batches refused as out of
order, and the batch it waits for sits behind them until the delivery timeout.
"""

from __future__ import annotations

import itertools
import operator
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pyarrow as pa

from ads_spark.client.delivery import BatchOutcome
from ads_spark.errors import AdsError
from ads_spark.protocol.records import HEADER_TYPE, NO_SCHEMA_ID, PRODUCE_SCHEMA, int64_column
from ads_spark.protocol.typed_records import schema_id_of

PARTS_PER_REQUEST_MAX = 256  # bounds the per-request bookkeeping when batches are tiny


class OpenBatch:
    """Records of one partition not sealed yet, column by column. The Arrow arrays are built when the batch
    is first sent (``record_batch``, on the sender thread, outside the producer's lock: built under it,
    at seal time, they kept ``produce()`` callers waiting on the lock, ~14% of the per-record path)."""

    __slots__ = ("keys", "values", "headers", "timestamps_ms", "outcome", "size_bytes", "created_ms")

    def __init__(self, topic: str, partition: int, created_ms: int):
        self.keys: list = []
        self.values: list = []
        self.headers: list = []
        self.timestamps_ms: list[int] = []
        self.outcome = BatchOutcome(topic, partition, self.timestamps_ms)
        self.size_bytes = 0
        self.created_ms = created_ms

    def record_batch(self, following: Sequence[OpenBatch] = ()) -> pa.RecordBatch:
        """These records, then ``following``'s, as one Arrow batch: a coalesced request's parts are built
        together, not one by one and then concatenated (a second copy of every record)."""
        def joined(column: str) -> list:
            if not following:
                return getattr(self, column)
            values = list(getattr(self, column))
            for batch in following:
                values.extend(getattr(batch, column))
            return values

        return pa.RecordBatch.from_arrays(
            [_timestamps_column(joined("timestamps_ms")), _binary_column(joined("keys")),
             _binary_column(joined("values")), _column(joined("headers"), HEADER_TYPE)],
            schema=PRODUCE_SCHEMA)


# The columns of produce() batches are built from buffers, not by ``pa.array`` over Python lists: the
# first ``pa.array`` of a process imports pandas (pyarrow checks whether the list is a pandas object),
# 150-300 ms of the first produce and, over a 200k-record run in a new process, 1.3 us of client CPU per
# record (3.2 -> 2.0 us with pandas imported beforehand). Built this way they cost the same per record.
BINARY_OFFSETS_MAX = (1 << 31) - 1  # pa.binary()'s int32 offsets


def _timestamps_column(timestamps_ms: list[int]) -> pa.Array:
    return int64_column(np.fromiter(timestamps_ms, dtype=np.int64, count=len(timestamps_ms)), pa.timestamp("ms"))


def _binary_column(values: list) -> pa.Array:
    """``values`` (bytes or None) as a binary column: one join and the offsets from their lengths; some
    null (tombstones among values, records with and without keys) add a validity bitmap."""
    count = len(values)
    nulls = values.count(None)
    if nulls == count:
        return pa.nulls(count, pa.binary())  # no keys: the common case
    given = values
    if nulls:
        values = [b"" if value is None else value for value in values]
    lengths = np.fromiter(map(len, values), dtype=np.int64, count=count)
    validity = None
    if nulls:
        present = lengths > 0
        if count - np.count_nonzero(present) != nulls:  # some values are empty, not null: tell them apart
            present = np.fromiter(map(operator.is_not, given, itertools.repeat(None)), dtype=bool, count=count)
        validity = pa.py_buffer(np.packbits(present, bitorder="little"))
    offsets = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > BINARY_OFFSETS_MAX:
        return pa.array(given, pa.binary())  # Arrow says why such a batch cannot be built
    return pa.Array.from_buffers(pa.binary(), count,
                                 [validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(b"".join(values))],
                                 null_count=nulls)


def _column(values: list, arrow_type: pa.DataType) -> pa.Array:
    """An Arrow column of ``values``; all-null columns (no headers: the common case) without a scan
    of Python objects by Arrow's converter."""
    if values.count(None) == len(values):
        return pa.nulls(len(values), arrow_type)
    return pa.array(values, arrow_type)


@dataclass
class ProducerBatch:
    topic: str
    partition: int
    batch: pa.RecordBatch | None = None  # built when first sent if ``records`` or ``parts`` (``materialize``)
    # produce(): the sealed records, column by column, not built yet; ``records.record_batch(following)``
    # builds them, followed by other such batches' records, as one Arrow batch.
    records: OpenBatch | None = None
    outcome: BatchOutcome | None = None  # produce(): what every record's future reads
    arrow_future: Future | None = None  # produce_arrow(): one future for the batch
    record_count: int = 0
    created_ms: int = 0
    deadline_ms: int = 0
    attempts: int = 0
    retry_not_before_ms: int = 0
    base_sequence: int = -1  # idempotence: fixed when the batch is queued, the same on every retry
    last_error: AdsError | None = None  # the last retriable error, reported if the deadline passes
    maybe_written: bool = False  # an attempt ended without a definite refusal: it may be in the log
    log_append_time_ms: int = -1  # the broker's append time when the topic stamps it (LogAppendTime)
    size_bytes: int = 0
    solo: bool = False  # sent on its own: it was part of a coalesced request the topic refused as too large
    # A coalesced request: the queued batches it carries, in offset order (sequences contiguous).
    parts: list[ProducerBatch] | None = None
    # Its place in its partition's call order (a coalesced request: its first part's). Invariant: a
    # partition's queue is in ascending queue_order, so call order (and sequence order) is send order.
    queue_order: int = 0

    def materialize(self) -> pa.RecordBatch:
        """The batch to send, built once, on the sender thread. A coalesced request of produce() batches is
        built from all its parts' records in one pass; one with other parts concatenates them."""
        if self.batch is None:
            if self.parts is not None:
                sources = [part.records for part in self.parts]
                if any(source is None for source in sources):
                    self.batch = pa.concat_batches([part.materialize() for part in self.parts])
                else:  # the parts stay unbuilt: split again, each is built on its own
                    self.batch = sources[0].record_batch(sources[1:])
            elif self.records is not None:
                self.batch, self.records = self.records.record_batch(), None
        return self.batch

    def complete(self, base_offset: int | None, error: AdsError | None) -> None:
        if self.parts is not None:
            next_offset = base_offset
            for part in self.parts:
                part.log_append_time_ms = self.log_append_time_ms
                part.complete(next_offset, error)
                if next_offset is not None and next_offset >= 0:  # -1 (acks=0: unknown) stays -1
                    next_offset += part.record_count
            return
        if self.arrow_future is not None:
            if error is None:
                self.arrow_future.set_result(base_offset)
            else:
                self.arrow_future.set_exception(error)
        if self.outcome is not None:
            self.outcome.complete(base_offset, error, self.log_append_time_ms)  # O(1) unless callbacks


def _schema_id(item: ProducerBatch) -> int:
    return NO_SCHEMA_ID if item.batch is None else schema_id_of(item.batch.schema)


def take_coalesced(head: ProducerBatch, queue: deque[ProducerBatch], now_ms: int,
                   request_bytes_max: int) -> ProducerBatch:
    """``head`` (already taken off ``queue``), joined by the never-sent batches queued right behind it
    while the request stays within ``request_bytes_max``; ``head`` itself if none can join."""
    if head.attempts or head.solo or not queue:
        return head
    parts, size_bytes, records = [head], head.size_bytes, head.record_count
    while queue and len(parts) < PARTS_PER_REQUEST_MAX:
        candidate = queue[0]
        sendable_now = candidate.retry_not_before_ms <= now_ms < candidate.deadline_ms
        contiguous = head.base_sequence < 0 or candidate.base_sequence == head.base_sequence + records
        # Only batches of one schema version join (a typed version's stream carries no other; a queue is one
        # topic's, so the version names the schema).
        other_schema = _schema_id(candidate) != _schema_id(head)
        if (candidate.attempts or candidate.solo or not sendable_now or not contiguous or other_schema
                or size_bytes + candidate.size_bytes > request_bytes_max):
            break
        parts.append(queue.popleft())
        size_bytes += candidate.size_bytes
        records += candidate.record_count
    if len(parts) == 1:
        return head
    return ProducerBatch(head.topic, head.partition, record_count=records, created_ms=head.created_ms,
                         deadline_ms=min(part.deadline_ms for part in parts), base_sequence=head.base_sequence,
                         size_bytes=size_bytes, parts=parts, queue_order=head.queue_order)


def put_back(queue: deque[ProducerBatch], item: ProducerBatch) -> None:
    """``item`` back on its partition's ``queue`` at its place in call order. Put-backs land near the head
    (they were sent, so only batches queued after them are behind), so the scan is short."""
    index = next((i for i, queued in enumerate(queue) if queued.queue_order > item.queue_order), len(queue))
    queue.insert(index, item)
