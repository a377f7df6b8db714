"""Record schemas and the batch header: the one data format of ADS.

Producers send batches in ``PRODUCE_SCHEMA``; the leader adds the ``offset``
column and a ``BatchHeader`` and from then on the batch is immutable: the same
Arrow body is written to the leader's segment, copied by followers, and served
to consumers. The header travels as the record batch's IPC custom metadata so a
segment file stays a plain Arrow IPC stream that any Arrow tool can open.

The CRC covers the Arrow message body (the column buffers, whose layout the
Arrow format fixes) and every header field but the CRC itself, so a torn or
corrupt write is detected both on recovery and when a follower receives a batch.
"""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from ads_spark.errors import CorruptMessageError, InvalidRequestError

HEADER_TYPE = pa.list_(
    pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())])
)

# What a producer sends. ``timestamp`` is the record's create time in ms.
PRODUCE_SCHEMA = pa.schema(
    [
        pa.field("timestamp", pa.timestamp("ms"), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADER_TYPE),
    ]
)

# What is stored, replicated and fetched: the produce columns plus the offset.
RECORD_SCHEMA = pa.schema([pa.field("offset", pa.int64(), nullable=False), *PRODUCE_SCHEMA])

# How a follower fetch session carries stored batches: one row per batch, the IPC message bytes of the
# segment as they are, so the follower writes what the leader wrote (broker/log/fetched.py checks them).
REPLICA_MESSAGE_SCHEMA = pa.schema([pa.field("message", pa.binary(), nullable=False)])


def as_message_batch(message: pa.Buffer) -> pa.RecordBatch:
    """A one-row REPLICA_MESSAGE_SCHEMA batch over ``message`` (no copy: the row points at the buffer)."""
    offsets = pa.py_buffer(np.array([0, message.size], dtype=np.int32))
    column = pa.Array.from_buffers(pa.binary(), 1, [None, offsets, message])
    return pa.RecordBatch.from_arrays([column], schema=REPLICA_MESSAGE_SCHEMA)


def message_of(batch: pa.RecordBatch) -> pa.Buffer:
    """The message a one-row REPLICA_MESSAGE_SCHEMA batch carries, as a slice of the batch's data buffer.

    Not ``column[0].as_buffer()``: a binary scalar copies its value (measured: 0.2-0.3 ms per 4 MiB message,
    18% of a follower's GIL-holding samples at RF=3 batched load)."""
    column = batch.column(0)
    _, offsets_buffer, data_buffer = column.buffers()
    start, end = np.frombuffer(offsets_buffer, dtype=np.int32, count=2, offset=4 * column.offset)
    return data_buffer.slice(int(start), int(end - start))

TIMESTAMP_TYPE_CREATE_TIME = 0
TIMESTAMP_TYPE_LOG_APPEND_TIME = 1

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1

_META_PREFIX = "ads."


ALL_ROWS = -1  # row_count of a batch holding every offset of its span (every batch but a cleaned one)
NO_DELETE_HORIZON = -1
NO_SCHEMA_ID = 0
NO_STATS = ""
STATS_METADATA_KEY = "ads.stats"  # = schemas.statistics.METADATA_KEY (not imported: records stays a leaf)


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """Batch-level metadata; offsets in the batch lie in base_offset .. base_offset + record_count - 1.

    ``record_count`` is the batch's OFFSET SPAN, fixed when the leader appended it, so
    next_offset, last_sequence, producer dedupe and epoch starts never change. A batch
    the log cleaner rewrote keeps its span and says how many rows it still holds in
    ``row_count`` (>= 1, strictly increasing offsets inside the span); ``ALL_ROWS``
    (-1) means every offset of the span is present. The row count enters the metadata
    and the CRC only when it is set, so every batch written before compaction existed
    keeps its bytes and its CRC. ``delete_horizon_ms`` follows the same rule.
    """

    base_offset: int
    record_count: int  # > 0: the offset span; an empty batch is never stored
    leader_epoch: int  # epoch of the leader that appended the batch
    max_timestamp_ms: int
    timestamp_type: int = TIMESTAMP_TYPE_CREATE_TIME
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    base_sequence: int = NO_SEQUENCE
    crc: int = 0
    row_count: int = ALL_ROWS  # rows kept by the cleaner, or ALL_ROWS
    # Cleaned batches holding tombstones: the wall-clock ms from which a later cleaning removes them
    # (set to now + delete.retention.ms by the cleaning that first rewrote the batch, as Kafka's KIP-534).
    delete_horizon_ms: int = NO_DELETE_HORIZON
    # The schema version of a typed topic's batch (protocol/typed_records.py; equal to its segment's), or
    # NO_SCHEMA_ID (0) for a Kafka-shaped one: in the metadata and the CRC only when set, as row_count.
    schema_id: int = NO_SCHEMA_ID
    # A typed batch's per-batch column statistics (schemas/statistics.py ``to_metadata``'s JSON text, under
    # the same metadata key), set by the leader for the topic's schema.statistics.columns; "" for none. In the
    # metadata and the CRC only when set, as row_count: a batch without statistics keeps its bytes and CRC.
    stats: str = NO_STATS

    @property
    def rows(self) -> int:
        """How many records (rows) the batch holds."""
        return self.record_count if self.row_count == ALL_ROWS else self.row_count

    @property
    def cleaned(self) -> bool:
        """Written by the log cleaner: offsets may be missing inside the span and after it."""
        return self.row_count != ALL_ROWS

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.record_count - 1

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.record_count

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return self.base_sequence + self.record_count - 1

    def _fields_without_crc(self) -> bytes:
        return (
            f"{self.base_offset},{self.record_count},{self.leader_epoch},{self.max_timestamp_ms},"
            f"{self.timestamp_type},{self.producer_id},{self.producer_epoch},{self.base_sequence}"
            + (f",{self.row_count}" if self.cleaned else "")
            + (f",h{self.delete_horizon_ms}" if self.delete_horizon_ms != NO_DELETE_HORIZON else "")
            + (f",s{self.schema_id}" if self.schema_id != NO_SCHEMA_ID else "")
            + (f",t{self.stats}" if self.stats != NO_STATS else "")
        ).encode()

    def to_metadata(self) -> dict[str, str]:
        metadata = {
            "ads.base_offset": str(self.base_offset),
            "ads.record_count": str(self.record_count),
            "ads.leader_epoch": str(self.leader_epoch),
            "ads.max_timestamp_ms": str(self.max_timestamp_ms),
            "ads.timestamp_type": str(self.timestamp_type),
            "ads.producer_id": str(self.producer_id),
            "ads.producer_epoch": str(self.producer_epoch),
            "ads.base_sequence": str(self.base_sequence),
            "ads.crc": str(self.crc),
        }
        if self.cleaned:
            metadata["ads.row_count"] = str(self.row_count)
        if self.delete_horizon_ms != NO_DELETE_HORIZON:
            metadata["ads.delete_horizon_ms"] = str(self.delete_horizon_ms)
        if self.schema_id != NO_SCHEMA_ID:
            metadata["ads.schema_id"] = str(self.schema_id)
        if self.stats != NO_STATS:
            metadata[STATS_METADATA_KEY] = self.stats
        return metadata

    @classmethod
    def from_metadata(cls, metadata) -> "BatchHeader":
        """Parse IPC custom metadata (a KeyValueMetadata or a dict of str/bytes)."""
        if metadata is None:
            raise CorruptMessageError("record batch has no ADS header metadata")
        get = _metadata_getter(metadata)
        try:
            return cls(
                base_offset=int(get("ads.base_offset")),
                record_count=int(get("ads.record_count")),
                leader_epoch=int(get("ads.leader_epoch")),
                max_timestamp_ms=int(get("ads.max_timestamp_ms")),
                timestamp_type=int(get("ads.timestamp_type")),
                producer_id=int(get("ads.producer_id")),
                producer_epoch=int(get("ads.producer_epoch")),
                base_sequence=int(get("ads.base_sequence")),
                crc=int(get("ads.crc")),
                row_count=int(_optional(get, "ads.row_count", ALL_ROWS)),
                delete_horizon_ms=int(_optional(get, "ads.delete_horizon_ms", NO_DELETE_HORIZON)),
                schema_id=int(_optional(get, "ads.schema_id", NO_SCHEMA_ID)),
                stats=str(_optional(get, STATS_METADATA_KEY, NO_STATS)),
            )
        except (KeyError, ValueError, TypeError) as exc:
            raise CorruptMessageError(f"malformed ADS batch header: {exc}") from exc


def _optional(get, key: str, default: int):
    try:
        return get(key)
    except KeyError:
        return default


def _metadata_getter(metadata):
    if isinstance(metadata, dict):
        normalized = {
            (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in metadata.items()
        }
        return normalized.__getitem__

    def get(key: str) -> str:
        value = metadata.get(key)
        if value is None:
            raise KeyError(key)
        return value.decode() if isinstance(value, bytes) else value

    return get


def batch_body(batch: pa.RecordBatch) -> pa.Buffer:
    """The Arrow IPC message body of ``batch``: its buffers as the format lays them out."""
    return pa.ipc.read_message(batch.serialize()).body


def compute_crc(batch: pa.RecordBatch, header: BatchHeader) -> int:
    crc = zlib.crc32(header._fields_without_crc())
    return zlib.crc32(batch_body(batch), crc)


def seal(batch: pa.RecordBatch, header: BatchHeader) -> BatchHeader:
    """The header with its CRC filled in for ``batch``."""
    return replace(header, crc=compute_crc(batch, header))


def message_crc(message: pa.Buffer, header: BatchHeader) -> int:
    """``compute_crc`` of the batch an encoded IPC message holds, read off the message's own body.

    The body of a batch's IPC message does not depend on its metadata, so this equals
    the CRC of the decoded batch; a follower that encodes a fetched batch for its
    segment checks it this way without serializing the batch a second time.
    """
    crc = zlib.crc32(header._fields_without_crc())
    return zlib.crc32(pa.ipc.read_message(message).body, crc)


def check_counts(num_rows: int, header: BatchHeader) -> None:
    """Raise CorruptMessageError unless a batch of ``num_rows`` rows fits its header's span and row count."""
    if (header.record_count <= 0 or not (header.row_count == ALL_ROWS or 1 <= header.row_count <= header.record_count)
            or (header.delete_horizon_ms != NO_DELETE_HORIZON and not header.cleaned)):
        raise CorruptMessageError(f"batch at offset {header.base_offset}: header span {header.record_count} "
                                  f"with row count {header.row_count} (delete horizon "
                                  f"{header.delete_horizon_ms}) is impossible")
    if num_rows != header.rows:
        raise CorruptMessageError(
            f"batch at offset {header.base_offset} has {num_rows} rows, header says {header.rows}"
        )


def check_sequence(header: BatchHeader, expected_base_offset: int, previous: BatchHeader | None) -> None:
    """A batch starts where the last one ended; later only when it is the first one (the reader's offset or
    a segment's base fell in a gap) or follows a cleaned batch (the cleaner marks every batch it writes, so a
    gap after an uncleaned batch is a missing batch, not compaction)."""
    gap_allowed = previous is None or previous.cleaned
    if header.base_offset < expected_base_offset or (header.base_offset > expected_base_offset
                                                       and not gap_allowed):
        raise CorruptMessageError(f"batch at {header.base_offset}, expected {expected_base_offset}")


def verify(batch: pa.RecordBatch, header: BatchHeader) -> None:
    """Raise CorruptMessageError unless the batch matches its header (row count, CRC)."""
    check_counts(batch.num_rows, header)
    actual = compute_crc(batch, header)
    if actual != header.crc:
        raise CorruptMessageError(
            f"CRC mismatch in batch at offset {header.base_offset}: stored {header.crc}, computed {actual}"
        )


def int64_column(values: np.ndarray, arrow_type: pa.DataType = pa.int64()) -> pa.Array:
    """An int64-backed column (int64, timestamp[ms]) over ``values``' own buffer. Not ``pa.array``: it
    imports pandas, even for an ndarray (0.1-0.3 s and ~40 MB, once per process: a broker's first
    append, a client's first batch without timestamps)."""
    values = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(arrow_type, len(values), [None, pa.py_buffer(values)])


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def conform_produce_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Check a producer's batch against PRODUCE_SCHEMA; cast compatible types, reject the rest.

    Accepts a batch with only ``value`` (and optionally key/headers/timestamp); fills
    missing optional columns with nulls and a missing timestamp with now.
    """
    if batch.num_rows == 0:
        raise InvalidRequestError("empty record batch: a produce request needs at least one record")
    if batch.schema.equals(PRODUCE_SCHEMA):  # what our producer sends: nothing to cast or fill
        if batch.column(0).null_count:
            raise InvalidRequestError("column 'timestamp' must not contain nulls")
        return batch
    names = set(batch.schema.names)
    unknown = names - set(PRODUCE_SCHEMA.names)
    if unknown:
        raise InvalidRequestError(
            f"unknown column(s) {sorted(unknown)} in produce batch; expected {PRODUCE_SCHEMA.names}"
        )
    if "value" not in names:
        raise InvalidRequestError("produce batch has no 'value' column")
    columns = []
    for field in PRODUCE_SCHEMA:
        if field.name in names:
            column = batch.column(field.name)
            if column.type != field.type:
                try:
                    column = column.cast(field.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise InvalidRequestError(
                        f"column '{field.name}' has type {column.type}, expected {field.type}"
                    ) from exc
        elif field.name == "timestamp":
            column = int64_column(np.full(batch.num_rows, now_ms(), dtype=np.int64), pa.timestamp("ms"))
        else:
            column = pa.nulls(batch.num_rows, field.type)
        if not field.nullable and column.null_count:
            raise InvalidRequestError(f"column '{field.name}' must not contain nulls")
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=PRODUCE_SCHEMA)


def batch_size_bytes(batch: pa.RecordBatch) -> int:
    return batch.nbytes
