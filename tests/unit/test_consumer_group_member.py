"""The group consumer's membership (client/groups/) against a fake coordinator in this process: the join
(MEMBER_ID_REQUIRED first), the leader's assignment, positions from committed offsets (with their leader
epoch) or auto.offset.reset, heartbeats that make the next poll rejoin or lose the partitions, a coordinator
that moves, max.poll.interval.ms, static membership, commits and the group keys' effects."""

from __future__ import annotations

import base64
import threading
import time
from types import SimpleNamespace

import pytest

from ads_spark.client import Consumer, TopicPartition
from ads_spark.client.assignors import COOPERATIVE_STICKY, RANGE, encode_user_data
from ads_spark.client.chunks import OFFSET_INVALID
from ads_spark.client.consumer_protocol import (
    Assignment, Subscription, decode_assignment, decode_subscription, encode_assignment, encode_subscription,
)
from ads_spark.errors import (
    ErrorCode, FencedInstanceIdError, IllegalGenerationError, InvalidConfigError, InvalidGroupIdError,
    InvalidRequestError,
)
from ads_spark.protocol.connection import ClusterView, PartitionMetadata


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class FakeCoordinator:
    """Kafka's coordinator, one rebalance at a time, for one real member and optional phantom members whose
    subscriptions are given. Scripted answers (``script[action]``: a list of error codes) come first."""

    def __init__(self, topics: dict[str, int], phantoms: dict[str, Subscription] | None = None):
        self.topics = topics
        self.phantoms = phantoms or {}
        self.calls: list[tuple[str, dict]] = []
        self.script: dict[str, list[int]] = {}
        self.generation = 0
        self.committed: dict[tuple[str, int], tuple[int, int, str]] = {}
        self.assignments: dict[str, bytes] = {}
        self.history: list[dict[str, bytes]] = []
        self.protocol = None
        self.lock = threading.Lock()
        self.ids = 0

    def answer(self, action: str, body: dict) -> dict:
        with self.lock:
            self.calls.append((action, body))
            scripted = self.script.get(action)
            if scripted:
                return {"error_code": scripted.pop(0), "message": "scripted", "member_id": body.get("member_id", "")}
            return getattr(self, action)(body)

    def find_coordinator(self, body):
        return {"error_code": 0, "node_id": 1, "host": "coordinator", "port": 1}

    def join_group(self, body):
        if not body["member_id"]:
            self.ids += 1
            return {"error_code": ErrorCode.MEMBER_ID_REQUIRED, "member_id": f"member-{self.ids}"}
        self.generation += 1
        ours = {p["name"]: p["metadata_b64"] for p in body["protocols"]}
        self.protocol = next(iter(ours))
        members = [{"member_id": body["member_id"], "group_instance_id": body.get("group_instance_id"),
                    "metadata_b64": ours[self.protocol]}]
        members += [{"member_id": m, "group_instance_id": None,
                     "metadata_b64": b64(encode_subscription(s))} for m, s in self.phantoms.items()]
        return {"error_code": 0, "generation_id": self.generation, "protocol_name": self.protocol,
                "leader_id": body["member_id"], "member_id": body["member_id"], "members": members}

    def sync_group(self, body):
        self.assignments = {a["member_id"]: base64.b64decode(a["assignment_b64"]) for a in body["assignments"]}
        self.history.append(self.assignments)
        return {"error_code": 0, "assignment_b64": b64(self.assignments.get(body["member_id"], b""))}

    def heartbeat(self, body):
        return {"error_code": 0}

    def leave_group(self, body):
        return {"error_code": 0, "members": []}

    def offset_commit(self, body):
        for p in body["partitions"]:
            self.committed[(p["topic"], p["partition"])] = (p["offset"], p["leader_epoch"], p["metadata"])
        return {"error_code": 0, "partitions": [{"topic": p["topic"], "partition": p["partition"], "error_code": 0}
                                                for p in body["partitions"]]}

    def offset_fetch(self, body):
        out = []
        for p in body["partitions"]:
            offset, epoch, metadata = self.committed.get((p["topic"], p["partition"]), (-1, -1, ""))
            out.append({"topic": p["topic"], "partition": p["partition"], "offset": offset, "leader_epoch": epoch,
                        "metadata": metadata, "error_code": 0})
        return {"error_code": 0, "partitions": out}

    def bodies(self, action):
        return [body for name, body in self.calls if name == action]


class FakeConnections:
    """What the group code uses of protocol/connection.Connections."""

    request_timeout_ms = 2000
    retry_backoff_ms = 1
    metadata_max_age_ms = 300_000

    def __init__(self, coordinator: FakeCoordinator):
        self.coordinator = coordinator
        self.finds = 0

    def call_any(self, action, body, timeout_ms=None):
        self.finds += 1
        return self.coordinator.answer(action, body)

    def call_action(self, host, port, action, body, timeout_ms=None):
        assert (host, port) == ("coordinator", 1)
        return self.coordinator.answer(action, body)

    def refresh(self, topics=None):
        view = ClusterView()
        view.topics = {t: {p: PartitionMetadata(t, p, 1, 3, (1,), (1,)) for p in range(n)}
                       for t, n in self.coordinator.topics.items()}
        return view

    def partition(self, topic, partition):
        return self.refresh().topics[topic][partition]

    def mark_stale(self):
        pass

    def close(self):
        pass


def consumer_for(coordinator, **config):
    settings = {"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "auto.offset.reset": "earliest",
                "session.timeout.ms": "10000", "heartbeat.interval.ms": "3000", **config}
    return Consumer(settings, FakeConnections(coordinator))


def test_a_member_joins_with_the_id_the_coordinator_gives_leads_and_starts_at_committed_offsets():
    coordinator = FakeCoordinator({"orders": 3, "__consumer_offsets": 50})
    coordinator.committed[("orders", 1)] = (42, 7, "m")
    assigned = []
    consumer = consumer_for(coordinator, **{"partition.assignment.strategy": "range", "session.timeout.ms": "10000"})
    try:
        consumer.subscribe(["orders"], on_assign=lambda c, tps: assigned.append(tps))
        consumer._group.before_poll(1.0)
        joins = coordinator.bodies("join_group")
        assert [j["member_id"] for j in joins] == ["", "member-1"]  # KIP-394
        subscription = decode_subscription(base64.b64decode(joins[1]["protocols"][0]["metadata_b64"]))
        assert subscription.topics == ("orders",) and subscription.version == 1
        assert joins[1]["rebalance_timeout_ms"] == 300000 and joins[1]["session_timeout_ms"] == 10000
        assert assigned == [[TopicPartition("orders", p) for p in range(3)]]
        assert consumer._positions == {("orders", 0): OFFSET_INVALID, ("orders", 1): 42, ("orders", 2): OFFSET_INVALID}
        assert consumer._position_epochs == {("orders", 1): 7}  # checked by KIP-320 before the first fetch
        assert sorted(tp.key() for tp in consumer.assignment()) == [("orders", p) for p in range(3)]
        assert consumer.committed([TopicPartition("orders", 1), TopicPartition("orders", 0)]) == [
            TopicPartition("orders", 1, 42, "m", 7), TopicPartition("orders", 0, OFFSET_INVALID, "", None)]
    finally:
        consumer.close()
    assert coordinator.bodies("leave_group") == [{"group_id": "g", "members": [
        {"member_id": "member-1", "reason": "the consumer is being closed"}]}]


def test_a_pattern_subscription_leaves_out_internal_topics():
    coordinator = FakeCoordinator({"orders-a": 1, "orders-b": 1, "other": 1, "__consumer_offsets": 50})
    consumer = consumer_for(coordinator)
    try:
        consumer.subscribe(["^orders-.*|__consumer_offsets"])
        consumer._group.before_poll(1.0)
        assert sorted(tp.key() for tp in consumer.assignment()) == [("orders-a", 0), ("orders-b", 0)]
    finally:
        consumer.close()


def test_commit_sends_generation_member_epoch_and_metadata_and_auto_commit_commits_on_close():
    coordinator = FakeCoordinator({"t": 2})
    consumer = consumer_for(coordinator, **{"auto.commit.interval.ms": "3600000"})
    try:
        consumer.subscribe(["t"])
        consumer._group.before_poll(1.0)
        consumer._positions[("t", 0)], consumer._position_epochs[("t", 0)] = 10, 4
        assert consumer.commit() == [TopicPartition("t", 0, 10, "", 4)]  # t-1 has no position yet
        body = coordinator.bodies("offset_commit")[-1]
        assert (body["generation_id"], body["member_id"]) == (1, "member-1")
        assert body["partitions"] == [{"topic": "t", "partition": 0, "offset": 10, "leader_epoch": 4, "metadata": ""}]
        consumer.commit([TopicPartition("t", 1, 5, "note", 3)])
        assert coordinator.committed[("t", 1)] == (5, 3, "note")
        future = consumer.commit([TopicPartition("t", 1, 6)], asynchronous=True)
        assert future.result(5) == [TopicPartition("t", 1, 6, "", None)]
        consumer._positions[("t", 1)] = 8
    finally:
        consumer.close()
    assert coordinator.committed == {("t", 0): (10, 4, ""), ("t", 1): (8, -1, "")}  # auto commit on close


def test_auto_commit_interval_paces_commits_in_poll_and_disabled_auto_commit_never_commits():
    coordinator = FakeCoordinator({"t": 1})
    consumer = consumer_for(coordinator, **{"auto.commit.interval.ms": "0"})
    try:
        consumer.subscribe(["t"])
        consumer._group.before_poll(1.0)
        consumer._positions[("t", 0)] = 3
        consumer._group.before_poll(0)
        assert coordinator.committed[("t", 0)][0] == 3
    finally:
        consumer.close()
    quiet = FakeCoordinator({"t": 1})
    consumer = consumer_for(quiet, **{"enable.auto.commit": "false"})
    try:
        consumer.subscribe(["t"])
        consumer._group.before_poll(1.0)
        consumer._positions[("t", 0)] = 3
        consumer._group.before_poll(0)
    finally:
        consumer.close()
    assert quiet.bodies("offset_commit") == []


def test_a_heartbeat_answered_rebalance_in_progress_makes_the_next_poll_rejoin_and_eager_revokes_first():
    coordinator = FakeCoordinator({"t": 2})
    events = []
    consumer = consumer_for(coordinator, **{"heartbeat.interval.ms": "20"})
    try:
        consumer.subscribe(["t"], on_assign=lambda c, tps: events.append(("assign", len(tps))),
                           on_revoke=lambda c, tps: events.append(("revoke", len(tps))))
        consumer._group.before_poll(1.0)
        coordinator.script["heartbeat"] = [ErrorCode.REBALANCE_IN_PROGRESS]
        deadline = time.monotonic() + 5
        while consumer._group._rejoin_reason is None and time.monotonic() < deadline:
            time.sleep(0.01)
        consumer._group.before_poll(1.0)
        assert coordinator.generation == 2
        assert events == [("assign", 2), ("revoke", 2), ("assign", 2)]  # eager: everything revoked, then assigned
    finally:
        consumer.close()


def test_an_illegal_generation_loses_the_partitions_without_committing_them():
    coordinator = FakeCoordinator({"t": 1})
    events = []
    consumer = consumer_for(coordinator, **{"heartbeat.interval.ms": "20"})
    try:
        consumer.subscribe(["t"], on_lost=lambda c, tps: events.append(("lost", tps)))
        consumer._group.before_poll(1.0)
        consumer._positions[("t", 0)] = 9
        coordinator.script["heartbeat"] = [ErrorCode.ILLEGAL_GENERATION]
        deadline = time.monotonic() + 5
        while consumer._group.generation_id != -1 and time.monotonic() < deadline:
            time.sleep(0.01)
        consumer._group.before_poll(1.0)
        assert events == [("lost", [TopicPartition("t", 0)])]
        assert ("t", 0) not in coordinator.committed  # a lost generation's positions are not committed
        assert consumer._group.generation_id == 2
    finally:
        consumer.close()


def test_a_coordinator_that_moved_is_found_again_with_back_off():
    coordinator = FakeCoordinator({"t": 1})
    coordinator.script["find_coordinator"] = [ErrorCode.COORDINATOR_NOT_AVAILABLE] * 2
    consumer = consumer_for(coordinator)
    try:
        consumer.subscribe(["t"])
        consumer._group.before_poll(2.0)
        assert consumer._connections.finds == 3
        coordinator.script["offset_commit"] = [ErrorCode.NOT_COORDINATOR]
        consumer.commit([TopicPartition("t", 0, 1)])
        assert consumer._connections.finds == 4 and coordinator.committed[("t", 0)][0] == 1
    finally:
        consumer.close()


def test_a_member_that_does_not_poll_within_max_poll_interval_leaves_and_rejoins_on_its_next_poll():
    coordinator = FakeCoordinator({"t": 1})
    lost = []
    consumer = consumer_for(coordinator, **{"max.poll.interval.ms": "100", "heartbeat.interval.ms": "20"})
    try:
        consumer.subscribe(["t"], on_lost=lambda c, tps: lost.append(tps))
        consumer._group.before_poll(1.0)
        deadline = time.monotonic() + 5
        while not coordinator.bodies("leave_group") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert coordinator.bodies("leave_group")[0]["members"][0]["reason"] == "consumer poll timeout has expired"
        consumer._group.before_poll(1.0)
        assert lost == [[TopicPartition("t", 0)]]
        assert [j["member_id"] for j in coordinator.bodies("join_group")] == ["", "member-1", "", "member-2"]
    finally:
        consumer.close()


def test_a_static_member_names_its_instance_and_does_not_leave_on_close():
    coordinator = FakeCoordinator({"t": 1})
    consumer = consumer_for(coordinator, **{"group.instance.id": "host-a"})
    try:
        consumer.subscribe(["t"])
        consumer._group.before_poll(1.0)
        assert all(j.get("group_instance_id") == "host-a" for j in coordinator.bodies("join_group"))
        assert coordinator.bodies("sync_group")[0]["group_instance_id"] == "host-a"
        coordinator.script["heartbeat"] = [ErrorCode.FENCED_INSTANCE_ID]
        consumer._group._heartbeat({"group_id": "g", "generation_id": 1, "member_id": "member-1"})
        with pytest.raises(FencedInstanceIdError):
            consumer._group.before_poll(0)
    finally:
        consumer.close()
    assert coordinator.bodies("leave_group") == []  # KIP-345: the session timeout hands the partitions on


def test_cooperative_sticky_revokes_a_moving_partition_first_and_gives_it_in_a_follow_up_rebalance():
    # Another member ("zz", ordered after ours) owned t-1 and t-2 in generation 1 and owns nothing after.
    coordinator = FakeCoordinator({"t": 4}, {"zz": Subscription(("t",), encode_user_data(COOPERATIVE_STICKY, 1))})
    consumer = consumer_for(coordinator, **{"partition.assignment.strategy": COOPERATIVE_STICKY})
    events = []
    try:
        consumer.subscribe(["t"], on_assign=lambda c, tps: events.append(("assign", [tp.partition for tp in tps])),
                           on_revoke=lambda c, tps: events.append(("revoke", [tp.partition for tp in tps])))
        consumer._group.before_poll(1.0)
        assert events == [("assign", [0, 2])]
        zz = decode_assignment(coordinator.assignments["zz"]).partitions
        assert zz == (("t", 1), ("t", 3))
        # zz now owns t-1 and t-3; a third member joins: our t-2 moves, held back until we revoked it.
        coordinator.phantoms = {
            "zz": Subscription(("t",), encode_user_data(COOPERATIVE_STICKY, 1), zz),
            "zzz": Subscription(("t",), encode_user_data(COOPERATIVE_STICKY, -1))}
        consumer._group._rejoin_reason = "test: a member joined"
        consumer._group.before_poll(1.0)
        # Generation 2: t-0 goes to zzz, held back from it while we own it; we revoke it and, in the same poll,
        # join again (generation 3), where nobody owns t-0 any more and zzz gets it.
        assert events[1:] == [("revoke", [0]), ("assign", []), ("assign", [])]
        assert [decode_assignment(a["zzz"]).partitions for a in coordinator.history[1:]] == [(), (("t", 0),)]
        assert coordinator.generation == 3 and consumer._group._rejoin_reason is None
        follow_up = coordinator.bodies("join_group")[-1]
        owned = decode_subscription(base64.b64decode(follow_up["protocols"][0]["metadata_b64"])).owned_partitions
        assert owned == (("t", 2),)  # cooperative: the owned partitions travel in the subscription
    finally:
        consumer.close()


def test_a_commit_refused_for_an_old_generation_raises_and_asks_for_a_rejoin():
    coordinator = FakeCoordinator({"t": 1})
    consumer = consumer_for(coordinator)
    try:
        consumer.subscribe(["t"])
        consumer._group.before_poll(1.0)
        coordinator.script["offset_commit"] = [ErrorCode.ILLEGAL_GENERATION]
        with pytest.raises(IllegalGenerationError):
            consumer.commit([TopicPartition("t", 0, 1)])
        assert consumer._group._rejoin_reason == "generation lost"
    finally:
        consumer.close()


def test_group_keys_are_checked_when_the_consumer_is_built():
    base = {"bootstrap.servers": "127.0.0.1:1"}
    with pytest.raises(InvalidConfigError, match="'enable.auto.commit' cannot be true without a 'group.id'"):
        Consumer({**base, "enable.auto.commit": "true"})
    with pytest.raises(InvalidConfigError, match="'heartbeat.interval.ms'.*below 'session.timeout.ms'"):
        Consumer({**base, "group.id": "g", "session.timeout.ms": "1000", "heartbeat.interval.ms": "1000"})
    with pytest.raises(InvalidConfigError, match="'partition.assignment.strategy'.*'sticky'"):
        Consumer({**base, "group.id": "g", "partition.assignment.strategy": "sticky"})
    with pytest.raises(InvalidConfigError, match="'max.poll.interval.ms'"):
        Consumer({**base, "group.id": "g", "max.poll.interval.ms": "0"})
    with pytest.raises(InvalidConfigError, match="'auto.commit.interval.ms'"):
        Consumer({**base, "group.id": "g", "auto.commit.interval.ms": "-1"})
    with pytest.raises(InvalidConfigError, match="'group.instance.id' needs a 'group.id'"):
        Consumer({**base, "group.instance.id": "a"})
    plain = Consumer(base)
    try:
        with pytest.raises(InvalidGroupIdError, match="set 'group.id'"):
            plain.subscribe(["t"])
        with pytest.raises(InvalidGroupIdError):
            plain.commit()
    finally:
        plain.close()
    member = Consumer({**base, "group.id": "g", "partition.assignment.strategy":
                       "org.apache.kafka.clients.consumer.RangeAssignor, cooperative-sticky"})
    try:
        assert member._group.settings.strategies == (RANGE, COOPERATIVE_STICKY)
        assert member._group.settings.protocol == "eager"
    finally:
        member.close()


def test_the_assignment_bytes_are_kafkas():
    data = encode_assignment(Assignment((("t", 0),)))
    assert data == b"\x00\x01" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x00" \
        + b"\xff\xff\xff\xff"


def test_an_answer_to_a_heartbeat_of_an_older_generation_does_not_undo_the_new_one():
    coordinator = FakeCoordinator({"t": 1})
    consumer = consumer_for(coordinator)
    try:
        consumer.subscribe(["t"])
        consumer._group.before_poll(1.0)
        consumer._group._rejoin_reason = "test"
        consumer._group.before_poll(1.0)
        assert consumer._group.generation_id == 2
        coordinator.script["heartbeat"] = [ErrorCode.ILLEGAL_GENERATION]
        consumer._group._heartbeat({"group_id": "g", "generation_id": 1, "member_id": "member-1"})  # sent before
        assert consumer._group.generation_id == 2 and consumer._group._rejoin_reason is None
        coordinator.script["heartbeat"] = [ErrorCode.ILLEGAL_GENERATION]
        consumer._group._heartbeat({"group_id": "g", "generation_id": 2, "member_id": "member-1"})
        assert consumer._group.generation_id == -1 and consumer._group._rejoin_reason == "generation lost"
    finally:
        consumer.close()


def test_unsubscribe_commits_revokes_and_leaves_and_commit_of_a_message_commits_the_next_offset():
    coordinator = FakeCoordinator({"t": 2})
    revoked = []
    consumer = consumer_for(coordinator)
    try:
        consumer.subscribe(["t"], on_revoke=lambda c, tps: revoked.append(sorted(tp.partition for tp in tps)))
        consumer._group.before_poll(1.0)
        with pytest.raises(InvalidRequestError, match="assign after subscribe"):
            consumer.assign([TopicPartition("t", 0)])
        record = SimpleNamespace(topic="t", partition=1, offset=41)
        assert consumer.commit(message=record) == [TopicPartition("t", 1, 42, "", None)]
        consumer._positions[("t", 0)], consumer._position_epochs[("t", 0)] = 7, 2
        assert consumer.position([TopicPartition("t", 0), TopicPartition("t", 1)]) == [
            TopicPartition("t", 0, 7, leader_epoch=2), TopicPartition("t", 1, OFFSET_INVALID)]
        consumer.unsubscribe()
        assert revoked == [[0, 1]] and consumer.assignment() == []
        assert coordinator.committed[("t", 0)] == (7, 2, "")  # auto commit before revoking
        assert coordinator.bodies("leave_group")[0]["members"][0]["reason"] == "unsubscribe"
        consumer.assign([TopicPartition("t", 0, 3)])  # after unsubscribe: manual assignment, standalone commits
        consumer.commit()
        body = coordinator.bodies("offset_commit")[-1]
        assert (body["generation_id"], body["member_id"], body["partitions"][0]["offset"]) == (-1, "", 3)
    finally:
        consumer.close()
