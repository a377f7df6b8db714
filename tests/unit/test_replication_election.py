"""The controller's pure decisions: election order, batched failure handling, preferred, controlled shutdown, ELR."""

from dataclasses import replace

from ads_spark.errors import ErrorCode
from ads_spark.replication import election as E
from ads_spark.replication.isr import next_elr
from ads_spark.replication.state import NO_LEADER, LeaderAndIsr


def view(leader=1, isr=(1, 2, 3), elr=(), min_isr=2, unclean=False, p=0, replicas=(1, 2, 3), epoch=4, version=9):
    return E.PartitionView("t", p, replicas, (), LeaderAndIsr(leader, epoch, isr, elr, version), min_isr, unclean)


def test_preferred_first_among_live_isr():
    assert E.choose_leader(view(isr=(2, 3)), frozenset({2, 3})).leader == 2
    assert E.choose_leader(view(replicas=(3, 2, 1)), frozenset({1, 2, 3})).leader == 3


def test_isr_then_elr_then_unclean_then_offline():
    v = view(isr=(1,), elr=(2,))
    assert E.choose_leader(v, frozenset({2, 3})) == E.Choice(2, False)
    assert E.choose_leader(view(isr=(1,), unclean=True), frozenset({3})) == E.Choice(3, True)
    assert E.choose_leader(view(isr=(1,)), frozenset({3})) == E.Choice(NO_LEADER, False)


def test_unclean_election_is_reported_and_resets_isr():
    d = E.elect(view(isr=(1,), unclean=True), frozenset({3}), controller_epoch=7)
    assert d.unclean and "UNCLEAN" in d.reason
    assert d.new_state == LeaderAndIsr(3, 5, (3,), (), 10, 7) and d.expected_partition_epoch == 9


def test_ineligible_unclean_restart_is_not_elected_from_elr():
    d = E.elect(view(isr=(), elr=(1, 2)), frozenset({1}), 7, ineligible=frozenset({1}))
    assert d.new_state.leader == NO_LEADER and d.new_state.elr == (2,)


def test_broker_failure_batched_over_many_partitions():
    views = [view(p=i, leader=1 + i % 3) for i in range(300)]
    decisions = E.on_brokers_changed(views, frozenset({2, 3}), frozenset({1}), frozenset(), 3)
    assert len(decisions) == 300
    led_by_1 = [d for d in decisions if d.new_state.leader_epoch == 5]
    assert len(led_by_1) == 100 and all(d.new_state.leader == 2 for d in led_by_1)
    assert all(1 not in d.new_state.isr for d in decisions)
    assert E.on_brokers_changed(views, frozenset({1, 2, 3}), frozenset(), frozenset(), 3) == []


def test_isr_below_min_puts_removed_members_in_elr():
    views = [view(isr=(1, 2))]
    (d,) = E.on_brokers_changed(views, frozenset({1, 3}), frozenset({2}), frozenset(), 3)
    assert d.new_state.isr == (1,) and d.new_state.elr == (2,) and d.new_state.leader_epoch == 4
    (d,) = E.on_brokers_changed([view(isr=(1, 2, 3))], frozenset({1, 2}), frozenset({3}), frozenset(), 3)
    assert d.new_state.elr == ()  # ISR still >= min: the removed replica may miss later commits


def test_last_replica_standing_moves_to_elr_and_elr_member_leads():
    (d,) = E.on_brokers_changed([view(isr=(1,), elr=(2,))], frozenset({2}), frozenset({1}), frozenset(), 3)
    assert d.new_state.leader == 2 and d.new_state.isr == (2,) and d.new_state.elr == (1,)


def test_next_elr_rules():
    assert next_elr(frozenset({1, 2}), frozenset({1}), frozenset(), 2) == {2}
    assert next_elr(frozenset({1}), frozenset({1, 2}), frozenset({2}), 2) == set()
    assert next_elr(frozenset({1}), frozenset(), frozenset({2}), 2, frozenset({2})) == {1}


def test_preferred_leader_election():
    assert E.preferred_leader_election(view(leader=1), frozenset({1, 2, 3}), 3) is ErrorCode.ELECTION_NOT_NEEDED
    assert E.preferred_leader_election(view(leader=2, isr=(2, 3)), frozenset({1, 2, 3}), 3) \
        is ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    d = E.preferred_leader_election(view(leader=2), frozenset({1, 2, 3}), 3)
    assert d.new_state.leader == 1 and d.new_state.leader_epoch == 5


def test_controlled_shutdown_moves_leadership_and_respects_min_isr():
    plan = E.controlled_shutdown([view(leader=1), view(p=1, leader=1, isr=(1, 2))], 1, frozenset({1, 2, 3}), 3)
    assert [d.new_state.leader for d in plan.decisions] == [2] and plan.refused == (("t", 1),)
    forced = E.controlled_shutdown([view(p=1, leader=1, isr=(1, 2))], 1, frozenset({1, 2, 3}), 3, force=True)
    assert forced.decisions[0].new_state.leader == 2 and forced.decisions[0].new_state.elr == (1,)


def test_unclean_restart_is_skipped_while_a_clean_candidate_exists_but_not_when_it_is_the_last_copy():
    # ISR {1} (the leader) and ELR {2}: broker 1 died and came back unclean -> 2 leads, 1 leaves the ELR too.
    d, = E.on_brokers_changed([view(leader=-1, isr=(), elr=(1, 2))], frozenset({1, 2}), frozenset({1}),
                              frozenset({1}), controller_epoch=7)
    assert d.new_state.leader == 2 and 1 not in d.new_state.elr
    # RF=1: the only replica died and came back unclean. Nobody clean is left: it must lead again
    # (KIP-966's recovery from the last known ELR), not leave the partition offline for ever.
    d, = E.on_brokers_changed([view(leader=-1, isr=(), elr=(1,), replicas=(1,), min_isr=1)], frozenset({1}),
                              frozenset({1}), frozenset({1}), controller_epoch=7)
    assert d.new_state.leader == 1


def test_an_unclean_start_is_applied_once_per_process_not_at_every_new_session():
    """A process keeps its start's clean_shutdown flag in every registration, including those after an
    expired session; only the first of a given incarnation is an unclean start still to apply."""
    registered = {1: {"clean_shutdown": False, "incarnation": "a"}, 2: {"clean_shutdown": True, "incarnation": "b"},
                  3: {"clean_shutdown": False, "incarnation": "c"}, 4: {"clean_shutdown": False}}
    assert E.unclean_starts_to_apply(registered, {}) == {1: "a", 3: "c", 4: None}
    # 1's start was applied; 3 restarted (a new process) after its old one's start was applied.
    assert E.unclean_starts_to_apply(registered, {1: "a", 3: "old"}) == {3: "c", 4: None}
    # Without an incarnation there is no telling a new session from a restart: unclean every time.
    assert E.unclean_starts_to_apply(registered, {1: "a", 3: "c", 4: None}) == {4: None}


def test_the_offline_partition_of_returning_isr_members_is_led_again_once_their_starts_were_applied():
    """The chaos case: both ISR members' sessions expired; back as the same processes, whose unclean starts
    a controller had applied, they are ordinary returns and the ELR member leads."""
    offline = view(leader=NO_LEADER, isr=(), elr=(1, 2), replicas=(1, 2))
    registered = {1: {"clean_shutdown": False, "incarnation": "a"}, 2: {"clean_shutdown": False, "incarnation": "b"}}
    unclean = E.unclean_starts_to_apply(registered, {1: "a", 2: "b"})
    [d] = E.on_brokers_changed([offline], frozenset({1, 2}), frozenset(unclean),
                               unclean_restarted=frozenset(unclean), controller_epoch=7)
    assert d.new_state.leader == 1 and d.new_state.isr == (1,)
    # Had each return been taken for a new unclean start (the old behaviour), no clean election could lead it:
    # it would wait for unclean recovery (here with no log ends reported: offline, both members waited for).
    unclean = E.unclean_starts_to_apply(registered, {})
    [d] = E.on_brokers_changed([offline], frozenset({1, 2}), frozenset(unclean),
                               unclean_restarted=frozenset(unclean), controller_epoch=7, log_ends={})
    assert d.new_state.leader == NO_LEADER and d.new_state.last_known_elr == (1, 2)


def test_an_unclean_start_is_recorded_only_when_every_partition_naming_the_broker_took_its_decision():
    views = [view(p=0, isr=(1, 2)), view(p=1, isr=(2, 3), elr=(1,)), view(p=2, isr=(2, 3))]
    assert E.unclean_start_recorded(1, views, {("t", 0), ("t", 1)})
    assert not E.unclean_start_recorded(1, views, {("t", 0)})  # p1's ELR write lost a race: apply again later
    assert E.unclean_start_recorded(4, views, set())  # named nowhere: nothing to wait for


def recorded(isr=(1, 2, 3), epochs=((2, 5), (3, 6)), leader=1, elr=()):
    return E.PartitionView("t", 0, (1, 2, 3), (), LeaderAndIsr(leader, 4, isr, elr, 9, 0, epochs), 2, False)


def test_a_member_registered_under_another_epoch_than_recorded_is_no_candidate():
    """Seed 1034869: the leader's write adding 2 landed after 2 restarted; 2 may lack committed records."""
    epochs = {1: 4, 2: 7, 3: 6}
    v = E.without_restarted_members(recorded(), epochs)
    assert v.state.isr == (1, 3) and v.state.elr == ()
    assert E.restarted_members(recorded(), epochs) == {2}
    (d,) = E.on_brokers_changed([recorded()], frozenset({2, 3}), frozenset({1}), frozenset(), 3,
                                live_broker_epochs={2: 7, 3: 6})
    assert d.new_state.leader == 3 and d.new_state.isr == (3,)
    assert d.new_state.elr == (1,)  # the dead leader may come back with everything; 2 may not
    assert d.new_state.isr_broker_epochs == ()  # a leader's own entry is not kept


def test_an_unclean_choice_is_not_taken_for_restarted_by_the_next_pass():
    """Simulation seed 547 with unclean election on: the unclean choice kept the epoch recorded when it was
    last in sync; the next pass took it for restarted and wrote it out of its own ISR (leader not in ISR)."""
    v = E.PartitionView("t", 0, (1, 2, 3), (), LeaderAndIsr(1, 4, (1, 2), (), 9, 0, ((2, 5),)), 2, True)
    (d,) = E.on_brokers_changed([v], frozenset({2}), frozenset({1}), frozenset(), 3, live_broker_epochs={2: 7})
    assert d.unclean and d.new_state.leader == 2 and d.new_state.isr == (2,) and d.new_state.isr_broker_epochs == ()
    elected = E.PartitionView("t", 0, (1, 2, 3), (), replace(d.new_state, isr_broker_epochs=((2, 5),)), 2, True)
    assert E.restarted_members(elected, {2: 7}) == frozenset()  # never the leader


def test_a_pass_over_broker_changes_writes_restarted_members_out_of_the_isr():
    """Simulation seed 1422945: handed views already without the member, the pass saw no change and wrote
    nothing, so the znode kept it and its leader, cut from ZooKeeper, never learnt it had left."""
    (d,) = E.on_brokers_changed([recorded()], frozenset({1, 2, 3}), frozenset(), frozenset(), 3,
                                live_broker_epochs={1: 4, 2: 7, 3: 6})
    assert d.new_state.leader == 1 and d.new_state.isr == (1, 3) and d.new_state.elr == ()
    assert d.new_state.leader_epoch == 4 and "[2] left the ISR" in d.reason
    assert E.on_brokers_changed([recorded()], frozenset({1, 2, 3}), frozenset(), frozenset(), 3,
                                live_broker_epochs={1: 4, 2: 5, 3: 6}) == []


def test_members_without_a_recorded_epoch_or_still_registered_under_it_stay_candidates():
    v = recorded(epochs=((3, 6),))
    assert E.without_restarted_members(v, {1: 4, 2: 7, 3: 6}) is v
    assert E.without_restarted_members(v, {1: 4, 2: 7}) is v  # 3 not registered: the live set decides that
    d = E.elect(E.without_restarted_members(v, {2: 7, 3: 6}), frozenset({2, 3}), 3)
    assert d.new_state.leader == 2


def test_a_restarted_member_is_neither_preferred_leader_nor_counted_by_a_controlled_shutdown():
    v = E.without_restarted_members(recorded(leader=2, isr=(1, 2, 3), epochs=((1, 3),)), {1: 8, 2: 1, 3: 6})
    assert E.preferred_leader_election(v, frozenset({1, 2, 3}), 3) is ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    # Leader 2 leaving would leave 3 alone in sync, below min ISR 2: refused, 1 does not count.
    assert E.controlled_shutdown([v], 2, frozenset({1, 2, 3}), 3).refused == (("t", 0),)
    (d,) = E.controlled_shutdown([v], 2, frozenset({1, 2, 3}), 3, force=True).decisions
    assert d.new_state.leader == 3 and 1 not in d.new_state.isr


def test_unclean_recovery_elects_the_most_complete_replica_kip966():
    v = E.PartitionView("t", 0, (1, 3, 2), (), LeaderAndIsr(NO_LEADER, 4, (), (1,), 9), 1, True)
    assert E.elect(v, frozenset({2, 3}), 7).new_state.leader == 3  # no log ends: assignment order
    d = E.elect(v, frozenset({2, 3}), 7, log_ends={3: (4, 0), 2: (4, 100)})
    assert d.unclean and d.new_state.leader == 2 and d.new_state.isr == (2,)
    assert "most complete" in d.reason
    # The last epoch first: a longer log of an older epoch may hold what a newer leader truncated.
    assert E.elect(v, frozenset({2, 3}), 7, log_ends={3: (5, 80), 2: (4, 100)}).new_state.leader == 3
    # Ties in assignment order; only live replicas; a replica that did not answer is left out.
    assert E.elect(v, frozenset({2, 3}), 7, log_ends={3: (4, 100), 2: (4, 100)}).new_state.leader == 3
    assert E.elect(v, frozenset({3}), 7, log_ends={2: (4, 100)}).new_state.leader == 3
    assert E.elect(v, frozenset({2, 3}), 7, log_ends={2: (4, 1)}).new_state.leader == 2


def test_unclean_recovery_never_overrides_a_clean_choice():
    v = E.PartitionView("t", 0, (1, 2, 3), (), LeaderAndIsr(1, 4, (1, 3), (), 9), 1, True)
    (d,) = E.on_brokers_changed([v], frozenset({2, 3}), frozenset({1}), frozenset(), 7,
                                log_ends={("t", 0): {2: (4, 500), 3: (4, 100)}})
    assert d.new_state.leader == 3 and not d.unclean


def test_after_a_whole_cluster_crash_recovery_waits_for_every_last_known_elr_member_then_takes_the_longest_log():
    """KIP-966 unclean recovery: every ISR member comes back from a crash, one at a time. None may lead
    cleanly; once all of them (the last known ELR) are back and reported, the longest log leads (by last
    epoch, then end offset), as a recovery, not an unclean election; without every report it waits."""
    key = ("t", 0)
    v = view(leader=2, isr=(1, 2, 3))
    d1, = E.on_brokers_changed([v], frozenset({1}), frozenset({1, 2, 3}), frozenset({1}), 7, log_ends={})
    assert (d1.new_state.leader, d1.new_state.isr, d1.new_state.elr, d1.new_state.last_known_elr) == \
        (NO_LEADER, (), (2, 3), (1,))
    v = replace(v, state=d1.new_state)
    d2, = E.on_brokers_changed([v], frozenset({1, 2}), frozenset({2}), frozenset({2}), 7,
                               log_ends={key: {1: (4, 50), 2: (4, 60)}})
    assert (d2.new_state.leader, d2.new_state.elr, d2.new_state.last_known_elr) == (NO_LEADER, (3,), (1, 2))
    v = replace(v, state=d2.new_state)
    live = frozenset({1, 2, 3})
    placeholder, = E.on_brokers_changed([v], live, frozenset({3}), frozenset({3}), 7)
    assert placeholder.recovery  # not asked yet: the controller asks before it writes anything
    ends = {1: (4, 50), 2: (4, 60), 3: (4, 55)}
    d3, = E.on_brokers_changed([v], live, frozenset({3}), frozenset({3}), 7, log_ends={key: ends})
    assert d3.recovery and not d3.unclean and "unclean recovery" in d3.reason
    assert (d3.new_state.leader, d3.new_state.isr, d3.new_state.elr, d3.new_state.last_known_elr) == (2, (2,), (), ())
    assert d3.new_state.leader_epoch == v.state.leader_epoch + 1
    # A later epoch wins over a longer log of an earlier one.
    d4, = E.on_brokers_changed([v], live, frozenset({3}), frozenset({3}), 7, log_ends={key: {**ends, 1: (5, 10)}})
    assert d4.new_state.leader == 1
    # A member waited for that did not report (it may hold the longest log): still offline, nothing lost.
    d5, = E.on_brokers_changed([v], live, frozenset({3}), frozenset({3}), 7, log_ends={key: {1: (4, 50), 2: (4, 60)}})
    assert d5.new_state.leader == NO_LEADER and d5.new_state.last_known_elr == (1, 2, 3)


def test_an_offline_partition_recovers_only_once_every_member_waited_for_is_live():
    lke = LeaderAndIsr(NO_LEADER, 6, (), (), 12, 7, (), (1, 2))
    v = E.PartitionView("t", 0, (1, 2, 3), (), lke, 2, False)
    ends = {1: (6, 40), 3: (6, 90)}
    assert E.elect(v, frozenset({1, 3}), 8, log_ends=ends).new_state.leader == NO_LEADER  # 2 is not back
    d = E.elect(v, frozenset({1, 2, 3}), 8, log_ends={**ends, 2: (6, 30)})
    assert d.recovery and d.new_state.leader == 3  # any replica may lead if its log holds the most
    # No last known ELR recorded (a state from before it was kept): every replica is waited for.
    bare = replace(v, state=replace(lke, last_known_elr=()))
    assert E.recovery_waits_for(bare) == frozenset({1, 2, 3})
    assert E.elect(bare, frozenset({1, 2}), 8, log_ends={1: (6, 40), 2: (6, 30)}).new_state.leader == NO_LEADER
    # Never while an ISR or ELR member could still come back clean.
    assert E.recovery_waits_for(replace(v, state=replace(lke, elr=(3,)))) == frozenset()
    # A recovery keeps nothing of the last known ELR; a write that leaves it offline keeps it.
    assert d.new_state.last_known_elr == ()
    assert E.elect(v, frozenset({1}), 8, log_ends={}).new_state.last_known_elr == (1, 2)
