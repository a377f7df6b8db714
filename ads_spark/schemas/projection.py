"""Reading stored typed batches as one schema version, projected: the rule shared by the broker's typed fetch
(``broker/typed_fetch.py``) and a client's local read of the segment files (``local_reads.py``).

The output schema is fixed for a read (``projected_schema``: the asked meta columns of timestamp, key,
headers, then the asked columns of the read version; no offset: readers rebuild it from the header). A batch stored in the read version gives its own columns (a
selection of its buffers, no copy). A batch of another version is resolved by field id on the asked
columns only (``compatibility.resolve``): columns added later are dropped, columns it lacks are nulls,
widened types cast; one the read version cannot read raises InvalidRecordError naming both versions and
X
"""

from __future__ import annotations

from typing import Callable

import pyarrow as pa

from ads_spark.errors import InvalidConfigError, InvalidRecordError
from ads_spark.protocol.records import NO_STATS, BatchHeader
from ads_spark.protocol.typed_records import META_COLUMNS, TYPED_STORED_PREFIX, projected_schema, typed_record_schema
from ads_spark.schemas import compatibility, statistics, types

_PREFIX_COLUMNS = len(TYPED_STORED_PREFIX)
# Writer versions whose column names a read maps to its own (by field id) for statistics; cleared when full.
STATS_VERSIONS_CACHED_MAX = 64


class ProjectedRead:
    """Stored batches of ``topic`` as version ``version`` reads them, keeping ``columns`` (None: all)."""

    def __init__(self, topic: str, version: int, columns: list[str] | None,
                 user_schema_of: Callable[[int], pa.Schema], filters: list | None = None,
                 meta: tuple[str, ...] | list[str] = META_COLUMNS):
        self.topic, self.version, self._user_schema_of = topic, version, user_schema_of
        reader_users = user_schema_of(version)
        self._version_users = reader_users
        self.predicates = statistics.predicates_from_wire(filters or [], reader_users)
        self._names_by_version: dict[int, dict[str, str]] = {}  # writer version -> {its column: read column}
        self.schema = projected_schema(typed_record_schema(reader_users, version), columns, meta)
        meta_count = len(self.schema) - len(columns if columns is not None else reader_users)
        self.reader_users = pa.schema(list(self.schema)[meta_count:])
        # Positions in a stored batch of the read's meta columns, and of its user columns when the batch is in the
        # read version.
        self._meta_indexes = [i for i, field in enumerate(TYPED_STORED_PREFIX) if field.name in self.schema.names]
        self._same_version_indexes = [*self._meta_indexes, *(_PREFIX_COLUMNS + reader_users.names.index(f.name)
                                                             for f in self.reader_users)]

    def empty_batch(self) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays([pa.nulls(0, field.type) for field in self.schema], schema=self.schema)

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
        writer_users = self._user_schema_of(header.schema_id)
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

    def convert(self, batch: pa.RecordBatch, header: BatchHeader, partition: int) -> pa.RecordBatch:
        """``batch`` (stored in the version its header names) as this read gives it."""
        schema_id, base_offset = header.schema_id, header.base_offset
        if schema_id == self.version:
            columns = [batch.column(i) for i in self._same_version_indexes]
            return pa.RecordBatch.from_arrays(columns, schema=self.schema)
        writer_users = self._user_schema_of(schema_id)
        users = pa.RecordBatch.from_arrays(batch.columns[_PREFIX_COLUMNS:], schema=writer_users)
        try:
            resolved = compatibility.resolve(users, writer_users, self.reader_users)
        except InvalidConfigError as exc:
            raise InvalidRecordError(
                f"{self.topic}-{partition}: the batch at offset {base_offset} is in schema version {schema_id}, "
                f"which a reader of version {self.version} cannot read ({exc}); restart the reader on the latest "
                f"schema version") from None
        return pa.RecordBatch.from_arrays([*(batch.column(i) for i in self._meta_indexes), *resolved.columns],
                                          schema=self.schema)
