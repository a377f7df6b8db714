"""A consumer's membership in its group: join, sync, heartbeats, leave, and the partitions it owns.

Kafka's classic consumer protocol as the Java consumer runs it. ``before_poll`` (the consumer's
thread, at the start of every ``poll``) joins or rejoins when needed, applies the assignment (each new
partition starts at its committed offset with its committed leader epoch, or at ``auto.offset.reset``
when none) and auto-commits; a background thread sends heartbeats every ``heartbeat.interval.ms``.

* Join: the subscription (``consumer_protocol.Subscription`` v1: topics, the assignor's user data and,
  cooperative, the owned partitions) for each configured assignor; MEMBER_ID_REQUIRED is answered
  by joining again with the id given (KIP-394). The leader (the member the coordinator names) runs the
  assignor the group chose (``assignors.assign``) over every member's subscription and sends the
  result with its sync; every member gets its own assignment from its sync.
* Eager protocol (any configured assignor is eager, the default ``range,cooperative-sticky``): before
  joining, the member commits (auto commit) and revokes everything (``on_revoke``). Cooperative
  (``cooperative-sticky`` alone): it keeps its partitions through the rebalance, revokes only what
  its new assignment lacks, and then rejoins so that those go to their new owners (KIP-429).
* Heartbeats: REBALANCE_IN_PROGRESS makes the next poll rejoin; ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID
  mean the group went on without this member: its partitions are *lost* (``on_lost``, no commit) and
  it joins afresh. NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / a failed call: the coordinator is
  found again after a back-off. A member whose thread did not poll within ``max.poll.interval.ms``
  leaves the group (Kafka's rule: the partitions go to members that make progress) and rejoins on
  its next poll.
* Static membership (``group.instance.id``): a restart under the same id within the session timeout
  gets its partitions back without a rebalance; a static member does not send leave_group on close
  (KIP-345), so the session timeout, not a rebalance, hands its partitions on.

Bounds: one heartbeat thread (stopped on close within a request timeout), each wait bounded by the
heartbeat interval or the back-off, every retry loop by a deadline, async commits by
``ASYNC_COMMITS_MAX`` waiting in one worker thread.
"""

from __future__ import annotations

import base64
import itertools
import logging
import re
import threading
import time
from typing import Any, Callable

from ads_spark.client import assignors
from ads_spark.client.chunks import OFFSET_INVALID, TopicPartition
from ads_spark.client.consumer_protocol import (
    Assignment, Subscription, decode_assignment, decode_subscription, encode_assignment, encode_subscription,
)
from ads_spark.client.groups.commits import GENERATION_LOST, GroupCommits
from ads_spark.client.groups.coordinator import COORDINATOR_MOVED, CoordinatorLink
from ads_spark.client.groups.settings import GroupSettings
from ads_spark.errors import AdsError, ErrorCode, InvalidRequestError, error_for
from ads_spark.protocol import wire

log = logging.getLogger("ads.client.groups")

PROTOCOL_TYPE = "consumer"
CLIENT_ID = "ads-python-consumer"
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
JOIN_EXTRA_MS = 5000  # Kafka: a join may take the rebalance timeout, plus this for the answer to arrive
REJOIN_AFTER_MEMBER_ID_MAX = 3  # MEMBER_ID_REQUIRED answered by a second join; more is a coordinator bug


class _Rejoin(Exception):
    """Join again now (after the back-off the loop applies): the rebalance did not complete."""


class GroupMember(GroupCommits):
    def __init__(self, consumer, settings: GroupSettings):
        self._consumer = consumer
        self.settings = settings
        self._link = CoordinatorLink(consumer._connections, settings.group_id)
        self._lock = threading.Condition()
        self.member_id, self.generation_id, self.protocol_name = "", -1, None
        self._stable = False
        self._rejoin_reason: str | None = None
        self._lost = False  # the generation was lost: partitions go to on_lost, nothing is committed
        self._fatal: AdsError | None = None
        self._closed = False
        self._last_poll_s = time.monotonic()
        self._subscribed: tuple[str, ...] | None = None
        self._pattern: re.Pattern | None = None
        self._matched: tuple[str, ...] = ()
        self._owned: list[tuple[str, int]] = []
        self._callbacks: dict[str, Callable | None] = {}
        self._partition_counts: dict[str, int] = {}  # what the leader assigned over (a change: rebalance)
        self._next_metadata_check_s = 0.0
        self._next_auto_commit_s = time.monotonic() + settings.auto_commit_interval_ms / 1000
        self._heartbeat_thread: threading.Thread | None = None
        self._init_commits()

    # ---- subscription -----------------------------------------------------------------------------------

    def subscribe(self, topics, on_assign=None, on_revoke=None, on_lost=None) -> None:
        names = [topics] if isinstance(topics, str) else list(topics)
        if not names or not all(isinstance(t, str) and t for t in names):
            raise InvalidRequestError(f"subscribe needs topic names or one '^regex' pattern, got {topics!r}")
        pattern = None
        if any(t.startswith("^") for t in names):
            if len(names) != 1:
                raise InvalidRequestError("subscribe takes either topic names or one '^regex' pattern, not both")
            try:
                pattern = re.compile(names[0])
            except re.error as exc:
                raise InvalidRequestError(f"invalid subscription pattern {names[0]!r}: {exc}") from None
        matched = self._match_pattern(pattern) if pattern else tuple(sorted(set(names)))  # no lock held: a call
        with self._lock:
            self._callbacks = {"on_assign": on_assign, "on_revoke": on_revoke, "on_lost": on_lost}
            self._pattern = pattern
            self._subscribed = None if pattern else matched
            self._matched = matched
            self._rejoin_reason = "subscription changed"
        self._start_heartbeats()

    def subscribed(self) -> bool:
        return self._subscribed is not None or self._pattern is not None

    def _match_pattern(self, pattern: re.Pattern) -> tuple[str, ...]:
        """The topics ``pattern`` matches from their start, internal topics left out (Kafka's
        exclude.internal.topics=true)."""
        topics = self._consumer._connections.refresh().topics
        return tuple(sorted(t for t in topics if t not in INTERNAL_TOPICS and pattern.match(t)))

    def unsubscribe(self) -> None:
        """Give up the partitions (auto commit, on_revoke), leave the group, forget the subscription."""
        self._revoke_all(commit=True)
        self._leave("unsubscribe")
        with self._lock:
            self._subscribed, self._pattern, self._matched = None, None, ()
            self._stable, self._rejoin_reason = False, None

    # ---- the consumer's poll ------------------------------------------------------------------------------

    def before_poll(self, timeout_s: float) -> None:
        """Rejoin when needed (bounded by ``timeout_s``, at least one attempt), then auto commit when due."""
        now = time.monotonic()
        with self._lock:
            self._last_poll_s = now
            if self._fatal is not None:
                fatal, self._fatal = self._fatal, None
                raise fatal
        if self.subscribed():
            self._check_metadata(now)
            self._ensure_active(now + max(0.0, timeout_s))
        self._maybe_auto_commit(time.monotonic())

    def _check_metadata(self, now: float) -> None:
        """Every metadata.max.age.ms: a pattern's topics, and (the leader) the assigned topics' partition
        counts; a change needs a rebalance (Kafka's consumer watches its metadata for the same)."""
        if now < self._next_metadata_check_s:
            return
        self._next_metadata_check_s = now + self._consumer._connections.metadata_max_age_ms / 1000
        if self._pattern is not None:
            matched = self._match_pattern(self._pattern)
            if matched != self._matched:
                with self._lock:
                    self._matched, self._rejoin_reason = matched, "pattern matches other topics"
        if self._partition_counts and self._partition_counts != self._counts(self._partition_counts):
            with self._lock:
                self._rejoin_reason = "partition counts changed"

    def _ensure_active(self, deadline_s: float) -> None:
        for attempt in itertools.count():  # bounded by the deadline below
            with self._lock:
                if self._stable and self._rejoin_reason is None:
                    return
            if attempt and time.monotonic() >= deadline_s:
                return
            try:
                self._rebalance(deadline_s)
            except _Rejoin:
                self._link._pause(attempt, deadline_s)
            except AdsError as exc:
                if not exc.retriable:
                    raise
                log.info("group %s: rebalance failed (%s); trying again", self.settings.group_id, exc)
                self._link._pause(attempt, deadline_s)

    def _rebalance(self, deadline_s: float) -> None:
        """One join and sync. ``deadline_s`` bounds finding the coordinator (the poll's timeout); the join and
        sync calls themselves may take the rebalance timeout, as Kafka's do."""
        with self._lock:
            reason, self._stable = self._rejoin_reason or "joining", False
            self._rejoin_reason = None
        log.info("group %s: (re)joining (%s)", self.settings.group_id, reason)
        self._prepare_join()
        answer = self._join(deadline_s)
        leading = answer["leader_id"] == self.member_id
        if not leading:
            self._partition_counts = {}  # only the leader watches partition counts
        assigned = self._sync(answer, self._lead(answer) if leading else None, deadline_s)
        self._apply(assigned)

    # ---- join / sync ------------------------------------------------------------------------------------

    def _prepare_join(self) -> None:
        """Kafka's onJoinPrepare: lost partitions to on_lost; eager: commit and revoke everything;
        cooperative: commit, and revoke only the partitions of topics no longer subscribed."""
        with self._lock:
            lost, self._lost = self._lost, False
        if lost:
            self._drop(self._owned, "on_lost")
            return
        if self.settings.protocol == assignors.EAGER:
            self._revoke_all(commit=True)
            return
        self._maybe_commit_sync("before rejoining")
        gone = [tp for tp in self._owned if tp[0] not in self._matched]
        if gone:
            self._drop(gone, "on_revoke")

    def _protocols(self) -> list[dict[str, str]]:
        owned = tuple(self._owned) if self.settings.protocol == assignors.COOPERATIVE else ()
        protocols = []
        for strategy in self.settings.strategies:
            subscription = Subscription(self._matched, assignors.encode_user_data(strategy, self.generation_id), owned)
            protocols.append({"name": strategy, "metadata_b64": wire_b64(encode_subscription(subscription))})
        return protocols

    def _join(self, deadline_s: float) -> dict[str, Any]:
        for _ in range(REJOIN_AFTER_MEMBER_ID_MAX):
            body = {"group_id": self.settings.group_id, "member_id": self.member_id, "client_id": CLIENT_ID,
                    "session_timeout_ms": self.settings.session_timeout_ms,
                    "rebalance_timeout_ms": self.settings.max_poll_interval_ms,
                    "protocol_type": PROTOCOL_TYPE, "protocols": self._protocols()}
            self._with_instance(body)
            timeout_ms = max(self._consumer._connections.request_timeout_ms,
                             self.settings.max_poll_interval_ms + JOIN_EXTRA_MS)
            answer = self._link.call(wire.ACTION_JOIN_GROUP, body, deadline_s=deadline_s,
                                     timeout_ms=timeout_ms)
            code = int(answer.get("error_code", 0))
            if code == ErrorCode.MEMBER_ID_REQUIRED:
                self.member_id = answer.get("member_id") or ""
                continue
            self._member_error(code, answer, "join")
            with self._lock:
                self.member_id, self.generation_id = answer["member_id"], int(answer["generation_id"])
                self.protocol_name = answer.get("protocol_name")
            return answer
        raise _Rejoin()

    def _member_error(self, code: int, answer: dict, what: str) -> None:
        """Raise for an error answer: _Rejoin for those a new join resolves, the typed error otherwise."""
        if not code:
            return
        if code in GENERATION_LOST:
            self._reset_generation(lost=True, forget_member=code == ErrorCode.UNKNOWN_MEMBER_ID)
            raise _Rejoin()
        if code in COORDINATOR_MOVED or code in (ErrorCode.REBALANCE_IN_PROGRESS,
                                                 ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
            raise _Rejoin()
        raise error_for(code, f"group {self.settings.group_id}: {what}: {answer.get('message', '')}")

    def _lead(self, answer: dict[str, Any]) -> list[dict[str, str]]:
        """The leader's assignment of every member's subscription with the protocol the group chose."""
        strategy = answer.get("protocol_name")
        if strategy not in assignors.SUPPORTED_PROTOCOLS:
            raise error_for(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"the group chose assignor {strategy!r}")
        members = {}
        for entry in answer.get("members", []):
            subscription = decode_subscription(b64_bytes(entry["metadata_b64"]))
            members[entry["member_id"]] = assignors.MemberSubscription(
                entry["member_id"], subscription.topics, subscription.owned_partitions,
                assignors.generation_from(subscription.user_data, subscription.generation_id),
                entry.get("group_instance_id"))
        topics = {t for m in members.values() for t in m.topics}
        self._partition_counts = self._counts(topics)
        result = assignors.assign(strategy, members, self._partition_counts)
        return [{"member_id": member_id, "assignment_b64": wire_b64(encode_assignment(Assignment(tuple(tps))))}
                for member_id, tps in result.items()]

    def _counts(self, topics) -> dict[str, int]:
        counts = {}
        view = self._consumer._connections.refresh(sorted(topics))
        for topic in topics:
            if topic in view.topics:  # a topic that does not exist (yet) gets no partitions (Kafka)
                counts[topic] = len(view.topics[topic])
        return counts

    def _sync(self, joined: dict[str, Any], assignments, deadline_s: float) -> list[tuple[str, int]]:
        body = {"group_id": self.settings.group_id, "generation_id": self.generation_id,
                "member_id": self.member_id, "protocol_type": PROTOCOL_TYPE,
                "protocol_name": joined.get("protocol_name") or "", "assignments": assignments or []}
        self._with_instance(body)
        timeout_ms = max(self._consumer._connections.request_timeout_ms,
                         self.settings.max_poll_interval_ms + JOIN_EXTRA_MS)
        answer = self._link.call(wire.ACTION_SYNC_GROUP, body, deadline_s=deadline_s,
                                 timeout_ms=timeout_ms)
        self._member_error(int(answer.get("error_code", 0)), answer, "sync")
        raw = b64_bytes(answer.get("assignment_b64") or "")
        return list(decode_assignment(raw).partitions) if raw else []

    def _apply(self, assigned: list[tuple[str, int]]) -> None:
        """The new assignment: revoke what went (cooperative: then rejoin), start what came at its committed
        offset; then on_assign (eager: the whole assignment; cooperative: what was added)."""
        new = set(assigned)
        revoked = [tp for tp in self._owned if tp not in new]
        added = sorted(tp for tp in new if tp not in set(self._owned))
        if revoked:
            self._maybe_commit_sync("revoking", revoked)
            self._drop(revoked, "on_revoke")
        self._start_partitions(added)
        with self._lock:
            self._owned = sorted(new)
            self._stable = True
            if revoked and self.settings.protocol == assignors.COOPERATIVE and self._rejoin_reason is None:
                self._rejoin_reason = "partitions revoked for other members"
        log.info("group %s: generation %d, member %s: %d partitions (%d added, %d revoked)",
                 self.settings.group_id, self.generation_id, self.member_id, len(new), len(added), len(revoked))
        cooperative = self.settings.protocol == assignors.COOPERATIVE
        self._callback("on_assign", added if cooperative else sorted(new))

    def _start_partitions(self, added: list[tuple[str, int]]) -> None:
        if not added:
            return
        consumer = self._consumer
        deadline_s = time.monotonic() + consumer.api_timeout_ms / 1000
        committed = self._link.fetch(added, deadline_s=deadline_s)
        for key in added:
            found = committed[key]
            consumer._positions[key] = found.offset if found.offset >= 0 else OFFSET_INVALID
            if found.offset >= 0 and found.leader_epoch >= 0:
                consumer._position_epochs[key] = found.leader_epoch  # KIP-320: checked before the first fetch
            else:
                consumer._position_epochs.pop(key, None)

    def _drop(self, partitions, callback: str) -> None:
        partitions = list(partitions)
        if callback:
            self._callback(callback, partitions)
        gone = set(partitions)
        for key in gone:
            self._consumer._positions.pop(key, None)
            self._consumer._position_epochs.pop(key, None)
        with self._lock:
            self._owned = [tp for tp in self._owned if tp not in gone]

    def _revoke_all(self, *, commit: bool) -> None:
        if not self._owned:
            return
        if commit:
            self._maybe_commit_sync("revoking")
        self._drop(self._owned, "on_revoke")

    def _callback(self, name: str, partitions) -> None:
        function = self._callbacks.get(name)
        if name == "on_lost" and function is None:
            function = self._callbacks.get("on_revoke")  # confluent-kafka: on_revoke when no on_lost is given
        if function is not None:
            function(self._consumer, [TopicPartition(t, p) for t, p in partitions])

    def _with_instance(self, body: dict) -> None:
        if self.settings.group_instance_id:
            body["group_instance_id"] = self.settings.group_instance_id

    def _reset_generation(self, *, lost: bool, forget_member: bool, of: tuple[int, str] | None = None) -> None:
        """Out of the generation (``of``: only if still in that (generation, member id): an answer to a
        heartbeat sent before a rebalance this member has since completed must not undo it)."""
        with self._lock:
            if of is not None and of != (self.generation_id, self.member_id):
                return
            self.generation_id, self._stable = -1, False
            if forget_member:
                self.member_id = ""
            self._lost = self._lost or (lost and bool(self._owned))
            self._rejoin_reason = self._rejoin_reason or "generation lost"

    # ---- heartbeats -------------------------------------------------------------------------------------

    def _start_heartbeats(self) -> None:
        with self._lock:
            if self._heartbeat_thread is None and not self._closed:
                self._heartbeat_thread = threading.Thread(target=self._heartbeat_loop, daemon=True,
                                                          name=f"ads-heartbeat-{self.settings.group_id}")
                self._heartbeat_thread.start()

    def _heartbeat_loop(self) -> None:
        wait_s = self.settings.heartbeat_interval_ms / 1000
        while True:
            with self._lock:
                if not self._closed:  # a close before this thread first waited must not cost an interval
                    self._lock.wait(wait_s)
                if self._closed:
                    return
                wait_s = self.settings.heartbeat_interval_ms / 1000
                if not self._stable:
                    continue
                poll_late = time.monotonic() - self._last_poll_s > self.settings.max_poll_interval_ms / 1000
                body = {"group_id": self.settings.group_id, "generation_id": self.generation_id,
                        "member_id": self.member_id}
            if poll_late:
                self._leave_for_poll_timeout()
                continue
            self._with_instance(body)
            if not self._heartbeat(body):
                wait_s = self._consumer._connections.retry_backoff_ms / 1000

    def _heartbeat(self, body: dict) -> bool:
        """One heartbeat; False when it should be sent again soon (the coordinator moved or did not answer)."""
        timeout_ms = min(self._consumer._connections.request_timeout_ms, self.settings.session_timeout_ms)
        try:
            answer = self._link.call(wire.ACTION_HEARTBEAT, body, deadline_s=time.monotonic() + timeout_ms / 1000,
                                     timeout_ms=timeout_ms)
        except AdsError as exc:
            if exc.retriable:
                return False
            with self._lock:
                self._fatal = exc
            return True
        code = int(answer.get("error_code", 0))
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            with self._lock:
                self._rejoin_reason = self._rejoin_reason or "the group is rebalancing"
        elif code in GENERATION_LOST:
            self._reset_generation(lost=True, forget_member=code == ErrorCode.UNKNOWN_MEMBER_ID,
                                   of=(body["generation_id"], body["member_id"]))
        elif code in COORDINATOR_MOVED or code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            return False
        elif code:
            with self._lock:
                self._fatal = error_for(code, f"group {self.settings.group_id}: heartbeat: {answer.get('message')}")
        return True

    def _leave_for_poll_timeout(self) -> None:
        log.warning("group %s: no poll for max.poll.interval.ms=%d: leaving the group (its partitions go to the "
                    "other members; the next poll joins again)", self.settings.group_id,
                    self.settings.max_poll_interval_ms)
        self._leave("consumer poll timeout has expired")
        self._reset_generation(lost=True, forget_member=True)

    def _leave(self, reason: str) -> None:
        """leave_group for a dynamic member (a static one leaves by its session timeout, KIP-345), best effort;
        either way the member is out of its generation afterwards (Kafka's resetGenerationOnLeaveGroup)."""
        with self._lock:
            member_id, self._stable = self.member_id, False
        if member_id and not self.settings.group_instance_id:
            body = {"group_id": self.settings.group_id, "members": [{"member_id": member_id, "reason": reason}]}
            try:
                deadline_s = time.monotonic() + self._consumer._connections.request_timeout_ms / 1000
                self._link.call(wire.ACTION_LEAVE_GROUP, body, deadline_s=deadline_s)
            except AdsError as exc:
                log.info("group %s: leave_group failed (%s); the session timeout removes the member",
                         self.settings.group_id, exc)
        with self._lock:
            self.member_id, self.generation_id = "", -1

    # ---- close ------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Auto commit, on_revoke, leave (dynamic members), stop the threads (bounded)."""
        try:
            if self.subscribed() and self._stable:
                self._revoke_all(commit=True)
            elif not self.subscribed():
                self._maybe_commit_sync("close")
            self._leave("the consumer is being closed")
        finally:
            with self._lock:
                self._closed = True
                self._lock.notify_all()
                thread = self._heartbeat_thread
            if thread is not None:
                thread.join(self._consumer._connections.request_timeout_ms / 1000 + 1)
            self._async.shutdown(wait=True, cancel_futures=False)


def wire_b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def b64_bytes(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)
