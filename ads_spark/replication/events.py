"""The events a partition replica's state machine takes and the effects it returns (values only).

``partition.step`` consumes an ``Event`` and returns ``Effect``s; the broker
shell produces the events from requests, fetch responses, ZooKeeper answers and
time, and carries out the effects (see ``partition.py``'s docstring for the
contract). Kept apart from the dispatcher so each file reads in one sitting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from ads_spark.errors import ErrorCode
from ads_spark.replication.state import BatchInfo, LeaderAndIsr, PartitionConfig

# ---------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class BecomeLeader:
    """leader-and-isr from the controller naming this broker leader (or refreshing its ISR)."""

    leader_and_isr: LeaderAndIsr
    replicas: tuple[int, ...]
    observers: tuple[int, ...]
    now_ms: int


@dataclass(frozen=True, slots=True)
class BecomeFollower:
    leader_and_isr: LeaderAndIsr
    replicas: tuple[int, ...]
    observers: tuple[int, ...]
    now_ms: int


@dataclass(frozen=True, slots=True)
class StopReplica:
    now_ms: int


@dataclass(frozen=True, slots=True)
class Produce:
    """A producer's batch arrived at this broker (checked here, appended by the broker)."""

    request_id: int
    acks: int  # 0, 1 or -1 (all)
    record_count: int
    timeout_ms: int
    now_ms: int
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1


@dataclass(frozen=True, slots=True)
class FollowerFetch:
    """A follower's (or observer's) fetch arrived at the leader."""

    replica_id: int
    broker_epoch: int
    current_leader_epoch: int  # the sender's view
    fetch_offset: int  # the follower has every offset below this
    last_fetched_epoch: int  # latest epoch in the follower's cache, epochs.UNDEFINED_EPOCH if empty
    now_ms: int


@dataclass(frozen=True, slots=True)
class FetchResponse:
    """The leader's answer to this follower's fetch, with the batches it carried."""

    leader_epoch: int
    # Echoes of the request's: the follower's log position (end offset, latest epoch) the answer is
    # about. An answer to any other position is stale and dropped, whatever its leader epoch.
    fetch_offset: int
    last_fetched_epoch: int
    error: ErrorCode
    high_watermark: int
    log_start_offset: int
    batches: tuple[BatchInfo, ...] = ()  # contiguous from fetch_offset
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset exclusive)
    now_ms: int = 0


@dataclass(frozen=True, slots=True)
class Tick:
    now_ms: int


@dataclass(frozen=True, slots=True)
class IsrUpdateAccepted:
    leader_and_isr: LeaderAndIsr  # as written, with the new partition epoch
    now_ms: int


@dataclass(frozen=True, slots=True)
class IsrUpdateRejected:
    """The conditional write failed; ``current`` is the znode re-read, None if ZooKeeper was unreachable."""

    current: LeaderAndIsr | None
    now_ms: int


@dataclass(frozen=True, slots=True)
class LogStartAdvanced:
    """Retention (or a delete-records request) removed every offset below ``log_start_offset``."""

    log_start_offset: int  # never past the HW: only committed records are deleted
    now_ms: int


@dataclass(frozen=True, slots=True)
class ConfigChanged:
    """A topic config change (min.insync.replicas, unclean election, ...) applied without restart."""

    config: PartitionConfig
    now_ms: int


Event = Union[BecomeLeader, BecomeFollower, StopReplica, Produce, FollowerFetch, FetchResponse, Tick,
              IsrUpdateAccepted, IsrUpdateRejected, LogStartAdvanced, ConfigChanged]

# --------------------------------------------------------------- effects


@dataclass(frozen=True, slots=True)
class AppendAsLeader:
    """Write the produce batch of ``request_id`` at ``base_offset`` stamped with ``leader_epoch``."""

    request_id: int
    base_offset: int
    record_count: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class AppendFetched:
    """Append these batches of the fetch response (already checked to continue the log)."""

    batches: tuple[BatchInfo, ...]


@dataclass(frozen=True, slots=True)
class Truncate:
    """Remove every record at or after ``end_offset_exclusive``."""

    end_offset_exclusive: int
    below_high_watermark: bool  # committed records removed: only after an unclean election; report it


@dataclass(frozen=True, slots=True)
class ResetLog:
    """Delete the whole log and restart it empty at ``start_offset`` (follower behind leader's log start)."""

    start_offset: int


@dataclass(frozen=True, slots=True)
class HighWatermarkChanged:
    high_watermark: int


@dataclass(frozen=True, slots=True)
class EpochCacheChanged:
    pairs: tuple[tuple[int, int], ...]  # (epoch, start offset), to persist as leader-epoch-checkpoint


@dataclass(frozen=True, slots=True)
class ProduceCompleted:
    request_id: int
    error: ErrorCode
    base_offset: int  # -1 if not appended


@dataclass(frozen=True, slots=True)
class ReplyFetch:
    """Answer a follower fetch: send whole batches in [fetch_offset, read_end_offset_exclusive) if error is NONE."""

    replica_id: int
    error: ErrorCode
    leader_epoch: int
    fetch_offset: int  # with last_fetched_epoch: echoes of the request, for the FetchResponse
    last_fetched_epoch: int
    read_end_offset_exclusive: int
    high_watermark: int
    log_start_offset: int
    diverging_epoch: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class ProposeIsr:
    """Write ``proposed`` to the state znode if its version is still ``expected_partition_epoch``."""

    proposed: LeaderAndIsr
    expected_partition_epoch: int


@dataclass(frozen=True, slots=True)
class LeaderAndIsrRefused:
    """The controller's request was stale; answer it with ``error`` (NONE: already applied)."""

    error: ErrorCode
    message: str


Effect = Union[AppendAsLeader, AppendFetched, Truncate, ResetLog, HighWatermarkChanged, EpochCacheChanged,
               ProduceCompleted, ReplyFetch, ProposeIsr, LeaderAndIsrRefused]


