"""Reading stored typed batches as one schema version, projected: the rule shared by the broker's typed fetch
(``broker/typed_fetch.py``) and a client's local read of the segment files (``local_reads.py``).

The output schema is fixed for a read (``projected_schema``: offset, timestamp, key, headers, then the
asked columns of the read version). A batch stored in the read version gives its own columns (a
selection of its buffers, no copy). A batch of another version is resolved by field id on the asked
columns only (``compatibility.resolve``): columns added later are dropped, columns it lacks are nulls,
widened types cast; one the read version cannot read raises InvalidRecordError naming both versions and
X
"""

from __future__ import annotations

from typing import Callable

import pyarrow as pa

from ads_spark.errors import InvalidConfigError, InvalidRecordError
from ads_spark.protocol.typed_records import TYPED_STORED_PREFIX, projected_schema, typed_record_schema
from ads_spark.schemas import compatibility

_PREFIX_COLUMNS = len(TYPED_STORED_PREFIX)


class ProjectedRead:
    """Stored batches of ``topic`` as version ``version`` reads them, keeping ``columns`` (None: all)."""

    def __init__(self, topic: str, version: int, columns: list[str] | None,
                 user_schema_of: Callable[[int], pa.Schema]):
        self.topic, self.version, self._user_schema_of = topic, version, user_schema_of
        reader_users = user_schema_of(version)
        self.schema = projected_schema(typed_record_schema(reader_users, version), columns)
        self.reader_users = pa.schema(list(self.schema)[_PREFIX_COLUMNS:])
        stored_names = reader_users.names
        # Positions of the read columns in a batch stored in the read version (prefix first).
        self._same_version_indexes = [*range(_PREFIX_COLUMNS),
                                      *(_PREFIX_COLUMNS + stored_names.index(f.name) for f in self.reader_users)]

    def empty_batch(self) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays([pa.nulls(0, field.type) for field in self.schema], schema=self.schema)

    def convert(self, batch: pa.RecordBatch, schema_id: int, base_offset: int, partition: int) -> pa.RecordBatch:
        """``batch`` (stored in version ``schema_id``, starting at ``base_offset``) as this read gives it."""
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
        return pa.RecordBatch.from_arrays([*batch.columns[:_PREFIX_COLUMNS], *resolved.columns], schema=self.schema)
