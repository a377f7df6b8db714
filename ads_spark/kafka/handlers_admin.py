"""Kafka's admin APIs on ADS's admin actions: CreateTopics, DeleteTopics, DescribeConfigs, AlterConfigs,
IncrementalAlterConfigs, CreatePartitions, DeleteRecords.

Each topic or resource of a request becomes its own ADS action call through ``bridge.call_action`` (one
schema, one ACL check, one ZooKeeper write path; ADS's actions refuse a whole batch for one bad topic,
Kafka answers per topic), and the answers become the version's fields. What is Kafka's and lives here:

* -1 partitions / replication factor is the broker's default (left out of the ADS body, which applies
  ``num.partitions`` / ``default.replication.factor``); explicit assignments become ADS's replica lists;
* ``timeout``: as Kafka's broker, the answer waits (bounded) until this broker's metadata shows the change;
  a timeout <= 0, or a change not visible in time, answers REQUEST_TIMED_OUT though the change goes on
  (librdkafka hides that code when it asked for no wait); ``validate_only`` runs every check, writes nothing;
* configs: DescribeConfigs lists every topic key with its value and source (the topic's override, the
  broker's static value, or the default), synonyms and documentation when asked; a BROKER resource lists
  this broker's own config, secrets as null. AlterConfigs replaces the topic's overrides (Kafka's
  semantics: what it leaves out returns to the default); IncrementalAlterConfigs SET / DELETE, and
  APPEND / SUBTRACT on ``cleanup.policy`` (the one list-valued topic key); other keys refuse them with
  INVALID_CONFIG naming the key. Broker configs cannot be altered: ADS reads them once at start.
* CreatePartitions places the new partitions itself (rack-aware); explicit assignments are refused.
* DeleteRecords is ADS's ``delete_records`` action (the leader moves its log start; followers follow it).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from typing import Any, Callable, Iterable

from ads_spark.broker.rpc import authorization
from ads_spark.config import BROKER_KEYS, TOPIC_DEFAULT_FROM_BROKER, TOPIC_KEYS, effective_topic_config
from ads_spark.errors import (
    AdsError, ErrorCode, InvalidConfigError, InvalidReplicaAssignmentError, InvalidRequestError,
)
from ads_spark.kafka import bridge
from ads_spark.kafka.api import ApiHandler, KafkaCall
from ads_spark.kafka.handlers_groups import millis
from ads_spark.protocol import wire
from ads_spark.security.authorizer import Operation, Resource

RESOURCE_TOPIC, RESOURCE_BROKER = 2, 4
# Kafka's ConfigSource numbers (DescribeConfigs v1+).
SOURCE_TOPIC, SOURCE_STATIC_BROKER, SOURCE_DEFAULT = 1, 4, 5
# Kafka's ConfigType numbers (DescribeConfigs v3+).
CONFIG_TYPES = {"bool": 1, "str": 2, "enum": 2, "int": 5, "double": 6, "list": 7}
INT32_TOPIC_KEYS = frozenset({"min.insync.replicas", "segment.bytes", "max.message.bytes"})
LIST_TOPIC_KEYS = frozenset({"cleanup.policy"})
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
UNKNOWN_TOPIC_ID = 100  # Kafka's code; ADS deletes topics by name only
WAIT_MAX_MS = 60_000  # bound on waiting for a change to show in metadata, whatever the request's timeout
WAIT_STEP_S = 0.05


def config_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def failed(exc: AdsError) -> dict[str, Any]:
    return {"error_code": int(exc.code), "error_message": exc.message or str(exc)}


def wait_until(ready: Callable[[], bool], timeout_ms: int) -> bool:
    """Whether ``ready()`` came true within ``timeout_ms`` (at most WAIT_MAX_MS; <= 0: not waited for)."""
    if timeout_ms <= 0:
        return False
    deadline = time.monotonic() + min(timeout_ms, WAIT_MAX_MS) / 1000
    while not ready():
        if time.monotonic() >= deadline:
            return False
        time.sleep(WAIT_STEP_S)
    return True


def _partitions_ready(metadata, topic: str, count: int) -> bool:
    entries = [metadata.partition(topic, number) for number in range(count)]
    return all(entry is not None and entry.get("leader", -1) >= 0 for entry in entries)


def _await_changes(results: list[dict[str, Any]], ready: Callable[[dict[str, Any]], bool], timeout_ms: int) -> None:
    """Kafka's broker answers a change once it is visible, else REQUEST_TIMED_OUT (the change still goes on)."""
    pending = [r for r in results if r["error_code"] == 0]
    if not pending:
        return
    waited = wait_until(lambda: all(ready(r) for r in pending), timeout_ms)
    for result in pending:
        if not waited and (timeout_ms <= 0 or not ready(result)):  # timeout <= 0: Kafka does not look
            result.update(error_code=int(ErrorCode.REQUEST_TIMED_OUT),
                          error_message="the change was made; it did not show in this broker's metadata in time")


# ---- topic configs ------------------------------------------------------------------------------------------

def _config_type(name: str) -> int:
    kind = "list" if name in LIST_TOPIC_KEYS else TOPIC_KEYS[name].kind
    return 3 if name in INT32_TOPIC_KEYS else CONFIG_TYPES.get(kind, 0)


def topic_config_entries(overrides: dict[str, str], broker_config, keys: Iterable[str] | None = None,
                         synonyms: bool = False, documentation: bool = False) -> list[dict[str, Any]]:
    """Every topic key (or those in ``keys``) as DescribeConfigs' entries: the value that applies, and where
    it comes from: the topic's override, else the broker's value of its synonym key (static when it differs
    from the key's default), else the default."""
    effective = effective_topic_config(broker_config.topic_defaults(), overrides)
    wanted = None if keys is None else set(keys)
    entries = []
    for name in sorted(TOPIC_KEYS):
        if wanted is not None and name not in wanted:
            continue
        broker_key = TOPIC_DEFAULT_FROM_BROKER.get(name)
        broker_value = broker_config[broker_key] if broker_key else TOPIC_KEYS[name].default
        broker_source = (SOURCE_STATIC_BROKER if broker_key and broker_value != BROKER_KEYS[broker_key].default
                         else SOURCE_DEFAULT)
        found = [{"name": name, "value": overrides[name], "source": SOURCE_TOPIC}] if name in overrides else []
        found.append({"name": broker_key or name, "value": config_text(broker_value), "source": broker_source})
        entries.append({"name": name, "value": config_text(effective.get(name)), "read_only": False,
                        "config_source": found[0]["source"], "is_sensitive": False, "config_type": _config_type(name),
                        "documentation": TOPIC_KEYS[name].doc if documentation else None,
                        "synonyms": found if synonyms else []})
    return entries


def sensitive(name: str) -> bool:
    return "password" in name or "secret" in name or name.endswith("jaas.config")


def broker_config_entries(broker_config, keys: Iterable[str] | None, synonyms: bool,
                          documentation: bool) -> list[dict[str, Any]]:
    """This broker's config as DescribeConfigs' entries: read-only (read once at start), secrets null."""
    values = broker_config.as_dict()
    wanted = None if keys is None else set(keys)
    entries = []
    for name in sorted(BROKER_KEYS):
        if wanted is not None and name not in wanted:
            continue
        key, hidden = BROKER_KEYS[name], sensitive(name)
        value = None if hidden else config_text(values.get(name))
        source = SOURCE_STATIC_BROKER if values.get(name) != key.default else SOURCE_DEFAULT
        entries.append({"name": name, "value": value, "read_only": True, "config_source": source,
                        "is_sensitive": hidden, "config_type": CONFIG_TYPES.get(key.kind, 0),
                        "documentation": key.doc if documentation else None,
                        "synonyms": [{"name": name, "value": value, "source": source}] if synonyms else []})
    return entries


def _describe_broker(call: KafkaCall, resource: Any, synonyms: bool, documentation: bool) -> dict[str, Any]:
    security = getattr(call.broker, "security", None)
    if authorization.enabled(security) and not authorization.allowed(
            security, call.context, Operation.DESCRIBE_CONFIGS, Resource.cluster()):
        return {"error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                "error_message": f"{call.context.principal} may not DescribeConfigs on the cluster"}
    if resource.resource_name not in ("", str(call.broker.broker_id)):
        return {"error_code": int(ErrorCode.INVALID_REQUEST),
                "error_message": f"this is broker {call.broker.broker_id}; ask broker {resource.resource_name} "
                                 "for its own config"}
    if resource.resource_name == "":
        return {"error_code": 0, "configs": []}  # cluster-wide dynamic defaults: ADS has none
    return {"error_code": 0, "configs": broker_config_entries(call.broker.config, resource.configuration_keys,
                                                                synonyms, documentation)}


def _describe_topic(call: KafkaCall, resource: Any, synonyms: bool, documentation: bool) -> dict[str, Any]:
    try:
        answer = bridge.call_action(call, wire.ACTION_DESCRIBE_CONFIGS, {"topic": resource.resource_name})
    except AdsError as exc:
        return failed(exc)
    return {"error_code": 0, "configs": topic_config_entries(answer["overrides"], call.broker.config,
                                                               resource.configuration_keys, synonyms, documentation)}


def describe_configs(call: KafkaCall, request: Any) -> dict[str, Any]:
    synonyms = bool(request.include_synonyms)
    documentation = bool(getattr(request, "include_documentation", False))
    results = []
    for resource in request.resources:
        if resource.resource_type == RESOURCE_TOPIC:
            result = _describe_topic(call, resource, synonyms, documentation)
        elif resource.resource_type == RESOURCE_BROKER:
            result = _describe_broker(call, resource, synonyms, documentation)
        else:
            result = {"error_code": int(ErrorCode.INVALID_REQUEST),
                      "error_message": f"resource type {resource.resource_type} has no configs in ADS "
                                       "(topics: 2, brokers: 4)"}
        results.append({"resource_type": resource.resource_type, "resource_name": resource.resource_name,
                        "error_message": None, "configs": [], **result})
    return {"results": results}


# ---- altering configs ----------------------------------------------------------------------------------------

def _named_once(configs: Iterable[Any], resource_name: str) -> list[Any]:
    configs = list(configs)
    twice = sorted(name for name, count in Counter(c.name for c in configs).items() if count > 1)
    if twice:
        raise InvalidRequestError(f"config {twice[0]!r} of {resource_name!r} is named more than once")
    return configs


def _not_null(config: Any, resource_name: str) -> str:
    if config.value is None:
        raise InvalidRequestError(f"config {config.name!r} of {resource_name!r}: a null value is not supported")
    return config.value


def replace_body(resource: Any, validate_only: bool) -> dict[str, Any]:
    """AlterConfigs: the given configs become the topic's whole set of overrides (the rest are deleted)."""
    name = resource.resource_name
    given = {c.name: _not_null(c, name) for c in _named_once(resource.configs, name)}
    return {"topic": resource.resource_name, "set": given, "delete": sorted(set(TOPIC_KEYS) - set(given)),
            "validate_only": validate_only}


def _list_change(current: str | None, value: str | None, operation: int) -> str:
    items = [item for item in (current or "").split(",") if item]
    change = [item.strip() for item in (value or "").split(",") if item.strip()]
    if operation == OP_APPEND:
        return ",".join(items + [item for item in change if item not in items])
    return ",".join(item for item in items if item not in change)


def incremental_body(resource: Any, validate_only: bool,
                     current: Callable[[], dict[str, str | None]]) -> dict[str, Any]:
    """IncrementalAlterConfigs: SET / DELETE each key; APPEND / SUBTRACT on list keys, from ``current()``
    (the topic's values that apply, read only when asked for)."""
    to_set: dict[str, str] = {}
    to_delete: list[str] = []
    values: dict[str, str | None] | None = None
    for config in _named_once(resource.configs, resource.resource_name):
        operation = config.config_operation
        if operation == OP_SET:
            to_set[config.name] = _not_null(config, resource.resource_name)
        elif operation == OP_DELETE:
            to_delete.append(config.name)
        elif operation in (OP_APPEND, OP_SUBTRACT):
            if config.name not in LIST_TOPIC_KEYS:
                raise InvalidConfigError(f"{'APPEND' if operation == OP_APPEND else 'SUBTRACT'} applies to list "
                                         f"configs only ({', '.join(sorted(LIST_TOPIC_KEYS))}); "
                                         f"{config.name!r} is not one")
            values = current() if values is None else values
            to_set[config.name] = _list_change(values.get(config.name), config.value, operation)
        else:
            raise InvalidRequestError(f"config {config.name!r}: unknown operation {operation} "
                                      "(SET 0, DELETE 1, APPEND 2, SUBTRACT 3)")
    return {"topic": resource.resource_name, "set": to_set, "delete": to_delete, "validate_only": validate_only}


def _alter(call: KafkaCall, request: Any, make_body: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
    responses = []
    for resource in request.resources:
        result: dict[str, Any] = {"error_code": 0, "error_message": None}
        if resource.resource_type != RESOURCE_TOPIC:
            result = {"error_code": int(ErrorCode.INVALID_REQUEST),
                      "error_message": "ADS alters topic configs only (resource type 2): a broker's config is "
                                       "its properties file, read once at start"}
        else:
            try:
                bridge.call_action(call, wire.ACTION_ALTER_CONFIGS, make_body(resource))
            except AdsError as exc:
                result = failed(exc)
        responses.append({"resource_type": resource.resource_type, "resource_name": resource.resource_name,
                          **result})
    return {"responses": responses}


def alter_configs(call: KafkaCall, request: Any) -> dict[str, Any]:
    return _alter(call, request, lambda resource: replace_body(resource, bool(request.validate_only)))


def incremental_alter_configs(call: KafkaCall, request: Any) -> dict[str, Any]:
    def body(resource: Any) -> dict[str, Any]:
        def current() -> dict[str, str | None]:
            answer = bridge.call_action(call, wire.ACTION_DESCRIBE_CONFIGS, {"topic": resource.resource_name})
            return {entry["name"]: entry["value"] for entry in answer["configs"]}
        return incremental_body(resource, bool(request.validate_only), current)
    return _alter(call, request, body)


# ---- topics and partitions ----------------------------------------------------------------------------------

def create_entry(topic: Any, broker_config) -> tuple[dict[str, Any], int, int]:
    """(the create_topics action's entry, partitions, replication factor) of one CreatableTopic."""
    entry: dict[str, Any] = {"topic": topic.name}
    if topic.assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            raise InvalidRequestError(f"topic {topic.name!r}: with assignments, num_partitions and "
                                      "replication_factor must be -1")
        replicas = {a.partition_index: [int(b) for b in a.broker_ids] for a in topic.assignments}
        if sorted(replicas) != list(range(len(topic.assignments))):
            raise InvalidReplicaAssignmentError(f"topic {topic.name!r}: assignments must name partitions "
                                                f"0..{len(topic.assignments) - 1} once each")
        entry["replica_assignment"] = [replicas[number] for number in range(len(replicas))]
        partitions, replication_factor = len(replicas), len(replicas[0])
    else:
        partitions, replication_factor = topic.num_partitions, topic.replication_factor
        if partitions == -1:
            partitions = broker_config["num.partitions"]
        else:
            entry["partitions"] = partitions
        if replication_factor == -1:
            replication_factor = broker_config["default.replication.factor"]
        else:
            entry["replication_factor"] = replication_factor
    configs = {c.name: _not_null(c, topic.name) for c in _named_once(topic.configs, topic.name)}
    if configs:
        entry["config"] = configs
    return entry, partitions, replication_factor


def _topic_id(metadata, name: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(metadata.topics[name]["topic_id"]))
    except (KeyError, TypeError, ValueError):
        return None


def _created_configs(call: KafkaCall, result: dict[str, Any], overrides: dict[str, str] | None) -> None:
    """CreateTopics v5+: the new topic's configs (needs DescribeConfigs on it, as in Kafka)."""
    if overrides is None:
        try:
            overrides = bridge.call_action(call, wire.ACTION_DESCRIBE_CONFIGS, {"topic": result["name"]})["overrides"]
        except AdsError as exc:
            result["topic_config_error_code"] = int(exc.code)
            return
    elif authorization.enabled(security := getattr(call.broker, "security", None)) and not \
            authorization.topic_allowed(security, call.context, Operation.DESCRIBE_CONFIGS, result["name"]):
        result["topic_config_error_code"] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        return
    result["configs"] = [{key: entry[key] for key in ("name", "value", "read_only", "config_source", "is_sensitive")}
                         for entry in topic_config_entries(overrides, call.broker.config)]


def create_topics(call: KafkaCall, request: Any) -> dict[str, Any]:
    validate_only = bool(request.validate_only)
    named = Counter(topic.name for topic in request.topics)
    results, overrides = [], {}
    for topic in request.topics:
        result = {"name": topic.name, "error_code": 0, "error_message": None, "configs": None}
        try:
            if named[topic.name] > 1:
                raise InvalidRequestError(f"topic {topic.name!r} is named more than once in the request")
            entry, partitions, replication_factor = create_entry(topic, call.broker.config)
            answer = bridge.call_action(call, wire.ACTION_CREATE_TOPICS,
                                        {"topics": [entry], "validate_only": validate_only})
            result.update(num_partitions=partitions, replication_factor=replication_factor)
            if validate_only:
                overrides[topic.name] = answer["topics"][0].get("config") or {}
        except AdsError as exc:
            result.update(failed(exc))
        results.append(result)
    metadata = call.broker.metadata
    if not validate_only:
        _await_changes(results, lambda r: _partitions_ready(metadata, r["name"], r["num_partitions"]),
                       millis(request.timeout))
    for result in results:
        if result["error_code"] == 0 and call.version >= 5:
            _created_configs(call, result, overrides.get(result["name"]))
        result["topic_id"] = _topic_id(metadata, result["name"]) if call.version >= 7 else None
    return {"topics": results}


def delete_topics(call: KafkaCall, request: Any) -> dict[str, Any]:
    if call.version >= 6:
        asked = [(topic.name, topic.topic_id) for topic in request.topics]
    else:
        asked = [(name, None) for name in request.topic_names]
    results = []
    for name, topic_id in asked:
        result = {"name": name, "topic_id": topic_id, "error_code": 0, "error_message": None}
        if name is None:
            result.update(error_code=UNKNOWN_TOPIC_ID, error_message="ADS deletes topics by name only")
        else:
            try:
                bridge.call_action(call, wire.ACTION_DELETE_TOPICS, {"topics": [name]})
            except AdsError as exc:
                result.update(failed(exc))
        results.append(result)
    metadata = call.broker.metadata
    _await_changes(results, lambda r: metadata.partition(r["name"], 0) is None, millis(request.timeout))
    return {"responses": results}


def create_partitions(call: KafkaCall, request: Any) -> dict[str, Any]:
    validate_only = bool(request.validate_only)
    named = Counter(topic.name for topic in request.topics)
    results = []
    for topic in request.topics:
        result = {"name": topic.name, "error_code": 0, "error_message": None, "count": topic.count}
        try:
            if named[topic.name] > 1:
                raise InvalidRequestError(f"topic {topic.name!r} is named more than once in the request")
            if topic.assignments is not None:
                raise InvalidReplicaAssignmentError(
                    f"topic {topic.name!r}: ADS places new partitions itself (rack-aware); send no assignments")
            bridge.call_action(call, wire.ACTION_CREATE_PARTITIONS,
                               {"topic": topic.name, "partitions": topic.count, "validate_only": validate_only})
        except AdsError as exc:
            result.update(failed(exc))
        results.append(result)
    if not validate_only:
        metadata = call.broker.metadata
        _await_changes(results, lambda r: _partitions_ready(metadata, r["name"], r["count"]), millis(request.timeout))
    return {"results": results}


def delete_records(call: KafkaCall, request: Any) -> dict[str, Any]:
    """Records below each partition's offset (-1: the HW) deleted on the leader (clients send each partition
    to its leader); answered with the new log start at once: followers follow on their next fetch (Kafka
    waits for them). A topic the caller may not Delete is refused alone, as Kafka does."""
    wanted = {(t.name, p.partition_index): p.offset for t in request.topics for p in t.partitions}
    security = getattr(call.broker, "security", None)
    errors: dict[tuple[str, int], dict[str, Any]] = {}
    if authorization.enabled(security):
        errors = {key: {"error_code": int(ErrorCode.TOPIC_AUTHORIZATION_FAILED), "low_watermark": -1}
                  for key in wanted
                  if not authorization.topic_allowed(security, call.context, Operation.DELETE, key[0])}
    asked = [{"topic": topic, "partition": number, "offset": offset}
             for (topic, number), offset in wanted.items() if (topic, number) not in errors]
    if asked:
        try:
            answer = bridge.call_action(call, wire.ACTION_DELETE_RECORDS, {"partitions": asked})
            errors.update({(e["topic"], e["partition"]): e for e in answer["partitions"]})
        except AdsError as exc:
            errors.update({(e["topic"], e["partition"]): {"error_code": int(exc.code), "low_watermark": -1}
                           for e in asked})
    return {"topics": [{"name": t.name, "partitions": [
        {"partition_index": p.partition_index, "low_watermark": errors[(t.name, p.partition_index)]["low_watermark"],
         "error_code": errors[(t.name, p.partition_index)]["error_code"]} for p in t.partitions]}
        for t in request.topics]}


API_HANDLERS: list[ApiHandler] = [
    ApiHandler(19, "CreateTopics", 2, 7, create_topics),
    ApiHandler(20, "DeleteTopics", 1, 6, delete_topics),
    ApiHandler(21, "DeleteRecords", 0, 2, delete_records),
    ApiHandler(32, "DescribeConfigs", 1, 4, describe_configs),
    ApiHandler(33, "AlterConfigs", 0, 2, alter_configs),
    ApiHandler(37, "CreatePartitions", 0, 3, create_partitions),
    ApiHandler(44, "IncrementalAlterConfigs", 0, 1, incremental_alter_configs),
]
