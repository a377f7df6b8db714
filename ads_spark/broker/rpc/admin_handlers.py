"""Admin and metadata requests: topics, configs, cluster metadata.

Metadata is answered from this broker's cache (pushed by the controller), so
any broker can bootstrap a client. Changes (create, delete, configs) are
validated here completely — name, counts, every config key and value — and only
then written to ZooKeeper through the broker's membership layer; the controller
reacts to the write. A rejected request writes nothing.
"""

from __future__ import annotations

from typing import Any

from ads_spark.broker.rpc import authorization, call_context
from ads_spark.broker.rpc.schema_handlers import SchemaHandlers, first_version
from ads_spark.broker.group.offsets_topic import is_internal
from ads_spark.protocol import wire
from ads_spark.protocol.names import validate_topic_name
from ads_spark.replication import reassignment
from ads_spark.config import TOPIC_KEYS, validate_topic_config
from ads_spark.config_schemas import (
    ARROW, SCHEMA_STATISTICS_COLUMNS, check_statistics_columns, check_unchanged_type, creation_config, schema_type,
)
from ads_spark.errors import (
    AdsError,
    BrokerNotAvailableError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
)
from ads_spark.protocol.records import now_ms

PARTITIONS_PER_TOPIC_MAX = 100_000


class AdminHandlers:
    def __init__(self, broker):
        self.broker = broker
        self.schemas = SchemaHandlers(broker)  # typed topics' register_schema / describe_schema

    def handlers(self) -> dict:
        return {
            **self.schemas.handlers(),
            wire.ACTION_METADATA: self.handle_metadata,
            wire.ACTION_CREATE_TOPICS: self.handle_create_topics,
            wire.ACTION_DELETE_TOPICS: self.handle_delete_topics,
            wire.ACTION_DESCRIBE_CONFIGS: self.handle_describe_configs,
            wire.ACTION_ALTER_CONFIGS: self.handle_alter_configs,
            wire.ACTION_INIT_PRODUCER_ID: self.handle_init_producer_id,
            wire.ACTION_CONTROLLED_SHUTDOWN: self.handle_controlled_shutdown,
            wire.ACTION_ELECT_LEADERS: self.handle_elect_leaders,
            wire.ACTION_REASSIGN: self.handle_reassign,
            wire.ACTION_CREATE_PARTITIONS: self.handle_create_partitions,
            wire.ACTION_DELETE_RECORDS: self.handle_delete_records,
        }

    def handle_delete_records(self, body: dict[str, Any]) -> dict[str, Any]:
        """Kafka's DeleteRecords, answered per partition: on each partition this broker leads, records below
        ``offset`` (-1: the HW) are deleted and the new log start (``low_watermark``) answered; followers delete
        the same from their next fetch. The log starts are checkpointed before the answer, so a restart of this
        broker does not bring deleted records back."""
        results, deleted = [], False
        for entry in body["partitions"]:
            topic, number = entry["topic"], entry["partition"]
            answer = {"topic": topic, "partition": number, "low_watermark": -1}
            try:
                answer.update(error_code=0, low_watermark=self._delete_records(topic, number, entry["offset"]))
                deleted = True
            except AdsError as exc:
                answer.update(error_code=int(exc.code), message=exc.message or str(exc))
            results.append(answer)
        if deleted:
            self.broker.logs.checkpoint_recovery_points()
        return {"error_code": 0, "partitions": results}

    def _delete_records(self, topic: str, number: int, offset: int) -> int:
        if is_internal(topic):
            raise InvalidTopicError(f"records of the internal topic {topic} cannot be deleted")
        partition = self.broker.replica_manager.maybe_get(topic, number)
        if partition is None:
            if self.broker.metadata.partition(topic, number) is None:
                raise UnknownTopicOrPartitionError(f"{topic}-{number} does not exist")
            raise NotLeaderOrFollowerError(f"broker {self.broker.broker_id} does not lead {topic}-{number}")
        return partition.delete_records(offset, now_ms())

    def handle_create_partitions(self, body: dict[str, Any]) -> dict[str, Any]:
        """Grow a topic to ``partitions`` (Kafka's CreatePartitions): refused for a decrease or the same count;
        the new partitions are written to ZooKeeper, and the controller leads them and tells the brokers."""
        topic = wire.require(body, "topic", str, "create_partitions")
        total = wire.require(body, "partitions", int, "create_partitions")
        if not 1 <= total <= PARTITIONS_PER_TOPIC_MAX:
            raise InvalidPartitionsError(f"partitions must be between 1 and {PARTITIONS_PER_TOPIC_MAX}, got {total}")
        added = self._membership().add_partitions(topic, total, validate_only=bool(body.get("validate_only")))
        return {"error_code": 0, "topic": topic, "partitions": total,
                "added": [{"partition": p, "replicas": list(r)} for p, r in sorted(added.items())]}

    def handle_reassign(self, body: dict[str, Any]) -> dict[str, Any]:
        """Validate a reassignment (Kafka's JSON) and record it in ZooKeeper; the controller carries it out."""
        membership = self._membership()
        partitions = wire.require(body, "partitions", list, "alter_partition_reassignments")
        if not partitions:
            raise InvalidRequestError("a reassignment needs at least one partition")
        live = set(membership.zk.live_brokers())
        plan = []
        for item in partitions:
            what = "reassignment partition"
            topic, number = wire.require(item, "topic", str, what), wire.require(item, "partition", int, what)
            replicas = wire.require(item, "replicas", list, what)
            found = membership.zk.read_topic(topic) or {}
            assignment = found.get("assignment")
            if assignment is None or number not in assignment:
                raise UnknownTopicOrPartitionError(f"{topic}-{number} does not exist")
            if not replicas or len(set(replicas)) != len(replicas) or not all(isinstance(r, int) for r in replicas):
                raise InvalidReplicaAssignmentError(f"{topic}-{number}: replicas {replicas} must be distinct broker ids")
            if set(replicas) - live:
                raise InvalidReplicaAssignmentError(
                    f"{topic}-{number}: brokers {sorted(set(replicas) - live)} are not alive")
            observing = reassignment.observers_among(replicas, (found.get("observers") or {}).get(number, ()))
            if observing:
                raise InvalidReplicaAssignmentError(
                    f"{topic}-{number}: brokers {list(observing)} are observers of the partition; a broker "
                    "cannot hold both a replica and an observer of a partition")
            plan.append({"topic": topic, "partition": number, "replicas": replicas})
        throttle = wire.optional(body, "throttle_bytes_per_s", int, None, "alter_partition_reassignments")
        if throttle is not None and throttle <= 0:
            raise InvalidRequestError(f"--throttle must be a positive number of bytes per second, not {throttle}")
        membership.zk.request_reassignment({"version": 1, "partitions": plan, "throttle_bytes_per_s": throttle})
        return {"error_code": 0, "partitions": plan}

    def handle_elect_leaders(self, body: dict[str, Any]) -> dict[str, Any]:
        """Preferred or unclean leader election, run by the controller (forwarded there if need be)."""
        election_type = wire.require(body, "election_type", str, "elect_leaders")
        if election_type not in ("preferred", "unclean"):
            raise InvalidRequestError(f"election_type must be 'preferred' or 'unclean', not {election_type!r}")
        partitions = body.get("partitions")
        if partitions is not None and not isinstance(partitions, list):
            raise InvalidRequestError("elect_leaders: 'partitions' must be a list or null")
        keys = None if partitions is None else [
            (wire.require(p, "topic", str, "elect_leaders"), wire.require(p, "partition", int, "elect_leaders"))
            for p in partitions]
        membership = self._membership()
        if membership.controller.active:
            return membership.controller.request_elect_leaders(election_type, keys, 30.0)
        return membership.ask_controller(wire.ACTION_ELECT_LEADERS, body)

    def handle_controlled_shutdown(self, body: dict[str, Any]) -> dict[str, Any]:
        """Another broker (or this one) is stopping: the controller moves its leadership away."""
        broker_id = wire.require(body, "broker_id", int, "controlled_shutdown")
        broker_epoch = wire.require(body, "broker_epoch", int, "controlled_shutdown")
        force = bool(body.get("force", False))
        return self._membership().controller.request_controlled_shutdown(broker_id, broker_epoch, force, 10.0)

    def handle_init_producer_id(self, body: dict[str, Any]) -> dict[str, Any]:
        """A new idempotent producer id (epoch 0) from this broker's ZooKeeper-allocated block."""
        return {"error_code": 0, "producer_id": self._membership().next_producer_id(), "producer_epoch": 0}

    def _membership(self):
        if self.broker.zk is None:
            raise InvalidRequestError("this broker runs without ZooKeeper; admin changes are unavailable")
        return self.broker.zk

    def handle_metadata(self, body: dict[str, Any]) -> dict[str, Any]:
        names = body.get("topics")
        if names is not None and not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
            raise InvalidRequestError("metadata: 'topics' must be a list of names or null")
        if self.broker.metadata.controller_epoch < 0:
            # Just started: it knows no topic yet, and "no such topic" would be a wrong answer.
            raise BrokerNotAvailableError(f"broker {self.broker.broker_id} has no metadata from the controller yet")
        if self.broker.zk is not None and not self.broker.zk.zk.connected:
            # Cut off from ZooKeeper, this broker would keep naming itself leader of partitions the controller
            # may already have moved: clients that can still reach it must ask another broker.
            raise BrokerNotAvailableError(f"broker {self.broker.broker_id} is not connected to ZooKeeper; "
                                          "its metadata may be stale")
        # Each broker's address on the listener this call came in on (a client outside the cluster's network
        # is given the EXTERNAL addresses, other brokers the INTERNAL ones); in-process callers: inter-broker.
        inter_broker = self.broker.config.inter_broker_listener_name
        result = self.broker.metadata.to_json(call_context.current().listener_name or inter_broker, inter_broker)
        topics = self.broker.metadata.describe(names)
        for topic in topics:
            if is_internal(topic["topic"]):
                topic["is_internal"] = True  # __consumer_offsets (Kafka's flag; clients leave it out of patterns)
            if not body.get("include_config"):
                topic.pop("config", None)
            elif "config" in topic:
                # What the overrides come to with this broker's defaults: a tool that counts partitions
                # under min ISR needs the value that applies, not only an override.
                topic["min_insync_replicas"] = self.broker._effective(topic["config"])["min.insync.replicas"]
        # Only what the caller may Describe (an all-topics answer leaves the rest out; a named one is
        # TOPIC_AUTHORIZATION_FAILED, existing or not), configs only with DescribeConfigs.
        result["topics"] = authorization.visible_metadata(getattr(self.broker, "security", None), call_context.current(),
                                                          names, topics, bool(body.get("include_config")))
        return result

    def handle_create_topics(self, body: dict[str, Any]) -> dict[str, Any]:
        requests = wire.require(body, "topics", list, "create_topics")
        # Validate everything first: a batch with one bad topic creates none.
        plans = [self._plan_topic(entry) for entry in requests]
        membership = self._membership()
        # Every topic is placed (alive brokers, assignment, not existing yet) before any is written, so a
        # refused batch creates none; only a creation racing this one can still fail a later write.
        placed = [(name, membership.plan_topic(name, partitions, replication_factor, assignment, observers),
                   config, observers, schema)
                  for name, partitions, replication_factor, assignment, config, observers, schema in plans]
        results = []
        for name, plan, config, observers, schema in placed:
            if body.get("validate_only"):  # every check above ran; nothing is written
                results.append({"topic": name, "error_code": 0, "partitions": len(plan), "config": config})
                continue
            membership.create_planned_topic(name, plan, config, observers, schema)
            results.append({"topic": name, "error_code": 0})
        return {"error_code": 0, "topics": results}

    def _plan_topic(self, entry: dict[str, Any]):
        what = "create_topics"
        name = wire.require(entry, "topic", str, what)
        validate_topic_name(name)
        assignment = entry.get("replica_assignment")
        if assignment:
            if not all(isinstance(r, list) and r and all(isinstance(b, int) for b in r) for r in assignment):
                raise InvalidRequestError("replica_assignment must be a list of non-empty lists of broker ids")
            partitions, replication_factor = len(assignment), len(assignment[0])
        else:
            # Left out (null or absent): the broker's num.partitions / default.replication.factor, as in
            # Kafka's CreateTopics (-1 there).
            partitions, replication_factor = entry.get("partitions"), entry.get("replication_factor")
            if partitions is None:
                partitions = self.broker.config["num.partitions"]
            if replication_factor is None:
                replication_factor = self.broker.config["default.replication.factor"]
            if type(partitions) is not int or type(replication_factor) is not int:
                raise InvalidRequestError("create_topics: 'partitions' and 'replication_factor' must be integers")
        if not 1 <= partitions <= PARTITIONS_PER_TOPIC_MAX:
            raise InvalidPartitionsError(f"partitions must be between 1 and {PARTITIONS_PER_TOPIC_MAX}, got {partitions}")
        if replication_factor < 1:
            raise InvalidReplicationFactorError(f"replication factor must be >= 1, got {replication_factor}")
        # A typed topic (issue #26): its schema in stored form, and schema.type=arrow (config_schemas.py).
        schema = first_version(entry.get("schema"))
        config = validate_topic_config(creation_config(entry.get("config") or {}, schema is not None),
                                       replication_factor, self.broker.config.topic_defaults())
        if schema is not None:
            check_statistics_columns(name, config, schema)
        observers = entry.get("observers") or []
        if not (isinstance(observers, list) and all(isinstance(b, int) for b in observers)) \
                or len(set(observers)) != len(observers):
            raise InvalidRequestError("observers must be a list of distinct broker ids")
        return name, partitions, replication_factor, assignment, config, observers, schema

    def handle_delete_topics(self, body: dict[str, Any]) -> dict[str, Any]:
        names = wire.require(body, "topics", list, "delete_topics")
        membership = self._membership()
        for name in names:
            if not isinstance(name, str):
                raise InvalidRequestError("delete_topics: topic names must be strings")
            if not membership.topic_exists(name):
                raise UnknownTopicOrPartitionError(f"topic '{name}' does not exist")
        for name in names:
            membership.delete_topic(name)
        return {"error_code": 0, "topics": [{"topic": n, "error_code": 0} for n in names]}

    def handle_describe_configs(self, body: dict[str, Any]) -> dict[str, Any]:
        topic = wire.require(body, "topic", str, "describe_configs")
        overrides = self._membership().topic_config(topic)
        effective = self.broker._effective(overrides)
        entries = [{"name": name, "value": _text(effective.get(name)), "is_default": name not in overrides}
                   for name in sorted(TOPIC_KEYS)]
        return {"error_code": 0, "topic": topic, "overrides": overrides, "configs": entries}

    def handle_alter_configs(self, body: dict[str, Any]) -> dict[str, Any]:
        topic = wire.require(body, "topic", str, "alter_configs")
        to_set = wire.optional(body, "set", dict, {}, "alter_configs")
        to_delete = wire.optional(body, "delete", list, [], "alter_configs")
        membership = self._membership()
        current = dict(membership.topic_config(topic))
        unknown = [k for k in to_delete if k not in TOPIC_KEYS]
        if unknown:
            raise InvalidRequestError(f"cannot delete unknown topic config {unknown[0]!r}")
        updated = {k: v for k, v in current.items() if k not in to_delete}
        updated.update(to_set)
        replication_factor = membership.replication_factor(topic)
        validated = validate_topic_config(updated, replication_factor, self.broker.config.topic_defaults())
        check_unchanged_type(topic, current, validated)
        if SCHEMA_STATISTICS_COLUMNS in to_set and schema_type(validated) == ARROW:
            # Named columns must be the latest version's now; a later version may drop one (no statistics then).
            check_statistics_columns(topic, validated, membership.zk.latest_schema(topic)[1])
        if not body.get("validate_only"):
            membership.set_topic_config(topic, validated)
        return {"error_code": 0, "topic": topic, "overrides": validated}


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value)
    return str(value)
