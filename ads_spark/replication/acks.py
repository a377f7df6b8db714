"""acks and min.insync.replicas: when a produce may append and when it is answered.

The matrix (reference 001), as decided here:

=====  ==========  =================================================================
acks   min ISR     behaviour
=====  ==========  =================================================================
0      any         appended if leader; no answer is awaited (the broker replies nothing)
1      any         appended if leader; answered NONE right after the leader's append
all    1           answered when HW > last offset; ISR may be the leader alone
all    2 (RF 3)    NOT_ENOUGH_REPLICAS before append if len(ISR) < 2
all    3 (RF 3)    NOT_ENOUGH_REPLICAS before append unless all 3 are in sync
=====  ==========  =================================================================

After append, an acks=all request waits in purgatory (``PendingProduce``) and
is answered NONE once the HW passes its last offset, NOT_ENOUGH_REPLICAS_AFTER_APPEND
as soon as the committed ISR falls below min ISR (the HW is then frozen, see
hw.py), NOT_LEADER_OR_FOLLOWER if leadership is lost, REQUEST_TIMED_OUT at its
deadline. All functions here are pure functions over the pending list.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from ads_spark.errors import ErrorCode
from ads_spark.replication.state import PartitionState, PendingProduce


class Acks(IntEnum):
    NONE = 0
    LEADER = 1
    ALL = -1


@dataclass(frozen=True, slots=True)
class Completion:
    request_id: int
    error: ErrorCode
    base_offset: int  # -1 when nothing was appended


def check_before_append(state: PartitionState, acks: int) -> ErrorCode:
    """NONE if a produce with ``acks`` may append on this replica now."""
    if acks not in (Acks.NONE, Acks.LEADER, Acks.ALL):
        return ErrorCode.INVALID_REQUIRED_ACKS
    if not state.is_leader:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    if acks == Acks.ALL and len(state.isr) < state.config.min_insync_replicas:
        return ErrorCode.NOT_ENOUGH_REPLICAS
    return ErrorCode.NONE


def add_pending(pending: tuple[PendingProduce, ...], request: PendingProduce) -> tuple[PendingProduce, ...]:
    return tuple(sorted(pending + (request,), key=lambda p: (p.last_offset, p.request_id)))


def complete(pending: tuple[PendingProduce, ...], high_watermark: int, isr_size: int,
             min_insync_replicas: int, now_ms: int) -> tuple[tuple[PendingProduce, ...], list[Completion]]:
    """Answer every pending request that can be answered now; return the rest."""
    done: list[Completion] = []
    rest: list[PendingProduce] = []
    for p in pending:
        if high_watermark > p.last_offset:
            done.append(Completion(p.request_id, ErrorCode.NONE, p.base_offset))
        elif isr_size < min_insync_replicas:
            done.append(Completion(p.request_id, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, p.base_offset))
        elif now_ms >= p.deadline_ms:
            done.append(Completion(p.request_id, ErrorCode.REQUEST_TIMED_OUT, p.base_offset))
        else:
            rest.append(p)
    return tuple(rest), done


def fail_all(pending: tuple[PendingProduce, ...], error: ErrorCode) -> list[Completion]:
    """Leadership was lost or fenced: nothing pending may be acknowledged any more."""
    return [Completion(p.request_id, error, p.base_offset) for p in pending]
