"""Carries a leader's ISR proposals to ZooKeeper and feeds the answers back to the core.

A ``ProposeIsr`` effect is a version-conditional write of the partition state
znode (with an ``isr_change_notification`` in the same multi-op, so the
controller refreshes its view and pushes metadata). It must not run under the
partition's lock nor on a request thread, so one thread per broker drains a
bounded queue of proposals. Dropping a proposal is safe: the core keeps it as
``pending_isr`` and re-sends it on a tick after ``isr_update_retry_ms``.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Callable

from ads_spark.protocol.records import now_ms
from ads_spark.replication.partition import ProposeIsr
from ads_spark.replication.state import LeaderAndIsr

log = logging.getLogger("ads.broker.isr")

ISR_PROPOSALS_QUEUED_MAX = 10_000
# (accepted state as written, current state when rejected); both None: ZooKeeper did not answer.
IsrWrite = Callable[[str, int, LeaderAndIsr], tuple[LeaderAndIsr | None, LeaderAndIsr | None]]


class IsrWriter:
    def __init__(self, write: IsrWrite):
        self._write = write
        self._queue: queue.Queue = queue.Queue(maxsize=ISR_PROPOSALS_QUEUED_MAX)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="isr-writer", daemon=True)
        self.failed_updates = 0  # rejected or unanswered writes (ads_failed_isr_updates_total)
        self.shrinks = 0
        self.expands = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stopping.set()
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            pass
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def submit(self, partition, proposal: ProposeIsr) -> None:
        """Called by a partition after its lock is released."""
        try:
            self._queue.put_nowait((partition, proposal))
        except queue.Full:
            log.warning("ISR proposal queue full; %s-%s will re-send on a later tick",
                        partition.topic, partition.partition)

    def _run(self) -> None:
        while not self._stopping.is_set():
            item = self._queue.get()
            if item is None:
                return
            partition, proposal = item
            try:
                self._write_one(partition, proposal)
            except Exception:
                log.exception("ISR update of %s-%s failed", partition.topic, partition.partition)

    def _write_one(self, partition, proposal: ProposeIsr) -> None:
        before = set(partition.state.isr)
        try:
            accepted, current = self._write(partition.topic, partition.partition, proposal.proposed)
        except Exception as exc:  # ZooKeeper unreachable: the tick re-sends
            log.warning("ISR update of %s-%s not written: %s", partition.topic, partition.partition, exc)
            accepted, current = None, None
        if accepted is None:
            self.failed_updates += 1
        else:
            after = set(accepted.isr)
            self.shrinks += bool(before - after)
            self.expands += bool(after - before)
            log.info("%s-%s: ISR %s -> %s (partition epoch %s)", partition.topic, partition.partition,
                     sorted(before), sorted(after), accepted.partition_epoch)
        partition.on_isr_answer(accepted, current, now_ms())
