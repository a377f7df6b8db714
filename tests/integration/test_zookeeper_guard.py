"""The ZooKeeper connection survives anything a client sends (issue #20, finding 2), against a real ZooKeeper.

* A topic name kazoo cannot encode (a lone surrogate), one that would leave its
  subtree (``..``), a value that is not clean UTF-8 JSON or is too large: each is
  a typed error in the caller's thread, and the session lives on. Before, the
  request went to kazoo's queue and its connection thread died encoding it.
* If kazoo's connection thread dies anyway, ``ZkSession.connection_thread_problem``
  says so, and a broker (in this process, with its real ZooKeeper membership)
  stops acting as leader and reports the fatal error its main loop exits on.
"""

from __future__ import annotations

import time

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.serialization import GetData

from ads_spark.broker.zk.client import ZkClient
from ads_spark.broker.zk.model import PartitionStateZnode, ZooKeeperUnavailable
from ads_spark.errors import InvalidRequestError, InvalidTopicError, NotLeaderOrFollowerError
from tests.fixtures.waiting import poll_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

WAIT_S = 10.0
# The tests that kill kazoo's thread on purpose make it print its traceback; that is the point, not a failure.
KILLS_KAZOO_THREAD = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")


def _kill_connection_thread(zk: ZkClient) -> None:
    """What a surrogate in a path did before the guard: kazoo's thread dies encoding it (guard bypassed)."""
    client = zk.client
    KazooClient._call(client, GetData("/x\ud800", None), client.handler.async_result())
    assert poll_until(lambda: zk.connection_thread_problem() is not None, WAIT_S), "kazoo's thread did not die"


BAD_TOPIC_CALLS = {
    "read_topic_config": lambda zk: zk.read_topic_config("\ud800"),
    "write_topic_config": lambda zk: zk.write_topic_config("orders\ud800", {"retention.ms": "1"}),
    "read_topic": lambda zk: zk.read_topic("../../../x"),
    "topic_assignment": lambda zk: zk.topic_assignment(""),
    "mark_topic_for_deletion": lambda zk: zk.mark_topic_for_deletion(".."),
    "read_partition_states": lambda zk: zk.read_partition_states([("x\ud800", 0)]),
    "update_isr": lambda zk: zk.update_isr("x\ud800", 0, PartitionStateZnode(1, 0, (1,)), 0),
    "create_topic": lambda zk: zk.create_topic("\ud800", {0: [1]}),
    "delete_topic_znodes": lambda zk: zk.delete_topic_znodes("a/b"),
    "preferred_election": lambda zk: zk.request_preferred_replica_election([("\ud800", 0)]),
    "reassignment": lambda zk: zk.request_reassignment({"partitions": [{"topic": "\ud800", "partition": 0,
                                                                         "replicas": [1]}]}),
    "huge_name": lambda zk: zk.read_topic_config("x" * (1 << 20)),
}


def test_bad_topic_names_are_typed_errors_in_the_caller_and_the_session_lives(zk_client):
    for name, call in BAD_TOPIC_CALLS.items():
        with pytest.raises(InvalidTopicError) as caught:
            call(zk_client)
        assert len(str(caught.value)) < 400, name
    assert zk_client.connection_thread_problem() is None and zk_client.connected
    assert zk_client.topic_names() == []


def test_values_and_raw_requests_kazoo_cannot_send_are_refused_before_its_queue(zk_client):
    zk_client.create_topic("orders", {0: [1]})
    for config in ({"retention.ms": "\ud800"}, {"\udfff": "1"}, {"x": "y" * 1_100_000}):
        with pytest.raises(InvalidRequestError):
            zk_client.write_topic_config("orders", config)
    raw = zk_client.client  # what a future code path might hand kazoo directly
    for call in (lambda: raw.get("/x\ud800"), lambda: raw.exists("/brokers/x\udfff/y"),
                 lambda: raw.create("/big", b"x" * 1_100_000), lambda: raw.get_children("/t\x00")):
        with pytest.raises(InvalidRequestError, match="not sent to ZooKeeper"):
            call()
    transaction = raw.transaction()
    transaction.create("/fine", b"")
    transaction.create("/bad-\ud800", b"")
    with pytest.raises(InvalidRequestError):
        transaction.commit()
    assert zk_client.connection_thread_problem() is None and zk_client.connected
    assert zk_client.topic_names() == ["orders"] and zk_client.read_topic_config("orders") == {}
    assert not raw.exists("/fine")  # the multi-op was refused whole


@KILLS_KAZOO_THREAD
def test_a_dead_connection_thread_is_reported_and_calls_fail_typed(zookeeper_server, zk_chroot):
    zk = ZkClient(zookeeper_server.connect_string, chroot=zk_chroot, session_timeout_ms=4000,
                  connect_timeout_s=10.0).connect()
    try:
        assert zk.connection_thread_problem() is None
        _kill_connection_thread(zk)
        assert "connection thread" in zk.connection_thread_problem()
        with pytest.raises(ZooKeeperUnavailable):
            zk.topic_names()
    finally:
        started = time.monotonic()
        zk.close()
        assert time.monotonic() - started < WAIT_S
    assert zk.connection_thread_problem() is None  # closed on purpose: nothing to report


@KILLS_KAZOO_THREAD
def test_a_broker_whose_kazoo_thread_dies_stops_leading_and_reports_fatal(tmp_path, zookeeper_server, zk_chroot):
    from ads_spark.broker.broker import Broker
    from ads_spark.broker.zk.membership import ZkMembership
    from ads_spark.config import BrokerConfig
    from tests.fixtures.logs import produce_batch

    config = BrokerConfig({"broker.id": "1", "log.dirs": str(tmp_path / "data"), "metrics.port": "-1",
                           "zookeeper.connect": f"{zookeeper_server.connect_string}{zk_chroot}",
                           "zookeeper.session.timeout.ms": "4000", "controlled.shutdown.enable": "false"})
    broker = Broker(config, zk_factory=ZkMembership)
    try:
        broker.start()
        broker.zk.create_topic("orders", 1, 1, None, {})
        assert poll_until(lambda: (p := broker.replica_manager.maybe_get("orders", 0)) is not None and p.is_leader,
                          WAIT_S)
        answers = []

        def produce():
            broker.replica_manager.produce("orders", 0, produce_batch([b"v"]), acks=1, timeout_ms=1000,
                                           max_message_bytes=1 << 20, producer=(-1, -1, -1),
                                           complete=lambda base, error: answers.append((base, error)))

        produce()
        assert answers == [(0, None)]
        _kill_connection_thread(broker.zk.zk)
        assert poll_until(lambda: broker.fatal_error is not None, WAIT_S)
        assert "connection thread" in broker.fatal_error
        with pytest.raises(NotLeaderOrFollowerError):
            produce()  # the acks=1 write the cut-off broker of finding 2 acknowledged
        assert broker.replica_manager.maybe_get("orders", 0).log_end_offset == 1
    finally:
        started = time.monotonic()
        broker.stop(controlled=False)
        assert time.monotonic() - started < 20
