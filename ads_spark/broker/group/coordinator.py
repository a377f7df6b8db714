"""The group coordinator of one broker: the I/O shell around the pure group core (``replication/group_*``).

Owns, per ``__consumer_offsets`` partition this broker leads, an ``OffsetsPartition`` (``loading.py``):
the groups and their committed offsets, loaded from the partition's log when leadership arrives and
dropped when it goes (``sync_leadership``, every tick: the leader and its epoch as the replica manager
has them). Every decision is the core's: a request is turned into the core's input under the
partition's lock, and the shell carries out the effects -- replies to blocked joins and syncs
(``Waiters``), group metadata to persist, records to append.

What is acknowledged when: an offset commit is appended to the partition with acks=all and answered
only once that append completed; only then do the held offsets change (``_apply_commit``), so every
commit a client saw succeed is in the log on min ISR replicas (``min.insync.replicas`` = min(2, RF)),
and a new coordinator's load finds it. Group metadata (members, generation, assignment) is appended
when the core asks (``PersistGroup``: a completed generation, a group become empty) and the syncs
waiting on it are answered after it completed (``persist_done``). Offset expiry and group deletion
write tombstones the same way, and drop the state once they are acknowledged.

One thread (``group-coordinator``) ticks every ``TICK_MS``: leadership changes (load / unload), the
core's deadlines of each group (session expiry, rebalance timeout, initial delay), and every
``offsets.retention.check.interval.ms`` the retention of committed offsets (KIP-211). Loading runs on
that thread too: a partition being loaded delays the others' deadlines by its load, never a request.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any, Callable

from ads_spark.broker.group import appends
from ads_spark.broker.group.loading import OffsetsPartition, Waiters, read_records
from ads_spark.broker.group.offsets_topic import OFFSETS_TOPIC, OffsetsTopic
from ads_spark.errors import (
    CoordinatorLoadInProgressError, CoordinatorNotAvailableError, ErrorCode, InvalidConfigError,
    NotCoordinatorError,
)
from ads_spark.protocol.records import now_ms
from ads_spark.replication import group_membership as gm
from ads_spark.replication import group_values as gv
from ads_spark.replication import group_offsets as go
from ads_spark.replication import group_records as gr

log = logging.getLogger("ads.broker.group")

TICK_MS = 100
# A blocked join or sync answers no later than its rebalance timeout (the core's deadline) plus this: a
# bound should the core's answer never come.
WAIT_MARGIN_MS = 5_000
# ... and never longer than this, whatever timeout a request names (each waiting request holds a thread).
WAIT_MAX_MS = 600_000
LOAD_RETRY_INTERVAL_S = 5.0


def group_config(config) -> gv.GroupConfig:
    low, high = config["group.min.session.timeout.ms"], config["group.max.session.timeout.ms"]
    if low > high:
        raise InvalidConfigError(f"'group.min.session.timeout.ms' ({low}) is above 'group.max.session.timeout.ms' "
                                 f"({high}): no session timeout could join")
    return gv.GroupConfig(min_session_timeout_ms=low, max_session_timeout_ms=high,
                          initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
                          max_size=config["group.max.size"])


def retention_ms(config) -> int:
    """offsets.retention.ms when set (ADS's finer key), else offsets.retention.minutes."""
    exact = config["offsets.retention.ms"]
    return exact if exact >= 1 else config["offsets.retention.minutes"] * 60_000


def subscribed_topics(metadata: bytes) -> frozenset[str] | None:
    """The topics of a Kafka ConsumerProtocolSubscription (int16 version, then an array of int16-length
    strings, every version); None when it does not parse (the core then keeps every offset)."""
    try:
        if len(metadata) < 6:
            return None
        count = int.from_bytes(metadata[2:6], "big", signed=True)
        position, topics = 6, []
        for _ in range(max(count, 0)):
            length = int.from_bytes(metadata[position:position + 2], "big", signed=True)
            position += 2
            if length < 0 or position + length > len(metadata):
                return None
            topics.append(metadata[position:position + length].decode("utf-8"))
            position += length
        return frozenset(topics)
    except (UnicodeDecodeError, ValueError):
        return None


class GroupCoordinator:
    def __init__(self, broker):
        self.broker = broker
        self.config = broker.config
        self.group_config = group_config(broker.config)
        self.offsets_topic = OffsetsTopic(broker)
        self.waiters = Waiters()
        self.completions = appends.Completions()
        self._partitions: dict[int, OffsetsPartition] = {}
        self._load_failed_at: dict[int, float] = {}
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="group-coordinator", daemon=True)

    def start(self) -> None:
        self.completions.start()
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(5.0)
        for number in list(self._partitions):
            self._unload(number)
        self.completions.stop()

    # ---- which partition, and whether it is served ---------------------------------------------------------

    def partition_of(self, group_id: str) -> int:
        count = self.offsets_topic.partition_count()
        if count is None:
            self.offsets_topic.ensure_created()
            raise CoordinatorNotAvailableError(f"{OFFSETS_TOPIC} has no partitions yet")
        return gr.partition_for(group_id, count)

    def owned(self, group_id: str) -> OffsetsPartition:
        """The loaded partition holding ``group_id``; NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS otherwise."""
        number = self.partition_of(group_id)
        found = self._partitions.get(number)
        if found is None or not found.current:
            raise NotCoordinatorError(f"broker {self.broker.broker_id} is not the coordinator of group "
                                      f"{group_id!r} ({OFFSETS_TOPIC}-{number})")
        if not found.loaded:
            raise CoordinatorLoadInProgressError(f"broker {self.broker.broker_id} is loading {OFFSETS_TOPIC}-{number}")
        return found

    def loaded_partitions(self) -> list[OffsetsPartition]:
        return [p for p in list(self._partitions.values()) if p.loaded and p.current]

    # ---- effects ---------------------------------------------------------------------------------------------

    def store(self, part: OffsetsPartition, group_id: str, group) -> None:
        if group is None:
            part.groups.pop(group_id, None)
        else:
            part.groups[group_id] = group

    def execute(self, part: OffsetsPartition, effects) -> None:
        """Carry out the core's effects (caller holds ``part.lock``)."""
        for effect in effects:
            if isinstance(effect, (gv.JoinReply, gv.SyncReply)):
                self.waiters.deliver(effect.handle, effect)
            elif isinstance(effect, gv.PersistGroup):
                self._persist(part, effect)
            else:
                raise AssertionError(f"unknown group effect {effect!r}")

    def _persist(self, part: OffsetsPartition, effect) -> None:
        def done(_base_offset: int, error: ErrorCode) -> None:
            with part.lock:
                if not part.current:
                    return  # unloaded: its waiters were answered NOT_COORDINATOR
                group = part.groups.get(effect.group_id)
                if group is None:
                    return
                updated, effects = gm.persist_done(group, effect.generation_id, error, now_ms=now_ms())
                self.store(part, effect.group_id, updated)
                self.execute(part, effects)

        self.append(part, [gr.group_metadata_record(effect.group)], done)

    def append(self, part: OffsetsPartition, records, done: Callable[[int, ErrorCode], None]) -> None:
        """Append ``records`` to ``part`` (caller holds its lock, so log order is decision order)."""
        appends.append(self.broker.replica_manager, part.number, records, topic=OFFSETS_TOPIC,
                       timeout_ms=self.config["offsets.commit.timeout.ms"],
                       max_message_bytes=self.broker.topic_config(OFFSETS_TOPIC)["max.message.bytes"],
                       completions=self.completions, done=done)

    def call_core(self, part: OffsetsPartition, group_id: str, step: Callable[[Any], tuple]) -> Any:
        """Run ``step(group) -> (group, effects, result)`` under the lock; store and execute; return result."""
        with part.lock:
            if not part.current:
                raise NotCoordinatorError(f"broker {self.broker.broker_id} no longer leads "
                                          f"{OFFSETS_TOPIC}-{part.number}")
            group, effects, result = step(part.groups.get(group_id))
            self.store(part, group_id, group)
            self.execute(part, effects)
            return result

    # ---- blocking requests ---------------------------------------------------------------------------------

    def join(self, request) -> Any:
        part = self.owned(request.group_id)
        handle, waiter = self.waiters.register()
        # The rebalance may wait for the member with the longest rebalance timeout (the core's deadline).
        group = part.groups.get(request.group_id)
        rebalance_ms = max(request.rebalance_timeout_ms, 0 if group is None else group.max_rebalance_timeout_ms())
        try:
            self.call_core(part, request.group_id, lambda group: (*gm.join(
                group, request, handle, config=self.group_config, now_ms=now_ms(), fresh_id=str(uuid.uuid4())), None))
        except BaseException:
            self.waiters.deliver(handle, None)
            raise
        bound_ms = rebalance_ms + self.group_config.initial_rebalance_delay_ms + WAIT_MARGIN_MS
        return self.waiters.wait(handle, waiter, min(bound_ms, WAIT_MAX_MS) / 1000)

    def sync(self, request) -> Any:
        part = self.owned(request.group_id)
        handle, waiter = self.waiters.register()
        group = part.groups.get(request.group_id)
        member = None if group is None else group.members.get(request.member_id)
        rebalance_ms = member.rebalance_timeout_ms if member is not None else self.group_config.max_session_timeout_ms
        rebalance_ms += self.config["offsets.commit.timeout.ms"]  # the leader's assignment is written first
        try:
            self.call_core(part, request.group_id, lambda group: (*gm.sync(group, request, handle, now_ms=now_ms()),
                                                                   None))
        except BaseException:
            self.waiters.deliver(handle, None)
            raise
        return self.waiters.wait(handle, waiter, min(rebalance_ms + WAIT_MARGIN_MS, WAIT_MAX_MS) / 1000)

    def heartbeat(self, request) -> ErrorCode:
        part = self.owned(request.group_id)
        return self.call_core(part, request.group_id, lambda group: _with_no_effects(
            gm.heartbeat(group, request, now_ms=now_ms())))

    def leave(self, request) -> Any:
        part = self.owned(request.group_id)

        def step(group):
            updated, result, effects = gm.leave(group, request, now_ms=now_ms())
            return updated, effects, result
        return self.call_core(part, request.group_id, step)

    # ---- offsets ------------------------------------------------------------------------------------------

    def commit(self, request) -> tuple[ErrorCode, dict]:
        """(whole-request error, {(topic, partition): error}) once the commit's append completed."""
        part = self.owned(request.group_id)
        handle, waiter = self.waiters.register()
        group_id = request.group_id
        with part.lock:
            if not part.current:
                self.waiters.deliver(handle, None)
                raise NotCoordinatorError(f"broker {self.broker.broker_id} no longer leads {OFFSETS_TOPIC}-{part.number}")
            try:
                group, decision = go.check_commit(part.groups.get(group_id), request,
                                                  metadata_max_bytes=self.config["offset.metadata.max.bytes"],
                                                  now_ms=now_ms())
            except BaseException:
                self.waiters.deliver(handle, None)
                raise
            self.store(part, group_id, group)
            errors = dict(decision.partition_errors)
            to_write = dict(decision.to_write)
            if decision.error != ErrorCode.NONE or not to_write:
                self.waiters.deliver(handle, None)
                return decision.error, errors
            keys = [(group_id, topic, number) for topic, number in to_write]
            for key in keys:
                part.pending_commits[key] = part.pending_commits.get(key, 0) + 1

            def done(base_offset: int, error: ErrorCode) -> None:
                with part.lock:
                    for key in keys:
                        left = part.pending_commits.get(key, 1) - 1
                        if left > 0:
                            part.pending_commits[key] = left
                        else:
                            part.pending_commits.pop(key, None)
                    if error == ErrorCode.NONE and part.current:
                        self._apply_commit(part, group_id, to_write, base_offset)
                self.waiters.deliver(handle, error)

            records = [gr.offset_commit_record(group_id, topic, number, om) for (topic, number), om in to_write.items()]
            self.append(part, records, done)
        outcome = self.waiters.wait(handle, waiter, (self.config["offsets.commit.timeout.ms"] + WAIT_MARGIN_MS) / 1000)
        error = ErrorCode.REQUEST_TIMED_OUT if outcome is None else outcome
        errors.update({tp: error for tp in to_write})
        return ErrorCode.NONE, errors

    def _apply_commit(self, part: OffsetsPartition, group_id: str, to_write: dict, base_offset: int) -> None:
        """Apply what an acknowledged append wrote, except keys a later-appended commit already set."""
        newer = {}
        for index, tp in enumerate(to_write):
            key = (group_id, tp[0], tp[1])
            offset = base_offset + index
            if part.applied_at.get(key, -1) < offset:
                part.applied_at[key] = offset
                newer[tp] = to_write[tp]
        if newer:
            part.offsets[group_id] = go.apply_commit(part.offsets.get(group_id, {}), newer)

    def fetch_offsets(self, group_id: str, partitions, require_stable: bool) -> list:
        """[(topic-partition, OffsetAndMetadata | None, error)] of what the group has committed."""
        part = self.owned(group_id)
        with part.lock:
            found = go.fetch_offsets(part.offsets.get(group_id, {}), partitions)
            unstable = {(t, p) for (g, t, p) in part.pending_commits if g == group_id} if require_stable else set()
        return [(tp, om, ErrorCode.UNSTABLE_OFFSET_COMMIT if tp in unstable else ErrorCode.NONE)
                for tp, om in found]

    def delete_offsets(self, group_id: str, partitions) -> tuple[ErrorCode, dict]:
        part = self.owned(group_id)
        with part.lock:
            decision = go.delete_offsets(part.groups.get(group_id), part.offsets.get(group_id, {}), partitions,
                                         subscribed_topics=subscribed_topics)
            errors = dict(decision.partition_errors)
            if decision.error != ErrorCode.NONE or not decision.to_delete:
                return decision.error, errors
            records = [gr.offset_tombstone(group_id, t, p) for t, p in decision.to_delete]
            error = self._append_and_wait(part, records, lambda: self._drop_offsets(
                part, group_id, decision.to_delete, decision.group_dead))
        errors.update({tp: error for tp in decision.to_delete})
        return ErrorCode.NONE, errors

    def delete_group(self, group_id: str) -> ErrorCode:
        part = self.owned(group_id)
        with part.lock:
            offsets = part.offsets.get(group_id, {})
            decision = go.delete_group(part.groups.get(group_id), offsets)
            if decision.error != ErrorCode.NONE:
                return decision.error
            records = [gr.offset_tombstone(group_id, t, p) for t, p in decision.tombstones]
            records.append(gr.group_tombstone(group_id))
            return self._append_and_wait(part, records, lambda: self._drop_offsets(
                part, group_id, tuple(decision.tombstones), True, force=True))

    def _append_and_wait(self, part: OffsetsPartition, records, on_success: Callable[[], None]) -> ErrorCode:
        """Append (caller holds ``part.lock``, released while waiting) and wait for the outcome."""
        handle, waiter = self.waiters.register()

        def done(_base_offset: int, error: ErrorCode) -> None:
            if error == ErrorCode.NONE:
                with part.lock:
                    if part.current:
                        on_success()
            self.waiters.deliver(handle, error)

        self.append(part, records, done)
        part.lock.release()
        try:
            outcome = self.waiters.wait(handle, waiter, (self.config["offsets.commit.timeout.ms"] + WAIT_MARGIN_MS)
                                        / 1000)
        finally:
            part.lock.acquire()
        return ErrorCode.REQUEST_TIMED_OUT if outcome is None else outcome

    def _drop_offsets(self, part: OffsetsPartition, group_id: str, deleted, group_dead: bool,
                      force: bool = False) -> None:
        """After acknowledged tombstones (caller holds the lock). A group is dropped only if it is still
        empty of members and offsets (``force``: deleted on request, it is gone whatever came since)."""
        left = go.apply_delete(part.offsets.get(group_id, {}), deleted)
        for topic, number in deleted:
            part.applied_at.pop((group_id, topic, number), None)
        if left:
            part.offsets[group_id] = left
        else:
            part.offsets.pop(group_id, None)
        group = part.groups.get(group_id)
        if group_dead and (force or (not left and (group is None or not group.members))):
            part.groups.pop(group_id, None)
            if force:
                part.offsets.pop(group_id, None)

    # ---- periodic work ------------------------------------------------------------------------------------

    def _run(self) -> None:
        last_retention_ms = now_ms()
        while not self._stopping.wait(TICK_MS / 1000):
            current = now_ms()
            try:
                self.sync_leadership()
                self.tick_groups(current)
                if current - last_retention_ms >= self.config["offsets.retention.check.interval.ms"]:
                    last_retention_ms = current
                    self.expire_offsets(current)
            except Exception:
                log.exception("group coordinator tick failed")

    def sync_leadership(self) -> None:
        """Load what this broker now leads, unload what it no longer leads (or leads in a new epoch)."""
        led = {p.partition: p for p in self.broker.replica_manager.partitions()
               if p.topic == OFFSETS_TOPIC and p.is_leader}
        for number, part in list(self._partitions.items()):
            replica = led.get(number)
            if replica is None or replica.leader_epoch != part.leader_epoch:
                self._unload(number)
        for number, replica in led.items():
            if number not in self._partitions:
                failed_at = self._load_failed_at.get(number)
                if failed_at is None or time.monotonic() - failed_at >= LOAD_RETRY_INTERVAL_S:
                    self._load(replica)

    def _load(self, replica) -> None:
        part = OffsetsPartition(replica.partition, replica.leader_epoch)
        self._partitions[part.number] = part  # requests see LOAD_IN_PROGRESS from here
        started = time.monotonic()
        try:
            loaded = gr.replay(read_records(replica), now_ms=now_ms())
        except Exception:
            log.exception("loading %s-%s failed; retrying in %ss", OFFSETS_TOPIC, part.number, LOAD_RETRY_INTERVAL_S)
            self._load_failed_at[part.number] = time.monotonic()
            self._partitions.pop(part.number, None)
            return
        self._load_failed_at.pop(part.number, None)
        with part.lock:
            for group_id, (group, offsets) in loaded.items():
                part.groups[group_id] = group
                if offsets:
                    part.offsets[group_id] = offsets
            part.loaded = True
        log.info("coordinator of %s-%s (leader epoch %s): loaded %s groups in %.0f ms", OFFSETS_TOPIC, part.number,
                 part.leader_epoch, len(loaded), (time.monotonic() - started) * 1000)

    def _unload(self, number: int) -> None:
        part = self._partitions.pop(number, None)
        if part is None:
            return
        with part.lock:
            part.current = False
            for group in list(part.groups.values()):
                for effect in gm.unload(group):
                    if isinstance(effect, (gv.JoinReply, gv.SyncReply)):
                        self.waiters.deliver(effect.handle, effect)
            part.groups.clear()
            part.offsets.clear()
        log.info("no longer coordinator of %s-%s", OFFSETS_TOPIC, number)

    def tick_groups(self, current_ms: int) -> None:
        for part in self.loaded_partitions():
            with part.lock:
                for group_id, group in list(part.groups.items()):
                    deadline = gm.next_deadline_ms(group)
                    if deadline is None or deadline > current_ms or not part.current:
                        continue
                    updated, effects = gm.tick(group, now_ms=current_ms)
                    self.store(part, group_id, updated)
                    self.execute(part, effects)

    def expire_offsets(self, current_ms: int) -> None:
        """KIP-211 retention: tombstones for expired offsets (and empty groups), dropped once acknowledged."""
        for part in self.loaded_partitions():
            with part.lock:
                for group_id, group in list(part.groups.items()):
                    decision = go.expire_offsets(group, part.offsets.get(group_id, {}), now_ms=current_ms,
                                                 retention_ms=retention_ms(self.config),
                                                 subscribed_topics=subscribed_topics)
                    if not decision.expired and not decision.group_dead:
                        continue
                    records = [gr.offset_tombstone(group_id, t, p) for t, p in decision.expired]
                    if decision.group_dead:
                        records.append(gr.group_tombstone(group_id))
                    self.append(part, records, self._expired_done(part, group_id, decision))

    def _expired_done(self, part: OffsetsPartition, group_id: str, decision) -> Callable[[int, ErrorCode], None]:
        def done(_base_offset: int, error: ErrorCode) -> None:
            if error != ErrorCode.NONE:
                log.info("expiring offsets of group %r not written (%s); next check retries", group_id, error.name)
                return
            with part.lock:
                if part.current:
                    self._drop_offsets(part, group_id, tuple(decision.expired), decision.group_dead)
        return done


def _with_no_effects(result: tuple) -> tuple:
    """(group, error) of ``heartbeat`` as ``call_core``'s (group, effects, result)."""
    group, error = result
    return group, [], error
