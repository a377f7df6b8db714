"""Reading ahead on an executor: the next fetch runs while Spark consumes the current batch.

Owns one background thread per read task. Without it a task alternates between
waiting for a fetch (the broker reads and Flight streams the next step) and
handing a batch to Spark (Spark's serializer writes it to the JVM), and both
halves sit idle while the other runs. Both spend their time in C++ with the GIL
released, so a reader thread one step ahead overlaps them.

The read-ahead is bounded (``depth_batches_max`` batches waiting, each at most
one fetch), errors raised by the producer are raised to the consumer in order,
and closing the consumer early (a ``limit`` in the query, a failed task) stops
the thread and waits for it, so the process's shared clients are never used by a
stale thread while the next task runs.
"""

from __future__ import annotations

import queue
import threading
from typing import Callable, Iterator, TypeVar

T = TypeVar("T")

READ_AHEAD_BATCHES_MAX = 2
# How long the producer waits on a full queue before it re-checks that the consumer is still there.
PUT_POLL_S = 0.1

_END = object()


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error


def read_ahead(produce: Callable[[], Iterator[T]], depth_batches_max: int = READ_AHEAD_BATCHES_MAX) -> Iterator[T]:
    """The items of ``produce()`` in order, produced on a thread up to ``depth_batches_max`` ahead."""
    ready: queue.Queue = queue.Queue(maxsize=max(1, depth_batches_max))
    stopping = threading.Event()

    def offer(item) -> bool:
        while not stopping.is_set():
            try:
                ready.put(item, timeout=PUT_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        try:
            for item in produce():
                if not offer(item):
                    return
            offer(_END)
        except BaseException as exc:  # handed to the consumer, which raises it in the task
            offer(_Failure(exc))

    worker = threading.Thread(target=run, name="ads-source-read-ahead", daemon=True)
    worker.start()
    try:
        while True:
            item = ready.get()
            if item is _END:
                return
            if isinstance(item, _Failure):
                raise item.error
            yield item
    finally:
        stopping.set()
        worker.join()
