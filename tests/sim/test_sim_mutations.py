"""The simulation catches planted bugs: each mutation must produce a violation within a few seeds.

Measured when written: hw_max is caught at seed 0 ("HW <= LEO of every ISR
member"), truncate_to_hw at seed 0 (same invariant: a new follower cut to its
stale HW), elect_any_replica at seed 6 ("no acknowledged record lost").
"""

import pytest

from tests.sim.runner import run_schedule

SEEDS_MAX = 60


@pytest.mark.parametrize("mutation", ["hw_max", "truncate_to_hw", "elect_any_replica"])
def test_sim_finds_planted_bug(mutation):
    for seed in range(SEEDS_MAX):
        checker, _ = run_schedule(seed, mutation_name=mutation)
        if checker.violations:
            print(f"mutation {mutation} caught at seed {seed}: {checker.violations[0]}")
            return
    pytest.fail(f"mutation {mutation} survived {SEEDS_MAX} seeds: the checker is too weak")


def test_mutation_switches_are_restored():
    from ads_spark.replication import election, hw
    from ads_spark.replication import partition as core
    run_schedule(0, steps=5, mutation_name="hw_max")
    assert hw.MUTATION is None and core.TRUNCATION_MUTATION is None and election.MUTATION is None


def test_sim_sees_a_restarted_member_the_controller_could_elect():
    """Seed 1034869 with the controller's check of recorded broker epochs planted out: the write adding a
    member lands after it restarted below the HW, and the checker's controller-side invariant sees it."""
    checker, _ = run_schedule(1034869, mutation_name="ignore_restarted_members")
    assert any("the controller may elect cleanly" in v for v in checker.violations), checker.violations
    checker, _ = run_schedule(1034869)
    assert not checker.violations
