"""A stream's progress as a consumer group's committed offsets (``ads.commitOffsetsToGroup``).

Owns committing the offsets a streaming query has finished to a consumer group, so that
``ads consumer-groups --describe`` and the coordinator's ``ads_consumer_group_lag`` show the query's lag
(something Spark's Kafka connector does not do). The commit is standalone (generation -1, empty member id,
``Admin.alter_consumer_group_offsets``), each offset with the leader epoch it was read in; the group has no
members, so ``--describe`` shows no consumer for its partitions.

When: Spark calls the source's ``commit(end)`` for micro-batch N only when it plans batch N+1, so a query
that caught up and waits for data would never commit its last batch. The reader therefore also hands over
the ``start`` of each ``latestOffset`` call: Spark asks from the end of the last batch it completed (a batch
left unfinished by a crash is run again before any new ``latestOffset``), so both are offsets the query is
done with. Committed offsets may lag the checkpoint by one trigger and, after a restart, may briefly be
ahead of what the query re-reads: the checkpoint is where the query resumes; the group is for watching.

Failures (no Group Read ACL, the group has members, no coordinator) are logged, at most once a minute, and
never fail the query. Commits run on one daemon thread of the planner process with one pending slot (the
newest offsets replace older ones), so a slow coordinator delays nothing Spark waits for; ``close`` gives
the last offsets a bounded time to be committed when the query stops.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Mapping

from ads_spark.spark.source.offsets import SourceOffset

log = logging.getLogger("ads.spark.source")

FAILURE_LOG_INTERVAL_S = 60.0  # a failing commit is logged at most this often (it is retried every trigger)
CLOSE_FLUSH_WAIT_S = 10.0  # how long stop() waits for the last offsets to be committed


def group_offsets(offsets_json: Mapping[str, Any]) -> dict:
    """A source offset (checkpoint JSON) as the group commit's {TopicPartition: OffsetAndMetadata}."""
    from ads_spark.client import TopicPartition
    from ads_spark.client.admin_groups import OffsetAndMetadata

    parsed = SourceOffset.from_json_dict(offsets_json)
    return {TopicPartition(topic, partition): OffsetAndMetadata(offset, "", parsed.epochs.get((topic, partition), -1))
            for (topic, partition), offset in sorted(parsed.offsets.items()) if offset >= 0}


class GroupOffsetsCommitter:
    """Commits the newest offsets handed to ``submit`` to ``group_id`` on a background thread."""

    def __init__(self, group_id: str, admin_for_config: Callable[[dict], Any]):
        self.group_id = group_id
        self._admin_for_config = admin_for_config
        self._cond = threading.Condition()
        self._pending: tuple[dict, dict] | None = None  # (client config, offsets JSON): the newest only
        self._committed: dict | None = None  # the offsets JSON last committed successfully
        self._busy = False
        self._closed = False
        self._last_failure_logged = -FAILURE_LOG_INTERVAL_S
        self._failing = False
        self._thread: threading.Thread | None = None
        self.commits = 0  # successful commits (tests, logs)

    def submit(self, config: dict, offsets_json: Mapping[str, Any] | None) -> None:
        """Queue ``offsets_json`` (replacing what waits); nothing when they are what was committed last."""
        if not offsets_json:
            return
        offsets_json = dict(offsets_json)
        with self._cond:
            if self._closed or offsets_json == self._committed:
                return
            self._pending = (dict(config), offsets_json)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"ads-group-commit-{self.group_id}",
                                                daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def close(self, timeout_s: float = CLOSE_FLUSH_WAIT_S) -> None:
        """Wait (bounded) until what was submitted is committed or failed, then stop the thread."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while (self._pending is not None or self._busy) and self._thread is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    log.warning("ads source: offsets not committed to group '%s' within %.0f s of the query "
                                "stopping", self.group_id, timeout_s)
                    break
                self._cond.wait(left)
            self._closed = True
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._pending is None and not self._closed:
                    self._cond.wait()
                if self._pending is None:
                    return
                (config, offsets_json), self._pending = self._pending, None
                self._busy = True
            ok = self._commit(config, offsets_json)
            with self._cond:
                self._busy = False
                if ok:
                    self._committed = offsets_json
                self._cond.notify_all()

    def _commit(self, config: dict, offsets_json: dict) -> bool:
        try:
            offsets = group_offsets(offsets_json)
            if offsets:
                self._admin_for_config(config).alter_consumer_group_offsets(self.group_id, offsets)
        except Exception as exc:  # never the query's problem: its checkpoint holds its progress
            now = time.monotonic()
            if now - self._last_failure_logged >= FAILURE_LOG_INTERVAL_S:
                self._last_failure_logged = now
                log.warning("ads source: could not commit the stream's offsets to consumer group '%s' (the query "
                            "goes on; its checkpoint holds its progress): %s", self.group_id, exc)
            self._failing = True
            return False
        if self._failing:
            log.info("ads source: committing offsets to consumer group '%s' works again", self.group_id)
            self._failing = False
        self.commits += 1
        return True
