"""Kafka record batches v2 <-> Arrow (ads_spark.kafka.record_batches and its C codec), checked against
independent implementations: kafka-python's pure-Python record builder and reader, and aiokafka's
compiled ones (which bring every compression codec), for every codec and both snappy framings.

Malformed input is built by hand around real batches (``frame`` gives a section a valid header and
CRC, so the damage reaches the compiled record walk instead of stopping at the CRC check).
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import aiokafka.codec as aiokafka_codec
import crc32c
import numpy as np
import pyarrow as pa
import pytest
from aiokafka.record.default_records import DefaultRecordBatch as AioBatch
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch as KpBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder

from ads_spark.errors import (
    CorruptMessageError,
    InvalidRecordError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
)
from ads_spark.kafka import record_batches as rb
from ads_spark.protocol.records import (
    RECORD_SCHEMA,
    TIMESTAMP_TYPE_LOG_APPEND_TIME,
    BatchHeader,
)
from tests.fixtures.fresh_interpreter import assert_leaves_pandas_unimported, run_python

REPO = Path(__file__).resolve().parents[2]
HEADER = struct.Struct(">qiibIhiqqqhii")
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
ERRORS = (CorruptMessageError, InvalidRecordError, RecordTooLargeError, UnsupportedCompressionTypeError)

# (offset delta, timestamp, key, value, headers): nulls, empties, a unicode header key, a null header
# value, timestamps going backwards (negative deltas), a large value; compressible so builders compress
RECORDS = [
    (0, 1_700_000_000_000, b"key-0", b"value-0" * 20, []),
    (1, 1_699_999_999_000, None, b"value-1" * 20, [("trace", b"abc"), ("h\u00e9ader", None)]),
    (2, 1_700_000_005_000, b"key-2", None, []),
    (3, 1_700_000_000_001, b"", b"", [("empty", b"")]),
    (4, 1_700_000_000_002, None, None, [("a", b"1"), ("b", b"2"), ("c", None)]),
    (5, 1_700_000_000_003, b"big", bytes(range(256)) * 400, []),
]


def build_kafka_python(records, compression=0, producer=(-1, -1, -1)):
    builder = KpBuilder(magic=2, compression_type=compression, is_transactional=0, producer_id=producer[0],
                        producer_epoch=producer[1], base_sequence=producer[2], batch_size=1 << 30)
    for offset, timestamp, key, value, headers in records:
        assert builder.append(offset, timestamp, key, value, headers) is not None
    return bytes(builder.build())


def build_aiokafka(records, compression=0, producer=(-1, -1, -1)):
    builder = AioBuilder(2, compression, False, producer[0], producer[1], producer[2], 1 << 30)
    for offset, timestamp, key, value, headers in records:
        assert builder.append(offset, timestamp, key, value, headers) is not None
    return bytes(builder.build())


def frame(section: bytes, record_count: int, *, attributes=0, last_offset_delta=None, base_timestamp=0,
          max_timestamp=0, magic=2, producer=(-1, -1, -1), base_offset=0) -> bytes:
    """A v2 batch around ``section`` with a correct length and CRC."""
    last = record_count - 1 if last_offset_delta is None else last_offset_delta
    batch = bytearray(HEADER.size) + section
    HEADER.pack_into(batch, 0, base_offset, len(batch) - 12, 0, magic, 0, attributes, last, base_timestamp,
                     max_timestamp, *producer, record_count)
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


def section_of(batch: bytes) -> bytes:
    return batch[HEADER.size:]


def rows_of(records: pa.RecordBatch):
    """(timestamp ms, key, value, headers as [(key, value)]) per row; null headers read as []."""
    timestamps = records.column("timestamp").cast(pa.int64()).to_pylist()
    headers = [[(h["key"], h["value"]) for h in entry or []] for entry in records.column("headers").to_pylist()]
    return list(zip(timestamps, records.column("key").to_pylist(), records.column("value").to_pylist(), headers))


def expected_rows(records):
    return [(timestamp, key, value, list(headers)) for _, timestamp, key, value, headers in records]


def decode(data, **options) -> rb.KafkaBatch:
    batch = rb.decode_batch(data, **options)
    batch.records.validate(full=True)  # the buffers the C codec wrote form valid Arrow arrays
    return batch


# ---- decoding what real clients' builders write ----

@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_decodes_kafka_python_batches(codec):
    data = build_kafka_python(RECORDS, CODECS[codec], producer=(42, 3, 17))
    batch = decode(data)
    assert batch.compression == CODECS[codec] and CODECS[codec] == data[22] & 7
    assert rows_of(batch.records) == expected_rows(RECORDS)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (42, 3, 17)
    assert (batch.record_count, batch.last_offset_delta) == (len(RECORDS), len(RECORDS) - 1)
    assert batch.base_timestamp == RECORDS[0][1]
    assert batch.max_timestamp == max(r[1] for r in RECORDS)
    assert not batch.is_transactional and not batch.is_control


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_decodes_aiokafka_batches_for_every_codec(codec):
    data = build_aiokafka(RECORDS, CODECS[codec])
    assert data[22] & 7 == CODECS[codec], "the builder fell back to no compression"
    if codec == "snappy":  # aiokafka writes Java's (xerial) framing
        assert section_of(data).startswith(b"\x82SNAPPY\x00")
    assert rows_of(decode(data).records) == expected_rows(RECORDS)


@pytest.mark.parametrize("framing", ["raw", "xerial"])
def test_decodes_both_snappy_framings(framing):
    plain = build_kafka_python(RECORDS)
    compressed = aiokafka_codec.snappy_encode(section_of(plain), xerial_compatible=framing == "xerial",
                                              xerial_blocksize=4096)  # several xerial chunks
    data = frame(bytes(compressed), len(RECORDS), attributes=CODECS["snappy"], base_timestamp=RECORDS[0][1])
    assert rows_of(decode(data).records) == expected_rows(RECORDS)


def test_decodes_concatenated_gzip_members():
    plain = section_of(build_kafka_python(RECORDS))
    half = len(plain) // 2
    data = frame(gzip.compress(plain[:half]) + gzip.compress(plain[half:]), len(RECORDS), attributes=1,
                 base_timestamp=RECORDS[0][1])
    assert rows_of(decode(data).records) == expected_rows(RECORDS)


def test_log_append_time_batches_read_every_timestamp_as_the_max():
    plain = section_of(build_kafka_python(RECORDS))
    data = frame(plain, len(RECORDS), attributes=0x08, base_timestamp=RECORDS[0][1], max_timestamp=123_456)
    batch = decode(data)
    assert batch.timestamp_type == TIMESTAMP_TYPE_LOG_APPEND_TIME
    assert set(batch.records.column("timestamp").cast(pa.int64()).to_pylist()) == {123_456}


def test_records_without_headers_decode_as_null_lists_like_ads_producers_write():
    batch = decode(build_kafka_python([(0, 1, b"k", b"v", []), (1, 2, b"k", b"v", [("h", b"x")])]))
    assert batch.records.column("headers").to_pylist() == [None, [{"key": "h", "value": b"x"}]]


# ---- encoding stored batches for fetches ----

def stored_batch(rows, offsets) -> pa.RecordBatch:
    headers = [[{"key": k, "value": v} for k, v in h] or None for _, _, _, h in rows]
    return pa.RecordBatch.from_arrays([
        pa.array(offsets, pa.int64()),
        pa.array([r[0] for r in rows], pa.timestamp("ms")),
        pa.array([r[1] for r in rows], pa.binary()),
        pa.array([r[2] for r in rows], pa.binary()),
        pa.array(headers, RECORD_SCHEMA.field("headers").type),
    ], schema=RECORD_SCHEMA)


def test_encoded_batch_is_byte_for_byte_what_kafka_python_writes_after_the_header():
    rows = expected_rows(RECORDS)
    header = BatchHeader(base_offset=500, record_count=len(rows), leader_epoch=7,
                         max_timestamp_ms=max(r[0] for r in rows), producer_id=42, producer_epoch=3, base_sequence=17)
    encoded = bytes(rb.encode_batch(stored_batch(rows, list(range(500, 500 + len(rows)))), header))
    reference = build_kafka_python(RECORDS, producer=(42, 3, 17))
    assert encoded[21:] == reference[21:]  # attributes .. records: everything the CRC covers
    assert encoded[8:12] == reference[8:12] and encoded[16:21] == reference[16:21]  # length, magic, CRC
    assert struct.unpack(">qxxxxi", encoded[:16]) == (500, 7)


@pytest.mark.parametrize("reader", [KpBatch, AioBatch], ids=["kafka-python", "aiokafka"])
def test_cleaned_batches_keep_their_offset_gaps_and_span(reader):
    rows = expected_rows(RECORDS)[:4]
    offsets = [1000, 1002, 1003, 1009]
    header = BatchHeader(base_offset=1000, record_count=12, leader_epoch=4, max_timestamp_ms=0, producer_id=9,
                         producer_epoch=1, base_sequence=100, row_count=4)
    batch = reader(bytes(rb.encode_batch(stored_batch(rows, offsets), header)))
    assert batch.validate_crc()
    read = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    assert read == [(o, *row) for o, row in zip(offsets, rows)]
    assert (batch.base_offset, batch.last_offset_delta, batch.next_offset) == (1000, 11, 1012)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (9, 1, 100)
    assert batch.max_timestamp == max(r[0] for r in rows)


def test_encode_then_decode_round_trips_a_sliced_batch():
    rows = expected_rows(RECORDS)
    whole = stored_batch(rows, list(range(10, 10 + len(rows))))
    part = whole.slice(1, 4)  # every column at an array offset of 1
    header = BatchHeader(base_offset=11, record_count=4, leader_epoch=0, max_timestamp_ms=0)
    batch = decode(rb.encode_batch(part, header))
    assert rows_of(batch.records) == rows[1:5]
    assert batch.base_offset == 11


def test_encode_marks_log_append_time_and_uses_the_header_max_timestamp():
    rows = expected_rows(RECORDS)[:2]
    header = BatchHeader(base_offset=0, record_count=2, leader_epoch=0, max_timestamp_ms=99,
                         timestamp_type=TIMESTAMP_TYPE_LOG_APPEND_TIME)
    batch = KpBatch(bytes(rb.encode_batch(stored_batch(rows, [0, 1]), header)))
    assert batch.timestamp_type == 1 and batch.max_timestamp == 99


def test_encodes_all_null_columns_as_ads_producers_store_them_after_an_ipc_round_trip():
    header_type = RECORD_SCHEMA.field("headers").type
    stored = pa.RecordBatch.from_arrays([pa.array([0, 1, 2], pa.int64()), pa.array([5, 6, 7], pa.timestamp("ms")),
                                         pa.nulls(3, pa.binary()), pa.nulls(3, pa.binary()), pa.nulls(3, header_type)],
                                        schema=RECORD_SCHEMA)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, RECORD_SCHEMA) as writer:
        writer.write_batch(stored)
    read_back = pa.ipc.open_stream(sink.getvalue()).read_next_batch()  # buffers as a segment read gives them
    header = BatchHeader(base_offset=0, record_count=3, leader_epoch=0, max_timestamp_ms=7)
    batch = KpBatch(bytes(rb.encode_batch(read_back, header)))
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch] == [
        (0, 5, None, None, []), (1, 6, None, None, []), (2, 7, None, None, [])]


@pytest.mark.parametrize("offsets, span", [([5, 5], 3), ([5, 4], 3), ([5, 9], 3), ([4, 5], 3)])
def test_encode_refuses_rows_that_do_not_fit_their_header(offsets, span):
    header = BatchHeader(base_offset=5, record_count=span, leader_epoch=0, max_timestamp_ms=0, row_count=2)
    with pytest.raises(CorruptMessageError):
        rb.encode_batch(stored_batch(expected_rows(RECORDS)[:2], offsets), header)


keys = st.one_of(st.none(), st.binary(max_size=40))
header_lists = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=8))), max_size=3)
rows_strategy = st.lists(st.tuples(st.integers(-(2 ** 40), 2 ** 42), keys, keys, header_lists), min_size=1,
                         max_size=30)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=rows_strategy, gaps=st.lists(st.integers(1, 1000), min_size=30, max_size=30))
def test_property_encode_and_decode_agree_with_kafka_python(rows, gaps):
    offsets = list(np.cumsum([0, *gaps[:len(rows) - 1]]) + 77)
    rows = [(t, k, v, list(h)) for t, k, v, h in rows]
    header = BatchHeader(base_offset=77, record_count=offsets[-1] - 77 + 1, leader_epoch=1, max_timestamp_ms=0,
                         row_count=len(rows))
    encoded = bytes(rb.encode_batch(stored_batch(rows, [int(o) for o in offsets]), header))
    read = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in KpBatch(encoded)]
    assert read == [(int(o), *row) for o, row in zip(offsets, rows)]
    assert rows_of(decode(encoded, consecutive_offsets=False).records) == rows
    built = build_kafka_python([(i, *row) for i, row in enumerate(rows)])  # and what a client writes
    assert rows_of(decode(built).records) == rows


# ---- splitting a partition's records ----

def test_split_batches_yields_each_batch_and_refuses_a_partial_one():
    one, two = build_kafka_python(RECORDS[:2]), build_aiokafka(RECORDS[2:])
    views = rb.split_batches(one + two)
    assert [bytes(v) for v in views] == [one, two]
    assert rb.split_batches(b"") == []
    for broken in (one + two[:-1], one + two[:11], struct.pack(">qi", 0, 10) + b"\0" * 10):
        with pytest.raises(CorruptMessageError):
            rb.split_batches(broken)


# ---- malformed and hostile batches ----

SMALL = [(0, 10, b"k", b"v", [("h", b"x")]), (1, 5, None, b"vv", [])]


def test_a_batch_truncated_at_any_byte_is_corrupt():
    data = build_kafka_python(SMALL)
    for cut in range(len(data)):
        with pytest.raises(CorruptMessageError):
            rb.decode_batch(data[:cut])


def test_a_records_section_truncated_at_any_byte_is_corrupt_even_with_a_valid_crc():
    section = section_of(build_kafka_python(SMALL))
    for cut in range(len(section)):
        with pytest.raises(CorruptMessageError):
            rb.decode_batch(frame(section[:cut], len(SMALL)))


def test_a_flipped_bit_anywhere_the_crc_covers_is_corrupt():
    data = bytearray(build_kafka_python(SMALL))
    for position in range(17, len(data)):
        data[position] ^= 0x10
        with pytest.raises(CorruptMessageError, match="CRC"):
            rb.decode_batch(bytes(data))
        data[position] ^= 0x10


@pytest.mark.parametrize("count, error", [(3, CorruptMessageError), (1, CorruptMessageError),
                                          (0, InvalidRecordError), (-1, InvalidRecordError),
                                          (2 ** 31 - 1, CorruptMessageError)])
def test_a_record_count_that_does_not_match_the_records_is_refused(count, error):
    section = section_of(build_kafka_python(SMALL))
    with pytest.raises(error):
        rb.decode_batch(frame(section, count, last_offset_delta=max(count - 1, 0)))


def varint(value: int) -> bytes:
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def record(body: bytes, length: int | None = None) -> bytes:
    return varint(len(body) if length is None else length) + body


GOOD_BODY = b"\0" + varint(0) + varint(0) + varint(1) + b"k" + varint(1) + b"v" + varint(0)


@pytest.mark.parametrize("section, message", [
    (record(GOOD_BODY, 2 ** 30), "length"),
    (record(b"\0" + varint(0) + varint(0) + varint(2 ** 30) + b"k" + varint(-1) + varint(0)), "key length"),
    (record(b"\0" + varint(0) + varint(0) + varint(-2) + varint(-1) + varint(0)), "key length -2"),
    (record(b"\0" + varint(0) + varint(0) + varint(-1) + varint(2 ** 31 - 1) + varint(0)), "value length"),
    (record(b"\0" + varint(0) + varint(0) + varint(-1) + varint(-1) + varint(2 ** 31 - 1)), "header count"),
    (record(b"\0" + varint(0) + varint(0) + varint(-1) + varint(-1) + varint(-1)), "header count"),
    (record(b"\0" + varint(0) + varint(0) + varint(-1) + varint(-1) + varint(1) + varint(-1) + varint(0)),
     "header key length"),
    (record(b"\0" + varint(0) + varint(0) + varint(-1) + varint(-1) + varint(1) + varint(2) + b"\xc3\x28"
            + varint(-1)), "UTF-8"),
    (record(b"\0" + b"\xff" * 10 + b"\x01" + varint(0) + varint(-1) + varint(-1) + varint(0)), "timestamp"),
    (record(b"\0" + varint(0) + b"\xff\xff\xff\xff\x7f" + varint(-1) + varint(-1) + varint(0)), "offset delta"),
    (record(GOOD_BODY + b"extra"), "left over"),
    (record(GOOD_BODY) + b"\0" * 7, "left over"),
])
def test_malformed_records_are_corrupt_naming_the_problem(section, message):
    with pytest.raises(CorruptMessageError, match=message):
        rb.decode_batch(frame(section, 1))


def test_record_offsets_must_be_a_producers_0_to_n_minus_1():
    body = b"\0" + varint(0) + varint(5) + varint(-1) + varint(-1) + varint(0)
    with pytest.raises(InvalidRecordError, match="offset deltas"):
        rb.decode_batch(frame(record(body), 1))
    with pytest.raises(InvalidRecordError):
        rb.decode_batch(frame(section_of(build_kafka_python(SMALL)), 2, last_offset_delta=5))


@pytest.mark.parametrize("attributes, magic, error", [
    (0x20, 2, InvalidRecordError), (0x10, 2, InvalidRecordError), (5, 2, UnsupportedCompressionTypeError),
    (7, 2, UnsupportedCompressionTypeError), (0, 1, InvalidRecordError), (0, 0, InvalidRecordError),
])
def test_batches_ads_does_not_take_are_refused_with_kafkas_codes(attributes, magic, error):
    data = frame(section_of(build_kafka_python(SMALL)), 2, attributes=attributes, magic=magic)
    with pytest.raises(error):
        rb.decode_batch(data)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_garbage_compressed_data_is_corrupt(codec):
    with pytest.raises(CorruptMessageError):
        rb.decode_batch(frame(b"\x82SNAPPY\x00" + b"\x00\x00\x00\x01" * 2 + b"\x00\x00\x00\x09garbage!!",
                              1, attributes=CODECS[codec]))
    with pytest.raises(CorruptMessageError):
        rb.decode_batch(frame(b"definitely not compressed data", 1, attributes=CODECS[codec]))


@pytest.mark.parametrize("codec", ["gzip", "snappy-raw", "snappy-xerial", "lz4", "zstd"])
def test_a_zip_bomb_is_refused_before_it_is_inflated(codec):
    bomb_size, limit = 16 << 20, 1 << 20
    body = b"\0" + varint(0) + varint(0) + varint(-1) + varint(bomb_size) + b"\0" * bomb_size + varint(0)
    plain = record(body)
    compressed = {
        "gzip": lambda: aiokafka_codec.gzip_encode(plain),
        "snappy-raw": lambda: aiokafka_codec.snappy_encode(plain, xerial_compatible=False),
        "snappy-xerial": lambda: aiokafka_codec.snappy_encode(plain, xerial_blocksize=1 << 20),
        "lz4": lambda: aiokafka_codec.lz4_encode(plain),
        "zstd": lambda: aiokafka_codec.zstd_encode(plain),
    }[codec]()
    assert len(compressed) < bomb_size // 16  # snappy's best ratio is ~21:1, the others' far higher
    data = frame(bytes(compressed), 1, attributes=CODECS[codec.split("-")[0]])
    with pytest.raises(RecordTooLargeError):
        rb.decode_batch(data, max_uncompressed_bytes=limit)
    assert rb.decode_batch(data, max_uncompressed_bytes=bomb_size + 64).records.column("value")[0].as_py() \
        == b"\0" * bomb_size


@settings(max_examples=300, deadline=None)
@given(junk=st.binary(max_size=120), count=st.integers(-2, 40), codec=st.sampled_from([0, 0, 0, 1, 2, 3, 4]))
def test_property_arbitrary_sections_are_refused_or_decoded_never_anything_else(junk, count, codec):
    try:
        batch = rb.decode_batch(frame(junk, count, attributes=codec), max_uncompressed_bytes=1 << 16)
    except ERRORS:
        return
    batch.records.validate(full=True)
    assert batch.records.num_rows == count


BOMB_SCRIPT = """
import resource, struct, crc32c, cramjam
from ads_spark.errors import RecordTooLargeError
from ads_spark.kafka import record_batches as rb
compressor, zeros = cramjam.zstd.Compressor(), bytes(1 << 20)
for _ in range(1024):  # 1 GiB of zeros, streamed: this process never holds it
    compressor.compress(zeros)
section = bytes(compressor.finish())
header = struct.Struct(">qiibIhiqqqhii")
batch = bytearray(header.size) + section
header.pack_into(batch, 0, 0, len(batch) - 12, 0, 2, 0, 4, 0, 0, 0, -1, -1, -1, 1)
struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    rb.decode_batch(bytes(batch), max_uncompressed_bytes=16 << 20)
except RecordTooLargeError:
    print(len(section), (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""


def test_a_one_gib_zstd_bomb_costs_no_more_memory_than_the_limit():
    result = run_python(["-c", BOMB_SCRIPT], cwd=str(REPO), timeout_s=60)
    assert result.returncode == 0, result.stderr[-2000:]
    compressed_bytes, growth_mib = map(int, result.stdout.split())
    assert compressed_bytes < 64 << 10
    assert growth_mib < 40, f"decoding a refused 1 GiB bomb grew the process by {growth_mib} MiB"


def test_decoding_and_encoding_leave_pandas_unimported():
    assert_leaves_pandas_unimported(f"""
import pyarrow as pa
from ads_spark.kafka import record_batches as rb
from ads_spark.protocol.records import BatchHeader, RECORD_SCHEMA, int64_column
batch = rb.decode_batch({build_kafka_python(SMALL)!r})
stored = pa.RecordBatch.from_arrays([int64_column([3, 4]), *batch.records.columns], schema=RECORD_SCHEMA)
rb.encode_batch(stored, BatchHeader(base_offset=3, record_count=2, leader_epoch=0, max_timestamp_ms=0))
""")
