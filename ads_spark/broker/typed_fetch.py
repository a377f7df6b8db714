"""What a consumer's fetch of a typed topic sends: stored batches read as one schema version, projected.

A typed read names its topic, the version it reads (the one its query planned with) and optionally the
user columns it needs. The answer's Arrow schema is fixed for the whole fetch or fetch session
(``projected_schema``: offset, timestamp, key, headers, then those columns), so Flight sends every batch
in one stream. A batch stored in the read version is sent as its own columns (no copy: a selection of
the mapped buffers, so only the asked columns' bytes leave the broker). A batch of another version is
resolved by field id first (``compatibility.resolve`` on the asked columns only: a change to a column
the reader does not need does not stop it): columns added later are dropped, columns the batch lacks are
nulls, widened types cast. A batch the read version cannot read fails the partition's fetch with an
error naming both versions and the offset, and telling the reader to restart on the latest version.
Offsets are never filtered or renumbered: a replay reads the same rows.
"""

from __future__ import annotations

import pyarrow as pa

from ads_spark.broker.schema_cache import SchemaCache
from ads_spark.errors import InvalidConfigError, InvalidRecordError, InvalidRequestError, UnknownTopicOrPartitionError
from ads_spark.protocol.records import BatchHeader
from ads_spark.protocol.typed_records import TYPED_STORED_PREFIX, projected_schema, typed_record_schema
from ads_spark.schemas import compatibility

_PREFIX_COLUMNS = len(TYPED_STORED_PREFIX)


class TypedRead:
    """One typed read: ``schema`` is what every batch of its answers is in."""

    def __init__(self, topic: str, topic_id: str, version: int, columns: list[str] | None, schemas: SchemaCache):
        self.topic, self.topic_id, self.version, self._schemas = topic, topic_id, version, schemas
        reader_users = schemas.user_schema(topic, topic_id, version)
        self.schema = projected_schema(typed_record_schema(reader_users, version), columns)
        self._reader_users = pa.schema(list(self.schema)[_PREFIX_COLUMNS:])
        stored_names = [field.name for field in reader_users]
        # Positions of the asked columns in a batch stored in the read version (prefix first).
        self._same_version_indexes = [*range(_PREFIX_COLUMNS),
                                      *(_PREFIX_COLUMNS + stored_names.index(f.name) for f in self._reader_users)]

    @classmethod
    def from_request(cls, typed: dict, broker) -> "TypedRead":
        """The read a fetch request's ``typed`` field asks for (checked by ``request_schemas.TYPED_READ``)."""
        topic = typed["topic"]
        known = broker.metadata.topics.get(topic)
        if known is None or not known.get("topic_id"):
            raise UnknownTopicOrPartitionError(f"topic '{topic}' is not known to this broker")
        if broker.topic_config(topic).get("schema.type") != "arrow":
            raise InvalidRequestError(f"topic '{topic}' is not typed (schema.type=kafka): read it without 'typed'")
        return cls(topic, known["topic_id"], typed["version"], typed.get("columns"), broker.schemas)

    def empty_batch(self) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays([pa.nulls(0, field.type) for field in self.schema], schema=self.schema)

    def convert(self, batch: pa.RecordBatch, header: BatchHeader, partition: int) -> pa.RecordBatch:
        """``batch`` (stored, any version of the topic) as this read sends it."""
        if header.schema_id == self.version:
            columns = [batch.column(i) for i in self._same_version_indexes]
            return pa.RecordBatch.from_arrays(columns, schema=self.schema)
        writer_users = self._schemas.user_schema(self.topic, self.topic_id, header.schema_id)
        users = pa.RecordBatch.from_arrays(batch.columns[_PREFIX_COLUMNS:], schema=writer_users)
        try:
            resolved = compatibility.resolve(users, writer_users, self._reader_users)
        except InvalidConfigError as exc:
            raise InvalidRecordError(
                f"{self.topic}-{partition}: the batch at offset {header.base_offset} is in schema version "
                f"{header.schema_id}, which a reader of version {self.version} cannot read ({exc}); restart the "
                f"reader on the latest schema version") from None
        return pa.RecordBatch.from_arrays([*batch.columns[:_PREFIX_COLUMNS], *resolved.columns], schema=self.schema)
