"""One simulated broker's disk: in-memory partition logs and the checkpoints the real broker keeps.

The simulated broker runs the real ``Partition`` shell (broker/replica/partition.py), so
what it is given must behave as the real files do where replication depends on it:

* ``SimLog`` stands in for ``broker/log/partition_log.PartitionLog``: exactly the methods
  the shell calls, with the real log's rules (offsets assigned at the log end, a
  follower's append must continue the log, a truncation drops a batch straddling the
  point whole, reads return whole batches from the one holding the offset, at least
  one, bounded by bytes) and its durability: ``flush`` moves the recovery point to the
  log end and ``crash`` loses everything above it. Records are the checker's record ids
  (ints), not Arrow data, so the simulation stays fast;
* ``SimEpochFile`` stands in for ``LeaderEpochFile`` (leader-epoch-checkpoint): written
  whole and durably on each ``replace_all``, as the real one is (atomic rename + fsync);
* ``SimProducerSnapshots`` stands in for the producer-state snapshot file;
* ``SimDisk.high_watermarks`` is the broker's replication-offset-checkpoint.

A restart builds a new ``Partition`` from these, so it recovers with the real rules
(``core.initial_state`` reconciles the epoch checkpoint and HW checkpoint with a log
that lost its tail; ``recover_producers`` replays the log after the snapshot).
Retention is not simulated: nothing ever leaves the start of a log.
"""

from __future__ import annotations

from bisect import bisect_right
from pathlib import PurePosixPath
from typing import Callable, Iterator, Sequence

from ads_spark.errors import InvariantViolation, OffsetOutOfRangeError
from ads_spark.protocol.records import BatchHeader
from ads_spark.replication import dedupe

BATCH_BYTES = 100  # the size every stored batch counts for in a read's byte budget
RECORD_BYTES = 10  # what a produced record counts for against max.message.bytes


class SimBatch:
    """A producer's batch as ``Partition.produce`` reads it (``num_rows``, ``nbytes``): record ids, no Arrow."""

    __slots__ = ("rids",)

    def __init__(self, rids: tuple[int, ...]):
        self.rids = rids

    @property
    def num_rows(self) -> int:
        return len(self.rids)

    @property
    def nbytes(self) -> int:
        return len(self.rids) * RECORD_BYTES


class SimLog:
    """One replica's log in memory. Invariants: ``headers`` are contiguous from the first stored offset to
    ``log_end_offset``; ``rids[o]`` is the record at offset ``o`` (None below the log start);
    ``log_start_offset <= recovery_point <= log_end_offset`` and the recovery point is a batch boundary."""

    def __init__(self, name: str):
        self.directory = PurePosixPath("sim") / name  # a label: nothing here touches the file system
        self.headers: list[BatchHeader] = []
        self.bases: list[int] = []  # base offset of each header, for bisection
        self.rids: list = []
        self.log_start_offset = 0
        self.log_end_offset = 0  # the next offset to be written: len(rids), kept as a field (read on every step)
        self.recovery_point = 0
        # Called with (new log end, cause) when a truncation removes records: the checker's hook.
        self.on_removed: Callable[[int, str], None] | None = None

    # ---- appends

    def append_as_leader(self, batch: SimBatch, *, leader_epoch: int, now_ms: int, producer_id: int = -1,
                         producer_epoch: int = -1, base_sequence: int = -1, timestamp_type: int = 0) -> BatchHeader:
        header = BatchHeader(self.log_end_offset, batch.num_rows, leader_epoch, now_ms, timestamp_type, producer_id,
                             producer_epoch, base_sequence)
        self._append(batch.rids, header)
        return header

    def append_encoded(self, messages: Sequence[tuple[tuple[int, ...], BatchHeader]], *, now_ms: int) -> None:
        """A follower's fetched batches as the leader stored them: (record ids, header) pairs."""
        if messages and messages[0][1].base_offset != self.log_end_offset:
            raise InvariantViolation(f"{self.directory}: follower append at {messages[0][1].base_offset}, "
                                     f"log end offset is {self.log_end_offset}")
        for rids, header in messages:
            self._append(rids, header)

    def _append(self, rids: tuple[int, ...], header: BatchHeader) -> None:
        if header.base_offset != self.log_end_offset or len(rids) != header.record_count:
            raise InvariantViolation(f"{self.directory}: batch {header} does not continue the log at "
                                     f"{self.log_end_offset} with its {len(rids)} records")
        self.headers.append(header)
        self.bases.append(header.base_offset)
        self.rids.extend(rids)
        self.log_end_offset = len(self.rids)

    # ---- durability

    def flush(self) -> None:
        self.recovery_point = self.log_end_offset

    def crash(self) -> None:
        """The process died: what was not flushed is gone (the worst a page cache can do)."""
        self._cut(self.recovery_point)

    # ---- truncation and retention

    def truncate_to(self, end_offset_exclusive: int) -> None:
        """Drop every batch holding an offset >= the point; one straddling it goes whole (as the real log)."""
        if end_offset_exclusive >= self.log_end_offset:
            return
        if end_offset_exclusive < self.log_start_offset:
            self.truncate_fully_and_start_at(end_offset_exclusive)
            return
        self._cut(end_offset_exclusive)
        self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
        if self.on_removed is not None:
            self.on_removed(self.log_end_offset, "truncate")

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.headers, self.bases, self.rids = [], [], [None] * offset
        self.log_start_offset = self.log_end_offset = self.recovery_point = offset
        if self.on_removed is not None:
            self.on_removed(offset, "reset")

    def _cut(self, end: int) -> None:
        keep = bisect_right(self.bases, end) - 1  # the batch holding ``end``, or the one ending there
        if keep >= 0 and self.headers[keep].next_offset > end:
            keep -= 1  # straddles the point: dropped whole
        new_end = self.headers[keep].next_offset if keep >= 0 else self.log_start_offset
        del self.headers[keep + 1:], self.bases[keep + 1:], self.rids[new_end:]
        self.log_end_offset = new_end
        self.recovery_point = min(self.recovery_point, new_end)

    def apply_retention(self, now_ms: int, *, max_deletable_offset_exclusive: int) -> int:
        return 0  # retention is not simulated

    # ---- reads

    def read(self, start_offset_inclusive: int, *, max_bytes: int, end_offset_exclusive: int | None = None,
             as_messages: bool = False) -> list[tuple[tuple[int, ...], BatchHeader]]:
        """Whole batches from the one holding the offset, at least one, each counting BATCH_BYTES."""
        end = self.log_end_offset
        if start_offset_inclusive < self.log_start_offset or start_offset_inclusive > end:
            raise OffsetOutOfRangeError(f"offset {start_offset_inclusive} is outside "
                                        f"[{self.log_start_offset}, {end}] of {self.directory}")
        if end_offset_exclusive is not None:
            end = min(end, end_offset_exclusive)
        result: list = []
        i = max(bisect_right(self.bases, start_offset_inclusive) - 1, 0)
        while i < len(self.headers) and start_offset_inclusive < end:
            header = self.headers[i]
            if header.base_offset >= end or (result and (len(result) + 1) * BATCH_BYTES > max_bytes):
                break
            result.append((tuple(self.rids[header.base_offset:header.next_offset]), header))
            i += 1
        return result

    def locate(self, start_offset_inclusive: int, *, max_bytes: int,
               end_offset_exclusive: int) -> list[tuple[str, list[tuple[int, int, int, int]]]]:
        """Where ``read`` would find its batches, as the real log answers the local read path."""
        found = self.read(start_offset_inclusive, max_bytes=max_bytes, end_offset_exclusive=end_offset_exclusive)
        places = [(self.bases.index(h.base_offset) * BATCH_BYTES, BATCH_BYTES, h.base_offset, h.record_count)
                  for _, h in found]
        return [(str(self.directory), places)] if places else []

    def batches(self, start_offset_inclusive: int | None = None) -> Iterator[tuple[tuple[int, ...], BatchHeader]]:
        start = self.log_start_offset if start_offset_inclusive is None else start_offset_inclusive
        for header in self.headers[max(bisect_right(self.bases, start) - 1, 0):]:
            yield tuple(self.rids[header.base_offset:header.next_offset]), header


class SimEpochFile:
    """The leader-epoch checkpoint: durable as soon as written (the real one is replaced atomically)."""

    def __init__(self):
        self._entries: list[tuple[int, int]] = []

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(self._entries)

    def replace_all(self, pairs) -> None:
        self._entries = [(int(e), int(s)) for e, s in pairs]


class SimProducerSnapshots:
    """The producer-state snapshot: durable as soon as written."""

    def __init__(self):
        self._snapshot: tuple[int, dedupe.ProducerTable] | None = None

    def read(self) -> tuple[int, dedupe.ProducerTable] | None:
        return self._snapshot

    def write(self, offset: int, table: dedupe.ProducerTable) -> None:
        self._snapshot = (offset, table)

    def delete(self) -> None:
        self._snapshot = None


class SimDisk:
    """Everything of one broker that survives its crash, per partition; the rest is the process's."""

    def __init__(self, broker_id: int, partitions: int):
        self.logs = {p: SimLog(f"b{broker_id}/t-{p}") for p in range(partitions)}
        self.epoch_files = {p: SimEpochFile() for p in range(partitions)}
        self.producer_snapshots = {p: SimProducerSnapshots() for p in range(partitions)}
        self.high_watermarks: dict[int, int] = {}  # the replication-offset-checkpoint

    def crash(self) -> None:
        for partition_log in self.logs.values():
            partition_log.crash()
