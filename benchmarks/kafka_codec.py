"""What converting Kafka record batches v2 to and from Arrow costs (issue #25), one process run.

    python -m benchmarks.kafka_codec --out benchmarks/results [--records 1000] [--value-bytes 1024] [--runs 7]

One batch of ``--records`` records (``--value-bytes`` JSON events, ``event_json``; 10-byte keys; no headers, plus a ``none+headers`` case with two headers per record),
built by aiokafka's builder once per compression (none, gzip, snappy in Java's xerial framing and in
librdkafka's raw framing, lz4, zstd). Per case, microseconds per record, the best of ``--runs`` timed
loops (about 0.2 s each):

* ``ads decode``: ``record_batches.decode_batch`` -> a PRODUCE_SCHEMA Arrow batch (CRC, decompression,
  the compiled record walk, the Arrow arrays): what a broker does per Produce batch.
* ``ads encode``: ``record_batches.encode_batch`` of the stored (RECORD_SCHEMA) batch -> an uncompressed
  v2 batch with its CRC: what a broker does per fetched batch (ADS serves batches uncompressed).
* ``kafka-python``: its pure-Python codec on the same batch (reading every record's fields; building the
  batch record by record), the ratio baseline: the cost of a Python loop over records. Its decoder needs
  python-snappy / lz4 / zstandard for those codecs, which are not installed: ``n/a`` there.
* ``aiokafka``: its compiled (Cython) codec to Python objects, no Arrow: a compiled reference.

Writes DIR/kafka_codec.json and DIR/kafka_codec.md (the table docs/perf/kafka-codec.md quotes).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import struct
import time
from pathlib import Path

import aiokafka.codec as aiokafka_codec
import crc32c
import pyarrow as pa
from aiokafka.record.default_records import DefaultRecordBatch as AioBatch
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from kafka.record.default_records import DefaultRecordBatch as KpBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder

from ads_spark.kafka import record_batches
from ads_spark.protocol.records import RECORD_SCHEMA, BatchHeader, int64_column

CASES = {"none": 0, "none+headers": 0, "gzip": 1, "snappy-xerial": 2, "snappy-raw": 2, "lz4": 3, "zstd": 4}
TARGET_LOOP_S = 0.2  # each timed loop runs about this long


def make_records(count: int, value_bytes: int, headers: bool) -> list[tuple]:
    base_ms = 1_700_000_000_000
    return [(i, base_ms + i, b"key-%06d" % i, event_json(i, value_bytes),
             [("trace-id", b"%016d" % i), ("source", b"bench")] if headers else []) for i in range(count)]


def event_json(index: int, size: int) -> bytes:
    """A JSON event of ``size`` bytes: repeated field names, random ids and a random hex payload, which
    compresses about 2:1 with gzip or zstd and less with lz4 and snappy, as application events do."""
    head = json.dumps({"event": "page_view", "user_id": os.urandom(4).hex(), "session": os.urandom(8).hex(),
                       "url": f"https://shop.example/products/{index % 500}", "payload": ""})[:-2]
    payload = os.urandom(size).hex()[:max(0, size - len(head) - 2)]
    return (head + payload + '"}').encode()


def build(records: list[tuple], case: str) -> bytes:
    compression = CASES[case]
    builder = AioBuilder(2, compression, False, -1, -1, -1, 1 << 30)
    for offset, timestamp, key, value, headers in records:
        builder.append(offset, timestamp, key, value, headers)
    data = bytes(builder.build())
    if case == "snappy-raw":  # librdkafka's framing: rebuild the uncompressed batch, compress it raw
        plain = build(records, "none")
        return reframe(plain, bytes(aiokafka_codec.snappy_encode(plain[61:], xerial_compatible=False)), 2)
    assert data[22] & 7 == compression, f"{case}: the builder did not compress"
    return data


def reframe(plain: bytes, section: bytes, compression: int) -> bytes:
    """``plain``'s header around another records section, its length, attributes and CRC made to fit."""
    batch = bytearray(plain[:61]) + section
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">h", batch, 21, compression)
    struct.pack_into(">I", batch, 17, crc32c.crc32c(memoryview(batch)[21:]))
    return bytes(batch)


def per_record_us(function, count: int, runs: int) -> float:
    function()
    start = time.perf_counter()
    function()
    reps = max(1, int(TARGET_LOOP_S / max(time.perf_counter() - start, 1e-6)))
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(reps):
            function()
        samples.append((time.perf_counter() - start) / reps / count * 1e6)
    return min(samples)  # the machine is shared: contention only ever adds time


def kafka_python_decode(data: bytes):
    for record in KpBatch(data):
        (record.offset, record.timestamp, record.key, record.value, record.headers)


def aiokafka_decode(data: bytes):
    for record in AioBatch(data):
        (record.offset, record.timestamp, record.key, record.value, record.headers)


def kafka_python_encode(records: list[tuple]):
    builder = KpBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1, producer_epoch=-1,
                        base_sequence=-1, batch_size=1 << 30)
    for offset, timestamp, key, value, headers in records:
        builder.append(offset, timestamp, key, value, headers)
    return builder.build()


def aiokafka_encode(records: list[tuple]):
    builder = AioBuilder(2, 0, False, -1, -1, -1, 1 << 30)
    for offset, timestamp, key, value, headers in records:
        builder.append(offset, timestamp, key, value, headers)
    return builder.build()


def measure(case: str, count: int, value_bytes: int, runs: int) -> dict:
    records = make_records(count, value_bytes, headers=case.endswith("headers"))
    data = build(records, case)
    kafka_python_ok = CASES[case] in (0, 1)  # its other codecs need modules not installed here
    row = {"case": case, "batch_bytes": len(data),
           "ads_decode_us": per_record_us(lambda: record_batches.decode_batch(data), count, runs),
           "kafka_python_decode_us": (per_record_us(lambda: kafka_python_decode(data), count, runs)
                                      if kafka_python_ok else None),
           "aiokafka_decode_us": per_record_us(lambda: aiokafka_decode(data), count, runs)}
    if CASES[case] == 0:  # brokers serve batches uncompressed: encode is measured once per record shape
        decoded = record_batches.decode_batch(data).records
        stored = pa.RecordBatch.from_arrays([int64_column(list(range(count))), *decoded.columns],
                                            schema=RECORD_SCHEMA)
        header = BatchHeader(base_offset=0, record_count=count, leader_epoch=0, max_timestamp_ms=0)
        row["ads_encode_us"] = per_record_us(lambda: record_batches.encode_batch(stored, header), count, runs)
        row["kafka_python_encode_us"] = per_record_us(lambda: kafka_python_encode(records), count, runs)
        row["aiokafka_encode_us"] = per_record_us(lambda: aiokafka_encode(records), count, runs)
    return row


def table(rows: list[dict]) -> str:
    def cell(value):
        return "n/a" if value is None else f"{value:.3f}"

    lines = ["| case | batch KiB | ads decode | kafka-python decode | ratio | aiokafka decode | ads encode | "
             "kafka-python encode | ratio | aiokafka encode |", "|---" * 10 + "|"]
    for row in rows:
        decode_ratio = (f"{row['kafka_python_decode_us'] / row['ads_decode_us']:.0f}x"
                        if row["kafka_python_decode_us"] else "n/a")
        encode = row.get("ads_encode_us")
        encode_ratio = f"{row['kafka_python_encode_us'] / encode:.0f}x" if encode else ""
        lines.append(f"| {row['case']} | {row['batch_bytes'] / 1024:.0f} | {cell(row['ads_decode_us'])} | "
                     f"{cell(row['kafka_python_decode_us'])} | {decode_ratio} | {cell(row['aiokafka_decode_us'])} | "
                     + (f"{cell(encode)} | {cell(row['kafka_python_encode_us'])} | {encode_ratio} | "
                        f"{cell(row['aiokafka_encode_us'])} |" if encode else " | | | |"))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    rows = [measure(case, args.records, args.value_bytes, args.runs) for case in CASES]
    text = (f"us per record, {args.records} records of {args.value_bytes} B per batch, best of {args.runs} "
            f"loops; Python {platform.python_version()}, pyarrow {pa.__version__}, {os.cpu_count()} cores\n\n"
            + table(rows))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "kafka_codec.json").write_text(json.dumps({"records": args.records, "value_bytes": args.value_bytes,
                                                           "runs": args.runs, "rows": rows}, indent=2))
    (args.out / "kafka_codec.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
