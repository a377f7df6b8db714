"""The high watermark: which offsets are committed.

Rule (ARCHITECTURE.md invariant 2, Kafka 4.x with KIP-966):

    candidate = min(LEO of every member of the *maximal* ISR, the leader included)
    new HW    = max(old HW, candidate)   if len(committed ISR) >= min.insync.replicas
              = old HW                   otherwise

* Maximal ISR: while an ISR write is in flight the HW counts both the committed
  and the proposed members, so no answer from ZooKeeper can leave an ISR member
  behind the HW (Kafka's PendingExpandIsr/PendingShrinkIsr).
* A member whose LEO is unknown (no fetch yet in this leader epoch) holds the
  HW where it is.
* Never backwards: an ISR member that restarted and lost its tail makes the
  candidate smaller, but the HW stays; the leader removes that member (its
  broker epoch changed) and the controller removes it on re-registration.
* Below min ISR the HW freezes. This is the KIP-966 rule that makes "last
  replica standing" safe: every replica that left the ISR while it was below
  min ISR (the ELR) holds every committed record, so it can be elected.
  Interaction with producers: acks=all is refused before append
  (NOT_ENOUGH_REPLICAS). acks=1 and acks=0 are still appended and acks=1 is
  still acknowledged by the leader alone (that is what acks=1 promises), but
  those records are NOT committed and NOT visible to consumers until the ISR
  is back to min ISR and the followers have them. With min.insync.replicas=1
  nothing changes from classic Kafka: a lone leader commits on its own.
"""

from __future__ import annotations

from typing import Mapping

from ads_spark.replication.state import UNKNOWN_OFFSET, FollowerProgress, PartitionState, Role

def isr_log_ends(leader_id: int, leader_log_end_offset: int, isr: frozenset[int],
                 progress: Mapping[int, FollowerProgress]) -> list[int] | None:
    """The LEO of every member of ``isr``, the leader's first; None if a follower's LEO is unknown
    (no fetch yet in this leader epoch), which holds the HW where it is."""
    ends = [leader_log_end_offset]
    for replica in isr:
        if replica == leader_id:
            continue
        prog = progress.get(replica)
        if prog is None or prog.log_end_offset == UNKNOWN_OFFSET:
            return None
        ends.append(prog.log_end_offset)
    return ends


def candidate_high_watermark(leader_id: int, leader_log_end_offset: int, isr: frozenset[int],
                             progress: Mapping[int, FollowerProgress]) -> int:
    """Smallest LEO over ``isr`` (leader included): every member holds every offset below it.
    UNKNOWN_OFFSET if a member's LEO is unknown."""
    ends = isr_log_ends(leader_id, leader_log_end_offset, isr, progress)
    return UNKNOWN_OFFSET if ends is None else min(ends)


def may_advance(state: PartitionState) -> bool:
    """The HW moves only on an acknowledging leader whose committed ISR meets min ISR."""
    return (state.role is Role.LEADER and not state.fenced
            and len(state.isr) >= state.config.min_insync_replicas)


def next_high_watermark(state: PartitionState) -> int:
    """The leader's HW after its own or a follower's LEO moved, or the ISR changed."""
    if not may_advance(state):
        return state.high_watermark
    candidate = candidate_high_watermark(state.broker_id, state.log_end_offset, state.maximal_isr,
                                         state.progress)
    return max(state.high_watermark, min(candidate, state.log_end_offset))


def follower_high_watermark(current_hw: int, leader_hw: int, log_end_offset: int) -> int:
    """A follower's HW after a fetch response: the leader's, capped by what it has, never backwards."""
    return max(current_hw, min(leader_hw, log_end_offset))
