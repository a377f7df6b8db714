"""The consumer-group actions (docs/DESIGN.md, "Consumer groups"): JSON in, the coordinator's answer out.

Each body has passed its schema (``protocol/request_schemas.py``: group ids are INVALID_GROUP_ID
unless 1-255 characters of valid Unicode, bytes are valid base64) and the Group requirement of its
call (``broker/rpc/authorization.py``) before it gets here. A handler turns it into the group core's
request, asks the broker's ``GroupCoordinator``, and answers as Kafka's response would, in JSON:
every answer has ``error_code`` (0: none) and, on an error, ``message``; per-partition and per-group
answers carry their own ``error_code``. Group errors (NOT_COORDINATOR, REBALANCE_IN_PROGRESS,
ILLEGAL_GENERATION, ...) are answers, not failed calls, as in Kafka; a malformed or unauthorized
request is a failed call (a typed Flight error), as every ADS action's.

Answered per partition or per group where Kafka does: offset_fetch leaves out (all partitions) or
answers TOPIC_AUTHORIZATION_FAILED (named partitions) for topics the caller may not Describe;
list_groups leaves out groups the caller may not Describe; describe_groups and delete_groups answer
GROUP_AUTHORIZATION_FAILED per group.
"""

from __future__ import annotations

import base64
from typing import Any, Callable

from ads_spark.broker.group.offsets_topic import OFFSETS_TOPIC
from ads_spark.broker.rpc import authorization, call_context
from ads_spark.errors import AdsError, ErrorCode
from ads_spark.protocol import wire
from ads_spark.replication import group_offsets as go
from ads_spark.replication import group_values as gv
from ads_spark.security.authorizer import Operation

_ENCODE = base64.b64encode


def _b64(data: bytes | None) -> str:
    return _ENCODE(data or b"").decode("ascii")


def _bytes(text: str) -> bytes:
    return base64.b64decode(text)  # checked by the schema (group_schemas.Base64Text)


def _error(code: ErrorCode, message: str = "") -> dict[str, Any]:
    answer: dict[str, Any] = {"error_code": int(code)}
    if code != ErrorCode.NONE:
        answer["message"] = message or code.name
    return answer


def _answering_errors(func: Callable[[dict], dict]) -> Callable[[dict], dict]:
    """A group error raised by the coordinator (NOT_COORDINATOR, LOAD_IN_PROGRESS, ...) as an answer."""
    def handler(body: dict) -> dict:
        try:
            return func(body)
        except AdsError as exc:
            return _error(exc.code, exc.message or str(exc))
    handler.__name__ = func.__name__
    return handler


class GroupHandlers:
    def __init__(self, broker):
        self.broker = broker
        self.coordinator = broker.group_coordinator

    def handlers(self) -> dict[str, Callable[[dict], dict]]:
        return {name: _answering_errors(func) for name, func in {
            wire.ACTION_FIND_COORDINATOR: self.handle_find_coordinator,
            wire.ACTION_JOIN_GROUP: self.handle_join_group,
            wire.ACTION_SYNC_GROUP: self.handle_sync_group,
            wire.ACTION_HEARTBEAT: self.handle_heartbeat,
            wire.ACTION_LEAVE_GROUP: self.handle_leave_group,
            wire.ACTION_OFFSET_COMMIT: self.handle_offset_commit,
            wire.ACTION_OFFSET_FETCH: self.handle_offset_fetch,
            wire.ACTION_LIST_GROUPS: self.handle_list_groups,
            wire.ACTION_DESCRIBE_GROUPS: self.handle_describe_groups,
            wire.ACTION_DELETE_GROUPS: self.handle_delete_groups,
            wire.ACTION_OFFSET_DELETE: self.handle_offset_delete,
        }.items()}

    def _security(self):
        return getattr(self.broker, "security", None)

    # ---- find_coordinator -------------------------------------------------------------------------------

    def handle_find_coordinator(self, body: dict) -> dict:
        """The leader of the group's offsets partition, on the listener this call came in on."""
        group_id = body["key"]
        number = self.coordinator.partition_of(group_id)  # creates the topic on first use
        leader = self.coordinator.offsets_topic.leader_of(number)
        info = self.broker.metadata.broker(leader) if leader >= 0 else None
        inter_broker = self.broker.config.inter_broker_listener_name
        address = None if info is None else info.endpoint(call_context.current().listener_name or inter_broker,
                                                          inter_broker)
        if address is None:
            return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                          f"{OFFSETS_TOPIC}-{number} (group {group_id!r}) has no leader reachable on this listener yet")
        return {"error_code": 0, "node_id": leader, "host": address[0], "port": address[1]}

    # ---- membership -------------------------------------------------------------------------------------

    def handle_join_group(self, body: dict) -> dict:
        session_timeout_ms = body["session_timeout_ms"]
        rebalance_timeout_ms = body.get("rebalance_timeout_ms")
        request = gv.JoinRequest(
            group_id=body["group_id"], member_id=body["member_id"], group_instance_id=body.get("group_instance_id"),
            client_id=body.get("client_id") or "", client_host=call_context.current().host,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=session_timeout_ms if rebalance_timeout_ms in (None, -1) else rebalance_timeout_ms,
            protocol_type=body["protocol_type"],
            protocols=tuple((p["name"], _bytes(p["metadata_b64"])) for p in body["protocols"]))
        reply = self.coordinator.join(request)
        if reply is None:
            return _error(ErrorCode.REBALANCE_IN_PROGRESS, f"group {request.group_id!r}: the rebalance did not "
                                                           "complete within the join's bound; join again")
        answer = _error(reply.error)
        answer.update(generation_id=reply.generation_id, protocol_type=reply.protocol_type,
                      protocol_name=reply.protocol_name, leader_id=reply.leader_id or "", member_id=reply.member_id,
                      members=[{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                                "metadata_b64": _b64(m.metadata)} for m in reply.members])
        return answer

    def handle_sync_group(self, body: dict) -> dict:
        request = gv.SyncRequest(
            group_id=body["group_id"], member_id=body["member_id"], group_instance_id=body.get("group_instance_id"),
            generation_id=body["generation_id"],
            assignments=tuple((a["member_id"], _bytes(a["assignment_b64"])) for a in body.get("assignments") or ()),
            protocol_type=body.get("protocol_type"), protocol_name=body.get("protocol_name"))
        reply = self.coordinator.sync(request)
        if reply is None:
            return _error(ErrorCode.REBALANCE_IN_PROGRESS, f"group {request.group_id!r}: no assignment within the "
                                                           "sync's bound; join again")
        answer = _error(reply.error)
        answer.update(assignment_b64=_b64(reply.assignment), protocol_type=reply.protocol_type,
                      protocol_name=reply.protocol_name)
        return answer

    def handle_heartbeat(self, body: dict) -> dict:
        request = gv.HeartbeatRequest(group_id=body["group_id"], member_id=body["member_id"],
                                      group_instance_id=body.get("group_instance_id"),
                                      generation_id=body["generation_id"])
        return _error(self.coordinator.heartbeat(request))

    def handle_leave_group(self, body: dict) -> dict:
        request = gv.LeaveRequest(group_id=body["group_id"], members=tuple(
            gv.LeaveMember(m["member_id"], m.get("group_instance_id")) for m in body["members"]))
        result = self.coordinator.leave(request)
        answer = _error(result.error)
        answer["members"] = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                              **_error(code)} for m, code in result.members]
        return answer

    # ---- offsets ----------------------------------------------------------------------------------------

    def handle_offset_commit(self, body: dict) -> dict:
        request = go.CommitRequest(
            group_id=body["group_id"], generation_id=body["generation_id"], member_id=body["member_id"],
            group_instance_id=body.get("group_instance_id"),
            partitions=tuple(go.CommitPartition(p["topic"], p["partition"], p["offset"],
                                                -1 if p.get("leader_epoch") is None else p["leader_epoch"],
                                                p.get("metadata") or "")
                             for p in body["partitions"]))
        error, errors = self.coordinator.commit(request)
        if error != ErrorCode.NONE:
            return {**_error(error), "partitions": [
                {"topic": p["topic"], "partition": p["partition"], "error_code": int(error)} for p in body["partitions"]]}
        return {"error_code": 0, "partitions": [
            {"topic": p["topic"], "partition": p["partition"],
             **_error(errors.get((p["topic"], p["partition"]), ErrorCode.NONE))} for p in body["partitions"]]}

    def handle_offset_fetch(self, body: dict) -> dict:
        security, ctx = self._security(), call_context.current()

        def may_describe(topic: str) -> bool:
            return not authorization.enabled(security) or authorization.topic_allowed(
                security, ctx, Operation.DESCRIBE, topic)

        named = body.get("partitions")
        refused = [] if named is None else [(p["topic"], p["partition"]) for p in named if not may_describe(p["topic"])]
        asked = None if named is None else [(p["topic"], p["partition"]) for p in named if may_describe(p["topic"])]
        found = self.coordinator.fetch_offsets(body["group_id"], asked, bool(body.get("require_stable")))
        partitions = []
        for (topic, number), committed, code in found:
            if named is None and not may_describe(topic):
                continue  # all partitions: those of topics it may not see are left out (Kafka)
            entry = {"topic": topic, "partition": number, "offset": -1, "leader_epoch": -1, "metadata": "",
                     **_error(code)}
            if committed is not None and code == ErrorCode.NONE:
                entry.update(offset=committed.offset, leader_epoch=committed.leader_epoch, metadata=committed.metadata)
            partitions.append(entry)
        partitions.extend({"topic": topic, "partition": number, "offset": -1, "leader_epoch": -1, "metadata": "",
                           **_error(ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"not authorized to Describe topic {topic}")}
                          for topic, number in refused)
        return {"error_code": 0, "partitions": partitions}

    def handle_offset_delete(self, body: dict) -> dict:
        partitions = [(p["topic"], p["partition"]) for p in body["partitions"]]
        error, errors = self.coordinator.delete_offsets(body["group_id"], partitions)
        return {**_error(error), "partitions": [
            {"topic": topic, "partition": number, **_error(error if error != ErrorCode.NONE
                                                            else errors.get((topic, number), ErrorCode.NONE))}
            for topic, number in partitions]}

    # ---- groups ------------------------------------------------------------------------------------------

    def _may(self, operation: Operation, group_id: str) -> bool:
        return authorization.group_allowed(self._security(), call_context.current(), operation, group_id)

    def handle_list_groups(self, body: dict) -> dict:
        states = set(body.get("states") or ())
        groups = []
        for part in self.coordinator.loaded_partitions():
            with part.lock:
                held = list(part.groups.values())
            for group in held:
                if (not states or group.state.value in states) and self._may(Operation.DESCRIBE, group.group_id):
                    groups.append({"group_id": group.group_id, "protocol_type": group.protocol_type or "",
                                   "state": group.state.value})
        return {"error_code": 0, "groups": sorted(groups, key=lambda g: g["group_id"])}

    def handle_describe_groups(self, body: dict) -> dict:
        return {"error_code": 0, "groups": [self._describe_one(group_id) for group_id in body["groups"]]}

    def _describe_one(self, group_id: str) -> dict:
        if not self._may(Operation.DESCRIBE, group_id):
            return {"group_id": group_id, **_error(ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                                   f"not authorized to Describe group {group_id!r}")}
        try:
            part = self.coordinator.owned(group_id)
        except AdsError as exc:
            return {"group_id": group_id, **_error(exc.code, exc.message or str(exc))}
        with part.lock:
            group = part.groups.get(group_id)
        if group is None:  # Kafka: an unknown group is described as Dead, without an error
            return {"group_id": group_id, "error_code": 0, "state": gv.GroupState.DEAD.value, "protocol_type": "",
                    "protocol_name": "", "members": []}
        in_generation = group.state in (gv.GroupState.STABLE, gv.GroupState.COMPLETING_REBALANCE)
        members = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
                    "client_host": m.client_host,
                    "metadata_b64": _b64(m.metadata_for(group.protocol_name) if in_generation else b""),
                    "assignment_b64": _b64(m.assignment if group.state is gv.GroupState.STABLE else b"")}
                   for m in group.members.values()]
        return {"group_id": group_id, "error_code": 0, "state": group.state.value,
                "protocol_type": group.protocol_type or "", "protocol_name": group.protocol_name or "",
                "members": members}

    def handle_delete_groups(self, body: dict) -> dict:
        results = []
        for group_id in body["groups"]:
            if not self._may(Operation.DELETE, group_id):
                results.append({"group_id": group_id, **_error(ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                                               f"not authorized to Delete group {group_id!r}")})
                continue
            try:
                results.append({"group_id": group_id, **_error(self.coordinator.delete_group(group_id))})
            except AdsError as exc:
                results.append({"group_id": group_id, **_error(exc.code, exc.message or str(exc))})
        return {"error_code": 0, "groups": results}
