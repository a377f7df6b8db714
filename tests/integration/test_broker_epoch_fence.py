"""KIP-380 with real processes: a leader_and_isr addressed to a broker's previous incarnation is refused.

Two brokers and ZooKeeper. Broker 2 hosts a one-replica partition; it restarts,
so it registers again with a new broker epoch (its znode's czxid). A
leader_and_isr naming the epoch of the incarnation before the restart is
refused whole with STALE_BROKER_EPOCH and changes nothing: the replica keeps its
leader epoch, and the request's (higher) controller epoch is not recorded, so
one naming the current broker epoch with the real controller's epoch is then
obeyed.
"""

from __future__ import annotations

import pytest

from ads_spark.broker.zk.client import ZkClient
from ads_spark.client import Admin
from ads_spark.errors import AdsError, ErrorCode
from ads_spark.protocol import wire
from ads_spark.protocol.connection import Connections
from tests.fixtures.waiting import poll_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

WAIT_S = 60
CALL_TIMEOUT_MS = 20_000


def _call(cluster, broker_id: int, action: str, body: dict) -> dict:
    port = next(b["port"] for b in cluster.state["brokers"] if b["id"] == broker_id)
    connections = Connections({"bootstrap.servers": cluster.bootstrap_servers})
    try:
        return connections.call_action(cluster.broker_address(broker_id), int(port), action, body, CALL_TIMEOUT_MS)
    finally:
        connections.close()


def _replica(cluster, broker_id: int, topic: str) -> dict | None:
    """The replica's own report (replica_status): role, leader epoch, partition epoch, log end."""
    status = _call(cluster, broker_id, wire.ACTION_REPLICA_STATUS, {"topic": topic})
    return next((p for p in status["partitions"] if p["partition"] == 0), None)


def _leads(cluster, broker_id: int, topic: str) -> dict | None:
    try:
        replica = _replica(cluster, broker_id, topic)
    except AdsError:
        return None  # still starting
    return replica if replica and replica["role"] == "leader" else None


def test_leader_and_isr_for_a_previous_incarnation_is_refused(fresh_cluster, topic_name):
    cluster = fresh_cluster(2)
    admin = Admin({"bootstrap.servers": cluster.bootstrap_servers})
    zk = ZkClient(cluster.zookeeper_connect).connect()
    try:
        admin.create_topic(topic_name, 1, 1, replica_assignment=[[2]])
        assert poll_until(lambda: _leads(cluster, 2, topic_name), WAIT_S), "broker 2 never led the partition"
        previous_epoch = zk.broker_epoch(2)
        cluster.stop_broker(2)
        cluster.start_broker(2)
        assert poll_until(lambda: zk.broker_epoch(2) not in (None, previous_epoch), WAIT_S)
        current_epoch = zk.broker_epoch(2)
        assert poll_until(lambda: _leads(cluster, 2, topic_name), WAIT_S), "broker 2 did not lead after restart"
        before = _replica(cluster, 2, topic_name)
        controller_epoch = zk.controller_epoch().epoch
        entry = {"topic": topic_name, "partition": 0, "leader": 2, "leader_epoch": before["leader_epoch"] + 1,
                 "isr": [2], "replicas": [2], "partition_epoch": before["partition_epoch"] + 1}

        stale = {"controller_epoch": controller_epoch + 1000, "broker_epoch": previous_epoch, "partitions": [entry]}
        with pytest.raises(AdsError) as refused:
            _call(cluster, 2, wire.ACTION_LEADER_AND_ISR, stale)
        assert refused.value.code is ErrorCode.STALE_BROKER_EPOCH, refused.value
        after = _replica(cluster, 2, topic_name)
        assert (after["role"], after["leader_epoch"], after["partition_epoch"]) == (
            before["role"], before["leader_epoch"], before["partition_epoch"])

        # Obeyed: also shows the refused request's controller epoch was not recorded (else STALE_CONTROLLER_EPOCH).
        current = {"controller_epoch": controller_epoch, "broker_epoch": current_epoch, "partitions": [entry]}
        answer = _call(cluster, 2, wire.ACTION_LEADER_AND_ISR, current)
        assert answer["error_code"] == 0 and [p["error_code"] for p in answer["partitions"]] == [0], answer
        assert _replica(cluster, 2, topic_name)["leader_epoch"] == before["leader_epoch"] + 1
    finally:
        zk.close()
        admin.close()
