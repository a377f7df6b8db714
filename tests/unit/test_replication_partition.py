"""The dispatcher: leader/follower events, HW, ISR, acks x min.insync.replicas (reference 001's matrix)."""

from dataclasses import replace
import pytest

from ads_spark.errors import ErrorCode
from ads_spark.replication import hw, isr
from ads_spark.replication import partition as P
from ads_spark.replication.state import LeaderAndIsr, PartitionConfig, Role

REPLICAS = (1, 2, 3)


def leader(min_isr=2, isr_=(1, 2, 3), leo=0, now=0, lag_ms=100, replicas=REPLICAS, observers=()):
    s = P.initial_state("t", 0, 1, PartitionConfig(min_insync_replicas=min_isr, replica_lag_time_max_ms=lag_ms),
                        log_end_offset=leo, epoch_pairs=((0, 0),) if leo else ())
    s, _ = P.step(s, P.BecomeLeader(LeaderAndIsr(1, 1, isr_, (), 5), replicas, observers, now))
    return s


def fetch(s, replica, offset, now=0, epoch=1, broker_epoch=10, last_epoch=1):
    return P.step(s, P.FollowerFetch(replica, broker_epoch, epoch, offset, last_epoch, now))


def produce(s, acks, n=1, now=0, rid=1, **kw):
    return P.step(s, P.Produce(rid, acks, n, 1000, now, **kw))


def of(effects, kind):
    return [e for e in effects if isinstance(e, kind)]


# ---- reference 001's acks x min.insync.replicas matrix, one test per row

def test_matrix_acks0_any_min_isr_appends_and_never_answers():
    s = leader(min_isr=3, isr_=(1,))
    s, eff = produce(s, 0)
    assert of(eff, P.AppendAsLeader) and not of(eff, P.ProduceCompleted)


def test_matrix_acks1_answers_after_leader_append_only():
    s = leader(min_isr=3, isr_=(1, 2))
    s, eff = produce(s, 1)
    assert of(eff, P.ProduceCompleted)[0].error is ErrorCode.NONE
    assert s.high_watermark == 0  # not committed: the ISR is below min ISR (KIP-966)


def test_matrix_acks_all_min_isr1_isr_shrunk_to_leader_is_acks1():
    s = leader(min_isr=1, isr_=(1,))
    s, eff = produce(s, -1, n=3)
    assert of(eff, P.ProduceCompleted)[0].error is ErrorCode.NONE and s.high_watermark == 3


def test_matrix_acks_all_min_isr2_rf3_rejects_below_two_and_waits_for_isr():
    s = leader(min_isr=2, isr_=(1,))
    _, eff = produce(s, -1)
    assert of(eff, P.ProduceCompleted)[0].error is ErrorCode.NOT_ENOUGH_REPLICAS and not of(eff, P.AppendAsLeader)
    s = leader(min_isr=2, isr_=(1, 2))
    s, eff = produce(s, -1, n=2)
    assert not of(eff, P.ProduceCompleted)
    s, eff = fetch(s, 2, 2)
    assert of(eff, P.ProduceCompleted)[0] == P.ProduceCompleted(1, ErrorCode.NONE, 0)


def test_matrix_acks_all_min_isr3_rf3_needs_all_three():
    s = leader(min_isr=3, isr_=(1, 2))
    _, eff = produce(s, -1)
    assert of(eff, P.ProduceCompleted)[0].error is ErrorCode.NOT_ENOUGH_REPLICAS
    s = leader(min_isr=3)
    s, _ = produce(s, -1)
    s, eff = fetch(s, 2, 1)
    assert not of(eff, P.ProduceCompleted)
    s, eff = fetch(s, 3, 1)
    assert of(eff, P.ProduceCompleted)[0].error is ErrorCode.NONE


# ---- after append

def test_not_enough_replicas_after_append_when_isr_shrinks():
    s = leader(min_isr=2, isr_=(1, 2))
    s, _ = produce(s, -1)
    s, eff = P.step(s, P.Tick(500))  # follower 2 lagged: shrink proposed
    prop = of(eff, P.ProposeIsr)[0]
    assert prop.proposed.isr == (1,) and prop.proposed.elr == (2,) and prop.expected_partition_epoch == 5
    s, eff = P.step(s, P.IsrUpdateAccepted(LeaderAndIsr(1, 1, (1,), (2,), 6), 501))
    assert of(eff, P.ProduceCompleted)[0].error is ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


def test_request_timed_out_at_deadline():
    s = leader(min_isr=2)
    s, _ = P.step(s, P.Produce(1, -1, 1, 50, 0))
    s, eff = fetch(s, 2, 0, now=40)
    s, eff = fetch(s, 3, 0, now=40)
    s, eff = P.step(s, P.Tick(60))
    assert of(eff, P.ProduceCompleted)[0].error is ErrorCode.REQUEST_TIMED_OUT


def test_losing_leadership_fails_pending():
    s = leader()
    s, _ = produce(s, -1)
    s, eff = P.step(s, P.BecomeFollower(LeaderAndIsr(2, 2, (2, 3), (), 6), REPLICAS, (), 1))
    assert of(eff, P.ProduceCompleted)[0].error is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert s.role is Role.FOLLOWER and not s.pending_produces


def test_idempotent_retry_answers_original_offset():
    s = leader(min_isr=1, isr_=(1,))
    s, eff = produce(s, 1, n=2, producer_id=9, producer_epoch=0, base_sequence=0)
    s, eff = produce(s, 1, n=2, rid=2, producer_id=9, producer_epoch=0, base_sequence=0)
    assert not of(eff, P.AppendAsLeader) and of(eff, P.ProduceCompleted)[0].base_offset == 0
    s, eff = produce(s, 1, rid=3, producer_id=9, producer_epoch=0, base_sequence=5)
    assert of(eff, P.ProduceCompleted)[0].error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


# ---- HW

def test_hw_is_min_over_isr_and_never_goes_back():
    s = leader(min_isr=1)
    s, _ = produce(s, 1, n=5)
    s, _ = fetch(s, 2, 5)
    assert s.high_watermark == 0  # 3 has not fetched in this epoch: its LEO is unknown
    s, _ = fetch(s, 3, 3)
    assert s.high_watermark == 3
    assert hw.candidate_high_watermark(1, 5, frozenset({1, 2, 3}), s.progress) == 3
    s, eff = fetch(s, 3, 1, broker_epoch=11)  # 3 restarted and lost its tail
    assert s.high_watermark == 3
    assert of(eff, P.ProposeIsr)[0].proposed.isr == (1, 2)


def test_hw_frozen_below_min_isr():
    s = leader(min_isr=2, isr_=(1,))
    s, _ = produce(s, 1, n=4)
    assert s.high_watermark == 0


def test_hw_uses_maximal_isr_while_expand_in_flight():
    s = leader(min_isr=1, isr_=(1, 2))
    s, _ = produce(s, 1, n=4)
    s, _ = fetch(s, 2, 4)
    assert s.high_watermark == 4
    s, _ = produce(s, 1, n=2)
    s, eff = fetch(s, 3, 4, last_epoch=1)
    assert of(eff, P.ProposeIsr)[0].proposed.isr == (1, 2, 3)
    s, _ = fetch(s, 2, 6)
    assert s.high_watermark == 4  # 3 (proposed) is at 4


# ---- ISR

def test_expand_requires_current_epoch_and_hw():
    s = leader(min_isr=1, isr_=(1,), leo=3)
    assert s.leader_epoch_start_offset == 3
    s, eff = fetch(s, 2, 2, last_epoch=0)
    assert not of(eff, P.ProposeIsr)
    s, eff = fetch(s, 2, 3, last_epoch=0)
    assert of(eff, P.ProposeIsr)


def test_observers_never_join():
    s = leader(min_isr=1, isr_=(1,), replicas=(1, 2), observers=(4,))
    s, eff = fetch(s, 4, 0, last_epoch=-1)
    assert not of(eff, P.ProposeIsr) and not isr.may_join(s, 4)
    assert of(eff, P.ReplyFetch)[0].error is ErrorCode.NONE  # it is served as a follower is
    s, _ = produce(s, -1, n=3)
    assert s.high_watermark == 3  # an observer that has not fetched holds neither the HW nor acks=all
    s, eff = fetch(s, 4, 3)
    assert not of(eff, P.ProposeIsr) and s.progress[4].log_end_offset == 3 and s.isr == frozenset({1})


def test_stale_broker_epoch_never_readmitted():
    s = leader(min_isr=1, isr_=(1,))
    s, _ = fetch(s, 2, 0, broker_epoch=10, last_epoch=-1)
    s, eff = fetch(s, 2, 0, broker_epoch=9, last_epoch=-1)
    assert of(eff, P.ReplyFetch)[0].error is ErrorCode.STALE_BROKER_EPOCH


def test_leader_epoch_fencing_of_fetches():
    s = leader()
    assert of(fetch(s, 2, 0, epoch=0)[1], P.ReplyFetch)[0].error is ErrorCode.FENCED_LEADER_EPOCH
    assert of(fetch(s, 2, 0, epoch=2)[1], P.ReplyFetch)[0].error is ErrorCode.UNKNOWN_LEADER_EPOCH


def test_isr_rejection_by_newer_leader_fences():
    s = leader(min_isr=1)
    s, _ = produce(s, -1)
    s, eff = P.step(s, P.Tick(500))
    assert of(eff, P.ProposeIsr)
    s, eff = P.step(s, P.IsrUpdateRejected(LeaderAndIsr(2, 2, (2, 3), (), 7), 501))
    assert s.fenced and of(eff, P.ProduceCompleted)[0].error is ErrorCode.NOT_LEADER_OR_FOLLOWER
    _, eff = produce(s, 1, rid=2)
    assert of(eff, P.ProduceCompleted)[0].error is ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_isr_rejection_by_controller_in_same_term_refreshes():
    s = leader(min_isr=1)
    s, _ = P.step(s, P.Tick(500))
    s, eff = P.step(s, P.IsrUpdateRejected(LeaderAndIsr(1, 1, (1, 2), (), 6), 501))
    assert not s.fenced and s.isr == {1, 2} and s.partition_epoch == 6 and s.pending_isr is None


def test_a_stale_rejection_does_not_drop_the_expansion_in_flight():
    """seed 521390: the rejection of an earlier, repeated write arrived while an expansion was in flight; taken
    as its answer, it dropped the expansion, the HW passed the joining member's log end, and the write then
    landed with that member in the ISR."""
    s = leader(min_isr=1, isr_=(1, 2))
    s, _ = produce(s, 1, n=4)
    s, _ = fetch(s, 2, 4)
    s, _ = produce(s, 1, n=1)
    s, eff = fetch(s, 3, 4, last_epoch=1)
    (proposal,) = of(eff, P.ProposeIsr)
    assert proposal.proposed.isr == (1, 2, 3) and proposal.proposed.partition_epoch == 5
    stale = LeaderAndIsr(1, 1, (1, 2), (), 5)  # the znode at the very version this write is conditional on
    s, eff = P.step(s, P.IsrUpdateRejected(stale, 1))
    assert s.pending_isr is not None and s.pending_isr.proposed == proposal.proposed and not eff
    s, _ = fetch(s, 2, 5)
    assert s.high_watermark == 4  # 3, joining, is at 4: the HW waits for it
    s, _ = P.step(s, P.IsrUpdateAccepted(LeaderAndIsr(1, 1, (1, 2, 3), (), 6), 2))
    assert s.isr == {1, 2, 3} and s.high_watermark == 4


def test_a_member_that_restarted_behind_the_hw_leaves_once_the_write_adding_it_lands():
    """seed 1034869: a follower restarted (losing part of what it had fetched) while the write adding it to the
    ISR was in flight; the write landed, and nothing removed it, below the HW, from the ISR."""
    s = leader(min_isr=1, isr_=(1,))
    s, _ = produce(s, 1, n=4)
    s, eff = fetch(s, 2, 4, broker_epoch=10)
    assert of(eff, P.ProposeIsr)[0].proposed.isr == (1, 2)
    s, _ = produce(s, 1, n=2)
    s, _ = fetch(s, 2, 6, broker_epoch=10)
    assert s.high_watermark == 6
    s, eff = fetch(s, 2, 4, broker_epoch=11)  # back from a crash that lost offsets 4 and 5
    assert not of(eff, P.ProposeIsr)  # the expansion is still in flight
    s, eff = P.step(s, P.IsrUpdateAccepted(LeaderAndIsr(1, 1, (1, 2), (), 6), 1))
    assert s.isr == {1, 2}
    (removal,) = of(eff, P.ProposeIsr)
    assert removal.proposed.isr == (1,) and removal.proposed.partition_epoch == 6
    assert s.pending_isr is not None and s.high_watermark == 6


def test_an_isr_write_records_each_member_incarnation():
    s = leader(min_isr=1, isr_=(1,))
    s, _ = produce(s, 1, n=4)
    s, eff = fetch(s, 2, 4, broker_epoch=10)
    (expand,) = of(eff, P.ProposeIsr)
    assert expand.proposed.isr == (1, 2) and expand.proposed.isr_broker_epochs == ((2, 10),)


def test_a_member_that_restarted_while_the_write_adding_it_was_in_flight_leaves_when_it_lands():
    """Even one back at the HW: its restart may have lost records a later HW will cover, and the write
    named its previous incarnation, which the controller will not elect (election.without_restarted_members)."""
    s = leader(min_isr=1, isr_=(1,))
    s, _ = produce(s, 1, n=4)
    s, eff = fetch(s, 2, 4, broker_epoch=10)
    (expand,) = of(eff, P.ProposeIsr)
    s, eff = fetch(s, 2, 4, broker_epoch=11)  # restarted, nothing committed lost
    assert not of(eff, P.ProposeIsr) and s.high_watermark == 4
    s, eff = P.step(s, P.IsrUpdateAccepted(replace(expand.proposed, partition_epoch=6), 1))
    (removal,) = of(eff, P.ProposeIsr)
    assert removal.proposed.isr == (1,) and removal.proposed.elr == ()
    s, eff = P.step(s, P.IsrUpdateAccepted(replace(removal.proposed, partition_epoch=7), 2))
    s, eff = fetch(s, 2, 4, broker_epoch=11, now=3)
    (again,) = of(eff, P.ProposeIsr)
    assert again.proposed.isr == (1, 2) and again.proposed.isr_broker_epochs == ((2, 11),)


def test_unanswered_isr_write_is_resent():
    s = leader(min_isr=1)
    s, _ = P.step(s, P.Tick(500))
    s, eff = P.step(s, P.IsrUpdateRejected(None, 501))
    s, eff = P.step(s, P.Tick(1000))
    assert of(eff, P.ProposeIsr)


# ---- follower

def follower(leo=0, pairs=((0, 0),), hw_=0):
    s = P.initial_state("t", 0, 2, PartitionConfig(), log_end_offset=leo, epoch_pairs=pairs if leo else (),
                        high_watermark_checkpoint=hw_)
    s, _ = P.step(s, P.BecomeFollower(LeaderAndIsr(1, 1, (1, 2, 3), (), 5), REPLICAS, (), 0))
    return s


def test_follower_appends_and_takes_capped_hw():
    from ads_spark.replication.state import BatchInfo
    s = follower()
    req = P.fetch_request(s)
    assert (req.leader, req.fetch_offset, req.current_leader_epoch) == (1, 0, 1)
    s, eff = P.step(s, P.FetchResponse(1, 0, -1, ErrorCode.NONE, 7, 0, (BatchInfo(0, 2, 0), BatchInfo(2, 3, 1))))
    assert s.log_end_offset == 5 and s.high_watermark == 5 and s.epochs.as_pairs() == [(0, 0), (1, 2)]
    s2, eff = P.step(s, P.FetchResponse(1, 3, 1, ErrorCode.NONE, 9, 0, ()))
    assert s2 == s and eff == []  # stale answer


def test_follower_truncates_to_divergence_not_hw():
    s = follower(leo=10, hw_=4)
    s, eff = P.step(s, P.FetchResponse(1, 10, 0, ErrorCode.NONE, 6, 0, (), diverging_epoch=(0, 8)))
    assert of(eff, P.Truncate) == [P.Truncate(8, False)] and s.log_end_offset == 8 and s.high_watermark == 4


def test_late_answer_about_an_older_log_position_at_the_same_end_offset_is_dropped():
    """Found by the simulation (seed 203695): a follower with offsets 4-6 from epoch 1 is told to diverge at 4,
    truncates, re-fetches 4-6 from the epoch-2 leader and reports offset 7; then a late answer to its earlier
    fetch at 7 (epoch 1) arrives. Taken as current, it cut 4-6 again, below what the leader counted in its HW."""
    from ads_spark.replication.state import BatchInfo
    s = P.initial_state("t", 0, 3, PartitionConfig(), log_end_offset=7, epoch_pairs=((1, 0),))
    s, _ = P.step(s, P.BecomeFollower(LeaderAndIsr(2, 2, (2, 3), (), 4), REPLICAS, (), 0))
    stale = P.fetch_request(s)
    assert (stale.fetch_offset, stale.last_fetched_epoch) == (7, 1)
    late = P.FetchResponse(2, 7, 1, ErrorCode.NONE, 4, 0, (), diverging_epoch=(1, 4))
    s, eff = P.step(s, late)
    assert of(eff, P.Truncate) == [P.Truncate(4, False)]
    s, _ = P.step(s, P.FetchResponse(2, 4, 1, ErrorCode.NONE, 4, 0, (BatchInfo(4, 3, 2),)))
    assert s.log_end_offset == 7 and P.fetch_request(s).last_fetched_epoch == 2
    after, eff = P.step(s, late)  # the same answer again, late: about (7, epoch 1), not (7, epoch 2)
    assert after == s and eff == []


def test_empty_epoch_left_by_a_brief_leadership_is_dropped_so_fetching_progresses():
    """Found on real brokers: a replica that led epoch 0 without writing anything, then follows a leader
    of epoch 2 whose cache starts at 2, was told to diverge at 0 on every fetch and never joined the ISR."""
    lai0 = LeaderAndIsr(2, 0, (2, 3), partition_epoch=0)
    s = P.initial_state("t", 0, 2, PartitionConfig(min_insync_replicas=1))
    s, _ = P.step(s, P.BecomeLeader(lai0, (2, 3), (), 0))  # cache: epoch 0 from offset 0, no record
    s, _ = P.step(s, P.BecomeFollower(LeaderAndIsr(3, 2, (3,), partition_epoch=3), (2, 3), (), 1))
    leader_cache = P.epochs.from_pairs([(2, 0)])
    request = P.fetch_request(s)
    diverging = P.epochs.diverging_epoch(leader_cache, 0, request.fetch_offset, request.last_fetched_epoch)
    assert diverging is not None
    s, eff = P.step(s, P.FetchResponse(2, 0, request.last_fetched_epoch, ErrorCode.NONE, 0, 0, (),
                                       diverging_epoch=diverging, now_ms=2))
    assert of(eff, P.EpochCacheChanged) and not of(eff, P.Truncate)
    request = P.fetch_request(s)
    assert P.epochs.diverging_epoch(leader_cache, 0, request.fetch_offset, request.last_fetched_epoch) is None


def test_consumer_reads_stop_at_hw():
    s = leader(min_isr=1, isr_=(1,))
    s, _ = produce(s, 1, n=3)
    assert P.check_consumer_fetch(s, 1, 0) == (ErrorCode.NONE, 3)
    assert P.check_consumer_fetch(s, 0, 0)[0] is ErrorCode.FENCED_LEADER_EPOCH
    assert P.check_consumer_fetch(follower(), None, 0)[0] is ErrorCode.NOT_LEADER_OR_FOLLOWER


def new_leader_with_a_lagging_hw():
    """A follower that became leader before it heard the previous leader's HW: its log holds 10 records,
    its HW is 4 until its followers fetch."""
    s = P.initial_state("t", 0, 1, PartitionConfig(), log_end_offset=10, high_watermark_checkpoint=4,
                        epoch_pairs=((0, 0),))
    s, _ = P.step(s, P.BecomeLeader(LeaderAndIsr(1, 1, (1, 2), (), 5), REPLICAS, (), 0))
    assert s.high_watermark == 4 and s.leader_epoch_start_offset == 10
    return s


def test_a_read_between_the_hw_and_the_log_end_of_a_new_leader_waits_for_the_hw():
    """A consumer at 8, which the previous leader's HW allowed, gets nothing yet; not OFFSET_OUT_OF_RANGE,
    which made a Spark task fail and a consumer reset its position (seen on a preferred election)."""
    s = new_leader_with_a_lagging_hw()
    assert P.check_consumer_fetch(s, 1, 8) == (ErrorCode.NONE, 4)
    assert P.check_consumer_fetch(s, 1, 10) == (ErrorCode.NONE, 4)
    assert P.check_consumer_fetch(s, 1, 11)[0] is ErrorCode.OFFSET_OUT_OF_RANGE  # past the log end
    s, _ = fetch(s, 2, 10)
    assert P.check_consumer_fetch(s, 1, 8) == (ErrorCode.NONE, 10)


def test_list_offsets_waits_until_the_hw_reaches_the_leader_epoch_start_kip207():
    s = new_leader_with_a_lagging_hw()
    assert P.check_list_offsets(s, 1) is ErrorCode.OFFSET_NOT_AVAILABLE  # it would answer 4, back from 10
    assert P.check_list_offsets(s, 0) is ErrorCode.FENCED_LEADER_EPOCH
    assert P.check_list_offsets(follower(), None) is ErrorCode.NOT_LEADER_OR_FOLLOWER
    s, _ = fetch(s, 2, 10)
    assert s.high_watermark == 10 and P.check_list_offsets(s, 1) is ErrorCode.NONE


def test_stale_leader_and_isr_refused():
    s = leader()
    s2, eff = P.step(s, P.BecomeFollower(LeaderAndIsr(2, 0, (2,), (), 9), REPLICAS, (), 0))
    assert s2 == s and of(eff, P.LeaderAndIsrRefused)[0].error is ErrorCode.FENCED_LEADER_EPOCH


@pytest.mark.parametrize("min_isr,isr_,expected", [(1, (1,), 2), (2, (1,), 0), (2, (1, 2), 2)])
def test_single_step_hw_rule(min_isr, isr_, expected):
    s = leader(min_isr=min_isr, isr_=isr_)
    s, _ = produce(s, 1, n=2)
    if 2 in isr_:
        s, _ = fetch(s, 2, 2)
    assert s.high_watermark == expected


def test_evolve_builds_what_dataclasses_replace_builds():
    import dataclasses

    from ads_spark.replication.state import PartitionState, evolve

    state = PartitionState("t", 0, 1, isr=frozenset({1, 2}), high_watermark=3, log_end_offset=5)
    changes = {"high_watermark": 4, "progress": {2: isr.FollowerProgress()}, "role": Role.LEADER}
    evolved = evolve(state, **changes)
    assert evolved == dataclasses.replace(state, **changes) and evolved is not state
    assert state.high_watermark == 3  # the old value is untouched
    event = P.FetchResponse(leader_epoch=1, fetch_offset=0, last_fetched_epoch=-1, error=ErrorCode.NONE,
                            high_watermark=0, log_start_offset=0, batches=(), diverging_epoch=None, now_ms=0)
    assert evolve(event, fetch_offset=9) == dataclasses.replace(event, fetch_offset=9)
    with pytest.raises(TypeError, match="no field"):
        evolve(state, high_water_mark=4)

    @dataclasses.dataclass(frozen=True)
    class Checked:  # no slots, and a __post_init__: evolve must go through replace
        amount: int

        def __post_init__(self):
            if self.amount < 0:
                raise ValueError("negative")

    assert evolve(Checked(1), amount=2) == Checked(2)
    with pytest.raises(ValueError):
        evolve(Checked(1), amount=-1)


# ---- repeated caught-up fetches (answered without a new state)

def caught_up_leader(lag_ms=10_000):
    """Leader with 2 records, both followers caught up and in the ISR at t=1000."""
    s = leader(lag_ms=lag_ms)
    s, _ = produce(s, -1, n=2)
    s, _ = fetch(s, 2, 2, now=1000)
    s, _ = fetch(s, 3, 2, now=1000)
    assert s.high_watermark == 2 and s.isr == {1, 2, 3}
    return s


def full_step(s, replica, offset, now, **kw):
    """The same fetch with the shortcut turned off: what stepping it in full would do."""
    real = P._repeats_caught_up_fetch
    P._repeats_caught_up_fetch = lambda *args: False
    try:
        return fetch(s, replica, offset, now=now, **kw)
    finally:
        P._repeats_caught_up_fetch = real


def test_repeated_caught_up_fetch_keeps_the_state_and_answers_as_a_full_step_would():
    s = caught_up_leader()
    repeated, eff = fetch(s, 2, 2, now=1200)
    assert repeated is s and len(eff) == 1
    stepped, full_eff = full_step(s, 2, 2, now=1200)
    assert eff == full_eff  # the same ReplyFetch: HW, LEO, log start, epoch
    # A full step would only have moved the follower's fetch times on.
    assert stepped.progress[2].log_end_offset == s.progress[2].log_end_offset
    assert (stepped.high_watermark, stepped.isr, stepped.pending_produces) == (s.high_watermark, s.isr, ())
    assert stepped.progress[2].last_fetch_ms == 1200 and s.progress[2].last_fetch_ms == 1000


def test_repeated_fetch_is_stepped_again_after_the_refresh_so_the_isr_never_lags():
    s = caught_up_leader(lag_ms=10_000)  # refresh: min(500, 10_000 / 10)
    s, _ = fetch(s, 2, 2, now=1499)
    assert s.progress[2].last_fetch_ms == 1000
    s, _ = fetch(s, 2, 2, now=1500)
    assert s.progress[2].last_fetch_ms == 1500 and s.progress[2].last_caught_up_ms == 1500
    # Caught-up times lag at most the refresh: a follower that keeps fetching stays in the ISR.
    for now in range(1500, 40_000, 100):
        s, _ = fetch(s, 2, 2, now=now)
        s, _ = fetch(s, 3, 2, now=now)
        s, eff = P.step(s, P.Tick(now))
        assert not of(eff, P.ProposeIsr), now
    assert s.progress[2].last_caught_up_ms >= 40_000 - 100 - 500


def test_refresh_is_a_tenth_of_the_lag_bound_when_that_is_shorter():
    s = caught_up_leader(lag_ms=1_000)
    assert fetch(s, 2, 2, now=1099)[0] is s
    assert fetch(s, 2, 2, now=1100)[0].progress[2].last_fetch_ms == 1100


@pytest.mark.parametrize("case", ["leader_log_moved", "behind", "other_incarnation", "not_in_isr",
                                  "isr_write_in_flight", "new_leader_epoch", "last_fetch_not_caught_up"])
def test_fetches_that_may_change_something_are_always_stepped(case):
    s = caught_up_leader()
    offset, kw = 2, {}
    if case == "leader_log_moved":
        s, _ = produce(s, -1, now=1100, rid=2)
        offset = 3  # catching up to the new log end: the HW and the produce move
    elif case == "behind":
        offset = 1
    elif case == "other_incarnation":
        kw = {"broker_epoch": 11}  # restarted: may have lost an unflushed tail; leaves the ISR
    elif case == "not_in_isr":
        s = P.step(s, P.IsrUpdateAccepted(LeaderAndIsr(1, 1, (1, 3), (), 6), 1100))[0]
        assert s.isr == {1, 3}  # a caught-up non-member's fetch proposes it joins
    elif case == "isr_write_in_flight":
        s = fetch(s, 3, 2, now=1100, broker_epoch=11)[0]  # 3 restarted: its removal is being written
        assert s.pending_isr is not None and 2 in s.isr
    elif case == "new_leader_epoch":
        s = P.step(s, P.BecomeLeader(LeaderAndIsr(1, 2, (1, 2, 3), (), 6), REPLICAS, (), 1100))[0]
        kw = {"epoch": 2}
    elif case == "last_fetch_not_caught_up":
        s, _ = produce(s, -1, now=1050, rid=2)
        s, _ = fetch(s, 2, 3, now=1100)
        s, _ = fetch(s, 2, 2, now=1150)  # an older fetch, delivered late: not caught up, LEO stays 3
        assert s.progress[2].last_caught_up_ms == 1100 and s.progress[2].log_end_offset == 3
        offset = 3
    got = fetch(s, 2, offset, now=1200, **kw)
    assert got == full_step(s, 2, offset, 1200, **kw)
    assert got[0] is not s and got[0].progress[2].last_fetch_ms == 1200


# ---- members a new leader has not heard from yet (simulation seed 201293)

def leader_with_recorded(recorded, isr_=(1, 2, 3), leo=5, min_isr=1):
    s = P.initial_state("t", 0, 1, PartitionConfig(min_insync_replicas=min_isr, replica_lag_time_max_ms=100),
                        log_end_offset=leo, high_watermark_checkpoint=leo, epoch_pairs=((0, 0),))
    lai = LeaderAndIsr(1, 1, isr_, (), 5, isr_broker_epochs=recorded)
    s, _ = P.step(s, P.BecomeLeader(lai, REPLICAS, (), 0))
    return s


def test_a_first_fetch_from_a_newer_incarnation_than_the_isr_recorded_removes_the_member():
    s = leader_with_recorded(((2, 6), (3, 7)))
    s, eff = fetch(s, 3, 5, broker_epoch=10)  # restarted since the ISR was written, even at the HW
    (proposal,) = of(eff, P.ProposeIsr)
    assert proposal.proposed.isr == (1, 2) and 3 not in proposal.proposed.elr


def test_a_first_fetch_below_the_hw_removes_the_member_it_lost_committed_records():
    s = leader_with_recorded(())
    s, eff = fetch(s, 3, 2, broker_epoch=10)
    (proposal,) = of(eff, P.ProposeIsr)
    assert proposal.proposed.isr == (1, 2) and 3 not in proposal.proposed.elr


def test_a_write_keeps_the_recorded_incarnation_of_a_member_not_heard_from_yet():
    s = leader_with_recorded(((3, 7),), isr_=(1, 3))
    s, eff = fetch(s, 2, 5, broker_epoch=9)  # 2 joins before 3's first fetch
    (proposal,) = of(eff, P.ProposeIsr)
    assert proposal.proposed.isr == (1, 2, 3)
    assert proposal.proposed.isr_broker_epochs == ((2, 9), (3, 7))
