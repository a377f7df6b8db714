"""What the controller core and its shell trade: events in, effects out (values only).

Owns the contract between ``controller.step`` and whatever drives it (the
broker's ZooKeeper shell, or tests/sim against a model ZooKeeper), kept apart
from the dispatcher so the whole contract reads in one sitting:

* events: what the shell observed, carrying what it read from ZooKeeper;
* answers: the one event that must answer each request effect;
* effects, in the order the shell carries them out: fire-and-forget ones (sends
  to brokers, small ZooKeeper writes, replies, log lines) and at most one request,
  always last in a step's list;
* helpers the shell uses to turn what it reads into these values.

How a shell drives the core (the contract):

* One event at a time, on one thread. Watch events are read only while
  ``state.active``: ``take_isr_change_notifications`` and
  ``take_config_change_notifications`` delete what they read, and a standby
  broker must leave them for the controller (an inactive core ignores them).
* Carry out a step's effects in list order before stepping anything else. A
  request effect is always the last one: execute it and step its answer at
  once (the core raises ``InvariantViolation`` on any other event meanwhile).
  Between event batches ``state.awaiting`` is None and ``state.pending`` empty.
* If ``step`` raises, or an effect fails (a fenced write raises
  ``StaleControllerEpochError``; ZooKeeper is unreachable), skip the rest of
  that list and step ``ControllerFailed`` on the last state ``step`` returned
  (the old one if step raised): it answers ``CloseChannels(None)``, ``Resign()``.
* Broker-addressed effects name a broker in the ``live`` map of the state the
  step returned: address it there (host, port; channel key (broker id, broker
  epoch)). Bodies are the dicts brokers receive on the wire; one body may be
  shared by several effects, so nothing may change them.
* A topic's settings (``TopicSettings``: min.insync.replicas and
  unclean.leader.election.enable as they apply) are worked out by the shell
  from the topic's overrides with ``ads_spark.config.effective_topic_config``
  over the broker's topic defaults, wherever it passes a topic or a config
  (``TopicInfo``, ``TopicConfigsChanged``); the core never parses a config value.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Union

from ads_spark.replication.controller_state import BrokerRegistration, Key, LogEnds, TopicInfo, TopicSettings
from ads_spark.replication.election import Decision
from ads_spark.replication.state import LeaderAndIsr

# ---------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything a controller reads to take over (or to reload after its event queue overflowed).

    ``topics``: per name of ``zk.topic_names()``, in that order, ``TopicInfo.from_dict(zk.read_topic(name),
    settings)`` (the settings its "config" comes to) or None if it vanished. ``states``: each partition's
    state znode, read at its version (``versioned.state.to_leader_and_isr(versioned.zk_version)``); one
    without a state is left out.
    ``unclean_applied``: ``zk.unclean_applied(b)`` for each live broker registered with clean_shutdown false.
    ``reassignment``: ``zk.reassignment()``.
    """

    live: Mapping[int, BrokerRegistration]
    topics: Mapping[str, TopicInfo | None]
    states: Mapping[Key, LeaderAndIsr]
    unclean_applied: Mapping[int, str | None] = field(default_factory=dict)
    reassignment: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Elected:
    """This broker won ``/controller`` (``zk.try_become_controller``) at ``epoch``; the shell set its watches
    and then read ``snapshot``. The core closes old channels, forgets the moves and throttles of any
    earlier term, reloads, and starts the moves ZooKeeper's request names (``snapshot.reassignment``)."""

    epoch: int
    epoch_version: int
    snapshot: Snapshot


@dataclass(frozen=True, slots=True)
class Reloaded:
    """The shell's event queue overflowed (events were dropped): everything read again. No-op if inactive."""

    snapshot: Snapshot


@dataclass(frozen=True, slots=True)
class LostLeadership:
    """While active, ``/controller`` changed and names another broker (session loss?): the core closes every
    channel (what they still queue was decided under the lost term) and drops its work in progress."""


@dataclass(frozen=True, slots=True)
class ControllerFailed:
    """Carrying out an effect failed (a fenced write, ZooKeeper unreachable) or ``step`` raised: resign.

    Step it on the last state ``step`` returned (or the one it was given, if it raised); allowed while
    a request is awaited."""

    reason: str = ""


@dataclass(frozen=True, slots=True)
class BrokersChanged:
    """``/brokers/ids`` changed: ``live`` is ``zk.live_brokers()`` now; ``unclean_applied`` as in Snapshot."""

    live: Mapping[int, BrokerRegistration]
    unclean_applied: Mapping[int, str | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TopicsChanged:
    """``/brokers/topics`` changed: ``names`` is ``zk.topic_names()``. New ones are read (``ReadTopics``), and
    so are the known ones in ``grown`` (``zk.take_partition_change_notifications()``: partitions were added)."""

    names: tuple[str, ...]
    grown: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class IsrChanged:
    """Leaders changed ISRs: ``keys`` from ``zk.take_isr_change_notifications()`` (sorted), ``states`` the
    state znodes of those keys the core has views of (as in Snapshot.states)."""

    keys: tuple[Key, ...]
    states: Mapping[Key, LeaderAndIsr]


@dataclass(frozen=True, slots=True)
class TopicDeletionsRequested:
    """``zk.pending_topic_deletions()``: topics to stop, delete from ZooKeeper and drop, in order."""

    names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TopicConfigsChanged:
    """``zk.take_config_change_notifications()`` read: name -> ``zk.read_topic_config(name)`` for each
    notified name the state has a topic for (others may be left out), in notification order; ``settings``:
    name -> the ``TopicSettings`` those overrides come to, for every name of ``configs``."""

    configs: Mapping[str, Mapping[str, Any]]
    settings: Mapping[str, TopicSettings]


@dataclass(frozen=True, slots=True)
class ReassignmentRequested:
    """``/admin/reassign_partitions`` changed: ``zk.reassignment()`` (None once it is cleared)."""

    request: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class RebalanceTick:
    """Every leader.imbalance.check.interval.seconds: preferred elections if leadership is imbalanced."""


@dataclass(frozen=True, slots=True)
class RecoveryTick:
    """Every few seconds while active (the shell's timer; ``now_ms`` a monotonic clock): the partitions still
    waiting for unclean recovery (KIP-966) with every replica it waits for live are decided again, their log
    ends asked again (a member that did not answer the last time, cut off or busy, may now; nothing else
    would ask again), and those waiting ``unclean.recovery.timeout.ms`` since the first tick that saw them
    wait only for their last known ELR. No effects when none waits."""

    now_ms: int


@dataclass(frozen=True, slots=True)
class ControlledShutdownRequested:
    """A broker asks to shut down; answered with ``ReplyToRequest(request_id, ...)``."""

    request_id: Any
    broker_id: int
    broker_epoch: int
    force: bool = False


@dataclass(frozen=True, slots=True)
class ElectLeadersRequested:
    """An admin elect-leaders request ("preferred" or "unclean"), ``keys`` None for every partition."""

    request_id: Any
    election_type: str
    keys: tuple[Key, ...] | None = None


@dataclass(frozen=True, slots=True)
class ChannelOverflowed:
    """The sender to ``broker_id`` dropped its queue: send that broker its full state again."""

    broker_id: int


# ---------------------------------------------------------------- answers (exactly one per request)


@dataclass(frozen=True, slots=True)
class WriteRejected:
    """A conditional state write lost to another writer; ``current`` is the znode now (None: gone)."""

    current: LeaderAndIsr | None


@dataclass(frozen=True, slots=True)
class PartitionStatesWritten:
    """Answers ``WritePartitionStates``: per decision, in order, the new partition epoch (int, the znode
    version) or ``WriteRejected`` (from ``StaleVersion``: ``current.state.to_leader_and_isr(current.zk_version)``)."""

    results: tuple[int | WriteRejected, ...]


@dataclass(frozen=True, slots=True)
class LogEndsAnswered:
    """Answers ``AskLogEnds``: ``log_ends_found`` of the answers; replicas that did not answer are absent."""

    found: LogEnds


@dataclass(frozen=True, slots=True)
class TopicsRead:
    """Answers ``ReadTopics``: per name a TopicInfo (as in Snapshot.topics) or None; the state znodes of their
    partitions."""

    topics: Mapping[str, TopicInfo | None]
    states: Mapping[Key, LeaderAndIsr]


@dataclass(frozen=True, slots=True)
class AssignmentWritten:
    """Answers ``WriteAssignment``."""


Event = Union[Elected, Reloaded, LostLeadership, ControllerFailed, BrokersChanged, TopicsChanged, IsrChanged,
              TopicDeletionsRequested, TopicConfigsChanged, ReassignmentRequested, RebalanceTick, RecoveryTick,
              ControlledShutdownRequested, ElectLeadersRequested, ChannelOverflowed, PartitionStatesWritten,
              LogEndsAnswered, TopicsRead, AssignmentWritten]

# ---------------------------------------------------------------- effects


@dataclass(frozen=True, slots=True)
class SendLeaderAndIsr:
    """Queue wire.ACTION_LEADER_AND_ISR to the broker; body {"controller_id", "controller_epoch",
    "partitions", "brokers", "broker_epoch" (the registration it is meant for, KIP-380)}."""

    broker_id: int
    body: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class SendUpdateMetadata:
    """Queue wire.ACTION_UPDATE_METADATA; body {"controller_id", "controller_epoch", "full", "brokers",
    "deleted_topics", "partitions"}."""

    broker_id: int
    body: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class SendStopReplica:
    """Queue wire.ACTION_STOP_REPLICA; body {"controller_epoch", "partitions": [{"topic", "partition", "delete"}]}."""

    broker_id: int
    body: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class CloseChannels:
    """Close the senders to ``broker_ids`` (None: every sender), dropping what they still queue."""

    broker_ids: frozenset[int] | None = None


@dataclass(frozen=True, slots=True)
class RecordUncleanApplied:
    """``zk.record_unclean_applied(broker_id, incarnation)``."""

    broker_id: int
    incarnation: str


@dataclass(frozen=True, slots=True)
class ClearReassignment:
    """``zk.clear_reassignment()``: every move the request named is done or was refused."""


@dataclass(frozen=True, slots=True)
class DeleteTopicZnodes:
    """``zk.delete_topic_znodes(name)``."""

    name: str


@dataclass(frozen=True, slots=True)
class Resign:
    """``zk.resign_controller(broker_id)`` (its errors ignored), then run the election again."""


@dataclass(frozen=True, slots=True)
class ReplyToRequest:
    """Complete the request ``request_id`` (a controlled shutdown or elect-leaders) with ``response``."""

    request_id: Any
    response: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Log:
    """A line for the controller's log ("info", "warning" or "error"), as the controller logged before."""

    level: str
    message: str


# ---------------------------------------------------------------- requests (the last effect of a step)


@dataclass(frozen=True, slots=True)
class WritePartitionStates:
    """``zk.write_partition_states(controller_epoch, controller_epoch_version, [(d.topic, d.partition,
    PartitionStateZnode.from_leader_and_isr(d.new_state), d.expected_partition_epoch) for d in decisions])``
    -> ``PartitionStatesWritten``. A fenced write raises: step ``ControllerFailed``."""

    controller_epoch: int
    controller_epoch_version: int
    decisions: tuple[Decision, ...]


@dataclass(frozen=True, slots=True)
class AskLogEnds:
    """Send each (broker id, body) wire.ACTION_REPLICA_LOG_ENDS in turn, each bounded (3 s before); a broker
    that fails is left out -> ``LogEndsAnswered(log_ends_found({broker: response["partitions"]}))``."""

    asks: tuple[tuple[int, Mapping[str, Any]], ...]


@dataclass(frozen=True, slots=True)
class ReadTopics:
    """For each name: ``zk.read_topic(name)`` and the state znodes of its partitions -> ``TopicsRead``."""

    names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class WriteAssignment:
    """``zk.write_topic_assignment(topic, lambda z: apply_assignment_change(self, z),
    controller_epoch_version)`` -> ``AssignmentWritten``."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]
    controller_epoch_version: int


Effect = Union[SendLeaderAndIsr, SendUpdateMetadata, SendStopReplica, CloseChannels, RecordUncleanApplied,
               ClearReassignment, DeleteTopicZnodes, Resign, ReplyToRequest, Log, WritePartitionStates,
               AskLogEnds, ReadTopics, WriteAssignment]
REQUESTS = (WritePartitionStates, AskLogEnds, ReadTopics, WriteAssignment)
ANSWERS = (PartitionStatesWritten, LogEndsAnswered, TopicsRead, AssignmentWritten)

# ---------------------------------------------------------------- helpers for the shell


def log_ends_found(answers: Mapping[int, list[Mapping[str, Any]]]) -> dict[Key, dict[int, tuple[int, int]]]:
    """The answers to ``AskLogEnds`` (broker id -> its response's "partitions"; a broker that failed is
    absent) as ``LogEndsAnswered.found``: only items without error that carry a log end."""
    found: dict[Key, dict[int, tuple[int, int]]] = {}
    for broker_id, items in sorted(answers.items()):
        for item in items:
            if item.get("error_code", 0) == 0 and "log_end_offset" in item:
                found.setdefault((item["topic"], int(item["partition"])), {})[broker_id] = (
                    int(item["last_epoch"]), int(item["log_end_offset"]))
    return found


def apply_assignment_change(write: WriteAssignment, znode):
    """The topic assignment znode value (any dataclass with ``partitions``, ``adding_replicas`` and
    ``removing_replicas``) with ``write`` applied: an empty adding/removing list drops the entry."""

    def put(mapping, value):
        out = dict(mapping)
        if value:
            out[write.partition] = tuple(value)
        else:
            out.pop(write.partition, None)
        return out

    return replace(znode, partitions={**znode.partitions, write.partition: tuple(write.replicas)},
                   adding_replicas=put(znode.adding_replicas, write.adding),
                   removing_replicas=put(znode.removing_replicas, write.removing))
