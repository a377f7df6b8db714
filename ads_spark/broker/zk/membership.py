"""A broker's place in the cluster: its ZooKeeper session, registration and controller duty.

The broker registers an ephemeral znode (its broker epoch is that znode's
creation zxid, so a restarted broker always has a newer epoch), runs the
controller elector, and performs the admin writes that the controller then
reacts to (topic creation and partition increase with a rack-aware assignment,
deletion markers, config changes). Losing the ZooKeeper session removes the registration; the
broker re-registers with a new epoch when the session comes back.

A broker must not act on a session it may have lost (issue #20: one whose
kazoo thread had died kept acknowledging acks=1 writes while another broker led
the partition). ``SessionGuard`` watches the session from the broker's periodic
tick: a dead kazoo connection thread is fatal (the process exits, its
supervisor restarts it), and while the session may have expired the broker
refuses produces (NOT_LEADER_OR_FOLLOWER) until it is connected again -- and,
after an actual expiry, each partition until the controller's next
leader_and_isr confirms who leads.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from typing import Any, Callable

from ads_spark.broker.controller.controller import Controller
from ads_spark.protocol import wire
from ads_spark.protocol.connection import Connections
from ads_spark.broker.zk.model import PartitionStateZnode, ZooKeeperUnavailable
from ads_spark.replication.state import LeaderAndIsr
from ads_spark.broker.zk.client import ZkClient
from ads_spark.replication.controller_state import endpoint_address
from ads_spark.replication.assignment import assign_added_partitions
from ads_spark.errors import (
    ErrorCode, InvalidPartitionsError, InvalidReplicaAssignmentError, TopicAlreadyExistsError,
    UnknownTopicOrPartitionError, error_for,
)

log = logging.getLogger("ads.broker.membership")

CONTROLLER_REQUEST_TIMEOUT_S = 15.0
# How often a secured broker's start looks whether its security state has loaded (a failed load is retried
# in the background every security_state.RELOAD_RETRY_S).
SECURITY_LOAD_POLL_S = 0.02


class SessionGuard:
    """Keeps a broker from acting as leader on a ZooKeeper session it may have lost (see the module docstring).

    ``check()`` runs on every broker tick and is cheap (a thread liveness check,
    a clock read); the state changes arrive on kazoo's thread through a session
    listener, which only records them and sets flags.
    """

    def __init__(self, zk: ZkClient, replica_manager, on_fatal: Callable[[str], None], session_timeout_ms: int):
        self._zk = zk
        self._replicas = replica_manager
        self._on_fatal = on_fatal
        # The ensemble expires a session a full timeout after it last heard from us, and kazoo reports the
        # connection lost only after its read timeout (2/3 of the session timeout) of silence: a third of the
        # timeout after that report is the earliest the session can have expired, and another broker been elected.
        self.fence_after_s = session_timeout_ms / 3000.0
        self._lock = threading.Lock()
        self._disconnected_since: float | None = None  # time.monotonic() of the first suspended/lost state
        self._fenced = False
        self._fatal = False
        zk.add_session_listener(self._on_state)

    def _on_state(self, state: str) -> None:
        """On kazoo's thread: record the change; an expiry fences at once (another broker may lead already)."""
        with self._lock:
            if state == "connected":
                self._disconnected_since = None
            elif self._disconnected_since is None:
                self._disconnected_since = time.monotonic()
        if state == "lost":
            self._fence("its ZooKeeper session expired or was closed", session_expired=True)

    def check(self) -> None:
        """Exit on a dead connection thread; fence while cut off too long; lift the fence once reconnected."""
        if self._fatal:
            return
        problem = self._zk.connection_thread_problem()
        if problem is not None:
            self._fatal = True
            self._fence("its ZooKeeper connection thread died", session_expired=True)
            log.critical("%s; stopping the broker so that it does not live on cut off", problem)
            self._on_fatal(problem)
            return
        with self._lock:
            since, fenced = self._disconnected_since, self._fenced
        if since is not None and not fenced:
            cut_off_s = time.monotonic() - since
            if cut_off_s >= self.fence_after_s:
                self._fence(f"no ZooKeeper connection for {cut_off_s:.1f}s: its session may have expired",
                            session_expired=False)
        elif since is None and fenced:
            with self._lock:  # kazoo's thread may have reported a new loss since the read above
                if self._disconnected_since is not None:
                    return
                self._fenced = False
                self._replicas.lift_fence()
            log.warning("ZooKeeper connection is back: accepting writes again (after a session expiry, each "
                        "partition waits for the controller's leader_and_isr)")

    def _fence(self, reason: str, session_expired: bool) -> None:
        with self._lock:
            first = not self._fenced
            self._fenced = True
            self._replicas.fence_leadership(reason, session_expired)  # sets flags only: fine under the lock
        if first:
            log.error("refusing produce requests: %s", reason)


def registered_endpoints(endpoints: dict[str, tuple[str, int, str]]) -> dict[str, dict[str, Any]] | None:
    """``broker.endpoints`` as the registration znode holds them (None: a broker double without them)."""
    if not endpoints:
        return None
    return {name: {"host": host, "port": int(port), "protocol": protocol}
            for name, (host, port, protocol) in endpoints.items()}


class ZkMembership:
    def __init__(self, broker):
        self.broker = broker
        # Connect string, session timeout, TLS and znode ACLs, all from the broker's config.
        self.zk = ZkClient.from_broker_config(broker.config)
        self.controller = Controller(broker, self.zk)
        self.session_guard = SessionGuard(self.zk, broker.replica_manager, broker._on_fatal,
                                          broker.config["zookeeper.session.timeout.ms"])
        self.broker_epoch = -1
        self._producer_ids_lock = threading.Lock()
        self._producer_ids = None  # the current ProducerIdBlock
        self._next_producer_id = 0

    def start(self) -> int:
        """``connect`` then ``register``: for a broker whose listeners are already open."""
        self.connect()
        return self.register()

    def connect(self, wait_for_security: bool = False) -> None:
        """Open the ZooKeeper session and start loading users, secrets and ACLs (before this broker
        registers, and may lead). ``wait_for_security``: also wait until all three are loaded -- a secured
        broker opens no listener before it can judge a request. Each wait is bounded by the session's
        connect timeout; past it, ``ZooKeeperUnavailable`` (the session closed)."""
        self.zk.connect()
        security = getattr(self.broker, "security", None)  # absent in test doubles
        if security is None:
            return
        security.start(self.zk)  # loads all three at once; one that failed is retried in the background
        if not wait_for_security:
            return
        deadline = time.monotonic() + self.zk.connect_timeout_s
        while not security.loaded:
            if time.monotonic() >= deadline:
                security.stop()
                self.zk.close()
                raise ZooKeeperUnavailable(f"the ACLs, users and token secrets were not loaded from ZooKeeper "
                                           f"within {self.zk.connect_timeout_s}s")
            time.sleep(SECURITY_LOAD_POLL_S)

    def register(self) -> int:
        """Register (the broker's listeners are bound: the znode carries their ports) and start the controller
        elector; returns the broker epoch."""
        rack = self.broker.config["broker.rack"] or None
        self.broker_epoch = self.zk.register_broker(
            self.broker.broker_id, self.broker.host, self.broker.port, rack, on_reregistered=self._on_reregistered,
            clean_shutdown=getattr(self.broker.logs, "recovered_from_clean_shutdown", True),
            metrics_port=self.broker.metrics.port if self.broker.metrics.port > 0 else None,
            endpoints=registered_endpoints(getattr(self.broker, "endpoints", {})))
        # Known to the broker at once: the controller may address a leader-and-isr to this registration as soon
        # as the znode exists, and the broker refuses one carrying an epoch it does not know (KIP-380).
        self.broker._broker_epoch = self.broker_epoch
        self.controller.start()
        return self.broker_epoch

    def _on_reregistered(self, broker_epoch: int) -> None:
        log.info("broker %s re-registered with epoch %s", self.broker.broker_id, broker_epoch)
        self.broker_epoch = broker_epoch
        self.broker._broker_epoch = broker_epoch

    def stop(self) -> None:
        security = getattr(self.broker, "security", None)
        if security is not None:
            security.stop()
        self.controller.stop()
        self.zk.close()

    def check_session(self) -> None:
        """Called on every broker tick: see ``SessionGuard.check``."""
        self.session_guard.check()

    def controlled_shutdown(self) -> list[tuple[str, int]]:
        """Ask the controller to move leadership away; returns the partitions this broker still leads.

        Bounded: ``controlled.shutdown.max.retries`` attempts with
        ``controlled.shutdown.retry.backoff.ms`` between them; a partition the
        controller refuses to move (it would go below min.insync.replicas) stays
        led here and fails over when the session ends, as after a crash.
        """
        config = self.broker.config
        remaining: list[tuple[str, int]] = []
        for attempt in range(config["controlled.shutdown.max.retries"] + 1):
            try:
                answer = self._ask_controller(wire.ACTION_CONTROLLED_SHUTDOWN, {
                    "broker_id": self.broker.broker_id, "broker_epoch": self.broker_epoch})
                if answer.get("error_code"):
                    raise error_for(answer["error_code"], answer.get("message", ""))
                remaining = [(p["topic"], int(p["partition"])) for p in answer.get("partitions_remaining", [])]
                if not remaining:
                    log.info("controlled shutdown of broker %s: leadership moved", self.broker.broker_id)
                    return []
                refused = {(p["topic"], int(p["partition"])) for p in answer.get("refused", [])}
                if set(remaining) <= refused:
                    break  # nothing else could lead them without going below min ISR: retrying won't help
            except Exception as exc:
                log.warning("controlled shutdown attempt %s failed: %s", attempt + 1, exc)
            time.sleep(config["controlled.shutdown.retry.backoff.ms"] / 1000)
        log.warning("controlled shutdown of broker %s incomplete; still leading %s", self.broker.broker_id,
                    [f"{t}-{p}" for t, p in remaining])
        return remaining

    def ask_controller(self, action: str, body: dict[str, Any]) -> dict[str, Any]:
        """Send ``action`` to the controller's broker (another broker than this one)."""
        controller_id = self.zk.controller_id()
        info = None if controller_id is None else self.zk.live_brokers().get(controller_id)
        if info is None or controller_id == self.broker.broker_id:
            raise error_for(ErrorCode.NOT_CONTROLLER, "no other broker is the registered controller; retry")
        # The controller's endpoint of THIS broker's inter-broker listener (Kafka's rule), not its top-level
        # address (the controller's own inter-broker listener): they differ while that name is being switched.
        host, port = endpoint_address(info.get("endpoints"), self.broker.config.inter_broker_listener_name,
                                      (info["host"], int(info["port"])))
        connections = Connections(self.broker.config.inter_broker_client_config(f"{host}:{port}"))
        try:
            return connections.call_action(host, port, action, body,
                                           int(CONTROLLER_REQUEST_TIMEOUT_S * 1000))
        finally:
            connections.close()

    def _ask_controller(self, action: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.zk.controller_id() == self.broker.broker_id:
            return self.controller.request_controlled_shutdown(body["broker_id"], body["broker_epoch"], False,
                                                               CONTROLLER_REQUEST_TIMEOUT_S)
        return self.ask_controller(action, body)

    # ---- admin writes ------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int, replication_factor: int,
                     assignment: list[list[int]] | None, config: dict[str, str],
                     observers: list[int] | None = None) -> None:
        self.create_planned_topic(name, self.plan_topic(name, partitions, replication_factor, assignment, observers),
                                  config, observers)

    def create_planned_topic(self, name: str, plan: dict[int, list[int]], config: dict[str, str],
                             observers: list[int] | None, schema=None) -> None:
        """``schema``: a typed topic's first schema version (a ``pa.Schema`` with field ids), written in the
        same transaction as the topic."""
        observers = list(observers or [])
        self.zk.create_topic(name, plan, config, observers={p: observers for p in plan} if observers else None,
                             schema=schema)

    def plan_topic(self, name: str, partitions: int, replication_factor: int, assignment: list[list[int]] | None,
                   observers: list[int] | None) -> dict[int, list[int]]:
        """Where the new topic's replicas go, or the error that refuses it; writes nothing."""
        if self.topic_exists(name):
            raise TopicAlreadyExistsError(f"topic '{name}' already exists")
        live = self.zk.live_brokers()
        observers = list(observers or [])
        if set(observers) - set(live):
            raise InvalidReplicaAssignmentError(f"observers {sorted(set(observers) - set(live))} are not alive")
        if assignment is not None:
            unknown = sorted({b for replicas in assignment for b in replicas} - set(live))
            if unknown:
                raise InvalidReplicaAssignmentError(f"replica assignment names brokers {unknown} that are not alive")
            if any(len(set(r)) != len(r) or len(r) != replication_factor for r in assignment):
                raise InvalidReplicaAssignmentError("every partition needs the same number of distinct replicas")
            plan = {number: list(replicas) for number, replicas in enumerate(assignment)}
        else:
            plan = self.controller.new_topic_assignment(partitions, replication_factor, exclude=set(observers))
        if any(set(replicas) & set(observers) for replicas in plan.values()):
            raise InvalidReplicaAssignmentError("a broker cannot hold both a replica and an observer of a partition")
        return plan

    def add_partitions(self, name: str, total: int, validate_only: bool = False) -> dict[int, list[int]]:
        """Grow topic ``name`` to ``total`` partitions, placed rack-aware over the live brokers (the existing
        ones untouched); returns the new partitions' replicas. A decrease or the same count is refused
        naming the topic and both counts, and nothing is written (``validate_only``: nothing in any case)."""
        topic = self.zk.read_topic(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"topic '{name}' does not exist")
        existing = topic["assignment"]
        if total <= len(existing):
            change = "the same count" if total == len(existing) else "a decrease"
            raise InvalidPartitionsError(f"topic '{name}' has {len(existing)} partitions; {total} is {change}: "
                                         "partitions can only be added")
        observers = list(topic["observers"].get(0, []))  # every partition of a topic has the same observers
        racks = {b: info.get("rack") for b, info in self.zk.live_brokers().items() if b not in observers}
        added = assign_added_partitions(existing, total, racks)
        if validate_only:
            return added
        self.zk.add_partitions(name, added, {p: observers for p in added} if observers else None, len(existing))
        return added

    def topic_exists(self, name: str) -> bool:
        return self.zk.read_topic(name) is not None

    def delete_topic(self, name: str) -> None:
        self.zk.mark_topic_for_deletion(name)

    def topic_config(self, name: str) -> dict[str, str]:
        if self.zk.read_topic(name) is None:
            raise UnknownTopicOrPartitionError(f"topic '{name}' does not exist")
        return self.zk.read_topic_config(name)

    def set_topic_config(self, name: str, config: dict[str, str]) -> None:
        self.zk.write_topic_config(name, config)

    def replication_factor(self, name: str) -> int:
        topic = self.zk.read_topic(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"topic '{name}' does not exist")
        return len(next(iter(topic["assignment"].values())))

    def update_isr(self, topic: str, partition: int, proposed: LeaderAndIsr):
        """A leader's conditional ISR write: (accepted as written, None) or (None, current state)."""
        result = self.zk.update_isr(topic, partition, PartitionStateZnode.from_leader_and_isr(proposed),
                                    proposed.partition_epoch)
        if isinstance(result, int):
            return replace(proposed, partition_epoch=result), None
        current = result.current
        if current is None:
            return None, None
        return None, current.state.to_leader_and_isr(current.zk_version)

    def next_producer_id(self) -> int:
        """Ids come in blocks claimed by conditional writes in ZooKeeper, so no two brokers hand out the same one."""
        with self._producer_ids_lock:
            if self._producer_ids is None or self._next_producer_id > self._producer_ids.block_end_inclusive:
                self._producer_ids = self.zk.allocate_producer_id_block(self.broker.broker_id)
                self._next_producer_id = self._producer_ids.block_start
            producer_id = self._next_producer_id
            self._next_producer_id += 1
            return producer_id

    def describe(self) -> dict[str, Any]:
        return {"broker_epoch": self.broker_epoch, "controller": self.controller.active}
