"""The broker's Partition shell over a real PartitionLog: it executes the core's effects faithfully.

No ZooKeeper and no network: ISR proposals are captured and answered by the
test, produce answers are collected from callbacks. Covers acks=all waiting for
a follower, ISR shrink by lag and its ZooKeeper answer, idempotent retries
(recent and older than the kept window), a follower truncating at the epoch
divergence point, a corrupt fetched batch refused without change, and the
producer-state snapshot surviving a reopen.
"""

from __future__ import annotations

import dataclasses

import pytest

from ads_spark.broker.log import LeaderEpochFile, LogConfig
from ads_spark.broker.replica.partition import Partition, PartitionRole
from ads_spark.errors import CorruptMessageError, NotEnoughReplicasError
from ads_spark.replication import dedupe
from ads_spark.replication.state import PartitionConfig
from tests.fixtures.logs import open_log, produce_batch, values_for

pytestmark = pytest.mark.timeout(30)


class Harness:
    def __init__(self, directory, broker_id=1, min_isr=2, lag_ms=1000):
        self.directory = directory
        self.proposals = []
        self.answers = []
        self.partition = self._open(broker_id, min_isr, lag_ms)

    def _open(self, broker_id, min_isr, lag_ms):
        log = open_log(self.directory, LogConfig(), clean_shutdown=True)
        epochs = LeaderEpochFile(self.directory / "leader-epoch-checkpoint")
        config = PartitionConfig(min_insync_replicas=min_isr, replica_lag_time_max_ms=lag_ms)
        return Partition("t", 0, "id", log, epochs, broker_id, config, high_watermark_checkpoint=0,
                         isr_sender=lambda partition, proposal: self.proposals.append(proposal))

    def reopen(self, **kwargs):
        self.partition.log.close()
        self.partition = self._open(self.partition.local_broker_id, 2, 1000)

    def produce(self, values, acks=-1, producer=(-1, -1, -1), now_ms=0):
        self.partition.produce(produce_batch(values), acks=acks, timeout_ms=5000, max_message_bytes=1 << 20,
                               now_ms=now_ms, producer=producer,
                               complete=lambda base, error: self.answers.append((base, error)))


def lead(harness, isr=(1, 2, 3), epoch=0, partition_epoch=0, now_ms=0):
    role = PartitionRole(leader_id=1, leader_epoch=epoch, partition_epoch=partition_epoch, isr=tuple(isr),
                         replicas=(1, 2, 3))
    assert harness.partition.apply_leader_and_isr(role, now_ms) is None


def test_acks_all_waits_for_every_isr_member_then_answers(tmp_path):
    h = Harness(tmp_path / "t-0")
    lead(h)
    h.produce([b"a", b"b"])
    assert h.answers == [] and h.partition.log.log_end_offset == 2
    h.partition.on_follower_fetch(2, 10, 0, 2, 0, now_ms=1)
    assert h.answers == [] and h.partition.high_watermark == 0  # broker 3 has not fetched yet
    h.partition.on_follower_fetch(3, 11, 0, 2, 0, now_ms=2)
    assert h.answers == [(0, None)] and h.partition.high_watermark == 2


def test_lagging_follower_is_proposed_out_and_the_answer_applies(tmp_path):
    h = Harness(tmp_path / "t-0", lag_ms=1000)
    lead(h)
    h.produce([b"a"])
    h.partition.on_follower_fetch(2, 10, 0, 1, 0, now_ms=1990)
    h.partition.tick(2000)  # broker 3 never fetched: out of sync
    assert len(h.proposals) == 1 and h.proposals[0].proposed.isr == (1, 2)
    accepted = dataclasses.replace(h.proposals[0].proposed, partition_epoch=1)
    h.partition.on_isr_answer(accepted, None, 2001)
    assert h.partition.state.isr == frozenset({1, 2}) and h.partition.high_watermark == 1
    assert h.answers == [(0, None)]


def test_below_min_isr_refuses_before_append_and_changes_nothing(tmp_path):
    h = Harness(tmp_path / "t-0", min_isr=2)
    lead(h, isr=(1,))
    h.produce([b"a"])
    assert isinstance(h.answers[0][1], NotEnoughReplicasError)
    assert h.partition.log.log_end_offset == 0


def test_idempotent_retries_get_original_offsets_even_past_the_kept_window(tmp_path):
    h = Harness(tmp_path / "t-0", min_isr=1)
    lead(h, isr=(1,))
    for sequence in range(7):  # seven one-record batches from producer 42
        h.produce([b"v%d" % sequence], acks=1, producer=(42, 0, sequence))
    h.produce([b"v2"], acks=1, producer=(42, 0, 2))  # within the last five kept: its own offset
    h.produce([b"v0"], acks=1, producer=(42, 0, 0))  # older than the window: acknowledged, not appended
    assert [base for base, _ in h.answers] == [0, 1, 2, 3, 4, 5, 6, 2, dedupe.UNKNOWN_OFFSET]
    assert h.partition.log.log_end_offset == 7


def test_producer_snapshot_survives_reopen(tmp_path):
    h = Harness(tmp_path / "t-0", min_isr=1)
    lead(h, isr=(1,))
    for sequence in range(3):
        h.produce([b"v%d" % sequence], acks=1, producer=(7, 0, sequence))
    h.partition.write_producer_snapshot()
    h.produce([b"v3"], acks=1, producer=(7, 0, 3))  # after the snapshot: replayed from the log
    before = h.partition.state.producers
    h.reopen()
    assert (tmp_path / "t-0" / "producer-state.snapshot").exists()
    assert h.partition.state.producers == before


def test_follower_truncates_at_divergence_and_refuses_corrupt_batches(tmp_path):
    leader_dir, follower_dir = tmp_path / "leader", tmp_path / "follower"
    leader = Harness(leader_dir, broker_id=1, min_isr=1)
    lead(leader, isr=(1, 2), epoch=1)
    leader.produce(values_for(0, 3), acks=1)
    follower = Harness(follower_dir, broker_id=2)
    # The follower once led epoch 0 and wrote 5 records the new leader never had.
    follower.partition.apply_leader_and_isr(PartitionRole(2, 0, 0, (2,), (1, 2)), 0)
    follower.produce(values_for(100, 5), acks=1)
    follower.partition.apply_leader_and_isr(PartitionRole(1, 1, 1, (1, 2), (1, 2)), 0)
    request = follower.partition.fetch_request()
    reply = leader.partition.on_follower_fetch(2, 5, 1, request.fetch_offset, request.last_fetched_epoch, 1)
    assert reply.diverging_epoch is not None and reply.diverging_epoch[1] == 0  # leader has no epoch 0
    meta = {"leader_epoch": 1, "error_code": 0, "high_watermark": reply.high_watermark, "log_start_offset": 0,
            "diverging_epoch": {"epoch": reply.diverging_epoch[0], "end_offset": reply.diverging_epoch[1]}}
    follower.partition.on_fetch_response(request, meta, [], 2)
    assert follower.partition.log.log_end_offset == 0  # truncated to the divergence point, not a stale HW
    request = follower.partition.fetch_request()
    batches = leader.partition.read(0, 3, 1 << 20)
    corrupt = [(batches[0][0], dataclasses.replace(batches[0][1], crc=batches[0][1].crc ^ 1))]
    meta = {"leader_epoch": 1, "error_code": 0, "high_watermark": 0, "log_start_offset": 0}
    with pytest.raises(CorruptMessageError):
        follower.partition.on_fetch_response(request, meta, corrupt, 3)
    assert follower.partition.log.log_end_offset == 0
    follower.partition.on_fetch_response(request, meta, batches, 3)
    assert follower.partition.log.log_end_offset == 3


def test_producer_snapshot_above_a_truncation_is_not_loaded_after_a_restart(tmp_path):
    # The follower snapshotted producer 7's batch, which the new leader never had: truncated, then the log
    # grew past the snapshot's offset with producer 9's batch and was flushed, and the broker restarted.
    leader = Harness(tmp_path / "leader", broker_id=1, min_isr=1)
    lead(leader, isr=(1, 2), epoch=1)
    leader.produce(values_for(0, 4), acks=1, producer=(9, 0, 0))
    follower = Harness(tmp_path / "follower", broker_id=2, min_isr=1)
    follower.partition.apply_leader_and_isr(PartitionRole(2, 0, 0, (2,), (1, 2)), 0)
    follower.produce(values_for(100, 3), acks=1, producer=(7, 0, 0))
    follower.partition.write_producer_snapshot()  # at offset 3
    follower.partition.apply_leader_and_isr(PartitionRole(1, 1, 1, (1, 2), (1, 2)), 0)
    request = follower.partition.fetch_request()
    reply = leader.partition.on_follower_fetch(2, 5, 1, request.fetch_offset, request.last_fetched_epoch, 1)
    follower.partition.on_fetch_response(request, {"leader_epoch": 1, "error_code": 0, "high_watermark": 0,
                                                   "log_start_offset": 0, "diverging_epoch": {
                                                       "epoch": reply.diverging_epoch[0],
                                                       "end_offset": reply.diverging_epoch[1]}}, [], 2)
    request = follower.partition.fetch_request()
    follower.partition.on_fetch_response(request, {"leader_epoch": 1, "error_code": 0, "high_watermark": 4,
                                                   "log_start_offset": 0}, leader.partition.read(0, 4, 1 << 20), 3)
    live = follower.partition.state.producers
    follower.reopen()
    assert follower.partition.state.producers == live  # producer 7's truncated batch is not a "duplicate" now
    assert 7 not in follower.partition.state.producers.entries
