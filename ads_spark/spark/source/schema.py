"""The schema the "ads" source returns, and the vectorised conversion into it.

Owns the one place where stored records (``RECORD_SCHEMA``: offset, timestamp
ms, key, value, headers) become rows of Spark's Kafka schema::

    key binary, value binary, topic string, partition int, offset long,
    timestamp timestamp, timestampType int [, headers array<struct<key string, value binary>>]

Spark checks that the Arrow batches a Python source yields have exactly the
Arrow schema it derives from the Spark schema (``to_arrow_schema`` with UTC), so
the target Arrow schema is computed from the Spark schema, never written by hand.
Everything is column-at-a-time pyarrow: constant columns are repeated scalars,
the timestamp is one cast, empty header lists become nulls in one
``if_else``; no Python runs per row.
"""

from __future__ import annotations

from functools import lru_cache

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ads_spark.errors import InvalidConfigError
from ads_spark.protocol.records import TIMESTAMP_TYPE_CREATE_TIME

# Spark hands Python sources' batches to the JVM with this time zone (plan_data_source_read).
SPARK_ARROW_TIMEZONE = "UTC"

HEADERS_FIELD = StructField(
    "headers", ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])))

BASE_FIELDS = (
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
)


def spark_schema(include_headers: bool) -> StructType:
    return StructType(list(BASE_FIELDS) + ([HEADERS_FIELD] if include_headers else []))


@lru_cache(maxsize=2)
def arrow_schema(include_headers: bool) -> pa.Schema:
    return to_arrow_schema(spark_schema(include_headers), timezone=SPARK_ARROW_TIMEZONE)


def check_user_schema(schema: StructType | None, include_headers: bool) -> None:
    """The source's schema is fixed (as Kafka's); a different user-given schema is an error."""
    expected = spark_schema(include_headers)
    if schema is not None and schema != expected:
        raise InvalidConfigError(f"the ads source has a fixed schema and cannot be given another one "
                                 f"(drop .schema(...)); expected {expected.simpleString()}, "
                                 f"got {schema.simpleString()}")


def to_spark_batches(table: pa.Table, topic: str, partition: int, include_headers: bool,
                     timestamp_type: int = TIMESTAMP_TYPE_CREATE_TIME) -> list[pa.RecordBatch]:
    """RECORD_SCHEMA rows of one partition -> record batches of exactly ``arrow_schema``."""
    target = arrow_schema(include_headers)
    rows = table.num_rows
    columns = {
        "key": table.column("key"),
        "value": table.column("value"),
        "topic": pa.repeat(pa.scalar(topic, pa.string()), rows),
        "partition": pa.repeat(pa.scalar(partition, pa.int32()), rows),
        "offset": table.column("offset"),
        "timestamp": table.column("timestamp"),
        "timestampType": pa.repeat(pa.scalar(timestamp_type, pa.int32()), rows),
    }
    if include_headers:
        columns["headers"] = _null_when_empty(table.column("headers"))
    arrays = [_conform(columns[f.name], f.type) for f in target]
    out = pa.Table.from_arrays(arrays, schema=target)
    # One batch per call instead of one per stored batch: Spark pays a fixed cost per Arrow batch
    # it receives from a Python data source, and stored batches can be small (a producer's linger).
    return out.combine_chunks().to_batches() if rows else []


def _null_when_empty(headers: pa.ChunkedArray) -> pa.ChunkedArray:
    """A record without headers reads back as null, as from Spark's Kafka source, whether it was
    stored with an empty list (a client producer) or a null (the sink without a headers column)."""
    if headers.null_count == len(headers):
        return headers
    empty = pc.equal(pc.list_value_length(headers), 0)
    return pc.if_else(empty, pa.scalar(None, headers.type), headers)


def _conform(column: pa.Array | pa.ChunkedArray, target: pa.DataType) -> pa.Array | pa.ChunkedArray:
    # Casts rename list items and relax nested nullability (header keys are non-null in storage).
    return column if column.type == target else column.cast(target)
