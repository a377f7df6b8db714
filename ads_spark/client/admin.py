"""The admin client: topics, configs, offsets, leadership and consumer groups, as Kafka's AdminClient offers them.

Admin requests go to any broker (topic creation and configs are written to
ZooKeeper by the broker that receives them; the controller reacts). Calls that
change the cluster wait, bounded by ``timeout_s``, until the change is visible
in metadata, so a script can use a topic as soon as ``create_topic`` returns.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Mapping

from ads_spark.config import ADMIN_KEYS, check_client_keys, parse_int
from ads_spark.protocol import wire
from ads_spark.protocol.connection import Connections, PartitionMetadata, backoff_sleep
from ads_spark.client.consumer import API_TIMEOUT_MS_DEFAULT, Consumer, TopicPartition
from ads_spark.client.admin_groups import GroupAdmin, GroupDescription, GroupListing, OffsetAndMetadata
from ads_spark.client.admin_schemas import SchemaAdmin, schema_text
from ads_spark.errors import AdsError, ErrorCode, RequestTimedOutError, error_for
from ads_spark.security.authorizer import AclBinding, AclBindingFilter
from ads_spark.security.credentials import Secret

WAIT_POLL_INTERVAL_S = 0.1


def admin_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of a client config that an Admin reads (``config.ADMIN_KEYS``): for an Admin made from a config
    shared with a producer or consumer (a Spark sink's ``acks``, a source's ``client.rack``), whose own client
    refuses a key none of them reads."""
    return {name: value for name, value in config.items() if name in ADMIN_KEYS}


def _filter_dict(acl_filter: AclBindingFilter | Mapping[str, Any]) -> dict[str, Any]:
    """A filter's JSON form (a mapping is checked by building the filter from it first)."""
    if not isinstance(acl_filter, AclBindingFilter):
        data = dict(acl_filter)
        acl_filter = AclBindingFilter(data.get("resource_type"), data.get("resource_name"),
                                      data.get("pattern_type") or "Any", data.get("principal"), data.get("host"),
                                      data.get("operation"), data.get("permission"))
    values = {"resource_type": acl_filter.resource_type, "resource_name": acl_filter.resource_name,
              "pattern_type": acl_filter.pattern_filter, "principal": acl_filter.principal, "host": acl_filter.host,
              "operation": acl_filter.operation, "permission": acl_filter.permission}
    return {key: getattr(value, "value", value) for key, value in values.items() if value is not None}


@dataclass(frozen=True)
class TopicDescription:
    topic: str
    topic_id: str
    partitions: list[PartitionMetadata]
    config: dict[str, str]  # the topic's overrides, as `kafka-topics --describe` shows them
    min_insync_replicas: int = 1  # the value that applies (override or the broker's default)


class Admin:
    def __init__(self, config: dict[str, Any], connections: Connections | None = None):
        # A key it would not read is refused by name (a typo, or a producer/consumer key: see admin_config).
        check_client_keys(ADMIN_KEYS, config, "admin")
        self.config = dict(config)
        self._connections = connections or Connections(config)
        self._owns_connections = connections is None
        self.api_timeout_ms = parse_int(self.config.get("default.api.timeout.ms", API_TIMEOUT_MS_DEFAULT),
                                        name="default.api.timeout.ms", min_value=0)
        self._groups = GroupAdmin(self._connections, self.api_timeout_ms)
        self._schemas = SchemaAdmin(self)

    def create_topic(self, name: str, partitions: int | None = None, replication_factor: int | None = None,
                     config: dict[str, str] | None = None, replica_assignment: list[list[int]] | None = None,
                     timeout_s: float = 30, observers: list[int] | None = None, schema=None) -> None:
        """``observers``: brokers holding a non-voting replica of every partition (replicate, never lead).
        ``partitions`` / ``replication_factor`` None: the brokers' num.partitions / default.replication.factor.
        ``schema`` (a pyarrow.Schema or Spark DDL text): a typed topic (schema.type=arrow), its version 1
        written with the topic."""
        body = {"topics": [{"topic": name, "partitions": partitions, "replication_factor": replication_factor,
                            "config": {k: str(v) for k, v in (config or {}).items()},
                            "replica_assignment": replica_assignment, "observers": observers,
                            "schema": None if schema is None else schema_text(schema)}]}
        self._check(self._connections.call_any(wire.ACTION_CREATE_TOPICS, body))
        self._wait(lambda: self._all_led(name, partitions if not replica_assignment else len(replica_assignment)),
                   timeout_s, f"topic '{name}' to get a leader for every partition")

    def create_partitions(self, name: str, partitions: int, timeout_s: float = 30) -> list[dict[str, Any]]:
        """Grow topic ``name`` to ``partitions`` partitions (Kafka's ``createPartitions``); returns the new
        ones as ``{"partition", "replicas"}``. A decrease or the same count raises InvalidPartitionsError.
        Waits, bounded by ``timeout_s``, until every live broker names a leader for each partition."""
        response = self._connections.call_any(wire.ACTION_CREATE_PARTITIONS, {"topic": name, "partitions": partitions})
        self._check(response)
        self._wait(lambda: self._all_led(name, partitions), timeout_s,
                   f"topic '{name}' to get a leader for each of its {partitions} partitions")
        return list(response.get("added", []))

    def delete_topic(self, name: str, timeout_s: float = 30) -> None:
        self._check(self._connections.call_any(wire.ACTION_DELETE_TOPICS, {"topics": [name]}))
        self._wait(lambda: name not in self.list_topics(), timeout_s, f"topic '{name}' to be deleted")

    def list_topics(self) -> list[str]:
        return sorted(self._connections.refresh().topics)

    def describe_topics(self, names: list[str] | None = None) -> list[TopicDescription]:
        response = self._read(wire.ACTION_METADATA, {"topics": names, "include_config": True})
        result = []
        for topic in response.get("topics", []):
            if topic.get("error_code"):
                unknown = topic["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                raise error_for(topic["error_code"], topic.get("message") or (
                    f"topic '{topic['topic']}' does not exist" if unknown else f"topic '{topic['topic']}'"))
            partitions = [PartitionMetadata(topic["topic"], int(p["partition"]), int(p.get("leader", -1)),
                                            int(p.get("leader_epoch", -1)), tuple(p.get("replicas", ())),
                                            tuple(p.get("isr", ())), tuple(p.get("elr", ()) or ()),
                                            tuple(p.get("observers", ()) or ()),
                                            tuple(p.get("offline_replicas", ()) or ()))
                          for p in topic.get("partitions", [])]
            config = dict(topic.get("config") or {})
            min_isr = int(topic.get("min_insync_replicas") or config.get("min.insync.replicas") or 1)
            result.append(TopicDescription(topic["topic"], topic.get("topic_id") or "", partitions, config, min_isr))
        return result

    def list_offsets(self, tps: list[TopicPartition], spec: str | int) -> dict[TopicPartition, int]:
        # The admin keys are connection keys, which a Consumer reads too.
        return Consumer(self.config, self._connections).list_offsets(tps, spec)

    def describe_configs(self, topic: str) -> dict[str, Any]:
        response = self._read(wire.ACTION_DESCRIBE_CONFIGS, {"topic": topic})
        self._check(response)
        return response

    def alter_configs(self, topic: str, set_configs: dict[str, str] | None = None,
                      delete_configs: list[str] | None = None) -> None:
        body = {"topic": topic, "set": {k: str(v) for k, v in (set_configs or {}).items()},
                "delete": list(delete_configs or [])}
        self._check(self._connections.call_any(wire.ACTION_ALTER_CONFIGS, body))

    def elect_leaders(self, election_type: str, partitions: list[TopicPartition] | None) -> dict[str, Any]:
        body = {"election_type": election_type,
                "partitions": None if partitions is None else [{"topic": tp.topic, "partition": tp.partition}
                                                                for tp in partitions]}
        response = self._connections.call_any(wire.ACTION_ELECT_LEADERS, body, timeout_ms=60_000)
        self._check(response)
        return response

    def alter_partition_reassignments(self, plan: dict[str, Any]) -> dict[str, Any]:
        response = self._connections.call_any(wire.ACTION_REASSIGN, plan, timeout_ms=60_000)
        self._check(response)
        return response

    def cluster(self) -> dict[str, Any]:
        return self._read(wire.ACTION_METADATA, {"topics": []})

    # ---- typed topics' schemas (issue #26; admin_schemas.py) --------------------------------------

    def register_schema(self, topic: str, schema, dry_run: bool = False) -> tuple[int, bool]:
        """(version, created) of ``schema`` (a pyarrow.Schema or DDL text) under the topic's compatibility mode;
        an equal registered version answers its number, created False. See ``SchemaAdmin.register_schema``."""
        return self._schemas.register_schema(topic, schema, dry_run)

    def check_schema(self, topic: str, schema) -> int:
        """The version ``schema`` would get, writing nothing; PolicyViolationError names the broken rules."""
        return self._schemas.check_schema(topic, schema)

    def get_schema(self, topic: str, version: int | None = None):
        """(version, pyarrow.Schema) of ``version`` or of the latest."""
        return self._schemas.get_schema(topic, version)

    def describe_schema(self, topic: str, once_timeout_ms: int | None = None) -> dict[str, Any]:
        """schema.type, compatibility, latest version and every version (schemas as pyarrow.Schema).
        ``once_timeout_ms``: each broker asked once within it, no retries (a planner that falls back when
        the cluster does not answer, instead of waiting default.api.timeout.ms)."""
        return self._schemas.describe_schema(topic, once_timeout_ms)

    # ---- ACLs and users (issue #23) ---------------------------------------------------------------

    def create_acls(self, bindings: list[AclBinding | Mapping[str, Any]], timeout_s: float | None = None) -> int:
        """Add ACLs (each checked here and again by the broker); returns once every live broker's ACL cache holds
        them (bounded by ``timeout_s``, default default.api.timeout.ms); returns the ACL version they made."""
        acls = [(b if isinstance(b, AclBinding) else AclBinding.from_dict(b)).to_dict() for b in bindings]
        response = self._connections.call_any(wire.ACTION_CREATE_ACLS, {"acls": acls})
        self._check(response)
        self.wait_for_acl_version(int(response["version"]), timeout_s)
        return int(response["version"])

    def delete_acls(self, filters: list[AclBindingFilter | Mapping[str, Any]],
                    timeout_s: float | None = None) -> list[AclBinding]:
        """Remove every ACL a filter matches; returns those removed, once every live broker has applied it."""
        response = self._connections.call_any(wire.ACTION_DELETE_ACLS, {"filters": [_filter_dict(f) for f in filters]})
        self._check(response)
        self.wait_for_acl_version(int(response["version"]), timeout_s)
        return [AclBinding.from_dict(item) for item in response.get("deleted", [])]

    def describe_acls(self, acl_filter: AclBindingFilter | Mapping[str, Any] | None = None) -> list[AclBinding]:
        """The ACLs a filter matches (None: all), as the answering broker's cache holds them."""
        body = {"filter": None if acl_filter is None else _filter_dict(acl_filter)}
        response = self._read(wire.ACTION_DESCRIBE_ACLS, body)
        self._check(response)
        return [AclBinding.from_dict(item) for item in response.get("acls", [])]

    def acl_cache_versions(self) -> dict[int, int]:
        """Each reachable live broker's ACL cache version (-1: not loaded yet)."""
        versions = {}
        for broker_id, address in sorted(self._connections.refresh().brokers.items()):
            try:
                answer = self._connections.call_action(address.host, address.port, wire.ACTION_DESCRIBE_ACLS,
                                                       {"filter": {"resource_type": "Cluster"}})
            except AdsError as exc:
                if exc.code in (ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT):
                    continue  # down or cut off: it answers nobody, so it cannot mislead anybody
                raise
            self._check(answer)
            versions[broker_id] = int(answer.get("cache_version", -1))
        return versions

    def wait_for_acl_version(self, version: int, timeout_s: float | None = None) -> None:
        """Until every reachable live broker's ACL cache is at ``version`` or later; RequestTimedOutError naming
        the brokers that lag after ``timeout_s`` (default default.api.timeout.ms)."""
        timeout_s = self.api_timeout_ms / 1000 if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        while True:
            lagging = {b: v for b, v in self.acl_cache_versions().items() if v < version}
            if not lagging:
                return
            if time.monotonic() >= deadline:
                shown = ", ".join(f"broker {b} at {v}" for b, v in sorted(lagging.items()))
                raise RequestTimedOutError(f"the ACL change (version {version}) is written, but after {timeout_s}s "
                                           f"these brokers have not applied it yet: {shown}")
            time.sleep(WAIT_POLL_INTERVAL_S)

    def upsert_user(self, username: str, password: str | Secret) -> None:
        """Add a user or change its password (its tokens then stop working). The password is sent, never kept."""
        secret = password.reveal() if isinstance(password, Secret) else password
        self._check(self._connections.call_any(wire.ACTION_ALTER_USER_CREDENTIALS,
                                               {"upsert": [{"username": username, "password": secret}]}))

    def delete_user(self, username: str) -> None:
        """Delete a user: its tokens stop working on every broker as soon as it sees the change."""
        self._check(self._connections.call_any(wire.ACTION_ALTER_USER_CREDENTIALS, {"delete": [username]}))

    def list_users(self) -> list[str]:
        response = self._read(wire.ACTION_DESCRIBE_USERS, {})
        self._check(response)
        return list(response.get("users", []))

    # ---- consumer groups (issue #24; admin_groups.py) ----------------------------------------------

    def list_consumer_groups(self, states: list[str] | None = None) -> list[GroupListing]:
        """Every group a live broker coordinates (each broker is asked for its own), sorted by id."""
        return self._groups.list_consumer_groups(states)

    def describe_consumer_groups(self, group_ids: list[str]) -> dict[str, GroupDescription]:
        """State, protocol and members (assignments decoded for consumer groups) of each group."""
        return self._groups.describe_consumer_groups(group_ids)

    def list_consumer_group_offsets(self, group_id: str, partitions: list[TopicPartition] | None = None
                                    ) -> dict[TopicPartition, OffsetAndMetadata]:
        return self._groups.list_consumer_group_offsets(group_id, partitions)

    def alter_consumer_group_offsets(self, group_id: str,
                                     offsets: Mapping[TopicPartition, int | OffsetAndMetadata]) -> None:
        """A standalone commit (no member): refused while the group has members, as in Kafka."""
        self._groups.alter_consumer_group_offsets(group_id, offsets)

    def delete_consumer_groups(self, group_ids: list[str]) -> None:
        self._groups.delete_consumer_groups(group_ids)

    def delete_consumer_group_offsets(self, group_id: str, partitions: list[TopicPartition]) -> None:
        self._groups.delete_consumer_group_offsets(group_id, partitions)

    def close(self) -> None:
        if self._owns_connections:
            self._connections.close()

    # ---- helpers --------------------------------------------------------------------

    def _read(self, action: str, body: dict[str, Any]) -> dict[str, Any]:
        """A read-only request, retried on retriable errors (every broker down or reconnecting to ZooKeeper
        mid-failover) for up to default.api.timeout.ms, as Kafka's admin client does. Writes are not
        retried here: a create that timed out may have happened."""
        deadline, attempt = time.monotonic() + self.api_timeout_ms / 1000, 0
        while True:
            try:
                return self._connections.call_any(action, body)
            except AdsError as exc:
                if not exc.retriable or time.monotonic() >= deadline:
                    raise
                self._connections.mark_stale()
                backoff_sleep(attempt, self._connections.retry_backoff_ms)
                attempt += 1

    @staticmethod
    def _check(response: dict[str, Any]) -> None:
        code = int(response.get("error_code", 0) or 0)
        if code:
            raise error_for(code, response.get("message", ""))
        for item in response.get("topics", []) or []:
            if isinstance(item, dict) and item.get("error_code"):
                raise error_for(item["error_code"], item.get("message", ""))

    def _all_led(self, name: str, partitions: int | None) -> bool:
        """Every partition led, as seen by every live broker: the controller informs brokers one by one,
        and "created" should mean that no broker still answers "no such topic"."""
        view = self._connections.refresh([name])
        found = view.topics.get(name, {})
        if partitions is None:  # the broker's num.partitions: as many as the first broker answering shows
            partitions = len(found) or -1
        if not (len(found) == partitions and all(p.leader >= 0 for p in found.values())):
            return False
        for address in view.brokers.values():
            try:
                answer = self._connections.call_action(address.host, address.port, wire.ACTION_METADATA,
                                                       {"topics": [name]})
            except AdsError as exc:
                if exc.code in (ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT):
                    continue  # down or cut off: it answers nobody, so it cannot mislead anybody
                raise
            topic = next((t for t in answer.get("topics", []) if t.get("topic") == name), None)
            if topic is None or topic.get("error_code") or len(topic.get("partitions", [])) != partitions:
                return False
        return True

    @staticmethod
    def _wait(predicate, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        last_error: AdsError | None = None
        while time.monotonic() < deadline:
            try:
                if predicate():
                    return
            except AdsError as exc:
                last_error = exc
            time.sleep(WAIT_POLL_INTERVAL_S)
        raise RequestTimedOutError(f"timed out after {timeout_s}s waiting for {what}"
                                   + (f" (last error: {last_error})" if last_error else ""))
