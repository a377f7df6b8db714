"""The group coordinator's shell in-process (broker/group/): appends, completions, loading, leadership.

A stand-in broker gives the coordinator a replica manager whose appends the test completes by hand, so
what the shell promises can be watched step by step: a commit is answered, and the held offsets change,
only once its append completed; a failed append changes nothing and answers the group error Kafka maps it
to; a partition being loaded answers COORDINATOR_LOAD_IN_PROGRESS and a lost one NOT_COORDINATOR; a load
replays the log (latest record per key, gaps skipped).
"""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

from ads_spark.broker.group import appends
from ads_spark.broker.group.coordinator import GroupCoordinator, subscribed_topics
from ads_spark.broker.group.loading import Waiters, read_records
from ads_spark.broker.group.offsets_topic import OFFSETS_TOPIC
from ads_spark.broker.metadata_cache import MetadataCache
from ads_spark.config import BrokerConfig
from ads_spark.errors import (
    CoordinatorLoadInProgressError, CoordinatorNotAvailableError, ErrorCode, NotCoordinatorError,
    NotLeaderOrFollowerError,
)
from ads_spark.protocol.records import RECORD_SCHEMA, BatchHeader
from ads_spark.replication import group_offsets as go
from ads_spark.replication import group_records as gr

BASE = {"broker.id": "1", "log.dirs": "/tmp/ads-unused", "zookeeper.connect": "127.0.0.1:1",
        "offsets.commit.timeout.ms": "2000"}


def test_subscribed_topics_reads_kafkas_consumer_subscription_and_gives_up_on_garbage():
    encoded = (1).to_bytes(2, "big") + (2).to_bytes(4, "big") + b"\x00\x01a" + b"\x00\x03b\xc3\xa9" + b"user-data"
    assert subscribed_topics(encoded) == frozenset({"a", "bé"})
    for garbage in (b"", b"\x00\x00\x00\x00\x00\x05\x00\x09ab", b"\x00\x00\x00\x00\x00\x01\x00\x01\xff"):
        assert subscribed_topics(garbage) is None


def test_append_errors_become_the_group_errors_kafka_answers():
    assert appends.group_error(ErrorCode.NONE) == ErrorCode.NONE
    assert appends.group_error(ErrorCode.NOT_ENOUGH_REPLICAS) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert appends.group_error(ErrorCode.REQUEST_TIMED_OUT) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert appends.group_error(ErrorCode.NOT_LEADER_OR_FOLLOWER) == ErrorCode.NOT_COORDINATOR
    assert appends.group_error(ErrorCode.RECORD_TOO_LARGE) == ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    assert appends.group_error(ErrorCode.CORRUPT_MESSAGE) == ErrorCode.UNKNOWN_SERVER_ERROR
    batch = appends.records_batch([(b"k1", b"v1"), (b"k2", None)], 1234)
    assert batch.column("key").to_pylist() == [b"k1", b"k2"] and batch.column("value").to_pylist() == [b"v1", None]


def test_waiters_are_bounded_and_a_late_reply_is_dropped():
    waiters = Waiters(limit=2)
    first, first_waiter = waiters.register()
    second, second_waiter = waiters.register()
    with pytest.raises(CoordinatorNotAvailableError, match="2 group requests are already waiting"):
        waiters.register()
    waiters.deliver(first, "answer")
    assert waiters.wait(first, first_waiter, 0) == "answer"
    assert waiters.wait(second, second_waiter, 0.01) is None  # bound passed: forgotten
    waiters.deliver(second, "late")
    assert waiters.count() == 0


# ---- the coordinator on a stand-in broker ----------------------------------------------------------------


class FakeLog:
    def __init__(self):
        self.batches: list[tuple[pa.RecordBatch, BatchHeader]] = []
        self.log_start_offset = 0
        self.log_end_offset = 0

    def append(self, records, gap: int = 0) -> None:
        base = self.log_end_offset + gap
        batch = pa.RecordBatch.from_arrays([
            pa.array(range(base, base + len(records)), pa.int64()), pa.array([0] * len(records), pa.timestamp("ms")),
            pa.array([k for k, _ in records], pa.binary()), pa.array([v for _, v in records], pa.binary()),
            pa.nulls(len(records), RECORD_SCHEMA.field("headers").type)], schema=RECORD_SCHEMA)
        self.batches.append((batch, BatchHeader(base, len(records), 0, 0)))
        self.log_end_offset = base + len(records)


class FakeReplica:
    def __init__(self, number: int, leader_epoch: int):
        self.topic, self.partition, self.leader_epoch, self.is_leader = OFFSETS_TOPIC, number, leader_epoch, True
        self.log = FakeLog()
        self.reads = 0
        self.read_gate = threading.Event()
        self.read_gate.set()

    def read(self, offset: int, end: int, max_bytes: int):
        self.read_gate.wait(10)
        self.reads += 1
        return [(b, h) for b, h in self.log.batches if h.next_offset > offset and h.base_offset < end][:1]


class FakeReplicaManager:
    def __init__(self):
        self.replicas: list[FakeReplica] = []
        self.appended: list[tuple[int, list, object]] = []  # (partition, records, complete)

    def partitions(self):
        return list(self.replicas)

    def produce(self, topic, partition_id, batch, *, acks, timeout_ms, max_message_bytes, producer, complete):
        assert topic == OFFSETS_TOPIC and acks == -1
        records = list(zip(batch.column("key").to_pylist(), batch.column("value").to_pylist()))
        replica = next(r for r in self.replicas if r.partition == partition_id)
        if not replica.is_leader:
            raise NotLeaderOrFollowerError("not the leader")
        self.appended.append((partition_id, records, complete))

    def acknowledge(self, index: int, error=None) -> None:
        partition, records, complete = self.appended[index]
        replica = next(r for r in self.replicas if r.partition == partition)
        base = replica.log.log_end_offset
        if error is None:
            replica.log.append(records)
        complete(base, error)


class FakeBroker:
    def __init__(self):
        self.config = BrokerConfig(BASE)
        self.broker_id = 1
        self.zk = None
        self.metadata = MetadataCache()
        self.metadata.apply_update({"controller_epoch": 1, "brokers": [], "partitions": [
            {"topic": OFFSETS_TOPIC, "partition": 0, "leader": 1, "leader_epoch": 3, "isr": [1], "replicas": [1]}]})
        self.replica_manager = FakeReplicaManager()

    def topic_config(self, topic):
        return {"max.message.bytes": 1 << 20}


@pytest.fixture
def shell():
    broker = FakeBroker()
    coordinator = GroupCoordinator(broker)
    coordinator.completions.start()
    yield broker, coordinator
    coordinator.completions.stop()


class _AnyTime:
    def __eq__(self, other):
        return isinstance(other, int)


ANY_TIME = _AnyTime()


def _commit(coordinator, group_id, offset):
    return coordinator.commit(go.CommitRequest(group_id, -1, "", None, (go.CommitPartition("t", 0, offset, 5, "m"),)))


def _in_thread(func):
    result: list = []
    thread = threading.Thread(target=lambda: result.append(func()))
    thread.start()
    return thread, result


def _wait_for(predicate, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_a_commit_is_answered_and_applied_only_once_its_append_completed(shell):
    broker, coordinator = shell
    replica = FakeReplica(0, 3)
    replica.log.append([gr.offset_commit_record("g", "t", 0, go.OffsetAndMetadata(10, 1, "old", 0))])
    broker.replica_manager.replicas.append(replica)
    coordinator.sync_leadership()
    assert coordinator.fetch_offsets("g", None, False)[0][1].offset == 10  # loaded from the log
    thread, result = _in_thread(lambda: _commit(coordinator, "g", 11))
    _wait_for(lambda: broker.replica_manager.appended)
    assert not result and coordinator.fetch_offsets("g", None, False)[0][1].offset == 10
    # require_stable: a commit in flight makes the partition unstable (KIP-447)
    assert coordinator.fetch_offsets("g", None, True)[0][2] == ErrorCode.UNSTABLE_OFFSET_COMMIT
    broker.replica_manager.acknowledge(0)
    thread.join(5)
    assert result == [(ErrorCode.NONE, {("t", 0): ErrorCode.NONE})]
    assert coordinator.fetch_offsets("g", None, True)[0][1:] == (go.OffsetAndMetadata(11, 5, "m", ANY_TIME), ErrorCode.NONE)


def test_a_failed_commit_changes_nothing_and_answers_kafkas_group_error(shell):
    broker, coordinator = shell
    broker.replica_manager.replicas.append(FakeReplica(0, 3))
    coordinator.sync_leadership()
    thread, result = _in_thread(lambda: _commit(coordinator, "g", 11))
    _wait_for(lambda: broker.replica_manager.appended)
    broker.replica_manager.acknowledge(0, NotLeaderOrFollowerError("lost it"))
    thread.join(5)
    assert result == [(ErrorCode.NONE, {("t", 0): ErrorCode.NOT_COORDINATOR})]
    assert coordinator.fetch_offsets("g", None, False) == []


def test_a_loading_partition_answers_load_in_progress_and_a_lost_one_not_coordinator(shell):
    broker, coordinator = shell
    replica = FakeReplica(0, 3)
    replica.log.append([gr.offset_commit_record("g", "t", 0, go.OffsetAndMetadata(1, -1, "", 0))])
    replica.log.append([gr.offset_commit_record("g", "t", 0, go.OffsetAndMetadata(2, -1, "", 0))], gap=5)
    replica.read_gate.clear()
    broker.replica_manager.replicas.append(replica)
    loader, _ = _in_thread(coordinator.sync_leadership)
    _wait_for(lambda: coordinator._partitions)
    with pytest.raises(CoordinatorLoadInProgressError):
        coordinator.owned("g")
    replica.read_gate.set()
    loader.join(5)
    assert coordinator.fetch_offsets("g", None, False)[0][1].offset == 2  # the latest, across the gap
    replica.leader_epoch = 4  # a new leadership: unloaded and loaded again
    coordinator.sync_leadership()
    assert coordinator._partitions[0].leader_epoch == 4
    replica.is_leader = False
    coordinator.sync_leadership()
    with pytest.raises(NotCoordinatorError, match="not the coordinator of group 'g'"):
        coordinator.owned("g")


def test_read_records_skips_what_is_below_the_asked_offset_and_null_keys():
    replica = FakeReplica(0, 1)
    replica.log.append([(b"a", b"1"), (None, b"x"), (b"b", None)])
    assert list(read_records(replica)) == [(b"a", b"1"), (b"b", None)]


class FakeSecurity:
    """The broker's security state as authorization reads it: the real authorizer over ``bindings``."""

    authorizer_enabled = True

    def __init__(self, *bindings):
        from ads_spark.security import authorizer
        self._authorizer = authorizer
        self.acls = authorizer.Acls(bindings)

    def authorize(self, ctx, operation, resource):
        return self._authorizer.authorize(self.acls, self._authorizer.RequestContext(ctx.principal, ctx.host),
                                          operation, resource)


def test_group_answers_leave_out_or_refuse_what_the_caller_may_not_describe(shell):
    from ads_spark.broker.rpc import call_context
    from ads_spark.broker.rpc.group_handlers import GroupHandlers
    from ads_spark.security.authorizer import AclBinding

    broker, coordinator = shell
    replica = FakeReplica(0, 3)
    replica.log.append([gr.offset_commit_record(group, topic, 0, go.OffsetAndMetadata(offset, -1, "", 0))
                        for group, topic, offset in (("seen", "payments", 1), ("seen", "secret", 2),
                                                     ("hidden", "payments", 3))])
    broker.replica_manager.replicas.append(replica)
    coordinator.sync_leadership()
    broker.security = FakeSecurity(*(AclBinding(kind, name, "LITERAL", "User:bob", "*", "Describe", "Allow")
                                     for kind, name in (("Group", "seen"), ("Topic", "payments"))))
    broker.group_coordinator = coordinator
    handlers = GroupHandlers(broker).handlers()
    with call_context.using(call_context.CallContext("User:bob", "10.0.0.1", "PLAINTEXT", "PLAINTEXT")):
        assert [g["group_id"] for g in handlers["list_groups"]({})["groups"]] == ["seen"]
        described = handlers["describe_groups"]({"groups": ["seen", "hidden"]})["groups"]
        assert [(d["group_id"], d["error_code"]) for d in described] == [
            ("seen", 0), ("hidden", ErrorCode.GROUP_AUTHORIZATION_FAILED)]
        everything = handlers["offset_fetch"]({"group_id": "seen"})["partitions"]
        assert [(p["topic"], p["offset"]) for p in everything] == [("payments", 1)]  # secret left out
        named = handlers["offset_fetch"]({"group_id": "seen", "partitions": [
            {"topic": "payments", "partition": 0}, {"topic": "secret", "partition": 0}]})["partitions"]
        assert [(p["topic"], p["offset"], p["error_code"]) for p in named] == [
            ("payments", 1, 0), ("secret", -1, ErrorCode.TOPIC_AUTHORIZATION_FAILED)]
        deleted = handlers["delete_groups"]({"groups": ["seen"]})["groups"]
        assert deleted == [{"group_id": "seen", "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
                            "message": "not authorized to Delete group 'seen'"}]
    assert broker.replica_manager.appended == []  # nothing refused was written
