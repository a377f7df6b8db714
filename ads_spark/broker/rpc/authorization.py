"""Whether the caller may make this request: the check before every handler, on every request.

``authorize_call`` is asked by ``server.py`` for each DoAction, DoGet and exchange/put before its
handler runs, and for each request inside an open fetch session or produce stream (a produce chunk
is checked in ``data_handlers``, where its metadata is parsed). What each call needs is the table
``security/request_acls.REQUIRED``; a name without an entry is refused (no default allow). A TOPIC
requirement is checked on every topic the request names, a CLUSTER one on the Cluster resource.

Authorization comes before existence: a refusal names the operation and the resource as the
caller wrote it, and is the same whether that topic exists or not, so a caller cannot probe for
topic names it may not see. Because it runs before the handler, a refused request changes nothing
(a controller request with a made-up epoch does not even get its epoch recorded).

metadata is the one call answered per topic: ``visible_metadata`` leaves out of an all-topics
answer what the caller may not Describe, and answers a named topic it may not Describe with
TOPIC_AUTHORIZATION_FAILED whether it exists or not (Kafka's behaviour).

``security`` is the broker's ``BrokerSecurity`` (``authorizer_enabled``, ``authorize(ctx, op,
resource)``); ``None`` (a stand-in broker) or an authorizer turned off allow everything, at the cost
of one attribute read per call.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Iterable

from ads_spark.broker.rpc.call_context import CallContext
from ads_spark.errors import (
    ClusterAuthorizationFailedError, ErrorCode, GroupAuthorizationFailedError, TopicAuthorizationFailedError,
)
from ads_spark.security.authorizer import Operation, Resource, ResourceType
from ads_spark.security.request_acls import (
    ALTERNATIVES, GROUP_TOPIC_REQUIRED, NO_ACL_NEEDED, REQUIRED, Requirement,
)

log = logging.getLogger("ads.broker.authorization")

TopicNames = Callable[[], Iterable[str]]


def _partition_topics(body: dict) -> list[str]:
    return [entry["topic"] for entry in body.get("partitions") or ()]


def _one_topic(body: dict) -> list[str]:
    return [body["topic"]]


def _created_topics(body: dict) -> list[str]:
    return [entry["topic"] for entry in body.get("topics") or ()]


def _listed_topics(body: dict) -> list[str]:
    return list(body.get("topics") or ())


# How each request with a TOPIC requirement names its topics; the bodies have passed their schemas
# (protocol/request_schemas.py) except a produce chunk's, checked in data_handlers before this.
# A TOPIC name missing here is refused: tests/unit/test_request_authorization.py checks the table.
TOPICS_OF: dict[str, Callable[[dict], list[str]]] = {
    "produce": _one_topic,
    "fetch": _partition_topics,
    "fetch_session": _partition_topics,
    "locate": _one_topic,
    "metadata": _listed_topics,
    "list_offsets": _partition_topics,
    "offset_for_leader_epoch": _partition_topics,
    "create_topics": _created_topics,
    "delete_topics": _listed_topics,
    "create_partitions": _one_topic,
    "delete_records": _partition_topics,
    "describe_configs": _one_topic,
    "alter_configs": _one_topic,
    "register_schema": _one_topic,
    "describe_schema": _one_topic,
}


def _group_id(body: dict) -> list[str]:
    return [body["group_id"]]


# How each request with a GROUP requirement names its group (issue #24). list_groups, describe_groups and
# delete_groups are answered per group by their handler (broker/rpc/group_handlers.py), as metadata is per
# topic: a group the caller may not Describe is left out of a listing, or answered GROUP_AUTHORIZATION_FAILED.
GROUPS_OF: dict[str, Callable[[dict], list[str]]] = {
    "find_coordinator": lambda body: [body["key"]],
    "join_group": _group_id,
    "sync_group": _group_id,
    "heartbeat": _group_id,
    "leave_group": _group_id,
    "offset_commit": _group_id,
    "offset_fetch": _group_id,
    "offset_delete": _group_id,
}
PER_GROUP_ANSWERED = frozenset({"list_groups", "describe_groups", "delete_groups"})


def enabled(security: Any) -> bool:
    return security is not None and security.authorizer_enabled


# Decisions of the call this thread serves, while the broker's ACL version stays the same: a stream asks
# the same questions with every request (a consumer's poll names the same topics each time), and one
# decision costs ~7-20 us (authorizer.authorize) against ~0.2 us for a look-up. Keyed on the call's
# context object, so a new call starts empty; any ACL change (the version moves) empties it, so a
# revocation applies to a stream's next request as it does to a new call.
CACHED_DECISIONS_MAX = 4096
_cache = threading.local()


def _decisions(security: Any, ctx: CallContext) -> dict | None:
    """This call's cached decisions (None: the security state has no version, nothing may be cached)."""
    version = getattr(security, "acl_cache_version", None)  # read before deciding: never newer than the ACLs
    if version is None:
        return None
    cached = getattr(_cache, "entry", None)
    if cached is None or cached[0] is not ctx or cached[1] is not security or cached[2] != version:
        cached = (ctx, security, version, {})
        _cache.entry = cached
    return cached[3]


def _decide(security: Any, ctx: CallContext, operation: Operation, resource: Resource) -> bool:
    """One decision; refusals are logged at debug with the authorizer's reason (never sent to the caller:
    it names the ACLs on the resource)."""
    decision = security.authorize(ctx, operation, resource)
    if not decision.allowed:
        log.debug("refused: %s", decision.reason)
    return decision.allowed


def allowed(security: Any, ctx: CallContext, operation: Operation, resource: Resource) -> bool:
    decisions = _decisions(security, ctx)
    key = (operation, resource)
    verdict = None if decisions is None else decisions.get(key)
    if verdict is None:
        verdict = _decide(security, ctx, operation, resource)
        if decisions is not None and len(decisions) < CACHED_DECISIONS_MAX:
            decisions[key] = verdict
    return verdict


def topic_allowed(security: Any, ctx: CallContext, operation: Operation, topic: str) -> bool:
    """``allowed`` on Topic ``topic``; a cached answer costs no ``Resource`` (~1 us each on a hot stream)."""
    decisions = _decisions(security, ctx)
    key = (operation, topic)
    verdict = None if decisions is None else decisions.get(key)
    if verdict is None:
        verdict = _decide(security, ctx, operation, Resource.topic(topic))
        if decisions is not None and len(decisions) < CACHED_DECISIONS_MAX:
            decisions[key] = verdict
    return verdict


def _refusal(operation: Operation, resource: Resource, ctx: CallContext):
    error = {ResourceType.TOPIC: TopicAuthorizationFailedError,
             ResourceType.GROUP: GroupAuthorizationFailedError}.get(resource.type, ClusterAuthorizationFailedError)
    return error(f"{ctx.principal} is not authorized to {operation.value} {resource}")


def _check(security: Any, ctx: CallContext, requirement: Requirement, body: dict, name: str) -> None:
    operation = requirement.operation
    if requirement.resource_type is ResourceType.GROUP:
        _check_group(security, ctx, operation, body, name)
        return
    if requirement.resource_type is ResourceType.CLUSTER:
        resource = Resource.cluster()
        if not allowed(security, ctx, operation, resource):
            raise _refusal(operation, resource, ctx)
        return
    topics_of = TOPICS_OF.get(name)
    if topics_of is None:  # a topic call we cannot read the topics of: refused, never allowed
        raise _refusal(operation, Resource.topic("*"), ctx)
    for topic in dict.fromkeys(topics_of(body)):  # each topic once: a fetch names one per partition
        if not topic_allowed(security, ctx, operation, topic):
            raise _refusal(operation, Resource.topic(topic), ctx)


def _check_group(security: Any, ctx: CallContext, operation: Operation, body: dict, name: str) -> None:
    """The Group requirement of ``name`` on the group it names, then the topic operation it also needs."""
    groups_of = GROUPS_OF.get(name)
    if groups_of is None:  # a group call we cannot read the group of: refused, never allowed
        raise _refusal(operation, Resource.group("*"), ctx)
    for group_id in groups_of(body):
        resource = Resource.group(group_id)
        if not allowed(security, ctx, operation, resource):
            raise _refusal(operation, resource, ctx)
    topic_operation = GROUP_TOPIC_REQUIRED.get(name)
    if topic_operation is not None:
        for topic in dict.fromkeys(_partition_topics(body)):
            if not topic_allowed(security, ctx, topic_operation, topic):
                raise _refusal(topic_operation, Resource.topic(topic), ctx)


def group_allowed(security: Any, ctx: CallContext, operation: Operation, group_id: str) -> bool:
    """Whether ``ctx`` may do ``operation`` on Group ``group_id`` (always, with no authorizer)."""
    return not enabled(security) or allowed(security, ctx, operation, Resource.group(group_id))


def authorize_call(security: Any, ctx: CallContext, name: str, body: dict,
                   topic_names: TopicNames | None = None) -> None:
    """Raise TOPIC/CLUSTER_AUTHORIZATION_FAILED unless ``ctx`` may make request ``name`` with ``body``.

    ``name``: a DoAction name, or ``fetch`` / ``follower_fetch`` (``request_acls.fetch_requirement_name``)
    / ``produce``. ``topic_names``: every topic the broker knows, for init_producer_id's alternative
    (KIP-679: Write on any topic instead of IdempotentWrite on the Cluster)."""
    if security is None or not security.authorizer_enabled or name in NO_ACL_NEEDED:
        return
    requirement = REQUIRED.get(name)
    if requirement is None:
        raise ClusterAuthorizationFailedError(f"{ctx.principal} is not authorized to call {name}: "
                                              "no permission is defined for it")
    if name == "metadata" or name in PER_GROUP_ANSWERED:
        return  # answered per topic (visible_metadata) or per group (group_handlers): nothing refused whole
    alternative = ALTERNATIVES.get(name)
    if alternative is not None and alternative.resource_type is ResourceType.CLUSTER and allowed(
            security, ctx, alternative.operation, Resource.cluster()):
        return
    if name == "init_producer_id" and topic_names is not None:
        try:
            _check(security, ctx, requirement, body, name)
            return
        except ClusterAuthorizationFailedError:
            if any(topic_allowed(security, ctx, Operation.WRITE, topic) for topic in topic_names()):
                return
            raise
    _check(security, ctx, requirement, body, name)


def visible_metadata(security: Any, ctx: CallContext, named: list[str] | None, topics: list[dict],
                     include_config: bool) -> list[dict]:
    """``topics`` (a metadata answer's entries) as ``ctx`` may see them.

    All topics (``named`` is None): those it may not Describe are left out. Named: each it may not
    Describe is answered TOPIC_AUTHORIZATION_FAILED, the same for a topic that does not exist. A topic's
    config is shown only with DescribeConfigs on it (what describe_configs needs)."""
    if not enabled(security):
        return topics
    visible = []
    for topic in topics:
        resource = Resource.topic(topic["topic"])
        if not topic_allowed(security, ctx, Operation.DESCRIBE, topic["topic"]):
            if named is not None:
                visible.append({"topic": topic["topic"], "error_code": int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                                "message": _refusal(Operation.DESCRIBE, resource, ctx).message, "partitions": []})
            continue
        if include_config and "config" in topic and not topic_allowed(security, ctx, Operation.DESCRIBE_CONFIGS,
                                                                      topic["topic"]):
            topic = {key: value for key, value in topic.items() if key not in ("config", "min_insync_replicas")}
        visible.append(topic)
    return visible
