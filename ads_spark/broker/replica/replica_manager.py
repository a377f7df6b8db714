"""The replicas a broker hosts: routing requests to partitions and waking fetches.

It owns the map of hosted partitions and the wake-ups that long-polling fetches
wait on: a fetch watches only the partitions it asked for, and a follower's fetch
is not woken by a high-watermark move alone (it waits for data, as in Kafka; its
HW catches up with the next answer). Every wake-up costs a core step per
partition of the woken fetch, so waking only fetches that can find something new
matters on the replicated produce path. What a produce waits for
(acks=all purgatory, its timeout) is decided by the replication core inside each
``Partition``; the periodic tick of ``tick_all`` is what expires those waits.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Iterable

import pyarrow as pa

from ads_spark.errors import AdsError, ErrorCode, NotLeaderOrFollowerError, UnknownTopicOrPartitionError
from ads_spark.broker.replica.partition import Partition
from ads_spark.protocol.records import now_ms

log = logging.getLogger("ads.broker.replicas")


class ReplicaManager:
    def __init__(self, broker_id: int):
        self.broker_id = broker_id
        self._partitions: dict[tuple[str, int], Partition] = {}
        self._partitions_lock = threading.Lock()
        # Long-polling fetches: partition -> the events of fetches waiting on it, with whether a
        # high-watermark move alone should wake them (consumers: yes; followers: no).
        self._watchers: dict[tuple[str, int], dict[threading.Event, bool]] = {}
        self._watchers_lock = threading.Lock()
        # Why this broker must not acknowledge writes now (its ZooKeeper session may be gone: another broker
        # may lead its partitions); None while it may. Set and cleared by membership.SessionGuard.
        self.cut_off_reason: str | None = None

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

    def notify_changed(self, key: tuple[str, int], high_watermark_only: bool = False) -> None:
        """A partition's log end, HW, epoch or role moved: wake the fetches watching it."""
        with self._watchers_lock:
            watchers = self._watchers.get(key)
            if not watchers:
                return
            woken = [event for event, wants_hw in watchers.items() if wants_hw or not high_watermark_only]
        for event in woken:
            event.set()

    def watch(self, keys: Iterable[tuple[str, int]], *, wake_on_high_watermark: bool) -> threading.Event:
        """An event set whenever one of ``keys`` changes, until ``unwatch``; the caller clears it before
        each read, so a change between its read and its wait is never missed."""
        event = threading.Event()
        with self._watchers_lock:
            for key in keys:
                self._watchers.setdefault(key, {})[event] = wake_on_high_watermark
        return event

    def unwatch(self, keys: Iterable[tuple[str, int]], event: threading.Event) -> None:
        with self._watchers_lock:
            for key in keys:
                watchers = self._watchers.get(key)
                if watchers is not None:
                    watchers.pop(event, None)
                    if not watchers:
                        del self._watchers[key]

    # ---- produce ---------------------------------------------------------------

    def produce(self, topic: str, partition_id: int, batch: pa.RecordBatch, *, acks: int, timeout_ms: int,
                max_message_bytes: int, producer: tuple[int, int, int],
                complete: Callable[[int, AdsError | None], None], timestamp_type: int = 0,
                append_time_ms: int | None = None) -> None:
        """Append and call ``complete(base_offset, error)`` once the acks level is met (maybe from another thread).

        ``timestamp_type`` 1 (the topic's ``message.timestamp.type=LogAppendTime``): the log stamps the batch
        with ``append_time_ms`` (now if None), the broker's append time, as Kafka does."""
        partition = self.get(topic, partition_id)
        cut_off = self.cut_off_reason
        if cut_off is not None:
            raise NotLeaderOrFollowerError(f"broker {self.broker_id} does not accept writes to {topic}-{partition_id} "
                                           f"now: {cut_off}")
        partition.produce(batch, acks=acks, timeout_ms=timeout_ms, max_message_bytes=max_message_bytes,
                          now_ms=now_ms() if append_time_ms is None else append_time_ms, producer=producer,
                          complete=complete, timestamp_type=timestamp_type)

    def fence_leadership(self, reason: str, session_expired: bool) -> None:
        """Refuse every produce for ``reason``; with ``session_expired`` each partition also waits for the
        controller's next leader_and_isr after ``lift_fence`` (another broker may have been elected)."""
        self.cut_off_reason = reason
        if session_expired:
            for partition in self.partitions():
                partition.await_controller(reason)

    def lift_fence(self) -> None:
        self.cut_off_reason = None

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
