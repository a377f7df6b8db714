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
fail in a way the client was not already told about. The kinds of values (``Int``, ``Text``, ``Obj``...)
are in ``schema_kinds``; the consumer-group calls' schemas in ``group_schemas``.
"""

from __future__ import annotations

from typing import Any, Callable

from ads_spark.errors import InvalidPartitionsError, InvalidReplicationFactorError, InvalidRequestError
from ads_spark.protocol.group_schemas import GROUP_ACTION_SCHEMAS
from ads_spark.protocol.names import TOPIC_NAME_CHARS_MAX, shown
from ads_spark.protocol.schema_kinds import (
    ACKS, BROKERS_PER_REQUEST_MAX, BROKER_EPOCH, BROKER_ID, BROKER_IDS, BYTES, Bool, CONFIG, CONFIG_ENTRIES_MAX,
    DURATION_MS, Distinct, EPOCH, HOST_CHARS_MAX, INT32_MAX, INT64_MAX, Int, Kind, LEADER_ID, ListOf, MapOf,
    Misfit, OFFSET, Obj, OneOf, PARTITION_ID_MAX, REPLICAS_PER_PARTITION_MAX, Scalar, TOPIC, TOPICS_PER_REQUEST_MAX,
    Text, optional, required, _json_type, _partition, _partitions, _text_problem,
)
from ads_spark.schemas import statistics


FETCH_PARTITION = Obj(_partition(
    fetch_offset=required(OFFSET), current_leader_epoch=optional(EPOCH), last_fetched_epoch=optional(EPOCH),
    partition_max_bytes=optional(BYTES)))

# A consumer's read of a typed topic (broker/typed_fetch.py): the version it reads and the user columns it
# needs (absent: all of them). Bounded by Arrow's practical column counts, not by any one schema.
TYPED_READ_COLUMNS_MAX = 4096
COLUMN_NAME_CHARS_MAX = 1024
# Its filters (schemas/statistics.py predicate_to_wire): conjunctive, used only to skip whole batches by their
# statistics; values are JSON scalars or the tagged {"b64"} / {"text"} forms, a list for "in".
TYPED_READ_FILTERS_MAX = 64
FILTER_VALUE_CHARS_MAX = 4096
_FILTER_SCALAR = OneOf(Scalar(FILTER_VALUE_CHARS_MAX), Obj({"b64": required(Text(FILTER_VALUE_CHARS_MAX))}),
                       Obj({"text": required(Text(64))}))
_FILTER = Obj({"kind": required(Text(16, choices=statistics.KINDS)), "column": required(Text(COLUMN_NAME_CHARS_MAX)),
               "value": optional(OneOf(_FILTER_SCALAR, ListOf(_FILTER_SCALAR, statistics.IN_VALUES_MAX)))})
TYPED_READ = Obj({
    "topic": required(TOPIC), "version": required(Int(1, INT32_MAX)),
    "columns": optional(ListOf(Text(COLUMN_NAME_CHARS_MAX), TYPED_READ_COLUMNS_MAX, distinct=True)),
    "filters": optional(ListOf(_FILTER, TYPED_READ_FILTERS_MAX)),
    # Which of the meta columns to send (absent: all); the offset is never sent, readers rebuild it.
    "meta": optional(ListOf(Text(16, choices=("timestamp", "key", "headers")), 3, distinct=True)),
})

FETCH = Obj({
    "type": required(Text(16, choices=("fetch",))), "typed": optional(TYPED_READ),
    "replica_id": optional(Int(-1, INT32_MAX)), "broker_epoch": optional(BROKER_EPOCH),
    "max_wait_ms": optional(DURATION_MS), "min_bytes": optional(BYTES), "max_bytes": optional(BYTES),
    "client_rack": optional(Text(HOST_CHARS_MAX)),
    "partitions": required(_partitions(FETCH_PARTITION)),
})

EXCHANGE_COMMAND = Obj({
    "type": required(Text(16, choices=("fetch_session", "produce"))),
    "replica_messages": optional(Bool()), "typed": optional(TYPED_READ),
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

# A typed topic's schema (issue #26): base64 of pa.Schema.serialize() (schemas/ipc.py). 512 KiB of text holds
# thousands of columns, and the version znode (this text, the DDL, a time) stays below ZooKeeper's 1 MB limit.
SCHEMA_BASE64_CHARS_MAX = 1 << 19
_SCHEMA = Text(SCHEMA_BASE64_CHARS_MAX)

_CREATE_TOPIC = Obj({
    "topic": required(TOPIC),
    "partitions": optional(Int(1, PARTITION_ID_MAX + 1, error=InvalidPartitionsError)),
    "replication_factor": optional(Int(1, REPLICAS_PER_PARTITION_MAX, error=InvalidReplicationFactorError)),
    "config": optional(CONFIG),
    "replica_assignment": optional(ListOf(ListOf(BROKER_ID, REPLICAS_PER_PARTITION_MAX, min_items=1, distinct=True),
                                          PARTITION_ID_MAX + 1)),
    "observers": optional(BROKER_IDS),
    "schema": optional(_SCHEMA),
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
    # validate_only (Kafka's CreateTopics/CreatePartitions/AlterConfigs flag): every check, nothing written.
    "create_topics": Obj({"topics": required(Distinct(_CREATE_TOPIC, TOPICS_PER_REQUEST_MAX, ("topic",), min_items=1)),
                          "validate_only": optional(Bool())}),
    "delete_topics": Obj({"topics": required(ListOf(TOPIC, TOPICS_PER_REQUEST_MAX, min_items=1, distinct=True))}),
    "describe_configs": Obj({"topic": required(TOPIC)}),
    # Typed topics (broker/rpc/schema_handlers.py): a new version under the topic's schema.compatibility
    # (dry_run: checked, nothing written), and every registered version.
    "register_schema": Obj({"topic": required(TOPIC), "schema": required(_SCHEMA), "dry_run": optional(Bool())}),
    "describe_schema": Obj({"topic": required(TOPIC)}),
    # The topic's new partition count (only ever larger); the new partitions are placed rack-aware.
    "create_partitions": Obj({"topic": required(TOPIC),
                              "partitions": required(Int(1, PARTITION_ID_MAX + 1, error=InvalidPartitionsError)),
                              "validate_only": optional(Bool())}),
    # Kafka's DeleteRecords, on the partitions the broker leads: records below offset go (-1: the HW).
    "delete_records": Obj({"partitions": required(_partitions(Obj(_partition(offset=required(Int(-1, INT64_MAX)))),
                                                              min_items=1))}),
    "alter_configs": Obj({"topic": required(TOPIC), "set": optional(CONFIG),
                          "delete": optional(ListOf(Text(TOPIC_NAME_CHARS_MAX), CONFIG_ENTRIES_MAX)),
                          "validate_only": optional(Bool())}),
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
    **GROUP_ACTION_SCHEMAS,
}


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

