"""Schema evolution rules, pure: the schema registries' compatibility modes over Arrow schemas, and how a
batch written under one version reads under another.

Reader and writer match columns by field id (types.FIELD_ID_KEY; by name where a schema has none). A
reader can read a writer's data when every reader column either exists in the writer with the same type
or one it widens losslessly (``WIDENINGS``: signed ints to wider ints, int8-32 and float to double,
decimals keeping their integral digits and scale not shrinking), and is nullable unless the writer's is
NOT NULL too; or is absent from the writer and nullable (read as nulls). Writer columns the reader lacks
are skipped. The modes, as Confluent's and Redpanda's registries mean them, for a new version N against
the registered versions (oldest first):

* BACKWARD: N reads the latest version's data (the default: consumers upgrade first);
* FORWARD: the latest version reads N's data (producers upgrade first);
* FULL: both; the ``_TRANSITIVE`` forms hold against every registered version, not only the latest;
* NONE: no check.

``check`` returns the violations as sentences naming the version, the column and the rule, empty when
compatible; ``resolve`` turns a batch of the writer's schema into the reader's, work per column, not per
row (null columns and widening casts).
"""

from __future__ import annotations

from typing import Sequence

import pyarrow as pa

from ads_spark.errors import InvalidConfigError
from ads_spark.schemas import types
from ads_spark.schemas import modes

# The modes' names live in modes.py (no pyarrow, for config.py); callers know them by this module too.
MODES, DEFAULT_MODE, check_mode = modes.MODES, modes.DEFAULT_MODE, modes.check_mode

_INT_ORDER = (pa.int8(), pa.int16(), pa.int32(), pa.int64())
_TO_DOUBLE = (pa.int8(), pa.int16(), pa.int32(), pa.float32())


def widens(writer_type: pa.DataType, reader_type: pa.DataType) -> bool:
    """Whether every value of ``writer_type`` is a value of ``reader_type`` (equal types included)."""
    if writer_type == reader_type:
        return True
    if writer_type in _INT_ORDER and reader_type in _INT_ORDER:
        return _INT_ORDER.index(writer_type) < _INT_ORDER.index(reader_type)
    if reader_type == pa.float64():
        return writer_type in _TO_DOUBLE
    if pa.types.is_decimal(writer_type) and pa.types.is_decimal(reader_type):
        integral_digits_kept = (reader_type.precision - reader_type.scale) >= (writer_type.precision - writer_type.scale)
        return integral_digits_kept and reader_type.scale >= writer_type.scale
    return False


def _key(field: pa.Field):
    found = types.field_id(field)
    return ("id", found) if found is not None else ("name", field.name)


def read_violations(reader: pa.Schema, writer: pa.Schema) -> list[str]:
    """Why ``reader`` cannot read data written under ``writer`` (empty: it can)."""
    by_key = {_key(field): field for field in writer}
    problems = []
    for field in reader:
        written = by_key.get(_key(field))
        if written is None:
            if not field.nullable:
                problems.append(f"column '{field.name}' is NOT NULL but the data has no such column "
                                f"(an added column must be nullable)")
            continue
        if not widens(written.type, field.type):
            problems.append(f"column '{field.name}' is {field.type}, written as {written.type}: not a lossless "
                            f"widening")
        if written.nullable and not field.nullable:
            problems.append(f"column '{field.name}' is NOT NULL but the data may hold nulls")
    return problems


def check(mode: str, new: pa.Schema, registered: Sequence[pa.Schema]) -> list[str]:
    """The violations of registering ``new`` after ``registered`` (versions 1..n, oldest first) under ``mode``."""
    mode = check_mode(mode)
    if mode == "NONE" or not registered:
        return []
    first_version = 1 if mode.endswith("_TRANSITIVE") else len(registered)
    problems = []
    for version in range(first_version, len(registered) + 1):
        old = registered[version - 1]
        if mode.startswith(("BACKWARD", "FULL")):
            problems += [f"{mode}: the new schema cannot read version {version}: {p}"
                         for p in read_violations(new, old)]
        if mode.startswith(("FORWARD", "FULL")):
            problems += [f"{mode}: version {version} cannot read the new schema's data: {p}"
                         for p in read_violations(old, new)]
    return problems


def resolve(batch: pa.RecordBatch, writer: pa.Schema, reader: pa.Schema) -> pa.RecordBatch:
    """``batch`` (columns of ``writer``) as ``reader`` reads it: its columns matched by field id, widened,
    nulls for the reader's columns the writer lacks, the writer's extra columns dropped. Raises
    InvalidConfigError with ``read_violations`` when ``reader`` cannot read ``writer``."""
    problems = read_violations(reader, writer)
    if problems:
        raise InvalidConfigError("; ".join(problems))
    index = {_key(field): i for i, field in enumerate(writer)}
    columns = []
    for field in reader:
        at = index.get(_key(field))
        if at is None:
            columns.append(pa.nulls(batch.num_rows, field.type))
            continue
        column = batch.column(at)
        columns.append(column if column.type == field.type else column.cast(field.type))
    return pa.RecordBatch.from_arrays(columns, schema=reader)
