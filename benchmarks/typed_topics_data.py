"""The rows of the typed-topics benchmark (``benchmarks.typed_topics``): one deterministic 20-column table,
its JSON twin, its Parquet copy, and the checksums every read of it must reproduce.

Owns what the rows are, so that the typed topic, the Kafka-shaped twin (the same rows as JSON values) and the
Parquet files the write cases stream from hold exactly the same rows, and the checksums the reads are checked
against are computed from the generator, not from any read. Everything is built column-wise with numpy and
pyarrow compute: no Python runs per row.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ads_spark.client import Producer

INT_COLUMNS = ["seq"] + [f"i{k}" for k in range(1, 10)]  # seq is monotonic: the filter's column
STRING_COLUMNS = [f"s{k}" for k in range(10)]
DDL = ", ".join([f"{name} BIGINT" for name in INT_COLUMNS] + [f"{name} STRING" for name in STRING_COLUMNS])
JSON_FIELDS = "seq BIGINT, s0 STRING"  # what the Kafka-shaped query decodes with from_json
BATCH_ROWS = 8192  # rows per produce_arrow call: one stored batch (~2 MB typed, ~3 MB as JSON)
PARTITIONS = 3
_LETTERS = np.frombuffer(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", np.uint8)


def chunk(start: int, rows: int) -> pa.RecordBatch:
    """Rows ``start`` .. ``start + rows`` of the table, the same on every call."""
    seq = np.arange(start, start + rows, dtype=np.int64)
    rng = np.random.default_rng(start)
    columns = {"seq": pa.array(seq)}
    for k, name in enumerate(INT_COLUMNS[1:], start=1):
        columns[name] = pa.array((seq * (2 * k + 7919)) % 1_000_000_007)
    for name in STRING_COLUMNS:
        lengths = rng.integers(8, 17, rows, dtype=np.int32)
        offsets = np.zeros(rows + 1, np.int32)
        np.cumsum(lengths, out=offsets[1:])
        data = _LETTERS[rng.integers(0, len(_LETTERS), int(offsets[-1]))]
        columns[name] = pa.StringArray.from_buffers(rows, pa.py_buffer(offsets), pa.py_buffer(data.tobytes()))
    return pa.RecordBatch.from_pydict(columns)


def json_values(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch's rows as JSON objects in a ``value`` column (the Kafka-shaped twin), built column-wise.
    The strings are letters and digits, so they need no escaping."""
    pieces: list = []
    for index, name in enumerate(INT_COLUMNS + STRING_COLUMNS):
        quote = '"' if name in STRING_COLUMNS else ""
        pieces.append(("{" if index == 0 else ",") + f'"{name}":{quote}')
        pieces.append(pc.cast(batch.column(name), pa.string()))
        if quote:
            pieces.append(quote)
    pieces.append("}")
    text = pc.binary_join_element_wise(*pieces, "")
    return pa.record_batch({"value": text.cast(pa.binary())})


@dataclass
class Checksum:
    """What a read of (part of) the table must give: row count, sum of seq, sum of s0's lengths."""

    rows: int = 0
    seq_sum: int = 0
    s0_chars: int = 0

    def add(self, batch: pa.RecordBatch) -> None:
        self.rows += batch.num_rows
        self.seq_sum += int(pc.sum(batch.column("seq")).as_py() or 0)
        self.s0_chars += int(pc.sum(pc.utf8_length(batch.column("s0"))).as_py() or 0)

    def as_tuple(self) -> tuple[int, int, int]:
        return self.rows, self.seq_sum, self.s0_chars


def fill(bootstrap: str, typed_topic: str, json_topic: str, parquet_dir: Path, rows: int,
         tail_from: int) -> tuple[Checksum, Checksum]:
    """Both topics and the Parquet files filled with the same rows (consecutive chunks round-robin over the
    partitions, so seq rises in every partition); the checksums of all rows and of rows with seq >= tail_from."""
    everything, tail = Checksum(), Checksum()
    parquet_dir.mkdir(parents=True, exist_ok=True)
    writers = [pq.ParquetWriter(str(parquet_dir / f"part-{p}.parquet"), chunk(0, 1).schema)
               for p in range(PARTITIONS)]
    with Producer({"bootstrap.servers": bootstrap, "acks": "all"}) as producer:
        futures = []
        for index, start in enumerate(range(0, rows, BATCH_ROWS)):
            batch = chunk(start, min(BATCH_ROWS, rows - start))
            partition = index % PARTITIONS
            futures.append(producer.produce_arrow(typed_topic, batch, partition=partition))
            futures.append(producer.produce_arrow(json_topic, json_values(batch), partition=partition))
            writers[partition].write_batch(batch)
            everything.add(batch)
            tail.add(batch.filter(pc.greater_equal(batch.column("seq"), tail_from)))
            while len(futures) > 64:
                futures.pop(0).result(timeout=300)
        for future in futures:
            future.result(timeout=300)
    for writer in writers:
        writer.close()
    return everything, tail


def batch_count(rows: int) -> int:
    """Stored batches of each filled topic (one per produce_arrow call)."""
    return -(-rows // BATCH_ROWS)


def row_bytes() -> dict[str, float]:
    """Arrow bytes per row of the user columns, and of the two a projection reads (seq, s0): the floor of the
    projected/full byte ratio before the stored records' own columns (offset, timestamp, key, headers)."""
    sample = chunk(0, BATCH_ROWS)
    return {"all_user_columns": sample.nbytes / sample.num_rows,
            "seq_s0": (sample.column("seq").nbytes + sample.column("s0").nbytes) / sample.num_rows}
