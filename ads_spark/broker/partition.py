"""One hosted partition replica: its log and the role the controller gave it.

The partition is the unit that serialises appends (one lock per partition) and
that wakes long-polling fetches and waiting acks=all producers when its log end
or high watermark moves. What the high watermark is, who is in sync and when a
request is fenced are decisions of the replication layer; this class carries
them out and keeps the log consistent with them.

Invariants (checked where they can break):
* ``high_watermark <= log.log_end_offset`` on a leader; the HW never decreases
  while this broker leads the same epoch.
* a leader appends only in its own epoch; a follower appends only batches that
  continue its log exactly (``base_offset == log_end_offset``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Sequence

import pyarrow as pa

from ads_spark.errors import (
    FencedLeaderEpochError,
    InvariantViolation,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    UnknownLeaderEpochError,
)
from ads_spark.records import BatchHeader

ROLE_NONE = "none"
ROLE_LEADER = "leader"
ROLE_FOLLOWER = "follower"


@dataclass
class FollowerState:
    log_end_offset: int = 0
    broker_epoch: int = -1
    last_fetch_ms: int = 0
    last_caught_up_ms: int = 0


@dataclass
class PartitionRole:
    """What the controller's last leader-and-isr said about this partition."""

    leader_id: int = -1
    leader_epoch: int = -1
    partition_epoch: int = -1  # version of the state znode the ISR was read at
    isr: tuple[int, ...] = ()
    replicas: tuple[int, ...] = ()
    observers: tuple[int, ...] = ()
    elr: tuple[int, ...] = ()


@dataclass
class FetchResult:
    batches: list[tuple[pa.RecordBatch, BatchHeader]]
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    leader_epoch: int
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset) when the follower diverged


@dataclass
class Partition:
    topic: str
    partition: int
    topic_id: str
    log: object  # ads_spark.broker.log.PartitionLog
    epochs: object  # ads_spark.broker.log.LeaderEpochFile
    local_broker_id: int
    min_insync_replicas: int = 1
    role: str = ROLE_NONE
    assignment: PartitionRole = field(default_factory=PartitionRole)
    high_watermark: int = 0
    followers: dict[int, FollowerState] = field(default_factory=dict)
    # One condition per partition: appends and HW moves notify it; fetchers and acks wait on it.
    changed: threading.Condition = field(default_factory=threading.Condition)

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    # ---- role changes (from the controller) --------------------------------

    def become_leader(self, role: PartitionRole, now_ms: int) -> None:
        with self.changed:
            if role.leader_epoch < self.assignment.leader_epoch:
                raise FencedLeaderEpochError(
                    f"{self.topic}-{self.partition}: leader epoch {role.leader_epoch} is older than "
                    f"{self.assignment.leader_epoch}"
                )
            self.epochs.assign(role.leader_epoch, self.log.log_end_offset)
            self.role = ROLE_LEADER
            self.assignment = role
            self.followers = {
                r: FollowerState(last_caught_up_ms=now_ms, last_fetch_ms=now_ms)
                for r in (*role.replicas, *role.observers)
                if r != self.local_broker_id
            }
            self.high_watermark = min(max(self.high_watermark, self.log.log_start_offset), self.log.log_end_offset)
            self._advance_high_watermark_locked()
            self.changed.notify_all()

    def become_follower(self, role: PartitionRole) -> None:
        with self.changed:
            if role.leader_epoch < self.assignment.leader_epoch:
                raise FencedLeaderEpochError(
                    f"{self.topic}-{self.partition}: leader epoch {role.leader_epoch} is older than "
                    f"{self.assignment.leader_epoch}"
                )
            self.role = ROLE_FOLLOWER
            self.assignment = role
            self.followers = {}
            self.changed.notify_all()

    # ---- leader side -------------------------------------------------------

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """Fence a request made against another epoch (-1 means the client does not know)."""
        if current_leader_epoch < 0:
            return
        mine = self.assignment.leader_epoch
        if current_leader_epoch < mine:
            raise FencedLeaderEpochError(
                f"{self.topic}-{self.partition}: request epoch {current_leader_epoch} < current {mine}"
            )
        if current_leader_epoch > mine:
            raise UnknownLeaderEpochError(
                f"{self.topic}-{self.partition}: request epoch {current_leader_epoch} > known {mine}"
            )

    def require_leader(self) -> None:
        if self.role != ROLE_LEADER:
            raise NotLeaderOrFollowerError(
                f"broker {self.local_broker_id} is not the leader of {self.topic}-{self.partition} "
                f"(leader is {self.assignment.leader_id})"
            )

    def append_as_leader(self, batch: pa.RecordBatch, *, acks: int, max_message_bytes: int,
                         now_ms: int, producer: tuple[int, int, int] = (-1, -1, -1),
                         timestamp_type: int = 0) -> BatchHeader:
        if batch.nbytes > max_message_bytes:
            raise RecordTooLargeError(
                f"batch of {batch.nbytes} bytes exceeds max.message.bytes={max_message_bytes} "
                f"for {self.topic}-{self.partition}"
            )
        with self.changed:
            self.require_leader()
            if acks == -1 and len(self.assignment.isr) < self.min_insync_replicas:
                raise NotEnoughReplicasError(
                    f"{self.topic}-{self.partition}: ISR {list(self.assignment.isr)} has fewer than "
                    f"min.insync.replicas={self.min_insync_replicas} members"
                )
            producer_id, producer_epoch, base_sequence = producer
            header = self.log.append_as_leader(
                batch, leader_epoch=self.assignment.leader_epoch, now_ms=now_ms,
                producer_id=producer_id, producer_epoch=producer_epoch,
                base_sequence=base_sequence, timestamp_type=timestamp_type,
            )
            self._advance_high_watermark_locked()
            self.changed.notify_all()
            return header

    def _advance_high_watermark_locked(self) -> bool:
        if self.role != ROLE_LEADER:
            return False
        ends = [self.log.log_end_offset]
        for replica in self.assignment.isr:
            if replica != self.local_broker_id:
                ends.append(self.followers.get(replica, FollowerState()).log_end_offset)
        candidate = min(ends)
        if candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False

    def record_follower_fetch(self, replica_id: int, broker_epoch: int, fetch_offset: int, now_ms: int) -> None:
        with self.changed:
            state = self.followers.setdefault(replica_id, FollowerState())
            state.log_end_offset = min(fetch_offset, self.log.log_end_offset)
            state.broker_epoch = broker_epoch
            state.last_fetch_ms = now_ms
            if fetch_offset >= self.log.log_end_offset:
                state.last_caught_up_ms = now_ms
            if self._advance_high_watermark_locked():
                self.changed.notify_all()

    # ---- reads --------------------------------------------------------------

    def read(self, fetch_offset: int, *, max_bytes: int, for_replica: bool) -> FetchResult:
        with self.changed:
            if for_replica:
                end_exclusive = self.log.log_end_offset
            else:
                end_exclusive = self.high_watermark
            log_start = self.log.log_start_offset
            if fetch_offset < log_start or fetch_offset > self.log.log_end_offset:
                raise OffsetOutOfRangeError(
                    f"offset {fetch_offset} is outside [{log_start}, {self.log.log_end_offset}] "
                    f"of {self.topic}-{self.partition}"
                )
            hw, leo, epoch = self.high_watermark, self.log.log_end_offset, self.assignment.leader_epoch
        if fetch_offset >= end_exclusive:
            batches: list = []
        else:
            batches = self.log.read(fetch_offset, max_bytes=max_bytes, end_offset_exclusive=end_exclusive)
        return FetchResult(batches, hw, log_start, leo, epoch)

    def available_end(self, for_replica: bool) -> int:
        return self.log.log_end_offset if for_replica else self.high_watermark

    # ---- follower side -----------------------------------------------------

    def append_as_follower(self, batches: Sequence[tuple[pa.RecordBatch, BatchHeader]],
                           leader_high_watermark: int, now_ms: int) -> None:
        with self.changed:
            if self.role != ROLE_FOLLOWER:
                return
            if batches:
                first = batches[0][1]
                if first.base_offset != self.log.log_end_offset:
                    raise InvariantViolation(
                        f"{self.topic}-{self.partition}: follower got base offset {first.base_offset}, "
                        f"log end is {self.log.log_end_offset}"
                    )
                self.log.append_as_follower(batches, now_ms=now_ms)
                for _, header in batches:
                    self.epochs.assign(header.leader_epoch, header.base_offset)
            new_hw = min(leader_high_watermark, self.log.log_end_offset)
            if new_hw > self.high_watermark:
                self.high_watermark = new_hw
            self.changed.notify_all()

    def truncate_to(self, end_offset_exclusive: int) -> None:
        with self.changed:
            if end_offset_exclusive < self.log.log_end_offset:
                self.log.truncate_to(end_offset_exclusive)
                self.epochs.truncate_from_end(end_offset_exclusive)
            self.high_watermark = min(self.high_watermark, self.log.log_end_offset)
            self.changed.notify_all()
