"""Kafka's cluster-description APIs on ADS: ApiVersions, Metadata (with auto topic creation), DescribeCluster.

ApiVersions answers the version table (``api.registry()``): exactly what has a handler, since clients
switch features on from versions and disconnect over an advertised API nobody serves. Metadata is ADS's
``metadata`` action run through ``bridge`` under the connection's context, so the brokers it names are
their addresses on the caller's Kafka listener (the context's ``kafka.<NAME>``; a broker without it is
left out), the topics are those the caller may Describe (a named one it may not is
TOPIC_AUTHORIZATION_FAILED, existing or not) and every field comes from the controller's pushed state:
leader, leader epoch (KIP-320, v7+), replicas, ISR, offline replicas (replicas whose broker is not live),
topic id, internal flag. A named topic that does not exist is created when Kafka's rules allow it
(``auto.create.topics.enable``, the request's allow flag from v4, not an all-topics request, the caller's
Create permission through ADS's own create_topics) and answered LEADER_NOT_AVAILABLE until its leaders
are known, as Kafka does. The cluster id is ADS's (ZooKeeper's ``/cluster/id``), read once per broker.
"""

from __future__ import annotations

import logging
import threading
import uuid
import weakref
from typing import Any

from ads_spark.broker.group.offsets_topic import is_internal
from ads_spark.broker.rpc import authorization
from ads_spark.config_kafka import AUTO_CREATE_KEY
from ads_spark.errors import AdsError, ErrorCode
from ads_spark.kafka import api, bridge
from ads_spark.kafka.api import ApiHandler, KafkaCall
from ads_spark.protocol.names import is_valid_topic_name
from ads_spark.security.authorizer import Operation, Resource

log = logging.getLogger("ads.kafka.metadata")

API_VERSIONS_KEY, METADATA_KEY, DESCRIBE_CLUSTER_KEY = 18, 3, 60
AUTHORIZED_OPERATIONS_OMITTED = -2147483648  # Kafka's "not asked for" (INT32_MIN)
UNKNOWN_TOPIC_ID = 100
LISTENER_NOT_FOUND = 72
LISTENER_NOT_FOUND_VERSION_MIN = 6  # earlier Metadata versions say LEADER_NOT_AVAILABLE (Kafka's choice)

# Kafka's AclOperation codes: bit (1 << code) of an authorized-operations field says the caller may.
ACL_OPERATION_CODES = {
    Operation.READ: 3, Operation.WRITE: 4, Operation.CREATE: 5, Operation.DELETE: 6, Operation.ALTER: 7,
    Operation.DESCRIBE: 8, Operation.CLUSTER_ACTION: 9, Operation.DESCRIBE_CONFIGS: 10,
    Operation.ALTER_CONFIGS: 11, Operation.IDEMPOTENT_WRITE: 12,
}
TOPIC_OPERATIONS = (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DELETE, Operation.ALTER,
                    Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS)
CLUSTER_OPERATIONS = (Operation.CREATE, Operation.ALTER, Operation.DESCRIBE, Operation.CLUSTER_ACTION,
                      Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE)


# ---- ApiVersions -------------------------------------------------------------------------------------


def handle_api_versions(call: KafkaCall, request: Any) -> dict:
    """The version table (a version this broker does not serve is answered by frames.py in v0)."""
    table = api.registry()
    return {"error_code": 0, "api_keys": [{"api_key": entry.api_key, "min_version": entry.min_version,
                                           "max_version": entry.max_version}
                                          for entry in sorted(table.values(), key=lambda entry: entry.api_key)]}


# ---- operations bit fields ---------------------------------------------------------------------------


def operations_bits(allowed: dict[Operation, bool]) -> int:
    """Kafka's authorized-operations int32 of each operation's verdict."""
    bits = 0
    for operation, verdict in allowed.items():
        if verdict:
            bits |= 1 << ACL_OPERATION_CODES[operation]
    return bits


def topic_operations(call: KafkaCall, topic: str) -> int:
    security = getattr(call.broker, "security", None)
    return operations_bits({operation: not authorization.enabled(security)
                            or authorization.topic_allowed(security, call.context, operation, topic)
                            for operation in TOPIC_OPERATIONS})


def cluster_operations(call: KafkaCall) -> int:
    security = getattr(call.broker, "security", None)
    return operations_bits({operation: not authorization.enabled(security)
                            or authorization.allowed(security, call.context, operation, Resource.cluster())
                            for operation in CLUSTER_OPERATIONS})


# ---- cluster id --------------------------------------------------------------------------------------

_cluster_ids: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()
_cluster_ids_lock = threading.Lock()


def cluster_id(broker: Any) -> str | None:
    """The cluster's id in ZooKeeper (made by the first broker that connected; it never changes), read once
    per broker; None for a broker without ZooKeeper or when it cannot be read now (asked again next time)."""
    with _cluster_ids_lock:
        known = _cluster_ids.get(broker)
    if known is not None:
        return known
    membership = getattr(broker, "zk", None)
    if membership is None:
        return None
    try:
        found = membership.zk.cluster_id()
    except Exception:  # ZooKeeper unreachable: the answer goes without an id this time
        log.debug("cluster id not readable from ZooKeeper", exc_info=True)
        return None
    with _cluster_ids_lock:
        _cluster_ids[broker] = found
    return found


# ---- Metadata ----------------------------------------------------------------------------------------


def requested_topics(request: Any, version: int) -> list[Any] | None:
    """The names asked for in request order, each once (None entries: asked by topic id); None: every topic
    (v0: an empty list, v1+: null)."""
    topics = request.topics
    if topics is None or (version == 0 and not topics):
        return None
    return list(dict.fromkeys(topic.name for topic in topics))


def broker_entry(broker: dict) -> dict:
    return {"node_id": broker["id"], "host": broker["host"], "port": broker["port"], "rack": broker.get("rack")}


def partition_entry(partition: dict, listed: set[int], live: set[int], version: int) -> dict:
    """Kafka's MetadataResponsePartition of one partition of ADS's metadata answer."""
    leader = partition.get("leader", -1)
    replicas = list(partition.get("replicas") or ())
    offline = [replica for replica in replicas if replica not in live]
    code = 0
    if leader < 0 or leader not in live:
        code = int(ErrorCode.LEADER_NOT_AVAILABLE)
    elif leader not in listed:  # alive, but without the caller's listener
        code = LISTENER_NOT_FOUND if version >= LISTENER_NOT_FOUND_VERSION_MIN else int(ErrorCode.LEADER_NOT_AVAILABLE)
    return {"error_code": code, "partition_index": partition["partition"], "leader_id": leader,
            "leader_epoch": partition.get("leader_epoch", -1), "replica_nodes": replicas,
            "isr_nodes": list(partition.get("isr") or ()), "offline_replicas": offline}


def topic_id_of(value: Any) -> uuid.UUID | None:
    """ADS's topic id (a uuid's text) as Kafka's uuid; None (sent as the zero uuid) when it is not one."""
    try:
        return uuid.UUID(str(value)) if value else None
    except ValueError:
        return None


def topic_entry(topic: dict, listed: set[int], live: set[int], version: int) -> dict:
    """Kafka's MetadataResponseTopic of one topic of ADS's metadata answer."""
    partitions = [partition_entry(p, listed, live, version) for p in topic.get("partitions") or ()]
    return {"error_code": int(topic.get("error_code") or 0), "name": topic["topic"],
            "topic_id": topic_id_of(topic.get("topic_id")),
            "is_internal": bool(topic.get("is_internal")) or is_internal(topic["topic"]),
            "partitions": sorted(partitions, key=lambda entry: entry["partition_index"])}


def may_auto_create(call: KafkaCall, request: Any, names: list | None) -> bool:
    """Kafka's rule: a named (not all-topics) request, the broker's switch on, and from v4 the request's flag."""
    if names is None or not call.broker.config[AUTO_CREATE_KEY]:
        return False
    return call.version < 4 or bool(getattr(request, "allow_auto_topic_creation", True))


def auto_create(call: KafkaCall, name: str) -> int:
    """Create ``name`` with the broker's num.partitions / default.replication.factor through ADS's create_topics
    (Create on the topic or the cluster applies); the code to answer for it: LEADER_NOT_AVAILABLE once
    created (or created by someone else meanwhile), UNKNOWN_TOPIC_OR_PARTITION when the caller may not create
    it (Kafka's answer to a caller who may Describe but not Create), or the creation's own error."""
    if is_internal(name):
        return int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)  # created by the group coordinator only
    try:
        bridge.call_action(call, "create_topics", {"topics": [{"topic": name}]})
    except AdsError as exc:
        if exc.code is ErrorCode.TOPIC_ALREADY_EXISTS:
            return int(ErrorCode.LEADER_NOT_AVAILABLE)
        if exc.code in (ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.CLUSTER_AUTHORIZATION_FAILED):
            return int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        log.info("auto-creating topic %s failed: %s", name, exc)
        return int(exc.code)
    log.info("auto-created topic %s for %s", name, call.context.principal)
    return int(ErrorCode.LEADER_NOT_AVAILABLE)


def handle_metadata(call: KafkaCall, request: Any) -> dict:
    names = requested_topics(request, call.version)
    answered: dict[Any, dict] = {}
    if names is not None:  # names ADS's schema would refuse whole are answered alone, as Kafka does
        for name in names:
            if name is None:
                answered[name] = {"error_code": UNKNOWN_TOPIC_ID, "name": "", "partitions": ()}
            elif not is_valid_topic_name(name):
                answered[name] = {"error_code": int(ErrorCode.INVALID_TOPIC_EXCEPTION), "name": name, "partitions": ()}
    asked = None if names is None else [name for name in names if name not in answered]
    result = bridge.call_action(call, "metadata", {} if asked is None else {"topics": asked})
    brokers = [broker_entry(broker) for broker in result["brokers"]]
    listed = {broker["node_id"] for broker in brokers}
    live = {info.broker_id for info in call.broker.metadata.live_brokers()}
    creatable = may_auto_create(call, request, names)
    for topic in result["topics"]:
        entry = topic_entry(topic, listed, live, call.version)
        if entry["error_code"] == int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) and creatable:
            entry["error_code"] = auto_create(call, entry["name"])
        if getattr(request, "include_topic_authorized_operations", False) and not entry["error_code"]:
            entry["topic_authorized_operations"] = topic_operations(call, entry["name"])
        answered[topic["topic"]] = entry
    topics = list(answered.values()) if names is None else [answered[name] for name in names if name in answered]
    controller_id = result.get("controller_id", -1)
    answer = {"brokers": brokers, "cluster_id": cluster_id(call.broker), "topics": topics,
              # every ADS broker takes CreateTopics; the controller when the caller can reach it
              "controller_id": controller_id if controller_id in listed else call.broker.broker_id}
    if getattr(request, "include_cluster_authorized_operations", False):
        answer["cluster_authorized_operations"] = cluster_operations(call)
    return answer


# ---- DescribeCluster ---------------------------------------------------------------------------------


def handle_describe_cluster(call: KafkaCall, request: Any) -> dict:
    """The brokers on the caller's listener, the controller and the cluster id (KIP-700), from the metadata
    action with no topics. Nothing is refused: Kafka answers every caller, ACLs only shape the operations."""
    result = bridge.call_action(call, "metadata", {"topics": []})
    brokers = [{"broker_id": broker["id"], "host": broker["host"], "port": broker["port"], "rack": broker.get("rack")}
               for broker in result["brokers"]]
    listed = {broker["broker_id"] for broker in brokers}
    controller_id = result.get("controller_id", -1)
    answer = {"error_code": 0, "cluster_id": cluster_id(call.broker) or "", "brokers": brokers,
              "controller_id": controller_id if controller_id in listed else call.broker.broker_id}
    if request.include_cluster_authorized_operations:
        answer["cluster_authorized_operations"] = cluster_operations(call)
    return answer


API_HANDLERS: list[ApiHandler] = [
    ApiHandler(API_VERSIONS_KEY, "ApiVersions", 0, 3, handle_api_versions, before_auth=True),
    ApiHandler(METADATA_KEY, "Metadata", 0, 11, handle_metadata),
    ApiHandler(DESCRIBE_CLUSTER_KEY, "DescribeCluster", 0, 0, handle_describe_cluster),
]
