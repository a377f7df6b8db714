"""The ZooKeeper adapter against the real embedded ZooKeeper (no mocks), one chroot per test."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from ads_spark.broker.zk.client import BrokerIdInUseError, ZkClient
from ads_spark.broker.zk.model import PartitionStateZnode, StaleVersion
from ads_spark.errors import (
    InvalidReplicaAssignmentError, InvalidTopicError, StaleControllerEpochError, TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from tests.fixtures.waiting import poll_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

EVENT_WAIT_S = 10.0


@pytest.fixture
def make_client(zookeeper_server, zk_chroot):
    """Open more sessions on this test's chroot; all are closed afterwards."""
    clients: list[ZkClient] = []

    def make(session_timeout_ms: int = 4000, hosts: str | None = None) -> ZkClient:
        client = ZkClient(hosts or zookeeper_server.connect_string, chroot=zk_chroot,
                          session_timeout_ms=session_timeout_ms, connect_timeout_s=10.0)
        clients.append(client)
        return client.connect()

    yield make
    for client in clients:
        client.close()


def test_base_paths_and_cluster_id(zk_client, make_client):
    cluster_id = zk_client.cluster_id()
    assert cluster_id == make_client().cluster_id()
    assert zk_client.controller_epoch().epoch == 0
    assert zk_client.topic_names() == [] and zk_client.live_brokers() == {}


def test_registration_and_broker_epoch_grows_across_sessions(make_client):
    first = make_client()
    epoch_1 = first.register_broker(1, "127.0.0.1", 9001, rack="r1")
    brokers = make_client().live_brokers()
    assert brokers[1]["host"] == "127.0.0.1" and brokers[1]["port"] == 9001 and brokers[1]["rack"] == "r1"
    assert brokers[1]["broker_epoch"] == epoch_1
    assert first.register_broker(1, "127.0.0.1", 9001, rack="r1") == epoch_1  # same session: idempotent
    with pytest.raises(BrokerIdInUseError):
        make_client().register_broker(1, "127.0.0.1", 9002, stale_wait_s=0.3)
    first.close()
    second = make_client()
    epoch_2 = second.register_broker(1, "127.0.0.1", 9001, rack="r1")
    assert epoch_2 > epoch_1
    assert second.live_brokers()[1]["broker_epoch"] == epoch_2


class _CuttableProxy:
    """A TCP relay to ZooKeeper that the test can cut, so a client's session really expires."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.cut = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                downstream, _ = self.listener.accept()
            except OSError:
                return
            if self.cut.is_set():
                downstream.close()
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            self.sockets += [downstream, upstream]
            for a, b in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while not self.cut.is_set():
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass

    def sever(self) -> None:
        self.cut.set()
        for sock in self.sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        self.sockets = []

    def heal(self) -> None:
        self.cut.clear()

    def close(self) -> None:
        self.sever()
        self.listener.close()


def test_session_expiry_removes_registration_and_broker_re_registers(zookeeper_server, make_client):
    port = int(zookeeper_server.connect_string.rsplit(":", 1)[1])
    proxy = _CuttableProxy(port)
    try:
        broker = make_client(session_timeout_ms=2000, hosts=f"127.0.0.1:{proxy.port}")
        observer = make_client()
        states: list[str] = []
        broker.add_session_listener(states.append)
        new_epochs: list[int] = []
        epoch = broker.register_broker(7, "127.0.0.1", 9007, on_reregistered=new_epochs.append)
        assert 7 in observer.live_brokers()
        proxy.sever()
        # The server expires the silent session after its 2 s timeout; its ephemeral znode goes with it.
        assert poll_until(lambda: 7 not in observer.live_brokers(), EVENT_WAIT_S)
        proxy.heal()
        assert poll_until(lambda: "lost" in states, EVENT_WAIT_S)
        assert poll_until(lambda: bool(new_epochs), EVENT_WAIT_S), states
        assert new_epochs[0] > epoch
        assert observer.live_brokers()[7]["broker_epoch"] == new_epochs[0]
    finally:
        proxy.close()


def _topic(client: ZkClient, name: str = "orders", partitions: int = 3, replicas=(1, 2, 3)) -> str:
    count = len(replicas)
    assignment = {p: [replicas[(p + i) % count] for i in range(count)] for p in range(partitions)}
    return client.create_topic(name, assignment, {"min.insync.replicas": "2"})


def test_controller_election_and_fencing(make_client):
    a, b = make_client(), make_client()
    won = a.try_become_controller(1)
    assert won is not None and won.epoch == 1
    assert b.try_become_controller(2) is None
    assert b.controller_id() == 1
    _topic(a)
    fired = threading.Event()
    b.watch_controller(fired.set)
    assert not fired.wait(0.3)  # a controller exists: nothing to report yet
    current = a.read_partition_state("orders", 0)
    # A deposed controller: b takes over after a's session ends ...
    a_epoch = won
    stale_writer = make_client()
    a.close()
    assert fired.wait(EVENT_WAIT_S)
    b_won = b.try_become_controller(2)
    assert b_won is not None and b_won.epoch == 2
    # ... and a write fenced on a's epoch version fails, changing nothing.
    new_state = PartitionStateZnode(2, current.state.leader_epoch + 1, (2, 3))
    with pytest.raises(StaleControllerEpochError):
        stale_writer.write_partition_states(a_epoch.epoch, a_epoch.zk_version, [("orders", 0, new_state, current.zk_version)])
    assert b.read_partition_state("orders", 0) == current
    versions = b.write_partition_states(b_won.epoch, b_won.zk_version, [("orders", 0, new_state, current.zk_version)])
    assert versions == [current.zk_version + 1]
    written = b.read_partition_state("orders", 0)
    assert written.state.leader == 2 and written.state.controller_epoch == 2
    assert written.state.partition_epoch == written.zk_version
    b.resign_controller(2)
    assert b.controller_id() is None


def test_topic_creation_is_atomic_and_unique(make_client):
    client = make_client()
    topic_id = _topic(client)
    topic = client.read_topic("orders")
    assert topic["topic_id"] == topic_id and topic["assignment"] == {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}
    assert topic["config"] == {"min.insync.replicas": "2"}
    states = client.read_partition_states([("orders", p) for p in range(3)])
    assert {k: (v.state.leader, v.state.isr, v.zk_version) for k, v in states.items()} == {
        ("orders", 0): (1, (1, 2, 3), 0), ("orders", 1): (2, (2, 3, 1), 0), ("orders", 2): (3, (3, 1, 2), 0)}
    with pytest.raises(TopicAlreadyExistsError):
        _topic(client, replicas=(1, 2))
    assert client.read_topic("orders")["topic_id"] == topic_id
    # A transaction failing at its last operation (a stale controller epoch) leaves no trace.
    client.try_become_controller(1)
    stale = client.controller_epoch()._replace(zk_version=0)
    with pytest.raises(StaleControllerEpochError):
        client.create_topic("payments", {0: [1, 2]}, controller_epoch=stale)
    assert client.topic_names() == ["orders"] and client.read_topic_config("payments") == {}
    with pytest.raises(InvalidReplicaAssignmentError):
        client.create_topic("bad", {0: [1, 1]})
    with pytest.raises(InvalidTopicError):
        client.create_topic("a/b", {0: [1]})
    with pytest.raises(UnknownTopicOrPartitionError):
        client.read_partition_state("orders", 9)


def test_conditional_isr_update(make_client):
    leader = make_client()
    _topic(leader)
    seen = leader.read_partition_state("orders", 0)
    shrunk = PartitionStateZnode(1, seen.state.leader_epoch, (1, 2), controller_epoch=seen.state.controller_epoch,
                                 isr_broker_epochs=((2, 4294967301),))
    new_version = leader.update_isr("orders", 0, shrunk, seen.zk_version)
    assert new_version == seen.zk_version + 1
    written = leader.read_partition_state("orders", 0).state
    assert written.isr == (1, 2) and written.isr_broker_epochs == ((2, 4294967301),)
    assert leader.take_isr_change_notifications() == [("orders", 0)]
    assert leader.take_isr_change_notifications() == []
    # The same decision written again on the old version is recognised as already done.
    assert leader.update_isr("orders", 0, shrunk, seen.zk_version) == new_version
    # A different proposal on the old version is stale and reports the current state.
    result = leader.update_isr("orders", 0, dataclass_replace(shrunk, isr=(1,)), seen.zk_version)
    assert isinstance(result, StaleVersion)
    assert result.current.zk_version == new_version and result.current.state.isr == (1, 2)
    # So is the same ISR naming another incarnation of a member (it restarted in between).
    result = leader.update_isr("orders", 0, dataclass_replace(shrunk, isr_broker_epochs=((2, 4294967399),)),
                               seen.zk_version)
    assert isinstance(result, StaleVersion)


def dataclass_replace(state, **changes):
    import dataclasses

    return dataclasses.replace(state, **changes)


def test_batched_controller_write_reports_stale_partitions_only(make_client):
    client = make_client()
    won = client.try_become_controller(1)
    count = 300
    _topic(client, "wide", partitions=count)
    seen = client.read_partition_states([("wide", p) for p in range(count)])
    # One partition changes behind the controller's back (a leader's ISR update).
    client.update_isr("wide", 17, dataclass_replace(seen[("wide", 17)].state, isr=(seen[("wide", 17)].state.leader,)),
                      seen[("wide", 17)].zk_version)
    changes = [("wide", p, {"leader": v.state.leader, "leader_epoch": v.state.leader_epoch + 1, "isr": list(v.state.isr)},
                v.zk_version) for (_, p), v in sorted(seen.items())]
    started = time.monotonic()
    results = client.write_partition_states(won.epoch, won.zk_version, changes, chunk_size=100)
    elapsed_s = time.monotonic() - started
    assert isinstance(results[17], StaleVersion) and results[17].current.zk_version == 1
    assert all(r == 1 for i, r in enumerate(results) if i != 17)
    after = client.read_partition_states([("wide", p) for p in range(count)])
    assert after[("wide", 3)].state.leader_epoch == 1 and after[("wide", 3)].state.controller_epoch == won.epoch
    assert elapsed_s < 5.0


def test_producer_id_blocks_never_overlap_under_concurrency(make_client):
    clients = [make_client() for _ in range(4)]
    blocks, errors = [], []

    def allocate(client: ZkClient, broker_id: int) -> None:
        try:
            for _ in range(8):
                blocks.append(client.allocate_producer_id_block(broker_id))
        except Exception as exc:  # surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=allocate, args=(c, i)) for i, c in enumerate(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors
    spans = sorted((b.block_start, b.block_end_inclusive) for b in blocks)
    assert len(spans) == 32 and all(end - start + 1 == 1000 for start, end in spans)
    assert spans == [(i * 1000, i * 1000 + 999) for i in range(32)]


def test_watches_fire_and_topic_deletion(make_client):
    controller, admin = make_client(), make_client()
    events = {kind: threading.Event() for kind in ("brokers", "topics", "isr", "config", "deletions")}
    controller.watch_brokers(events["brokers"].set)
    controller.watch_topics(events["topics"].set)
    controller.watch_isr_changes(events["isr"].set)
    controller.watch_config_changes(events["config"].set)
    controller.watch_topic_deletions(events["deletions"].set)
    time.sleep(0.2)
    assert not any(e.is_set() for e in events.values())  # nothing at subscription
    admin.register_broker(1, "127.0.0.1", 9001)
    _topic(admin)
    seen = admin.read_partition_state("orders", 1)
    admin.update_isr("orders", 1, dataclass_replace(seen.state, isr=(2,)), seen.zk_version)
    admin.write_topic_config("orders", {"retention.ms": "1000"})
    admin.mark_topic_for_deletion("orders")
    for kind, event in events.items():
        assert event.wait(EVENT_WAIT_S), kind
    assert controller.read_topic_config("orders") == {"retention.ms": "1000"}
    assert controller.take_config_change_notifications() == ["orders"]
    assert controller.pending_topic_deletions() == ["orders"]
    controller.delete_topic_znodes("orders")
    assert controller.topic_names() == [] and controller.pending_topic_deletions() == []
    assert controller.read_topic("orders") is None and controller.read_topic_config("orders") == {}
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.mark_topic_for_deletion("orders")
    _topic(admin)  # the name is free again, as a new incarnation


def test_unreachable_zookeeper_is_a_bounded_typed_failure(zookeeper_server, zk_chroot):
    from ads_spark.broker.zk.client import ZooKeeperUnavailable
    from ads_spark.broker.zk.embedded import free_port

    started = time.monotonic()
    with pytest.raises(ZooKeeperUnavailable):
        ZkClient(f"127.0.0.1:{free_port()}", chroot=zk_chroot, connect_timeout_s=1.0).connect()
    assert time.monotonic() - started < 5.0
    port = int(zookeeper_server.connect_string.rsplit(":", 1)[1])
    proxy = _CuttableProxy(port)
    client = ZkClient(f"127.0.0.1:{proxy.port}", chroot=zk_chroot, session_timeout_ms=2000,
                      connect_timeout_s=5.0, request_timeout_s=1.0).connect()
    try:
        client.register_broker(3, "127.0.0.1", 9003)
        proxy.sever()
        started = time.monotonic()
        with pytest.raises(ZooKeeperUnavailable):
            client.live_brokers()
        assert time.monotonic() - started < 5.0
    finally:
        client.close()
        proxy.close()
