"""Broker and topic keys that used to be accepted and ignored, shown acting on real processes (issue #22).

* ``num.partitions`` / ``default.replication.factor``: a topic created without counts gets them.
* ``advertised.listeners``: the address in the cluster metadata (from the ZooKeeper registration) is the
  advertised one, not the bound one, and clients reach the broker through it.
* ``log.dirs`` with two directories: partitions are spread over both and found again after a restart.
* ``message.timestamp.type=LogAppendTime``: the broker's append time replaces the producer's timestamps,
  in the log and in what the producer reports; ``CreateTime`` keeps them.
* ``conf/broker.properties`` as shipped starts a broker (issue #22 item 6).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ads_spark.client import Admin, Consumer, Producer, TopicPartition
from ads_spark.errors import InvalidReplicationFactorError
from tests.fixtures.waiting import wait_until

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 30


def _timestamps(bootstrap: str, topic: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap})
    try:
        tp = TopicPartition(topic, 0)
        start, high_watermark = consumer.get_watermark_offsets(tp)
        column = consumer.fetch_arrow(tp, start, high_watermark).column("timestamp")
        return column.cast("int64").to_pylist()
    finally:
        consumer.close()


def _held(log_dir: Path) -> set[str]:
    return {p.name for p in log_dir.iterdir() if p.is_dir()} if log_dir.exists() else set()


@pytest.mark.timeout(240)
def test_unset_counts_advertised_address_log_dirs_and_log_append_time(fresh_cluster, tmp_path, topic_name):
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    cluster = fresh_cluster(1, overrides=["advertised.listeners=PLAINTEXT://localhost:0", "num.partitions=3",
                                          "default.replication.factor=2", f"log.dirs={dirs[0]},{dirs[1]}"])
    admin = Admin({"bootstrap.servers": cluster.bootstrap_servers})
    try:
        # default.replication.factor=2 applies: one broker cannot hold it.
        with pytest.raises(InvalidReplicationFactorError, match="replication factor 2"):
            admin.create_topic(topic_name)
        admin.create_topic(topic_name, replication_factor=1)  # num.partitions=3 applies
        assert len(admin.describe_topics([topic_name])[0].partitions) == 3
        assert [(b["host"], b["port"]) for b in admin.cluster()["brokers"]] == [
            ("localhost", int(cluster.bootstrap_servers.rsplit(":", 1)[1]))]

        stamped, kept = f"{topic_name}-append", f"{topic_name}-create"
        admin.create_topic(stamped, 1, 1, config={"message.timestamp.type": "LogAppendTime"})
        admin.create_topic(kept, 1, 1, config={"message.timestamp.type": "CreateTime"})
    finally:
        admin.close()
    before_ms = int(time.time() * 1000)
    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 0}) as producer:
        reported = [producer.produce(stamped, b"v", partition=0, timestamp=1_000).result(timeout=30).timestamp
                    for _ in range(2)]
        assert producer.produce(kept, b"v", partition=0, timestamp=1_000).result(timeout=30).timestamp == 1_000
        for number in range(3):
            producer.produce(topic_name, f"r{number}".encode(), partition=number).result(timeout=30)
    after_ms = int(time.time() * 1000)
    assert all(before_ms <= t <= after_ms for t in reported), reported
    assert _timestamps(cluster.bootstrap_servers, stamped) == reported
    assert _timestamps(cluster.bootstrap_servers, kept) == [1_000]

    # Five partitions over two directories: three in the first (the tie goes to it), two in the second.
    held = [_held(d) for d in dirs]
    assert sorted(map(len, held)) == [2, 3] and not held[0] & held[1], held
    cluster.stop_broker(1)
    cluster.start_broker(1)
    assert [_held(d) for d in dirs] == held
    values = {}
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers})
    try:
        for number in range(3):
            tp = TopicPartition(topic_name, number)
            wait_until(lambda: consumer.get_watermark_offsets(tp)[1] == 1, what=f"{topic_name}-{number} led")
            values[number] = consumer.fetch_arrow(tp, 0, 1).column("value").to_pylist()
    finally:
        consumer.close()
    assert values == {n: [f"r{n}".encode()] for n in range(3)}


@pytest.mark.timeout(180)
def test_the_shipped_broker_properties_starts_a_broker(zk_connect, tmp_path, topic_name):
    """``ads broker start --config conf/broker.properties``, overriding only what a test must (its own
    ZooKeeper chroot, a free port, a private log directory)."""
    ready = tmp_path / "ready"
    log_file = open(tmp_path / "broker.log", "wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "ads_spark.cli.main", "broker", "start", "--config", str(REPO / "conf/broker.properties"),
         "--override", f"zookeeper.connect={zk_connect}", "--override", "listeners=PLAINTEXT://127.0.0.1:0",
         "--override", f"log.dirs={tmp_path / 'logs'}", "--ready-file", str(ready)],
        stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    log_file.close()
    try:
        wait_until(lambda: ready.exists() or process.poll() is not None, START_TIMEOUT_S, what="the broker to serve")
        assert process.poll() is None, (tmp_path / "broker.log").read_text()[-3000:]
        bootstrap = ready.read_text().strip()
        admin = Admin({"bootstrap.servers": bootstrap})
        try:
            admin.create_topic(topic_name)  # the file's num.partitions=1, default.replication.factor=1
            assert len(admin.describe_topics([topic_name])[0].partitions) == 1
        finally:
            admin.close()
        with Producer({"bootstrap.servers": bootstrap, "acks": "all"}) as producer:
            assert producer.produce(topic_name, b"hello", partition=0).result(timeout=30).offset == 0
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=STOP_TIMEOUT_S) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
