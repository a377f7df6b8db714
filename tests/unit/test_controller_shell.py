"""The broker's controller shell (broker/controller/) around the pure core, over a fake ZkClient.

The shell wins the /controller election, reads ZooKeeper into events, steps the
core and carries out its effects; these tests check that wiring (the core's
decisions are tested in test_replication_controller.py).
"""

import threading
import time
import types

import pytest

from ads_spark.broker.controller.controller import Controller
from ads_spark.broker.zk.model import ControllerEpoch, PartitionStateZnode, StaleVersion, VersionedPartitionState
from ads_spark.config import BrokerConfig
from ads_spark.errors import ErrorCode, StaleControllerEpochError
from ads_spark.protocol import wire

BROKER_CONFIG = {"broker.id": 1, "listeners": "127.0.0.1:9092", "zookeeper.connect": "zk:2181",
                 "log.dirs": "/nonexistent"}


class AdapterZk:
    """The ZkClient methods the controller shell calls, over dicts, in the adapter's own value types."""

    def __init__(self, assign, brokers=(1, 2, 3), leaders=None, configs=None):
        self.brokers = {b: {"host": "127.0.0.1", "port": 9000 + b, "rack": None, "metrics_port": None,
                            "clean_shutdown": True, "incarnation": f"i{b}", "broker_epoch": 10 + b} for b in brokers}
        self.topics = {name: {p: list(r) for p, r in parts.items()} for name, parts in assign.items()}
        self.configs = dict(configs or {})
        self.states = {(name, p): VersionedPartitionState(PartitionStateZnode((leaders or {}).get((name, p), r[0]), 0,
                                                                              tuple(r)), 0)
                       for name, parts in assign.items() for p, r in parts.items()}
        self.holder, self.epoch, self.watches, self.calls = None, ControllerEpoch(4, 4), {}, []
        self.fence_next_write, self.isr_notes = False, []

    def __getattr__(self, name):
        if name.startswith("watch_"):
            return lambda callback: self.watches.__setitem__(name[len("watch_"):], callback)
        raise AttributeError(name)

    def controller_id(self):
        return self.holder

    def try_become_controller(self, broker_id):
        if self.holder not in (None, broker_id):
            return None
        self.holder, self.epoch = broker_id, ControllerEpoch(self.epoch.epoch + 1, self.epoch.zk_version + 1)
        return self.epoch

    def resign_controller(self, broker_id):
        self.calls.append(("resign", broker_id))
        self.holder = None if self.holder == broker_id else self.holder

    def live_brokers(self):
        return {b: dict(info) for b, info in sorted(self.brokers.items())}

    def topic_names(self):
        return sorted(self.topics)

    def read_topic(self, name):
        if name not in self.topics:
            return None
        return {"topic_id": f"id-{name}", "assignment": {p: list(r) for p, r in self.topics[name].items()},
                "observers": {}, "config": dict(self.configs.get(name, {}))}

    def read_partition_states(self, keys):
        return {key: self.states[key] for key in keys if key in self.states}

    def write_partition_states(self, epoch, epoch_version, changes):
        self.calls.append(("write", epoch, epoch_version, [(t, p) for t, p, _, _ in changes]))
        if self.fence_next_write:
            self.fence_next_write = False
            raise StaleControllerEpochError("controller epoch superseded")
        results = []
        for t, p, znode, expected in changes:
            current = self.states.get((t, p))
            if current is None or current.zk_version != expected:
                results.append(StaleVersion(t, p, expected, current))
                continue
            self.states[(t, p)] = VersionedPartitionState(znode, expected + 1)
            results.append(expected + 1)
        return results

    def take_isr_change_notifications(self):
        notes, self.isr_notes = sorted(self.isr_notes), []
        return notes

    def unclean_applied(self, broker_id):
        return None

    def reassignment(self):
        return None


class FakeConnections:
    def __init__(self):
        self.sent, self.lock = [], threading.Lock()

    def call_action(self, host, port, action, body, timeout_ms=None):
        with self.lock:
            self.sent.append((port - 9000, action, body))
        return {"error_code": 0, "partitions": []}

    def close(self):
        pass

    def wait_for(self, count, timeout_s=5.0):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and len(self.sent) < count:
            time.sleep(0.01)
        with self.lock:
            return list(self.sent)


@pytest.fixture
def shell(monkeypatch):
    """``make(zk, broker_id=1)``: a Controller over ``zk`` whose channels send to a FakeConnections."""
    connections, made = FakeConnections(), []
    monkeypatch.setattr(Controller, "_new_connections", lambda self: connections)

    def make(zk, broker_id=1, **config):
        broker = types.SimpleNamespace(broker_id=broker_id, host="127.0.0.1", port=9000 + broker_id,
                                       config=BrokerConfig({**BROKER_CONFIG, "broker.id": broker_id, **config}))
        made.append(Controller(broker, zk))
        return made[-1], connections

    yield make
    for controller in made:
        controller.stop()


def drain(controller):
    """Run the controller's queued jobs on this thread, as its thread would."""
    while not controller._events.empty():
        controller._events.get_nowait()[1]()


def test_the_shell_wins_reads_zookeeper_steps_the_core_and_carries_out_its_effects(shell):
    zk = AdapterZk({"t": {0: (1, 2), 1: (3, 1, 2)}}, brokers=(1, 2), configs={"t": {"min.insync.replicas": "2"}})
    controller, connections = shell(zk)
    controller._elect()
    assert controller.active and controller.epoch == 5 and zk.holder == 1
    assert set(zk.watches) == {"brokers", "topics", "partition_changes", "isr_changes", "topic_deletions",
                               "config_changes", "reassignment", "controller"}
    assert zk.calls == [("write", 5, 5, [("t", 1)])]  # broker 3 was not registered: it led nothing since
    assert zk.states[("t", 1)].state.leader == 1 and controller.elections == 1 and controller.election_seconds > 0
    assert controller.state.views[("t", 0)].min_insync_replicas == 2 and controller.offline_partition_count() == 0
    sent = connections.wait_for(5)
    assert {(b, action) for b, action, _ in sent} == {(b, a) for b in (1, 2) for a in (
        wire.ACTION_LEADER_AND_ISR, wire.ACTION_UPDATE_METADATA)}
    assert {body["broker_epoch"] for b, action, body in sent if action == wire.ACTION_LEADER_AND_ISR} == {11, 12}
    # A watch only queues; the controller thread reads ZooKeeper and steps what it read.
    del zk.brokers[2]
    zk.watches["brokers"]()
    assert zk.calls[1:] == []
    drain(controller)
    assert zk.calls[1] == ("write", 5, 5, [("t", 0), ("t", 1)])
    assert zk.states[("t", 0)].state.isr == (1,) and controller.state.live.keys() == {1}


def test_a_failed_effect_skips_the_rest_resigns_and_runs_the_election_again(shell):
    zk = AdapterZk({"t": {0: (1, 2)}})
    controller, connections = shell(zk)
    controller._elect()
    zk.fence_next_write = True
    del zk.brokers[2]
    zk.watches["brokers"]()
    drain(controller)
    assert ("resign", 1) in zk.calls and controller.active and controller.epoch == 6  # won again
    assert zk.calls[-1] == ("write", 6, 6, [("t", 0)])  # the new term's own pass
    lost = AdapterZk({"t": {0: (1, 2)}})
    lost.holder = 2
    standby, _ = shell(lost)
    standby._elect()
    assert not standby.active and set(lost.watches) == {"controller"}  # a standby takes no notifications


def test_admin_requests_are_stepped_on_the_controller_thread_and_wait_for_the_reply(shell):
    zk = AdapterZk({"t": {0: (2, 1), 1: (2, 3)}}, leaders={("t", 0): 1})
    controller, _ = shell(zk)
    assert controller.request_controlled_shutdown(2, 12, False, 1.0)["error_code"] == ErrorCode.NOT_CONTROLLER
    controller.start()
    deadline = time.monotonic() + 5
    while not controller.active and time.monotonic() < deadline:
        time.sleep(0.01)
    answer = controller.request_elect_leaders("preferred", [("t", 0), ("nope", 0)], 5.0)
    assert [p["error_code"] for p in answer["partitions"]] == [0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert zk.states[("t", 0)].state.leader == 2
    answer = controller.request_controlled_shutdown(2, 12, False, 5.0)
    assert answer == {"error_code": 0, "partitions_remaining": [], "refused": []}
    assert zk.states[("t", 0)].state.leader == 1 and zk.states[("t", 1)].state.leader == 3
    assert controller.request_controlled_shutdown(2, 99, False, 5.0)["error_code"] == ErrorCode.STALE_BROKER_EPOCH
    assert not controller._waiting  # every request answered and forgotten
