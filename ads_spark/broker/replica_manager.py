"""The replicas a broker hosts: produce, fetch, offsets and role changes.

It owns the map of hosted partitions and the two kinds of waiting the broker
does: fetches that long-poll for data (woken by appends and HW moves, bounded by
``max_wait_ms``) and acks=all produces that wait for the HW to pass their batch
(bounded by the request's ``timeout_ms``). Decisions about the HW and ISR are
the partition's; this module routes requests to partitions and completes the
waiters when a partition changes.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

import pyarrow as pa

from ads_spark.errors import (
    AdsError,
    ErrorCode,
    NotEnoughReplicasAfterAppendError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from ads_spark.broker.partition import ROLE_LEADER, Partition
from ads_spark.records import BatchHeader, now_ms

# A waiting acks=all produce is checked at least this often for its deadline.
DELAYED_PRODUCE_CHECK_INTERVAL_MS = 20
# Bound on waiting produces per partition; past it a produce fails fast rather than queue forever.
DELAYED_PRODUCES_PER_PARTITION_MAX = 10_000


@dataclass
class DelayedProduce:
    required_offset_exclusive: int  # completes once HW >= this
    deadline_ms: int
    header: BatchHeader
    complete: Callable[[BatchHeader | None, AdsError | None], None]


class ReplicaManager:
    def __init__(self, broker_id: int):
        self.broker_id = broker_id
        self._partitions: dict[tuple[str, int], Partition] = {}
        self._partitions_lock = threading.Lock()
        # Broker-wide change signal: multi-partition fetches wait on it.
        self.activity = threading.Condition()
        self._activity_version = 0
        self._delayed: dict[tuple[str, int], list[DelayedProduce]] = {}
        self._delayed_lock = threading.Lock()
        self._stopping = threading.Event()
        self._reaper = threading.Thread(target=self._reap_delayed_forever, name="delayed-produce", daemon=True)
        self._reaper.start()

    # ---- registry ------------------------------------------------------------

    def get(self, topic: str, partition: int) -> Partition:
        found = self._partitions.get((topic, partition))
        if found is None:
            raise UnknownTopicOrPartitionError(f"broker {self.broker_id} hosts no replica of {topic}-{partition}")
        return found

    def maybe_get(self, topic: str, partition: int) -> Partition | None:
        return self._partitions.get((topic, partition))

    def add(self, partition: Partition) -> Partition:
        with self._partitions_lock:
            existing = self._partitions.get(partition.key)
            if existing is not None:
                return existing
            self._partitions[partition.key] = partition
            return partition

    def remove(self, topic: str, partition: int) -> Partition | None:
        with self._partitions_lock:
            removed = self._partitions.pop((topic, partition), None)
        self._fail_delayed((topic, partition), NotLeaderOrFollowerError(f"{topic}-{partition} was removed"))
        self.notify_changed((topic, partition))
        return removed

    def partitions(self) -> list[Partition]:
        return list(self._partitions.values())

    # ---- change notification ------------------------------------------------------

    def notify_changed(self, key: tuple[str, int] | None = None) -> None:
        """A partition's log end, HW or role moved: complete produces, wake fetches."""
        if key is not None:
            self._complete_delayed(key)
        with self.activity:
            self._activity_version += 1
            self.activity.notify_all()

    def wait_for_activity(self, version: int, timeout_ms: int) -> int:
        """Block until the activity version passes ``version`` or the timeout; returns the new version."""
        deadline = time.monotonic() + timeout_ms / 1000
        with self.activity:
            while self._activity_version == version:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self.activity.wait(remaining)
            return self._activity_version

    @property
    def activity_version(self) -> int:
        return self._activity_version

    # ---- produce ---------------------------------------------------------------

    def produce(self, topic: str, partition_id: int, batch: pa.RecordBatch, *, acks: int, timeout_ms: int,
                max_message_bytes: int, producer: tuple[int, int, int],
                complete: Callable[[BatchHeader | None, AdsError | None], None]) -> None:
        """Append and call ``complete`` once the acks level is met (maybe from another thread)."""
        partition = self.get(topic, partition_id)
        header = partition.append_as_leader(
            batch, acks=acks, max_message_bytes=max_message_bytes, now_ms=now_ms(), producer=producer
        )
        self.notify_changed(partition.key)
        if acks != -1:
            complete(header, None)
            return
        waiter = DelayedProduce(header.next_offset, now_ms() + timeout_ms, header, complete)
        with self._delayed_lock:
            queue = self._delayed.setdefault(partition.key, [])
            if len(queue) >= DELAYED_PRODUCES_PER_PARTITION_MAX:
                complete(None, RequestTimedOutError(f"too many produces waiting on {topic}-{partition_id}"))
                return
            queue.append(waiter)
        self._complete_delayed(partition.key)

    def _complete_delayed(self, key: tuple[str, int]) -> None:
        partition = self._partitions.get(key)
        with self._delayed_lock:
            queue = self._delayed.get(key)
            if not queue:
                return
            if partition is None or partition.role != ROLE_LEADER:
                done, self._delayed[key] = queue, []
                error: AdsError | None = NotLeaderOrFollowerError(f"leadership of {key[0]}-{key[1]} moved")
            else:
                hw = partition.high_watermark
                done = [w for w in queue if w.required_offset_exclusive <= hw]
                if not done:
                    return
                self._delayed[key] = [w for w in queue if w.required_offset_exclusive > hw]
                error = None
        for waiter in done:
            waiter.complete(waiter.header if error is None else None, error)

    def _fail_delayed(self, key: tuple[str, int], error: AdsError) -> None:
        with self._delayed_lock:
            queue = self._delayed.pop(key, [])
        for waiter in queue:
            waiter.complete(None, error)

    def _reap_delayed_forever(self) -> None:
        while not self._stopping.wait(DELAYED_PRODUCE_CHECK_INTERVAL_MS / 1000):
            self._expire_delayed(now_ms())

    def _expire_delayed(self, now: int) -> None:
        expired: list[tuple[DelayedProduce, AdsError]] = []
        with self._delayed_lock:
            for key, queue in self._delayed.items():
                keep = []
                partition = self._partitions.get(key)
                for waiter in queue:
                    if waiter.deadline_ms > now:
                        keep.append(waiter)
                        continue
                    expired.append((waiter, self._timeout_error(partition, key)))
                self._delayed[key] = keep
        for waiter, error in expired:
            waiter.complete(None, error)

    @staticmethod
    def _timeout_error(partition: Partition | None, key) -> AdsError:
        if partition is not None and len(partition.assignment.isr) < partition.min_insync_replicas:
            return NotEnoughReplicasAfterAppendError(
                f"{key[0]}-{key[1]}: appended, but the ISR {list(partition.assignment.isr)} fell below "
                f"min.insync.replicas={partition.min_insync_replicas} before it was replicated"
            )
        return RequestTimedOutError(f"{key[0]}-{key[1]}: not replicated to the ISR within the request timeout")

    def shutdown(self) -> None:
        self._stopping.set()
        for key in list(self._delayed):
            self._fail_delayed(key, NotLeaderOrFollowerError("broker shutting down"))


def error_code_of(exc: Exception) -> ErrorCode:
    return exc.code if isinstance(exc, AdsError) else ErrorCode.UNKNOWN_SERVER_ERROR
