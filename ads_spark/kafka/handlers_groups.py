"""Kafka's group APIs on ADS's group coordinator: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups, OffsetDelete.

Each request becomes the ADS action of the same name through ``bridge.call_action`` (the same schema, ACLs
and coordinator as a Flight call; docs/DESIGN.md section 14), and its answer becomes the version's fields.
Only the translation lives here:

* bytes: protocol metadata and assignments are Kafka's ConsumerProtocol bytes on both sides; ADS's
  actions carry them as base64 text (``*_b64``), so they are converted, never parsed;
* error placement per version: a group error goes on every partition in OffsetCommit and in OffsetFetch
  v1, top-level in OffsetFetch v2+ and OffsetDelete; LeaveGroup v0-2 has one member and one error;
* a refused call (schema or ACL: an AdsError from the bridge) is an answer with its code, as Kafka answers
  INVALID_GROUP_ID or GROUP_AUTHORIZATION_FAILED, never a closed connection;
* what Kafka's broker decides before its coordinator: a partition of OffsetCommit or OffsetDelete is
  refused on its own (TOPIC_AUTHORIZATION_FAILED without Topic Read, then UNKNOWN_TOPIC_OR_PARTITION when
  this broker's metadata lacks it) and the others go on; ADS's action would refuse or accept them all;
* JoinGroup before v4 (KIP-394 came with v4): ADS's coordinator answers a new member MEMBER_ID_REQUIRED
  with its id, which such a client cannot read, so the handler joins again at once with that id.
"""

from __future__ import annotations

import base64
import logging
from datetime import timedelta
from typing import Any, Iterable

from ads_spark.broker.rpc import authorization
from ads_spark.errors import AdsError, ErrorCode
from ads_spark.kafka import bridge
from ads_spark.kafka.api import ApiHandler, KafkaCall
from ads_spark.protocol import wire
from ads_spark.protocol.group_schemas import GROUP_ID, GROUP_STATES
from ads_spark.protocol.schema_kinds import HOST_CHARS_MAX, Misfit
from ads_spark.security.authorizer import Operation

log = logging.getLogger("ads.kafka.groups")

_MS = timedelta(milliseconds=1)
KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53  # Kafka's code; not one of ADS's own (ADS has no transactions)
# DescribeGroups: "authorized operations not asked for" (Kafka's Integer.MIN_VALUE), and the ACL operation
# codes of the bit field (Kafka's AclOperation numbers) of the operations a group has.
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
GROUP_OPERATION_BITS = {Operation.READ: 3, Operation.DELETE: 6, Operation.DESCRIBE: 8}
_STATES_BY_LOWER = {state.lower(): state for state in GROUP_STATES}

Key = tuple[str, int]


# ---- shared helpers ------------------------------------------------------------------------------------------

def millis(value: Any) -> int:
    """kio's timedelta fields (and plain ints) as whole milliseconds."""
    return value // _MS if isinstance(value, timedelta) else int(value)


def b64(data: bytes | None) -> str:
    return base64.b64encode(bytes(data or b"")).decode("ascii")


def raw(text: str | None) -> bytes:
    return base64.b64decode(text or "")


def refusal(exc: AdsError) -> dict[str, Any]:
    return {"error_code": int(exc.code), "message": exc.message or str(exc)}


def ask(call: KafkaCall, name: str, body: dict[str, Any]) -> dict[str, Any]:
    """The action's answer; a refused call (schema, ACL, a typed error of the handler) as an answer."""
    try:
        return bridge.call_action(call, name, body)
    except AdsError as exc:
        log.debug("%s refused: %s", name, exc)  # an answer, not a fault: the client is told the code
        return refusal(exc)


def by_topic(rows: Iterable[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """[(topic, partition entry)] as Kafka's [{name, partitions}], topics in first-seen order."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for topic, entry in rows:
        topics.setdefault(topic, []).append(entry)
    return [{"name": name, "partitions": entries} for name, entries in topics.items()]


def split_group_ids(names: Iterable[str]) -> tuple[list[str], dict[str, int]]:
    """(valid ids once each, in order; {invalid id: INVALID_GROUP_ID}): checked by ADS's own GroupId kind, so
    one bad name is answered alone instead of failing the whole request's schema."""
    valid, invalid = [], {}
    for name in dict.fromkeys(names):
        try:
            GROUP_ID.fit(name)
            valid.append(name)
        except Misfit:
            invalid[name] = int(ErrorCode.INVALID_GROUP_ID)
    return valid, invalid


def precheck(call: KafkaCall, group_id: str, group_operation: Operation, keys: Iterable[Key],
             topic_operation: Operation) -> tuple[int, dict[Key, int]]:
    """(group error, {partition: error}) decided before the coordinator, as Kafka's broker does: the group's
    ACL, then per partition the topic's ACL and whether this broker's metadata has the partition."""
    security, ctx = getattr(call.broker, "security", None), call.context
    checking = authorization.enabled(security)
    if checking and not authorization.group_allowed(security, ctx, group_operation, group_id):
        return int(ErrorCode.GROUP_AUTHORIZATION_FAILED), {}
    errors: dict[Key, int] = {}
    for topic, number in keys:
        if checking and not authorization.topic_allowed(security, ctx, topic_operation, topic):
            errors[(topic, number)] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        elif call.broker.metadata.partition(topic, number) is None:
            errors[(topic, number)] = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    return 0, errors


# ---- FindCoordinator -----------------------------------------------------------------------------------------

def coordinator_fields(answer: dict[str, Any]) -> dict[str, Any]:
    if answer["error_code"]:
        return {"error_code": answer["error_code"], "error_message": answer.get("message"),
                "node_id": -1, "host": "", "port": -1}
    return {"error_code": 0, "error_message": None, "node_id": answer["node_id"], "host": answer["host"],
            "port": answer["port"]}


def find_coordinator(call: KafkaCall, request: Any) -> dict[str, Any]:
    """The group's coordinator on the caller's listener (ADS answers the address of the connection's
    ``kafka.<NAME>`` endpoint). Transactions do not exist in ADS: a transaction coordinator is refused with
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED, the one answer Kafka's clients take as final, so that
    ``init_transactions`` fails at once with ADS's message instead of retrying until its timeout (as
    InitProducerId with a transactional id); any other key type is INVALID_REQUEST."""
    key_type = getattr(request, "key_type", KEY_TYPE_GROUP)
    if key_type == KEY_TYPE_TRANSACTION:
        answer = {"error_code": TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                  "message": "ADS has no transactions: no transaction coordinator (transactional producers are "
                             "refused; idempotent ones are served)"}
    elif key_type != KEY_TYPE_GROUP:
        answer = {"error_code": int(ErrorCode.INVALID_REQUEST),
                  "message": f"coordinator key type {key_type} is not served: only group coordinators (key type 0)"}
    else:
        answer = ask(call, wire.ACTION_FIND_COORDINATOR, {"key": request.key})
    return coordinator_fields(answer)


# ---- membership ----------------------------------------------------------------------------------------------

def _with_optional(body: dict[str, Any], request: Any, *names: str) -> dict[str, Any]:
    for name in names:
        value = getattr(request, name, None)
        if value is not None:
            body[name] = value
    return body


def join_body(request: Any, client_id: str | None) -> dict[str, Any]:
    body = {"group_id": request.group_id, "member_id": request.member_id,
            "client_id": (client_id or "")[:HOST_CHARS_MAX],
            "session_timeout_ms": millis(request.session_timeout),
            "rebalance_timeout_ms": millis(getattr(request, "rebalance_timeout", -1)),
            "protocol_type": request.protocol_type,
            "protocols": [{"name": p.name, "metadata_b64": b64(p.metadata)} for p in request.protocols]}
    return _with_optional(body, request, "group_instance_id")


def join_fields(answer: dict[str, Any], version: int) -> dict[str, Any]:
    protocol_name = answer.get("protocol_name")
    return {"error_code": answer["error_code"], "generation_id": answer.get("generation_id", -1),
            "protocol_type": answer.get("protocol_type"),  # v7+, nullable
            "protocol_name": protocol_name if version >= 7 else (protocol_name or ""),
            "leader": answer.get("leader_id") or "", "member_id": answer.get("member_id") or "",
            "members": [{"member_id": m["member_id"], "group_instance_id": m.get("group_instance_id"),
                         "metadata": raw(m.get("metadata_b64"))} for m in answer.get("members") or ()]}


def join_group(call: KafkaCall, request: Any) -> dict[str, Any]:
    body = join_body(request, call.header.client_id)
    answer = ask(call, wire.ACTION_JOIN_GROUP, body)
    if (call.version < 4 and answer["error_code"] == ErrorCode.MEMBER_ID_REQUIRED and answer.get("member_id")):
        answer = ask(call, wire.ACTION_JOIN_GROUP, {**body, "member_id": answer["member_id"]})
    return join_fields(answer, call.version)


def sync_body(request: Any) -> dict[str, Any]:
    body = {"group_id": request.group_id, "generation_id": request.generation_id, "member_id": request.member_id,
            "assignments": [{"member_id": a.member_id, "assignment_b64": b64(a.assignment)}
                            for a in request.assignments]}
    return _with_optional(body, request, "group_instance_id", "protocol_type", "protocol_name")


def sync_fields(answer: dict[str, Any]) -> dict[str, Any]:
    return {"error_code": answer["error_code"], "assignment": raw(answer.get("assignment_b64")),
            "protocol_type": answer.get("protocol_type"), "protocol_name": answer.get("protocol_name")}


def sync_group(call: KafkaCall, request: Any) -> dict[str, Any]:
    return sync_fields(ask(call, wire.ACTION_SYNC_GROUP, sync_body(request)))


def heartbeat(call: KafkaCall, request: Any) -> dict[str, Any]:
    body = _with_optional({"group_id": request.group_id, "generation_id": request.generation_id,
                           "member_id": request.member_id}, request, "group_instance_id")
    return {"error_code": ask(call, wire.ACTION_HEARTBEAT, body)["error_code"]}


def leave_body(request: Any, version: int) -> dict[str, Any]:
    if version < 3:
        members = [{"member_id": request.member_id}]
    else:
        members = [_with_optional({"member_id": m.member_id}, m, "group_instance_id") for m in request.members]
    return {"group_id": request.group_id, "members": members}


def leave_fields(answer: dict[str, Any], version: int) -> dict[str, Any]:
    members = answer.get("members") or []
    error = answer["error_code"]
    if version < 3 and not error and members:
        error = members[0]["error_code"]  # one member, one error: the member's is the answer's
    return {"error_code": error, "members": [
        {"member_id": m["member_id"], "group_instance_id": m.get("group_instance_id"), "error_code": m["error_code"]}
        for m in members]}


def leave_group(call: KafkaCall, request: Any) -> dict[str, Any]:
    return leave_fields(ask(call, wire.ACTION_LEAVE_GROUP, leave_body(request, call.version)), call.version)


# ---- offsets ------------------------------------------------------------------------------------------------

def commit_metadata(text: str | None) -> str:
    """Null metadata is stored and answered as "" (Kafka's). confluent-kafka sends a str's C terminator with
    it ("m" arrives as "m\\x00"; its reader stops at the NUL anyway), which ADS's text fields refuse: one
    trailing NUL is dropped. A NUL anywhere else is refused as any ADS text (INVALID_REQUEST)."""
    text = text or ""
    return text[:-1] if text.endswith("\x00") else text


def commit_partitions(request: Any) -> dict[Key, dict[str, Any]]:
    """The request's partitions as the action's entries (a partition named twice: the last one counts)."""
    found: dict[Key, dict[str, Any]] = {}
    for topic in request.topics:
        for p in topic.partitions:
            found[(topic.name, p.partition_index)] = {
                "topic": topic.name, "partition": p.partition_index, "offset": p.committed_offset,
                "leader_epoch": getattr(p, "committed_leader_epoch", -1),
                "metadata": commit_metadata(p.committed_metadata)}
    return found


def commit_body(request: Any, partitions: list[dict[str, Any]]) -> dict[str, Any]:
    body = {"group_id": request.group_id, "generation_id": request.generation_id_or_member_epoch,
            "member_id": request.member_id, "partitions": partitions}
    return _with_optional(body, request, "group_instance_id")


def offset_commit(call: KafkaCall, request: Any) -> dict[str, Any]:
    wanted = commit_partitions(request)
    group_error, errors = precheck(call, request.group_id, Operation.READ, wanted, Operation.READ)
    if group_error:
        errors = {key: group_error for key in wanted}
    to_commit = [entry for key, entry in wanted.items() if key not in errors]
    if to_commit:
        answer = ask(call, wire.ACTION_OFFSET_COMMIT, commit_body(request, to_commit))
        for entry in to_commit:
            errors[(entry["topic"], entry["partition"])] = answer["error_code"]
        for entry in answer.get("partitions") or ():
            errors[(entry["topic"], entry["partition"])] = entry["error_code"] or answer["error_code"]
    return {"topics": by_topic((topic.name, {"partition_index": p.partition_index,
                                             "error_code": errors[(topic.name, p.partition_index)]})
                               for topic in request.topics for p in topic.partitions)}


def fetch_body(request: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"group_id": request.group_id}
    if request.topics is not None:
        keys = dict.fromkeys((t.name, p) for t in request.topics for p in t.partition_indexes)
        body["partitions"] = [{"topic": topic, "partition": number} for topic, number in keys]
    if getattr(request, "require_stable", False):
        body["require_stable"] = True
    return body


def _no_offset(topic: str, number: int, code: int) -> tuple[str, dict[str, Any]]:
    return topic, {"partition_index": number, "committed_offset": -1, "committed_leader_epoch": -1,
                   "metadata": "", "error_code": code}


def fetch_fields(answer: dict[str, Any], version: int, asked: list[dict[str, Any]] | None) -> dict[str, Any]:
    code = answer["error_code"]
    if code:
        if version >= 2:
            return {"error_code": code, "topics": []}
        # v1 has no top-level error: Kafka puts the group's on every partition asked for.
        return {"topics": by_topic(_no_offset(p["topic"], p["partition"], code) for p in asked or ())}
    return {"error_code": 0, "topics": by_topic(
        (e["topic"], {"partition_index": e["partition"], "committed_offset": e["offset"],
                      "committed_leader_epoch": e.get("leader_epoch", -1), "metadata": e.get("metadata") or "",
                      "error_code": e["error_code"]}) for e in answer.get("partitions") or ())}


def offset_fetch(call: KafkaCall, request: Any) -> dict[str, Any]:
    """Committed offsets, leader epochs and metadata exactly as committed; null topics (v2+): all of the
    group's (those of topics the caller may not Describe are left out by the action)."""
    body = fetch_body(request)
    if body.get("partitions") == []:
        return {"error_code": 0, "topics": []}
    return fetch_fields(ask(call, wire.ACTION_OFFSET_FETCH, body), call.version, body.get("partitions"))


def offset_delete(call: KafkaCall, request: Any) -> dict[str, Any]:
    keys = list(dict.fromkeys((t.name, p.partition_index) for t in request.topics for p in t.partitions))
    group_error, errors = precheck(call, request.group_id, Operation.DELETE, keys, Operation.READ)
    if group_error:
        return {"error_code": group_error, "topics": []}
    remaining = [key for key in keys if key not in errors]
    if remaining:
        answer = ask(call, wire.ACTION_OFFSET_DELETE, {"group_id": request.group_id, "partitions": [
            {"topic": topic, "partition": number} for topic, number in remaining]})
        if answer["error_code"]:  # the group's (GROUP_ID_NOT_FOUND, NOT_COORDINATOR...): top-level, as Kafka's
            return {"error_code": answer["error_code"], "topics": []}
        errors.update({(e["topic"], e["partition"]): e["error_code"] for e in answer.get("partitions") or ()})
    return {"error_code": 0, "topics": by_topic(
        (topic, {"partition_index": number, "error_code": errors.get((topic, number), 0)}) for topic, number in keys)}


# ---- groups ------------------------------------------------------------------------------------------------

def list_body(states_filter: Iterable[str]) -> dict[str, Any] | None:
    """The action's body; None: the filter names no state a group can be in (Kafka matches case-insensitively
    and an unknown state matches nothing), so the answer is empty."""
    asked = list(states_filter or ())
    if not asked:
        return {}
    states = list(dict.fromkeys(_STATES_BY_LOWER[s.lower()] for s in asked if s.lower() in _STATES_BY_LOWER))
    return {"states": states} if states else None


def list_groups(call: KafkaCall, request: Any) -> dict[str, Any]:
    body = list_body(getattr(request, "states_filter", ()))
    if body is None:
        return {"error_code": 0, "groups": []}
    answer = ask(call, wire.ACTION_LIST_GROUPS, body)
    return {"error_code": answer["error_code"], "groups": [
        {"group_id": g["group_id"], "protocol_type": g.get("protocol_type") or "", "group_state": g["state"]}
        for g in answer.get("groups") or ()]}


def describe_fields(group: dict[str, Any], authorized_operations: int) -> dict[str, Any]:
    return {"error_code": group["error_code"], "group_id": group["group_id"], "group_state": group.get("state", ""),
            "protocol_type": group.get("protocol_type") or "", "protocol_data": group.get("protocol_name") or "",
            "authorized_operations": authorized_operations, "members": [
                {"member_id": m["member_id"], "group_instance_id": m.get("group_instance_id"),
                 "client_id": m.get("client_id") or "", "client_host": m.get("client_host") or "",
                 "member_metadata": raw(m.get("metadata_b64")), "member_assignment": raw(m.get("assignment_b64"))}
                for m in group.get("members") or ()]}


def group_operations(call: KafkaCall, group_id: str) -> int:
    """Kafka's bit field of the operations the caller may do on the group (DescribeGroups v3+ when asked)."""
    security = getattr(call.broker, "security", None)
    return sum(1 << bit for operation, bit in GROUP_OPERATION_BITS.items()
               if authorization.group_allowed(security, call.context, operation, group_id))


def _per_group(call: KafkaCall, action: str, names: list[str], entries: str) -> dict[str, dict[str, Any]]:
    """{group id: the action's entry}: invalid ids answered alone, a refused call on each asked group."""
    valid, invalid = split_group_ids(names)
    found = {name: {"group_id": name, "error_code": code} for name, code in invalid.items()}
    if valid:
        answer = ask(call, action, {"groups": valid})
        if answer["error_code"]:
            found.update({name: {"group_id": name, "error_code": answer["error_code"]} for name in valid})
        else:
            found.update({entry["group_id"]: entry for entry in answer.get(entries) or ()})
    return found


def describe_groups(call: KafkaCall, request: Any) -> dict[str, Any]:
    names = list(request.groups)
    found = _per_group(call, wire.ACTION_DESCRIBE_GROUPS, names, "groups")
    include = getattr(request, "include_authorized_operations", False)
    return {"groups": [describe_fields(found[name], group_operations(call, name) if include
                                       else AUTHORIZED_OPERATIONS_OMITTED) for name in dict.fromkeys(names)]}


def delete_groups(call: KafkaCall, request: Any) -> dict[str, Any]:
    names = list(dict.fromkeys(request.groups_names))
    found = _per_group(call, wire.ACTION_DELETE_GROUPS, names, "groups")
    return {"results": [{"group_id": name, "error_code": found[name]["error_code"]} for name in names]}


API_HANDLERS: list[ApiHandler] = [
    ApiHandler(8, "OffsetCommit", 2, 8, offset_commit),
    ApiHandler(9, "OffsetFetch", 1, 7, offset_fetch),
    ApiHandler(10, "FindCoordinator", 0, 3, find_coordinator),
    ApiHandler(11, "JoinGroup", 0, 7, join_group),
    ApiHandler(12, "Heartbeat", 0, 4, heartbeat),
    ApiHandler(13, "LeaveGroup", 0, 4, leave_group),
    ApiHandler(14, "SyncGroup", 0, 5, sync_group),
    ApiHandler(15, "DescribeGroups", 0, 5, describe_groups),
    ApiHandler(16, "ListGroups", 0, 4, list_groups),
    ApiHandler(42, "DeleteGroups", 0, 2, delete_groups),
    ApiHandler(47, "OffsetDelete", 0, 0, offset_delete),
]
