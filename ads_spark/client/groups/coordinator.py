"""The group consumer's link to its group coordinator: finding it, calling it, committing and fetching offsets.

A group's coordinator is the broker leading the group's partition of ``__consumer_offsets``; any broker
names it (``find_coordinator``). The link caches the answer and forgets it when a call fails on the
network or answers NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE (the partition's leader moved or is
being elected); the next call asks again after a back-off. Every retry loop here ends at a deadline the
caller gives (``default.api.timeout.ms`` for commits and offset fetches), and the failure then raised is
the typed error of the last attempt.

Thread-safe: the heartbeat thread and the consumer's thread share one link.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from ads_spark.errors import (
    AdsError, CoordinatorNotAvailableError, ErrorCode, RequestTimedOutError, error_for,
)
from ads_spark.protocol import wire
from ads_spark.protocol.connection import Connections, backoff_sleep

log = logging.getLogger("ads.client.groups")

# Answers that mean "ask again who the coordinator is" (Kafka's coordinator-unknown errors).
COORDINATOR_MOVED = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE})
BACKOFF_MAX_MS = 1000


@dataclass(frozen=True)
class Coordinator:
    node_id: int
    host: str
    port: int


@dataclass(frozen=True)
class CommittedOffset:
    offset: int  # -1: nothing committed
    leader_epoch: int  # -1: unknown
    metadata: str


class CoordinatorLink:
    def __init__(self, connections: Connections, group_id: str):
        self._connections = connections
        self.group_id = group_id
        self._lock = threading.Lock()
        self._coordinator: Coordinator | None = None

    # ---- the coordinator ------------------------------------------------------------------------------

    def known(self) -> Coordinator | None:
        with self._lock:
            return self._coordinator

    def forget(self, reason: str) -> None:
        with self._lock:
            if self._coordinator is not None:
                log.info("group %s: coordinator %s forgotten (%s)", self.group_id, self._coordinator.node_id, reason)
            self._coordinator = None

    def find(self, deadline_s: float) -> Coordinator:
        """The coordinator, asking a broker when none is known; retried with back-off until ``deadline_s``."""
        last: AdsError | None = None
        for attempt in itertools.count():
            found = self.known()
            if found is not None:
                return found
            if attempt and time.monotonic() >= deadline_s:
                break
            try:
                answer = self._connections.call_any(wire.ACTION_FIND_COORDINATOR,
                                                    {"key": self.group_id, "key_type": "group"})
                code = int(answer.get("error_code", 0))
                if code:
                    raise error_for(code, answer.get("message", ""))
                with self._lock:
                    self._coordinator = Coordinator(int(answer["node_id"]), answer["host"], int(answer["port"]))
                continue
            except AdsError as exc:
                if not exc.retriable:
                    raise
                last = exc
            self._pause(attempt, deadline_s)
        raise last or CoordinatorNotAvailableError(f"group {self.group_id}: no coordinator found in time")

    def _pause(self, attempt: int, deadline_s: float) -> None:
        remaining_ms = int((deadline_s - time.monotonic()) * 1000)
        backoff_sleep(attempt, self._connections.retry_backoff_ms, max_ms=max(0, min(BACKOFF_MAX_MS, remaining_ms)))

    def call(self, action: str, body: dict[str, Any], *, deadline_s: float,
             timeout_ms: int | None = None) -> dict[str, Any]:
        """One call to the coordinator (found first if unknown). A network failure or an answer naming
        a moved coordinator forgets it; the answer (whatever its ``error_code``) is returned, a failed call
        raises its typed error."""
        coordinator = self.find(deadline_s)
        try:
            answer = self._connections.call_action(coordinator.host, coordinator.port, action, body, timeout_ms)
        except AdsError as exc:
            if exc.retriable:
                self.forget(f"{action}: {exc}")
            raise
        if int(answer.get("error_code", 0)) in COORDINATOR_MOVED:
            self.forget(f"{action}: {ErrorCode(int(answer['error_code'])).name}")
        return answer

    def call_retrying(self, action: str, body: dict[str, Any], *, deadline_s: float, what: str,
                      retry_codes: frozenset = frozenset()) -> dict[str, Any]:
        """``call`` until it succeeds, gets a non-retriable answer, or the deadline passes. Retried: failed calls
        and answers with a retriable code (coordinator moved or loading) or one of ``retry_codes``."""
        last: AdsError | None = None
        for attempt in itertools.count():
            if attempt and time.monotonic() >= deadline_s:
                break
            try:
                answer = self.call(action, body, deadline_s=deadline_s)
            except AdsError as exc:
                if not exc.retriable:
                    raise
                last = exc
            else:
                code = int(answer.get("error_code", 0))
                if not code:
                    return answer
                last = error_for(code, answer.get("message", ""))
                if not (last.retriable or code in retry_codes):
                    raise last
            self._pause(attempt, deadline_s)
        raise last or RequestTimedOutError(f"group {self.group_id}: {what} did not succeed in time")

    # ---- offsets --------------------------------------------------------------------------------------

    def commit(self, offsets: dict[tuple[str, int], tuple[int, int, str]], *, generation_id: int, member_id: str,
               group_instance_id: str | None, deadline_s: float) -> dict[tuple[str, int], AdsError | None]:
        """Commit ``{(topic, partition): (offset, leader_epoch, metadata)}``; each partition's error (None: ok).
        Retried while the coordinator moves; a group error (ILLEGAL_GENERATION, ...) is every partition's."""
        body: dict[str, Any] = {"group_id": self.group_id, "generation_id": generation_id, "member_id": member_id,
                                "partitions": [{"topic": t, "partition": p, "offset": offset, "leader_epoch": epoch,
                                                "metadata": metadata}
                                               for (t, p), (offset, epoch, metadata) in sorted(offsets.items())]}
        if group_instance_id:
            body["group_instance_id"] = group_instance_id
        answer = self.call_retrying(wire.ACTION_OFFSET_COMMIT, body, deadline_s=deadline_s, what="offset commit")
        results: dict[tuple[str, int], AdsError | None] = {key: None for key in offsets}
        for item in answer.get("partitions", []):
            code = int(item.get("error_code", 0))
            results[(item["topic"], int(item["partition"]))] = error_for(code, item.get("message", "")) if code else None
        return results

    def fetch(self, partitions: list[tuple[str, int]], *, deadline_s: float) -> dict[tuple[str, int], CommittedOffset]:
        """The committed offset of each partition (offset -1: none). UNSTABLE_OFFSET_COMMIT (a commit being
        written) and a moving coordinator are retried until the deadline; another partition error is raised."""
        body = {"group_id": self.group_id, "partitions": [{"topic": t, "partition": p} for t, p in partitions]}
        for attempt in itertools.count():
            answer = self.call_retrying(wire.ACTION_OFFSET_FETCH, body, deadline_s=deadline_s, what="offset fetch")
            found, unstable = {}, None
            for item in answer.get("partitions", []):
                code = int(item.get("error_code", 0))
                if code:
                    error = error_for(code, item.get("message", ""))
                    if not error.retriable:
                        raise error
                    unstable = error
                    continue
                found[(item["topic"], int(item["partition"]))] = CommittedOffset(
                    int(item.get("offset", -1)), int(item.get("leader_epoch", -1)), item.get("metadata") or "")
            if unstable is None:
                return {key: found.get(key, CommittedOffset(-1, -1, "")) for key in partitions}
            if time.monotonic() >= deadline_s:
                raise unstable
            self._pause(attempt, deadline_s)
        raise AssertionError("unreachable")
