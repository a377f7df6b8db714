"""Role transitions of a partition replica, written once.

::

                 BecomeLeader(e)                     BecomeFollower(e)
        +-------------------------> LEADER <------------------------+
        |                     (same e, newer partition epoch:       |
        |                      refresh ISR; newer e: re-elected)    |
      NONE                            |  ^                          |
        |                 BecomeFollower(e' > e)  BecomeLeader(e' > e)
        |                             v  |                          |
        +-------------------------> FOLLOWER -----------------------+
                 BecomeFollower(e)   (newer e: new leader)

      any role --StopReplica--> NONE

A LEADER whose ISR write was refused because a newer leader exists is
``fenced``: still LEADER until the controller says otherwise, but it answers
produces with NOT_LEADER_OR_FOLLOWER and never moves its HW again.

Rules every transition obeys:
* a leader epoch older than the one known is refused (FENCED_LEADER_EPOCH);
  the same epoch is accepted only with a newer partition epoch (an ISR
  refresh) or as an idempotent repeat;
* leaving LEADER fails every pending produce with NOT_LEADER_OR_FOLLOWER;
* becoming LEADER appends (epoch, LEO) to the epoch cache, resets follower
  progress (LEO unknown, caught up "now" for ISR members) and may advance the
  HW at once when the ISR is the leader alone;
* becoming FOLLOWER truncates nothing: truncation happens on the first fetch
  response's diverging epoch (epochs.py), never to a possibly stale HW.
"""

from __future__ import annotations

from dataclasses import dataclass

from ads_spark.errors import ErrorCode
from ads_spark.replication import acks, epochs
from ads_spark.replication.state import FollowerProgress, LeaderAndIsr, PartitionState, Role, evolve


@dataclass(frozen=True, slots=True)
class Refusal:
    error: ErrorCode
    message: str


def check_leader_and_isr(state: PartitionState, lai: LeaderAndIsr) -> Refusal | None:
    """None if the controller's ``lai`` is news for this replica; otherwise why it is refused."""
    if lai.leader_epoch < state.leader_epoch:
        return Refusal(ErrorCode.FENCED_LEADER_EPOCH,
                       f"leader epoch {lai.leader_epoch} is older than known {state.leader_epoch}")
    if lai.leader_epoch == state.leader_epoch and lai.partition_epoch <= state.partition_epoch:
        return Refusal(ErrorCode.NONE, "already applied")
    return None


def become_leader(state: PartitionState, lai: LeaderAndIsr, replicas: tuple[int, ...],
                  observers: tuple[int, ...], now_ms: int) -> tuple[PartitionState, list[acks.Completion]]:
    same_term = state.role is Role.LEADER and lai.leader_epoch == state.leader_epoch and not state.fenced
    if same_term:
        # An ISR refresh from the controller (e.g. it removed a dead follower): keep progress.
        # Replicas added by a reassignment start with fresh progress (not caught up, not in the ISR).
        progress = {r: state.progress.get(r, FollowerProgress(last_caught_up_ms=now_ms, last_fetch_ms=now_ms))
                    for r in (*replicas, *observers) if r != state.broker_id}
        return evolve(state, isr=frozenset(lai.isr), elr=frozenset(lai.elr), partition_epoch=lai.partition_epoch,
                      replicas=replicas, observers=observers, progress=progress, pending_isr=None,
                      recorded_broker_epochs=lai.isr_broker_epochs), []
    failed = acks.fail_all(state.pending_produces, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    followers = [r for r in (*replicas, *observers) if r != state.broker_id]
    progress = {r: FollowerProgress(last_caught_up_ms=now_ms, last_fetch_ms=now_ms) for r in followers}
    new = evolve(
        state, role=Role.LEADER, leader=state.broker_id, leader_epoch=lai.leader_epoch,
        partition_epoch=lai.partition_epoch, replicas=replicas, observers=observers,
        isr=frozenset(lai.isr), elr=frozenset(lai.elr), recorded_broker_epochs=lai.isr_broker_epochs,
        epochs=epochs.assign(state.epochs, lai.leader_epoch, state.log_end_offset),
        progress=progress, pending_isr=None, pending_produces=(), fenced=False,
        leader_epoch_start_offset=state.log_end_offset,
    )
    return new, failed


def become_follower(state: PartitionState, lai: LeaderAndIsr, replicas: tuple[int, ...],
                    observers: tuple[int, ...]) -> tuple[PartitionState, list[acks.Completion]]:
    failed = acks.fail_all(state.pending_produces, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    new = evolve(
        state, role=Role.FOLLOWER, leader=lai.leader, leader_epoch=lai.leader_epoch,
        partition_epoch=lai.partition_epoch, replicas=replicas, observers=observers,
        isr=frozenset(lai.isr), elr=frozenset(lai.elr), progress={}, pending_isr=None,
        pending_produces=(), fenced=False, recorded_broker_epochs=lai.isr_broker_epochs,
    )
    return new, failed


def stop(state: PartitionState) -> tuple[PartitionState, list[acks.Completion]]:
    failed = acks.fail_all(state.pending_produces, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    return evolve(state, role=Role.NONE, progress={}, pending_isr=None, pending_produces=(), fenced=False), failed


def fence(state: PartitionState) -> tuple[PartitionState, list[acks.Completion]]:
    """A newer leader exists: stop acknowledging until the controller's update arrives."""
    failed = acks.fail_all(state.pending_produces, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    return evolve(state, fenced=True, pending_isr=None, pending_produces=()), failed
