"""Carrying out the controller core's effects: sends to brokers, ZooKeeper writes, requests answered at once.

Owns the I/O side of every effect ``replication.controller.step`` returns
(``controller_events`` lists them and says what each means):

* sends (leader-and-isr, update-metadata, stop-replica) go to the broker's
  ``BrokerRequestChannel`` (channel.py: one sender thread per broker
  registration, so the controller thread never waits on a broker); ``Channels``
  keeps one per broker, keyed by (broker id, broker epoch), and replaces it when
  the broker registers again;
* small ZooKeeper writes (unclean start applied, reassignment cleared, topic
  znodes deleted) and log lines are done in place;
* a request effect (write partition states, ask log ends, read topics, write an
  assignment) is executed at once and its answer event returned, for the
  controller to step before anything else;
* ``ReplyToRequest`` and ``Resign`` are handed back to the controller, which
  owns the waiting admin requests and the election.

Errors propagate: the controller steps ``ControllerFailed`` on any of them
(a fenced write raises ``StaleControllerEpochError``), except a broker that does
not report its log ends, which is only left out of the answer.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping

from ads_spark.broker.controller.channel import BrokerRequestChannel
from ads_spark.broker.controller.zk_reads import ZkReads
from ads_spark.broker.zk.model import PartitionStateZnode, StaleVersion
from ads_spark.errors import AdsError, InvariantViolation
from ads_spark.protocol import wire
from ads_spark.replication.controller_events import (
    AskLogEnds, AssignmentWritten, ClearReassignment, CloseChannels, DeleteTopicZnodes, Event, Log, LogEndsAnswered,
    PartitionStatesWritten, ReadTopics, RecordUncleanApplied, ReplyToRequest, Resign, SendLeaderAndIsr,
    SendStopReplica, SendUpdateMetadata, WriteAssignment, WritePartitionStates, WriteRejected,
    apply_assignment_change, log_ends_found,
)
from ads_spark.replication.controller_state import ControllerState

log = logging.getLogger("ads.controller")

BROKER_REQUEST_TIMEOUT_MS = 15_000  # per request a channel sends
# Per broker asked before an unclean election; the questions go in turn on the controller thread, so a
# hung broker costs it at most this (unclean elections are opt-in and rare).
LOG_END_QUERY_TIMEOUT_MS = 3_000
LOG_LEVELS = {"info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
SEND_ACTIONS = {SendLeaderAndIsr: wire.ACTION_LEADER_AND_ISR, SendUpdateMetadata: wire.ACTION_UPDATE_METADATA,
                SendStopReplica: wire.ACTION_STOP_REPLICA}


class Channels:
    """The controller's request channels, one per broker; a channel serves one registration of its broker.

    ``connections`` is called once, on the first send, for the ``Connections`` every channel shares;
    ``on_overflow(broker_id)`` is what a channel calls when it dropped its queue (from ``send``)."""

    def __init__(self, connections: Callable[[], Any], on_overflow: Callable[[int], None]):
        self._make_connections, self._on_overflow = connections, on_overflow
        self._connections = None
        self._channels: dict[int, BrokerRequestChannel] = {}
        self._shut = False  # the controller stopped: no channel is opened again

    def send(self, broker_id: int, broker_epoch: int, host: str, port: int, action: str,
             body: Mapping[str, Any]) -> None:
        if self._shut:
            return
        key = (broker_id, broker_epoch)
        channel = self._channels.get(broker_id)
        if channel is None or channel.key != key:
            if channel is not None:
                channel.close()  # queued for an earlier registration of that broker
            if self._connections is None:
                self._connections = self._make_connections()
            channel = BrokerRequestChannel(key, host, port, self._connections, BROKER_REQUEST_TIMEOUT_MS,
                                           self._on_overflow)
            self._channels[broker_id] = channel
        channel.send(action, body)

    def close(self, broker_ids=None) -> None:
        """Close the channels to ``broker_ids`` (None: all), dropping what they still queue."""
        for broker_id in list(self._channels) if broker_ids is None else list(broker_ids):
            channel = self._channels.pop(broker_id, None)
            if channel is not None:
                channel.close()

    def pending(self) -> int:
        """Requests still queued, over every channel."""
        return sum(channel.pending() for channel in list(self._channels.values()))

    def connections(self):
        """The shared ``Connections`` (made now if no send made it yet)."""
        if self._connections is None:
            self._connections = self._make_connections()
        return self._connections

    def shut(self) -> None:
        """Close every channel and the connections (the controller is stopping)."""
        self._shut = True
        self.close(None)
        if self._connections is not None:
            self._connections.close()
            self._connections = None


class EffectRunner:
    """Executes one effect at a time for the controller thread; see the module docstring."""

    def __init__(self, zk, reads: ZkReads, channels: Channels, reply: Callable[[Any, Mapping[str, Any]], None],
                 resign: Callable[[], None], listener_name: str = ""):
        self.zk, self.reads, self.channels = zk, reads, channels
        self.listener_name = listener_name  # this broker's inter-broker listener: which endpoint to dial
        self._reply, self._resign = reply, resign

    def execute(self, state: ControllerState, effect) -> Event | None:
        """Carry out ``effect`` of the step that returned ``state``; a request's answer event, else None."""
        match effect:
            case SendLeaderAndIsr() | SendUpdateMetadata() | SendStopReplica():
                registration = state.live[effect.broker_id]  # the core addresses live brokers only
                host, port = registration.address_on(self.listener_name)
                self.channels.send(effect.broker_id, registration.epoch_or_unknown, host, port,
                                   SEND_ACTIONS[type(effect)], effect.body)
            case CloseChannels():
                self.channels.close(effect.broker_ids)
            case RecordUncleanApplied():
                self.zk.record_unclean_applied(effect.broker_id, effect.incarnation)
            case ClearReassignment():
                self.zk.clear_reassignment()
            case DeleteTopicZnodes():
                self.zk.delete_topic_znodes(effect.name)
            case Log():
                log.log(LOG_LEVELS.get(effect.level, logging.WARNING), "%s", effect.message)
            case ReplyToRequest():
                self._reply(effect.request_id, effect.response)
            case Resign():
                self._resign()
            case WritePartitionStates():
                return self.write_partition_states(effect)
            case AskLogEnds():
                return self.ask_log_ends(state, effect)
            case ReadTopics():
                return self.reads.topics_read(effect.names)
            case WriteAssignment():
                self.zk.write_topic_assignment(effect.topic, lambda znode: apply_assignment_change(effect, znode),
                                               effect.controller_epoch_version)
                return AssignmentWritten()
            case _:
                raise InvariantViolation(f"controller: unknown effect {effect!r}")
        return None

    def write_partition_states(self, effect: WritePartitionStates) -> PartitionStatesWritten:
        """One fenced batch; a lost conditional write comes back as the znode now."""
        results = self.zk.write_partition_states(effect.controller_epoch, effect.controller_epoch_version, [
            (d.topic, d.partition, PartitionStateZnode.from_leader_and_isr(d.new_state), d.expected_partition_epoch)
            for d in effect.decisions])
        return PartitionStatesWritten(tuple(_write_result(result) for result in results))

    def ask_log_ends(self, state: ControllerState, effect: AskLogEnds) -> LogEndsAnswered:
        """Ask each broker in turn where its replicas' logs end; one that fails is left out."""
        answers: dict[int, list[Mapping[str, Any]]] = {}
        for broker_id, body in effect.asks:
            registration = state.live.get(broker_id)
            if registration is None:
                continue
            try:
                response = self.channels.connections().call_action(
                    *registration.address_on(self.listener_name), wire.ACTION_REPLICA_LOG_ENDS, dict(body),
                    LOG_END_QUERY_TIMEOUT_MS)
            except AdsError as exc:
                log.warning("controller: broker %s did not report its log ends (%s); it is left out", broker_id, exc)
                continue
            answers[broker_id] = list(response.get("partitions") or [])
        return LogEndsAnswered(log_ends_found(answers))


def _write_result(result) -> int | WriteRejected:
    if isinstance(result, StaleVersion):
        current = result.current
        return WriteRejected(None if current is None else current.state.to_leader_and_isr(current.zk_version))
    return result
