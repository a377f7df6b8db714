"""What the controller core decides over its state, and what it sends: pure functions of ``ControllerState``.

Owns the views the decisions in ``election`` / ``reassignment`` / ``assignment``
take (restarted ISR members left out, topic settings applied), the calls into
those rules for each kind of pass, and the bodies of the requests brokers
receive. ``controller`` (the dispatcher) calls everything here through the
module, so a mutation test can monkeypatch one function (``offline_decisions``,
``decision_views``, ``send_leader_and_isr``, ...) to plant a bug. No rule is
written here that those modules already hold.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any, Callable, Iterable, Mapping

from ads_spark.errors import ErrorCode, InvariantViolation
from ads_spark.replication import election
from ads_spark.replication.assignment import partitions_to_rebalance
from ads_spark.replication.controller_events import (
    Log, RecordUncleanApplied, ReplyToRequest, SendLeaderAndIsr, SendUpdateMetadata, WriteRejected,
)
from ads_spark.replication.controller_state import (
    ControllerState, Key, LogEnds, ReplyShutdown, TopicInfo,
)
from ads_spark.replication.election import Decision, PartitionView
from ads_spark.replication.state import NO_LEADER, LeaderAndIsr, evolve

# ---------------------------------------------------------------- views the decisions take


def partition_view(topic: TopicInfo, name: str, number: int, replicas: Iterable[int],
                   lai: LeaderAndIsr) -> PartitionView:
    """The pure decision input for one partition, from its topic (settings, observers) and state znode."""
    return PartitionView(name, number, tuple(int(r) for r in replicas),
                         tuple(int(r) for r in topic.observers.get(number, ())), lai,
                         min_insync_replicas=topic.settings.min_insync_replicas,
                         unclean_leader_election_enable=topic.settings.unclean_leader_election_enable)


def live_broker_epochs(state: ControllerState) -> dict[int, int]:
    return {b: reg.broker_epoch for b, reg in state.live.items() if reg.broker_epoch is not None}


def decision_view(state: ControllerState, view: PartitionView) -> PartitionView:
    """``decision_views`` of one view (so whatever replaces that function takes this one too)."""
    return decision_views(state, (view,))[0]


def decision_views(state: ControllerState, views: Iterable[PartitionView]) -> list[PartitionView]:
    """What decisions may take ``views`` as: without ISR members restarted since the ISR was written."""
    epochs = live_broker_epochs(state)
    return [election.without_restarted_members(view, epochs) for view in views]


def restarted_keys(state: ControllerState, keys: Iterable[Key]) -> tuple[Key, ...]:
    """Of ``keys``, partitions whose ISR names a member registered since under another broker epoch."""
    epochs = live_broker_epochs(state)
    return tuple(key for key in sorted(keys)
                 if key in state.views and election.restarted_members(state.views[key], epochs))


def unapplied_unclean_starts(state: ControllerState, brokers: Iterable[int],
                             applied: Mapping[int, str | None]) -> dict[int, str | None]:
    """Of ``brokers``, the live ones whose unclean start no controller has applied (``applied``: what
    ZooKeeper records per broker); broker id -> incarnation, sorted."""
    registered = {b: {"clean_shutdown": False, "incarnation": state.live[b].incarnation} for b in brokers
                  if b in state.live and not state.live[b].clean_shutdown}
    return election.unclean_starts_to_apply(registered, {b: applied.get(b) for b in registered})


# ---------------------------------------------------------------- decisions (pure, over the state)


def broker_change_decisions(state: ControllerState, views: list[PartitionView], failed: frozenset[int],
                            unclean: frozenset[int], log_ends: LogEnds | None) -> list[Decision]:
    """The pass over broker changes; it takes views as they are (it writes restarted members out)."""
    return election.on_brokers_changed(views, frozenset(state.live), failed, unclean_restarted=unclean,
                                       controller_epoch=state.epoch, log_ends=log_ends,
                                       live_broker_epochs=live_broker_epochs(state))


def offline_decisions(state: ControllerState, keys: Iterable[Key], log_ends: LogEnds | None,
                      recovery_timed_out: frozenset[Key] = frozenset()) -> list[Decision]:
    """A leader for every partition of ``keys`` whose leader is not live; none for one still offline.
    ``recovery_timed_out``: partitions whose unclean recovery waits only for their last known ELR."""
    live = frozenset(state.live)
    views = [view for view in decision_views(state, (state.views[key] for key in sorted(keys)))
             if view.state.leader not in live]
    decisions = []
    for view in views:
        key = (view.topic, view.partition)
        decision = election.elect(view, live, state.epoch, reason="offline partition",
                                  log_ends=election.ends_of(log_ends, key),
                                  recovery_timed_out=key in recovery_timed_out)
        if not (decision.new_state.leader == NO_LEADER and view.state.leader == NO_LEADER):
            decisions.append(decision)  # else still offline: nothing new to write
    return decisions


def recovery_waiting(state: ControllerState) -> dict[Key, Callable[[bool], frozenset[int]]]:
    """Offline partitions waiting for unclean recovery (ISR and ELR empty), sorted: key -> the replicas it
    waits for, given whether its wait timed out (``election.recovery_waits_for`` of its decision view)."""
    live = frozenset(state.live)
    # Offline ones only, before any view is built or sorted: this runs on every RecoveryTick, and a
    # decision view never changes the leader (it drops restarted ISR members alone).
    offline = sorted(key for key, view in state.views.items() if view.state.leader not in live)
    return {(view.topic, view.partition): partial(election.recovery_waits_for, view)
            for view in decision_views(state, (state.views[key] for key in offline))
            if election.recovery_waits_for(view)}


def requested_unclean_decisions(state: ControllerState, views: Mapping[Key, PartitionView],
                                log_ends: LogEnds | None) -> list[Decision]:
    """The decision for each leaderless partition of ``views``, unclean election allowed."""
    live = frozenset(state.live)
    offline = [replace(view, unclean_leader_election_enable=True) for view in views.values()
               if view.state.leader not in live]
    return [election.elect(view, live, state.epoch, reason="unclean election requested",
                           log_ends=(log_ends or {}).get((view.topic, view.partition))) for view in offline]


def elect_leaders_outcome(state: ControllerState, election_type: str, keys: Iterable[Key],
                          views: Mapping[Key, PartitionView], unclean: Mapping[Key, Decision]):
    """Per requested key its result item, and the decisions to write."""
    live = frozenset(state.live)
    results, decisions = [], []
    for key in keys:
        view = views.get(key)
        item: dict[str, Any] = {"topic": key[0], "partition": key[1], "error_code": 0}
        if view is None:
            item.update(error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), message="no such partition")
        elif election_type == "preferred":
            outcome = election.preferred_leader_election(view, live, state.epoch)
            if isinstance(outcome, ErrorCode):
                item.update(error_code=int(outcome), message=outcome.name)
            else:
                decisions.append(outcome)
        elif view.state.leader in live:
            item.update(error_code=int(ErrorCode.ELECTION_NOT_NEEDED), message="the partition has a leader")
        elif unclean[key].new_state.leader == NO_LEADER:
            item.update(error_code=int(ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE), message="no live replica")
        else:
            decisions.append(unclean[key])
        results.append(item)
    return results, decisions


def rebalance_keys(state: ControllerState) -> list[Key]:
    """auto.leader.rebalance.enable: partitions to move back to a preferred leader over the imbalance limit."""
    assignment = {key: view.replicas for key, view in state.views.items()}
    leaders = {key: view.state.leader for key, view in state.views.items()}
    return partitions_to_rebalance(assignment, leaders, state.live,
                                   state.config.leader_imbalance_per_broker_percentage)


def not_controller(state: ControllerState) -> dict[str, Any]:
    return {"error_code": int(ErrorCode.NOT_CONTROLLER), "message": f"broker {state.broker_id} is not the controller"}


def log_end_questions(state: ControllerState, keys: Iterable[Key]) -> tuple[tuple[int, dict[str, Any]], ...]:
    """Per live broker holding a non-observer replica of ``keys``, the replica-log-ends request body."""
    asked: dict[int, list[dict[str, Any]]] = {}
    for key in sorted(keys):
        view, topic = state.views[key], state.topics.get(key[0])
        for replica in view.replicas:
            if replica in state.live and replica not in view.observers:
                asked.setdefault(replica, []).append({
                    "topic": key[0], "partition": key[1], "topic_id": topic.topic_id if topic else "",
                    "config": topic.config if topic else {}})
    return tuple((broker_id, {"controller_epoch": state.epoch, "partitions": partitions})
                 for broker_id, partitions in sorted(asked.items()))


# ---------------------------------------------------------------- results of writes, replies


def take_write_results(state: ControllerState, decisions: tuple[Decision, ...], results,
                       out: list) -> tuple[ControllerState, set]:
    """Accepted decisions become the views (at their new partition epoch); a rejected one takes the state
    ZooKeeper holds now (a leader's ISR write won the race: decide again later)."""
    views, changed, unclean, recovered = dict(state.views), set(), 0, 0
    for decision, result in zip(decisions, results):
        key = (decision.topic, decision.partition)
        view = views[key]
        if isinstance(result, WriteRejected):
            if result.current is not None:
                views[key] = partition_view(state.topics[key[0]], key[0], key[1], view.replicas, result.current)
            continue
        if not isinstance(result, int) or isinstance(result, bool):
            raise InvariantViolation(f"controller: write result {result!r} for {key}")
        views[key] = evolve(view, state=evolve(decision.new_state, partition_epoch=result))
        changed.add(key)
        if decision.recovery:  # counted whether or not also unclean (ads_unclean_recovery_elections)
            recovered += 1
        if decision.unclean:
            unclean += 1
            out.append(Log("warning", f"controller: {key[0]}-{key[1]} {decision.reason}"))
        elif decision.recovery:
            out.append(Log("warning", f"controller: {key[0]}-{key[1]} leader {decision.new_state.leader} epoch "
                                      f"{decision.new_state.leader_epoch} ({decision.reason})"))
        else:
            out.append(Log("info", f"controller: {key[0]}-{key[1]} leader {decision.new_state.leader} epoch "
                                   f"{decision.new_state.leader_epoch} ({decision.reason})"))
    accepted = sum(1 for d in decisions if (d.topic, d.partition) in changed)
    return evolve(state, views=views, elections=state.elections + accepted,
                  unclean_elections=state.unclean_elections + unclean,
                  recovery_elections=state.recovery_elections + recovered), changed


def record_unclean_starts(record, views_before: Mapping[Key, PartitionView], written: set, out: list) -> None:
    """Record each unclean start whose decisions (those of the partitions naming it before) were all written."""
    for broker_id, incarnation in record:
        if incarnation is not None and election.unclean_start_recorded(broker_id, views_before.values(), written):
            out.append(RecordUncleanApplied(broker_id, incarnation))


def reply_shutdown(state: ControllerState, item: ReplyShutdown, out: list) -> None:
    still_led = sorted(key for key, view in state.views.items() if view.state.leader == item.broker_id)
    if item.refused:
        out.append(Log("warning", f"controller: controlled shutdown of {item.broker_id} refused for "
                                  f"{[f'{t}-{p}' for t, p in item.refused]} (min.insync.replicas)"))
    out.append(ReplyToRequest(item.request_id, {
        "error_code": 0, "partitions_remaining": [{"topic": t, "partition": p} for t, p in still_led],
        "refused": [{"topic": t, "partition": p} for t, p in item.refused]}))


# ---------------------------------------------------------------- what brokers are sent


def partition_json(state: ControllerState, view: PartitionView) -> dict[str, Any]:
    topic = state.topics[view.topic]
    return {"topic": view.topic, "partition": view.partition, "topic_id": topic.topic_id,
            "leader": view.state.leader, "leader_epoch": view.state.leader_epoch,
            "isr": list(view.state.isr), "elr": list(view.state.elr),
            "replicas": list(view.replicas), "observers": list(view.observers),
            "partition_epoch": view.state.partition_epoch,
            # The incarnations the last ISR write recorded: a new leader knows from them which member's
            # first fetch comes from a restarted broker, and its own writes keep them for members it has
            # not heard from yet.
            "isr_broker_epochs": [{"id": m, "broker_epoch": e} for m, e in view.state.isr_broker_epochs],
            "offline_replicas": [r for r in view.replicas if r not in state.live],
            "throttle_bytes_per_s": state.throttles.get((view.topic, view.partition)),
            "config": topic.config}


def brokers_json(state: ControllerState) -> list[dict[str, Any]]:
    """The live brokers as every request lists them (the registration's keys, as it held them)."""
    out = []
    for broker_id, reg in sorted(state.live.items()):
        entry: dict[str, Any] = {"id": broker_id}
        if reg.broker_epoch is not None:
            entry["broker_epoch"] = reg.broker_epoch
        entry.update(host=reg.host, metrics_port=reg.metrics_port, port=reg.port, rack=reg.rack)
        if reg.endpoints:
            entry["endpoints"] = reg.endpoints_json()
        out.append(entry)
    return out


def send_leader_and_isr(state: ControllerState, keys: Iterable[Key], only_brokers: frozenset[int] | None,
                        out: list) -> None:
    """One leader-and-isr per live replica or observer of ``keys`` (in ``only_brokers``), naming its broker
    epoch. An observer needs it as a replica does: it is what opens the partition there and points its
    fetcher at the leader; the entry's ``observers`` keeps it out of the ISR and of elections."""
    by_broker: dict[int, list[dict[str, Any]]] = {}
    for key in sorted(keys):
        view, entry = state.views[key], None
        for replica in (*view.replicas, *view.observers):
            if replica in state.live and (only_brokers is None or replica in only_brokers):
                entry = entry if entry is not None else partition_json(state, view)
                by_broker.setdefault(replica, []).append(entry)
    if not by_broker:
        return
    brokers = brokers_json(state)
    for broker_id, partitions in by_broker.items():
        out.append(SendLeaderAndIsr(broker_id, {
            "controller_id": state.broker_id, "controller_epoch": state.epoch, "partitions": partitions,
            "brokers": brokers, "broker_epoch": state.live[broker_id].epoch_or_unknown}))


def push_metadata(state: ControllerState, deleted: Iterable[str], out: list) -> None:
    """The full metadata, one body shared by every live broker."""
    if not state.live:
        return
    body = {"controller_id": state.broker_id, "controller_epoch": state.epoch, "full": True,
            "brokers": brokers_json(state), "deleted_topics": list(deleted),
            "partitions": [partition_json(state, state.views[key]) for key in sorted(state.views)]}
    for broker_id in state.live:
        out.append(SendUpdateMetadata(broker_id, body))
