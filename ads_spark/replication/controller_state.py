"""The controller core's state: plain frozen values, and the work it has queued between requests.

Owns what ``controller.step`` reads and returns (the events and effects it
trades with the shell are in ``controller_events``):

* ``ControllerState``: the active controller's whole memory, the same fields as
  the old ``broker/controller`` object held (epoch, live registrations, topics,
  a ``PartitionView`` per partition, reassignments and throttles, counters),
  plus the continuation: ``pending`` work items and the request it is
  ``awaiting`` an answer to. Its invariants sit beside the fields and are
  checked by ``check_invariants`` after every step.
* ``ControllerConfig``: the broker settings the controller's own decisions
  read (the leader rebalance); ``TopicSettings``: a topic's min ISR and unclean
  election, worked out by the shell (the core parses no config value).
* ``BrokerRegistration`` / ``TopicInfo``: what ZooKeeper's broker and topic
  znodes said, as values (``from_dict`` takes the adapter's dicts).
* The work items and continuations: why a handler that must write, ask or read
  in the middle of a decision can be a pure function. Each handler queues small
  items; ``step`` drains them in order until one issues a request, and resumes
  with the answer. They are data, so the state stays comparable and printable.

Copy-on-write: a step builds new dicts only for the fields it changes; a dict
held by a state (or by an event the shell passed in) is never mutated after.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Union

from ads_spark.errors import InvariantViolation
from ads_spark.replication.election import Decision, LogEnd, PartitionView
from ads_spark.replication.state import evolve

Key = tuple[str, int]  # (topic, partition)
# Per partition, per replica that answered: (last epoch in its log, log end offset).
LogEnds = Mapping[Key, Mapping[int, LogEnd]]


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """Broker settings the controller's own decisions read (Kafka's names, as the broker config has them).

    A topic's min.insync.replicas and unclean.leader.election.enable are not here: they come worked out
    per topic in ``TopicInfo.settings`` (the shell lays the overrides over the broker defaults)."""

    leader_imbalance_per_broker_percentage: int = 10
    auto_leader_rebalance_enable: bool = True
    # How long a partition waits for every replica before unclean recovery takes the last known ELR alone
    # (election.py rule 4), from the first RecoveryTick that saw it waiting.
    unclean_recovery_timeout_ms: int = 300_000

    @classmethod
    def from_broker_config(cls, config) -> "ControllerConfig":
        """From the broker's config (``BrokerConfig`` or any mapping with these keys, values parsed)."""
        return cls(config["leader.imbalance.per.broker.percentage"], config["auto.leader.rebalance.enable"],
                   config["unclean.recovery.timeout.ms"])


@dataclass(frozen=True, slots=True)
class TopicSettings:
    """The topic configs a partition's decisions take, as they apply to the topic.

    Worked out by the shell: the topic's overrides laid over the broker defaults by
    ``ads_spark.config.effective_topic_config``, the same function the broker's replicas use, so a
    config value is parsed in one place and the core never parses one (it may not import
    ``ads_spark.config``). Field names are ``PartitionView``'s.
    """

    min_insync_replicas: int
    unclean_leader_election_enable: bool

    def __post_init__(self) -> None:
        if type(self.min_insync_replicas) is not int or type(self.unclean_leader_election_enable) is not bool:
            raise InvariantViolation(f"controller: topic settings must come parsed, not {self!r}")


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """One live broker's ``/brokers/ids/<id>`` as ``zk.live_brokers()`` reads it."""

    host: str
    port: int
    rack: str | None = None
    broker_epoch: int | None = None  # the registration's czxid; None only if a registration lacked it
    metrics_port: int | None = None
    clean_shutdown: bool = True  # False: the process started after an unclean shutdown (KIP-966)
    incarnation: str | None = None  # names the process; kept across its re-registrations
    # Every listener's advertised address, (name, host, port, protocol) sorted by name; empty for a
    # registration from before listeners (then host/port is its one PLAINTEXT endpoint).
    endpoints: tuple[tuple[str, str, int, str], ...] = ()

    @classmethod
    def from_dict(cls, info: Mapping[str, Any]) -> "BrokerRegistration":
        epoch = info.get("broker_epoch")
        endpoints = tuple(sorted((str(name), str(e["host"]), int(e["port"]), str(e["protocol"]))
                                 for name, e in (info.get("endpoints") or {}).items()))
        return cls(str(info["host"]), int(info["port"]), info.get("rack"), None if epoch is None else int(epoch),
                   info.get("metrics_port"), bool(info.get("clean_shutdown", True)), info.get("incarnation"),
                   endpoints)

    def address_on(self, listener_name: str) -> tuple[str, int]:
        """Its address on ``listener_name`` (the dialer's own inter-broker listener, as Kafka picks it); the
        top-level address when it registered no such endpoint."""
        return endpoint_address(self.endpoints_json(), listener_name, (self.host, self.port))

    def endpoints_json(self) -> dict[str, dict[str, Any]]:
        return {name: {"host": host, "port": port, "protocol": protocol}
                for name, host, port, protocol in self.endpoints}

    @property
    def epoch_or_unknown(self) -> int:
        return -1 if self.broker_epoch is None else self.broker_epoch


def live_from_dicts(brokers: Mapping[int, Mapping[str, Any]]) -> dict[int, BrokerRegistration]:
    """``zk.live_brokers()`` as the core takes it (same order)."""
    return {int(b): BrokerRegistration.from_dict(info) for b, info in brokers.items()}


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic as ``zk.read_topic`` reads it. ``assignment`` is as loaded: a reassignment changes the
    partition's view, not this (as before); ``config`` holds the topic's overrides only, as ZooKeeper has
    them (brokers are sent them as they are); ``settings`` is what they come to (see ``TopicSettings``)."""

    topic_id: str
    assignment: Mapping[int, tuple[int, ...]]
    observers: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    config: Mapping[str, Any] = field(default_factory=dict)
    settings: TopicSettings = field(kw_only=True)

    @classmethod
    def from_dict(cls, topic: Mapping[str, Any], settings: TopicSettings) -> "TopicInfo":
        """From ``zk.read_topic``'s dict and the settings its "config" comes to."""
        return cls(str(topic["topic_id"]),
                   {int(p): tuple(int(r) for r in replicas) for p, replicas in topic["assignment"].items()},
                   {int(p): tuple(int(r) for r in replicas) for p, replicas in (topic.get("observers") or {}).items()},
                   dict(topic.get("config") or {}), settings=settings)


# ---------------------------------------------------------------- work items (the continuation)


@dataclass(frozen=True, slots=True)
class PassOverBrokers:
    """``election.on_brokers_changed`` over ``keys`` (None: every partition), then apply the decisions and
    record each of ``unclean`` (broker id, incarnation) whose decisions were all written."""

    failed: frozenset[int]
    unclean: tuple[tuple[int, str | None], ...] = ()
    keys: tuple[Key, ...] | None = None
    log_ends: LogEnds | None = None  # None: not asked yet (unclean recovery asks at most once)
    # Runs of this pass so far over partitions whose write lost a race (at most PASS_RETRIES_MAX).
    retries: int = 0


# A pass whose writes keep losing to leaders' ISR writes is left to the next event after this many reruns.
PASS_RETRIES_MAX = 8


@dataclass(frozen=True, slots=True)
class ElectOffline:
    """Elect a leader for each of ``keys`` whose leader is not live (None: those led by nobody when run);
    unclean recovery of ``recovery_timed_out`` waits only for their last known ELR (election.py rule 4)."""

    keys: tuple[Key, ...] | None = None
    log_ends: LogEnds | None = None
    recovery_timed_out: tuple[Key, ...] = ()


@dataclass(frozen=True, slots=True)
class ElectLeaders:
    """An elect-leaders request ("preferred" or "unclean"); ``request_id`` None: the rebalance, no reply."""

    request_id: Any
    election_type: str
    keys: tuple[Key, ...] | None = None  # None: every partition
    log_ends: LogEnds | None = None


@dataclass(frozen=True, slots=True)
class ApplyDecisions:
    """Write ``decisions`` (one fenced batch), keep those accepted, send them; then record unclean starts,
    and run ``if_written`` next only if every decision was accepted. ``retry``: the pass over broker
    changes that decided them, run again over the partitions whose write lost to a leader's ISR write."""

    decisions: tuple[Decision, ...]
    record_unclean: tuple[tuple[int, str | None], ...] = ()
    if_written: tuple[Any, ...] = ()
    retry: Any = None  # PassOverBrokers | None


@dataclass(frozen=True, slots=True)
class SendPartitions:
    """leader-and-isr for ``keys`` (None: every partition) to their live replicas in ``only_brokers``."""

    keys: tuple[Key, ...] | None = None
    only_brokers: frozenset[int] | None = None


@dataclass(frozen=True, slots=True)
class PushMetadata:
    """The full metadata to every live broker."""

    deleted: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Emit:
    """Effects to emit at this point of the sequence (log lines that follow a write)."""

    effects: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class ApplyTopicConfig:
    """A topic's new overrides and what they come to: into the topic and its views, then elect its offline
    partitions (now maybe electable)."""

    name: str
    config: Mapping[str, Any]
    settings: TopicSettings


@dataclass(frozen=True, slots=True)
class StartReassignments:
    """Begin the moves of ``items`` (the request's JSON entries) from ``index``; ``started``: begun so far."""

    items: tuple[Any, ...]
    throttle: Any = None
    index: int = 0
    started: tuple[Key, ...] = ()


@dataclass(frozen=True, slots=True)
class BeginApplied:
    """A move's assignment is written: the view takes the larger replica set."""

    key: Key
    target: tuple[int, ...]
    replicas: tuple[int, ...]
    old_replicas: tuple[int, ...]
    throttle: Any = None


@dataclass(frozen=True, slots=True)
class CompleteReassignments:
    """Finish each move whose target is in sync; ``remaining`` None: not started (take every move)."""

    request_seen: bool = False
    remaining: tuple[tuple[Key, tuple[int, ...]], ...] | None = None


@dataclass(frozen=True, slots=True)
class RequestAssignment:
    """Write a partition's replica lists in its topic znode, then continue with ``then``."""

    key: Key
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]
    then: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class CompletionApplied:
    """A move's final assignment is written: drop it, stop the removed replicas, tell the rest."""

    key: Key
    target: tuple[int, ...]
    removed: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ReplyShutdown:
    """Answer a controlled shutdown with what ``broker_id`` still leads now."""

    request_id: Any
    broker_id: int
    refused: tuple[Key, ...]


@dataclass(frozen=True, slots=True)
class Reply:
    request_id: Any
    response: Mapping[str, Any]


WorkItem = Union[PassOverBrokers, ElectOffline, ElectLeaders, ApplyDecisions, SendPartitions, PushMetadata, Emit,
                 ApplyTopicConfig, StartReassignments, BeginApplied, CompleteReassignments, RequestAssignment,
                 CompletionApplied, ReplyShutdown, Reply]

# ---------------------------------------------------------------- continuations (what an answer resumes)


@dataclass(frozen=True, slots=True)
class AwaitingWrite:
    """``WritePartitionStates`` of ``decisions`` is out; ``views_before`` is the views as they were."""

    decisions: tuple[Decision, ...]
    record_unclean: tuple[tuple[int, str | None], ...]
    views_before: Mapping[Key, PartitionView]
    if_written: tuple[Any, ...] = ()
    retry: Any = None  # as ApplyDecisions.retry


@dataclass(frozen=True, slots=True)
class AwaitingLogEnds:
    """``AskLogEnds`` is out; the answer re-runs ``item`` with the log ends found."""

    item: PassOverBrokers | ElectOffline | ElectLeaders


@dataclass(frozen=True, slots=True)
class AwaitingTopics:
    """``ReadTopics`` of ``names`` (sorted) is out."""

    names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AwaitingAssignment:
    """``WriteAssignment`` is out; the answer queues ``then`` first."""

    then: tuple[Any, ...]


Continuation = Union[AwaitingWrite, AwaitingLogEnds, AwaitingTopics, AwaitingAssignment]

# ---------------------------------------------------------------- the state


@dataclass(frozen=True, slots=True)
class ControllerState:
    """Everything the controller core knows; replaced, never changed, by ``step``."""

    broker_id: int
    config: ControllerConfig = ControllerConfig()
    active: bool = False  # holds /controller; every watch event is a no-op while False
    epoch: int = -1  # the controller epoch it won; fences its writes with epoch_version
    epoch_version: int = -1  # the /controller_epoch znode version
    live: Mapping[int, BrokerRegistration] = field(default_factory=dict)  # in zk.live_brokers() order
    topics: Mapping[str, TopicInfo] = field(default_factory=dict)
    # One per partition with a state znode; every key's topic is in ``topics``, key == (view.topic,
    # view.partition). Insertion order is load order (as the old controller's dict), kept by updates.
    views: Mapping[Key, PartitionView] = field(default_factory=dict)
    # Moves in progress: partition -> target replicas. A key may outlive its partition (topic deleted).
    # Emptied at each Elected: a term starts its moves from ZooKeeper's request, not the last term's memory.
    reassignments: Mapping[Key, tuple[int, ...]] = field(default_factory=dict)
    throttles: Mapping[Key, int] = field(default_factory=dict)  # catch-up bytes/s; keys in reassignments
    elections: int = 0  # partition states this controller wrote accepted (leader or ISR changes)
    unclean_elections: int = 0  # of those, unclean elections; <= elections
    # Of those, unclean recoveries (KIP-966, after a whole-cluster crash; a lossy one past
    # unclean.recovery.timeout.ms is also in unclean_elections); <= elections
    recovery_elections: int = 0
    # Partitions waiting for unclean recovery -> the RecoveryTick time (ms) that first saw them waiting;
    # rebuilt at every tick (so only waiting partitions), for unclean.recovery.timeout.ms.
    recovery_waiting_since_ms: Mapping[Key, int] = field(default_factory=dict)
    # The continuation: work still to do in this event, front first. Empty unless ``awaiting`` is set,
    # i.e. between the shell's event batches pending == () and awaiting is None.
    pending: tuple[WorkItem, ...] = ()
    awaiting: Continuation | None = None  # the request whose answer the next step must be


def initial_state(broker_id: int, config: ControllerConfig = ControllerConfig()) -> ControllerState:
    """A broker's controller before it ever won the election."""
    return ControllerState(broker_id=broker_id, config=config)


def queue_first(state: ControllerState, *items: WorkItem) -> ControllerState:
    """``state`` with ``items`` put at the front of its pending work, in order."""
    return evolve(state, pending=tuple(items) + state.pending) if items else state


def offline_partition_count(state: ControllerState) -> int:
    """Partitions led by nobody (the ads_offline_partitions_count metric)."""
    return sum(1 for view in state.views.values() if view.state.leader < 0)


def check_invariants(state: ControllerState) -> None:
    """Raise InvariantViolation if ``state`` breaks an invariant written beside its fields."""
    if state.awaiting is None and state.pending:
        raise InvariantViolation(f"controller: {len(state.pending)} work items left with no request out")
    if not state.active and (state.pending or state.awaiting is not None):
        raise InvariantViolation("controller: an inactive controller holds a continuation")
    for key, view in state.views.items():
        if key[0] not in state.topics or key != (view.topic, view.partition):
            raise InvariantViolation(f"controller: view {key} has no topic or names another partition")
    if any(key not in state.reassignments for key in state.throttles):
        raise InvariantViolation("controller: a throttle outlived its reassignment")
    if not 0 <= state.unclean_elections <= state.elections:
        raise InvariantViolation(f"controller: {state.unclean_elections} unclean of {state.elections} elections")
    if not 0 <= state.recovery_elections <= state.elections:
        raise InvariantViolation(f"controller: {state.recovery_elections} recoveries of {state.elections} elections")


def endpoint_address(endpoints: Mapping[str, Mapping[str, Any]] | None, listener_name: str,
                     fallback: tuple[str, int]) -> tuple[str, int]:
    """The (host, port) of ``listener_name`` in a registration's ``endpoints``, else ``fallback``."""
    found = (endpoints or {}).get(listener_name)
    return (str(found["host"]), int(found["port"])) if found else fallback
