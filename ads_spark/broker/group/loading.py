"""What a coordinator holds for one ``__consumer_offsets`` partition it leads, and how it is loaded.

``OffsetsPartition``: the groups and committed offsets of one partition, behind the one lock every
change to them takes. A broker becomes a partition's coordinator when it becomes its leader: the
partition is registered at once, not loaded (requests for its groups are answered
COORDINATOR_LOAD_IN_PROGRESS, retriable), then its log is read from the log start to the log end and
replayed by ``group_records.replay`` (latest record per key wins, tombstones delete), and only then
served. Reading up to the log end, not the high watermark: as leader, this replica's log is the one
the partition keeps, and nothing else appends to it while it loads (the coordinator appends only to
loaded partitions). Losing leadership unloads it (``current`` becomes False, waiting joins and syncs
are answered NOT_COORDINATOR); a completion arriving for an unloaded partition changes nothing.

``Waiters``: the join and sync requests blocked until the group core answers them, bounded
(``WAITING_REQUESTS_MAX``): each holds a request thread of the Flight server.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from typing import Any, Iterator

from ads_spark.errors import CoordinatorNotAvailableError

LOAD_READ_BYTES = 4 << 20
# Join, sync and commit requests waiting for an answer at once on this broker; one more is refused
# COORDINATOR_NOT_AVAILABLE (retriable): each holds one of the Flight server's request threads.
WAITING_REQUESTS_MAX = 512


@dataclass(eq=False)
class OffsetsPartition:
    """One led ``__consumer_offsets`` partition: ``groups`` (group id -> core ``Group``), ``offsets`` (group id
    -> core ``Offsets``), ``applied_at`` (group id, topic, partition) -> log offset of the commit the held
    offset came from (a commit completing after a later one for the same key does not roll it back),
    ``pending_commits`` (the same keys -> appends in flight: require_stable answers UNSTABLE_OFFSET_COMMIT)."""

    number: int
    leader_epoch: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    loaded: bool = False
    current: bool = True
    groups: dict[str, Any] = field(default_factory=dict)
    offsets: dict[str, Any] = field(default_factory=dict)
    applied_at: dict[tuple[str, str, int], int] = field(default_factory=dict)
    pending_commits: dict[tuple[str, str, int], int] = field(default_factory=dict)


def read_records(partition, read_bytes: int = LOAD_READ_BYTES) -> Iterator[tuple[bytes, bytes | None]]:
    """Every record (key, value) of a replica's log, log start to log end, in offset order; offset gaps left
    by compaction are skipped (each batch says where the next begins)."""
    offset = partition.log.log_start_offset
    end = partition.log.log_end_offset
    while offset < end:
        batches = partition.read(offset, end, read_bytes)
        if not batches:
            return
        for batch, header in batches:
            offsets = batch.column("offset").to_pylist()
            keys = batch.column("key").to_pylist()
            values = batch.column("value").to_pylist()
            for record_offset, key, value in zip(offsets, keys, values):
                if record_offset >= offset and key is not None:
                    yield key, value
            offset = max(offset, header.next_offset)


@dataclass(eq=False)
class Waiter:
    event: threading.Event = field(default_factory=threading.Event)
    reply: Any = None


class Waiters:
    """Requests blocked on the core's answer, by the handle given to the core."""

    def __init__(self, limit: int = WAITING_REQUESTS_MAX):
        self._limit = limit
        self._lock = threading.Lock()
        self._waiting: dict[int, Waiter] = {}
        self._handles = itertools.count(1)

    def register(self) -> tuple[int, Waiter]:
        with self._lock:
            if len(self._waiting) >= self._limit:
                raise CoordinatorNotAvailableError(f"{self._limit} group requests are already waiting on this "
                                                   "broker; retry")
            handle = next(self._handles)
            waiter = self._waiting[handle] = Waiter()
            return handle, waiter

    def deliver(self, handle: Any, reply: Any) -> None:
        with self._lock:
            waiter = self._waiting.pop(handle, None)
        if waiter is not None:  # gone: its request stopped waiting (bound passed); the reply is dropped
            waiter.reply = reply
            waiter.event.set()

    def wait(self, handle: int, waiter: Waiter, timeout_s: float) -> Any:
        """The reply, or None when ``timeout_s`` passed first (the handle is forgotten)."""
        if not waiter.event.wait(max(0.0, timeout_s)):
            with self._lock:
                self._waiting.pop(handle, None)
            if not waiter.event.is_set():
                return None
        return waiter.reply

    def count(self) -> int:
        with self._lock:
            return len(self._waiting)
