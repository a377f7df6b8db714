"""The request schemas of the consumer-group actions (broker/rpc/group_handlers.py), merged into
``request_schemas.ACTION_SCHEMAS``: the same rules as every other call (exact types, bounded sizes, no
unknown field), plus a group id that is 1-255 characters of valid Unicode (INVALID_GROUP_ID otherwise)
and ``*_b64`` fields that decode as base64.
"""

from __future__ import annotations

import binascii
from typing import Any

from ads_spark.errors import InvalidGroupIdError
from ads_spark.protocol.names import shown
from ads_spark.protocol.schema_kinds import (
    EPOCH, HOST_CHARS_MAX, INT32_MAX, OFFSET, Bool, Distinct, Int, Kind, ListOf, Misfit, Obj, Text, _json_type,
    _partition, _partitions, _text_problem, optional, required,
)

GROUP_ID_CHARS_MAX = 255  # security/authorizer.GROUP_ID_CHARS_MAX: an ACL can name every group id
MEMBER_ID_CHARS_MAX = 1024  # coordinator-made ids are ~50 characters; a client's client.id is part of them
GROUP_MEMBERS_MAX = 10_000  # config_groups.GROUP_MAX_SIZE_MAX: group.max.size's upper bound
GROUP_PROTOCOLS_MAX = 64
GROUPS_PER_REQUEST_MAX = 10_000
GROUP_BYTES_B64_CHARS_MAX = 4 << 20  # one member's subscription or assignment, base64
OFFSET_METADATA_CHARS_MAX = 1 << 20  # offset.metadata.max.bytes decides per partition below this bound
GROUP_STATES = ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")  # Kafka's names


class GroupId(Kind):
    """A group id: 1-255 characters of valid Unicode without NUL; anything else is INVALID_GROUP_ID."""

    error = InvalidGroupIdError

    def fit(self, value: Any) -> str:
        if type(value) is not str:
            raise Misfit(f"a group id must be a string, got {_json_type(value)}", InvalidGroupIdError)
        problem = "must not be empty" if not value else _text_problem(value, GROUP_ID_CHARS_MAX)
        if problem is not None:
            raise Misfit(f"invalid group id: {problem}", InvalidGroupIdError)
        return value


class Base64Text(Text):
    """Bytes as base64 text (``*_b64`` fields): bounded, and decodable, so a handler's decode cannot fail."""

    def fit(self, value: Any) -> str:
        super().fit(value)
        try:
            binascii.a2b_base64(value.encode("ascii"), strict_mode=True)
        except (ValueError, binascii.Error, UnicodeEncodeError):
            raise Misfit(f"not valid base64 text, got {shown(value)}") from None
        return value


GROUP_ID = GroupId()
MEMBER_ID = Text(MEMBER_ID_CHARS_MAX)
INSTANCE_ID = Text(GROUP_ID_CHARS_MAX)
GENERATION_ID = Int(-1, INT32_MAX)
GROUP_BYTES = Base64Text(GROUP_BYTES_B64_CHARS_MAX)
_GROUP_IDS = ListOf(GROUP_ID, GROUPS_PER_REQUEST_MAX, min_items=1, distinct=True)
_GROUP_MEMBER = {"group_id": required(GROUP_ID), "generation_id": required(GENERATION_ID),
                 "member_id": required(MEMBER_ID), "group_instance_id": optional(INSTANCE_ID)}

GROUP_ACTION_SCHEMAS: dict[str, Obj] = {
    "find_coordinator": Obj({"key": required(GROUP_ID), "key_type": optional(Text(16, choices=("group",)))}),
    "join_group": Obj({
        "group_id": required(GROUP_ID), "member_id": required(MEMBER_ID), "group_instance_id": optional(INSTANCE_ID),
        "client_id": optional(Text(HOST_CHARS_MAX)), "session_timeout_ms": required(Int(0, INT32_MAX)),
        "rebalance_timeout_ms": optional(Int(-1, INT32_MAX)), "protocol_type": required(Text(64)),
        "reason": optional(Text()),
        "protocols": required(Distinct(Obj({"name": required(Text(HOST_CHARS_MAX)),
                                            "metadata_b64": required(GROUP_BYTES)}),
                                       GROUP_PROTOCOLS_MAX, ("name",), min_items=1))}),
    "sync_group": Obj({
        **_GROUP_MEMBER, "protocol_type": optional(Text(64)), "protocol_name": optional(Text(HOST_CHARS_MAX)),
        "assignments": optional(Distinct(Obj({"member_id": required(MEMBER_ID), "assignment_b64": required(GROUP_BYTES)}),
                                         GROUP_MEMBERS_MAX, ("member_id",)))}),
    "heartbeat": Obj(_GROUP_MEMBER),
    "leave_group": Obj({"group_id": required(GROUP_ID), "members": required(ListOf(Obj({
        "member_id": required(MEMBER_ID), "group_instance_id": optional(INSTANCE_ID), "reason": optional(Text())}),
        GROUP_MEMBERS_MAX, min_items=1))}),
    "offset_commit": Obj({**_GROUP_MEMBER, "partitions": required(_partitions(Obj(_partition(
        offset=required(OFFSET), leader_epoch=optional(EPOCH),
        metadata=optional(Text(OFFSET_METADATA_CHARS_MAX)))), min_items=1))}),
    "offset_fetch": Obj({"group_id": required(GROUP_ID), "partitions": optional(_partitions(Obj(_partition()))),
                         "require_stable": optional(Bool())}),
    "list_groups": Obj({"states": optional(ListOf(Text(32, choices=GROUP_STATES), len(GROUP_STATES),
                                                  distinct=True))}),
    "describe_groups": Obj({"groups": required(_GROUP_IDS)}),
    "delete_groups": Obj({"groups": required(_GROUP_IDS)}),
    "offset_delete": Obj({"group_id": required(GROUP_ID),
                          "partitions": required(_partitions(Obj(_partition()), min_items=1))}),
}
