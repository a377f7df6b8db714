"""The replicas a broker hosts: routing requests to partitions and waking fetches.

It owns the map of hosted partitions and the broker-wide activity signal that
multi-partition fetches long-poll on (woken when any partition's log end, HW or
role moves, bounded by the fetch's ``max_wait_ms``). What a produce waits for
(acks=all purgatory, its timeout) is decided by the replication core inside each
``Partition``; the periodic tick of ``tick_all`` is what expires those waits.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

import pyarrow as pa

from ads_spark.errors import AdsError, ErrorCode, UnknownTopicOrPartitionError
from ads_spark.broker.partition import Partition
from ads_spark.records import now_ms

log = logging.getLogger("ads.broker.replicas")


class ReplicaManager:
    def __init__(self, broker_id: int):
        self.broker_id = broker_id
        self._partitions: dict[tuple[str, int], Partition] = {}
        self._partitions_lock = threading.Lock()
        # Broker-wide change signal: multi-partition fetches wait on it.
        self.activity = threading.Condition()
        self._activity_version = 0

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
            partition.on_changed = self.notify_changed
            self._partitions[partition.key] = partition
            return partition

    def remove(self, topic: str, partition: int) -> Partition | None:
        with self._partitions_lock:
            removed = self._partitions.pop((topic, partition), None)
        if removed is not None:
            removed.stop(now_ms())  # fails its waiting produces with NOT_LEADER_OR_FOLLOWER
        self.notify_changed((topic, partition))
        return removed

    def partitions(self) -> list[Partition]:
        return list(self._partitions.values())

    # ---- change notification ------------------------------------------------------

    def notify_changed(self, key: tuple[str, int] | None = None) -> None:
        """A partition's log end, HW or role moved: wake long-polling fetches."""
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
                complete: Callable[[int, AdsError | None], None]) -> None:
        """Append and call ``complete(base_offset, error)`` once the acks level is met (maybe from another thread)."""
        partition = self.get(topic, partition_id)
        partition.produce(batch, acks=acks, timeout_ms=timeout_ms, max_message_bytes=max_message_bytes,
                          now_ms=now_ms(), producer=producer, complete=complete)

    def tick_all(self, current_ms: int) -> None:
        """Time passes for every partition: ISR lag checks, proposal retries, produce timeouts."""
        for partition in self.partitions():
            try:
                partition.tick(current_ms)
            except Exception:
                log.exception("tick of %s-%s failed", partition.topic, partition.partition)
                raise

    def shutdown(self) -> None:
        for partition in self.partitions():
            partition.stop(now_ms())


def error_code_of(exc: Exception) -> ErrorCode:
    return exc.code if isinstance(exc, AdsError) else ErrorCode.UNKNOWN_SERVER_ERROR
