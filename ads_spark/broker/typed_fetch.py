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

A read may carry filters (``schemas/statistics.py``'s wire form, on any column of the read version, asked
or not): ``may_match`` says whether a batch's statistics leave room for a matching row; the fetch does not
send the batches they rule out, and still moves the reader's next offset past them. Statistics of a batch
of another version are matched to the read version's columns by field id (a dropped and re-added column
is another column: its old statistics say nothing of it). Rows are never filtered here: readers re-check.
"""

from __future__ import annotations

import pyarrow as pa

from ads_spark.broker.schema_cache import SchemaCache
from ads_spark.errors import InvalidConfigError, InvalidRecordError, InvalidRequestError, UnknownTopicOrPartitionError
from ads_spark.protocol.records import NO_STATS, BatchHeader
from ads_spark.protocol.typed_records import TYPED_STORED_PREFIX, projected_schema, typed_record_schema
from ads_spark.schemas import compatibility, statistics, types

# Writer versions whose column names a read maps to its own (by field id) for statistics; cleared when full.
STATS_VERSIONS_CACHED_MAX = 64

_PREFIX_COLUMNS = len(TYPED_STORED_PREFIX)


class TypedRead:
    """One typed read: ``schema`` is what every batch of its answers is in."""

    def __init__(self, topic: str, topic_id: str, version: int, columns: list[str] | None, schemas: SchemaCache,
                 filters: list | None = None):
        self.topic, self.topic_id, self.version, self._schemas = topic, topic_id, version, schemas
        reader_users = schemas.user_schema(topic, topic_id, version)
        self._version_users = reader_users
        self.predicates = statistics.predicates_from_wire(filters or [], reader_users)
        self._names_by_version: dict[int, dict[str, str]] = {}  # writer version -> {its column: read column}
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
        return cls(topic, known["topic_id"], typed["version"], typed.get("columns"), broker.schemas,
                   typed.get("filters"))

    def may_match(self, header: BatchHeader) -> bool:
        """False when the batch's statistics say none of its rows satisfies every filter (it is then not sent).
        A batch without statistics, or whose statistics cannot be read, may match."""
        if not self.predicates or header.stats == NO_STATS:
            return True
        try:
            if header.schema_id == self.version:
                found = statistics.from_metadata({statistics.METADATA_KEY: header.stats}, self._version_users)
            else:
                found = self._stats_of_other_version(header)
        except (ValueError, TypeError, ArithmeticError):  # stored under the CRC; should it not parse, send it
            return True
        return statistics.may_match(found, self.predicates)

    def _stats_of_other_version(self, header: BatchHeader) -> dict[str, statistics.ColumnStats]:
        writer_users = self._schemas.user_schema(self.topic, self.topic_id, header.schema_id)
        names = self._names_by_version.get(header.schema_id)
        if names is None:
            read_by_id = {types.field_id(field): field.name for field in self._version_users}
            names = {field.name: read_by_id[types.field_id(field)] for field in writer_users
                     if types.field_id(field) is not None and types.field_id(field) in read_by_id}
            if len(self._names_by_version) >= STATS_VERSIONS_CACHED_MAX:
                self._names_by_version.clear()
            self._names_by_version[header.schema_id] = names
        found = statistics.from_metadata({statistics.METADATA_KEY: header.stats}, writer_users)
        return {names[name]: column for name, column in found.items() if name in names}

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
