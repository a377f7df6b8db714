"""One hosted partition replica: the I/O shell around the pure replication core.

Every decision about this replica (who may append, the high watermark, ISR
shrink and expand, acks=all completion, producer dedupe, fencing, where a
follower truncates) is made by ``ads_spark.replication.partition.step``. This
class feeds it events under one lock per partition and carries out the effects
it returns, in order, before the next event: disk writes (append, truncate,
reset, epoch checkpoint) happen under the lock; callbacks (produce answers) and
ZooKeeper writes (ISR proposals) happen after it is released, so no I/O that can
block for long is ever done while holding it.

Invariants (the core checks its own after every step; these are the shell's):
* ``state.log_end_offset == log.log_end_offset`` and ``state.log_start_offset
  == log.log_start_offset`` between events: a disk effect that fails leaves the
  replica unusable (``InvariantViolation``), never silently diverged;
* a fetched batch reaches the core only after its offsets and CRC were checked,
  so a corrupt response is refused and changes nothing.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import pyarrow as pa

from ads_spark.broker.log.checkpoints import fsync_directory, write_atomically
from ads_spark.errors import (
    CorruptMessageError, ErrorCode, InvariantViolation, NotLeaderOrFollowerError, OffsetOutOfRangeError,
    RecordTooLargeError, error_for,
)
from ads_spark.broker.log.fetched import SchemaLookup, check_fetched_messages, encode_fetched, stored_schema_for
from ads_spark.protocol.records import NO_SCHEMA_ID, BatchHeader
from ads_spark.replication import dedupe
from ads_spark.replication import partition as core
from ads_spark.replication.state import LeaderAndIsr, PartitionConfig, Role

log = logging.getLogger("ads.broker.partition")

# Called with (base_offset, error): error None means acknowledged at the requested acks level.
ProduceCallback = Callable[[int, Exception | None], None]
# Sends an ISR proposal to ZooKeeper; the answer comes back through ``on_isr_answer``.
IsrSender = Callable[["Partition", core.ProposeIsr], None]


@dataclass
class PartitionRole:
    """What the controller's leader-and-isr said about this partition (the wire form)."""

    leader_id: int = -1
    leader_epoch: int = -1
    partition_epoch: int = -1  # version of the state znode the ISR was read at
    isr: tuple[int, ...] = ()
    replicas: tuple[int, ...] = ()
    observers: tuple[int, ...] = ()
    elr: tuple[int, ...] = ()
    isr_broker_epochs: tuple[tuple[int, int], ...] = ()  # (member, broker epoch) the ISR write recorded

    @classmethod
    def from_wire(cls, entry: dict[str, Any]) -> "PartitionRole":
        """One partition of a leader_and_isr body, already checked against its schema (request_schemas)."""
        return cls(leader_id=entry["leader"], leader_epoch=entry["leader_epoch"],
                   partition_epoch=entry.get("partition_epoch", -1), isr=tuple(entry["isr"]),
                   replicas=tuple(entry["replicas"]), observers=tuple(entry.get("observers") or ()),
                   elr=tuple(entry.get("elr") or ()),
                   isr_broker_epochs=tuple(sorted((int(item["id"]), int(item["broker_epoch"]))
                                                  for item in entry.get("isr_broker_epochs") or ())))


@dataclass
class FetchResult:
    batches: list[tuple[pa.RecordBatch, BatchHeader]]
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    leader_epoch: int
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset) when the follower diverged


@dataclass
class _Outbox:
    """What an event produced that must run after the lock is released."""

    answers: list[tuple[ProduceCallback, int, Exception | None]] = field(default_factory=list)
    proposals: list[core.ProposeIsr] = field(default_factory=list)
    reply: core.ReplyFetch | None = None
    refused: core.LeaderAndIsrRefused | None = None
    changed: bool = False  # HW, LEO or role moved: wake long-polling fetches
    high_watermark_only: bool = False  # of those, only the HW moved (follower fetches need not wake)


class Partition:
    """One replica of one partition on this broker: the only place its replication state changes.

    Owns the replica's ``PartitionState`` (``state``, replaced by each core step), the lock every step
    holds (``changed``, also what long-polling fetches wait on), the produce callbacks the core holds
    in purgatory, and the execution of the core's effects on what it was given: the partition's log
    (``log``: a ``PartitionLog``, or the simulation's in-memory one), its leader-epoch checkpoint
    (``epochs``), its producer-state snapshot (``producer_snapshots``) and the ISR sender to ZooKeeper.
    Recovery is its constructor: the state starts from what those hold (``core.initial_state``).

    The same class runs in the broker and in the seeded simulation (tests/sim), which supplies only
    the environment: network, ZooKeeper, disks, clock and faults.
    """

    def __init__(self, topic: str, partition: int, topic_id: str, partition_log, epochs_file, local_broker_id: int,
                 config: PartitionConfig, high_watermark_checkpoint: int, isr_sender: IsrSender | None = None,
                 producer_snapshots: "ProducerSnapshotFile | None" = None):
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id
        self.log = partition_log
        self.epochs = epochs_file
        self.local_broker_id = local_broker_id
        self._isr_sender = isr_sender
        # Set by the replica manager: (key, high_watermark_only) after the HW, LEO, epoch or role moved.
        self.on_changed: Callable[[tuple[str, int], bool], None] | None = None
        # Reassignment throttle (bytes/s) for followers outside the ISR; None: unthrottled. The bucket
        # holds at most one second of allowance, so a replica in the ISR is never slowed by it.
        self.throttle_bytes_per_s: int | None = None
        self._throttle_tokens = 0.0
        self._throttle_at_s = 0.0
        # One condition per partition: every step holds it; appends and HW moves notify it.
        self.changed = threading.Condition()
        self._request_ids = itertools.count(1)
        self._waiting: dict[int, ProduceCallback] = {}  # acks=all requests the core holds in purgatory
        # Where the producer table is snapshotted: a file in the log directory unless given (the simulation's).
        self.producer_snapshots = (producer_snapshots if producer_snapshots is not None
                                   else ProducerSnapshotFile(partition_log.directory))
        snapshot = self.producer_snapshots.read()
        self.state = core.initial_state(
            topic, partition, local_broker_id, config, log_start_offset=partition_log.log_start_offset,
            log_end_offset=partition_log.log_end_offset, high_watermark_checkpoint=high_watermark_checkpoint,
            epoch_pairs=tuple(epochs_file.entries), producers=recover_producers(partition_log, snapshot),
        )
        self._snapshot_offset = -1 if snapshot is None else snapshot[0]  # LEO of the producer snapshot stored
        self._drop_snapshot_above(partition_log.log_end_offset)  # recovery may have cut a torn tail below it
        # Set when this broker's ZooKeeper session expired (membership.SessionGuard): another broker may lead
        # now, so produces are refused until the controller's next leader_and_isr says who leads.
        self._awaiting_controller: str | None = None
        # Set by the broker for a typed topic: schema id -> stored schema (broker/schema_cache.py).
        self.schema_lookup: SchemaLookup | None = None

    # ---- read-only views -------------------------------------------------------------

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    @property
    def high_watermark(self) -> int:
        return self.state.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.state.log_end_offset

    @property
    def is_leader(self) -> bool:
        return self.state.is_leader

    @property
    def is_follower(self) -> bool:
        return self.state.role is Role.FOLLOWER

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    @property
    def min_insync_replicas(self) -> int:
        return self.state.config.min_insync_replicas

    # ---- the one way in --------------------------------------------------------------

    def _step_locked(self, event, outbox: _Outbox, pending_batches: dict | None = None) -> None:
        """Feed one event to the core and carry out its effects (caller holds ``changed``)."""
        before = self.state
        self.state, effects = core.step(self.state, event)
        for effect in effects:
            self._execute_locked(effect, outbox, pending_batches or {})
        if self.state.log_end_offset != self.log.log_end_offset:
            raise InvariantViolation(f"{self.topic}-{self.partition}: core LEO {self.state.log_end_offset} != "
                                     f"log LEO {self.log.log_end_offset} after {type(event).__name__}")
        data_moved = (self.state.log_end_offset, self.state.role, self.state.leader_epoch) != (
            before.log_end_offset, before.role, before.leader_epoch)
        if data_moved or self.state.high_watermark != before.high_watermark:
            outbox.high_watermark_only = not data_moved and (not outbox.changed or outbox.high_watermark_only)
            outbox.changed = True
            self.changed.notify_all()

    def _execute_locked(self, effect, outbox: _Outbox, pending_batches: dict) -> None:
        match effect:
            case core.AppendAsLeader(request_id=request_id, base_offset=base, leader_epoch=epoch):
                batch, producer, timestamp_type, now = pending_batches[request_id]
                header = self.log.append_as_leader(batch, leader_epoch=epoch, now_ms=now, producer_id=producer[0],
                                                   producer_epoch=producer[1], base_sequence=producer[2],
                                                   timestamp_type=timestamp_type)
                if header.base_offset != base:
                    raise InvariantViolation(f"{self.topic}-{self.partition}: appended at {header.base_offset}, "
                                             f"core expected {base}")
            case core.AppendFetched():
                self.log.append_encoded(pending_batches["fetched"], now_ms=pending_batches["now_ms"])
            case core.Truncate(end_offset_exclusive=end, below_high_watermark=below):
                if below:
                    log.warning("%s-%s: truncating committed offsets from %s (after an unclean election)",
                                self.topic, self.partition, end)
                self.log.truncate_to(end)
                self._drop_snapshot_above(end)
            case core.ResetLog(start_offset=start):
                log.info("%s-%s: log restarts empty at the leader's log start %s", self.topic, self.partition, start)
                self.log.truncate_fully_and_start_at(start)
                self._drop_snapshot_above(-1)
            case core.EpochCacheChanged(pairs=pairs):
                self.epochs.replace_all(pairs)
            case core.HighWatermarkChanged():
                pass  # checkpointed periodically from self.state; waiters are woken by _step_locked
            case core.ProduceCompleted(request_id=request_id, error=error, base_offset=base):
                callback = self._waiting.pop(request_id, None)
                if callback is not None:
                    failure = None if error is ErrorCode.NONE else error_for(
                        error, f"{self.topic}-{self.partition}: {error.name}")
                    outbox.answers.append((callback, base, failure))
            case core.ProposeIsr():
                outbox.proposals.append(effect)
            case core.ReplyFetch():
                outbox.reply = effect
            case core.LeaderAndIsrRefused():
                outbox.refused = effect
            case _:
                raise InvariantViolation(f"unknown effect {effect!r}")

    def _finish(self, outbox: _Outbox) -> None:
        """Run what must not run under the lock: produce answers and ISR writes."""
        for callback, base, failure in outbox.answers:
            callback(base, failure)
        if self._isr_sender is not None:
            for proposal in outbox.proposals:
                self._isr_sender(self, proposal)
        if outbox.changed and self.on_changed is not None:
            self.on_changed(self.key, outbox.high_watermark_only)

    def _run(self, event, pending_batches: dict | None = None) -> _Outbox:
        outbox = _Outbox()
        with self.changed:
            self._step_locked(event, outbox, pending_batches)
        self._finish(outbox)
        return outbox

    # ---- role changes (from the controller) --------------------------------------------

    def apply_leader_and_isr(self, role: PartitionRole, now_ms: int) -> core.LeaderAndIsrRefused | None:
        lai = LeaderAndIsr(role.leader_id, role.leader_epoch, tuple(role.isr), tuple(role.elr),
                           role.partition_epoch, isr_broker_epochs=tuple(role.isr_broker_epochs))
        kind = core.BecomeLeader if role.leader_id == self.local_broker_id else core.BecomeFollower
        outbox = self._run(kind(lai, tuple(role.replicas), tuple(role.observers), now_ms))
        if outbox.refused is None or outbox.refused.error is ErrorCode.NONE:
            self._awaiting_controller = None  # the controller has said who leads (applied, or already so)
        return outbox.refused

    def await_controller(self, reason: str) -> None:
        """Refuse produces until the controller's next leader_and_isr (this broker's session expired)."""
        self._awaiting_controller = reason

    def stop(self, now_ms: int) -> None:
        self._run(core.StopReplica(now_ms))

    def update_config(self, config: PartitionConfig, now_ms: int) -> None:
        if config != self.state.config:
            self._run(core.ConfigChanged(config, now_ms))

    def tick(self, now_ms: int) -> None:
        self._run(core.Tick(now_ms))

    def on_isr_answer(self, accepted: LeaderAndIsr | None, current: LeaderAndIsr | None, now_ms: int) -> None:
        """ZooKeeper's answer to a ``ProposeIsr``: the state as written, or the current one (None: unreachable)."""
        if accepted is not None:
            self._run(core.IsrUpdateAccepted(accepted, now_ms))
        else:
            self._run(core.IsrUpdateRejected(current, now_ms))

    # ---- leader side ------------------------------------------------------------------

    def produce(self, batch: pa.RecordBatch, *, acks: int, timeout_ms: int, max_message_bytes: int, now_ms: int,
                producer: tuple[int, int, int], complete: ProduceCallback, timestamp_type: int = 0) -> None:
        """Append (unless the core refuses or finds a duplicate) and call ``complete`` once ``acks`` is met."""
        awaiting = self._awaiting_controller
        if awaiting is not None:
            raise NotLeaderOrFollowerError(f"{self.topic}-{self.partition}: not acting as leader until the "
                                           f"controller confirms it ({awaiting})")
        if batch.nbytes > max_message_bytes:
            raise RecordTooLargeError(f"batch of {batch.nbytes} bytes exceeds max.message.bytes={max_message_bytes} "
                                      f"for {self.topic}-{self.partition}")
        outbox = _Outbox()
        with self.changed:
            request_id = next(self._request_ids)
            self._waiting[request_id] = complete
            event = core.Produce(request_id, acks, batch.num_rows, timeout_ms, now_ms, *producer)
            self._step_locked(event, outbox, {request_id: (batch, producer, timestamp_type, now_ms)})
            if acks == 0 and request_id in self._waiting:
                # acks=0 has no completion in the core; the append (if any) is all it asked for.
                del self._waiting[request_id]
                outbox.answers.append((complete, self.state.log_end_offset - batch.num_rows, None))
        self._finish(outbox)

    def on_follower_fetch(self, replica_id: int, broker_epoch: int, current_leader_epoch: int, fetch_offset: int,
                          last_fetched_epoch: int, now_ms: int) -> core.ReplyFetch:
        outbox = self._run(core.FollowerFetch(replica_id, broker_epoch, current_leader_epoch, fetch_offset,
                                              last_fetched_epoch, now_ms))
        if outbox.reply is None:
            raise InvariantViolation(f"{self.topic}-{self.partition}: the core did not answer a follower fetch")
        return outbox.reply

    def replication_budget(self, replica_id: int, wanted_bytes: int, now_s: float) -> int:
        """Bytes a follower fetch may carry now: all of it for ISR members, the throttle's share otherwise."""
        rate = self.throttle_bytes_per_s
        if not rate or replica_id in self.state.isr:
            return wanted_bytes
        with self.changed:
            self._throttle_tokens = min(float(rate), self._throttle_tokens + (now_s - self._throttle_at_s) * rate)
            self._throttle_at_s = now_s
            if self._throttle_tokens < 1:
                return 0
            granted = int(min(wanted_bytes, self._throttle_tokens))
            self._throttle_tokens -= granted
            return granted

    def consumer_read_bound(self, current_leader_epoch: int, fetch_offset: int, allow_follower: bool) -> int:
        """The exclusive end a consumer may read to (the HW), or raise the error the core decided."""
        with self.changed:
            error, end = core.check_consumer_fetch(self.state, current_leader_epoch if current_leader_epoch >= 0
                                                   else None, fetch_offset, allow_follower)
        if error is not ErrorCode.NONE:
            raise error_for(error, f"{self.topic}-{self.partition} on broker {self.local_broker_id}: "
                                   f"{error.name} (offset {fetch_offset}, HW {self.state.high_watermark}, "
                                   f"log start {self.state.log_start_offset}, epoch {self.state.leader_epoch})")
        return end

    def list_offsets_bound(self, current_leader_epoch: int) -> int:
        """The HW a client's list_offsets may answer with, or raise the error the core decided (KIP-207)."""
        with self.changed:
            state = self.state
        error = core.check_list_offsets(state, current_leader_epoch if current_leader_epoch >= 0 else None)
        if error is not ErrorCode.NONE:
            raise error_for(error, f"{self.topic}-{self.partition} on broker {self.local_broker_id}: {error.name} "
                                   f"(HW {state.high_watermark}, leader epoch {state.leader_epoch} starts at "
                                   f"{state.leader_epoch_start_offset})")
        return state.high_watermark

    def read(self, fetch_offset: int, end_offset_exclusive: int, max_bytes: int, as_messages: bool = False) -> list:
        if fetch_offset >= end_offset_exclusive:
            return []
        return self.log.read(fetch_offset, max_bytes=max_bytes, end_offset_exclusive=end_offset_exclusive,
                             as_messages=as_messages)

    def locate(self, fetch_offset: int, end_offset_exclusive: int, max_bytes: int) -> list:
        if fetch_offset >= end_offset_exclusive:
            return []
        return self.log.locate(fetch_offset, max_bytes=max_bytes, end_offset_exclusive=end_offset_exclusive)

    def check_leader(self, current_leader_epoch: int) -> None:
        """Raise unless this replica leads in ``current_leader_epoch`` (-1: the caller does not know)."""
        self.consumer_read_bound(current_leader_epoch, self.state.log_start_offset, allow_follower=False)

    # ---- follower side ------------------------------------------------------------------

    def fetch_request(self) -> core.FetchRequest | None:
        with self.changed:
            return core.fetch_request(self.state)

    def on_fetch_response(self, request: core.FetchRequest, meta: dict, batches: Sequence, now_ms: int) -> None:
        """The leader's answer to ``request``; batches are checked (offsets, CRC) before the core sees them.

        Checking (and, for decoded batches, encoding) happen once, here, outside the partition
        lock (``broker/log/fetched.py``); the append under the lock only writes the messages.
        """
        try:
            if batches and isinstance(batches[0][0], pa.Buffer):  # stored messages (replica fetch session)
                messages = check_fetched_messages(batches, request.fetch_offset, self.schema_lookup)
            else:
                messages = encode_fetched(batches, request.fetch_offset)
            for schema_id in {header.schema_id for _, header in messages} - {NO_SCHEMA_ID}:
                self.log.note_schema(schema_id, stored_schema_for(schema_id, self.schema_lookup))
        except CorruptMessageError as exc:
            raise CorruptMessageError(f"{self.topic}-{self.partition}: {exc}") from None
        self.apply_fetch_response(request, meta, messages, now_ms)

    def apply_fetch_response(self, request: core.FetchRequest, meta: dict, messages: Sequence, now_ms: int) -> None:
        """Feed an answer whose batches passed the wire checks to the core; ``messages`` are (message, header)
        pairs as the log's ``append_encoded`` takes them.

        Split from ``on_fetch_response`` for the simulation, whose in-memory log stores record ids, not
        Arrow messages: it has no wire format to check, and enters here.
        """
        diverging = meta.get("diverging_epoch")
        headers = tuple(header for _, header in messages)
        event = core.FetchResponse(
            leader_epoch=int(meta.get("leader_epoch", request.current_leader_epoch)),
            fetch_offset=request.fetch_offset, last_fetched_epoch=request.last_fetched_epoch,
            error=ErrorCode(int(meta.get("error_code", 0))),
            high_watermark=int(meta.get("high_watermark", 0)),
            log_start_offset=int(meta.get("log_start_offset", 0)), batches=headers,
            diverging_epoch=(int(diverging["epoch"]), int(diverging["end_offset"])) if diverging else None,
            now_ms=now_ms)
        self._run(event, {"fetched": messages, "now_ms": now_ms})
        self._follow_log_start(event.log_start_offset, event.leader_epoch, now_ms)

    def _follow_log_start(self, leader_log_start: int, leader_epoch: int, now_ms: int) -> None:
        """What the leader deleted (DeleteRecords, retention) goes here too, up to this replica's own HW (Kafka's
        follower does the same): without it a follower elected leader would serve deleted records again."""
        outbox = _Outbox()
        with self.changed:
            if self.state.role is not Role.FOLLOWER or leader_epoch != self.state.leader_epoch:
                return
            target = min(leader_log_start, self.state.high_watermark)
            if target <= self.state.log_start_offset:
                return
            self.log.advance_log_start_offset(target)
            self._step_locked(core.LogStartAdvanced(self.log.log_start_offset, now_ms), outbox)
        self._finish(outbox)

    # ---- housekeeping -------------------------------------------------------------------

    def delete_records(self, offset: int, now_ms: int) -> int:
        """DeleteRecords on the leader: every record below ``offset`` (-1: the HW) is gone; returns the log start
        after it. Only committed records may go (past the HW: OFFSET_OUT_OF_RANGE); an offset at or below the
        log start changes nothing. Followers follow from their next fetch (``_follow_log_start``)."""
        awaiting = self._awaiting_controller
        if awaiting is not None:
            raise NotLeaderOrFollowerError(f"{self.topic}-{self.partition}: not acting as leader until the "
                                           f"controller confirms it ({awaiting})")
        outbox = _Outbox()
        with self.changed:
            if not self.state.is_leader:
                raise NotLeaderOrFollowerError(f"broker {self.local_broker_id} does not lead "
                                               f"{self.topic}-{self.partition}")
            high_watermark = self.state.high_watermark
            target = high_watermark if offset == -1 else offset
            if target > high_watermark:
                raise OffsetOutOfRangeError(f"{self.topic}-{self.partition}: cannot delete records below {target}, "
                                            f"past the high watermark {high_watermark}")
            if target > self.state.log_start_offset:
                self.log.advance_log_start_offset(target)
                self._step_locked(core.LogStartAdvanced(self.log.log_start_offset, now_ms), outbox)
            start = self.state.log_start_offset
        self._finish(outbox)
        return start

    def write_producer_snapshot(self) -> None:
        """Persist the producer table as of the current LEO, so a restart replays only what follows."""
        with self.changed:
            offset, table = self.state.log_end_offset, self.state.producers
        if offset == self._snapshot_offset or not table.entries:
            return
        self.producer_snapshots.write(offset, table)
        self._snapshot_offset = offset

    def _drop_snapshot_above(self, end_offset: int) -> None:
        """Delete the stored producer snapshot if it was taken above ``end_offset``: it describes batches the
        log no longer holds. Kept, it would be loaded at the next start once the log had grown past its
        offset again with other batches (before a newer snapshot replaced it), and a producer's retry of
        a truncated batch would be answered as a duplicate at offsets holding other records."""
        if self._snapshot_offset > end_offset:
            self.producer_snapshots.delete()
            self._snapshot_offset = -1

    def apply_retention(self, now_ms: int) -> None:
        with self.changed:
            self.log.apply_retention(now_ms, max_deletable_offset_exclusive=self.state.high_watermark)
            if self.log.log_start_offset <= self.state.log_start_offset:
                return
            outbox = _Outbox()
            self._step_locked(core.LogStartAdvanced(self.log.log_start_offset, now_ms), outbox)
        self._finish(outbox)


PRODUCER_SNAPSHOT = "producer-state.snapshot"


class ProducerSnapshotFile:
    """``producer-state.snapshot`` in a replica's log directory: its producer table as of an offset (JSON,
    replaced atomically), so a restart replays only the batches after it."""

    def __init__(self, directory):
        self.path = Path(directory) / PRODUCER_SNAPSHOT

    def read(self) -> tuple[int, dedupe.ProducerTable] | None:
        """(offset, table), or None when there is no snapshot or it cannot be read (then the log is replayed)."""
        try:
            snapshot = json.loads(self.path.read_text())
            return int(snapshot["offset"]), dedupe.from_plain(snapshot["producers"])
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("%s: unreadable producer-state snapshot (%s); rebuilding from the log", self.path, exc)
            return None

    def write(self, offset: int, table: dedupe.ProducerTable) -> None:
        text = json.dumps({"version": 1, "offset": offset, "producers": dedupe.to_plain(table)})
        write_atomically(self.path, text)

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
        fsync_directory(self.path.parent)  # durably gone: a crash must not bring a stale snapshot back


def recover_producers(partition_log, snapshot: tuple[int, dedupe.ProducerTable] | None) -> dedupe.ProducerTable:
    """Producer dedupe state: the snapshot plus the batches after it, or (no usable snapshot) the whole log.

    A snapshot is usable when its offset lies within the recovered log; recovery
    may have cut the log below it (a torn tail), and then the batches it
    describes are partly gone, so the table is rebuilt from the log instead.
    """
    if snapshot is None or not partition_log.log_start_offset <= snapshot[0] <= partition_log.log_end_offset:
        return dedupe.rebuild(header for _, header in partition_log.batches())
    offset, table = snapshot
    for _, header in partition_log.batches(offset):
        table = dedupe.record_append(table, header)
    return table
