"""Kafka record batches (magic v2) to and from ADS's Arrow batches: one Kafka batch is one ADS batch.

A Produce request carries a client's records as v2 batches; a Fetch response must carry stored batches
the same way. This module owns that conversion and nothing else: the 61-byte batch header, its CRC-32C,
the compression codecs Kafka's clients use (gzip, snappy in both framings, lz4 frame, zstd), and the
checks that make a malformed or hostile batch a typed error before anything is stored or allocated.

The records inside a batch are varint-framed, so they can only be walked one by one; that walk is the
compiled ``_record_codec`` (C), which reads and writes the Arrow arrays' buffers directly. Python here
only touches the batch as a whole, never a record (a Python loop over records costs about half of a
broker's produce throughput: docs/perf/kafka-codec.md).

Errors (Kafka's codes, ads_spark.errors): CorruptMessageError for bytes that do not parse or whose CRC
is wrong; InvalidRecordError for a well-formed batch ADS refuses (magic other than 2, as Kafka answers
a Produce v3+; control and transactional batches, since ADS has no transactions; offsets that are not
a producer's 0..n-1); UnsupportedCompressionTypeError for an unknown codec id; RecordTooLargeError for
a batch that decompresses to more than ``max_uncompressed_bytes`` (refused while decompressing, with
memory bounded by that limit, so a zip bomb costs nothing).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import cramjam
import crc32c
import numpy as np
import pyarrow as pa

from ads_spark.errors import (
    CorruptMessageError,
    InvalidRecordError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
)
try:
    from ads_spark.kafka import _record_codec
except ImportError as exc:  # a source tree never installed: say how to build it rather than fall back slowly
    raise ImportError("the compiled Kafka record codec ads_spark.kafka._record_codec is not built: run "
                      "`make install` (or `pip install -e .`), which compiles ads_spark/kafka/_record_codec.c") from exc
from ads_spark.protocol.records import (
    HEADER_TYPE,
    PRODUCE_SCHEMA,
    TIMESTAMP_TYPE_CREATE_TIME,
    TIMESTAMP_TYPE_LOG_APPEND_TIME,
    BatchHeader,
    check_counts,
    int64_column,
)

__all__ = ["KafkaBatch", "split_batches", "decode_batch", "encode_batch", "DEFAULT_MAX_UNCOMPRESSED_BYTES",
           "BATCH_OVERHEAD_BYTES", "COMPRESSION_NONE", "COMPRESSION_GZIP", "COMPRESSION_SNAPPY",
           "COMPRESSION_LZ4", "COMPRESSION_ZSTD"]

COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD = range(5)
COMPRESSION_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")
DEFAULT_MAX_UNCOMPRESSED_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes default

# baseOffset q, batchLength i, partitionLeaderEpoch i, magic b, crc I, attributes h, lastOffsetDelta i,
# baseTimestamp q, maxTimestamp q, producerId q, producerEpoch h, baseSequence i, recordCount i
_HEADER = struct.Struct(">qiibIhiqqqhii")
BATCH_OVERHEAD_BYTES = _HEADER.size  # 61
_LOG_OVERHEAD_BYTES = 12  # baseOffset + batchLength: batchLength counts the bytes after them
_CRC_AT = 17  # the CRC covers attributes .. the end (so a broker may restamp offset and epoch)
_CRC_FROM = 21
_MAGIC_AT = 16

_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08
_TRANSACTIONAL_BIT = 0x10
_CONTROL_BIT = 0x20

# Java's snappy-java (xerial) stream framing: magic, version, compatible version, then chunks of
# (4-byte big-endian length, raw snappy block). librdkafka writes raw snappy; both are read.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_BYTES = 16
_CHUNK_LENGTH = struct.Struct(">i")
# gzip / lz4 / zstd decompress into a buffer of this many times the input first (most real ratios are lower),
# growing by this factor while it overflows, up to the limit.
_FIRST_RATIO = 8
_OVERFLOW = "failed to write whole buffer"  # cramjam's message when the output buffer is full

# Arrow types of the decoded columns, built once
_TIMESTAMP_TYPE = PRODUCE_SCHEMA.field("timestamp").type
_STRUCT_TYPE = HEADER_TYPE.value_type


@dataclass(frozen=True, slots=True)
class KafkaBatch:
    """One decoded v2 batch: its header fields as sent, and its records in PRODUCE_SCHEMA."""

    base_offset: int
    partition_leader_epoch: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    compression: int
    timestamp_type: int  # TIMESTAMP_TYPE_CREATE_TIME or TIMESTAMP_TYPE_LOG_APPEND_TIME
    is_transactional: bool
    is_control: bool
    records: pa.RecordBatch


def split_batches(records) -> list[memoryview]:
    """The v2 batches in a partition's ``records`` bytes, as zero-copy views; a partial batch is corrupt."""
    view = memoryview(records).cast("B")
    batches, position, size = [], 0, len(view)
    while position < size:
        if size - position < _LOG_OVERHEAD_BYTES:
            raise CorruptMessageError(f"{size - position} bytes at {position} are too few for a record batch")
        (batch_length,) = _CHUNK_LENGTH.unpack_from(view, position + 8)
        if batch_length < BATCH_OVERHEAD_BYTES - _LOG_OVERHEAD_BYTES:
            raise CorruptMessageError(f"record batch at byte {position} claims {batch_length} bytes, "
                                      f"fewer than a batch header")
        end = position + _LOG_OVERHEAD_BYTES + batch_length
        if end > size:
            raise CorruptMessageError(f"record batch at byte {position} claims {batch_length} bytes, "
                                      f"only {size - position - _LOG_OVERHEAD_BYTES} follow")
        batches.append(view[position:end])
        position = end
    return batches


def decode_batch(data, max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES, *,
                 consecutive_offsets: bool = True) -> KafkaBatch:
    """One v2 batch -> KafkaBatch, checked end to end (module docstring: which error for what).

    ``consecutive_offsets`` (a producer's batch) requires offset deltas 0..count-1; without it, strictly
    increasing deltas up to lastOffsetDelta are accepted (a cleaned batch, as encode_batch writes one)."""
    view = memoryview(data).cast("B")
    if len(view) < BATCH_OVERHEAD_BYTES:
        raise CorruptMessageError(f"record batch of {len(view)} bytes is shorter than its "
                                  f"{BATCH_OVERHEAD_BYTES}-byte header")
    if view[_MAGIC_AT] != 2:
        raise InvalidRecordError(f"record batch magic {view[_MAGIC_AT]}: only magic 2 (Kafka 0.11+ record "
                                 f"batches) is accepted")
    (base_offset, batch_length, leader_epoch, _magic, crc, attributes, last_offset_delta, base_timestamp,
     max_timestamp, producer_id, producer_epoch, base_sequence, record_count) = _HEADER.unpack_from(view)
    if batch_length != len(view) - _LOG_OVERHEAD_BYTES:
        raise CorruptMessageError(f"record batch length {batch_length} does not match its "
                                  f"{len(view) - _LOG_OVERHEAD_BYTES} bytes")
    actual_crc = crc32c.crc32c(view[_CRC_FROM:])
    if actual_crc != crc:
        raise CorruptMessageError(f"record batch at offset {base_offset}: CRC-32C {actual_crc:#010x} "
                                  f"computed, {crc:#010x} stored")
    _check_attributes(attributes, base_offset)
    if record_count < 1 or (consecutive_offsets and last_offset_delta != record_count - 1) or (
            last_offset_delta < record_count - 1):
        raise InvalidRecordError(f"record batch at offset {base_offset}: {record_count} records with last "
                                 f"offset delta {last_offset_delta}")
    section = _decompress(attributes & _COMPRESSION_MASK, view[BATCH_OVERHEAD_BYTES:], max_uncompressed_bytes)
    timestamp_type = (TIMESTAMP_TYPE_LOG_APPEND_TIME if attributes & _TIMESTAMP_TYPE_BIT
                      else TIMESTAMP_TYPE_CREATE_TIME)
    records = _decode_records(section, record_count, base_timestamp, base_offset, last_offset_delta,
                              consecutive_offsets)
    if timestamp_type == TIMESTAMP_TYPE_LOG_APPEND_TIME:  # Kafka's reading rule: every record has the max
        records = records.set_column(0, "timestamp", int64_column(np.full(record_count, max_timestamp),
                                                                  _TIMESTAMP_TYPE))
    return KafkaBatch(base_offset, leader_epoch, attributes, last_offset_delta, base_timestamp, max_timestamp,
                      producer_id, producer_epoch, base_sequence, record_count, attributes & _COMPRESSION_MASK,
                      timestamp_type, False, False, records)


def _check_attributes(attributes: int, base_offset: int) -> None:
    if attributes & _CONTROL_BIT:
        raise InvalidRecordError(f"record batch at offset {base_offset} is a control batch: ADS has no "
                                 f"transactions")
    if attributes & _TRANSACTIONAL_BIT:
        raise InvalidRecordError(f"record batch at offset {base_offset} is transactional: ADS has no "
                                 f"transactions (idempotent producers need no transactional.id)")
    if (attributes & _COMPRESSION_MASK) > COMPRESSION_ZSTD:
        raise UnsupportedCompressionTypeError(f"record batch at offset {base_offset}: compression type "
                                              f"{attributes & _COMPRESSION_MASK} is not one of Kafka's")


def _decode_records(section, count: int, base_timestamp: int, base_offset: int, last_offset_delta: int,
                    consecutive_offsets: bool) -> pa.RecordBatch:
    try:
        (timestamps, offset_deltas, offsets_kind, key_offsets, key_data, key_validity, key_nulls, value_offsets,
         value_data, value_validity, value_nulls, list_offsets, list_validity, list_nulls, header_key_offsets,
         header_key_data, header_value_offsets, header_value_data, header_value_validity, header_value_nulls,
         header_count) = _record_codec.decode_records(section, count, base_timestamp)
    except ValueError as exc:
        raise CorruptMessageError(f"record batch at offset {base_offset}: {exc}") from None
    if offsets_kind != 2 and (consecutive_offsets or offsets_kind == 0 or
                              np.frombuffer(offset_deltas, np.int32)[-1] > last_offset_delta):
        raise InvalidRecordError(f"record batch at offset {base_offset}: record offset deltas are not "
                                 f"{'0..' + str(count - 1) if consecutive_offsets else 'increasing'}")
    py_buffer = pa.py_buffer
    header_structs = pa.Array.from_buffers(_STRUCT_TYPE, header_count, [None], null_count=0, children=[
        pa.Array.from_buffers(pa.string(), header_count, [None, py_buffer(header_key_offsets),
                                                          py_buffer(header_key_data)], null_count=0),
        _binary(header_count, header_value_validity, header_value_offsets, header_value_data, header_value_nulls)])
    columns = [
        pa.Array.from_buffers(_TIMESTAMP_TYPE, count, [None, py_buffer(timestamps)], null_count=0),
        _binary(count, key_validity, key_offsets, key_data, key_nulls),
        _binary(count, value_validity, value_offsets, value_data, value_nulls),
        pa.Array.from_buffers(HEADER_TYPE, count, [_optional(list_validity), py_buffer(list_offsets)],
                              null_count=list_nulls, children=[header_structs]),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=PRODUCE_SCHEMA)


def _optional(data):
    return None if data is None else pa.py_buffer(data)


def _binary(count, validity, offsets, data, nulls) -> pa.Array:
    return pa.Array.from_buffers(pa.binary(), count, [_optional(validity), pa.py_buffer(offsets),
                                                      pa.py_buffer(data)], null_count=nulls)


# ---- compression ----

def _decompress(compression: int, data: memoryview, limit: int):
    """The records section of a batch compressed with ``compression``, never more than ``limit`` bytes."""
    if compression == COMPRESSION_NONE:
        return data
    try:
        if compression == COMPRESSION_SNAPPY:
            if data[:len(_XERIAL_MAGIC)] == _XERIAL_MAGIC:
                return _unsnappy_xerial(data, limit)
            return _unsnappy_raw(data, limit)
        return _decompress_bounded(compression, data, limit)
    except (cramjam.DecompressionError, ValueError) as exc:
        raise CorruptMessageError(f"{COMPRESSION_NAMES[compression]}-compressed records do not decompress: "
                                  f"{exc}") from None


def _too_large(compression: str, limit: int) -> RecordTooLargeError:
    return RecordTooLargeError(f"{compression}-compressed records decompress to more than {limit} bytes")


def _unsnappy_raw(data, limit: int):
    if cramjam.snappy.decompress_raw_len(data) > limit:
        raise _too_large("snappy", limit)
    return cramjam.snappy.decompress_raw(data)


def _unsnappy_xerial(data: memoryview, limit: int) -> bytes:
    position, size, parts, total = _XERIAL_HEADER_BYTES, len(data), [], 0
    while position < size:  # one chunk per round (32 KiB of records each in snappy-java's default)
        if size - position < _CHUNK_LENGTH.size:
            raise CorruptMessageError("xerial-framed snappy records end inside a chunk length")
        (length,) = _CHUNK_LENGTH.unpack_from(data, position)
        position += _CHUNK_LENGTH.size
        if length < 0 or length > size - position:
            raise CorruptMessageError(f"xerial snappy chunk of {length} bytes at {position} runs past the end")
        chunk = data[position:position + length]
        position += length
        total += cramjam.snappy.decompress_raw_len(chunk)
        if total > limit:
            raise _too_large("snappy", limit)
        parts.append(bytes(cramjam.snappy.decompress_raw(chunk)))
    return b"".join(parts)


def _decompress_bounded(compression: int, data: memoryview, limit: int):
    """gzip (any number of members), lz4 frame or zstd into a fixed buffer: cramjam streams into it and
    fails when it is full, so memory stays within the limit whatever the data claims. The buffer starts at
    _FIRST_RATIO times the input and grows by that factor up to the limit: a batch that compresses better
    is inflated again, at most ~1/7 more work in all."""
    name = COMPRESSION_NAMES[compression]
    module = getattr(cramjam, name)
    capacity = min(limit, _FIRST_RATIO * len(data) + 65536)
    while True:
        output = np.empty(capacity + 1, dtype=np.uint8)  # one byte more: filling it means "over the bound"
        try:
            size = module.decompress_into(data, output)
        except cramjam.DecompressionError as exc:
            if _OVERFLOW not in str(exc):
                raise
            size = capacity + 1
        if size <= capacity:
            return output[:size]
        if capacity >= limit:
            raise _too_large(name, limit)
        capacity = min(limit, capacity * _FIRST_RATIO)


# ---- encode ----

def encode_batch(records: pa.RecordBatch, header: BatchHeader) -> bytearray:
    """A stored batch (RECORD_SCHEMA) and its header -> one uncompressed v2 batch, CRC-32C computed.

    Offsets are written as deltas from ``header.base_offset`` so the gaps of a cleaned batch stay; the
    last offset delta is the header's span, so a client's next fetch offset is the batch's end."""
    count = records.num_rows
    check_counts(count, header)
    offsets, timestamps = records.column(0), records.column(1)
    headers = records.column(4)
    if headers.null_count == count:
        list_part = header_key = header_value = (None, None, None, 0)
    else:
        structs = headers.values
        header_key = _column_part(structs.field(0))
        header_value = _column_part(structs.field(1))
        list_part = (_validity(headers), headers.buffers()[1], None, headers.offset)
    try:
        output, base_timestamp, max_timestamp, last_delta = _record_codec.encode_records(
            count, header.base_offset, offsets.buffers()[1], offsets.offset, timestamps.buffers()[1],
            timestamps.offset, _column_part(records.column(2)), _column_part(records.column(3)), list_part,
            header_key, header_value, BATCH_OVERHEAD_BYTES)
    except ValueError as exc:
        raise CorruptMessageError(f"batch at offset {header.base_offset} cannot be encoded: {exc}") from None
    if last_delta >= header.record_count:
        raise CorruptMessageError(f"batch at offset {header.base_offset}: offset delta {last_delta} is "
                                  f"outside its span of {header.record_count}")
    attributes = 0
    if header.timestamp_type == TIMESTAMP_TYPE_LOG_APPEND_TIME:
        attributes |= _TIMESTAMP_TYPE_BIT
        max_timestamp = header.max_timestamp_ms
    _HEADER.pack_into(output, 0, header.base_offset, len(output) - _LOG_OVERHEAD_BYTES, header.leader_epoch, 2,
                      0, attributes, header.record_count - 1, base_timestamp, max_timestamp, header.producer_id,
                      header.producer_epoch, header.base_sequence, count)
    struct.pack_into(">I", output, _CRC_AT, crc32c.crc32c(memoryview(output)[_CRC_FROM:]))
    return output


def _validity(array: pa.Array):
    return array.buffers()[0] if array.null_count else None


def _column_part(array: pa.Array) -> tuple:
    """(validity|None, offsets, data, array offset) of a binary or string array, as encode_records reads them."""
    buffers = array.buffers()
    return (_validity(array), buffers[1], buffers[2], array.offset)
