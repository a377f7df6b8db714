"""At a moderate steady rate the producer's acknowledgements clock its batches: a batch sealed on linger waits
while its partition has one in flight, so the brokers see about one produce request per round trip instead of
one per linger.ms (each of which costs every replica an append)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

import pytest

from ads_spark.client import Producer

pytestmark = pytest.mark.integration

RECORDS = 400
SPACING_S = 0.001


def _produce_requests(cluster) -> float:
    status = subprocess.run([sys.executable, "-m", "ads_spark.cli.main", "cluster", "status", "--dir",
                             str(cluster.dir), "--json"], capture_output=True, text=True, timeout=60)
    total = 0.0
    for broker in json.loads(status.stdout)["brokers"]:
        text = urllib.request.urlopen(f"http://127.0.0.1:{broker['metrics_port']}/metrics", timeout=10).read()
        for line in text.decode().splitlines():
            if line.startswith('ads_requests_total{request="produce"}'):
                total += float(line.split()[1])
    return total


def test_acknowledgements_clock_small_batches(admin, bootstrap, cluster, topic_name):
    admin.create_topic(topic_name, partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
    with Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0}) as producer:
        producer.produce(topic_name, value=b"warm-up", partition=0).result(timeout=30)
        before = _produce_requests(cluster)
        started = time.monotonic()
        futures = []
        for i in range(RECORDS):
            futures.append(producer.produce(topic_name, value=b"r%d" % i, partition=0))
            time.sleep(SPACING_S)
        offsets = [f.result(timeout=60).offset for f in futures]
        elapsed_s = time.monotonic() - started
    requests = _produce_requests(cluster) - before
    assert offsets == list(range(1, RECORDS + 1))
    # With linger.ms=0 and a window of 5, every record used to be its own request while fewer than 5 were
    # in flight (251 requests here). Clocked by acks it is one per round trip (124 here): a round trip is several
    # ms here, and the records arrive one per ms or slower.
    assert requests <= RECORDS / 2, f"{requests:.0f} produce requests for {RECORDS} records in {elapsed_s:.1f}s"
