"""Seeded random schedules (a thousand in CI, tens of thousands in the long runs) against the real core; every
step is checked, and each schedule ends with the liveness phase (liveness.py): healed and restarted, the
cluster must come back whole.

ADS_SIM_SCHEDULES (default 1000, 15-25 s on one core) sets how many; ADS_SIM_SEED
replays one; ADS_SIM_FIRST_SEED moves the window. Why 1,000 in CI: every planted bug of
test_sim_mutations.py is caught within 74 seeds, and the two bugs this window ever found (801, 582) lie
below 1,000 (and are pinned below); the bugs of the long runs were found past seed 200,000, which no CI
window reaches. Finding new bugs is the long runs' job (4,000 was the CI window until issue #23):
    ADS_SIM_SCHEDULES=4000 pytest tests/sim -k random                               # the old CI window
    ADS_SIM_SCHEDULES=40000 ADS_SIM_FIRST_SEED=100000 pytest tests/sim -k random    # 11-18 min here
"""

import os

import pytest

from tests.sim.runner import run_schedule

SCHEDULES = int(os.environ.get("ADS_SIM_SCHEDULES", "1000"))
FIRST_SEED = int(os.environ.get("ADS_SIM_FIRST_SEED", "0"))
# Seeds that once found a bug; always run (those in the window once), so each fix stays fixed.
#   203695: a late fetch answer about an older log position truncated a follower below the HW.
#   801232: the checker's invariant 4 took a member the leader was removing (restarted, data lost) as in sync.
#   521390: the rejection of an earlier, repeated ISR write dropped the expansion in flight; the HW passed the
#           joining member, whose write then landed (HW > LEO of an ISR member).
#   1034869: a follower restarted below the HW while the write adding it to the ISR was in flight; the write
#           landed and nothing removed it.
#   1422945: the controller, handed views without ISR members restarted since the ISR was written, saw no change
#           to write: the znode kept a restarted member, and its leader, cut from ZooKeeper, kept it in sync.
#   1030387: (the controller being the real core) a pass over broker changes lost its write to a leader's ISR
#           write and was left for later: a broker back from a crash, its log short of the HW, stayed in an ELR.
#   801 (found in the default window: the controller's channel dropped a leader-and-isr after three attempts to a
#           broker cut from it but not from ZooKeeper, which kept no role until the liveness phase's bound.)
#   201293: a new leader, never having heard from an ISR member back from a crash (its log short of the HW),
#           counted it in sync and proposed an ISR naming it with no recorded incarnation.
#   210868: (crash-all) unclean recovery ranked replicas by their latest epoch entry: two logs emptied by the
#           crash kept epoch 1's entry and outranked the one replica holding epoch 0's committed records.
#   582 (found in the default window: unclean recovery waiting for the last known ELR alone elected a replica that
#           had lost a committed record a follower outside the ISR still held.)
#   (801 and 582 are pinned so that a moved or shortened window still runs them.)
REGRESSION_SEEDS = (203695, 801232, 521390, 1034869, 1422945, 1030387, 201293, 210868, 801, 582)


def _seeds():
    if "ADS_SIM_SEED" in os.environ:
        return [int(os.environ["ADS_SIM_SEED"])]
    window = range(FIRST_SEED, FIRST_SEED + SCHEDULES)
    return [*(s for s in REGRESSION_SEEDS if s not in window), *window]  # each seed once


@pytest.mark.timeout(1800)
def test_random_schedules_keep_every_invariant():
    acked = 0
    for seed in _seeds():
        checker, faults = run_schedule(seed)
        acked += checker.acked_all
        if checker.violations:
            pytest.fail(f"FAILED {checker.violations[0]}\n  faults: {faults[-8:]}\n"
                        f"replay: ADS_SIM_SEED={seed} pytest tests/sim -k random", pytrace=False)
    assert acked > 0, "schedules must acknowledge something or they test nothing"
