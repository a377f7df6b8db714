"""Writing a DataFrame's own columns to a typed topic (``schema.type=arrow``) with ``format("ads")``.

Decided on the driver when the write starts, before any task runs: a write with the ``topic`` option to a
typed topic matches the DataFrame's columns to the topic's latest schema version by name. Each topic
column the DataFrame has must hold the registered type or one that widens to it without loss (an INT
into a BIGINT column); a NOT NULL topic column must be there; besides topic columns the DataFrame may
have Kafka's ``key``, ``partition``, ``timestamp`` and ``headers``. Any other column is refused by name,
unless ``mergeSchema=true``: then they are registered as added nullable columns, a new version under the
topic's compatibility mode (refused by the brokers with the rule named when it breaks it). With
``createTypedTopic=true`` a missing topic is created typed, its version 1 the DataFrame's columns
(partitions and replication from the brokers' defaults).

On executors each Arrow batch becomes the version's produce columns by name (``client/typed.py``
``fit_to_version``), cast where Spark's type is narrower, so the leader's check finds what it expects.
Routing (key hashing, ``partition``), chunking and the exactly-once producer ids are the sink's as for
Kafka-shaped topics.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import StructType

from ads_spark.config_schemas import ARROW
from ads_spark.errors import InvalidConfigError
from ads_spark.schemas import compatibility, types
from ads_spark.spark import clients

# Kafka's sink columns a typed write also reads (a "topic" column is ignored: the option names the topic).
SINK_META_COLUMNS = ("key", "partition", "timestamp", "headers", "topic")


@dataclass(frozen=True)
class TypedSink:
    topic: str
    version: int
    user_schema: pa.Schema  # the version's user columns, as registered


def plan_typed_sink(admin, topic: str | None, schema: StructType, merge_schema: bool,
                    create: bool) -> TypedSink | None:
    """The typed write of ``schema`` to ``topic``, or None when the topic is Kafka-shaped (or absent and not to
    be created: the Kafka-shaped path then says it does not exist). InvalidConfigError names each problem."""
    if topic is None:
        if create or merge_schema:
            raise InvalidConfigError("options 'createTypedTopic' and 'mergeSchema' need the 'topic' option")
        return None
    if create and topic not in admin.list_topics():
        admin.create_topic(topic, schema=_user_arrow_schema(schema))
    described = clients.describe_schema_once(admin, topic, "when the write started")
    if described is None or described["schema_type"] != ARROW:
        if create or merge_schema:
            raise InvalidConfigError(f"options 'createTypedTopic' and 'mergeSchema' are for typed topics; "
                                     f"'{topic}' is Kafka-shaped")
        return None
    latest = max(described["versions"], key=lambda v: v["version"])
    version, registered = latest["version"], latest["schema"]
    added = [f for f in schema.fields if f.name not in registered.names and f.name not in SINK_META_COLUMNS]
    if added and merge_schema:
        merged = pa.schema([*registered, *(pa.field(f.name, to_arrow_type(f.dataType), True) for f in added)])
        version, _ = admin.register_schema(topic, merged)
        registered = admin.get_schema(topic, version)[1]
    elif added:
        raise InvalidConfigError(f"column(s) {[f.name for f in added]} are not in topic '{topic}' schema version "
                                 f"{version} ({', '.join(registered.names)}); drop them, or set mergeSchema=true "
                                 f"to add them as nullable columns")
    _check_columns(topic, version, registered, schema)
    return TypedSink(topic, version, registered)


def _user_arrow_schema(schema: StructType) -> pa.Schema:
    fields = [pa.field(f.name, to_arrow_type(f.dataType), f.nullable) for f in schema.fields
              if f.name not in SINK_META_COLUMNS]
    return types.normalise(pa.schema(fields))


def _check_columns(topic: str, version: int, registered: pa.Schema, schema: StructType) -> None:
    problems = []
    given = {f.name: f for f in schema.fields}
    for field in registered:
        found = given.get(field.name)
        if found is None:
            if not field.nullable:
                problems.append(f"NOT NULL column '{field.name}' is missing")
            continue
        try:
            arrow_type = types.stored_type(field.name, to_arrow_type(found.dataType))
        except (InvalidConfigError, TypeError) as exc:
            problems.append(f"column '{field.name}': {exc}")
            continue
        if not compatibility.widens(arrow_type, field.type):
            problems.append(f"column '{field.name}' is {found.dataType.simpleString()}, the topic's is "
                            f"{field.type} (not a lossless widening)")
    if problems:
        raise InvalidConfigError(f"the DataFrame does not fit topic '{topic}' schema version {version}: "
                                 + "; ".join(problems))
