"""The environment around the real controller core: the simulated controller IS ``replication.controller``.

The core (``step(state, event) -> (state, effects)``) decides everything a
controller decides; this module supplies only what the broker's controller shell
(broker/controller/) supplies around it, on the model's ZooKeeper (``SimZk``),
network (``SimNet``) and clock, following the contract in
``replication/controller_events.py``:

* the election: each broker process has its own core (``ControllerNode``); the
  lowest reachable registered broker wins an empty /controller (epoch and epoch
  version bumped) and steps ``Elected`` with a ``Snapshot`` read from SimZk as
  zk_reads.py reads ZooKeeper. A node whose broker reaches ZooKeeper and finds
  /controller held by another session steps ``LostLeadership``;
* watches become events, read only while the core is active, only when its broker
  reaches ZooKeeper: registrations changed since it last looked ->
  ``BrokersChanged``; pending ISR change notifications (taken) -> ``IsrChanged``;
* effects, as effects.py carries them out: partition-state writes conditional on
  each znode's version and fenced by the controller epoch version (a fenced batch
  fails the step: ``ControllerFailed``); log ends asked of the replicas the
  controller reaches now; sends queued on one ``SimChannel`` per broker
  registration, which delivers as channel.py's sender thread does, in simulated
  time; unclean starts recorded in SimZk; ``Resign`` empties /controller;
  replies kept for whoever asked (controlled shutdown, elect leaders);
* the brokers' side of those requests (control_handlers.py): every request fenced
  by ``replication/fencing.py``, a leader-and-isr body applied entry by entry
  through the simulated broker's ``apply_leader_and_isr_entry`` (the real
  ``Partition.apply_leader_and_isr``), a log-ends question answered from the
  partition's state as the handler answers it.

A controller whose broker cannot reach ZooKeeper steps nothing (no watch, no
election) until it can again; its channels keep delivering what they hold, as
the real sender threads do, and a process's crash takes its controller with it.

The channel's timers are the real ones (channel.py, effects.py) scaled by the
simulated session timeout over the broker's default one, the one scale the model's
clock runs at for everything the controller waits on.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from dataclasses import dataclass
from typing import Any, Mapping

from ads_spark.broker.controller.channel import QUEUE_MAX, RETRY_BACKOFF_MAX_S, RETRY_BACKOFF_S
from ads_spark.broker.controller.controller import UNCLEAN_RECOVERY_RETRY_S
from ads_spark.broker.controller.effects import BROKER_REQUEST_TIMEOUT_MS
from ads_spark.broker.controller.zk_reads import topic_settings
from ads_spark.broker.rpc.control_handlers import log_end_of
from ads_spark.config import BROKER_KEYS, TOPIC_KEYS
from ads_spark.errors import ErrorCode
from ads_spark.protocol import wire
from ads_spark.replication import controller as core
from ads_spark.replication import fencing
from ads_spark.replication.controller_events import (
    AskLogEnds, BrokersChanged, ChannelOverflowed, ClearReassignment, CloseChannels, ControlledShutdownRequested,
    ControllerFailed, Elected, ElectLeadersRequested, IsrChanged, Log, LogEndsAnswered, LostLeadership,
    PartitionStatesWritten, ReadTopics, RecordUncleanApplied, RecoveryTick, ReplyToRequest, Resign, SendLeaderAndIsr,
    SendStopReplica, SendUpdateMetadata, Snapshot, TopicsRead, WritePartitionStates, WriteRejected, log_ends_found,
)
from ads_spark.replication.controller_state import (
    BrokerRegistration, ControllerConfig, ControllerState, TopicInfo, initial_state, offline_partition_count,
)

TOPIC = "t"
TOPIC_ID = "sim-topic-t"
SEND_ACTIONS = {SendLeaderAndIsr: wire.ACTION_LEADER_AND_ISR, SendUpdateMetadata: wire.ACTION_UPDATE_METADATA,
                SendStopReplica: wire.ACTION_STOP_REPLICA}
DEFAULT_SESSION_TIMEOUT_MS = BROKER_KEYS["zookeeper.session.timeout.ms"].default
TOPIC_DEFAULTS = {name: key.default for name, key in TOPIC_KEYS.items()}


def scaled_ms(real_ms: float, session_timeout_ms: int) -> int:
    """A broker's duration on the model's clock (at least 1 ms)."""
    return max(1, math.ceil(real_ms * session_timeout_ms / DEFAULT_SESSION_TIMEOUT_MS))


# ------------------------------------------------------------------ messages


@dataclass(frozen=True)
class ControlRequest:
    """One attempt of a channel's request, controller -> broker; ``number`` names the attempt."""

    action: str
    body: Mapping[str, Any]
    number: int
    reply_to: tuple[int, int]  # (controller's broker, its incarnation): where the answer goes


@dataclass(frozen=True)
class ControlAnswer:
    number: int
    error: ErrorCode  # NONE, or why the broker refused (the real call then raises: the channel retries)


class _Fenced(Exception):
    """A partition-state write of a deposed controller (StaleControllerEpochError)."""


# ------------------------------------------------------------------ the broker side (control_handlers.py)


def answer_control_request(broker, msg: ControlRequest) -> None:
    """As the broker's control handlers: fence the request, obey it, answer (a refusal is an error)."""
    error = obey(broker, msg.action, msg.body)
    c = broker.c
    c.net.send(c.now, broker.id, msg.reply_to[0], ControlAnswer(msg.number, error), msg.reply_to[1])


def obey(broker, action: str, body: Mapping[str, Any]) -> ErrorCode:
    """Fencing (KIP-380, ``fencing.check_control_request``), then the request's effect on this broker."""
    addressed = action == wire.ACTION_LEADER_AND_ISR
    verdict = fencing.check_control_request(broker.controller_epoch_seen, body["controller_epoch"],
                                            request_broker_epoch=body.get("broker_epoch") if addressed else None,
                                            current_broker_epoch=broker.broker_epoch)
    if not verdict.obeyed:
        return verdict.error
    broker.controller_epoch_seen = verdict.controller_epoch
    if addressed:
        for entry in body["partitions"]:
            broker.apply_leader_and_isr_entry(entry)
    # update_metadata: the simulated clients find leaders in SimZk, so no broker keeps a metadata cache;
    # stop_replica: the assignment never changes here, so the core never sends one.
    return ErrorCode.NONE


def log_ends_answer(broker, body: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The broker's replica_log_ends answer's "partitions" (None: it refused the request)."""
    verdict = fencing.check_control_request(broker.controller_epoch_seen, body["controller_epoch"])
    if not verdict.obeyed:
        return None
    broker.controller_epoch_seen = verdict.controller_epoch
    items = []
    for entry in body["partitions"]:
        items.append({"topic": entry["topic"], "partition": entry["partition"], "error_code": 0,
                      **log_end_of(broker.partitions[int(entry["partition"])].state)})
    return items


# ------------------------------------------------------------------ the request channel (channel.py)


class SimChannel:
    """``BrokerRequestChannel`` on the model's clock: requests to one registration of one broker, in order.

    The head is sent; an attempt fails when its answer is a refusal or has not come within the request
    timeout; after failed attempt n the channel waits ``RETRY_BACKOFF_S * n`` (at most
    ``RETRY_BACKOFF_MAX_S``) and tries again, until the head is delivered or the channel closes."""

    def __init__(self, node: "ControllerNode", key: tuple[int, int]):
        self.node, self.key = node, key
        self.queue: deque[tuple[str, Mapping[str, Any]]] = deque()
        self.attempts = 0  # attempts made at the head
        self.waiting: int | None = None  # the attempt whose answer is awaited
        self.deadline_ms = 0
        self.next_try_ms = 0
        self.closed = False

    def send(self, action: str, body: Mapping[str, Any]) -> None:
        if self.closed:
            return
        if len(self.queue) >= QUEUE_MAX:
            self.queue.clear()
            self.waiting, self.attempts = None, 0
            self.node.overflowed.append(self.key[0])
        self.queue.append((action, body))

    def close(self) -> None:
        self.closed = True
        self.queue.clear()
        self.waiting = None

    def pump(self, now: int) -> None:
        if self.waiting is not None:
            if now < self.deadline_ms:
                return
            self._failed(now)  # no answer within the request timeout
        if not self.queue or now < self.next_try_ms or self.closed:
            return
        env, (action, body) = self.node.env, self.queue[0]
        broker = env.c.brokers[self.key[0]]
        self.attempts += 1
        self.waiting = next(env.attempt_numbers)
        self.deadline_ms = now + env.request_timeout_ms
        env.awaited[self.waiting] = self
        owner = env.c.brokers[self.node.broker_id]
        env.c.net.send(now, owner.id, broker.id, ControlRequest(action, body, self.waiting,
                                                                (owner.id, owner.incarnation)), broker.incarnation)

    def on_answer(self, answer: ControlAnswer, now: int) -> None:
        if answer.number != self.waiting or self.closed:
            return  # the answer to an attempt already given up on
        if answer.error is ErrorCode.NONE:
            self.queue.popleft()
            self.waiting, self.attempts, self.next_try_ms = None, 0, now
        else:
            self._failed(now)

    def _failed(self, now: int) -> None:
        self.waiting = None
        self.next_try_ms = now + self.node.env.backoff_ms(self.attempts)


# ------------------------------------------------------------------ one broker process's controller


class ControllerNode:
    """The controller role of one broker process: its core state, channels and the replies it gave."""

    def __init__(self, env: "ControllerEnv", broker_id: int, incarnation: int, config: ControllerConfig):
        self.env, self.broker_id, self.incarnation = env, broker_id, incarnation
        self.state: ControllerState = initial_state(broker_id, config)
        self.seen = -1  # SimZk.brokers_version when the core last read the registrations
        self.channels: dict[int, SimChannel] = {}
        self.overflowed: list[int] = []
        self.replies: dict[Any, Mapping[str, Any]] = {}

    @property
    def broker(self):
        return self.env.c.brokers[self.broker_id]

    def reaches_zk(self) -> bool:
        return self.broker.zk_reachable()

    def holds_controller(self) -> bool:
        return self.env.c.zk.controller == (self.broker_id, self.broker.session)

    # ---- stepping the core (broker/controller/controller.py's _drive and _fail)

    def drive(self, event) -> None:
        """Step ``event``, carry out its effects in order, step each request's answer at once."""
        while event is not None:
            try:
                self.state, effects = core.step(self.state, event)
            except Exception as exc:  # the shell resigns; here it is also a bug in the core
                self.env.c.checker.fail("the controller core never raises", f"{type(event).__name__}: {exc!r}")
                self._fail()
                return
            event = None
            for effect in effects:
                try:
                    answer = self.execute(effect)
                except _Fenced:
                    self._fail()
                    return
                if answer is not None:
                    event = answer  # a request is always the last effect of its step
        while self.overflowed:
            self.drive(ChannelOverflowed(self.overflowed.pop(0)))

    def _fail(self) -> None:
        self.state, effects = core.step(self.state, ControllerFailed("simulated failure"))
        for effect in effects:
            self.execute(effect)

    def execute(self, effect):
        """Carry out one effect (effects.py's ``EffectRunner.execute``); a request's answer event, else None."""
        zk = self.env.c.zk
        match effect:
            case SendLeaderAndIsr() | SendUpdateMetadata() | SendStopReplica():
                registration = self.state.live[effect.broker_id]
                self.channel(effect.broker_id, registration.epoch_or_unknown).send(SEND_ACTIONS[type(effect)],
                                                                                   effect.body)
            case CloseChannels():
                self.close_channels(effect.broker_ids)
            case RecordUncleanApplied():
                zk.unclean_applied[effect.broker_id] = effect.incarnation
            case ReplyToRequest():
                self.replies[effect.request_id] = effect.response
            case Resign():
                if self.holds_controller():
                    zk.controller = None  # the election runs again at the next step
            case Log() | ClearReassignment():
                pass  # no reassignment request is ever written here
            case WritePartitionStates():
                return self.write_partition_states(effect)
            case AskLogEnds():
                return self.ask_log_ends(effect)
            case ReadTopics():
                return TopicsRead(*self.env.topics_and_states(effect.names))
            case _:
                raise AssertionError(f"the simulation cannot carry out {effect!r}")
        return None

    def channel(self, broker_id: int, broker_epoch: int) -> SimChannel:
        """The channel to this registration of the broker (one to an earlier one is closed: effects.Channels)."""
        channel = self.channels.get(broker_id)
        if channel is None or channel.key != (broker_id, broker_epoch):
            if channel is not None:
                channel.close()
            channel = self.channels[broker_id] = SimChannel(self, (broker_id, broker_epoch))
        return channel

    def close_channels(self, broker_ids=None) -> None:
        for broker_id in list(self.channels) if broker_ids is None else list(broker_ids):
            channel = self.channels.pop(broker_id, None)
            if channel is not None:
                channel.close()

    def write_partition_states(self, effect: WritePartitionStates) -> PartitionStatesWritten:
        """One batch, fenced by the controller epoch version, each write conditional on its znode version."""
        zk, checker = self.env.c.zk, self.env.c.checker
        if zk.controller_epoch_version != effect.controller_epoch_version:
            raise _Fenced()
        results: list[int | WriteRejected] = []
        for d in effect.decisions:
            written = zk.write_partition_state(d.partition, d.new_state, d.expected_partition_epoch,
                                               effect.controller_epoch)
            if written is None:
                results.append(WriteRejected(zk.partitions.get(d.partition)))
            else:
                checker.on_election(d)
                results.append(written.partition_epoch)
        return PartitionStatesWritten(tuple(results))

    def ask_log_ends(self, effect: AskLogEnds) -> LogEndsAnswered:
        """Each asked broker the controller reaches now answers; one it cannot reach, or that refuses, is
        left out (the real question times out or fails)."""
        c, answers = self.env.c, {}
        for broker_id, body in effect.asks:
            broker = c.brokers.get(broker_id)
            if (broker_id not in self.state.live or broker is None or not broker.alive
                    or c.net.blocked(self.broker_id, broker_id) or c.net.blocked(broker_id, self.broker_id)):
                continue
            items = log_ends_answer(broker, body)
            if items is not None:
                answers[broker_id] = items
        return LogEndsAnswered(log_ends_found(answers))

    def pump(self, now: int) -> None:
        for channel in self.channels.values():  # a pump never opens or closes a channel
            if channel.queue:
                channel.pump(now)

    # ---- watches (only while active, only when the broker reaches ZooKeeper)

    def watch(self) -> None:
        zk = self.env.c.zk
        if zk.brokers_version != self.seen:
            self.seen = zk.brokers_version
            live = self.env.live()
            self.drive(BrokersChanged(live, self.env.unclean_applied(live)))
        if zk.isr_changes and self.state.active:
            keys = tuple(sorted({(TOPIC, p) for p in zk.isr_changes}))
            zk.isr_changes.clear()
            self.drive(IsrChanged(keys, {key: zk.partitions[key[1]] for key in keys if key in self.state.views}))


# ------------------------------------------------------------------ the cluster's controllers


class ControllerEnv:
    """Every broker process's controller node, the /controller election, and the answers in transit."""

    def __init__(self, cluster):
        self.c = cluster
        cfg = cluster.cfg
        self.nodes: dict[int, ControllerNode] = {}
        # No rebalance timer is simulated; unclean.recovery.timeout.ms's default on the model's clock.
        self.config = ControllerConfig(auto_leader_rebalance_enable=False, unclean_recovery_timeout_ms=scaled_ms(
            BROKER_KEYS["unclean.recovery.timeout.ms"].default, cfg.session_timeout_ms))
        self.settings = topic_settings(TOPIC_DEFAULTS, self.topic_config(), TOPIC)
        self.request_timeout_ms = scaled_ms(BROKER_REQUEST_TIMEOUT_MS, cfg.session_timeout_ms)
        self._backoff_ms: dict[int, int] = {}
        self.attempt_numbers = itertools.count(1)
        self.awaited: dict[int, SimChannel] = {}
        self.request_ids = itertools.count(1)
        # The shell's unclean-recovery timer (controller.py's UNCLEAN_RECOVERY_RETRY_S), scaled.
        self.recovery_tick_ms = scaled_ms(UNCLEAN_RECOVERY_RETRY_S * 1000, cfg.session_timeout_ms)
        self.next_recovery_tick_ms = self.recovery_tick_ms

    def backoff_ms(self, attempt: int) -> int:
        """The wait after failed attempt ``attempt`` (channel.py's, scaled)."""
        if attempt not in self._backoff_ms:
            self._backoff_ms[attempt] = scaled_ms(min(RETRY_BACKOFF_S * attempt, RETRY_BACKOFF_MAX_S) * 1000,
                                                  self.c.cfg.session_timeout_ms)
        return self._backoff_ms[attempt]

    def topic_config(self) -> dict[str, str]:
        cfg = self.c.cfg
        return {"min.insync.replicas": str(cfg.min_insync_replicas),
                "unclean.leader.election.enable": "true" if cfg.unclean else "false"}

    # ---- reads (zk_reads.py)

    def live(self) -> dict[int, BrokerRegistration]:
        return {b: BrokerRegistration(f"sim-{b}", 9000 + b, broker_epoch=r.broker_epoch, clean_shutdown=r.clean,
                                      incarnation=str(r.incarnation))
                for b, r in sorted(self.c.zk.brokers.items())}

    def unclean_applied(self, live: Mapping[int, BrokerRegistration]) -> dict[int, str | None]:
        return {b: self.c.zk.unclean_applied.get(b) for b, reg in live.items() if not reg.clean_shutdown}

    def topics_and_states(self, names=(TOPIC,)):
        zk = self.c.zk
        topics = {name: TopicInfo(TOPIC_ID, dict(zk.assignment), config=self.topic_config(), settings=self.settings)
                  if name == TOPIC else None for name in names}
        states = {(TOPIC, p): lai for p, lai in sorted(zk.partitions.items())} if TOPIC in names else {}
        return topics, states

    def snapshot(self) -> Snapshot:
        live = self.live()
        topics, states = self.topics_and_states()
        return Snapshot(live, topics, states, self.unclean_applied(live), None)

    # ---- each step of the cluster

    def step(self, now: int) -> None:
        nodes = self.nodes.values()  # only _elect adds a node, between the two loops
        for node in nodes:
            if node.state.active and not node.holds_controller() and node.reaches_zk():
                node.drive(LostLeadership())
        if self.c.zk.controller is None:
            self._elect()
        holder = self.holder()
        if holder is not None and holder.state.active and holder.reaches_zk():
            holder.watch()
            if now >= self.next_recovery_tick_ms:
                self.next_recovery_tick_ms = now + self.recovery_tick_ms
                if offline_partition_count(holder.state):
                    holder.drive(RecoveryTick(now))
        for node in nodes:
            if node.channels:
                node.pump(now)

    def _elect(self) -> None:
        zk = self.c.zk
        candidates = [b for b in self.c.brokers.values()
                      if b.zk_reachable() and b.session in zk.sessions and b.broker_epoch > 0]
        if not candidates:
            return
        chosen = min(candidates, key=lambda b: b.id)
        zk.controller = (chosen.id, chosen.session)
        zk.controller_epoch += 1
        zk.controller_epoch_version += 1
        node = self.nodes.get(chosen.id)
        if node is None:
            node = self.nodes[chosen.id] = ControllerNode(self, chosen.id, chosen.incarnation, self.config)
        snapshot = self.snapshot()
        node.seen = zk.brokers_version
        node.drive(Elected(zk.controller_epoch, zk.controller_epoch_version, snapshot))

    def holder(self) -> ControllerNode | None:
        """The node whose broker's session holds /controller (it may not have noticed a loss yet)."""
        held = self.c.zk.controller
        node = self.nodes.get(held[0]) if held is not None else None
        return node if node is not None and node.holds_controller() else None

    def active_state(self) -> ControllerState | None:
        """The core state of the controller that holds /controller now, if it is active."""
        node = self.holder()
        return node.state if node is not None and node.state.active else None

    def on_answer(self, answer: ControlAnswer) -> None:
        channel = self.awaited.pop(answer.number, None)
        if channel is not None:
            channel.on_answer(answer, self.c.now)

    def on_crash(self, broker_id: int) -> None:
        """The process died: its controller, channels and all, with it."""
        node = self.nodes.pop(broker_id, None)
        if node is not None:
            node.close_channels()

    # ---- admin requests

    def controlled_shutdown(self, broker_id: int, force: bool = False) -> Mapping[str, Any] | None:
        """Ask the controller to move leadership off ``broker_id``; its reply (None: no controller reached)."""
        registration = self.c.zk.brokers.get(broker_id)
        if registration is None:
            return None
        return self._request(lambda request_id: ControlledShutdownRequested(request_id, broker_id,
                                                                            registration.broker_epoch, force))

    def elect_leaders(self, election_type: str, keys=None) -> Mapping[str, Any] | None:
        """An admin elect-leaders request ("preferred" or "unclean"); its reply (None: no controller reached)."""
        return self._request(lambda request_id: ElectLeadersRequested(request_id, election_type, keys))

    def _request(self, make) -> Mapping[str, Any] | None:
        """Step an admin request on the active controller (controller.py's ``_request``) and take its reply."""
        holder = self.holder()
        if holder is None or not holder.state.active or not holder.reaches_zk():
            return None
        request_id = next(self.request_ids)
        holder.drive(make(request_id))
        return holder.replies.pop(request_id, None)
