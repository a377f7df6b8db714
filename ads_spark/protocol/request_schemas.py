"""The shape of every request body, and the one check every body passes before a handler sees it.

A broker answers strangers, so nothing a request holds may reach a handler, a
ZooKeeper path, a file path or a log before it is known to fit: the boundary
(``broker/rpc/server.py``) parses each body with ``wire.loads`` (size and nesting
bounded) and checks it here against the schema of its call. A body that does
not fit is refused with a typed error that names the call and the field
(``leader_and_isr: partitions[3].topic: ...``); since nothing has run yet, a
refused request changes nothing: no epoch recorded, no directory made, no znode
written.

The rules, for every call:

* types are exact: an int is a JSON integer (not a bool, a float or a string),
  a bool is ``true``/``false`` (never ``"false"``);
* integers lie in their declared range (broker ids and epochs as Kafka's int32,
  offsets as int64);
* strings are valid Unicode without lone surrogates or NUL, and bounded;
  topic names are Kafka's (``names.validate_topic_name``,
  INVALID_TOPIC_EXCEPTION);
* lists and maps are bounded; a partition is named once per request;
* fields a call does not define are refused, so a misspelt field is an error
  instead of a silently applied default.

Handlers still read fields with ``wire.require``/``wire.optional``; what this
module adds is that by then every field has been checked, so those reads cannot
fail in a way the client was not already told about.
"""

from __future__ import annotations

import binascii
from typing import Any, Callable, Iterable

from ads_spark.errors import (
    AdsError,
    InvalidGroupIdError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
)
from ads_spark.protocol.names import TOPIC_NAME_CHARS_MAX, TOPIC_NAME_RULE, is_valid_topic_name, shown

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

PARTITION_ID_MAX = 100_000 - 1  # admin_handlers.PARTITIONS_PER_TOPIC_MAX partitions, numbered from 0
REPLICAS_PER_PARTITION_MAX = 64
PARTITIONS_PER_REQUEST_MAX = 200_000
TOPICS_PER_REQUEST_MAX = 10_000
BROKERS_PER_REQUEST_MAX = 10_000
CONFIG_ENTRIES_MAX = 128
CONFIG_VALUE_CHARS_MAX = 4096
HOST_CHARS_MAX = 255
SHORT_TEXT_CHARS_MAX = 1024


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number with a fraction", str: "a string",
            list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


class Misfit(Exception):
    """A value that does not fit its kind: the problem, and the path to it built on the way out.

    Paths are assembled only for a refusal (each container prepends its step as the exception passes):
    building ``partitions[17].topic`` for every field that fits cost most of checking a fetch."""

    def __init__(self, problem: str, error: type[AdsError] = InvalidRequestError):
        super().__init__(problem)
        self.problem, self.error, self.steps = problem, error, []

    def as_error(self, what: str) -> AdsError:
        return self.error(f"{what}{''.join(reversed(self.steps))}: {self.problem}")


class Kind:
    """One kind of JSON value; ``fit`` returns the value or raises ``Misfit``."""

    error: type[AdsError] = InvalidRequestError

    def fit(self, value: Any) -> Any:
        raise NotImplementedError


class Int(Kind):
    def __init__(self, min_value: int = INT64_MIN, max_value: int = INT64_MAX,
                 error: type[AdsError] = InvalidRequestError):
        self.min_value, self.max_value, self.error = min_value, max_value, error

    def fit(self, value: Any) -> int:
        if type(value) is not int:  # bool is a subclass of int: refused here on purpose
            raise Misfit(f"must be an integer, got {_json_type(value)}")
        if value < self.min_value:
            raise Misfit(f"must be >= {self.min_value}, got {shown(value)}", self.error)
        if value > self.max_value:
            raise Misfit(f"must be <= {self.max_value}, got {shown(value)}", self.error)
        return value


class Bool(Kind):
    def fit(self, value: Any) -> bool:
        if type(value) is not bool:
            raise Misfit(f"must be true or false, got {_json_type(value)} {shown(value)}")
        return value


def _text_problem(value: str, max_chars: int) -> str | None:
    if len(value) > max_chars:
        return f"at most {max_chars} characters, got {len(value)}"
    if "\x00" in value:
        return f"must not contain NUL, got {shown(value)}"
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"not valid Unicode (a lone surrogate), got {shown(value)}"
    return None


def check_text(value: str, what: str, max_chars: int) -> str:
    """A string that is safe to use anywhere: bounded, no NUL, no lone surrogate (they cannot be encoded as
    UTF-8: one reached kazoo once and killed its connection thread)."""
    problem = _text_problem(value, max_chars)
    if problem is not None:
        raise InvalidRequestError(f"{what}: {problem}")
    return value


class Text(Kind):
    def __init__(self, max_chars: int = SHORT_TEXT_CHARS_MAX, choices: Iterable[str] | None = None):
        self.max_chars = max_chars
        self.choices = tuple(choices) if choices is not None else None

    def fit(self, value: Any) -> str:
        if type(value) is not str:
            raise Misfit(f"must be a string, got {_json_type(value)}")
        problem = _text_problem(value, self.max_chars)
        if problem is not None:
            raise Misfit(problem)
        if self.choices is not None and value not in self.choices:
            raise Misfit(f"must be one of {', '.join(map(repr, self.choices))}, got {shown(value)}")
        return value


class TopicName(Kind):
    # Names seen valid, so a fetch of many partitions of few topics runs the pattern once per topic. Bounded:
    # cleared when full, so a stream of made-up names costs a pattern each, never memory.
    _valid: set[str] = set()
    VALID_NAMES_CACHED_MAX = 10_000

    def fit(self, value: Any) -> str:
        if type(value) is str and value in self._valid:
            return value
        if not is_valid_topic_name(value):
            kind = "" if type(value) is str else f" ({_json_type(value)})"
            raise Misfit(f"invalid topic name {shown(value)}{kind}: use {TOPIC_NAME_RULE}", InvalidTopicError)
        if len(self._valid) >= self.VALID_NAMES_CACHED_MAX:
            self._valid.clear()
        self._valid.add(value)
        return value


class OneOf(Kind):
    """The first of ``kinds`` that accepts the value (e.g. acks: "all" or -1)."""

    def __init__(self, *kinds: Kind):
        self.kinds = kinds

    def fit(self, value: Any) -> Any:
        problems = []
        for kind in self.kinds:
            try:
                return kind.fit(value)
            except Misfit as misfit:
                problems.append(misfit.problem)
        raise Misfit(" or ".join(problems))


class ListOf(Kind):
    def __init__(self, item: Kind, max_items: int, min_items: int = 0, distinct: bool = False):
        self.item, self.max_items, self.min_items, self.distinct = item, max_items, min_items, distinct

    def fit(self, value: Any) -> list:
        if type(value) is not list:
            raise Misfit(f"must be a list, got {_json_type(value)}")
        if not self.min_items <= len(value) <= self.max_items:
            raise Misfit(f"must have {self.min_items} to {self.max_items} items, got {len(value)}")
        fit = self.item.fit
        index = 0
        try:
            for index, item in enumerate(value):
                fit(item)
        except Misfit as misfit:
            misfit.steps.append(f"[{index}]")
            raise
        if self.distinct and len(set(value)) != len(value):
            raise Misfit(f"names an item twice: {shown(value)}")
        return value


class MapOf(Kind):
    """A JSON object with free keys (topic configs): keys and values of one kind each, bounded."""

    def __init__(self, key: Kind, value: Kind, max_items: int):
        self.key, self.value, self.max_items = key, value, max_items

    def fit(self, value: Any) -> dict:
        if type(value) is not dict:
            raise Misfit(f"must be an object, got {_json_type(value)}")
        if len(value) > self.max_items:
            raise Misfit(f"must have at most {self.max_items} entries, got {len(value)}")
        for key, item in value.items():
            try:
                self.key.fit(key)
                self.value.fit(item)
            except Misfit as misfit:
                misfit.steps.append(f"[{shown(key)}]")
                raise
        return value


class Field:
    __slots__ = ("kind", "required", "nullable")

    def __init__(self, kind: Kind, required: bool, nullable: bool):
        self.kind, self.required, self.nullable = kind, required, nullable


def required(kind: Kind) -> Field:
    return Field(kind, True, False)


def optional(kind: Kind) -> Field:
    """May be absent or null (the handler's default applies)."""
    return Field(kind, False, True)


class Obj(Kind):
    """A JSON object with named fields; a field it does not define is refused."""

    def __init__(self, fields: dict[str, Field]):
        self.fields = fields
        self._required = [name for name, field in fields.items() if field.required]

    def fit(self, value: Any) -> dict:
        if type(value) is not dict:
            raise Misfit(f"must be a JSON object, got {_json_type(value)}")
        fields = self.fields
        for name, item in value.items():
            field = fields.get(name)
            if field is None:
                raise Misfit(f"unknown field {shown(name)} (known: {', '.join(sorted(fields)) or 'none'})")
            if item is None:
                if field.nullable:
                    continue
                misfit = Misfit("must not be null")
                misfit.steps.append(f".{name}")
                raise misfit
            try:
                field.kind.fit(item)
            except Misfit as misfit:
                misfit.steps.append(f".{name}")
                raise
        for name in self._required:
            if name not in value:
                raise Misfit(f"missing field '{name}'")
        return value


class Distinct(ListOf):
    """A list of objects that names each key (the ``key_fields`` of an item) at most once: a fetch naming one
    partition 2,000 times once made a broker read it 2,000 times into one answer, and a create_topics
    naming one topic twice created it, then refused the request."""

    def __init__(self, item: Kind, max_items: int, key_fields: tuple[str, ...], min_items: int = 0):
        super().__init__(item, max_items, min_items)
        self.key_fields = key_fields

    def fit(self, value: Any) -> list:
        super().fit(value)
        fields = self.key_fields
        keys = {tuple(entry[f] for f in fields) for entry in value}
        if len(keys) != len(value):
            seen: set = set()
            for index, entry in enumerate(value):
                key = tuple(entry[f] for f in fields)
                if key in seen:
                    named = ", ".join(f"{f} {shown(v)}" for f, v in zip(fields, key))
                    misfit = Misfit(f"names {named} a second time")
                    misfit.steps.append(f"[{index}]")
                    raise misfit
                seen.add(key)
        return value


# ---- the kinds of values ADS requests carry -----------------------------------------------------------

BROKER_ID = Int(0, INT32_MAX)
LEADER_ID = Int(-1, INT32_MAX)  # -1: no leader
EPOCH = Int(-1, INT32_MAX)  # leader, partition and controller epochs (int32 as Kafka's); -1: unknown
BROKER_EPOCH = Int(-1, INT64_MAX)  # a registration's czxid
PARTITION_ID = Int(0, PARTITION_ID_MAX)
OFFSET = Int(0, INT64_MAX)
BYTES = Int(0, INT64_MAX)
DURATION_MS = Int(0, INT64_MAX)
BROKER_IDS = ListOf(BROKER_ID, REPLICAS_PER_PARTITION_MAX, distinct=True)
CONFIG = MapOf(Text(TOPIC_NAME_CHARS_MAX), Text(CONFIG_VALUE_CHARS_MAX), CONFIG_ENTRIES_MAX)
TOPIC = TopicName()
ACKS = OneOf(Text(8, choices=("all", "-1", "1", "0")), Int(-1, 1))


def _partition(**more: Field) -> dict[str, Field]:
    return {"topic": required(TOPIC), "partition": required(PARTITION_ID), **more}


def _partitions(entry: Obj, max_items: int = PARTITIONS_PER_REQUEST_MAX, min_items: int = 0) -> Distinct:
    return Distinct(entry, max_items, ("topic", "partition"), min_items)


FETCH_PARTITION = Obj(_partition(
    fetch_offset=required(OFFSET), current_leader_epoch=optional(EPOCH), last_fetched_epoch=optional(EPOCH),
    partition_max_bytes=optional(BYTES)))

FETCH = Obj({
    "type": required(Text(16, choices=("fetch",))),
    "replica_id": optional(Int(-1, INT32_MAX)), "broker_epoch": optional(BROKER_EPOCH),
    "max_wait_ms": optional(DURATION_MS), "min_bytes": optional(BYTES), "max_bytes": optional(BYTES),
    "client_rack": optional(Text(HOST_CHARS_MAX)),
    "partitions": required(_partitions(FETCH_PARTITION)),
})

EXCHANGE_COMMAND = Obj({
    "type": required(Text(16, choices=("fetch_session", "produce"))),
    "replica_messages": optional(Bool()),
})

PRODUCE_COMMAND = Obj({"type": required(Text(16, choices=("produce",)))})

PRODUCE_BATCH_METADATA = Obj(_partition(
    correlation_id=optional(Int()), acks=optional(ACKS), timeout_ms=optional(DURATION_MS),
    producer_id=optional(Int(-1, INT64_MAX)), producer_epoch=optional(Int(-1, 32767)),
    base_sequence=optional(Int(-1, INT32_MAX))))

_LEADER_AND_ISR_PARTITION = Obj(_partition(
    topic_id=optional(Text(64)), leader=required(LEADER_ID), leader_epoch=required(EPOCH),
    isr=required(BROKER_IDS), elr=optional(BROKER_IDS), replicas=required(BROKER_IDS),
    observers=optional(BROKER_IDS), partition_epoch=optional(EPOCH), offline_replicas=optional(BROKER_IDS),
    throttle_bytes_per_s=optional(Int(1, INT64_MAX)), config=optional(CONFIG),
    isr_broker_epochs=optional(Distinct(Obj({"id": required(BROKER_ID), "broker_epoch": required(BROKER_EPOCH)}),
                                        BROKERS_PER_REQUEST_MAX, ("id",)))))

_BROKER = Obj({
    "id": required(BROKER_ID), "host": required(Text(HOST_CHARS_MAX)), "port": required(Int(1, 65535)),
    "rack": optional(Text(HOST_CHARS_MAX)), "broker_epoch": optional(BROKER_EPOCH),
    "metrics_port": optional(Int(0, 65535)),
    # every listener's advertised address (broker/zk/membership.py registers them)
    "endpoints": optional(MapOf(Text(64), Obj({
        "host": required(Text(HOST_CHARS_MAX)), "port": required(Int(1, 65535)),
        "protocol": required(Text(16, choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")))}), 16)),
})
_BROKERS = Distinct(_BROKER, BROKERS_PER_REQUEST_MAX, ("id",))

_TOPIC_LIST = ListOf(TOPIC, TOPICS_PER_REQUEST_MAX, distinct=True)

_CREATE_TOPIC = Obj({
    "topic": required(TOPIC),
    "partitions": optional(Int(1, PARTITION_ID_MAX + 1, error=InvalidPartitionsError)),
    "replication_factor": optional(Int(1, REPLICAS_PER_PARTITION_MAX, error=InvalidReplicationFactorError)),
    "config": optional(CONFIG),
    "replica_assignment": optional(ListOf(ListOf(BROKER_ID, REPLICAS_PER_PARTITION_MAX, min_items=1, distinct=True),
                                          PARTITION_ID_MAX + 1)),
    "observers": optional(BROKER_IDS),
})

_REASSIGNMENT = Obj(_partition(replicas=required(ListOf(BROKER_ID, REPLICAS_PER_PARTITION_MAX, min_items=1)),
                               log_dirs=optional(ListOf(Text(), REPLICAS_PER_PARTITION_MAX))))

class SecretText(Text):
    """A password: checked as ``Text`` is, but a refusal never shows the value (it would reach an error message).
    An empty one fits here and is refused by the handler (credentials.hash_password), also without the value."""

    def __init__(self, max_chars: int):
        super().__init__(max_chars)

    def fit(self, value: Any) -> str:
        if type(value) is not str:
            raise Misfit(f"must be a string, got {_json_type(value)}")
        if _text_problem(value, self.max_chars) is not None:
            raise Misfit(f"must be at most {self.max_chars} characters of valid Unicode without NUL")
        return value


# Security actions (issue #23; broker/rpc/security_handlers.py). An ACL's fields are checked by
# authorizer.AclBinding / AclBindingFilter (the handler builds every one before writing anything); here only
# their shape and size: a principal is 'User:' and up to 1,024 characters.
ACLS_PER_REQUEST_MAX = 1000
USERS_PER_REQUEST_MAX = 100
_ACL_FIELDS = ("resource_type", "resource_name", "pattern_type", "principal", "host", "operation", "permission")
_ACL_BINDING = Obj({name: required(Text(1100)) for name in _ACL_FIELDS})
ACL_FILTER = Obj({name: optional(Text(1100)) for name in _ACL_FIELDS})
_USERNAME = Text(128)
_USER_UPSERT = Obj({"username": required(_USERNAME), "password": required(SecretText(1024))})

ACTION_SCHEMAS: dict[str, Obj] = {
    "authenticate": Obj({}),
    "create_acls": Obj({"acls": required(ListOf(_ACL_BINDING, ACLS_PER_REQUEST_MAX, min_items=1))}),
    "delete_acls": Obj({"filters": required(ListOf(ACL_FILTER, ACLS_PER_REQUEST_MAX, min_items=1))}),
    "describe_acls": Obj({"filter": optional(ACL_FILTER)}),
    "alter_user_credentials": Obj({
        "upsert": optional(Distinct(_USER_UPSERT, USERS_PER_REQUEST_MAX, ("username",))),
        "delete": optional(ListOf(_USERNAME, USERS_PER_REQUEST_MAX, distinct=True))}),
    "describe_users": Obj({}),
    "metadata": Obj({"topics": optional(_TOPIC_LIST), "include_config": optional(Bool())}),
    "list_offsets": Obj({"partitions": required(_partitions(Obj(_partition(
        timestamp=required(Int(-2, INT64_MAX)), current_leader_epoch=optional(EPOCH)))))}),
    "locate": FETCH_PARTITION,
    # KIP-320, asked by consumers: where the leader's log ends for leader_epoch (the epoch of what was read).
    "offset_for_leader_epoch": Obj({"partitions": required(_partitions(Obj(_partition(
        leader_epoch=required(Int(0, INT32_MAX)), current_leader_epoch=optional(EPOCH)))))}),
    "create_topics": Obj({"topics": required(Distinct(_CREATE_TOPIC, TOPICS_PER_REQUEST_MAX, ("topic",), min_items=1))}),
    "delete_topics": Obj({"topics": required(ListOf(TOPIC, TOPICS_PER_REQUEST_MAX, min_items=1, distinct=True))}),
    "describe_configs": Obj({"topic": required(TOPIC)}),
    # The topic's new partition count (only ever larger); the new partitions are placed rack-aware.
    "create_partitions": Obj({"topic": required(TOPIC),
                              "partitions": required(Int(1, PARTITION_ID_MAX + 1, error=InvalidPartitionsError))}),
    "alter_configs": Obj({"topic": required(TOPIC), "set": optional(CONFIG),
                          "delete": optional(ListOf(Text(TOPIC_NAME_CHARS_MAX), CONFIG_ENTRIES_MAX))}),
    "elect_leaders": Obj({"election_type": required(Text(16, choices=("preferred", "unclean"))),
                          "partitions": optional(_partitions(Obj(_partition())))}),
    "alter_partition_reassignments": Obj({
        "version": optional(Int(1, 1)), "partitions": required(_partitions(_REASSIGNMENT, min_items=1)),
        "throttle_bytes_per_s": optional(Int(1, INT64_MAX))}),
    # broker_epoch: the target's registration the controller addressed it to (KIP-380); absent: not checked.
    "leader_and_isr": Obj({"controller_id": optional(BROKER_ID), "controller_epoch": required(EPOCH),
                           "broker_epoch": optional(BROKER_EPOCH),
                           "partitions": required(_partitions(_LEADER_AND_ISR_PARTITION)),
                           "brokers": optional(_BROKERS)}),
    "update_metadata": Obj({"controller_id": optional(BROKER_ID), "controller_epoch": required(EPOCH),
                            "full": optional(Bool()), "brokers": optional(_BROKERS),
                            "deleted_topics": optional(_TOPIC_LIST),
                            "partitions": optional(_partitions(_LEADER_AND_ISR_PARTITION))}),
    "stop_replica": Obj({"controller_epoch": required(EPOCH),
                         "partitions": required(_partitions(Obj(_partition(delete=optional(Bool())))))}),
    "replica_log_ends": Obj({"controller_epoch": required(EPOCH), "partitions": required(_partitions(Obj(_partition(
        topic_id=optional(Text(64)), config=optional(CONFIG)))))}),
    "controlled_shutdown": Obj({"broker_id": required(BROKER_ID), "broker_epoch": required(BROKER_EPOCH),
                                "force": optional(Bool())}),
    "replica_status": Obj({"topic": optional(TOPIC)}),
    "init_producer_id": Obj({}),
}


# ---- consumer groups (issue #24; broker/rpc/group_handlers.py) ----------------------------------------------

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

ACTION_SCHEMAS.update({
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
})


def check(schema: Kind, body: Any, what: str) -> Any:
    """``body`` if it fits ``schema``; otherwise the typed error naming ``what`` and the field."""
    try:
        return schema.fit(body)
    except Misfit as misfit:
        raise misfit.as_error(what) from None


def checker(what: str) -> Callable[[Any], Any]:
    """The check for DoAction ``what``; an unknown action is INVALID_REQUEST naming the known ones."""
    schema = ACTION_SCHEMAS.get(what)
    if schema is None:
        raise InvalidRequestError(f"unknown action {shown(what)} (known: {', '.join(sorted(ACTION_SCHEMAS))})")
    return lambda body: check(schema, body, what)
