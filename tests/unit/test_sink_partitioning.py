"""The sink's vectorised partitioner: same keys -> same partitions as the client's murmur2 rule."""

import random

import numpy as np
import pyarrow as pa
import pytest

from ads_spark.errors import InvalidPartitionsError
from ads_spark.protocol.partitioner import VECTOR_KEY_BYTES_MAX, key_partition, murmur2, murmur2_of_binary
from ads_spark.spark.sink.partitioning import assign_partitions, group_by_topic, group_rows


def test_vector_murmur2_matches_the_scalar_one_for_every_length_and_slices():
    rng = random.Random(7)
    keys = [bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 70))) for _ in range(500)]
    keys += [b"", b"x" * (VECTOR_KEY_BYTES_MAX + 5)]
    array = pa.array([b"pad"] + keys, pa.binary()).slice(1)
    assert murmur2_of_binary(array).tolist() == [murmur2(k) & 0xFFFFFFFF for k in keys]


def test_vector_murmur2_accepts_strings_and_nulls():
    assert murmur2_of_binary(pa.array(["ab", None])).tolist() == [murmur2(b"ab") & 0xFFFFFFFF, 0]
    assert murmur2_of_binary(pa.array([], pa.binary())).tolist() == []


def test_partition_rules_explicit_then_key_then_round_robin():
    keys = pa.array([b"a", None, b"b", None], pa.binary())
    explicit = pa.array([None, 2, None, None], pa.int32())
    got = assign_partitions(keys, explicit, 3, round_robin_partition=4, topic="t")
    assert got.tolist() == [key_partition(b"a", 3), 2, key_partition(b"b", 3), 1]
    with pytest.raises(InvalidPartitionsError, match="partition 3 of topic 't', which has partitions 0..2"):
        assign_partitions(keys, pa.array([3, None, None, None], pa.int32()), 3, 0, "t")


def test_grouping_keeps_row_order_within_a_partition():
    groups = group_rows(np.array([2, 0, 2, 1, 0]))
    assert [(p, rows.tolist()) for p, rows in groups] == [(0, [1, 4]), (1, [3]), (2, [0, 2])]
    assert group_rows(np.array([], dtype=np.int32)) == []
    assert [(t, r.tolist()) for t, r in group_by_topic(pa.array(["b", "a", "b"]))] == [("b", [0, 2]), ("a", [1])]


def test_chunk_bounds_keep_each_chunk_under_the_limit():
    from ads_spark.spark.sink.partitioning import chunk_bounds

    assert chunk_bounds(np.array([4, 4, 4, 4, 4]), 8) == [(0, 2), (2, 4), (4, 5)]
    assert chunk_bounds(np.array([20, 1, 1]), 8) == [(0, 1), (1, 3)]
    assert chunk_bounds(np.array([], dtype=np.int64), 8) == []
