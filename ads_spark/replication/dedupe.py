"""Idempotent-producer state: per producer id, its epoch and its last few batches.

Kafka's rule: a producer numbers its batches per partition with sequences; the
leader accepts the next sequence, answers a retry of one of the last
``BATCHES_KEPT_PER_PRODUCER`` batches with the offset it was first written at
(so a resend never duplicates), and refuses gaps. The table is a pure value
derived from the log's batch headers, so a follower that copies batches and a
broker that restarts rebuild exactly the leader's table (``rebuild``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Union

BATCHES_KEPT_PER_PRODUCER = 5  # Kafka's max.in.flight.requests.per.connection bound for idempotence
# Producers remembered per partition: each streaming sink task writes under its own derived id, so
# ids accumulate; the least recently written ones are forgotten past this bound.
PRODUCERS_KEPT_MAX = 10_000
NO_PRODUCER_ID = -1
NO_SEQUENCE = -1
UNKNOWN_OFFSET = -1  # a Duplicate whose original offsets are no longer known


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_sequence: int
    last_sequence: int  # inclusive
    first_offset: int
    last_offset: int  # inclusive
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class ProducerEntry:
    producer_epoch: int
    batches: tuple[BatchMetadata, ...] = ()  # oldest first, at most BATCHES_KEPT_PER_PRODUCER

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else NO_SEQUENCE


@dataclass(frozen=True, slots=True)
class ProducerTable:
    """producer id -> entry. The mapping is never mutated; updates build a new table."""

    entries: Mapping[int, ProducerEntry] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Append:
    """Write the batch; sequences continue the producer's."""


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A retry of a batch already in the log: answer with its original offsets."""

    base_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class OutOfOrderSequence:
    expected_sequence: int


@dataclass(frozen=True, slots=True)
class InvalidProducerEpoch:
    current_epoch: int


@dataclass(frozen=True, slots=True)
class UnknownProducerId:
    pass


Verdict = Union[Append, Duplicate, OutOfOrderSequence, InvalidProducerEpoch, UnknownProducerId]


def check(table: ProducerTable, producer_id: int, producer_epoch: int, base_sequence: int,
          record_count: int) -> Verdict:
    """What to do with a batch from ``producer_id`` (non-idempotent batches always append)."""
    if producer_id == NO_PRODUCER_ID:
        return Append()
    last_sequence = base_sequence + record_count - 1
    entry = table.entries.get(producer_id)
    if entry is None:
        return Append() if base_sequence == 0 else UnknownProducerId()
    if producer_epoch < entry.producer_epoch:
        return InvalidProducerEpoch(entry.producer_epoch)
    if producer_epoch > entry.producer_epoch:
        return Append() if base_sequence == 0 else OutOfOrderSequence(0)
    for batch in entry.batches:
        if batch.first_sequence == base_sequence and batch.last_sequence == last_sequence:
            return Duplicate(batch.first_offset, batch.last_offset)
    if entry.batches and last_sequence < entry.batches[0].first_sequence:
        # Older than every batch kept (Kafka's DUPLICATE_SEQUENCE_NUMBER): it was written before the
        # oldest kept batch, so it is committed once that one's predecessor is. Its own offsets are gone.
        before_kept = entry.batches[0].first_offset - 1
        return Duplicate(UNKNOWN_OFFSET, before_kept)
    expected = entry.last_sequence + 1
    if base_sequence == expected:
        return Append()
    return OutOfOrderSequence(expected)


def record_append(table: ProducerTable, batch: object) -> ProducerTable:
    """The table after ``batch`` (a BatchInfo or BatchHeader) was appended to the log."""
    producer_id = batch.producer_id  # type: ignore[attr-defined]
    if producer_id == NO_PRODUCER_ID:
        return table
    count = batch.record_count  # type: ignore[attr-defined]
    meta = BatchMetadata(
        first_sequence=batch.base_sequence,  # type: ignore[attr-defined]
        last_sequence=batch.base_sequence + count - 1,  # type: ignore[attr-defined]
        first_offset=batch.base_offset,  # type: ignore[attr-defined]
        last_offset=batch.base_offset + count - 1,  # type: ignore[attr-defined]
        leader_epoch=batch.leader_epoch,  # type: ignore[attr-defined]
    )
    epoch = batch.producer_epoch  # type: ignore[attr-defined]
    entry = table.entries.get(producer_id)
    if entry is None or epoch > entry.producer_epoch:
        kept: tuple[BatchMetadata, ...] = ()
    else:
        kept = entry.batches[-(BATCHES_KEPT_PER_PRODUCER - 1):]
    new_entry = ProducerEntry(producer_epoch=max(epoch, entry.producer_epoch if entry else epoch),
                              batches=kept + (meta,))
    entries = {**table.entries, producer_id: new_entry}
    if len(entries) > PRODUCERS_KEPT_MAX:
        # Bound the table (Kafka expires producer ids by age instead): forget the producer whose last
        # write is oldest. A producer that later resumes from it gets UNKNOWN_PRODUCER_ID.
        oldest = min(entries, key=lambda pid: entries[pid].batches[-1].last_offset)
        del entries[oldest]
    return ProducerTable(entries)


def truncate(table: ProducerTable, end_offset_exclusive: int) -> ProducerTable:
    """The table after the log was cut at ``end_offset_exclusive``.

    Batches at or past the cut are forgotten; a producer with no batch left is
    dropped (its next batch gets UNKNOWN_PRODUCER_ID unless it starts at 0, and
    the client resets, as in Kafka). The broker may instead ``rebuild`` from
    the surviving log, which gives the same answer when the log held at least
    the last batches of each producer.
    """
    out: dict[int, ProducerEntry] = {}
    for pid, entry in table.entries.items():
        kept = tuple(b for b in entry.batches if b.last_offset < end_offset_exclusive)
        if kept:
            out[pid] = ProducerEntry(entry.producer_epoch, kept)
    return ProducerTable(out)


def rebuild(batches: Iterable[object]) -> ProducerTable:
    """The table implied by a log's batch headers, oldest first (restart, or a follower)."""
    table = ProducerTable()
    for batch in batches:
        table = record_append(table, batch)
    return table


def to_plain(table: ProducerTable) -> dict:
    """A JSON-ready form of the table (for the producer-state snapshot the broker writes)."""
    return {str(pid): {"epoch": entry.producer_epoch,
                       "batches": [[b.first_sequence, b.last_sequence, b.first_offset, b.last_offset, b.leader_epoch]
                                   for b in entry.batches]}
            for pid, entry in sorted(table.entries.items())}


def from_plain(value: Mapping) -> ProducerTable:
    """Inverse of ``to_plain``; raises ValueError/KeyError/TypeError on a malformed value."""
    entries = {}
    for pid, entry in value.items():
        batches = tuple(BatchMetadata(*(int(x) for x in b)) for b in entry["batches"])
        if len(batches) > BATCHES_KEPT_PER_PRODUCER:
            raise ValueError(f"producer {pid} has {len(batches)} batches, more than {BATCHES_KEPT_PER_PRODUCER}")
        entries[int(pid)] = ProducerEntry(int(entry["epoch"]), batches)
    return ProducerTable(entries)
