"""What a log's append computes before it writes: the stored form of a produce batch, and the typed
versions' stored schemas a log keeps at hand.

A leader's batch arrives in ``PRODUCE_SCHEMA`` or in a typed topic's produce schema of one version
(``protocol/typed_records.py``); ``stored_schema_of`` names the schema its segment holds, ``stamp`` prepends
the offsets (vectorised) and finds the max timestamp, ``statistics_text`` computes the header's per-batch
statistics of the topic's ``schema.statistics.columns`` (``schemas/statistics.py``; from
``LogConfig.statistics_columns``, so an alter applies to the next append), sealed into the header under the
CRC; followers store the leader's messages as they are, statistics included. A follower's messages
carry only their schema id: ``KnownSchemas`` holds the stored schema of each version the log was told of
(``PartitionLog.note_schema``, outside the log's lock) so the append can start a segment of it. Pure, but
for the bounded dict.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ads_spark.errors import InvalidRequestError, StorageError
from ads_spark.protocol.records import (
    NO_SCHEMA_ID, NO_STATS, PRODUCE_SCHEMA, RECORD_SCHEMA, TIMESTAMP_TYPE_LOG_APPEND_TIME, int64_column,
)
from ads_spark.protocol.typed_records import TYPED_PRODUCE_PREFIX, TYPED_STORED_PREFIX, schema_id_of
from ads_spark.schemas import statistics

KNOWN_SCHEMAS_MAX = 64  # typed versions a log keeps at hand for follower appends (re-noted when needed)


def stored_schema_of(produce_schema: pa.Schema) -> tuple[pa.Schema, int]:
    """(stored schema, schema id) for a produce batch's schema: RECORD_SCHEMA for PRODUCE_SCHEMA, the typed
    record schema of the version it names for a typed produce schema; InvalidRequestError for anything else."""
    if produce_schema.equals(PRODUCE_SCHEMA):
        return RECORD_SCHEMA, NO_SCHEMA_ID
    version = schema_id_of(produce_schema)
    prefix = list(produce_schema)[:len(TYPED_PRODUCE_PREFIX)]
    if version == NO_SCHEMA_ID or len(produce_schema) <= len(prefix) \
            or not all(a.equals(b) for a, b in zip(prefix, TYPED_PRODUCE_PREFIX)):
        raise InvalidRequestError(f"batch schema {produce_schema} is neither PRODUCE_SCHEMA nor a typed produce schema")
    stored = pa.schema([TYPED_STORED_PREFIX[0], *produce_schema], metadata=produce_schema.metadata)
    return stored, version


def statistics_text(batch: pa.RecordBatch, columns: Sequence[str]) -> str:
    """The header's statistics of a typed produce batch's ``columns`` (those it has), or NO_STATS for none."""
    if not columns:
        return NO_STATS
    found = statistics.compute(batch, columns)
    return statistics.to_metadata(found)[statistics.METADATA_KEY] if found else NO_STATS


def stamp(batch: pa.RecordBatch, stored_schema: pa.Schema, base_offset: int, timestamp_type: int,
           now_ms: int) -> tuple[pa.RecordBatch, int]:
    """The stored form of a produce batch: offsets prepended (vectorised) and its max timestamp in ms."""
    n = batch.num_rows
    offsets = int64_column(np.arange(base_offset, base_offset + n, dtype=np.int64))
    columns = list(batch.columns)
    if timestamp_type == TIMESTAMP_TYPE_LOG_APPEND_TIME:
        columns[0] = int64_column(np.full(n, now_ms, dtype=np.int64), pa.timestamp("ms"))
        max_timestamp_ms = now_ms
    else:
        max_timestamp_ms = pc.max(columns[0]).value
    return pa.RecordBatch.from_arrays([offsets, *columns], schema=stored_schema), max_timestamp_ms


class KnownSchemas:
    """Schema id -> stored schema of the typed versions a log may be asked to write (bounded; a follower
    notes the versions of each fetch before appending it)."""

    def __init__(self):
        self._by_id: dict[int, pa.Schema] = {}

    def note(self, schema_id: int, stored_schema: pa.Schema) -> None:
        if schema_id not in self._by_id and len(self._by_id) >= KNOWN_SCHEMAS_MAX:
            self._by_id.clear()
        self._by_id[schema_id] = stored_schema

    def stored(self, schema_id: int, active, log_name: str) -> pa.Schema:
        """The stored schema of ``schema_id``: the active segment's, RECORD_SCHEMA for Kafka-shaped, or a noted one."""
        if schema_id == active.schema_id:
            return active.schema
        if schema_id == NO_SCHEMA_ID:
            return RECORD_SCHEMA
        found = self._by_id.get(schema_id)
        if found is None:
            raise StorageError(f"{log_name}: no stored schema known for schema id {schema_id}")
        return found
