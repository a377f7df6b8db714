"""DeleteRecords in the broker's Partition shell over real PartitionLogs (``Partition.delete_records`` on the
leader, ``_follow_log_start`` on a follower): the leader's log start moves to the offset (-1: the HW), never
past the HW and never back; a follower's follows the leader's from its next fetch, up to its own HW; a
replica that does not lead refuses. The Kafka path to it is tests/integration/test_kafka_groups_admin.py."""

from __future__ import annotations

import pytest

from ads_spark.broker.log import LeaderEpochFile, LogConfig
from ads_spark.broker.replica.partition import Partition, PartitionRole
from ads_spark.errors import NotLeaderOrFollowerError, OffsetOutOfRangeError
from ads_spark.replication.state import PartitionConfig
from tests.fixtures.logs import open_log, produce_batch, values_for

pytestmark = pytest.mark.timeout(30)


def replica(directory, broker_id: int) -> Partition:
    log = open_log(directory, LogConfig(), clean_shutdown=True)
    epochs = LeaderEpochFile(directory / "leader-epoch-checkpoint")
    return Partition("t", 0, "id", log, epochs, broker_id,
                     PartitionConfig(min_insync_replicas=1, replica_lag_time_max_ms=30_000),
                     high_watermark_checkpoint=0, isr_sender=lambda partition, proposal: None)


def produce(partition: Partition, values) -> None:
    partition.produce(produce_batch(values), acks=1, timeout_ms=5000, max_message_bytes=1 << 20, now_ms=0,
                      producer=(-1, -1, -1), complete=lambda base, error: None)


@pytest.fixture
def pair(tmp_path):
    """Leader 1 and follower 2 of epoch 1 with 6 records in 3 batches, all replicated and committed (HW 6)."""
    leader, follower = replica(tmp_path / "leader", 1), replica(tmp_path / "follower", 2)
    role = PartitionRole(leader_id=1, leader_epoch=1, partition_epoch=0, isr=(1, 2), replicas=(1, 2))
    assert leader.apply_leader_and_isr(role, 0) is None
    follower.apply_leader_and_isr(role, 0)
    for start in (0, 2, 4):
        produce(leader, values_for(start, 2))
    fetch(leader, follower, now_ms=1)
    leader.on_follower_fetch(2, 5, 1, 6, 1, 2)
    assert leader.high_watermark == 6
    return leader, follower


def fetch(leader: Partition, follower: Partition, now_ms: int) -> None:
    request = follower.fetch_request()
    reply = leader.on_follower_fetch(2, 5, 1, request.fetch_offset, request.last_fetched_epoch, now_ms)
    meta = {"leader_epoch": 1, "error_code": 0, "high_watermark": reply.high_watermark,
            "log_start_offset": leader.state.log_start_offset}
    follower.on_fetch_response(request, meta, leader.read(request.fetch_offset, leader.log_end_offset, 1 << 20),
                               now_ms)


def test_the_leaders_log_start_moves_to_the_offset_never_past_the_hw_never_back(pair):
    leader, _ = pair
    assert leader.delete_records(3, now_ms=10) == 3
    assert (leader.log.log_start_offset, leader.state.log_start_offset) == (3, 3)
    with pytest.raises(OffsetOutOfRangeError):
        leader.read(2, 6, 1 << 20)
    assert leader.read(3, 6, 1 << 20)  # the batch holding 3 is still served whole
    with pytest.raises(OffsetOutOfRangeError):
        leader.delete_records(7, now_ms=11)
    assert leader.delete_records(1, now_ms=12) == 3  # below the start: nothing changes
    assert leader.delete_records(-1, now_ms=13) == 6  # -1: up to the HW
    assert leader.log.log_start_offset == 6


def test_a_follower_follows_the_leaders_log_start_from_its_next_fetch(pair):
    leader, follower = pair
    assert follower.log.log_start_offset == 0
    with pytest.raises(NotLeaderOrFollowerError):
        follower.delete_records(4, now_ms=10)
    leader.delete_records(4, now_ms=10)
    fetch(leader, follower, now_ms=11)
    assert (follower.log.log_start_offset, follower.state.log_start_offset) == (4, 4)


def test_a_follower_behind_moves_its_start_only_up_to_its_own_hw(tmp_path):
    leader, follower = replica(tmp_path / "leader", 1), replica(tmp_path / "follower", 2)
    role = PartitionRole(leader_id=1, leader_epoch=1, partition_epoch=0, isr=(1,), replicas=(1, 2))
    leader.apply_leader_and_isr(role, 0)
    follower.apply_leader_and_isr(role, 0)
    produce(leader, values_for(0, 4))
    produce(leader, values_for(4, 4))
    assert leader.high_watermark == 8  # ISR of one: committed at once
    request = follower.fetch_request()
    leader.on_follower_fetch(2, 5, 1, 0, -1, 1)
    follower.on_fetch_response(request, {"leader_epoch": 1, "error_code": 0, "high_watermark": 2,
                                         "log_start_offset": 0}, leader.read(0, 4, 1 << 20), 1)
    leader.delete_records(4, now_ms=2)
    request = follower.fetch_request()
    # An answer whose HW (3) lags the leader's log start (4), e.g. read before the delete: the follower holds
    # 0-3, so it is not behind the start (no restart there), and it never moves its start past its own HW.
    follower.on_fetch_response(request, {"leader_epoch": 1, "error_code": 0, "high_watermark": 3,
                                         "log_start_offset": 4}, [], 3)
    assert follower.state.high_watermark == 3 and follower.state.log_start_offset == 3
    assert follower.log.log_start_offset == 3
    request = follower.fetch_request()
    follower.on_fetch_response(request, {"leader_epoch": 1, "error_code": 0, "high_watermark": 8,
                                         "log_start_offset": 4}, leader.read(4, 8, 1 << 20), 4)
    assert (follower.state.log_start_offset, follower.log.log_start_offset, follower.log_end_offset) == (4, 4, 8)
