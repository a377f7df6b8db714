"""Kafka's key partitioner (issue #22 item 10): the producer and the Spark sink put a key where Kafka would.

The expected hashes are the published values of Kafka's ``UtilsTest.testMurmur2`` (signed Java ints);
the expected partitions are derived from those published numbers alone, by Kafka's rule
``toPositive(hash) % partitions`` with ``toPositive(h) = h & 0x7fffffff`` -- never from our code.
"""

from types import SimpleNamespace

import pyarrow as pa
import pytest

from ads_spark.client.producer_partitioner import PartitionChooser
from ads_spark.protocol.partitioner import murmur2, murmur2_of_binary
from ads_spark.spark.sink.partitioning import assign_partitions

KAFKA_MURMUR2 = {  # org.apache.kafka.common.utils.UtilsTest#testMurmur2
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}
PARTITION_COUNTS = (1, 2, 3, 7, 12, 100)


def kafka_partition(published_hash: int, partitions: int) -> int:
    return (published_hash & 0x7FFFFFFF) % partitions


EXPECTED = [(key, count, kafka_partition(value, count)) for key, value in KAFKA_MURMUR2.items()
            for count in PARTITION_COUNTS]


def test_the_table_is_not_trivial():
    # toPositive, not abs(): for -973932308 they differ (abs would give partition 6 of 7, Kafka gives 3).
    assert kafka_partition(-973932308, 7) == 3 and abs(-973932308) % 7 == 6
    assert len({p for _, count, p in EXPECTED if count == 12}) >= 4


@pytest.mark.parametrize("key,expected", list(KAFKA_MURMUR2.items()))
def test_murmur2_gives_kafkas_published_hashes(key, expected):
    assert murmur2(key) == expected
    as_int32 = murmur2_of_binary(pa.array([key])).view("int32")
    assert as_int32.tolist() == [expected]


def _producer_partition(key: bytes, count: int) -> int:
    """The producer's partition choice over connections that know only the topic's partition count."""
    connections = SimpleNamespace(partitions_for=lambda topic: list(range(count)))
    return PartitionChooser(connections, batch_size_bytes=1 << 20).choose("t", key, None)


def test_the_producer_puts_each_key_where_kafka_would():
    assert [(k, n, _producer_partition(k, n)) for k, n, _ in EXPECTED] == EXPECTED


def test_the_spark_sink_puts_each_key_where_kafka_would():
    for count in PARTITION_COUNTS:
        keys = [key for key in KAFKA_MURMUR2]
        got = assign_partitions(pa.array(keys, pa.binary()), None, count, round_robin_partition=0, topic="t")
        assert got.tolist() == [kafka_partition(KAFKA_MURMUR2[key], count) for key in keys]
