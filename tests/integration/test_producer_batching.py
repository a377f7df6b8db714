"""At a moderate steady rate the producer's acknowledgements clock its batches: a batch sealed on linger waits
while its partition has one in flight, so the brokers see about one produce request per round trip instead of
one per linger.ms (each of which costs every replica an append)."""

from __future__ import annotations

import time

import pytest

from ads_spark.client import Producer
from tests.fixtures.cluster import metric_total

pytestmark = pytest.mark.integration

RECORDS = 400
SPACING_S = 0.001


def test_acknowledgements_clock_small_batches(admin, bootstrap, cluster, topic_name):
    admin.create_topic(topic_name, partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
    with Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0}) as producer:
        producer.produce(topic_name, value=b"warm-up", partition=0).result(timeout=30)
        before = metric_total(cluster, 'ads_requests_total{request="produce"}')
        started = time.monotonic()
        futures = []
        for i in range(RECORDS):
            futures.append(producer.produce(topic_name, value=b"r%d" % i, partition=0))
            time.sleep(SPACING_S)
        offsets = [f.result(timeout=60).offset for f in futures]
        elapsed_s = time.monotonic() - started
    requests = metric_total(cluster, 'ads_requests_total{request="produce"}') - before
    assert offsets == list(range(1, RECORDS + 1))
    # With linger.ms=0 and a window of 5, every record used to be its own request while fewer than 5 were
    # in flight (251 requests here). Clocked by acks it is one per round trip (124 here): a round trip is several
    # ms here, and the records arrive one per ms or slower.
    assert requests <= RECORDS / 2, f"{requests:.0f} produce requests for {RECORDS} records in {elapsed_s:.1f}s"
