"""The group consumer's commits: positions to commit, auto commit, synchronous and asynchronous commits,
and the committed offsets a group holds.

A mixin of ``membership.GroupMember`` (it uses the member's coordinator link, generation and lock), kept
apart so that the membership module stays about joining and leaving. Auto commit follows Kafka's rules: the
positions at the start of a poll (what the previous polls returned) every ``auto.commit.interval.ms``, before
a rebalance revokes partitions and on close; its failures are logged, not raised. A commit refused for an
old generation or an unknown member raises and makes the next poll rejoin (Kafka's CommitFailedException).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

from ads_spark.client.chunks import OFFSET_INVALID, TopicPartition
from ads_spark.errors import AdsError, ErrorCode

log = logging.getLogger("ads.client.groups")

ASYNC_COMMITS_MAX = 64
# Member errors after which this member is no longer in the generation (join, sync, heartbeat, commit).
GENERATION_LOST = frozenset({ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID})


class GroupCommits:
    def _init_commits(self) -> None:
        self._async = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ads-commit")
        self._async_slots = threading.BoundedSemaphore(ASYNC_COMMITS_MAX)


    def _positions_to_commit(self, partitions=None) -> dict[tuple[str, int], tuple[int, int, str]]:
        consumer = self._consumer
        keys = consumer._positions if partitions is None else partitions
        return {key: (consumer._positions[key], consumer._position_epochs.get(key, -1), "")
                for key in keys if consumer._positions.get(key, -1) >= 0}

    def _maybe_auto_commit(self, now: float) -> None:
        if not self.settings.auto_commit or now < self._next_auto_commit_s:
            return
        self._next_auto_commit_s = now + self.settings.auto_commit_interval_ms / 1000
        self._maybe_commit_sync("auto commit")

    def _maybe_commit_sync(self, why: str, partitions=None) -> None:
        """Auto commit of the positions (of ``partitions``, default all): failures are logged, not raised
        (Kafka's auto commit); a generation it lost shows up at the next heartbeat."""
        if not self.settings.auto_commit or (self.generation_id < 0 and self.subscribed()):
            return
        offsets = self._positions_to_commit(partitions)
        if not offsets:
            return
        try:
            self.commit_offsets(offsets)
        except AdsError as exc:
            log.warning("group %s: auto commit (%s) failed: %s", self.settings.group_id, why, exc)

    def commit_offsets(self, offsets: dict[tuple[str, int], tuple[int, int, str]]) -> list[TopicPartition]:
        with self._lock:
            generation_id, member_id = self.generation_id, self.member_id
        deadline_s = time.monotonic() + self._consumer.api_timeout_ms / 1000
        try:
            results = self._link.commit(offsets, generation_id=generation_id, member_id=member_id,
                                        group_instance_id=self.settings.group_instance_id or None,
                                        deadline_s=deadline_s)
            errors = [error for error in results.values() if error is not None]
        except AdsError as exc:  # the whole commit refused (a group error answered for the request)
            errors = [exc]
        for error in errors:
            if error.code in GENERATION_LOST:
                self._reset_generation(lost=True, forget_member=error.code == ErrorCode.UNKNOWN_MEMBER_ID)
            elif error.code == ErrorCode.REBALANCE_IN_PROGRESS:
                with self._lock:
                    self._rejoin_reason = self._rejoin_reason or "the group is rebalancing"
            raise error
        return [TopicPartition(t, p, offset, metadata, epoch if epoch >= 0 else None)
                for (t, p), (offset, epoch, metadata) in sorted(offsets.items())]

    def commit_async(self, offsets) -> Future:
        """The commit on the commit thread; at most ASYNC_COMMITS_MAX wait (the caller blocks for a slot)."""
        self._async_slots.acquire()
        try:
            future = self._async.submit(self.commit_offsets, offsets)
        except BaseException:
            self._async_slots.release()
            raise
        future.add_done_callback(lambda _: self._async_slots.release())
        return future

    def committed(self, partitions, timeout_s: float | None) -> list[TopicPartition]:
        keys = [(tp.topic, tp.partition) for tp in partitions]
        wait_s = self._consumer.api_timeout_ms / 1000 if timeout_s is None else timeout_s
        found = self._link.fetch(keys, deadline_s=time.monotonic() + wait_s)
        return [TopicPartition(t, p, found[(t, p)].offset if found[(t, p)].offset >= 0 else OFFSET_INVALID,
                               found[(t, p)].metadata, found[(t, p)].leader_epoch if found[(t, p)].leader_epoch >= 0
                               else None) for t, p in keys]
