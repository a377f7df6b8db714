"""Kafka's default key partitioner: murmur2 of the key bytes, made positive, modulo the partition count.

One module for every writer (``client.Producer``, the Spark sink), so that a key lands in the
same partition whichever client wrote it, and in the partition Kafka's Java client would pick
(users migrating, and the Kafka protocol later, count on that). The algorithm is Kafka's
``Utils.murmur2`` (seed 0x9747b28c, m 0x5bd1e995, r 24, little-endian 4-byte blocks, the tail
bytes folded high to low) followed by ``toPositive`` (``hash & 0x7fffffff``), not ``abs``.

Two forms: ``murmur2`` for one key (the producer's ``produce`` call, a Python call per record
anyway), and ``murmur2_of_binary`` for a whole Arrow array at once (the sink): numpy steps one
4-byte block position at a time over every key still that long, so the cost is one numpy step per
4 bytes of the longest key, not a Python call per row.
"""

from __future__ import annotations

import struct
from functools import lru_cache

import numpy as np
import pyarrow as pa

SEED = 0x9747B28C
M = 0x5BD1E995
R = 24
MASK32 = 0xFFFFFFFF
# Past this length a key is hashed on its own (the vector loop's step count follows the longest key).
VECTOR_KEY_BYTES_MAX = 1024


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` of ``data``, as the signed 32-bit int Java returns."""
    length = len(data)
    h = (SEED ^ length) & MASK32
    whole = length & ~3
    for k in struct.unpack_from(f"<{whole >> 2}I", data):  # the little-endian blocks, in one call
        k = k * M & MASK32
        k = (k ^ (k >> R)) * M & MASK32
        h = (h * M & MASK32) ^ k
    tail = length & 3
    if tail:
        if tail == 3:
            h ^= data[whole + 2] << 16
        if tail >= 2:
            h ^= data[whole + 1] << 8
        h = ((h ^ data[whole]) * M) & MASK32
    h ^= h >> 13
    h = h * M & MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


# The producer hashes one key per ``produce`` call in Python (~1.2 us for 11 bytes, ~2.7 us for 36, against
# ~4 us for the rest of the call): keys that repeat (user ids) are remembered, short ones only, so the
# cache stays small (CACHED_KEYS_MAX x CACHED_KEY_BYTES_MAX bytes at most).
CACHED_KEYS_MAX = 8192
CACHED_KEY_BYTES_MAX = 64
_cached_murmur2 = lru_cache(maxsize=CACHED_KEYS_MAX)(murmur2)


def key_partition(key: bytes, partition_count: int) -> int:
    """The partition of a non-null key: ``toPositive(murmur2(key)) % partition_count``, as Kafka."""
    hashed = _cached_murmur2(key) if len(key) <= CACHED_KEY_BYTES_MAX else murmur2(key)
    return (hashed & 0x7FFFFFFF) % partition_count


def murmur2_of_binary(keys: pa.Array) -> np.ndarray:
    """``murmur2`` of every value of a binary (or string) array as uint32 (the Java int's bits); nulls give 0."""
    keys = keys.cast(pa.binary()) if keys.type != pa.binary() else keys
    count = len(keys)
    result = np.zeros(count, dtype=np.uint32)
    if count == 0:
        return result
    _, offsets_buf, data_buf = keys.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int32, count=keys.offset + count + 1)[keys.offset:]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    lengths = (offsets[1:] - offsets[:-1]).astype(np.int64)
    too_long = lengths > VECTOR_KEY_BYTES_MAX
    vec_lengths = np.where(too_long, 0, lengths)
    order = np.argsort(-vec_lengths, kind="stable")  # longest first: the keys still active form a prefix
    starts = offsets[:-1][order].astype(np.int64)
    sorted_lengths = vec_lengths[order]
    m = np.uint32(M)
    with np.errstate(over="ignore"):  # uint32 products wrap modulo 2**32, as Java's int arithmetic
        h = np.uint32(SEED) ^ sorted_lengths.astype(np.uint32)
        blocks = sorted_lengths // 4
        active_by_block = np.searchsorted(-blocks, -np.arange(1, int(blocks.max(initial=0)) + 1), side="right")
        for block, active in enumerate(active_by_block):
            at = starts[:active] + 4 * block
            k = (data[at].astype(np.uint32) | (data[at + 1].astype(np.uint32) << 8)
                 | (data[at + 2].astype(np.uint32) << 16) | (data[at + 3].astype(np.uint32) << 24))
            k = k * m
            k ^= k >> np.uint32(R)
            k = k * m
            h[:active] = (h[:active] * m) ^ k
        tail = sorted_lengths & 3
        whole_end = starts + (sorted_lengths & ~3)
        for extra, shift in ((3, 16), (2, 8), (1, 0)):
            rows = np.nonzero(tail >= extra)[0]
            h[rows] ^= data[whole_end[rows] + (extra - 1)].astype(np.uint32) << np.uint32(shift)
        rows = np.nonzero(tail > 0)[0]
        h[rows] = h[rows] * m
        h ^= h >> np.uint32(13)
        h = h * m
        h ^= h >> np.uint32(15)
    result[order] = h
    for row in np.nonzero(too_long)[0]:
        result[row] = murmur2(data[offsets[row]:offsets[row + 1]].tobytes()) & MASK32
    if keys.null_count:
        result[np.asarray(keys.is_null())] = 0
    return result


def key_partitions(keys: pa.Array, partition_count: int) -> np.ndarray:
    """``key_partition`` of every value of ``keys`` (int64; null rows get a number the caller replaces)."""
    return (murmur2_of_binary(keys) & np.uint32(0x7FFFFFFF)).astype(np.int64) % partition_count
