"""Per-record delivery futures that cost next to nothing until someone waits on one.

``Producer.produce`` answers every record with a future. A
``concurrent.futures.Future`` builds a Condition (an RLock and its bookkeeping)
per record and completing it takes that lock and notifies per record; with 1 KiB
records py-spy put creating and completing them at ~45% of the producer's CPU
(issue #7). Here the records of one batch share one ``BatchOutcome``: completing
a batch is one lock, one Event and the callbacks someone registered; a record's
future is two slots (its batch and its index in it).

``DeliveryFuture`` offers the part of the Future interface callers use:
``result``, ``exception``, ``done``, ``add_done_callback`` (and ``cancel``,
which always refuses: a record handed to the producer is delivered or fails).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import TimeoutError as FutureTimeoutError
from typing import Callable, NamedTuple

log = logging.getLogger("ads.client.producer")


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int


class BatchOutcome:
    """How one batch of ``produce`` records ended. Set once; readers wait on ``_done``.

    Invariant: ``_callbacks`` is only appended to while ``_finished`` is False (under
    ``_lock``); ``complete`` swaps it out under the lock and runs it outside, so
    every callback runs exactly once, after the outcome is visible.
    """

    __slots__ = ("topic", "partition", "timestamps_ms", "base_offset", "error", "log_append_time_ms", "_finished",
                 "_done", "_lock", "_callbacks")

    def __init__(self, topic: str, partition: int, timestamps_ms: list[int]):
        self.topic = topic
        self.partition = partition
        self.timestamps_ms = timestamps_ms  # one per record, in batch order
        self.base_offset: int | None = None
        self.error: Exception | None = None
        self.log_append_time_ms = -1  # >= 0: the broker stamped every record with it (LogAppendTime)
        self._finished = False
        self._done: threading.Event | None = None  # made by the first waiter only
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []

    @property
    def finished(self) -> bool:
        return self._finished

    def wait(self, timeout: float | None) -> bool:
        if self._finished:
            return True
        with self._lock:
            if self._finished:
                return True
            if self._done is None:
                self._done = threading.Event()
            done = self._done
        return done.wait(timeout)

    def add_callback(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the batch is finished (now, if it already is)."""
        with self._lock:
            if not self._finished:
                self._callbacks.append(callback)
                return
        _run_callback(callback)

    def complete(self, base_offset: int | None, error: Exception | None, log_append_time_ms: int = -1) -> None:
        with self._lock:
            if self._finished:
                return
            self.base_offset, self.error = base_offset, error
            self.log_append_time_ms = log_append_time_ms
            self._finished = True
            callbacks, self._callbacks = self._callbacks, []
            done = self._done
        if done is not None:
            done.set()
        for callback in callbacks:
            _run_callback(callback)


def _run_callback(callback: Callable[[], None]) -> None:
    try:
        callback()
    except Exception:
        log.exception("delivery callback failed")


class DeliveryFuture:
    """The future of one record of a ``produce`` batch; its value is a ``RecordMetadata``."""

    __slots__ = ("_outcome", "_index")

    def __init__(self, outcome: BatchOutcome, index: int):
        self._outcome = outcome
        self._index = index

    def done(self) -> bool:
        return self._outcome.finished

    def running(self) -> bool:
        return not self._outcome.finished

    def cancelled(self) -> bool:
        return False

    def cancel(self) -> bool:
        return False

    def exception(self, timeout: float | None = None) -> Exception | None:
        if not self._outcome.wait(timeout):
            raise FutureTimeoutError()
        return self._outcome.error

    def result(self, timeout: float | None = None) -> RecordMetadata:
        error = self.exception(timeout)
        if error is not None:
            raise error
        return self._metadata()

    def add_done_callback(self, callback: Callable[["DeliveryFuture"], None]) -> None:
        self._outcome.add_callback(lambda: callback(self))

    def on_delivery(self, callback: Callable[[Exception | None, RecordMetadata | None], None]) -> None:
        """Kafka's delivery report: ``callback(error, metadata)`` once the record is acknowledged or failed."""
        self._outcome.add_callback(lambda: callback(self._outcome.error,
                                                    None if self._outcome.error else self._metadata()))

    def _metadata(self) -> RecordMetadata:
        outcome = self._outcome
        # acks=0: the offset is unknown (base -1), -1 for every record as in Kafka.
        offset = outcome.base_offset + self._index if outcome.base_offset >= 0 else -1
        timestamp_ms = outcome.log_append_time_ms  # the broker's, when the topic stamps append time
        if timestamp_ms < 0:
            timestamp_ms = outcome.timestamps_ms[self._index]
        return RecordMetadata(outcome.topic, outcome.partition, offset, timestamp_ms)
