"""Which partition each record of a sink batch goes to, a whole batch at a time.

Owns the sink's partitioner. Rules, in order: a non-null ``partition`` column
value is used as given (checked against the topic's partition count); else a
non-null key goes to Kafka's ``toPositive(murmur2(key)) % partitions``
(``protocol/partitioner.py``, the same function as ``ads_spark.client.Producer``,
so a key lands in the same partition whichever client wrote it, and where Kafka
would put it); else the record goes to the batch's round-robin partition (all
null-key rows of one Arrow batch go together and the next batch moves on: Kafka's
sticky partitioning, which keeps produce batches large).

The hash is computed for every key of the batch at once with numpy
(``murmur2_of_binary``), not one Python call per row.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ads_spark.errors import InvalidPartitionsError
from ads_spark.protocol.partitioner import key_partitions


def assign_partitions(keys: pa.Array | None, explicit: pa.Array | None, partition_count: int,
                      round_robin_partition: int, topic: str) -> np.ndarray:
    """The partition of every row (int32), by the rules in the module docstring."""
    rows = len(keys) if keys is not None else len(explicit) if explicit is not None else 0
    result = np.full(rows, round_robin_partition % partition_count, dtype=np.int64)
    if keys is not None and keys.null_count < len(keys):
        has_key = ~np.asarray(keys.is_null())
        result = np.where(has_key, key_partitions(keys, partition_count), result)
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
