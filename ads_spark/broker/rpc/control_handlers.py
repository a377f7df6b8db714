"""Handlers for what the controller tells a broker: leader-and-isr, metadata, stop-replica.

These arrive batched (one request per broker for many partitions) and carry the
controller epoch; a leader_and_isr may also carry the broker epoch it is
addressed to. Whether to obey is decided by ``replication/fencing.py`` (KIP-380):
an older controller epoch than one already obeyed is refused with
STALE_CONTROLLER_EPOCH, so a deposed controller cannot move leadership, and a
leader_and_isr meant for an earlier registration of this broker with
STALE_BROKER_EPOCH; a refused request changes nothing. Per-partition outcomes
are error codes in the response.

Every body has passed its schema (``protocol/request_schemas.py``) at the
boundary before it gets here, so the epoch a handler records is that of a
well-formed request: a malformed one with a huge epoch once was answered with
an internal error after its epoch was recorded, and the broker refused the
real controller from then on.

Request shapes (docs/DESIGN.md):
  leader_and_isr: {"controller_id", "controller_epoch", "broker_epoch" (optional: the target's
      registration the controller addressed it to), "partitions": [{"topic", "partition",
      "topic_id", "leader", "leader_epoch", "isr", "elr", "replicas", "observers",
      "partition_epoch", "config": {topic overrides}}], "brokers": [{"id","host","port","rack","endpoints"}]}
      (a broker's host/port: its inter-broker listener, which fetchers dial; "endpoints": every listener's)
  stop_replica: {"controller_epoch", "partitions": [{"topic", "partition", "delete": bool}]}
  replica_log_ends: {"controller_epoch", "partitions": [{"topic", "partition", "topic_id", "config"}]}
      -> {"partitions": [{"topic", "partition", "error_code", "last_epoch", "log_end_offset"}]}
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from ads_spark.protocol import wire
from ads_spark.errors import AdsError, ErrorCode, UnknownTopicOrPartitionError, error_for
from ads_spark.broker.replica.fetcher import LeaderEndpoint
from ads_spark.broker.replica.partition import PartitionRole
from ads_spark.protocol.records import now_ms
from ads_spark.replication import epochs, fencing
from ads_spark.replication.controller_state import endpoint_address

log = logging.getLogger("ads.broker.control")


def log_end_of(state) -> dict[str, int]:
    """A replica's entry in a replica_log_ends answer, from one ``PartitionState`` (one immutable value: the
    epoch and end offset agree): the epoch of its last record, not merely its latest epoch entry (see
    ``epochs.last_record_epoch``). The simulation's brokers answer with it too (tests/sim/controller_env.py)."""
    return {"last_epoch": epochs.last_record_epoch(state.epochs, state.log_end_offset),
            "log_end_offset": state.log_end_offset}


class ControlHandlers:
    def __init__(self, broker):
        self.broker = broker
        self._epoch_lock = threading.Lock()
        self._controller_epoch = -1

    def _fence(self, body: dict[str, Any], addressed: bool = False) -> None:
        """Raise unless this broker obeys the request (fencing.py); record its controller epoch if it does.

        ``addressed``: the request may name the broker epoch it is meant for (leader_and_isr)."""
        epoch = wire.require(body, "controller_epoch", int, "controller request")
        broker_epoch = wire.optional(body, "broker_epoch", int, None, "controller request") if addressed else None
        with self._epoch_lock:
            verdict = fencing.check_control_request(self._controller_epoch, epoch, request_broker_epoch=broker_epoch,
                                                    current_broker_epoch=self.broker.broker_epoch())
            if not verdict.obeyed:
                raise error_for(verdict.error, f"broker {self.broker.broker_id}: {verdict.message}")
            self._controller_epoch = verdict.controller_epoch

    def handle_leader_and_isr(self, body: dict[str, Any]) -> dict[str, Any]:
        self._fence(body, addressed=True)
        brokers = {int(b["id"]): b for b in body.get("brokers", [])}
        results = []
        for entry in wire.require(body, "partitions", list, "leader_and_isr"):
            item = {"topic": entry.get("topic"), "partition": entry.get("partition"), "error_code": 0}
            try:
                self._apply_one(entry, brokers)
            except AdsError as exc:
                item.update(error_code=int(exc.code), message=exc.message or str(exc))
            results.append(item)
        return {"error_code": 0, "partitions": results}

    def _apply_one(self, entry: dict[str, Any], brokers: dict[int, dict]) -> None:
        topic, number = entry["topic"], entry["partition"]
        role = PartitionRole.from_wire(entry)  # the body passed its schema at the boundary
        me = self.broker.broker_id
        if me not in role.replicas and me not in role.observers:
            self._stop(topic, number, delete=True)
            return
        partition = self.broker.ensure_partition(topic, number, entry.get("topic_id") or "",
                                                 entry.get("config") or {})
        throttle = entry.get("throttle_bytes_per_s")
        partition.throttle_bytes_per_s = int(throttle) if throttle else None
        refused = partition.apply_leader_and_isr(role, now_ms())
        if refused is not None and refused.error is not ErrorCode.NONE:
            raise error_for(refused.error, f"{topic}-{number}: {refused.message}")
        if role.leader_id == me or partition.fetch_request() is None:
            self.broker.fetchers.unfollow(partition.key)
        else:
            leader = brokers.get(role.leader_id) or self._known_broker(role.leader_id)
            if leader is None:
                self.broker.fetchers.unfollow(partition.key)
            else:
                host, port = endpoint_address(leader.get("endpoints"), self.broker.config.inter_broker_listener_name,
                                              (str(leader["host"]), int(leader["port"])))
                self.broker.fetchers.follow(partition, LeaderEndpoint(role.leader_id, host, port))
        self.broker.replica_manager.notify_changed(partition.key)

    def _known_broker(self, broker_id: int) -> dict | None:
        if broker_id < 0:
            return None
        info = self.broker.metadata.broker(broker_id)
        return info.to_json() if info else None

    def handle_update_metadata(self, body: dict[str, Any]) -> dict[str, Any]:
        self._fence(body)
        self.broker.metadata.apply_update(body)
        for entry in body.get("partitions", []):
            config = entry.get("config")
            partition = self.broker.replica_manager.maybe_get(entry.get("topic"), entry.get("partition"))
            if partition is not None and config is not None:
                self.broker.apply_topic_config(partition, config)
        return {"error_code": 0}

    def handle_replica_log_ends(self, body: dict[str, Any]) -> dict[str, Any]:
        """Where this broker's replicas end, for the controller to pick the most complete one in an unclean
        election (KIP-966's unclean recovery). A replica not loaded yet (the broker just started, and the
        controller's leader_and_isr is still on its way) is opened from disk as leader_and_isr would."""
        what = "replica_log_ends partition"
        # Parsed whole before the epoch check, which records the epoch: a malformed request changes nothing.
        asked = [(wire.require(entry, "topic", str, what), wire.require(entry, "partition", int, what),
                  wire.optional(entry, "topic_id", str, "", what), wire.optional(entry, "config", dict, {}, what))
                 for entry in wire.require(body, "partitions", list, "replica_log_ends")]
        self._fence(body)
        results = []
        for topic, number, topic_id, config in asked:
            item: dict[str, Any] = {"topic": topic, "partition": number, "error_code": 0}
            try:
                partition = self.broker.replica_manager.maybe_get(topic, number)
                if partition is None and self.broker.logs.get(topic, number) is None:
                    # No replica here, loaded or on disk: opening one would create a phantom partition (an
                    # empty log nobody assigned here, which once poisoned this broker's checkpoints).
                    raise UnknownTopicOrPartitionError(f"broker {self.broker.broker_id} holds no replica of "
                                                       f"{topic}-{number}")
                partition = partition or self.broker.ensure_partition(topic, number, topic_id, config)
                item.update(log_end_of(partition.state))
            except AdsError as exc:
                item.update(error_code=int(exc.code), message=exc.message or str(exc))
            results.append(item)
        return {"error_code": 0, "partitions": results}

    def handle_stop_replica(self, body: dict[str, Any]) -> dict[str, Any]:
        self._fence(body)
        results = []
        for entry in wire.require(body, "partitions", list, "stop_replica"):
            topic = wire.require(entry, "topic", str, "stop_replica")
            number = wire.require(entry, "partition", int, "stop_replica")
            self._stop(topic, number, delete=bool(entry.get("delete", False)))
            results.append({"topic": topic, "partition": number, "error_code": 0})
        return {"error_code": 0, "partitions": results}

    def _stop(self, topic: str, number: int, delete: bool) -> None:
        self.broker.fetchers.unfollow((topic, number))
        removed = self.broker.replica_manager.remove(topic, number)
        if removed is not None or delete:
            self.broker.close_partition_log(topic, number, delete=delete)
