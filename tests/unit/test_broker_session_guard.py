"""SessionGuard: a broker never acts as leader on a ZooKeeper session it may have lost (issue #20, finding 2).

A fake session (its listener called by the test, as kazoo's thread would) over a
real ReplicaManager and Partition: cut off longer than the fence delay, the
broker refuses produces; back on the same session it accepts them again; after
an expiry each partition waits for the controller's leader_and_isr; a dead
kazoo connection thread is reported as fatal, once.
"""

from __future__ import annotations

import pytest

from ads_spark.broker.zk import membership
from ads_spark.broker.log import LeaderEpochFile, LogConfig
from ads_spark.broker.zk.membership import SessionGuard
from ads_spark.broker.replica.partition import Partition, PartitionRole
from ads_spark.broker.replica.replica_manager import ReplicaManager
from ads_spark.errors import NotLeaderOrFollowerError
from ads_spark.replication.state import PartitionConfig
from tests.fixtures.logs import open_log, produce_batch

pytestmark = pytest.mark.timeout(30)

SESSION_TIMEOUT_MS = 3000
ROLE = PartitionRole(leader_id=1, leader_epoch=0, partition_epoch=0, isr=(1,), replicas=(1,))


class FakeSession:
    def __init__(self):
        self.listeners = []
        self.problem = None

    def add_session_listener(self, listener):
        self.listeners.append(listener)

    def connection_thread_problem(self):
        return self.problem

    def state(self, name):  # what kazoo's thread does
        for listener in self.listeners:
            listener(name)


class FakeClock:
    now_s = 100.0

    @classmethod
    def monotonic(cls):
        return cls.now_s


@pytest.fixture
def setup(tmp_path, monkeypatch):
    monkeypatch.setattr(membership, "time", FakeClock)
    replicas = ReplicaManager(1)
    log = open_log(tmp_path / "t-0", LogConfig(), clean_shutdown=True)
    partition = Partition("t", 0, "id", log, LeaderEpochFile(tmp_path / "t-0" / "leader-epoch-checkpoint"), 1,
                          PartitionConfig(min_insync_replicas=1), high_watermark_checkpoint=0)
    replicas.add(partition)
    assert partition.apply_leader_and_isr(ROLE, 0) is None
    session, fatal = FakeSession(), []
    guard = SessionGuard(session, replicas, fatal.append, SESSION_TIMEOUT_MS)
    yield session, guard, replicas, partition, fatal
    log.close()


def _produce(replicas):
    answers = []
    replicas.produce("t", 0, produce_batch([b"v"]), acks=1, timeout_ms=1000, max_message_bytes=1 << 20,
                     producer=(-1, -1, -1), complete=lambda base, error: answers.append(error))
    assert answers == [None]


def test_cut_off_too_long_refuses_produces_until_the_same_session_resumes(setup):
    session, guard, replicas, _, _ = setup
    assert guard.fence_after_s == pytest.approx(1.0)
    session.state("suspended")
    FakeClock.now_s += 0.9
    guard.check()
    _produce(replicas)  # not yet: the session cannot have expired
    FakeClock.now_s += 0.2
    guard.check()
    with pytest.raises(NotLeaderOrFollowerError, match="no ZooKeeper connection for 1.1s"):
        _produce(replicas)
    session.state("connected")  # the same session: nobody else can have been elected
    guard.check()
    _produce(replicas)


def test_after_an_expiry_each_partition_waits_for_the_controller(setup):
    session, guard, replicas, partition, _ = setup
    session.state("lost")  # fenced at once, before the next tick
    with pytest.raises(NotLeaderOrFollowerError, match="expired"):
        _produce(replicas)
    session.state("connected")
    guard.check()
    assert replicas.cut_off_reason is None
    with pytest.raises(NotLeaderOrFollowerError, match="until the controller confirms"):
        _produce(replicas)
    partition.apply_leader_and_isr(ROLE, 1)  # the controller re-sends the state: "already applied"
    _produce(replicas)


def test_a_dead_connection_thread_is_fatal_once_and_fences(setup):
    session, guard, replicas, _, fatal = setup
    guard.check()
    assert fatal == []
    session.problem = "kazoo's ZooKeeper connection thread has died"
    guard.check()
    guard.check()
    assert fatal == ["kazoo's ZooKeeper connection thread has died"]
    with pytest.raises(NotLeaderOrFollowerError):
        _produce(replicas)
