"""The leader's check of a batch produced to a typed topic, before anything of it is stored.

A typed batch names its schema version in its Arrow schema's metadata (``ads.schema_id``). The leader
accepts it only when its columns are that registered version's, by name, with the registered types (the
stored form: the client normalises, the broker never guesses), no null in a NOT NULL column, and the
latest version can read it; it then resolves the batch to the latest version (nulls for added nullable
columns, widening casts) so a segment holds one version. Everything wrong is named at once: the topic,
the version and every offending column, as INVALID_RECORD; nothing is appended on any replica, because
the check runs before the replication core sees the batch. Cost: O(columns) schema work plus one
null count per NOT NULL column; the record data is neither copied nor read (casts aside).
"""

from __future__ import annotations

import pyarrow as pa

from ads_spark.broker.schema_cache import SchemaCache
from ads_spark.errors import InvalidConfigError, InvalidRecordError, InvalidRequestError
from ads_spark.protocol.records import NO_SCHEMA_ID
from ads_spark.protocol.typed_records import (
    TYPED_PRODUCE_PREFIX, produce_columns, schema_id_of, typed_produce_schema,
)
from ads_spark.schemas import compatibility


def _check_shape(batch: pa.RecordBatch, topic: str) -> None:
    """What no version can take: a batch without rows (as a Kafka-shaped produce), or one naming a column twice
    (a column is found by name; pyarrow would refuse to pick one)."""
    if batch.num_rows == 0:
        raise InvalidRequestError(f"topic '{topic}': empty record batch: a produce request needs at least one "
                                  f"record; nothing was stored")
    names = batch.schema.names
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise InvalidRecordError(f"topic '{topic}': column(s) {repeated} appear more than once; nothing was stored")


def refuse_typed_batch(batch: pa.RecordBatch, topic: str) -> None:
    """A batch naming a schema version (``ads.schema_id``) sent to a Kafka-shaped topic is refused by name: it was
    meant for a typed topic, and storing it as Kafka records would drop what it says."""
    version = schema_id_of(batch.schema)  # metadata that is not a version is INVALID_REQUEST naming it
    if version != NO_SCHEMA_ID:
        raise InvalidRecordError(f"topic '{topic}' is Kafka-shaped (schema.type=kafka): a batch naming schema "
                                 f"version {version} (ads.schema_id) is for a typed topic; nothing was stored")


def conform_typed_batch(batch: pa.RecordBatch, topic: str, topic_id: str, schemas: SchemaCache) -> pa.RecordBatch:
    """``batch`` in the produce schema of the topic's latest version, or InvalidRecordError naming everything
    that stops it (nothing stored)."""
    try:
        version = schema_id_of(batch.schema)
    except InvalidRequestError as exc:
        raise InvalidRecordError(f"topic '{topic}': {exc.message}; nothing was stored") from None
    _check_shape(batch, topic)
    if version == NO_SCHEMA_ID:
        raise InvalidRecordError(f"topic '{topic}' is typed (schema.type=arrow): a batch must name its schema "
                                 f"version in its schema metadata (ads.schema_id); nothing was stored")
    latest_version, latest = schemas.latest(topic, topic_id, at_least=version)
    if version > latest_version:
        raise InvalidRecordError(f"topic '{topic}' has no schema version {version} (latest {latest_version}); "
                                 f"nothing was stored")
    registered = schemas.user_schema(topic, topic_id, version)
    columns, problems = produce_columns(batch, registered, cast=False)
    if problems:
        raise InvalidRecordError(f"topic '{topic}' schema version {version}: " + "; ".join(problems)
                                 + "; nothing was stored")
    prefix, users = columns[:len(TYPED_PRODUCE_PREFIX)], columns[len(TYPED_PRODUCE_PREFIX):]
    user_batch = pa.RecordBatch.from_arrays(users, schema=registered)
    if version != latest_version:
        try:
            user_batch = compatibility.resolve(user_batch, registered, latest)
        except InvalidConfigError as exc:
            raise InvalidRecordError(f"topic '{topic}': the latest schema version {latest_version} cannot read "
                                     f"version {version}: {exc}; nothing was stored") from None
    return pa.RecordBatch.from_arrays([*prefix, *user_batch.columns],
                                      schema=typed_produce_schema(latest, latest_version))
