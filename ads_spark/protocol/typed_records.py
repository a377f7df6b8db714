"""The record schemas of typed topics (``schema.type=arrow``), derived from a registered schema version.

A Kafka-shaped topic stores ``RECORD_SCHEMA`` (offset, timestamp, key, value, headers). A typed topic
stores, for schema version ``v`` with user columns ``C``: offset, timestamp, key, headers, then ``C`` as
registered (stored form, field ids in the field metadata), and the schema's own metadata says
``ads.schema_id = v``. The derivation is a pure function of the registered version, so the leader and
every follower build byte-identical segment schemas without exchanging them, and a segment file names
its version itself: any Arrow tool opens it, and recovery needs nothing but the file.

A producer sends the same columns without ``offset`` (``typed_produce_schema``); a consumer receives
``projected_schema``: the meta columns and the columns it asked for, in the version it reads, the offset
rebuilt from each batch's header (``with_offsets``).
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa

from ads_spark.errors import CorruptMessageError, InvalidRequestError
from ads_spark.protocol.records import HEADER_TYPE, NO_SCHEMA_ID, RECORD_SCHEMA, int64_column, now_ms

SCHEMA_ID_KEY = b"ads.schema_id"  # registered versions start at 1; NO_SCHEMA_ID (0): Kafka-shaped
_VERSION_TEXT = re.compile(rb"-?[0-9]{1,19}")
SCHEMA_ID_SHOWN_BYTES = 24

# The columns every typed record carries before its user columns (the offset only once stored).
TYPED_PRODUCE_PREFIX = (
    pa.field("timestamp", pa.timestamp("ms"), nullable=False),
    pa.field("key", pa.binary()),
    pa.field("headers", HEADER_TYPE),
)
TYPED_STORED_PREFIX = (pa.field("offset", pa.int64(), nullable=False), *TYPED_PRODUCE_PREFIX)
PRODUCE_PREFIX_NAMES = tuple(field.name for field in TYPED_PRODUCE_PREFIX)
META_COLUMNS = PRODUCE_PREFIX_NAMES  # what a typed read may ask for besides user columns (default: all)


def typed_produce_schema(user_schema: pa.Schema, version: int) -> pa.Schema:
    """What a producer sends for ``version``: the produce prefix, then the user columns as registered."""
    return pa.schema([*TYPED_PRODUCE_PREFIX, *user_schema], metadata={SCHEMA_ID_KEY: str(version).encode()})


def typed_record_schema(user_schema: pa.Schema, version: int) -> pa.Schema:
    """What a typed segment of ``version`` holds: the stored prefix, then the user columns as registered."""
    return pa.schema([*TYPED_STORED_PREFIX, *user_schema], metadata={SCHEMA_ID_KEY: str(version).encode()})


def schema_id_of(schema: pa.Schema) -> int:
    """The version a typed schema names in its metadata; ``NO_SCHEMA_ID`` for one that names none."""
    raw = (schema.metadata or {}).get(SCHEMA_ID_KEY)
    if raw is None:
        return NO_SCHEMA_ID
    # Only what typed_produce_schema writes: decimal ASCII digits (int() would also take " 1", "+1", "1_0" and
    # thousands of digits); bounded, so that the text shown back stays short.
    if not _VERSION_TEXT.fullmatch(raw):
        shown = raw[:SCHEMA_ID_SHOWN_BYTES] + (b"..." if len(raw) > SCHEMA_ID_SHOWN_BYTES else b"")
        raise InvalidRequestError(f"schema metadata {SCHEMA_ID_KEY.decode()}={shown!r} is not a version number")
    version = int(raw)
    if version < 1:
        raise InvalidRequestError(f"schema metadata {SCHEMA_ID_KEY.decode()}={version} is not a version (>= 1)")
    return version


def user_columns(schema: pa.Schema) -> pa.Schema:
    """The user columns of a typed produce, stored or projected schema (after its prefix)."""
    prefix = len(TYPED_STORED_PREFIX) if schema.names[:1] == ["offset"] else len(TYPED_PRODUCE_PREFIX)
    return pa.schema(list(schema)[prefix:])


def check_stored_schema(schema: pa.Schema) -> int:
    """The schema id of a segment's schema: 0 for ``RECORD_SCHEMA``, the version for a typed one.

    CorruptMessageError for anything else (a segment file or fetched batch that is neither)."""
    if schema.equals(RECORD_SCHEMA):
        return NO_SCHEMA_ID
    try:
        version = schema_id_of(schema)
    except InvalidRequestError as exc:
        raise CorruptMessageError(str(exc)) from None
    prefix = list(schema)[:len(TYPED_STORED_PREFIX)]
    if version == NO_SCHEMA_ID or len(schema) <= len(TYPED_STORED_PREFIX) \
            or not all(a.equals(b) for a, b in zip(prefix, TYPED_STORED_PREFIX)):
        raise CorruptMessageError(f"schema {schema} is neither RECORD_SCHEMA nor a typed record schema")
    return version


def projected_schema(stored: pa.Schema, columns: list[str] | None,
                     meta: tuple[str, ...] | list[str] = META_COLUMNS) -> pa.Schema:
    """What a typed read of ``stored`` (a typed record schema) sends: the ``meta`` columns it asked for (prefix
    order), then only ``columns`` of its user columns in the order asked (None: all). No ``offset``: a typed
    batch holds every offset of its span (compaction is refused on typed topics), so readers rebuild the column
    from the batch's header (``with_offsets``) and 8 bytes a row stay on the broker. InvalidRequestError names
    the columns the version does not have."""
    users = user_columns(stored)
    names = users.names if columns is None else list(columns)
    missing = [name for name in names if name not in users.names]
    if missing:
        raise InvalidRequestError(f"column(s) {missing} are not in schema version {schema_id_of(stored)} "
                                  f"(columns: {users.names})")
    if len(set(names)) != len(names):
        raise InvalidRequestError(f"columns {names} name a column twice")
    prefix = [field for field in TYPED_PRODUCE_PREFIX if field.name in meta]
    return pa.schema([*prefix, *(users.field(name) for name in names)], metadata=stored.metadata)


def with_offsets(batch: pa.RecordBatch, base_offset: int) -> pa.RecordBatch:
    """A typed read's batch with its ``offset`` column rebuilt in front (``base_offset`` onwards, one a row)."""
    offsets = int64_column(np.arange(base_offset, base_offset + batch.num_rows, dtype=np.int64))
    return pa.RecordBatch.from_arrays([offsets, *batch.columns],
                                      schema=pa.schema([TYPED_STORED_PREFIX[0], *batch.schema],
                                                       metadata=batch.schema.metadata))


def produce_columns(batch: pa.RecordBatch, registered: pa.Schema, *, cast: bool) -> tuple[list[pa.Array], list[str]]:
    """``batch``'s columns matched by name to ``registered``'s produce schema (prefix first, then its columns in
    registered order), and every problem found: a column the schema lacks, a NOT NULL column missing or holding
    nulls, a type that differs (``cast``: one a safe cast cannot reach). Absent: ``timestamp`` is now, a nullable
    column null. The one rule of the client's fitting (``cast=True``) and the leader's check (``cast=False``:
    the stored form is exact, the broker never guesses)."""
    problems: list[str] = []
    names = set(batch.schema.names)
    unknown = sorted(names - set(registered.names) - set(PRODUCE_PREFIX_NAMES))
    if unknown:
        problems.append(f"column(s) {unknown} are not in the schema")
    columns = []
    for field in [*TYPED_PRODUCE_PREFIX, *registered]:
        if field.name not in names:
            if field.name == "timestamp":
                columns.append(int64_column(np.full(batch.num_rows, now_ms()), field.type))
            elif field.nullable:  # a registered nullable column the writer left out is null, as Spark writes it
                columns.append(pa.nulls(batch.num_rows, field.type))
            else:
                problems.append(f"NOT NULL column '{field.name}' is missing")
            continue
        column = batch.column(field.name)
        if column.type != field.type:
            if not cast:
                problems.append(f"column '{field.name}' is {column.type}, the schema says {field.type}")
                continue
            try:
                column = column.cast(field.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                problems.append(f"column '{field.name}' is {column.type}, the schema says {field.type} "
                                f"({str(exc).splitlines()[0][:120]})")
                continue
        if not field.nullable and column.null_count:
            problems.append(f"NOT NULL column '{field.name}' holds {column.null_count} null(s)")
        columns.append(column)
    return columns, problems
