"""A follower starts replicating a partition it is given at once, not when its fetcher's long-poll ends.

Each follower fetcher keeps one long-polling fetch parked at its leader for every partition it follows
there (up to ``replica.fetch.wait.max.ms``). A partition added meanwhile (a new topic, a moved leader) cuts
that fetch short (broker/replica/fetcher.py); before, it waited for the poll to end, and an acks=all produce to it
with it."""

from __future__ import annotations

import time

import pytest

from ads_spark.client import Admin, Producer

pytestmark = pytest.mark.integration

LONG_POLL_MS = 8_000  # well above the bound asserted below, still below replica.lag.time.max.ms
FIRST_ACK_S_MAX = 4.0


def test_a_new_topic_replicates_without_waiting_for_parked_follower_fetches(fresh_cluster, topic_name):
    cluster = fresh_cluster(3, overrides=[f"replica.fetch.wait.max.ms={LONG_POLL_MS}"])
    admin = Admin({"bootstrap.servers": cluster.bootstrap_servers})
    try:
        # Three partitions, so every broker has a fetcher parked at every other one.
        admin.create_topic(f"{topic_name}-idle", partitions=3, replication_factor=3,
                           config={"min.insync.replicas": "3"})
        with Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"}) as producer:
            for partition in range(3):
                producer.produce(f"{topic_name}-idle", value=b"park", partition=partition).result(timeout=30)
            time.sleep(0.5)  # the followers' next fetches are parked now, for up to LONG_POLL_MS
            admin.create_topic(topic_name, partitions=1, replication_factor=3, config={"min.insync.replicas": "3"})
            started = time.monotonic()
            offset = producer.produce(topic_name, value=b"first", partition=0).result(timeout=30).offset
            first_ack_s = time.monotonic() - started
        assert offset == 0
        assert first_ack_s < FIRST_ACK_S_MAX, f"first acks=all produce to a new topic took {first_ack_s:.1f}s"
    finally:
        admin.close()
        # SIGKILL, not the fixture's SIGTERM: a stopping broker waits out the fetches parked at it and its own
        # (up to LONG_POLL_MS each, one broker after another: ~14 s of teardown), which this test is not about.
        for broker_id in cluster.broker_ids():
            cluster.kill_broker(broker_id)
