"""Issue #20's findings, each reproduced against real brokers with raw Flight calls.

Every test sends what a fuzz run once used to crash, cut off, poison or deafen a
broker, and checks the answer is a typed error naming the problem, that the
broker process lives, and that the refused request changed nothing: no
directory, no checkpoint line, no recorded controller epoch, and the real
controller is still obeyed. One 3-broker cluster serves the module; each test
uses its own topics.
"""

from __future__ import annotations

import json
import os
import uuid

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from ads_spark.chaos.fuzz_report import exception_names_in
from ads_spark.chaos.fuzz_streams import garbage_batch
from ads_spark.client import Admin, Consumer, Producer, TopicPartition
from ads_spark.protocol import wire
from ads_spark.cluster import pid_alive
from ads_spark.errors import ErrorCode
from tests.fixtures.cluster import read_all

CALL_TIMEOUT_S = 20


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from ads_spark.cluster import LocalCluster

    started = LocalCluster(tmp_path_factory.mktemp("ads-bad-input"))
    try:
        started.up(brokers=3, overrides=["fetch.max.bytes=65536"])
    except BaseException:
        started.down()
        raise
    yield started
    started.down()


def _client(cluster, broker_id: int = 1) -> flight.FlightClient:
    port = next(b["port"] for b in cluster.state["brokers"] if b["id"] == broker_id)
    return flight.FlightClient(f"grpc+tcp://127.0.0.1:{port}")


def _options():
    return flight.FlightCallOptions(timeout=CALL_TIMEOUT_S)


def _refusal(call) -> dict:
    """The typed error a Flight call was refused with: {"error_code", "message"}."""
    with pytest.raises(flight.FlightError) as raised:
        call()
    detail = json.loads(raised.value.extra_info)
    assert not exception_names_in(detail["message"]), detail
    return detail


def _action(cluster, name: str, body, broker_id: int = 1) -> dict:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    client = _client(cluster, broker_id)
    try:
        return _refusal(lambda: list(client.do_action(flight.Action(name, raw), _options())))
    finally:
        client.close()


def _alive(cluster) -> None:
    for broker_id in cluster.broker_ids():
        assert pid_alive(cluster.broker_pid(broker_id)), f"broker {broker_id} is gone"


def _log_dir(cluster, broker_id: int):
    return cluster.dir / f"broker-{broker_id}" / "data"


def _produce_raw(cluster, topic: str, batch: pa.RecordBatch) -> list[dict]:
    client = _client(cluster)
    try:
        descriptor = flight.FlightDescriptor.for_command(wire.dumps({"type": "produce"}))
        writer, reader = client.do_exchange(descriptor, _options())
        meta = {"correlation_id": 1, "topic": topic, "partition": 0, "acks": -1, "timeout_ms": 10000}
        writer.begin(batch.schema)
        writer.write_with_metadata(batch, pa.py_buffer(wire.dumps(meta)))
        writer.done_writing()
        answers = []
        for chunk in reader:
            if chunk.app_metadata is not None:
                answers.append(json.loads(chunk.app_metadata.to_pybytes()))
        writer.close()
        return answers
    finally:
        client.close()


def test_1_a_batch_of_random_bytes_is_refused_not_a_crash(cluster, topic_name):
    Admin({"bootstrap.servers": cluster.bootstrap_servers}).create_topic(topic_name, 1, 3)
    for seed in range(3):
        answers = _produce_raw(cluster, topic_name, garbage_batch(seed))
        assert [a["error_code"] for a in answers] == [ErrorCode.INVALID_RECORD], answers
        assert "does not match its own header" in answers[0]["message"]
    _alive(cluster)
    assert read_all(cluster.bootstrap_servers, topic_name) == []


@pytest.mark.parametrize("action, body", [
    ("describe_configs", {"topic": "\ud800"}),
    ("alter_configs", {"topic": "orders\ud800", "set": {"retention.ms": "1"}}),
    ("alter_configs", {"topic": "x" * (1 << 20), "set": {}}),
    ("alter_partition_reassignments", {"partitions": [{"topic": "y" * (1 << 20), "partition": 0,
                                                       "replicas": [1]}]}),
])
def test_2_8_a_name_zookeeper_cannot_take_never_reaches_it(cluster, action, body):
    before = _zk_session_of_every_broker(cluster)
    detail = _action(cluster, action, json.dumps(body).encode())  # json escapes the surrogate as \ud800
    assert detail["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert len(detail["message"]) < 400
    _alive(cluster)
    assert _zk_session_of_every_broker(cluster) == before  # no broker lost or renewed its session


def _zk_session_of_every_broker(cluster) -> dict:
    """Each broker's registration epoch as the cluster's metadata reports it (a new session: a new epoch)."""
    admin = Admin({"bootstrap.servers": cluster.bootstrap_servers})
    try:
        for broker_id in cluster.broker_ids():  # every broker still answers metadata: none is cut off
            client = _client(cluster, broker_id)
            try:
                list(client.do_action(flight.Action("metadata", b'{"topics": []}'), _options()))
            finally:
                client.close()
        return {b["id"]: b.get("broker_epoch") for b in admin.cluster()["brokers"]}
    finally:
        admin.close()


def _controller_epoch(cluster) -> int:
    admin = Admin({"bootstrap.servers": cluster.bootstrap_servers})
    try:
        return admin.cluster()["controller_epoch"]
    finally:
        admin.close()


def test_3_no_phantom_partition_and_the_broker_restarts(cluster):
    epoch = _controller_epoch(cluster)
    for topic in ("", "never-created-" + uuid.uuid4().hex[:6]):
        body = {"controller_epoch": epoch, "partitions": [{"topic": topic, "partition": 0}]}
        client = _client(cluster, 2)
        try:
            if topic == "":
                detail = _refusal(lambda: list(client.do_action(
                    flight.Action("replica_log_ends", json.dumps(body).encode()), _options())))
                assert detail["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
            else:  # a valid name of a partition this broker holds no replica of: answered, nothing opened
                answer = json.loads(list(client.do_action(
                    flight.Action("replica_log_ends", json.dumps(body).encode()), _options()))[0].body.to_pybytes())
                assert answer["partitions"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                assert not (_log_dir(cluster, 2) / f"{topic}-0").exists()
        finally:
            client.close()
    cluster.stop_broker(2)
    cluster.start_broker(2)  # waits until it is registered and in the metadata again
    _alive(cluster)


def test_4_a_topic_name_cannot_climb_out_of_log_dirs(cluster):
    victim_dir = cluster.dir / "x" / "victim"
    victim_dir.mkdir(parents=True, exist_ok=True)
    (victim_dir / "precious").write_text("kept")
    traversal = os.path.relpath(victim_dir, _log_dir(cluster, 1))
    entry = {"topic": traversal, "partition": 0, "leader": 1, "leader_epoch": 0, "isr": [1], "replicas": [1]}
    detail = _action(cluster, "leader_and_isr", {"controller_epoch": 0, "partitions": [entry]})
    assert detail["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
    detail = _action(cluster, "stop_replica", {"controller_epoch": 0, "partitions": [
        {"topic": traversal, "partition": 0, "delete": True}]})
    assert detail["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert (victim_dir / "precious").read_text() == "kept"
    assert sorted(p.name for p in victim_dir.iterdir()) == ["precious"]


def test_5_a_malformed_control_call_does_not_deafen_the_broker(cluster, topic_name):
    body = {"controller_epoch": 2**31 - 2, "brokers": [{"id": "one"}],
            "partitions": [{"topic": topic_name, "partition": 0}]}
    for broker_id in cluster.broker_ids():
        detail = _action(cluster, "leader_and_isr", body, broker_id)
        assert detail["error_code"] == ErrorCode.INVALID_REQUEST
        assert "brokers[0]" in detail["message"] or "partitions[0]" in detail["message"]
    admin = Admin({"bootstrap.servers": cluster.bootstrap_servers})
    try:  # create_topic waits for a leader of every partition: the brokers still obey the real controller
        admin.create_topic(topic_name, 3, 3, timeout_s=30)
    finally:
        admin.close()


@pytest.mark.parametrize("action", ["metadata", "list_offsets", "create_topics", "delete_topics", "describe_configs",
                                    "alter_configs", "elect_leaders", "alter_partition_reassignments",
                                    "leader_and_isr", "update_metadata", "stop_replica", "replica_log_ends",
                                    "controlled_shutdown", "replica_status", "init_producer_id", "locate"])
def test_6_deep_json_and_wrong_types_get_typed_errors(cluster, action):
    deep = _action(cluster, action, b"[" * 100_000 + b"]" * 100_000)
    assert deep["error_code"] == ErrorCode.INVALID_REQUEST and "deeper than" in deep["message"]
    wrong = _action(cluster, action, {"topics": 1, "topic": 1, "partitions": "x", "controller_epoch": "1",
                                      "broker_id": True, "election_type": 5})
    assert wrong["error_code"] in (ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_TOPIC_EXCEPTION)
    assert wrong["message"].startswith(action)


def test_6_the_string_false_is_not_true(cluster, topic_name):
    Admin({"bootstrap.servers": cluster.bootstrap_servers}).create_topic(topic_name, 1, 3)
    detail = _action(cluster, "stop_replica", {"controller_epoch": 0, "partitions": [
        {"topic": topic_name, "partition": 0, "delete": "false"}]})
    assert detail["error_code"] == ErrorCode.INVALID_REQUEST and "delete" in detail["message"]
    assert all((_log_dir(cluster, b) / f"{topic_name}-0").is_dir() for b in cluster.broker_ids())


def test_7_one_fetch_answer_is_bounded(cluster, topic_name):
    bootstrap = cluster.bootstrap_servers
    Admin({"bootstrap.servers": bootstrap}).create_topic(topic_name, 3, 1, replica_assignment=[[1], [1], [1]])
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for partition in range(3):
        for _ in range(20):
            producer.produce(topic_name, value=b"v" * 4000, partition=partition)
            producer.flush(30)
    producer.close()
    twice = {"type": "fetch", "max_bytes": 2**63 - 1, "partitions": [
        {"topic": topic_name, "partition": 0, "fetch_offset": 0, "partition_max_bytes": 2**63 - 1}] * 2000}
    client = _client(cluster, 1)
    try:
        detail = _refusal(lambda: client.do_get(flight.Ticket(wire.dumps(twice)), _options()).read_all())
        assert detail["error_code"] == ErrorCode.INVALID_REQUEST and "a second time" in detail["message"]
        once = {"type": "fetch", "max_bytes": 2**63 - 1, "partitions": [
            {"topic": topic_name, "partition": p, "fetch_offset": 0, "partition_max_bytes": 2**63 - 1}
            for p in range(3)]}
        answer = client.do_get(flight.Ticket(wire.dumps(once)), _options()).read_all()
    finally:
        client.close()
    # fetch.max.bytes=65536 for the cluster: the answer stops there (plus the one batch that crossed it)
    assert 0 < answer.nbytes <= 65536 + 8192, answer.nbytes
    consumer = Consumer({"bootstrap.servers": bootstrap})
    try:  # and readers still get everything, a bounded answer at a time
        assert all(len(consumer.fetch_arrow(TopicPartition(topic_name, p), 0, 20)) == 20 for p in range(3))
    finally:
        consumer.close()
    _alive(cluster)


def test_a_refused_create_topics_creates_none(cluster, topic_name):
    """A batch refused for any of its topics writes none of them (the fuzz run once found one named twice
    that created the topic, then refused the request)."""
    first = {"topic": topic_name, "partitions": 1, "replication_factor": 1}
    for second in (first, {"topic": topic_name + "-b", "replica_assignment": [[99]]}):
        detail = _action(cluster, "create_topics", {"topics": [first, second]})
        assert detail["error_code"] in (ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REPLICA_ASSIGNMENT), detail
    # describe_configs reads ZooKeeper itself: no metadata propagation delay can hide a created topic
    assert _action(cluster, "describe_configs", {"topic": topic_name})["error_code"] == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
