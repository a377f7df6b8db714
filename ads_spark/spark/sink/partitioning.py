"""Which partition each record of a sink batch goes to, a whole batch at a time.

Owns the sink's partitioner. Rules, in order: a non-null ``partition`` column
value is used as given (checked against the topic's partition count); else a
non-null key goes to ``crc32(key) % partitions`` -- the same rule as
``ads_spark.client.Producer`` so a key lands in the same partition whichever
client wrote it; else the record goes to the batch's round-robin partition (all
null-key rows of one Arrow batch go together and the next batch moves on: Kafka's
sticky partitioning, which keeps produce batches large).

The CRC is computed for every key at once with numpy (a table-driven CRC-32
advanced one byte position per step over all keys still that long), so the cost is
one numpy step per byte of the longest key, not one Python call per row. Keys
longer than ``VECTOR_KEY_BYTES_MAX`` are rare and take zlib per key.
"""

from __future__ import annotations

import zlib

import numpy as np
import pyarrow as pa

from ads_spark.errors import InvalidPartitionsError

VECTOR_KEY_BYTES_MAX = 1024


def _crc32_table() -> np.ndarray:
    table = np.zeros(256, dtype=np.uint32)
    for n in range(256):
        c = n
        for _ in range(8):
            c = (0xEDB88320 ^ (c >> 1)) if c & 1 else (c >> 1)
        table[n] = c
    return table


_CRC_TABLE = _crc32_table()


def crc32_of_binary(keys: pa.Array) -> np.ndarray:
    """zlib.crc32 of every value of a binary array (nulls give 0), as uint32."""
    keys = keys.cast(pa.binary()) if keys.type != pa.binary() else keys
    count = len(keys)
    result = np.zeros(count, dtype=np.uint32)
    if count == 0:
        return result
    _, offsets_buf, data_buf = keys.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int32, count=keys.offset + count + 1)[keys.offset:]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    lengths = (offsets[1:] - offsets[:-1]).astype(np.int64)
    long_rows = np.nonzero(lengths > VECTOR_KEY_BYTES_MAX)[0]
    lengths_vec = np.where(lengths > VECTOR_KEY_BYTES_MAX, 0, lengths)
    order = np.argsort(-lengths_vec, kind="stable")  # longest first: the rows still active form a prefix
    starts = offsets[:-1][order].astype(np.int64)
    sorted_lengths = lengths_vec[order]
    crc = np.full(count, 0xFFFFFFFF, dtype=np.uint32)
    active_by_length = np.searchsorted(-sorted_lengths, -np.arange(1, int(sorted_lengths.max(initial=0)) + 1),
                                       side="right")
    for position, active in enumerate(active_by_length):
        byte = data[starts[:active] + position]
        crc[:active] = _CRC_TABLE[(crc[:active] ^ byte) & 0xFF] ^ (crc[:active] >> 8)
    result[order] = crc ^ np.uint32(0xFFFFFFFF)
    for row in long_rows:
        result[row] = zlib.crc32(data[offsets[row]:offsets[row + 1]].tobytes())
    if keys.null_count:
        result[np.asarray(keys.is_null())] = 0
    return result


def assign_partitions(keys: pa.Array | None, explicit: pa.Array | None, partition_count: int,
                      round_robin_partition: int, topic: str) -> np.ndarray:
    """The partition of every row (int32), by the rules in the module docstring."""
    rows = len(keys) if keys is not None else len(explicit) if explicit is not None else 0
    result = np.full(rows, round_robin_partition % partition_count, dtype=np.int64)
    if keys is not None and keys.null_count < len(keys):
        has_key = ~np.asarray(keys.is_null())
        result = np.where(has_key, crc32_of_binary(keys).astype(np.int64) % partition_count, result)
    if explicit is not None and explicit.null_count < len(explicit):
        given = np.asarray(explicit.cast(pa.int64()).fill_null(-1))
        has_partition = ~np.asarray(explicit.is_null())
        bad = has_partition & ((given < 0) | (given >= partition_count))
        if bad.any():
            value = int(given[np.nonzero(bad)[0][0]])
            raise InvalidPartitionsError(f"a record asks for partition {value} of topic '{topic}', which has "
                                         f"partitions 0..{partition_count - 1}")
        result = np.where(has_partition, given, result)
    return result.astype(np.int32)


def group_rows(partitions: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(partition, row indices in original order) for each partition present."""
    if len(partitions) == 0:
        return []
    order = np.argsort(partitions, kind="stable")
    ordered = partitions[order]
    boundaries = np.nonzero(np.diff(ordered))[0] + 1
    return [(int(chunk_partitions[0]), rows) for chunk_partitions, rows in
            zip(np.split(ordered, boundaries), np.split(order, boundaries))]


def group_by_topic(topics: pa.Array) -> list[tuple[str, np.ndarray]]:
    """(topic, row indices in original order) for each distinct topic value (nulls excluded)."""
    encoded = topics.dictionary_encode()
    indices = np.asarray(encoded.indices.fill_null(-1))
    names = encoded.dictionary.to_pylist()
    return [(names[i], rows) for i, rows in group_rows(indices) if i >= 0]


def chunk_bounds(row_bytes: np.ndarray, max_bytes: int) -> list[tuple[int, int]]:
    """[start, end) row ranges of consecutive rows, each about ``max_bytes`` at most (a single
    larger row gets a chunk of its own), so no produce request exceeds the broker's limit.
    One numpy search per chunk, not per row."""
    rows = len(row_bytes)
    cumulative = np.cumsum(row_bytes, dtype=np.int64)
    bounds, start = [], 0
    while start < rows:
        before = int(cumulative[start - 1]) if start else 0
        end = max(start + 1, int(np.searchsorted(cumulative, before + max_bytes, side="right")))
        bounds.append((start, end))
        start = end
    return bounds
