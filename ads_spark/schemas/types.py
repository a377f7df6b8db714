"""The Arrow types a typed topic may hold, in their stored form: the form Spark's Arrow conversion gives
(pyspark ``to_arrow_type`` with 32-bit offsets; timestamps in microseconds), so a read needs no cast.

``normalise`` takes a declared ``pyarrow.Schema`` to that form where the change loses nothing (unsigned
ints to the next wider signed int, large strings/binaries to the 32-bit-offset ones, half floats to
floats, timestamps in s/ms to us, any time zone to UTC since Arrow stores instants, decimal256 of
precision <= 38 to decimal128) and refuses every other type naming the column and the type. Each field
carries a stable field id in its metadata (``FIELD_ID_KEY``), given by ``with_field_ids``: a column keeps
its id across versions (matched by name), a new column takes the next unused id, so a dropped and
re-added column is a new column.

Nested types (lists, structs, maps), dictionaries, durations, times and intervals are refused for now:
dictionary batches cannot be decoded message by message (a segment keeps one message per batch), and the
others have no reader-side rules yet.
"""

from __future__ import annotations

import pyarrow as pa

from ads_spark.errors import InvalidConfigError

FIELD_ID_KEY = b"ads.field_id"
KEPT_METADATA_PREFIX = b"ads."  # field metadata kept by normalise (the field id, a DDL comment)
TIMESTAMP_UNIT = "us"
STORED_TIME_ZONE = "UTC"
DECIMAL128_PRECISION_MAX = 38

_SCALARS = (pa.bool_(), pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.float32(), pa.float64(),
            pa.string(), pa.binary(), pa.date32())
_WIDER_SIGNED = {pa.uint8(): pa.int16(), pa.uint16(): pa.int32(), pa.uint32(): pa.int64()}
# Columns every stored batch (offset, timestamp, key, headers) or every Spark row (topic, partition,
# timestampType) already has: a user column of one of these names would be ambiguous in both.
RESERVED_COLUMNS = ("offset", "timestamp", "key", "headers", "topic", "partition", "timestampType")


def stored_type(column: str, arrow_type: pa.DataType) -> pa.DataType:
    """The stored form of ``arrow_type`` (see the module), or InvalidConfigError naming ``column``."""
    if arrow_type in _SCALARS:
        return arrow_type
    if arrow_type in _WIDER_SIGNED:
        return _WIDER_SIGNED[arrow_type]
    if arrow_type == pa.large_string():
        return pa.string()
    if arrow_type == pa.large_binary():
        return pa.binary()
    if arrow_type == pa.float16():
        return pa.float32()
    if pa.types.is_timestamp(arrow_type):
        if arrow_type.unit == "ns":
            _refuse(column, arrow_type, "nanoseconds do not fit Spark's microsecond timestamps")
        return pa.timestamp(TIMESTAMP_UNIT, tz=STORED_TIME_ZONE if arrow_type.tz is not None else None)
    if pa.types.is_decimal(arrow_type):
        if arrow_type.precision > DECIMAL128_PRECISION_MAX:
            _refuse(column, arrow_type, f"precision above {DECIMAL128_PRECISION_MAX} (Spark's largest decimal)")
        return pa.decimal128(arrow_type.precision, arrow_type.scale)
    reason = ("dictionary-encoded columns cannot be decoded batch by batch" if pa.types.is_dictionary(arrow_type)
              else "nested types are not supported in typed topics yet" if pa.types.is_nested(arrow_type)
              else "uint64 does not fit a signed 64-bit integer" if arrow_type == pa.uint64()
              else "no stored form")
    _refuse(column, arrow_type, reason)
    raise AssertionError("unreachable")


def _refuse(column: str, arrow_type: pa.DataType, reason: str):
    raise InvalidConfigError(f"column '{column}': type {arrow_type} is not accepted in a typed topic: {reason}")


def normalise(schema: pa.Schema) -> pa.Schema:
    """``schema`` in its stored form (field metadata other than ADS's own keys dropped, names checked)."""
    if len(schema) == 0:
        raise InvalidConfigError("a typed topic's schema needs at least one column")
    seen: set[str] = set()
    fields = []
    for field in schema:
        if not field.name:
            raise InvalidConfigError("a column has an empty name")
        if field.name in seen:
            raise InvalidConfigError(f"column '{field.name}' appears twice")
        if field.name in RESERVED_COLUMNS:
            raise InvalidConfigError(f"column '{field.name}' has a reserved name: every typed record already "
                                     f"carries {', '.join(RESERVED_COLUMNS)}")
        seen.add(field.name)
        metadata = {k: v for k, v in (field.metadata or {}).items() if k.startswith(KEPT_METADATA_PREFIX)} or None
        fields.append(pa.field(field.name, stored_type(field.name, field.type), field.nullable, metadata))
    return pa.schema(fields)


def field_id(field: pa.Field) -> int | None:
    if not field.metadata or FIELD_ID_KEY not in field.metadata:
        return None
    return int(field.metadata[FIELD_ID_KEY])


def with_field_ids(schema: pa.Schema, previous: pa.Schema | None, highest_id_used: int = 0) -> pa.Schema:
    """``schema`` (normalised) with a field id on every field: a column of ``previous`` (same name) keeps its
    id, every other column takes the next id above all ``previous`` used and above ``highest_id_used`` (the
    highest id of every registered version: a column dropped from the last version keeps its id to itself,
    so re-adding it makes a new column)."""
    known = {field.name: field_id(field) for field in previous} if previous is not None else {}
    next_id = max([highest_id_used, *(i for i in known.values() if i is not None)]) + 1
    fields = []
    for field in normalise(schema):
        assigned = known.get(field.name)
        if assigned is None:
            assigned, next_id = next_id, next_id + 1
        fields.append(field.with_metadata({**(field.metadata or {}), FIELD_ID_KEY: str(assigned).encode()}))
    return pa.schema(fields)


def highest_field_id(versions) -> int:
    """The highest field id any of ``versions`` (schemas) gives (0: none)."""
    return max((field_id(field) or 0 for schema in versions for field in schema), default=0)


def same_columns(left: pa.Schema, right: pa.Schema) -> bool:
    """Equal names, types and nullability in order (field ids and other metadata aside)."""
    return len(left) == len(right) and all(
        a.name == b.name and a.type == b.type and a.nullable == b.nullable for a, b in zip(left, right))
