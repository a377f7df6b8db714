"""The admin path of ``ads reassign-partitions`` refuses a target replica list naming one of the partition's
observers (topic creation refuses the same), naming the broker and partition, and writes nothing. A fake
ZooKeeper layer; no broker process."""

from types import SimpleNamespace

import pytest

from ads_spark.broker.rpc.admin_handlers import AdminHandlers
from ads_spark.errors import InvalidReplicaAssignmentError


class FakeZk:
    def __init__(self):
        self.requested = []

    def live_brokers(self):
        return [1, 2, 3, 4]

    def read_topic(self, topic):
        return {"topic_id": "x", "assignment": {0: [1, 2], 1: [2, 3]}, "observers": {0: [4], 1: [4]},
                "config": {}} if topic == "orders" else None

    def request_reassignment(self, request):
        self.requested.append(request)


def handlers():
    zk = FakeZk()
    return AdminHandlers(SimpleNamespace(zk=SimpleNamespace(zk=zk))), zk


def test_a_target_naming_an_observer_is_refused_naming_broker_and_partition():
    admin, zk = handlers()
    with pytest.raises(InvalidReplicaAssignmentError, match=r"orders-1: brokers \[4\] are observers"):
        admin.handle_reassign({"partitions": [{"topic": "orders", "partition": 1, "replicas": [3, 4]}]})
    assert zk.requested == []


def test_a_target_without_observers_is_still_recorded():
    admin, zk = handlers()
    answer = admin.handle_reassign({"partitions": [{"topic": "orders", "partition": 1, "replicas": [3, 1]}]})
    assert answer["error_code"] == 0 and len(zk.requested) == 1


def test_the_controller_refuses_a_requested_move_onto_an_observer():
    """A request written to /admin/reassign_partitions directly (not through the admin path) is refused too."""
    from ads_spark.replication.controller_events import Log
    from ads_spark.replication.controller_reassign import run_start_reassignments
    from ads_spark.replication.controller_state import ControllerState, RequestAssignment, StartReassignments
    from ads_spark.replication.election import PartitionView
    from ads_spark.replication.state import LeaderAndIsr

    view = PartitionView("orders", 1, (2, 3), (4,), LeaderAndIsr(2, 1, (2, 3), partition_epoch=1))
    state = ControllerState(broker_id=1, active=True, live={1: None, 2: None, 3: None, 4: None},
                            views={("orders", 1): view})
    out = []
    after = run_start_reassignments(state, StartReassignments(({"topic": "orders", "partition": 1,
                                                                "replicas": [3, 4]},)), out)
    assert [entry for entry in out if isinstance(entry, Log) and "refused" in entry.message]
    assert not any(isinstance(item, RequestAssignment) for item in after.pending)
