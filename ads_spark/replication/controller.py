"""The controller core: ``step(state, event) -> (state, effects)``, its decisions and their sequencing.

Owns what the ZooKeeper-mode controller decides and in which order it writes and
sends, with no I/O (etcd raft's Step/Ready, h11): the broker's shell reads
ZooKeeper, steps what it read as an event, and carries out the returned effects
in order; tests/sim drives the same core against a model ZooKeeper. The rules
themselves stay in ``election``, ``reassignment`` and ``assignment``; this module
only feeds them views and turns their decisions into writes and requests.

Sequencing: an event handler queues small work items (``controller_state``);
``step`` drains them in order. An item that needs ZooKeeper or the brokers in the
middle of a decision (write partition states, ask log ends, read new topics,
write an assignment) ends the step with that request as the last effect and
leaves ``state.awaiting``; the shell's answer event resumes the drain. Any other
event while a request is out is an ``InvariantViolation`` (only
``LostLeadership`` / ``ControllerFailed`` may interrupt, and drop the rest).

The modules: ``controller_state`` (state, config, work items), ``controller_events``
(events, effects, the shell contract), ``controller_decisions`` (the views and
calls into the rules, the bodies sent), ``controller_reassign`` (the reassignment
work items) and this dispatcher. Every function is
module-level and small, and this module calls ``controller_decisions`` through
the module, so a mutation test may monkeypatch one (e.g.
``controller_decisions.offline_decisions``) to plant a bug.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping

from ads_spark.errors import ErrorCode, InvariantViolation
from ads_spark.replication import controller_decisions as decide
from ads_spark.replication import controller_reassign as reassign
from ads_spark.replication import election
from ads_spark.replication.controller_events import (
    ANSWERS, REQUESTS, AskLogEnds, AssignmentWritten, BrokersChanged, ChannelOverflowed, CloseChannels,
    ControlledShutdownRequested, ControllerFailed, DeleteTopicZnodes, Elected, ElectLeadersRequested,
    Event, IsrChanged, Log, LogEndsAnswered, LostLeadership, PartitionStatesWritten, ReadTopics, RebalanceTick,
    ReassignmentRequested, RecoveryTick, Reloaded, ReplyToRequest, Resign, SendStopReplica, Snapshot,
    TopicConfigsChanged,
    TopicDeletionsRequested, TopicsChanged, TopicsRead, WriteAssignment, WritePartitionStates, WriteRejected,
)
from ads_spark.replication.controller_state import (
    PASS_RETRIES_MAX,
    ApplyDecisions, ApplyTopicConfig, AwaitingAssignment, AwaitingLogEnds, AwaitingTopics, AwaitingWrite,
    BeginApplied, CompleteReassignments, CompletionApplied, ControllerState, ElectLeaders, ElectOffline, Emit, Key,
    PassOverBrokers, PushMetadata, Reply, ReplyShutdown, RequestAssignment, SendPartitions, StartReassignments,
    TopicInfo, check_invariants, queue_first,
)
from ads_spark.replication.election import Decision, PartitionView
from ads_spark.replication.state import LeaderAndIsr, evolve

_ANSWER_TO = {AwaitingWrite: PartitionStatesWritten, AwaitingLogEnds: LogEndsAnswered, AwaitingTopics: TopicsRead,
              AwaitingAssignment: AssignmentWritten}

# ---------------------------------------------------------------- the dispatcher


def step(state: ControllerState, event: Event) -> tuple[ControllerState, list]:
    """Apply one event; returns the new state and the effects to carry out in order."""
    _check_sequence(state, event)
    out: list = []
    match event:
        case Elected():
            new = on_elected(state, event, out)
        case Reloaded():
            new = reload(state, event.snapshot, out)
        case LostLeadership():
            if state.active:
                out.append(Log("warning", f"broker {state.broker_id} lost the controller role (session loss?)"))
            out.append(CloseChannels(None))  # what they still queue was decided under the lost term
            new = evolve(state, active=False, pending=(), awaiting=None)
        case ControllerFailed():
            out.extend((CloseChannels(None), Resign()))
            new = evolve(state, active=False, pending=(), awaiting=None)
        case BrokersChanged():
            new = on_brokers_changed(state, event, out)
        case TopicsChanged():
            new = on_topics_changed(state, event, out)
        case IsrChanged():
            new = on_isr_changed(state, event)
        case TopicDeletionsRequested():
            new = on_topic_deletions(state, event, out)
        case TopicConfigsChanged():
            new = on_topic_configs(state, event)
        case ReassignmentRequested():
            new = state if not state.active or event.request is None else queue_first(state, reassign.start_item(event.request))
        case RebalanceTick():
            new = on_rebalance_tick(state, out)
        case RecoveryTick():
            new = on_recovery_tick(state, event)
        case ControlledShutdownRequested():
            new = on_controlled_shutdown(state, event, out)
        case ElectLeadersRequested():
            new = on_elect_leaders(state, event, out)
        case ChannelOverflowed():
            new = on_channel_overflowed(state, event, out)
        case PartitionStatesWritten():
            new = on_states_written(state, event, out)
        case LogEndsAnswered():
            new = on_log_ends(state, event, out)
        case TopicsRead():
            new = on_topics_read(state, event)
        case AssignmentWritten():
            new = queue_first(evolve(state, awaiting=None), *state.awaiting.then)
        case _:
            raise InvariantViolation(f"controller: unknown event {event!r}")
    new = _drain(new, out)
    if new is not state:
        check_invariants(new)
        if new.awaiting is not None and not isinstance(out[-1], REQUESTS):
            raise InvariantViolation(f"controller: awaiting an answer, but the last effect is {out[-1]!r}")
    return new, out


def _check_sequence(state: ControllerState, event: Event) -> None:
    """Only the awaited answer may follow a request (or a loss of the role); an answer needs a request."""
    if isinstance(event, (LostLeadership, ControllerFailed)):
        return
    if state.awaiting is not None and not isinstance(event, _ANSWER_TO[type(state.awaiting)]):
        raise InvariantViolation(f"controller: {type(event).__name__} stepped while awaiting "
                                 f"{_ANSWER_TO[type(state.awaiting)].__name__}; answer each request first")
    if state.awaiting is None and isinstance(event, ANSWERS):
        raise InvariantViolation(f"controller: {type(event).__name__} answers no request")


def _request(state: ControllerState, effect, continuation, out: list) -> ControllerState:
    out.append(effect)
    return evolve(state, awaiting=continuation)


def _drain(state: ControllerState, out: list) -> ControllerState:
    """Run pending work in order until none is left or an item issued a request."""
    while state.pending and state.awaiting is None:
        item = state.pending[0]
        state = run_item(evolve(state, pending=state.pending[1:]), item, out)
    return state


def run_item(state: ControllerState, item, out: list) -> ControllerState:
    match item:
        case PassOverBrokers():
            return run_pass_over_brokers(state, item, out)
        case ElectOffline():
            return run_elect_offline(state, item, out)
        case ElectLeaders():
            return run_elect_leaders(state, item, out)
        case ApplyDecisions():
            return run_apply_decisions(state, item, out)
        case SendPartitions():
            keys = state.views if item.keys is None else item.keys
            decide.send_leader_and_isr(state, keys, item.only_brokers, out)
        case PushMetadata():
            decide.push_metadata(state, item.deleted, out)
        case Emit():
            out.extend(item.effects)
        case ApplyTopicConfig():
            return run_apply_topic_config(state, item)
        case StartReassignments():
            return reassign.run_start_reassignments(state, item, out)
        case BeginApplied():
            return reassign.run_begin_applied(state, item, out)
        case CompleteReassignments():
            return reassign.run_complete_reassignments(state, item, out)
        case RequestAssignment():
            key = item.key
            return _request(state, WriteAssignment(key[0], key[1], item.replicas, item.adding, item.removing,
                                                   state.epoch_version), AwaitingAssignment(item.then), out)
        case CompletionApplied():
            return reassign.run_completion_applied(state, item, out)
        case ReplyShutdown():
            decide.reply_shutdown(state, item, out)
        case Reply():
            out.append(ReplyToRequest(item.request_id, item.response))
        case _:
            raise InvariantViolation(f"controller: unknown work item {item!r}")
    return state


# ---------------------------------------------------------------- event handlers


def on_elected(state: ControllerState, event: Elected, out: list) -> ControllerState:
    """A new term: the moves and throttles of any earlier one are forgotten; ZooKeeper's request (in the
    snapshot) starts them again, so a move another controller finished or refused meanwhile is not kept."""
    state = evolve(state, active=True, epoch=event.epoch, epoch_version=event.epoch_version, pending=(),
                   awaiting=None, reassignments={}, throttles={})
    out.append(CloseChannels(None))  # queued under an older term
    out.append(Log("info", f"broker {state.broker_id} is the controller (epoch {state.epoch})"))
    return reload(state, event.snapshot, out)


def reload(state: ControllerState, snapshot: Snapshot, out: list) -> ControllerState:
    """Everything from ZooKeeper: every unregistered ISR member or leader counts as failed (it may have died
    while no controller watched), as do live brokers with an unapplied unclean start; one batched pass."""
    if not state.active:
        return state
    topics, views = loaded_topics(state, {}, {}, snapshot.topics, snapshot.states)
    state = evolve(state, live=snapshot.live, topics=topics, views=views)
    named = {b for view in views.values() for b in (*view.state.isr, view.state.leader) if b >= 0}
    unclean = decide.unapplied_unclean_starts(state, state.live, snapshot.unclean_applied)
    failed = frozenset(named - set(state.live)) | frozenset(unclean)
    items = [PassOverBrokers(failed, tuple(unclean.items())), PushMetadata(), SendPartitions()]
    if snapshot.reassignment is not None:
        items.append(reassign.start_item(snapshot.reassignment))  # resume one a previous controller left running
    return queue_first(state, *items)


def loaded_topics(state: ControllerState, topics: Mapping[str, TopicInfo], views: Mapping[Key, PartitionView],
                  found: Mapping[str, TopicInfo | None], states: Mapping[Key, LeaderAndIsr]):
    """New topic and view maps: ``topics``/``views`` with the ``found`` topics loaded, in order.

    A topic already in ``topics`` (the same incarnation) gains only the partitions it lacks (a partition
    increase): the others keep their view and assignment, which may be ahead of what was read (a write or
    a reassignment in flight)."""
    topics, views = dict(topics), dict(views)
    for name, topic in found.items():
        if topic is None:
            continue
        known = topics.get(name)
        added = dict(topic.assignment)
        if known is not None and known.topic_id == topic.topic_id:
            added = {p: r for p, r in topic.assignment.items() if p not in known.assignment}
            topic = replace(known, assignment={**known.assignment, **added},
                            observers={**known.observers, **{p: o for p, o in topic.observers.items() if p in added}})
        topics[name] = topic
        for number, replicas in added.items():
            lai = states.get((name, number))
            if lai is not None:  # else created without a state (should not happen): nothing to lead yet
                views[(name, number)] = decide.partition_view(topic, name, number, replicas, lai)
    return topics, views


def on_brokers_changed(state: ControllerState, event: BrokersChanged, out: list) -> ControllerState:
    if not state.active:
        return state
    before, live = state.live, event.live
    gone = {b for b in before if b not in live or live[b].broker_epoch != before[b].broker_epoch}
    arrived = {b for b in live if b not in before or b in gone}
    state = evolve(state, live=live)
    if gone:
        out.append(Log("info", f"controller: brokers gone {sorted(gone)}"))
        out.append(CloseChannels(frozenset(gone)))
    # Back after an unclean shutdown (KIP-966): it may have lost its unflushed tail, so it leaves every
    # ELR too and leads again only after rejoining the ISR.
    unclean = decide.unapplied_unclean_starts(state, arrived, event.unclean_applied)
    items: list = [PassOverBrokers(frozenset(gone | set(unclean)), tuple(unclean.items())), PushMetadata()]
    if arrived:
        items += [Emit((Log("info", f"controller: brokers arrived {sorted(arrived)}"),)),
                  SendPartitions(None, frozenset(arrived)), ElectOffline(None)]
    return queue_first(state, *items)


def on_topics_changed(state: ControllerState, event: TopicsChanged, out: list) -> ControllerState:
    """New topics are read; so are known ones named in ``grown`` (partitions added), for the new partitions."""
    if not state.active:
        return state
    grown = {name for name in event.grown if name in state.topics and name in event.names}
    names = tuple(sorted((set(event.names) - set(state.topics)) | grown))
    if not names:
        return queue_first(state, PushMetadata())
    return _request(state, ReadTopics(names), AwaitingTopics(names), out)


def on_topics_read(state: ControllerState, event: TopicsRead) -> ControllerState:
    names = state.awaiting.names
    topics, views = loaded_topics(state, state.topics, state.views, {n: event.topics.get(n) for n in names},
                                  event.states)
    read = set(names)
    # Only partitions without a view before: a known topic's existing partitions are neither elected nor re-sent.
    keys = tuple(sorted(key for key in views if key[0] in read and key not in state.views))
    state = evolve(state, awaiting=None, topics=topics, views=views)
    return queue_first(state, ElectOffline(keys), SendPartitions(keys), PushMetadata())


def on_isr_changed(state: ControllerState, event: IsrChanged) -> ControllerState:
    if not state.active:
        return state
    keys = tuple(key for key in event.keys if key in state.views)
    views = dict(state.views)
    for key in keys:
        lai = event.states.get(key)
        if lai is not None:
            views[key] = evolve(views[key], state=lai)
    state = evolve(state, views=views)
    # A leader's write adding a member can land after that member restarted (simulation seed 1034869):
    # the pass over broker changes, with none failed, writes it out over these partitions only.
    restarted = decide.restarted_keys(state, keys)
    items = [PassOverBrokers(frozenset(), (), restarted)] if restarted else []
    return queue_first(state, *items, CompleteReassignments(), PushMetadata())


def on_topic_deletions(state: ControllerState, event: TopicDeletionsRequested, out: list) -> ControllerState:
    if not state.active:
        return state
    for name in event.names:
        keys = [key for key in state.views if key[0] == name]
        by_broker: dict[int, list[dict]] = {}
        for key in keys:
            view = state.views[key]
            for replica in (*view.replicas, *view.observers):  # observers hold a copy too
                by_broker.setdefault(replica, []).append({"topic": key[0], "partition": key[1], "delete": True})
        for broker_id, partitions in by_broker.items():
            if broker_id in state.live:
                out.append(SendStopReplica(broker_id, {"controller_epoch": state.epoch, "partitions": partitions}))
        out.append(DeleteTopicZnodes(name))
        state = evolve(state, views={k: v for k, v in state.views.items() if k[0] != name},
                       topics={n: t for n, t in state.topics.items() if n != name})
        decide.push_metadata(state, (name,), out)
    return state


def on_topic_configs(state: ControllerState, event: TopicConfigsChanged) -> ControllerState:
    if not state.active:
        return state
    missing = [name for name in event.configs if name not in event.settings]
    if missing:
        raise InvariantViolation(f"controller: config change of {missing} without their settings")
    items = [ApplyTopicConfig(name, config if config is not None else {}, event.settings[name])
             for name, config in event.configs.items() if name in state.topics]
    return queue_first(state, *items, PushMetadata())


def on_rebalance_tick(state: ControllerState, out: list) -> ControllerState:
    if not state.active or not state.config.auto_leader_rebalance_enable:
        return state
    keys = decide.rebalance_keys(state)
    if not keys:
        return state
    out.append(Log("info", f"controller: leader imbalance; preferred election for {len(keys)} partitions"))
    return queue_first(state, ElectLeaders(None, "preferred", tuple(keys)))


def on_recovery_tick(state: ControllerState, event: RecoveryTick) -> ControllerState:
    """Decide again the partitions unclean recovery could lead now but for a missing log end; past
    unclean.recovery.timeout.ms of waiting, with their last known ELR alone."""
    if not state.active:
        return state
    waiting = decide.recovery_waiting(state)
    since = {key: state.recovery_waiting_since_ms.get(key, event.now_ms) for key in waiting}
    timed_out = frozenset(key for key in waiting
                          if event.now_ms - since[key] >= state.config.unclean_recovery_timeout_ms)
    state = evolve(state, recovery_waiting_since_ms=since)
    keys = tuple(key for key, waits_for in waiting.items()
                 if waits_for(key in timed_out) <= frozenset(state.live))
    if not keys:
        return state
    return queue_first(state, ElectOffline(keys, recovery_timed_out=tuple(sorted(timed_out & set(keys)))))


def on_controlled_shutdown(state: ControllerState, event: ControlledShutdownRequested, out: list) -> ControllerState:
    """Move leadership off the broker and take it out of ISRs, never below min ISR unless forced."""
    if not state.active:
        out.append(ReplyToRequest(event.request_id, decide.not_controller(state)))
        return state
    registration = state.live.get(event.broker_id)
    if registration is None or registration.epoch_or_unknown != event.broker_epoch:
        out.append(ReplyToRequest(event.request_id, {
            "error_code": int(ErrorCode.STALE_BROKER_EPOCH),
            "message": f"broker {event.broker_id} epoch {event.broker_epoch} is not the registered incarnation"}))
        return state
    views = decide.decision_views(state, (v for v in state.views.values() if event.broker_id in v.replicas))
    plan = election.controlled_shutdown(views, event.broker_id, frozenset(state.live), state.epoch, force=event.force)
    return queue_first(state, ApplyDecisions(plan.decisions), PushMetadata(),
                  ReplyShutdown(event.request_id, event.broker_id, plan.refused))


def on_elect_leaders(state: ControllerState, event: ElectLeadersRequested, out: list) -> ControllerState:
    if not state.active:
        out.append(ReplyToRequest(event.request_id, decide.not_controller(state)))
        return state
    keys = None if event.keys is None else tuple(tuple(key) for key in event.keys)
    return queue_first(state, ElectLeaders(event.request_id, event.election_type, keys))


def on_channel_overflowed(state: ControllerState, event: ChannelOverflowed, out: list) -> ControllerState:
    if state.active and event.broker_id in state.live:
        decide.push_metadata(state, (), out)
        decide.send_leader_and_isr(state, state.views, frozenset({event.broker_id}), out)
    return state


# ---------------------------------------------------------------- work items


def _ask_or_none(state: ControllerState, item, decisions: list[Decision], out: list) -> ControllerState | None:
    """The first time ``decisions`` elect uncleanly or by unclean recovery (KIP-966) anywhere, ask those
    partitions' live non-observer replicas where their logs end; ``item`` runs again with the answers
    (a recovery decision made without them is a placeholder, never written)."""
    if item.log_ends is not None or not any(d.unclean or d.recovery for d in decisions):
        return None
    questions = decide.log_end_questions(state, {(d.topic, d.partition) for d in decisions
                                                 if d.unclean or d.recovery})
    if not questions:
        out.append(Log("info", "controller: replica log ends before an unclean election or recovery: {}"))
        return queue_first(state, replace(item, log_ends={}))
    return _request(state, AskLogEnds(questions), AwaitingLogEnds(item), out)


def on_log_ends(state: ControllerState, event: LogEndsAnswered, out: list) -> ControllerState:
    found = event.found if event.found is not None else {}
    out.append(Log("info", f"controller: replica log ends before an unclean election or recovery: {dict(found)}"))
    return queue_first(evolve(state, awaiting=None), replace(state.awaiting.item, log_ends=found))


def run_pass_over_brokers(state: ControllerState, item: PassOverBrokers, out: list) -> ControllerState:
    views = list(state.views.values()) if item.keys is None else [state.views[key] for key in item.keys]
    decisions = decide.broker_change_decisions(state, views, item.failed, frozenset(b for b, _ in item.unclean),
                                        item.log_ends)
    asked = _ask_or_none(state, item, decisions, out)
    return asked if asked is not None else queue_first(state, ApplyDecisions(tuple(decisions), item.unclean, retry=item))


def run_elect_offline(state: ControllerState, item: ElectOffline, out: list) -> ControllerState:
    keys = item.keys
    if keys is None:
        keys = tuple(key for key, view in state.views.items() if view.state.leader < 0)
    decisions = decide.offline_decisions(state, keys, item.log_ends, frozenset(item.recovery_timed_out))
    asked = _ask_or_none(state, item, decisions, out)
    return asked if asked is not None else queue_first(state, ApplyDecisions(tuple(decisions)))


def run_elect_leaders(state: ControllerState, item: ElectLeaders, out: list) -> ControllerState:
    """Preferred: move to the in-sync preferred replica. Unclean: lead a leaderless partition from any replica."""
    keys = tuple(sorted(state.views)) if item.keys is None else item.keys
    present = [key for key in keys if key in state.views]
    views = dict(zip(present, decide.decision_views(state, (state.views[key] for key in present))))
    unclean: dict[Key, Decision] = {}
    if item.election_type != "preferred":
        decisions = decide.requested_unclean_decisions(state, views, item.log_ends)
        asked = _ask_or_none(state, item, decisions, out)
        if asked is not None:
            return asked
        unclean = {(d.topic, d.partition): d for d in decisions}
    results, decisions = decide.elect_leaders_outcome(state, item.election_type, keys, views, unclean)
    items: list = [ApplyDecisions(tuple(decisions))]
    if decisions:
        items.append(PushMetadata())
    if item.request_id is not None:
        items.append(Reply(item.request_id, {"error_code": 0, "partitions": results}))
    return queue_first(state, *items)


def run_apply_decisions(state: ControllerState, item: ApplyDecisions, out: list) -> ControllerState:
    """Write every decision in one fenced batch; the answer keeps those accepted and sends them."""
    if not item.decisions:
        decide.record_unclean_starts(item.record_unclean, state.views, set(), out)
        return state
    return _request(state, WritePartitionStates(state.epoch, state.epoch_version, item.decisions),
                    AwaitingWrite(item.decisions, item.record_unclean, state.views, item.if_written, item.retry),
                    out)


def on_states_written(state: ControllerState, event: PartitionStatesWritten, out: list) -> ControllerState:
    written = state.awaiting
    if len(event.results) != len(written.decisions):
        raise InvariantViolation(f"controller: {len(event.results)} results for {len(written.decisions)} writes")
    state, changed = decide.take_write_results(evolve(state, awaiting=None), written.decisions, event.results, out)
    decide.send_leader_and_isr(state, changed, None, out)
    decide.record_unclean_starts(written.record_unclean, written.views_before, changed, out)
    if all((d.topic, d.partition) in changed for d in written.decisions):
        state = queue_first(state, *written.if_written)
    raced = tuple(sorted((d.topic, d.partition) for d, result in zip(written.decisions, event.results)
                         if isinstance(result, WriteRejected) and result.current is not None))
    if written.retry is not None and raced:
        if written.retry.retries < PASS_RETRIES_MAX:
            state = queue_first(state, _retry_pass(written.retry, raced, written.views_before))
        else:
            out.append(Log("warning", f"controller: the pass over broker changes lost {PASS_RETRIES_MAX + 1} races "
                                      f"for {list(raced)}; the next broker or ISR change decides them"))
    return state


def _retry_pass(item: PassOverBrokers, raced: tuple[Key, ...], views_before) -> PassOverBrokers:
    """The pass over broker changes again, over the partitions whose write a leader's ISR write beat, from
    the state that write left (the views took it), as Kafka's controller retries a conflicted write.
    Deciding them "later" left a failed broker or an unclean start applied to some partitions only, until
    the next controller: the simulation (seed 1030387) had a broker back from a crash, its log short of the
    HW, stay in an ELR, electable. Only the unclean starts those partitions named are left to record."""
    named = {b for key in raced for b in (*views_before[key].state.isr, *views_before[key].state.elr)}
    return replace(item, keys=raced, unclean=tuple((b, inc) for b, inc in item.unclean if b in named),
                   retries=item.retries + 1)


def run_apply_topic_config(state: ControllerState, item: ApplyTopicConfig) -> ControllerState:
    state = evolve(state, topics={**state.topics, item.name: replace(state.topics[item.name], config=item.config,
                                                                     settings=item.settings)})
    views, keys = dict(state.views), []
    for key, view in state.views.items():
        if key[0] == item.name:
            views[key] = replace(view, min_insync_replicas=item.settings.min_insync_replicas,
                                 unclean_leader_election_enable=item.settings.unclean_leader_election_enable)
            keys.append(key)
    # An offline partition may now be electable (e.g. unclean election was enabled).
    return queue_first(evolve(state, views=views), ElectOffline(tuple(keys)))
