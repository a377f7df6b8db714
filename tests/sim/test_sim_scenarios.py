"""Named scenarios: reference 001 (failure scenarios, leader-epoch example), 002 (Jepsen), KIP-966."""

import pytest

from tests.sim import liveness
from tests.sim import scenarios as S


def test_single_broker_failure_no_loss_writes_continue():
    c = S.single_broker_failure()
    assert c.checker.violations == []
    assert c.checker.acked_all > 50
    assert len(c.zk.partitions[0].isr) == 3  # the crashed broker re-synced and rejoined


def test_two_failures_min_isr2_refuses_writes_and_loses_nothing():
    c = S.two_broker_failures()
    assert c.checker.violations == []
    assert c.checker.acked_while_two_down == 0
    assert c.checker.acked_all > 20


def test_leader_crash_with_unreplicated_data_is_truncated_by_epoch():
    c = S.leader_crash_with_unreplicated_data()
    assert c.checker.violations == []
    # the old leader's unreplicated acks=1 tail was cut at the divergence point; logs agree below the HW
    lead = c.cluster_leader = c.zk.partitions[0].leader
    logs = {b.id: b.disks[0].rids[: c.brokers[lead].states[0].high_watermark] for b in c.brokers.values()}
    assert len({tuple(v) for v in logs.values()}) == 1
    assert c.checker.acked_one > 0


def test_jepsen_min_isr2_unclean_off_loses_nothing():
    c = S.jepsen_isolated_leader(min_isr=2, unclean=False)
    assert c.checker.violations == []
    assert c.checker.unclean == set()
    assert c.checker.acked_all > 20


def test_jepsen_min_isr1_unclean_on_loses_acknowledged_writes_and_the_checker_sees_it():
    c = S.jepsen_isolated_leader(min_isr=1, unclean=True)
    assert c.checker.unclean == {0}, "the unclean election must be reported"
    assert any("UNCLEAN" in r for r in c.checker.unclean_reasons)
    assert c.checker.losses, "the checker must observe the loss of acknowledged records"
    assert any('"no acknowledged record lost"' in v or "identical below the HW" in v for v in c.checker.violations)


def test_kip966_last_replica_standing_elr_member_takes_over_without_loss():
    c = S.last_replica_standing()
    assert c.checker.violations == []
    assert c.checker.voided == set()
    a_b = c.checker.elr_before_crash
    assert len(a_b) == 1, "the lagging follower must be in the ELR"
    assert c.checker.leader_after_crash == a_b[0], "the ELR member leads after the last ISR member died"
    assert any("from ELR" in r for r in c.checker.elections)
    assert S.leader_roles(c) and c.checker.acked_all > 20


@pytest.mark.parametrize("staggered", [False, True])
def test_kip966_whole_cluster_crash_recovers_the_longest_log_without_an_operator(staggered):
    c = S.whole_cluster_crash(staggered)
    assert c.checker.violations == []
    assert c.checker.offline_while_down
    assert c.checker.voided == set() and c.checker.unclean == set(), "a recovery, not an unclean election"
    recoveries = [r for r in c.checker.elections if "unclean recovery" in r]
    assert len(recoveries) == 1, c.checker.elections
    assert f"unclean recovery of replica {c.checker.keeper}" in recoveries[0]
    # every record acknowledged before the crash is readable from the leader now, and writes go on
    assert liveness.unmet(c) is None
    assert c.checker.acked_all > c.checker.acked_before_crash > 20


def test_kip966_past_the_recovery_timeout_the_last_known_elr_leads_reported_as_unclean():
    c = S.whole_cluster_crash_one_replica_lost()
    assert len(c.checker.isr_before_crash) == 2
    assert c.checker.offline_before_timeout, "it waits for the missing replica until the timeout"
    assert c.checker.unclean == {0} and any("did not report" in r for r in c.checker.unclean_reasons)
    assert S.leader_id(c) in c.checker.isr_before_crash
    assert c.checker.violations == []
