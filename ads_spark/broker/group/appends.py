"""Appending a coordinator's records to its ``__consumer_offsets`` partition, and hearing back.

A coordinator writes records (key bytes, value bytes or None for a tombstone: ``group_records``) with
acks=all through the replica manager, as a client's produce would be, and reacts only once the append
completed: a commit is answered, and the in-memory state changes, then and not before. The append is
issued while the caller holds its partition's lock, so the order of records in the log is the order in
which the coordinator decided them; the completion can come from any thread, including synchronously
from inside the append (an error, or a single-replica ISR), so completions are handed to one thread of
their own (``Completions``) that takes the lock afresh. That thread's queue is bounded by the appends in
flight, which the coordinator bounds (its waiting-request cap and one persist per group at a time).

Errors of the append become the group errors Kafka's coordinator answers (``group_error``): an append
that could not reach min ISR or timed out is COORDINATOR_NOT_AVAILABLE (retriable, same coordinator), a
replica that is no longer leader NOT_COORDINATOR (find it again), a batch too large
INVALID_COMMIT_OFFSET_SIZE.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Callable, Sequence

import pyarrow as pa

from ads_spark.errors import AdsError, ErrorCode
from ads_spark.protocol.records import PRODUCE_SCHEMA, now_ms

log = logging.getLogger("ads.broker.group")

Record = tuple[bytes, "bytes | None"]
# (base offset, error code) once the append is acknowledged or failed.
AppendDone = Callable[[int, ErrorCode], None]
ACKS_ALL = -1
NO_PRODUCER = (-1, -1, -1)
COMPLETIONS_QUEUED_MAX = 100_000  # far above what the coordinator lets be in flight: a bug guard, not a limit

_TO_GROUP_ERROR = {
    ErrorCode.NONE: ErrorCode.NONE,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.RECORD_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
}


def group_error(code: ErrorCode) -> ErrorCode:
    """The error a group request is answered with when its append failed with ``code`` (Kafka's mapping)."""
    return _TO_GROUP_ERROR.get(code, ErrorCode.UNKNOWN_SERVER_ERROR)


def records_batch(records: Sequence[Record], timestamp_ms: int) -> pa.RecordBatch:
    """The records as one PRODUCE_SCHEMA batch (no headers; every record stamped ``timestamp_ms``)."""
    count = len(records)
    return pa.RecordBatch.from_arrays([
        pa.array([timestamp_ms] * count, pa.timestamp("ms")),
        pa.array([key for key, _ in records], pa.binary()),
        pa.array([value for _, value in records], pa.binary()),
        pa.nulls(count, PRODUCE_SCHEMA.field("headers").type),
    ], schema=PRODUCE_SCHEMA)


class Completions:
    """One thread running append completions in the order they arrive (see the module docstring)."""

    def __init__(self, name: str = "group-completions"):
        self._queue: queue.Queue = queue.Queue(COMPLETIONS_QUEUED_MAX)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._started = False

    def start(self) -> None:
        if not self._started:
            self._started = True
            self._thread.start()

    def stop(self) -> None:
        if self._started:
            self._queue.put(None)
            self._thread.join(5.0)

    def submit(self, func: Callable[[], None]) -> None:
        self._queue.put(func, timeout=5.0)

    def _run(self) -> None:
        while True:
            func = self._queue.get()
            if func is None:
                return
            try:
                func()
            except Exception:  # one completion failing must not stop the others
                log.exception("group append completion failed")


def append(replica_manager, partition: int, records: Sequence[Record], *, topic: str, timeout_ms: int,
           max_message_bytes: int, completions: Completions, done: AppendDone) -> None:
    """Append ``records`` to ``topic``-``partition`` with acks=all; ``done(base_offset, group error)`` runs on
    the completions thread once the append is acknowledged or failed (also when it is refused at once)."""
    def complete(base_offset: int, error: AdsError | None) -> None:
        code = ErrorCode.NONE if error is None else error.code
        completions.submit(lambda: done(base_offset, group_error(code)))

    try:
        replica_manager.produce(topic, partition, records_batch(records, now_ms()), acks=ACKS_ALL,
                                timeout_ms=timeout_ms, max_message_bytes=max_message_bytes, producer=NO_PRODUCER,
                                complete=complete)
    except AdsError as exc:
        complete(-1, exc)
    except Exception:
        log.exception("append to %s-%s failed", topic, partition)
        completions.submit(lambda: done(-1, ErrorCode.UNKNOWN_SERVER_ERROR))
