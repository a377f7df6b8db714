"""The group coordinator's failover in the simulation (coordinator.py): acknowledged commits are never lost.

Random schedules of offset commits (standalone, and by the members of a group that
joins, syncs and heartbeats through the real membership core) to one or two offsets
partitions (RF 3, min ISR 2) under runner.py's faults, every step checked by
coordinator_checker.py (invariants 10 and 11) beside checker.py's nine, each ending
with runner's liveness phase and the group's re-forming; a scripted failover at the
worst moment; and planted loader bugs that must be caught.
ADS_SIM_COORDINATOR_SCHEDULES (default 200) sets how many schedules, ADS_SIM_SEED
replays one (``ADS_SIM_SEED=<seed> pytest tests/sim -k coordinator``).
Measured when written: drop_tail caught at seed 0, load_to_hw at seed 8, skip_group_records
at seed 0 (by invariant 11).
"""

import os

import pytest

from tests.sim import coordinator as coord
from tests.sim.coordinator import failover_after_acknowledged_commit, run_coordinator_schedule

SCHEDULES = int(os.environ.get("ADS_SIM_COORDINATOR_SCHEDULES", "200"))
MUTATION_SEEDS_MAX = 40


def _seeds():
    if "ADS_SIM_SEED" in os.environ:
        return [int(os.environ["ADS_SIM_SEED"])]
    return range(SCHEDULES)


@pytest.mark.timeout(900)
def test_coordinator_schedules_never_lose_an_acknowledged_commit():
    acked, loaded_commits, checks = 0, 0, 0
    for seed in _seeds():
        checker, faults = run_coordinator_schedule(seed)
        acked += checker.commits_acked
        loaded_commits += checker.coordinator_loads_with_commits
        checks += checker.coordinator_checks
        if checker.violations:
            pytest.fail(f"FAILED {checker.violations[0]}\n  faults: {faults[-8:]}\n"
                        f"replay: ADS_SIM_SEED={seed} pytest tests/sim -k coordinator", pytrace=False)
    # not vacuous: commits were acknowledged, coordinators took over logs holding commits, answers were compared
    assert acked > 0 and loaded_commits > 0 and checks > 0, (acked, loaded_commits, checks)


def test_new_coordinator_serves_a_commit_acknowledged_as_the_old_one_died():
    c = failover_after_acknowledged_commit()
    checker = c.checker
    assert checker.violations == []
    assert checker.new_coordinator not in (checker.old_coordinator, -1)
    last = checker.commit_at_crash
    for part in last.partitions:  # the commit in flight at the crash was acknowledged, and is served
        assert checker.acked_commit[(last.group_id, part.topic, part.partition)][0] >= part.offset
    assert checker.coordinator_loads_with_commits >= 1


@pytest.mark.parametrize("mutation", ["drop_tail", "load_to_hw"])
def test_scripted_failover_catches_a_loader_that_drops_the_tail(mutation):
    checker = failover_after_acknowledged_commit(mutation).checker
    assert any("acknowledged commits survive failover" in v for v in checker.violations), checker.violations


@pytest.mark.parametrize("mutation", sorted(coord.MUTANTS))
def test_random_schedules_catch_a_planted_loader_bug(mutation):
    for seed in range(MUTATION_SEEDS_MAX):
        checker, _ = run_coordinator_schedule(seed, mutation_name=mutation)
        if checker.violations:
            print(f"mutation {mutation} caught at seed {seed}: {checker.violations[0]}")
            return
    pytest.fail(f"mutation {mutation} survived {MUTATION_SEEDS_MAX} seeds: the checker is too weak")


def test_loader_mutations_are_undone():
    originals = (coord.load_end_offset, coord.load_groups)
    for name, (attr, mutant) in coord.MUTANTS.items():
        with pytest.raises(RuntimeError), coord.coordinator_mutation(name):
            assert getattr(coord, attr) is mutant
            raise RuntimeError
        assert (coord.load_end_offset, coord.load_groups) == originals, name
