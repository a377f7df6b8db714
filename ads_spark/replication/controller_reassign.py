"""The controller core's reassignment work items: KIP-455's two writes per move, as ``controller`` runs them.

Owns the runners of ``StartReassignments`` (an assignment write with the larger replica set per valid
move, then one announcing state write), ``BeginApplied``, ``CompleteReassignments`` (a state write per
move whose target is in sync, then the final assignment write) and ``CompletionApplied``. The rules
themselves are ``reassignment``'s; ``controller`` dispatches here as to its other runners, and calls
``controller_decisions`` through the module (a mutation test may monkeypatch it).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from ads_spark.errors import ErrorCode
from ads_spark.replication import controller_decisions as decide
from ads_spark.replication import reassignment
from ads_spark.replication.controller_events import ClearReassignment, Log, SendStopReplica
from ads_spark.replication.controller_state import (
    ApplyDecisions, BeginApplied, CompleteReassignments, CompletionApplied, ControllerState, RequestAssignment,
    StartReassignments, queue_first,
)
from ads_spark.replication.state import evolve



def start_item(request: Mapping[str, Any]) -> StartReassignments:
    """The work that starts every move named in /admin/reassign_partitions (Kafka's JSON)."""
    return StartReassignments(tuple(request.get("partitions", [])), request.get("throttle_bytes_per_s"))


def run_start_reassignments(state: ControllerState, item: StartReassignments, out: list) -> ControllerState:
    """Begin the next valid move from ``item.index`` (an assignment write); at the end announce them all."""
    for index in range(item.index, len(item.items)):
        entry = item.items[index]
        key, target = (str(entry["topic"]), int(entry["partition"])), tuple(int(r) for r in entry["replicas"])
        view = state.views.get(key)
        if view is None or key in state.reassignments:
            continue
        if reassignment.validate(target, state.live, view.observers) is not ErrorCode.NONE:
            out.append(Log("warning", f"controller: reassignment of {key[0]}-{key[1]} to {target} refused "
                                      "(brokers not all alive, or one is an observer of the partition)"))
            continue
        plan = reassignment.begin(view.replicas, target)
        then = (BeginApplied(key, target, plan.replicas, view.replicas, item.throttle),
                replace(item, index=index + 1, started=item.started + (key,)))
        return queue_first(state, RequestAssignment(key, plan.replicas, plan.adding, plan.removing, then))
    # A state write (new partition epoch) makes the leader take the larger replica set.
    announced = tuple(reassignment.announce(state.views[key], state.epoch) for key in item.started)
    return queue_first(state, ApplyDecisions(announced), CompleteReassignments(request_seen=True))


def run_begin_applied(state: ControllerState, item: BeginApplied, out: list) -> ControllerState:
    key = item.key
    throttles = {**state.throttles, key: int(item.throttle)} if item.throttle else state.throttles
    out.append(Log("info", f"controller: reassigning {key[0]}-{key[1]} from {list(item.old_replicas)} to "
                           f"{list(item.target)}"))
    return evolve(state, views={**state.views, key: replace(state.views[key], replicas=item.replicas)},
                  reassignments={**state.reassignments, key: item.target}, throttles=throttles)


def run_complete_reassignments(state: ControllerState, item: CompleteReassignments, out: list) -> ControllerState:
    """Finish the next move whose new replicas are all in sync; clear the request when none is left."""
    remaining = item.remaining
    if remaining is None:
        if not state.reassignments and not item.request_seen:
            return state
        remaining = tuple(state.reassignments.items())
    live = frozenset(state.live)
    for index, (key, target) in enumerate(remaining):
        view = state.views.get(key)
        decision = None if view is None else reassignment.complete(decide.decision_view(state, view), target,
                                                                   live, state.epoch)
        if decision is None:
            continue
        removed = tuple(r for r in view.replicas if r not in target)
        # The final assignment only once the state write is accepted: if a leader's ISR write won the race,
        # the move stays open and the next ISR change (that write sent one) tries to complete it again.
        finish = RequestAssignment(key, target, (), (), (CompletionApplied(key, target, removed),))
        return queue_first(state, ApplyDecisions((decision,), if_written=(finish,)),
                      replace(item, remaining=remaining[index + 1:]))
    if not state.reassignments:
        out.append(ClearReassignment())  # every move named in it is done (or was refused)
    decide.push_metadata(state, (), out)
    return state


def run_completion_applied(state: ControllerState, item: CompletionApplied, out: list) -> ControllerState:
    key = item.key
    state = evolve(state, views={**state.views, key: replace(state.views[key], replicas=item.target)},
                   reassignments={k: v for k, v in state.reassignments.items() if k != key},
                   throttles={k: v for k, v in state.throttles.items() if k != key})
    for broker_id in item.removed:
        if broker_id in state.live:
            out.append(SendStopReplica(broker_id, {"controller_epoch": state.epoch, "partitions": [
                {"topic": key[0], "partition": key[1], "delete": True}]}))
    decide.send_leader_and_isr(state, (key,), None, out)
    out.append(Log("info", f"controller: reassignment of {key[0]}-{key[1]} to {list(item.target)} completed"))
    return state


