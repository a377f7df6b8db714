"""A consumer on the brokers' host reads their segment files (the local read path) and sees exactly what a fetch
over the network returns, below the high watermark; a consumer told not to, fetches."""

from __future__ import annotations

import pytest

from ads_spark.client import Consumer, Producer, TopicPartition

pytestmark = pytest.mark.integration


def test_local_reads_equal_network_reads(admin, bootstrap, topic_name):
    admin.create_topic(topic_name, partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
    with Producer({"bootstrap.servers": bootstrap}) as producer:
        for i in range(3000):
            producer.produce(topic_name, value=f"value-{i}".encode(), key=str(i % 7).encode(), partition=0)
            if i % 300 == 299:  # ten stored batches, whatever the producer's batching would do
                producer.flush(60)
    tp = TopicPartition(topic_name, 0)
    local = Consumer({"bootstrap.servers": bootstrap, "max.partition.fetch.bytes": 16_384})
    remote = Consumer({"bootstrap.servers": bootstrap, "max.partition.fetch.bytes": 16_384,
                       "local.reads": "false"})
    try:
        low, high = local.get_watermark_offsets(tp)
        assert (low, high) == (0, 3000)
        from_files = local.fetch_arrow(tp, 123, 2999)
        over_network = remote.fetch_arrow(tp, 123, 2999)
        assert local.local_fetches > 1 and remote.local_fetches == 0  # several fetches: the byte budget is small
        assert from_files.equals(over_network)
        assert from_files.column("offset").to_pylist() == list(range(123, 2999))
    finally:
        local.close()
        remote.close()
