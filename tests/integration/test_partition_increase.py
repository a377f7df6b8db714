"""``ads topics alter --topic T --partitions N`` against real processes (Kafka's kafka-topics --alter --partitions).

One cluster for the module: 3 brokers on racks a, b, a. A topic grows from 2 to 5
partitions: the existing partitions keep their replicas and records, the new ones
span both racks, get a leader and a full ISR on every broker's metadata, and take
writes that read back; a decrease or the same count is refused with
INVALID_PARTITIONS naming the topic and changes nothing. A new controller after the
change knows every partition.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from ads_spark.client import Admin, Producer
from ads_spark.cluster import LocalCluster
from ads_spark.errors import InvalidPartitionsError, UnknownTopicOrPartitionError
from tests.fixtures.cluster import read_all
from tests.fixtures.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

RACKS = {1: "a", 2: "b", 3: "a"}


@pytest.fixture(scope="module")
def racked(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("ads-grow"))
    try:
        cluster.up(brokers=3, racks=[RACKS[b] for b in (1, 2, 3)])
        yield cluster
    finally:
        cluster.down()


def ads(cluster, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ads_spark.cli.main", *argv, "--bootstrap-server",
                           cluster.bootstrap_servers], capture_output=True, text=True, timeout=120)


def produce(bootstrap: str, topic: str, records: list[tuple[int, bytes]]) -> None:
    with Producer({"bootstrap.servers": bootstrap, "acks": "all"}) as producer:
        for future in [producer.produce(topic, value=v, partition=p) for p, v in records]:
            future.result(timeout=30)


def test_alter_adds_rack_aware_partitions_and_keeps_the_existing_ones(racked, topic_name):
    bootstrap = racked.bootstrap_servers
    admin = Admin({"bootstrap.servers": bootstrap})
    try:
        admin.create_topic(topic_name, 2, 2)
        produce(bootstrap, topic_name, [(0, b"p0-a"), (1, b"p1-a")])
        before = {p.partition: p.replicas for p in admin.describe_topics([topic_name])[0].partitions}

        altered = ads(racked, "topics", "alter", "--topic", topic_name, "--partitions", "5")
        assert altered.returncode == 0, altered.stderr
        assert f"Topic {topic_name} now has 5 partitions" in altered.stdout

        def in_sync():
            found = admin.describe_topics([topic_name])[0].partitions
            return found if all(p.leader >= 0 and len(p.isr) == 2 for p in found) else None

        partitions = {p.partition: p for p in wait_until(in_sync, 60, what="every partition led with a full ISR")}
        assert sorted(partitions) == [0, 1, 2, 3, 4]
        assert {p: partitions[p].replicas for p in (0, 1)} == before
        for number in (2, 3, 4):
            assert {RACKS[b] for b in partitions[number].replicas} == {"a", "b"}
        produce(bootstrap, topic_name, [(4, b"p4-a"), (2, b"p2-a"), (0, b"p0-b")])
        assert read_all(bootstrap, topic_name, 4) == [b"p4-a"]
        assert read_all(bootstrap, topic_name, 2) == [b"p2-a"]
        assert read_all(bootstrap, topic_name, 0) == [b"p0-a", b"p0-b"]
    finally:
        admin.close()


@pytest.mark.parametrize("count, words", [(3, "the same count"), (2, "a decrease")])
def test_a_decrease_or_the_same_count_is_refused_and_changes_nothing(racked, topic_name, count, words):
    admin = Admin({"bootstrap.servers": racked.bootstrap_servers})
    try:
        admin.create_topic(topic_name, 3, 1)
        refused = ads(racked, "topics", "alter", "--topic", topic_name, "--partitions", str(count))
        assert refused.returncode == 1
        assert topic_name in refused.stderr and words in refused.stderr and "INVALID_PARTITIONS" in refused.stderr
        with pytest.raises(InvalidPartitionsError, match=topic_name):
            admin.create_partitions(topic_name, count)
        assert len(admin.describe_topics([topic_name])[0].partitions) == 3
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.create_partitions(f"{topic_name}-missing", 4)
    finally:
        admin.close()


def test_a_new_controller_knows_the_added_partitions(racked, topic_name):
    bootstrap = racked.bootstrap_servers
    admin = Admin({"bootstrap.servers": bootstrap})
    try:
        admin.create_topic(topic_name, 1, 2)
        admin.create_partitions(topic_name, 3)
        controller = admin.cluster()["controller_id"]
        racked.stop_broker(controller)  # controlled: another broker takes over from ZooKeeper's state
        racked.start_broker(controller)
        wait_until(lambda: admin.cluster()["controller_id"] not in (-1, None), 60, what="a controller")
        produce(bootstrap, topic_name, [(2, b"after-failover")])
        assert read_all(bootstrap, topic_name, 2) == [b"after-failover"]
        assert len(admin.describe_topics([topic_name])[0].partitions) == 3
    finally:
        admin.close()
