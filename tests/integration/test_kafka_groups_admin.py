"""Kafka's group and admin APIs on a real 3-broker cluster's Kafka listener (issue #25; handlers_groups.py,
handlers_admin.py), with Kafka's own clients: confluent-kafka's Consumer and AdminClient, kafka-python's
KafkaAdminClient. What one protocol does, the other sees: a group formed and committed through Kafka's
protocol is described by ``ads consumer-groups``, configs altered through Kafka are ADS's topic overrides.

Records are written with ADS's own producer, so these tests depend on the Kafka listener's group and admin
APIs (and Metadata) only, not on its Produce/Fetch (test_kafka_data_plane.py, test_kafka_clients.py).
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from ads_spark.cli.main import main
from ads_spark.client import Admin, Producer
from ads_spark.config import TOPIC_KEYS
from tests.fixtures.cluster import start_cluster, stop_cluster
from tests.fixtures.waiting import wait_until

pytestmark = pytest.mark.integration

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaException, TopicPartition  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewPartitions, NewTopic,
)

# A small __consumer_offsets (made on the first FindCoordinator) and a short wait for a new group's members.
OVERRIDES = ["offsets.topic.num.partitions=3", "group.initial.rebalance.delay.ms=300"]
PARTITIONS = 4
RECORDS_PER_PARTITION = 10
GROUP_FORM_TIMEOUT_S = 60
ADMIN_TIMEOUT_S = 30


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    started = start_cluster(tmp_path_factory, 3, OVERRIDES)
    yield started
    stop_cluster(started)


@pytest.fixture(scope="module")
def ads_admin(cluster):
    client = Admin({"bootstrap.servers": cluster.bootstrap_servers})
    yield client
    client.close()


@pytest.fixture(scope="module")
def kafka_admin(cluster):
    return AdminClient(cluster.kafka_client_config())


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _topic_with_records(cluster, ads_admin) -> str:
    topic = _name("kg")
    ads_admin.create_topic(topic, partitions=PARTITIONS, replication_factor=3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    try:
        for partition in range(PARTITIONS):
            for i in range(RECORDS_PER_PARTITION):
                producer.produce(topic, value=f"v{i}".encode(), partition=partition)
        assert producer.flush(30) == 0
    finally:
        producer.close()
    return topic


def _form_group(cluster, group: str, topic: str) -> tuple[list, list[set[int]]]:
    """Two confluent-kafka consumers in ``group`` on ``topic``; returns them and their assignments once both
    hold partitions that are disjoint and cover the topic."""
    assigned: list[set[int]] = [set(), set()]
    consumers = []
    for index in range(2):
        consumer = Consumer({**cluster.kafka_client_config(), "group.id": group, "enable.auto.commit": False,
                             "auto.offset.reset": "earliest", "session.timeout.ms": 10000,
                             "client.id": f"member-{index}"})

        def on_assign(_consumer, partitions, index=index):
            assigned[index] = {p.partition for p in partitions}

        def on_revoke(_consumer, _partitions, index=index):
            assigned[index] = set()

        consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        consumers.append(consumer)
    deadline = time.monotonic() + GROUP_FORM_TIMEOUT_S
    while not (all(assigned) and assigned[0].isdisjoint(assigned[1])
               and assigned[0] | assigned[1] == set(range(PARTITIONS))):
        assert time.monotonic() < deadline, f"the group did not form: {assigned}"
        for consumer in consumers:
            consumer.poll(0.1)
    return consumers, assigned


def test_two_confluent_consumers_share_partitions_commit_and_ads_sees_the_group(cluster, ads_admin, kafka_admin,
                                                                               capsys):
    topic, group = _topic_with_records(cluster, ads_admin), _name("group")
    consumers, assigned = _form_group(cluster, group, topic)
    try:
        epochs = {p.partition: p.leader_epoch for p in ads_admin.describe_topics([topic])[0].partitions}
        for consumer, partitions in zip(consumers, assigned):
            consumer.commit(offsets=[TopicPartition(topic, p, 3 + p, f"meta-{p}", epochs[p]) for p in partitions],
                            asynchronous=False)
        committed = consumers[0].committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
        assert [(c.partition, c.offset, c.leader_epoch, c.metadata) for c in committed] == [
            (p, 3 + p, epochs[p], f"meta-{p}") for p in range(PARTITIONS)]

        listed = kafka_admin.list_consumer_groups().result(ADMIN_TIMEOUT_S)
        states = {g.group_id: g.state for g in listed.valid}
        assert states[group] == ck.ConsumerGroupState.STABLE
        described = kafka_admin.describe_consumer_groups([group])[group].result(ADMIN_TIMEOUT_S)
        assert described.state == ck.ConsumerGroupState.STABLE and described.partition_assignor == "range"
        members = {m.client_id: {tp.partition for tp in m.assignment.topic_partitions} for m in described.members}
        assert members == {"member-0": assigned[0], "member-1": assigned[1]}

        # kafka-python reads the same commits (OffsetFetch with null topics: all of the group's).
        from kafka import KafkaAdminClient

        from kafka import TopicPartition as KpTopicPartition

        python_admin = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap_servers, request_timeout_ms=30000)
        try:
            offsets = python_admin.list_group_offsets(group)[group]
            # OffsetDelete of a topic the group's members subscribe to is refused per partition.
            subscribed = python_admin.delete_group_offsets(group, [KpTopicPartition(topic, 0)])
        finally:
            python_admin.close()
        assert {tp.partition: (om.offset, om.metadata, om.leader_epoch) for tp, om in offsets.items()} == {
            p: (3 + p, f"meta-{p}", epochs[p]) for p in range(PARTITIONS)}
        assert [error.errno for error in subscribed.values()] == [ck.KafkaError.GROUP_SUBSCRIBED_TO_TOPIC]

        refused = kafka_admin.delete_consumer_groups([group])[group]
        with pytest.raises(KafkaException) as caught:
            refused.result(ADMIN_TIMEOUT_S)
        assert caught.value.args[0].code() == ck.KafkaError.NON_EMPTY_GROUP

        # ADS's own tool sees the same group and offsets (lag = 10 - committed).
        assert main(["consumer-groups", "--bootstrap-server", cluster.bootstrap_servers, "--describe",
                     "--group", group, "--json"]) == 0
        shown = json.loads(capsys.readouterr().out)
        rows = {r["partition"]: (r["current_offset"], r["lag"]) for r in shown["partitions"]}
        assert rows == {p: (3 + p, RECORDS_PER_PARTITION - 3 - p) for p in range(PARTITIONS)}
    finally:
        for consumer in consumers:
            consumer.close()  # LeaveGroup: the group empties

    wait_until(lambda: ads_admin.describe_consumer_groups([group])[group].state == "Empty", 30, what="group empty")
    python_admin = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap_servers, request_timeout_ms=30000)
    try:  # without members, its offsets may go
        assert [e.errno for e in python_admin.delete_group_offsets(group, [KpTopicPartition(topic, 0)]).values()] == [0]
        assert sorted(tp.partition for tp in python_admin.list_group_offsets(group)[group]) == [1, 2, 3]
    finally:
        python_admin.close()
    deleted = kafka_admin.delete_consumer_groups([group])[group]
    assert deleted.result(ADMIN_TIMEOUT_S) is None
    listed = kafka_admin.list_consumer_groups().result(ADMIN_TIMEOUT_S)
    assert group not in {g.group_id for g in listed.valid}


def test_confluent_admin_creates_configures_grows_and_deletes_topics(cluster, ads_admin, kafka_admin):
    topic, checked_only = _name("ka"), _name("ka-validate")
    futures = kafka_admin.create_topics([NewTopic(topic, 2, 2, config={"retention.ms": "600000"})],
                                        operation_timeout=ADMIN_TIMEOUT_S)
    assert futures[topic].result(ADMIN_TIMEOUT_S) is None
    assert kafka_admin.create_topics([NewTopic(checked_only, 1, 1)], validate_only=True)[checked_only].result(
        ADMIN_TIMEOUT_S) is None
    with pytest.raises(KafkaException) as caught:
        kafka_admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(ADMIN_TIMEOUT_S)
    assert caught.value.args[0].code() == ck.KafkaError.TOPIC_ALREADY_EXISTS
    names = ads_admin.list_topics()
    assert topic in names and checked_only not in names
    assert len(ads_admin.describe_topics([topic])[0].partitions) == 2

    resource = ConfigResource("topic", topic)
    configs = kafka_admin.describe_configs([resource])[resource].result(ADMIN_TIMEOUT_S)
    assert set(configs) == set(TOPIC_KEYS)
    assert (configs["retention.ms"].value, configs["retention.ms"].source) == (
        "600000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert configs["segment.bytes"].source in (ConfigSource.DEFAULT_CONFIG.value,
                                               ConfigSource.STATIC_BROKER_CONFIG.value)

    change = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("segment.ms", "3600000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)])
    assert kafka_admin.incremental_alter_configs([change])[change].result(ADMIN_TIMEOUT_S) is None
    assert ads_admin.describe_configs(topic)["overrides"] == {"segment.ms": "3600000",
                                                              "cleanup.policy": "compact,delete"}
    refused = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.APPEND)])
    with pytest.raises(KafkaException) as caught:
        kafka_admin.incremental_alter_configs([refused])[refused].result(ADMIN_TIMEOUT_S)
    assert caught.value.args[0].code() == ck.KafkaError.INVALID_CONFIG and "retention.ms" in str(caught.value)

    grown = kafka_admin.create_partitions([NewPartitions(topic, 5)], operation_timeout=ADMIN_TIMEOUT_S)
    assert grown[topic].result(ADMIN_TIMEOUT_S) is None
    assert len(ads_admin.describe_topics([topic])[0].partitions) == 5

    broker = ConfigResource("broker", "1")
    broker_configs = kafka_admin.describe_configs([broker])[broker].result(ADMIN_TIMEOUT_S)
    assert broker_configs["num.partitions"].is_read_only and "broker.id" in broker_configs

    assert kafka_admin.delete_topics([topic], operation_timeout=ADMIN_TIMEOUT_S)[topic].result(ADMIN_TIMEOUT_S) is None
    wait_until(lambda: topic not in ads_admin.list_topics(), 30, what="the topic deleted")


def test_alter_configs_replaces_overrides_and_kafka_python_creates_with_broker_defaults(cluster, ads_admin,
                                                                                        kafka_admin):
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource as KpConfigResource, ConfigResourceType, NewTopic as KpNewTopic

    client = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap_servers, request_timeout_ms=30000)
    try:
        topic = _name("kp")
        client.create_topics([KpNewTopic(topic, num_partitions=-1, replication_factor=-1)], timeout_ms=30000)
        assert len(ads_admin.describe_topics([topic])[0].partitions) == 1  # -1: num.partitions (here 1)
        # kafka-python's AlterConfigs re-sends the other overrides itself; the broker keeps what it is sent.
        resource = KpConfigResource(ConfigResourceType.TOPIC, topic, configs={"segment.ms": "3600000"})
        client.alter_configs([resource], incremental=False, raise_on_unknown=False)
        assert ads_admin.describe_configs(topic)["overrides"] == {"segment.ms": "3600000"}
        described = client.describe_configs([KpConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
        assert "retention.ms" in json.dumps(described, default=str)
    finally:
        client.close()
    # AlterConfigs as sent by confluent-kafka (not incremental): what it leaves out returns to its default.
    replaced = ConfigResource("topic", topic, set_config={"retention.ms": "7200000"})
    assert kafka_admin.alter_configs([replaced])[replaced].result(ADMIN_TIMEOUT_S) is None
    assert ads_admin.describe_configs(topic)["overrides"] == {"retention.ms": "7200000"}


def test_delete_records_moves_every_replicas_log_start(cluster, ads_admin, kafka_admin):
    from ads_spark.protocol import wire
    from ads_spark.protocol.connection import Connections

    topic = _topic_with_records(cluster, ads_admin)
    asked = [TopicPartition(topic, 0, 4), TopicPartition(topic, 1, -1), TopicPartition(topic, 2, 99)]
    futures = kafka_admin.delete_records(asked, operation_timeout=ADMIN_TIMEOUT_S)
    done = {tp.partition: future for tp, future in futures.items()}
    assert done[0].result(ADMIN_TIMEOUT_S).low_watermark == 4
    assert done[1].result(ADMIN_TIMEOUT_S).low_watermark == RECORDS_PER_PARTITION  # -1: up to the HW
    with pytest.raises(KafkaException) as caught:
        done[2].result(ADMIN_TIMEOUT_S)  # past the HW
    assert caught.value.args[0].code() == ck.KafkaError.OFFSET_OUT_OF_RANGE

    earliest = ads_admin.list_offsets([_tp(topic, p) for p in range(3)], "earliest")
    assert {tp.partition: offset for tp, offset in earliest.items()} == {0: 4, 1: RECORDS_PER_PARTITION, 2: 0}
    connections = Connections({"bootstrap.servers": cluster.bootstrap_servers})
    try:
        def starts() -> dict[int, set[int]]:
            found: dict[int, set[int]] = {0: set(), 1: set()}
            for broker_id in cluster.broker_ids():
                status = connections.call_broker(broker_id, wire.ACTION_REPLICA_STATUS, {"topic": topic})
                for entry in status["partitions"]:
                    if entry["partition"] in found:
                        found[entry["partition"]].add(entry["log_start_offset"])
            return found
        # Followers delete the same from their next fetch: every replica starts where the leader does.
        wait_until(lambda: starts() == {0: {4}, 1: {RECORDS_PER_PARTITION}}, 30, what="followers follow")
    finally:
        connections.close()


def _tp(topic: str, partition: int):
    from ads_spark.client import TopicPartition as AdsTopicPartition

    return AdsTopicPartition(topic, partition)


def test_a_static_member_rejoining_keeps_its_partitions(cluster, ads_admin, kafka_admin):
    topic, group = _topic_with_records(cluster, ads_admin), _name("static")
    config = {**cluster.kafka_client_config(), "group.id": group, "group.instance.id": "instance-a",
              "session.timeout.ms": 30000, "enable.auto.commit": False}

    def join() -> tuple[Consumer, set[int]]:
        consumer, assigned = Consumer(config), set()
        consumer.subscribe([topic], on_assign=lambda _c, partitions: assigned.update(p.partition for p in partitions))
        deadline = time.monotonic() + GROUP_FORM_TIMEOUT_S
        while assigned != set(range(PARTITIONS)):
            assert time.monotonic() < deadline, f"not assigned: {assigned}"
            consumer.poll(0.1)
        return consumer, assigned

    first, _ = join()
    member = kafka_admin.describe_consumer_groups([group])[group].result(ADMIN_TIMEOUT_S).members[0]
    assert member.group_instance_id == "instance-a"
    first.close()  # a static member does not leave: the group keeps it for its session timeout
    second, assigned = join()
    try:
        described = kafka_admin.describe_consumer_groups([group])[group].result(ADMIN_TIMEOUT_S)
        assert [m.group_instance_id for m in described.members] == ["instance-a"]
        assert described.members[0].member_id != member.member_id  # the new one fenced the old id
        assert assigned == set(range(PARTITIONS))
    finally:
        second.close()
