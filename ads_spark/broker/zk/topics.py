"""Topics in ZooKeeper: assignments, partition states, ISR updates, configs and deletion.

A mixin of ``ZkClient`` (``zk.py``) over the ``ZkSession`` helpers. The two
writes the replication rules depend on live here:

* the controller's batch of partition-state writes, each conditional on the
  state's znode version and every multi-op also checking ``/controller_epoch``'s
  version, so a deposed controller's write fails with
  ``StaleControllerEpochError`` (fencing) and a partition changed under it
  comes back as ``StaleVersion`` without failing the others;
* the leader's ISR update, conditional on the version it last saw, in one
  multi-op with its ``isr_change_notification``.

Topic creation is one transaction: assignment (with a fresh topic id), config,
every partition's initial state and a typed topic's schema version 1 appear
together or not at all (schemas left by an earlier topic of the same name are
deleted in it); so is a partition increase (the grown assignment, the new
states, the controller's notification), and so is deletion (the schemas too).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from typing import Any, Callable, Iterable, Mapping, Sequence

import pyarrow as pa
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from ads_spark.broker.zk.model import (
    CONFIG_CHANGE_PREFIX, CONFIG_CHANGES_PATH, CONTROLLER_EPOCH_PATH, DELETE_TOPICS_PATH, ISR_CHANGE_PATH,
    ISR_CHANGE_PREFIX, PARTITION_CHANGE_PATH, PARTITION_CHANGE_PREFIX, SCHEMAS_PATH, TOPICS_PATH, ControllerEpoch,
    PartitionStateZnode, StaleVersion, TopicAssignmentZnode,
    VersionedPartitionState, decode_json, delete_topic_marker_path, encode_json, partition_path,
    partition_state_path, partitions_path, topic_config_path, topic_path,
)
from ads_spark.broker.zk.schemas import add_first_version
from ads_spark.broker.zk.session import MultiOpFailed
from ads_spark.errors import (
    InvalidPartitionsError, InvalidReplicaAssignmentError, InvalidRequestError, StaleControllerEpochError,
    TopicAlreadyExistsError, UnknownTopicOrPartitionError,
)
from ads_spark.protocol.names import validate_topic_name

# ~150 bytes a state: a chunk stays far below ZooKeeper's 1 MB request limit.
PARTITION_STATES_PER_MULTI_MAX = 500
DELETE_TOPIC_ATTEMPTS_MAX = 3

StateChange = tuple[str, int, "PartitionStateZnode | Mapping[str, Any]", int]


def _stamped(state: PartitionStateZnode | Mapping[str, Any], partition_epoch: int,
             controller_epoch: int | None = None) -> PartitionStateZnode:
    if not isinstance(state, PartitionStateZnode):
        state = PartitionStateZnode.from_dict({"controller_epoch": controller_epoch or 0, **state})
    changes: dict[str, Any] = {"partition_epoch": partition_epoch}
    if controller_epoch is not None:
        changes["controller_epoch"] = controller_epoch
    return dataclasses.replace(state, **changes)


def _validate_assignment(topic: str, assignment: Mapping[int, Sequence[int]]) -> None:
    if not assignment:
        raise InvalidReplicaAssignmentError(f"topic '{topic}': an assignment needs at least one partition")
    if sorted(int(p) for p in assignment) != list(range(len(assignment))):
        raise InvalidReplicaAssignmentError(f"topic '{topic}': partitions must be numbered 0..{len(assignment) - 1}")
    for partition, replicas in assignment.items():
        if not replicas or len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(
                f"topic '{topic}' partition {partition}: replicas {list(replicas)} must be non-empty and distinct")


class ZkTopics:
    """Topic and partition-state operations; mixed into ``ZkClient``."""

    # ---- topics -----------------------------------------------------------------------

    def topic_names(self) -> list[str]:
        return self._children(TOPICS_PATH)

    def topic_assignment(self, topic: str) -> TopicAssignmentZnode:
        found = self._read(topic_path(topic))
        if found is None:
            raise UnknownTopicOrPartitionError(f"topic '{topic}' does not exist")
        return TopicAssignmentZnode.from_json(found[0])

    def write_topic_assignment(self, topic: str, change: Callable[[TopicAssignmentZnode], TopicAssignmentZnode],
                               controller_epoch_zk_version: int, attempts_max: int = 5) -> TopicAssignmentZnode:
        """Read-modify-write the assignment znode, conditional on its version and fenced by the controller epoch."""
        for _ in range(attempts_max):
            found = self._read(topic_path(topic))
            if found is None:
                raise UnknownTopicOrPartitionError(f"topic '{topic}' does not exist")
            updated = change(TopicAssignmentZnode.from_json(found[0]))

            def build(tx, version=found[1].version, value=updated.to_json()) -> None:
                tx.check(CONTROLLER_EPOCH_PATH, controller_epoch_zk_version)
                tx.set_data(topic_path(topic), value, version=version)

            try:
                self._commit(build, f"updating the assignment of topic '{topic}'")
                return updated
            except MultiOpFailed as failed:
                if failed.index == 0:
                    raise StaleControllerEpochError("the controller epoch was superseded; assignment not written") \
                        from None
                if not isinstance(failed.error, BadVersionError):
                    raise
        raise InvalidRequestError(f"the assignment of topic '{topic}' kept changing; retry")

    def read_topic(self, topic: str) -> dict[str, Any] | None:
        """{"topic_id", "assignment" {partition: [replicas]}, "observers", ..., "config"}, or None."""
        found, config = self._read_many([topic_path(topic), topic_config_path(topic)])
        if found is None:
            return None
        znode = TopicAssignmentZnode.from_json(found[0])
        return {
            "topic_id": znode.topic_id,
            "assignment": {p: list(r) for p, r in sorted(znode.partitions.items())},
            "observers": {p: list(r) for p, r in znode.observers.items()},
            "adding_replicas": {p: list(r) for p, r in znode.adding_replicas.items()},
            "removing_replicas": {p: list(r) for p, r in znode.removing_replicas.items()},
            "config": dict((decode_json(config[0]) or {}).get("config", {})) if config else {},
        }

    def create_topic(self, topic: str, assignment: Mapping[int, Sequence[int]],
                     config: Mapping[str, str] | None = None,
                     initial_states: Mapping[int, PartitionStateZnode] | None = None,
                     controller_epoch: ControllerEpoch | None = None,
                     observers: Mapping[int, Sequence[int]] | None = None,
                     schema: pa.Schema | None = None) -> str:
        """Create the topic in one transaction; return its new topic id.

        Each partition starts with ``initial_states[p]`` or, by default, its
        first replica as leader at leader epoch 0 and every replica in the ISR.
        With ``controller_epoch`` the transaction is also fenced on it. With
        ``schema`` (stored form, field ids given) it also writes the typed
        topic's schema version 1; the caller sets ``schema.type`` in ``config``.
        """
        validate_topic_name(topic)
        _validate_assignment(topic, assignment)
        if self._read(delete_topic_marker_path(topic)) is not None:
            raise TopicAlreadyExistsError(f"topic '{topic}' is marked for deletion; retry once it is gone")
        epoch = controller_epoch or self.controller_epoch()
        topic_id = str(uuid.uuid4())
        znode = TopicAssignmentZnode(topic_id, {int(p): tuple(int(b) for b in r) for p, r in assignment.items()},
                                     {int(p): tuple(int(b) for b in r) for p, r in (observers or {}).items()})
        config_value = encode_json({"version": 1, "config": {str(k): str(v) for k, v in (config or {}).items()}})
        stale_config = self._read(topic_config_path(topic))
        stale_schemas = self.stale_schema_paths(topic)
        if schema is not None:
            self._create_if_absent(SCHEMAS_PATH, b"")  # the parent of every topic's schemas, once per cluster

        def build(tx) -> None:
            tx.create(topic_path(topic), znode.to_json())
            tx.create(partitions_path(topic))
            for partition, replicas in sorted(znode.partitions.items()):
                state = (initial_states or {}).get(partition) or PartitionStateZnode(replicas[0], 0, replicas)
                tx.create(partition_path(topic, partition))
                tx.create(partition_state_path(topic, partition),
                          _stamped(state, 0, state.controller_epoch or epoch.epoch).to_json())
            if stale_config is None:
                tx.create(topic_config_path(topic), config_value)
            else:  # left by an earlier incarnation of this topic
                tx.set_data(topic_config_path(topic), config_value, version=stale_config[1].version)
            for path in stale_schemas:  # children first: left by an earlier incarnation of this topic
                tx.delete(path)
            if schema is not None:
                add_first_version(tx, topic, schema, int(time.time() * 1000))
            if controller_epoch is not None:
                tx.check(CONTROLLER_EPOCH_PATH, controller_epoch.zk_version)

        try:
            self._commit(build, f"creating topic '{topic}'")
        except MultiOpFailed as failed:
            if failed.index == 0 and isinstance(failed.error, NodeExistsError):
                raise TopicAlreadyExistsError(f"topic '{topic}' already exists") from None
            if isinstance(failed.error, BadVersionError) and controller_epoch is not None:
                raise StaleControllerEpochError(
                    f"controller epoch {controller_epoch.epoch} was superseded; topic '{topic}' not created") from None
            raise InvalidRequestError(f"topic '{topic}' was not created: {failed}") from None
        return topic_id

    def add_partitions(self, topic: str, added: Mapping[int, Sequence[int]],
                       observers: Mapping[int, Sequence[int]] | None, partitions_before: int) -> None:
        """Add partitions ``added`` (numbered on from ``partitions_before``) to a topic in one transaction:
        the assignment (conditional on the version read, which must still hold ``partitions_before``
        partitions), each new partition's initial state (first replica leading, every replica in the ISR,
        as at creation) and the notification the controller watches. The existing partitions are untouched."""
        found = self._read(topic_path(topic))
        if found is None:
            raise UnknownTopicOrPartitionError(f"topic '{topic}' does not exist")
        if self._read(delete_topic_marker_path(topic)) is not None:
            raise UnknownTopicOrPartitionError(f"topic '{topic}' is marked for deletion")
        znode = TopicAssignmentZnode.from_json(found[0])
        if len(znode.partitions) != partitions_before:
            raise InvalidPartitionsError(f"topic '{topic}' has {len(znode.partitions)} partitions, not "
                                         f"{partitions_before}: it changed meanwhile; retry")
        grown = {**znode.partitions, **{int(p): tuple(int(b) for b in r) for p, r in added.items()}}
        _validate_assignment(topic, grown)
        updated = dataclasses.replace(znode, partitions=grown, observers={
            **znode.observers, **{int(p): tuple(int(b) for b in r) for p, r in (observers or {}).items()}})
        epoch = self.controller_epoch()
        change = encode_json({"version": 1, "topic": topic})

        def build(tx) -> None:
            tx.set_data(topic_path(topic), updated.to_json(), version=found[1].version)
            for partition in sorted(added):
                replicas = updated.partitions[partition]
                tx.create(partition_path(topic, partition))
                tx.create(partition_state_path(topic, partition),
                          _stamped(PartitionStateZnode(replicas[0], 0, replicas), 0, epoch.epoch).to_json())
            tx.create(f"{PARTITION_CHANGE_PATH}/{PARTITION_CHANGE_PREFIX}", change, sequence=True)

        try:
            self._commit(build, f"adding partitions to topic '{topic}'")
        except MultiOpFailed as failed:
            if failed.index == 0 and isinstance(failed.error, (BadVersionError, NoNodeError)):
                raise InvalidPartitionsError(f"topic '{topic}' changed while partitions were added; retry") from None
            raise InvalidRequestError(f"partitions of topic '{topic}' were not added: {failed}") from None

    def take_partition_change_notifications(self) -> list[str]:
        """Topics named by pending partition change notifications (which are then deleted)."""
        return sorted({str((value or {}).get("topic", ""))
                       for value in self._take_notifications(PARTITION_CHANGE_PATH, PARTITION_CHANGE_PREFIX)} - {""})

    def watch_partition_changes(self, callback: Callable[[], None]) -> None:
        self._watch_children("partition_changes", PARTITION_CHANGE_PATH, callback)

    def watch_topics(self, callback: Callable[[], None]) -> None:
        """``callback()`` whenever a topic znode is created or deleted."""
        self._watch_children("topics", TOPICS_PATH, callback)

    # ---- partition states -------------------------------------------------------------

    def read_partition_state(self, topic: str, partition: int) -> VersionedPartitionState:
        found = self._read(partition_state_path(topic, partition))
        if found is None:
            raise UnknownTopicOrPartitionError(f"{topic}-{partition} has no state in ZooKeeper")
        return VersionedPartitionState(PartitionStateZnode.from_json(found[0]), found[1].version)

    def read_partition_states(self, keys: Iterable[tuple[str, int]]) -> dict[tuple[str, int], VersionedPartitionState]:
        """Pipelined reads; partitions without a state are left out."""
        keys = list(keys)
        found = self._read_many([partition_state_path(t, p) for t, p in keys])
        return {key: VersionedPartitionState(PartitionStateZnode.from_json(item[0]), item[1].version)
                for key, item in zip(keys, found) if item is not None}

    def write_partition_states(self, controller_epoch: int, controller_epoch_zk_version: int,
                               changes: Sequence[StateChange],
                               chunk_size: int = PARTITION_STATES_PER_MULTI_MAX) -> list[int | StaleVersion]:
        """The controller's batch write: ``(topic, partition, state, expected_zk_version)`` each.

        Returns, in order, each state's new znode version, or ``StaleVersion``
        when that partition changed since the version given. Chunks of
        ``chunk_size`` go out pipelined, each checking ``/controller_epoch``; a
        deposed controller gets ``StaleControllerEpochError`` and writes nothing
        further.
        """
        if any(expected < 0 for _, _, _, expected in changes):
            raise InvalidRequestError("every partition-state write must name the znode version it replaces")
        values = [_stamped(state, expected + 1, controller_epoch).to_json() for _, _, state, expected in changes]
        results: list[int | StaleVersion | None] = [None] * len(changes)
        chunks = [list(range(i, min(i + chunk_size, len(changes)))) for i in range(0, len(changes), chunk_size)]

        def send(indexes: list[int]):
            def build(tx) -> None:
                tx.check(CONTROLLER_EPOCH_PATH, controller_epoch_zk_version)
                for i in indexes:
                    topic, partition, _, expected = changes[i]
                    tx.set_data(partition_state_path(topic, partition), values[i], version=expected)
            return self._commit_async(build)

        in_flight = [(indexes, send(indexes)) for indexes in chunks]
        for indexes, pending in in_flight:
            self._settle_chunk(indexes, pending, send, results, changes, controller_epoch)
        return self._fill_stale(results, changes)

    def _settle_chunk(self, indexes: list[int], pending, send, results: list, changes: Sequence[StateChange],
                      controller_epoch: int) -> None:
        # Each retry drops the one write that failed, so this ends within len(indexes) rounds.
        while indexes:
            try:
                committed = self._transaction_result(pending, "writing partition states")
            except MultiOpFailed as failed:
                if failed.index == 0:
                    raise StaleControllerEpochError(
                        f"controller epoch {controller_epoch} was superseded: this broker is no longer "
                        "the controller and its partition-state writes are fenced") from None
                if not isinstance(failed.error, (BadVersionError, NoNodeError)):
                    raise
                lost = indexes[failed.index - 1]
                results[lost] = StaleVersion(changes[lost][0], changes[lost][1], changes[lost][3], None)
                indexes = [i for i in indexes if i != lost]
                pending = send(indexes) if indexes else None
                continue
            for i, stat in zip(indexes, committed[1:]):
                results[i] = stat.version
            return

    def _fill_stale(self, results: list, changes: Sequence[StateChange]) -> list[int | StaleVersion]:
        stale = [i for i, r in enumerate(results) if isinstance(r, StaleVersion)]
        current = self.read_partition_states([(changes[i][0], changes[i][1]) for i in stale])
        for i in stale:
            results[i] = dataclasses.replace(results[i], current=current.get((changes[i][0], changes[i][1])))
        return results

    def update_isr(self, topic: str, partition: int, new_state: PartitionStateZnode,
                   expected_zk_version: int) -> int | StaleVersion:
        """The leader's ISR change: write ``new_state`` if the znode is still at ``expected_zk_version``.

        On success (or if the znode already holds exactly this decision) returns
        the znode's version; otherwise ``StaleVersion`` with the current state,
        and the leader must take the newer state, not retry.
        """
        path = partition_state_path(topic, partition)  # checks the topic name first
        value = _stamped(new_state, expected_zk_version + 1).to_json()
        notification = encode_json({"version": 1, "partitions": [{"topic": topic, "partition": int(partition)}]})

        def build(tx) -> None:
            tx.set_data(path, value, version=expected_zk_version)
            tx.create(f"{ISR_CHANGE_PATH}/{ISR_CHANGE_PREFIX}", notification, sequence=True)

        try:
            results = self._commit(build, f"updating the ISR of {topic}-{partition}")
            return results[0].version
        except MultiOpFailed as failed:
            if failed.index != 0 or not isinstance(failed.error, (BadVersionError, NoNodeError)):
                raise
        current = self.read_partition_states([(topic, partition)]).get((topic, partition))
        if current is not None and current.state.same_decision(new_state):
            return current.zk_version
        return StaleVersion(topic, partition, expected_zk_version, current)

    # ---- notifications ----------------------------------------------------------------

    def _take_notifications(self, parent: str, prefix: str) -> list[Any]:
        names = [n for n in self._children(parent) if n.startswith(prefix)]
        paths = [f"{parent}/{n}" for n in names]
        values = [decode_json(item[0]) for item in self._read_many(paths) if item is not None]
        self._delete_many(paths)
        return values

    def take_isr_change_notifications(self) -> list[tuple[str, int]]:
        """The partitions named by pending ISR change notifications (which are then deleted)."""
        seen = set()
        for value in self._take_notifications(ISR_CHANGE_PATH, ISR_CHANGE_PREFIX):
            for item in (value or {}).get("partitions", []):
                seen.add((str(item["topic"]), int(item["partition"])))
        return sorted(seen)

    def watch_isr_changes(self, callback: Callable[[], None]) -> None:
        self._watch_children("isr_changes", ISR_CHANGE_PATH, callback)

    # ---- configs ----------------------------------------------------------------------

    def read_topic_config(self, topic: str) -> dict[str, str]:
        """The topic's overrides (empty if it has none)."""
        found = self._read(topic_config_path(topic))
        return dict((decode_json(found[0]) or {}).get("config", {})) if found else {}

    def write_topic_config(self, topic: str, config: Mapping[str, str]) -> None:
        """Replace the topic's overrides and announce the change, in one multi-op."""
        if self._read(topic_path(topic)) is None:
            raise UnknownTopicOrPartitionError(f"topic '{topic}' does not exist")
        value = encode_json({"version": 1, "config": {str(k): str(v) for k, v in config.items()}})
        exists = self._read(topic_config_path(topic)) is not None
        change = encode_json({"version": 2, "entity": f"topics/{topic}"})

        def build(tx) -> None:
            if exists:
                tx.set_data(topic_config_path(topic), value)
            else:
                tx.create(topic_config_path(topic), value)
            tx.create(f"{CONFIG_CHANGES_PATH}/{CONFIG_CHANGE_PREFIX}", change, sequence=True)

        self._commit(build, f"writing the config of topic '{topic}'")

    def take_config_change_notifications(self) -> list[str]:
        """Topics named by pending config change notifications (which are then deleted)."""
        names = set()
        for value in self._take_notifications(CONFIG_CHANGES_PATH, CONFIG_CHANGE_PREFIX):
            entity = str((value or {}).get("entity", ""))
            if entity.startswith("topics/"):
                names.add(entity[len("topics/"):])
        return sorted(names)

    def watch_config_changes(self, callback: Callable[[], None]) -> None:
        self._watch_children("config_changes", CONFIG_CHANGES_PATH, callback)

    # ---- deletion ---------------------------------------------------------------------

    def mark_topic_for_deletion(self, topic: str) -> None:
        """Create ``/admin/delete_topics/<topic>`` (idempotent); the controller does the rest."""
        if self._read(topic_path(topic)) is None:
            raise UnknownTopicOrPartitionError(f"topic '{topic}' does not exist")
        self._create_if_absent(delete_topic_marker_path(topic), b"")

    def pending_topic_deletions(self) -> list[str]:
        return self._children(DELETE_TOPICS_PATH)

    def watch_topic_deletions(self, callback: Callable[[], None]) -> None:
        self._watch_children("topic_deletions", DELETE_TOPICS_PATH, callback)

    def delete_topic_znodes(self, topic: str) -> None:
        """Remove the topic's assignment, states, config and schemas, then its deletion marker, atomically."""
        for _ in range(DELETE_TOPIC_ATTEMPTS_MAX):
            partitions = self._children(partitions_path(topic))
            schemas = self.stale_schema_paths(topic)
            present = self._read_many([topic_path(topic), partitions_path(topic), topic_config_path(topic),
                                       delete_topic_marker_path(topic)])
            states = self._read_many([partition_state_path(topic, int(p)) for p in partitions])

            def build(tx) -> None:
                for p, state in zip(partitions, states):
                    if state is not None:
                        tx.delete(partition_state_path(topic, int(p)))
                    tx.delete(partition_path(topic, int(p)))
                paths = [partitions_path(topic), topic_path(topic), topic_config_path(topic),
                         delete_topic_marker_path(topic)]
                for path, found in zip(paths, present):
                    if found is not None:
                        tx.delete(path)
                for path in schemas:
                    tx.delete(path)

            if not any(present) and not schemas:
                return
            try:
                self._commit(build, f"deleting topic '{topic}'")
                return
            except MultiOpFailed as failed:
                if not isinstance(failed.error, (NoNodeError, NodeExistsError, NotEmptyError)):
                    raise  # a concurrent change: list again
        raise InvalidRequestError(f"topic '{topic}' kept changing while being deleted; retry")
