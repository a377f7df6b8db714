"""The controller runtime: one broker at a time turns ZooKeeper changes into leadership.

Every broker runs a ``Controller``; only the one that holds ``/controller`` is
active. The active controller processes events one at a time from a bounded
queue (ZooKeeper watches only enqueue), decides with pure functions from
``ads_spark.replication``, writes partition states to ZooKeeper fenced by its
controller epoch, and then pushes the result to brokers in batches: one
leader-and-isr request per affected broker and one metadata update per live
broker, however many partitions changed.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import Future, TimeoutError as FutureTimeout
from dataclasses import replace
from typing import Any, Callable

from ads_spark.protocol import wire
from ads_spark.protocol.connection import Connections
from ads_spark.errors import ErrorCode
from ads_spark.replication.assignment import assign_replicas, partitions_to_rebalance
from ads_spark.broker.controller.channel import BrokerRequestChannel
from ads_spark.broker.controller.reassign import ReassignmentRuntime
from ads_spark.broker.controller.candidates import CandidateChecks
from ads_spark.replication import election
from ads_spark.replication.election import Decision, PartitionView
from ads_spark.broker.zk.model import PartitionStateZnode
from ads_spark.replication.state import NO_LEADER

log = logging.getLogger("ads.controller")

EVENT_QUEUE_MAX = 10_000
BROKER_REQUEST_TIMEOUT_MS = 15_000
CHANNEL_DRAIN_S = 5.0


class Controller(ReassignmentRuntime, CandidateChecks):
    def __init__(self, broker, zk):
        self.broker = broker
        self.zk = zk
        self.broker_id = broker.broker_id
        self.active = False
        self.epoch = -1
        self.epoch_version = -1
        self.live: dict[int, dict[str, Any]] = {}
        self.topics: dict[str, dict[str, Any]] = {}  # name -> {"topic_id", "assignment", "config"}
        self.states: dict[tuple[str, int], PartitionView] = {}
        self._events: queue.Queue = queue.Queue(maxsize=EVENT_QUEUE_MAX)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="controller", daemon=True)
        self._connections: Connections | None = None
        self._channels: dict[int, BrokerRequestChannel] = {}  # one sender per live broker
        self.reassignments: dict[tuple[str, int], tuple[int, ...]] = {}  # partition -> target replicas
        self.throttles: dict[tuple[str, int], int] = {}  # catch-up bytes/s for replicas outside the ISR
        self.elections = 0  # leader changes this controller wrote (for metrics)
        self.unclean_elections = 0
        self.election_seconds = 0.0

    # ---- event loop -----------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()
        threading.Thread(target=self._run_rebalance_timer, name="leader-rebalance", daemon=True).start()
        self.enqueue("elect", self._elect)

    def stop(self) -> None:
        self._stopping.set()
        self.enqueue("stop", lambda: None)
        self._thread.join(5)
        # What this controller decided last (a controlled shutdown's leader moves) must still reach
        # the brokers: let the senders drain, briefly.
        deadline = time.monotonic() + CHANNEL_DRAIN_S
        while time.monotonic() < deadline and any(c.pending() for c in list(self._channels.values())):
            time.sleep(0.05)
        self._close_channels(set(self._channels))

    def enqueue(self, name: str, action: Callable[[], None]) -> None:
        try:
            self._events.put_nowait((name, action))
        except queue.Full:
            log.error("controller event queue full; dropping %s and reloading state", name)
            self._events.put((name, self._reload_everything), timeout=5)

    def _run(self) -> None:
        while not self._stopping.is_set():
            name, action = self._events.get()
            if self._stopping.is_set():
                return
            try:
                action()
            except Exception:
                log.exception("controller event %s failed; resigning", name)
                self._resign()

    # ---- election ---------------------------------------------------------------------

    def _elect(self) -> None:
        if self.active:
            if self.zk.controller_id() == self.broker_id:
                return  # a watch fired for our own /controller: nothing changed for us
            log.warning("broker %s lost the controller role (session loss?)", self.broker_id)
            self.active = False
        won = self.zk.try_become_controller(self.broker_id)
        if won is None:
            self.active = False
            self.zk.watch_controller(lambda: self.enqueue("controller-change", self._elect))
            return
        self.epoch, self.epoch_version = won
        self.active = True
        self._close_channels(set(self._channels))  # queued under an older term
        log.info("broker %s is the controller (epoch %s)", self.broker_id, self.epoch)
        self._connections = Connections({"bootstrap.servers": f"{self.broker.host}:{self.broker.port}",
                                         "request.timeout.ms": BROKER_REQUEST_TIMEOUT_MS})
        self.zk.watch_brokers(lambda: self.enqueue("broker-change", self._on_broker_change))
        self.zk.watch_topics(lambda: self.enqueue("topic-change", self._on_topic_change))
        self.zk.watch_isr_changes(lambda: self.enqueue("isr-change", self._on_isr_change))
        self.zk.watch_topic_deletions(lambda: self.enqueue("topic-deletion", self._on_topic_deletion))
        self.zk.watch_config_changes(lambda: self.enqueue("config-change", self._on_config_change))
        self.zk.watch_reassignment(lambda: self.enqueue("reassignment", self._on_reassignment))
        self._reload_everything()

    def _resign(self) -> None:
        self.active = False
        self._close_channels(set(self._channels))
        try:
            self.zk.resign_controller(self.broker_id)
        except Exception:
            log.debug("resign failed", exc_info=True)
        self.enqueue("elect", self._elect)

    def _reload_everything(self) -> None:
        if not self.active:
            return
        self.live = self.zk.live_brokers()
        self.topics = {}
        self.states = {}
        for name in self.zk.topic_names():
            self._load_topic(name)
        # A new controller treats every ISR member or leader that is not registered as failed
        # (it may have died while no controller was watching): one batched pass, as on a broker loss.
        named = {b for view in self.states.values() for b in (*view.state.isr, view.state.leader) if b >= 0}
        # So are live brokers whose unclean start no controller has applied yet (one may have died first).
        unclean = self._unapplied_unclean_starts(set(self.live))
        self._apply_unclean_aware(self._broker_change_decisions(frozenset(named - set(self.live)) | frozenset(unclean),
                                                                unclean), unclean)
        self._push_all()
        self._on_reassignment()  # resume one that a previous controller left running

    def _load_topic(self, name: str) -> None:
        topic = self.zk.read_topic(name)
        if topic is None:
            return
        self.topics[name] = topic
        found = self.zk.read_partition_states([(name, number) for number in topic["assignment"]])
        for number, replicas in topic["assignment"].items():
            versioned = found.get((name, number))
            if versioned is None:
                continue  # created without a state (should not happen): nothing to lead yet
            self.states[(name, number)] = self._view(name, number, replicas, versioned)

    def _view(self, topic: str, number: int, replicas, versioned) -> PartitionView:
        """The pure decision input for one partition, from its topic config and state znode."""
        return PartitionView(
            topic, number, tuple(int(r) for r in replicas),
            tuple(int(r) for r in self.topics.get(topic, {}).get("observers", {}).get(number, ())),
            versioned.state.to_leader_and_isr(versioned.zk_version),
            **self._topic_settings(topic),
        )

    def _topic_settings(self, topic: str) -> dict[str, Any]:
        """The topic configs the decisions read, overrides over the broker defaults."""
        config = self.topics.get(topic, {}).get("config", {})
        defaults = self.broker.config
        return {"min_insync_replicas": int(config.get("min.insync.replicas", defaults["min.insync.replicas"])),
                "unclean_leader_election_enable": _bool(config.get("unclean.leader.election.enable"),
                                                        defaults["unclean.leader.election.enable"])}

    # ---- events -----------------------------------------------------------------------

    def _on_broker_change(self) -> None:
        if not self.active:
            return
        before = self.live
        self.live = self.zk.live_brokers()
        gone = {b for b in before if b not in self.live or
                self.live[b].get("broker_epoch") != before[b].get("broker_epoch")}
        arrived = {b for b in self.live if b not in before or b in gone}
        if gone:
            log.info("controller: brokers gone %s", sorted(gone))
            self._close_channels(gone)
        # Back after an unclean shutdown (KIP-966): it may have lost its unflushed tail, so it leaves
        # every ELR too and leads again only after rejoining the ISR.
        unclean = self._unapplied_unclean_starts(arrived)
        self._apply_unclean_aware(self._broker_change_decisions(frozenset(gone | set(unclean)), unclean), unclean)
        self._push_metadata_everywhere()
        if arrived:
            log.info("controller: brokers arrived %s", sorted(arrived))
            self._send_leader_and_isr({k for k, v in self.states.items() if set(v.replicas) & arrived},
                                      only_brokers=arrived)
            self._elect_offline({k for k, v in self.states.items() if v.state.leader < 0})

    def _on_topic_change(self) -> None:
        if not self.active:
            return
        names = set(self.zk.topic_names())
        new = names - set(self.topics)
        for name in sorted(new):
            self._load_topic(name)
        keys = {k for k in self.states if k[0] in new}
        self._elect_offline(keys)
        self._send_leader_and_isr(keys)
        self._push_metadata_everywhere()

    def _on_isr_change(self) -> None:
        if not self.active:
            return
        keys = [key for key in self.zk.take_isr_change_notifications() if key in self.states]
        for key, versioned in self.zk.read_partition_states(keys).items():
            self.states[key] = replace(self.states[key], state=self._view(
                key[0], key[1], self.states[key].replicas, versioned).state)
        self._write_out_restarted_members(keys)
        self._maybe_complete_reassignments()
        self._push_metadata_everywhere()

    def _on_topic_deletion(self) -> None:
        if not self.active:
            return
        for name in self.zk.pending_topic_deletions():
            keys = [k for k in self.states if k[0] == name]
            by_broker: dict[int, list[dict]] = {}
            for key in keys:
                for replica in self.states[key].replicas:
                    by_broker.setdefault(replica, []).append({"topic": key[0], "partition": key[1], "delete": True})
            for broker_id, partitions in by_broker.items():
                self._call(broker_id, wire.ACTION_STOP_REPLICA, {"controller_epoch": self.epoch,
                                                                  "partitions": partitions})
            self.zk.delete_topic_znodes(name)
            for key in keys:
                self.states.pop(key, None)
            self.topics.pop(name, None)
            self._push_metadata_everywhere(deleted=[name])

    def _on_config_change(self) -> None:
        if not self.active:
            return
        for name in self.zk.take_config_change_notifications():
            if name in self.topics:
                self.topics[name]["config"] = self.zk.read_topic_config(name)
                settings = self._topic_settings(name)
                for key in [k for k in self.states if k[0] == name]:
                    self.states[key] = replace(self.states[key], **settings)
                # An offline partition may now be electable (e.g. unclean election was enabled).
                self._elect_offline({k for k in self.states if k[0] == name})
        self._push_metadata_everywhere()

    # ---- decisions ---------------------------------------------------------------------

    def _unapplied_unclean_starts(self, brokers: set) -> dict[int, str | None]:
        """Of ``brokers``, those whose unclean start no controller has applied (``election``); the
        applied incarnations live in ZooKeeper, so this holds across controller fail-overs."""
        unclean_registered = {b: self.live[b] for b in brokers
                              if b in self.live and not self.live[b].get("clean_shutdown", True)}
        applied = {b: self.zk.unclean_applied(b) for b in unclean_registered}
        return election.unclean_starts_to_apply(unclean_registered, applied)

    def _apply_unclean_aware(self, decisions: list[Decision], unclean: dict[int, str | None]) -> None:
        """Apply ``decisions``, then record each unclean start whose decisions were all written."""
        views = list(self.states.values())  # before: the partitions that named each broker
        written = self._apply_decisions(decisions)
        for broker_id, incarnation in unclean.items():
            if incarnation is not None and election.unclean_start_recorded(broker_id, views, written):
                self.zk.record_unclean_applied(broker_id, incarnation)

    def _broker_change_decisions(self, failed: frozenset[int], unclean: dict[int, str | None],
                                 views: list[PartitionView] | None = None) -> list[Decision]:
        """The pass over broker changes, over ``views`` (every partition by default)."""
        # The views as they are: this pass writes restarted ISR members out (a filtered view would hide them).
        views = list(self.states.values()) if views is None else views
        live_broker_epochs = self._live_broker_epochs()
        return self._with_unclean_recovery(lambda log_ends: election.on_brokers_changed(
            views, frozenset(self.live), failed, unclean_restarted=frozenset(unclean), controller_epoch=self.epoch,
            log_ends=log_ends, live_broker_epochs=live_broker_epochs))

    def _elect_offline(self, keys: set) -> None:
        """Elect a leader for every partition in ``keys`` whose leader is not alive (pure decision)."""
        live = frozenset(self.live)
        views = [view for view in self._decision_views(self.states[key] for key in sorted(keys))
                 if view.state.leader not in live]

        def decide(log_ends) -> list[Decision]:
            decisions = []
            for view in views:
                decision = election.elect(view, live, self.epoch, reason="offline partition",
                                          log_ends=(log_ends or {}).get((view.topic, view.partition)))
                if not (decision.new_state.leader == NO_LEADER and view.state.leader == NO_LEADER):
                    decisions.append(decision)  # else still offline: nothing new to write
            return decisions

        self._apply_decisions(self._with_unclean_recovery(decide))

    def _apply_decisions(self, decisions: list[Decision]) -> set:
        """Write every decision in fenced batches, keep the ones ZooKeeper accepted, push them once;
        returns the keys of those accepted."""
        if not decisions:
            return set()
        started = time.monotonic()
        changes = [(d.topic, d.partition, PartitionStateZnode.from_leader_and_isr(d.new_state),
                    d.expected_partition_epoch) for d in decisions]
        results = self.zk.write_partition_states(self.epoch, self.epoch_version, changes)
        changed = set()
        for decision, result in zip(decisions, results):
            key = (decision.topic, decision.partition)
            view = self.states[key]
            if isinstance(result, int):
                self.states[key] = replace(view, state=replace(decision.new_state, partition_epoch=result))
                changed.add(key)
                if decision.unclean:
                    self.unclean_elections += 1
                    log.warning("controller: %s-%s %s", key[0], key[1], decision.reason)
                else:
                    log.info("controller: %s-%s leader %s epoch %s (%s)", key[0], key[1],
                             decision.new_state.leader, decision.new_state.leader_epoch, decision.reason)
            elif result.current is not None:  # a leader's ISR write won the race: take it, decide again later
                self.states[key] = self._view(key[0], key[1], view.replicas, result.current)
        self.elections += sum(1 for d in decisions if (d.topic, d.partition) in changed)
        self._send_leader_and_isr(changed)
        # Kafka's LeaderElectionRateAndTimeMs, as a sum: one batched pass (writes and pushes) however many
        # partitions it decided; with ads_leader_elections_total it gives the time per partition.
        self.election_seconds += time.monotonic() - started
        return changed

    # ---- pushing to brokers -------------------------------------------------------------

    def _partition_json(self, view: PartitionView) -> dict[str, Any]:
        topic = self.topics[view.topic]
        return {"topic": view.topic, "partition": view.partition, "topic_id": topic["topic_id"],
                "leader": view.state.leader, "leader_epoch": view.state.leader_epoch,
                "isr": list(view.state.isr), "elr": list(view.state.elr),
                "replicas": list(view.replicas), "observers": list(view.observers),
                "partition_epoch": view.state.partition_epoch,
                "offline_replicas": [r for r in view.replicas if r not in self.live],
                "throttle_bytes_per_s": self.throttles.get((view.topic, view.partition)),
                "config": topic.get("config", {})}

    def _brokers_json(self) -> list[dict[str, Any]]:
        return [{"id": b, **{k: v for k, v in info.items() if k in ("host", "port", "rack", "broker_epoch", "metrics_port")}}
                for b, info in sorted(self.live.items())]

    def _send_leader_and_isr(self, keys: set, only_brokers: set | None = None) -> None:
        by_broker: dict[int, list[dict]] = {}
        for key in sorted(keys):
            view = self.states[key]
            for replica in view.replicas:
                if replica in self.live and (only_brokers is None or replica in only_brokers):
                    by_broker.setdefault(replica, []).append(self._partition_json(view))
        for broker_id, partitions in by_broker.items():
            self._call(broker_id, wire.ACTION_LEADER_AND_ISR, {"controller_id": self.broker_id,
                                                               "controller_epoch": self.epoch,
                                                               "partitions": partitions,
                                                               "brokers": self._brokers_json()})

    def _push_metadata_everywhere(self, deleted: list[str] | None = None) -> None:
        body = {"controller_id": self.broker_id, "controller_epoch": self.epoch, "full": True,
                "brokers": self._brokers_json(), "deleted_topics": deleted or [],
                "partitions": [self._partition_json(v) for _, v in sorted(self.states.items())]}
        for broker_id in self.live:
            self._call(broker_id, wire.ACTION_UPDATE_METADATA, body)

    def _push_all(self) -> None:
        self._push_metadata_everywhere()
        self._send_leader_and_isr(set(self.states))

    def _call(self, broker_id: int, action: str, body: dict[str, Any]) -> None:
        """Queue a request to a live broker (controller_channel says why this never waits for it)."""
        info = self.live.get(broker_id)
        if info is None or self._connections is None:
            return
        key = (broker_id, int(info.get("broker_epoch", -1)))
        channel = self._channels.get(broker_id)
        if channel is None or channel.key != key:
            if channel is not None:
                channel.close()
            channel = BrokerRequestChannel(key, info["host"], int(info["port"]), self._connections,
                                           BROKER_REQUEST_TIMEOUT_MS, self._on_channel_overflow)
            self._channels[broker_id] = channel
        channel.send(action, body)

    def _close_channels(self, broker_ids) -> None:
        for broker_id in list(broker_ids):
            channel = self._channels.pop(broker_id, None)
            if channel is not None:
                channel.close()

    def _on_channel_overflow(self, broker_id: int) -> None:
        def resend_everything() -> None:
            if self.active and broker_id in self.live:
                self._push_metadata_everywhere()
                self._send_leader_and_isr(set(self.states), only_brokers={broker_id})
        self.enqueue("resync-broker", resend_everything)

    def offline_partition_count(self) -> int:
        return sum(1 for view in list(self.states.values()) if view.state.leader < 0)

    # ---- controlled shutdown ----------------------------------------------------------

    def request_controlled_shutdown(self, broker_id: int, broker_epoch: int, force: bool,
                                    timeout_s: float) -> dict[str, Any]:
        """From a request thread: run the shutdown decision on the controller thread and wait for it."""
        if not self.active:
            return {"error_code": int(ErrorCode.NOT_CONTROLLER), "message": f"broker {self.broker_id} is not "
                    "the controller"}
        done: Future = Future()
        self.enqueue("controlled-shutdown",
                     lambda: done.set_result(self._controlled_shutdown(broker_id, broker_epoch, force)))
        try:
            return done.result(timeout=timeout_s)
        except FutureTimeout:
            return {"error_code": int(ErrorCode.REQUEST_TIMED_OUT), "message": "controller busy"}

    def _controlled_shutdown(self, broker_id: int, broker_epoch: int, force: bool) -> dict[str, Any]:
        """Move leadership off ``broker_id`` and take it out of ISRs, never below min ISR unless forced."""
        live = self.live.get(broker_id)
        if live is None or int(live.get("broker_epoch", -1)) != broker_epoch:
            return {"error_code": int(ErrorCode.STALE_BROKER_EPOCH),
                    "message": f"broker {broker_id} epoch {broker_epoch} is not the registered incarnation"}
        views = self._decision_views(v for v in self.states.values() if broker_id in v.replicas)
        plan = election.controlled_shutdown(views, broker_id, frozenset(self.live), self.epoch, force=force)
        self._apply_decisions(list(plan.decisions))
        self._push_metadata_everywhere()
        still_led = sorted((k[0], k[1]) for k, v in self.states.items() if v.state.leader == broker_id)
        if plan.refused:
            log.warning("controller: controlled shutdown of %s refused for %s (min.insync.replicas)", broker_id,
                        [f"{t}-{p}" for t, p in plan.refused])
        return {"error_code": 0, "partitions_remaining": [{"topic": t, "partition": p} for t, p in still_led],
                "refused": [{"topic": t, "partition": p} for t, p in plan.refused]}

    # ---- leader elections on demand and automatic rebalance ---------------------------

    def request_elect_leaders(self, election_type: str, keys: list[tuple[str, int]] | None,
                              timeout_s: float) -> dict[str, Any]:
        if not self.active:
            return {"error_code": int(ErrorCode.NOT_CONTROLLER), "message": f"broker {self.broker_id} is not "
                    "the controller"}
        done: Future = Future()
        self.enqueue("elect-leaders", lambda: done.set_result(self._elect_leaders(election_type, keys)))
        try:
            return done.result(timeout=timeout_s)
        except FutureTimeout:
            return {"error_code": int(ErrorCode.REQUEST_TIMED_OUT), "message": "controller busy"}

    def _elect_leaders(self, election_type: str, keys: list[tuple[str, int]] | None) -> dict[str, Any]:
        """Preferred: move to the in-sync preferred replica. Unclean: lead a leaderless partition from any replica."""
        live = frozenset(self.live)
        results, decisions = [], []
        keys = sorted(self.states) if keys is None else keys
        views = dict(zip([k for k in keys if k in self.states],
                         self._decision_views(self.states[k] for k in keys if k in self.states)))
        unclean = {} if election_type == "preferred" else self._requested_unclean_elections(views, live)
        for key in keys:
            view = views.get(key)
            item = {"topic": key[0], "partition": key[1], "error_code": 0}
            if view is None:
                item.update(error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), message="no such partition")
            elif election_type == "preferred":
                outcome = election.preferred_leader_election(view, live, self.epoch)
                if isinstance(outcome, ErrorCode):
                    item.update(error_code=int(outcome), message=outcome.name)
                else:
                    decisions.append(outcome)
            elif view.state.leader in live:
                item.update(error_code=int(ErrorCode.ELECTION_NOT_NEEDED), message="the partition has a leader")
            else:
                decision = unclean[key]
                if decision.new_state.leader == NO_LEADER:
                    item.update(error_code=int(ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE), message="no live replica")
                else:
                    decisions.append(decision)
            results.append(item)
        self._apply_decisions(decisions)
        if decisions:
            self._push_metadata_everywhere()
        return {"error_code": 0, "partitions": results}

    def _requested_unclean_elections(self, views: dict, live: frozenset[int]) -> dict[tuple[str, int], Decision]:
        """The decision for each leaderless partition of ``views``, unclean election allowed."""
        offline = [replace(view, unclean_leader_election_enable=True) for view in views.values()
                   if view.state.leader not in live]
        decisions = self._with_unclean_recovery(lambda log_ends: [
            election.elect(view, live, self.epoch, reason="unclean election requested",
                           log_ends=(log_ends or {}).get((view.topic, view.partition))) for view in offline])
        return {(d.topic, d.partition): d for d in decisions}

    def _maybe_rebalance(self) -> None:
        """auto.leader.rebalance.enable: preferred elections for brokers over the imbalance limit."""
        if not self.active:
            return
        assignment = {key: view.replicas for key, view in self.states.items()}
        leaders = {key: view.state.leader for key, view in self.states.items()}
        keys = partitions_to_rebalance(assignment, leaders, self.live,
                                       self.broker.config["leader.imbalance.per.broker.percentage"])
        if keys:
            log.info("controller: leader imbalance; preferred election for %d partitions", len(keys))
            self._elect_leaders("preferred", keys)

    def _run_rebalance_timer(self) -> None:
        interval_s = self.broker.config["leader.imbalance.check.interval.seconds"]
        while not self._stopping.wait(interval_s):
            if self.active and self.broker.config["auto.leader.rebalance.enable"]:
                self.enqueue("rebalance", self._maybe_rebalance)

    # ---- requests from admin handlers ------------------------------------------------

    def new_topic_assignment(self, partitions: int, replication_factor: int,
                             exclude: set[int] | None = None) -> dict[int, list[int]]:
        brokers = self.zk.live_brokers()
        racks = {b: info.get("rack") for b, info in brokers.items() if b not in (exclude or set())}
        return assign_replicas(partitions, replication_factor, racks)


def _bool(value: Any, default: bool) -> bool:
    if value is None:
        return bool(default)
    return str(value).lower() == "true"
