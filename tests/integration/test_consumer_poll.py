"""``Consumer.poll`` long-polls the leaders over fetch sessions: it wakes when records are committed, not on a
timer, keeps at most one fetch per leader in flight, honours seeks made while a fetch was out, and a fetch
session survives a malformed request with a typed error."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from ads_spark.client import Consumer, Producer, TopicPartition
from ads_spark.protocol import wire
from ads_spark.protocol.connection import Connections
from ads_spark.protocol.fetch_session import FetchSession
from ads_spark.errors import InvalidConfigError, InvalidRequestError, UnknownTopicOrPartitionError
from tests.fixtures.cluster import metric_total

pytestmark = pytest.mark.integration


def test_poll_wakes_when_records_are_committed_and_idles_cheaply(admin, bootstrap, cluster, topic_name):
    admin.create_topic(topic_name, partitions=3, replication_factor=3, config={"min.insync.replicas": "2"})
    consumer = Consumer({"bootstrap.servers": bootstrap, "fetch.max.wait.ms": 500})
    consumer.assign([TopicPartition(topic_name, p, 0) for p in range(3)])
    try:
        fetches_before = metric_total(cluster, 'ads_requests_total{request="fetch_consumer"}')
        idle_started = time.monotonic()
        assert consumer.poll(timeout=2.0) == []
        idle_s = time.monotonic() - idle_started
        idle_fetches = metric_total(cluster, 'ads_requests_total{request="fetch_consumer"}') - fetches_before
        assert 1.9 <= idle_s < 4.0
        # One long poll per leader per fetch.max.wait.ms, not a fetch per partition every few ms
        # (the old poll loop asked each partition ~40 times in 2 s).
        assert idle_fetches <= 3 * (2.0 / 0.5 + 2), idle_fetches

        polled: list = []
        returned_at: list[float] = []

        def poll_once():
            polled.extend(consumer.poll(timeout=10.0))
            returned_at.append(time.monotonic())

        poller = threading.Thread(target=poll_once)
        poller.start()
        time.sleep(0.5)  # the poll is now waiting inside the brokers
        with Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0}) as producer:
            producer.produce(topic_name, value=b"wake", partition=1).result(timeout=30)
            acknowledged_at = time.monotonic()
        poller.join(15)
        assert [(r.partition, r.offset, r.value) for r in polled] == [(1, 0, b"wake")]
        assert returned_at[0] - acknowledged_at < 0.3  # woken by the HW move, well inside fetch.max.wait.ms
    finally:
        consumer.close()


def test_poll_returns_everything_once_in_order_and_honours_a_seek(admin, bootstrap, topic_name):
    admin.create_topic(topic_name, partitions=2, replication_factor=3, config={"min.insync.replicas": "2"})
    with Producer({"bootstrap.servers": bootstrap}) as producer:
        for i in range(2000):
            producer.produce(topic_name, value=str(i).encode(), partition=i % 2)
        producer.flush(60)
    consumer = Consumer({"bootstrap.servers": bootstrap, "max.partition.fetch.bytes": 8192})
    consumer.assign([TopicPartition(topic_name, p, 0) for p in range(2)])
    try:
        seen: dict[int, list[int]] = {0: [], 1: []}
        deadline = time.monotonic() + 60
        while sum(map(len, seen.values())) < 2000 and time.monotonic() < deadline:
            for record in consumer.poll(timeout=1.0):
                seen[record.partition].append(record.offset)
        assert seen == {0: list(range(1000)), 1: list(range(1000))}
        # A fetch may be in flight for partition 0 now; after the seek only offsets from 990 may come back.
        consumer.seek(TopicPartition(topic_name, 0, 990))
        again = []
        while len(again) < 10 and time.monotonic() < deadline:
            again.extend(r.offset for r in consumer.poll(timeout=1.0) if r.partition == 0)
        assert again == list(range(990, 1000))
    finally:
        consumer.close()


def test_poll_of_an_unknown_topic_is_a_typed_error(bootstrap):
    consumer = Consumer({"bootstrap.servers": bootstrap})
    try:
        with pytest.raises(UnknownTopicOrPartitionError):
            consumer.assign([TopicPartition("no-such-topic-poll", 0, 0)])
            consumer.poll(timeout=1.0)
    finally:
        consumer.close()


def test_a_fetch_session_answers_bad_requests_with_errors_and_keeps_serving(admin, bootstrap, topic_name):
    admin.create_topic(topic_name, partitions=1, replication_factor=1)
    with Producer({"bootstrap.servers": bootstrap}) as producer:
        producer.produce(topic_name, value=b"kept", partition=0).result(timeout=30)
    connections = Connections({"bootstrap.servers": bootstrap})
    _, leader = connections.leader_of(topic_name, 0)
    client = flight.connect(wire.address_of(leader.host, leader.port))
    session = FetchSession(lambda: client)
    good = {"type": wire.FETCH, "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1,
            "partitions": [{"topic": topic_name, "partition": 0, "fetch_offset": 0}]}
    try:
        with pytest.raises(InvalidRequestError, match="fetch_offset: must be >= 0"):
            session.fetch({**good, "partitions": [{"topic": topic_name, "partition": 0, "fetch_offset": -5}]}, 10)
        with pytest.raises(InvalidRequestError, match=r"fetch.type: must be one of 'fetch'"):
            session.fetch({"type": "nonsense"}, 10)
        answer = session.fetch(good, 10)  # the same stream, still serving
        values = [v for _, data in answer if data is not None and data.num_rows
                  for v in data.column("value").to_pylist()]
        assert values == [b"kept"]
    finally:
        session.close()
        client.close()
        connections.close()


class _SlowServer(flight.FlightServerBase):
    """Answers nothing until released: a broker behind a link that stopped delivering packets."""

    released = threading.Event()

    def do_exchange(self, context, descriptor, reader, writer):
        writer.begin(pa.schema([]))
        for _ in reader:
            self.released.wait(30)


def test_an_unanswered_fetch_is_cancelled_at_its_deadline():
    from ads_spark.errors import RequestTimedOutError

    server = _SlowServer("grpc+tcp://127.0.0.1:0")
    client = flight.connect(f"grpc+tcp://127.0.0.1:{server.port}")
    session = FetchSession(lambda: client)
    try:
        started = time.monotonic()
        with pytest.raises(RequestTimedOutError):
            session.fetch({"type": wire.FETCH, "partitions": []}, timeout_s=0.5)
        assert time.monotonic() - started < 3.0
    finally:
        server.released.set()
        session.close()
        client.close()
        server.shutdown()


def test_a_fetch_to_a_broker_that_is_gone_fails_retriably_and_fast():
    from ads_spark.cluster import free_port
    from ads_spark.errors import AdsError

    client = flight.connect(f"grpc+tcp://127.0.0.1:{free_port()}")
    session = FetchSession(lambda: client)
    try:
        started = time.monotonic()
        with pytest.raises(AdsError) as failure:
            session.fetch({"type": wire.FETCH, "partitions": []}, timeout_s=2.0)
        assert failure.value.retriable
        assert time.monotonic() - started < 5.0
    finally:
        session.close()
        client.close()


def test_poll_rides_out_a_leader_failover(fresh_cluster, topic_name):
    """A Kafka consumer's poll does not fail while a partition has no leader: it fetches again once metadata
    names the new one. Every record acknowledged before and after the kill comes back once, in order."""
    from ads_spark.client import Admin

    cluster = fresh_cluster(brokers=3)
    config = {"bootstrap.servers": cluster.bootstrap_servers}
    admin = Admin(config)
    consumer = Consumer({**config, "fetch.max.wait.ms": 200})
    try:
        admin.create_topic(topic_name, partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
        producer_config = {**config, "acks": "all", "delivery.timeout.ms": 60_000, "request.timeout.ms": 5_000}
        with Producer(producer_config) as producer:
            for i in range(100):
                producer.produce(topic_name, value=b"%d" % i, partition=0)
            assert producer.flush(60) == 0
        consumer.assign([TopicPartition(topic_name, 0, 0)])
        seen = [r.value for r in consumer.poll(timeout=5.0)]
        leader = admin.describe_topics([topic_name])[0].partitions[0].leader
        cluster.kill_broker(leader)
        with Producer(producer_config) as producer:
            for i in range(100, 200):
                producer.produce(topic_name, value=b"%d" % i, partition=0)
            assert producer.flush(90) == 0
        deadline = time.monotonic() + 90
        while len(seen) < 200 and time.monotonic() < deadline:
            seen.extend(r.value for r in consumer.poll(timeout=1.0))  # must not raise mid-failover
        assert seen == [b"%d" % i for i in range(200)]
    finally:
        consumer.close()
        admin.close()


def test_poll_returns_at_most_max_poll_records_and_loses_none(admin, bootstrap, topic_name):
    admin.create_topic(topic_name, partitions=2, replication_factor=3, config={"min.insync.replicas": "2"})
    with Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0}) as producer:
        futures = [producer.produce(topic_name, value=str(i).encode(), partition=i % 2) for i in range(40)]
        for future in futures:
            future.result(timeout=30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "max.poll.records": 7})
    consumer.assign([TopicPartition(topic_name, p, 0) for p in range(2)])
    try:
        seen, sizes = [], []
        deadline = time.monotonic() + 30
        while len(seen) < 40 and time.monotonic() < deadline:
            records = consumer.poll(timeout=1.0)
            sizes.append(len(records))
            seen.extend((r.partition, r.offset) for r in records)
        assert max(sizes) <= 7
        assert sorted(seen) == sorted((i % 2, i // 2) for i in range(40))
        assert len(seen) == len(set(seen))
    finally:
        consumer.close()
    with pytest.raises(InvalidConfigError, match="max.poll.records"):
        Consumer({"bootstrap.servers": bootstrap, "max.poll.records": 0})
