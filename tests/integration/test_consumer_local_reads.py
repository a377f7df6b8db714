"""Where a consumer's reads are served from.

A consumer on the brokers' host reads their segment files (the local read path) and sees exactly what a fetch
over the network returns, below the high watermark; a consumer told not to, fetches. A polling consumer with
``client.rack`` is served by the in-sync replica on its rack (KIP-392), and by the leader when that one fails."""

from __future__ import annotations

import time

import pytest

from ads_spark.client import Admin, Consumer, Producer, TopicPartition
from tests.fixtures.cluster import scrape

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


def test_poll_reads_from_the_same_rack_follower_and_falls_back_to_the_leader(fresh_cluster, topic_name):
    """poll() with client.rack is answered by the in-sync follower on that rack (its fetch_follower_read count
    grows; the leader's files are not read); when that follower dies mid-read, the rest comes from the leader,
    every record once and in order."""
    cluster = fresh_cluster(3, racks=["a", "b", "c"])
    admin = Admin({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topic(topic_name, partitions=1, replication_factor=3)
    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"}) as producer:
        for i in range(400):
            producer.produce(topic_name, value=b"v%d" % i, partition=0)
            if i % 40 == 39:  # ten stored batches: a small max.partition.fetch.bytes reads one per fetch
                producer.flush(60)
    partition = admin.describe_topics([topic_name])[0].partitions[0]
    follower = next(r for r in partition.isr if r != partition.leader)
    rack_of = {b["id"]: b["rack"] for b in cluster.state["brokers"]}
    served_by_follower = 'ads_requests_total{request="fetch_follower_read"}'
    served_before = scrape(cluster, follower, served_by_follower)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "client.rack": rack_of[follower],
                         "max.partition.fetch.bytes": 1024, "fetch.max.wait.ms": 200})
    consumer.assign([TopicPartition(topic_name, 0, 0)])
    read = []

    def read_until(count: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while len(read) < count and time.monotonic() < deadline:
            read.extend(consumer.poll(0.5))

    try:
        read_until(100, 30)
        assert len(read) >= 100
        assert scrape(cluster, follower, served_by_follower) > served_before  # answered by the follower ...
        assert consumer.local_fetches == 0  # ... not from the leader's segment files on this host
        cluster.kill_broker(follower)
        read_until(400, 60)
    finally:
        consumer.close()
        admin.close()
        # SIGKILL, not the fixture's controlled shutdowns: with the killed follower still registered until its
        # ZooKeeper session expires, stopping the other two took ~8 s of teardown this test is not about.
        for broker_id in cluster.broker_ids():
            cluster.kill_broker(broker_id)
    assert [r.value for r in read] == [b"v%d" % i for i in range(400)]
