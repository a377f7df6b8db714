"""Partition reassignment decisions, pure (Kafka KIP-455's shape).

A reassignment of a partition from its replicas ORS to target replicas TRS goes
through two steps, each a conditional write by the controller:

1. ``begin``: the replica set becomes TRS followed by ORS - TRS (new replicas
   first, so a later preferred election prefers them), with ``adding`` = TRS - ORS
   and ``removing`` = ORS - TRS recorded. New replicas start as followers outside
   the ISR and catch up; their leader admits them to the ISR once they reach its HW.
2. ``complete`` (once every TRS member is in the ISR): the ISR keeps only TRS
   members, leadership moves to the first in-sync TRS member if the current leader
   is being removed (a new leader epoch), and the replica set becomes TRS. Removed
   replicas are then stopped and deleted.

Old replicas leave only after the new ones are in sync, so the partition never
has fewer in-sync copies than it started with; a reassignment never lowers the
ISR below what it was, and it never elects an out-of-sync replica.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Sequence

from ads_spark.errors import ErrorCode
from ads_spark.replication.election import Decision, PartitionView, _decide
from ads_spark.replication.state import NO_LEADER


@dataclass(frozen=True, slots=True)
class Plan:
    """What ``begin`` decided for one partition."""

    replicas: tuple[int, ...]  # TRS + (ORS - TRS) while the reassignment runs
    adding: tuple[int, ...]
    removing: tuple[int, ...]


def validate(target: Sequence[int], live: Iterable[int], observers: Iterable[int] = ()) -> ErrorCode:
    """NONE if ``target`` is a usable replica list (distinct, non-empty, all registered brokers, none of them
    one of the partition's ``observers``)."""
    if not target or len(set(target)) != len(target):
        return ErrorCode.INVALID_REPLICA_ASSIGNMENT
    if set(target) - set(live):
        return ErrorCode.INVALID_REPLICA_ASSIGNMENT
    if observers_among(target, observers):
        return ErrorCode.INVALID_REPLICA_ASSIGNMENT
    return ErrorCode.NONE


def observers_among(target: Sequence[int], observers: Iterable[int]) -> tuple[int, ...]:
    """The target replicas that are observers of the partition, in target order. A broker holds one role per
    partition (topic creation refuses both too): as a replica it would join the ISR and elections that the
    observer role keeps it out of."""
    observing = set(observers)
    return tuple(r for r in target if r in observing)


def begin(current: Sequence[int], target: Sequence[int]) -> Plan:
    adding = tuple(r for r in target if r not in current)
    removing = tuple(r for r in current if r not in target)
    return Plan(tuple(target) + removing, adding, removing)


def announce(view: PartitionView, controller_epoch: int) -> Decision:
    """The state write that starts a move: same leader, ISR and leader epoch, a new partition epoch.

    Brokers apply a leader-and-isr only when its partition epoch is newer, so this
    is what makes the leader track (and later admit) the added replicas.
    """
    state = view.state
    return _decide(view, frozenset(state.isr), frozenset(state.elr), state.leader, False, controller_epoch, False,
                   "reassignment started")


def caught_up(view: PartitionView, target: Sequence[int]) -> bool:
    """Every target replica is in the ISR (the leader admitted it after it reached the HW)."""
    return set(target) <= set(view.state.isr)


def complete(view: PartitionView, target: Sequence[int], live: frozenset[int],
             controller_epoch: int) -> Decision | None:
    """The state write that ends the reassignment, or None while a target replica is not in sync."""
    if not caught_up(view, target):
        return None
    isr = frozenset(view.state.isr) & set(target)
    elr = frozenset(view.state.elr) & set(target)
    leader = view.state.leader
    if leader in target and leader in live:
        return _decide(replace(view, replicas=tuple(target)), isr, elr, leader, False, controller_epoch, False,
                       "reassignment completed")
    new_leader = next((r for r in target if r in isr and r in live), NO_LEADER)
    if new_leader == NO_LEADER:
        return None  # no live in-sync target replica right now: try again on the next change
    return _decide(replace(view, replicas=tuple(target)), isr, elr, new_leader, True, controller_epoch, False,
                   "reassignment completed: leadership moves to a target replica")
