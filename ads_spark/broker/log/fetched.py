"""Checks of the batches a follower fetched, before any of them is written.

Pure functions (they touch no log): the broker runs them before the replication
core sees a fetch response, so a corrupt or out-of-sequence answer changes
nothing. ``check_fetched_messages`` takes the leader's stored IPC messages as
they are (the replica fetch path: written without decoding and re-encoding);
``encode_fetched`` takes decoded record batches and encodes each once.

Offset gaps: a follower copies the leader's cleaned batches as they are, so the
first batch may start after the fetch offset (the offset fell in a gap the
cleaner left) and a batch may start after the previous one's next offset, but
only when that previous batch is a cleaned one (``BatchHeader.cleaned``): the
cleaner marks every batch it writes, so a gap after an uncleaned batch is a
missing batch, not compaction.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from ads_spark.broker.log.segment import encode_batch_message
from ads_spark.errors import CorruptMessageError
from ads_spark.protocol.records import NO_SCHEMA_ID, RECORD_SCHEMA, BatchHeader, check_counts, check_sequence, message_crc
from ads_spark.protocol.typed_records import check_stored_schema

# The stored schema of a typed version (schema id >= 1) of the fetched partition's topic.
SchemaLookup = Callable[[int], pa.Schema]


def _kafka_shaped_only(schema_id: int) -> pa.Schema:
    raise CorruptMessageError(f"batch names schema id {schema_id}, and this partition knows no typed schema")


def stored_schema_for(schema_id: int, lookup: SchemaLookup | None) -> pa.Schema:
    """RECORD_SCHEMA for a Kafka-shaped batch, else ``lookup``'s stored schema, checked to name that id."""
    if schema_id == NO_SCHEMA_ID:
        return RECORD_SCHEMA
    schema = (lookup or _kafka_shaped_only)(schema_id)
    if check_stored_schema(schema) != schema_id:
        raise CorruptMessageError(f"the stored schema looked up for id {schema_id} names another id")
    return schema


def encode_fetched(batches: Sequence[tuple[pa.RecordBatch, BatchHeader]],
                   first_offset: int) -> list[tuple[pa.Buffer, BatchHeader]]:
    """Check a follower's fetched batches and encode each once into its segment message.

    Offsets must run on from ``first_offset`` (gaps as the module docstring allows),
    batches must be RECORD_SCHEMA with an offset column that agrees with the header,
    and the CRC is checked over the body of the message just encoded
    (``message_crc``), so a batch is serialized once on its way to disk. Pure (touches no log): the broker runs it before the replication
    core sees the batches, so a corrupt response changes nothing.
    """
    expected, previous = first_offset, None
    messages = []
    for batch, header in batches:
        if check_stored_schema(batch.schema) != header.schema_id:
            raise CorruptMessageError(f"batch at {header.base_offset} is not in the stored schema of its "
                                      f"schema id {header.schema_id}")
        message = encode_batch_message(batch, header)
        _check(message, batch, header, expected, previous)
        messages.append((message, header))
        expected, previous = header.next_offset, header
    return messages


def check_fetched_messages(messages: Sequence[tuple[pa.Buffer, BatchHeader]], first_offset: int,
                           schema_lookup: SchemaLookup | None = None) -> list[tuple[pa.Buffer, BatchHeader]]:
    """Check a follower's fetched stored messages, to be written as they are (no decode-and-encode).

    The same checks as ``encode_fetched``: offsets run on from ``first_offset``, the
    CRC over the message body and the header fields matches, and the batch (decoded
    without copying) is in the stored schema its header names (RECORD_SCHEMA, or the
    typed version ``schema_lookup`` gives) with the header's row count and offsets. Pure.
    """
    expected, previous = first_offset, None
    schemas: dict[int, pa.Schema] = {}  # one look-up and check per version in the answer, not per message
    for message, header in messages:
        schema = schemas.get(header.schema_id)
        if schema is None:
            schema = schemas[header.schema_id] = stored_schema_for(header.schema_id, schema_lookup)
        try:
            batch = ipc.read_record_batch(ipc.read_message(message), schema)
        except (pa.ArrowException, OSError) as exc:
            raise CorruptMessageError(f"fetched batch at {header.base_offset} is not an IPC record batch: {exc}")
        _check(message, batch, header, expected, previous)
        expected, previous = header.next_offset, header
    return list(messages)


def _check(message: pa.Buffer, batch: pa.RecordBatch, header: BatchHeader, expected_base_offset: int,
           previous: BatchHeader | None) -> None:
    """The checks every fetched batch passes before it is written: sequence, rows, offsets, CRC."""
    check_sequence(header, expected_base_offset, previous)
    check_counts(batch.num_rows, header)
    check_offsets(batch.column(0), header)
    actual = message_crc(message, header)
    if actual != header.crc:
        raise CorruptMessageError(f"CRC mismatch in batch at offset {header.base_offset}: "
                                  f"stored {header.crc}, computed {actual}")


def check_offsets(offsets: pa.Array, header: BatchHeader) -> None:
    """The offset column lies in the header's span: all of it, or (cleaned) strictly increasing inside it."""
    if not header.cleaned:
        if offsets[0].as_py() != header.base_offset or offsets[-1].as_py() != header.last_offset:
            raise CorruptMessageError(f"offset column of batch {header.base_offset} disagrees with its header")
        return
    if offsets.null_count:
        raise CorruptMessageError(f"offset column of batch {header.base_offset} holds nulls")
    # Through the buffer: Arrow's to_numpy imports pandas, which a broker never does (records.int64_column).
    values = np.frombuffer(offsets.buffers()[1], dtype=np.int64, count=offsets.offset + len(offsets))[offsets.offset:]
    if values[0] < header.base_offset or values[-1] > header.last_offset or (np.diff(values) <= 0).any():
        raise CorruptMessageError(f"offset column of cleaned batch {header.base_offset} is not strictly "
                                  f"increasing inside [{header.base_offset}, {header.last_offset}]")
