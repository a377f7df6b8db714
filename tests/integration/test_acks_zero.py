"""acks=0 is fire-and-forget (issue #22 item 9): the producer does not wait for the broker's answer.

The leader is paused with SIGSTOP (bounded: resumed in ``finally``), its produce streams already
open. An acks=0 producer's records complete anyway, with offset -1 as in Kafka, because they
count as delivered once written to the stream; an acks=1 producer's record waits for the
broker. Once the broker resumes, the acks=0 records are in the log (nothing was lost here, though
acks=0 promises nothing of the kind).
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from ads_spark.client import Admin, Producer
from tests.fixtures.cluster import read_all
from tests.fixtures.waiting import wait_until

pytestmark = pytest.mark.integration

PAUSED_RECORDS = 200
ACKS_ZERO_COMPLETES_WITHIN_S = 3.0
ACKS_ONE_STILL_WAITING_AFTER_S = 1.5


def test_acks_zero_completes_while_the_broker_is_paused(fresh_cluster, topic_name):
    cluster = fresh_cluster(1)
    admin = Admin({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topic(topic_name, partitions=1, replication_factor=1)
    fire = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "0", "linger.ms": 0})
    acked = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "1", "linger.ms": 0})
    try:
        # Open both streams while the broker runs: a connection being set up would wait for it either way.
        assert fire.produce(topic_name, value=b"warm-0", partition=0).result(30).offset == -1
        assert acked.produce(topic_name, value=b"warm-1", partition=0).result(30).offset >= 0
        pid = cluster.broker_pid(1)
        os.kill(pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            futures = [fire.produce(topic_name, value=b"z%d" % i, partition=0) for i in range(PAUSED_RECORDS)]
            assert fire.flush(ACKS_ZERO_COMPLETES_WITHIN_S) == 0, "acks=0 waited for the paused broker"
            elapsed_s = time.monotonic() - started
            assert {f.result(0).offset for f in futures} == {-1}
            waiting = acked.produce(topic_name, value=b"one", partition=0)
            assert acked.flush(ACKS_ONE_STILL_WAITING_AFTER_S) == 1 and not waiting.done()
        finally:
            os.kill(pid, signal.SIGCONT)
        assert waiting.result(30).offset >= 0
        print(f"acks=0: {PAUSED_RECORDS} records completed in {elapsed_s * 1000:.0f} ms with the broker paused")
        expected = {b"warm-0", b"warm-1", b"one"} | {b"z%d" % i for i in range(PAUSED_RECORDS)}
        wait_until(lambda: set(read_all(cluster.bootstrap_servers, topic_name)) == expected, timeout_s=30,
                   what="every record in the log once the broker resumed")
    finally:
        fire.close(5)
        acked.close(5)
        admin.close()
