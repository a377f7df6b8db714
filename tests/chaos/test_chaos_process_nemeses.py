"""Short fault-injection runs with process-level nemeses (SIGKILL and SIGSTOP of partition leaders).

The long runs are documented commands (``ads chaos run --scenario mixed --duration 600``); here each
scenario runs briefly with a fixed seed, and the checker must find nothing lost, duplicated or
inconsistent, with replicas identical below the HW. The checker's own ability to fail is covered by
tests/unit/test_chaos_checker.py.
"""

from __future__ import annotations

import json

import pytest

from ads_spark.chaos import runner

pytestmark = [pytest.mark.chaos, pytest.mark.integration]


@pytest.mark.parametrize("scenario", ["kill-leader", "pause-leader"])
def test_short_run_loses_nothing(scenario, tmp_path):
    report = runner.run(scenario, duration_s=12, seed=11, out=tmp_path)
    assert report["acknowledged"] > 100
    assert (report["lost"], report["duplicated"], report["inconsistent_offsets"], report["non_monotonic"],
            report["aborted_reads"], report["replica_divergence"]) == (0, 0, 0, 0, 0, 0), report
    assert json.loads((tmp_path / "report.json").read_text())["scenario"] == scenario
    # every produce stream a fault broke has ended, not only the producer's last ones
    assert report["produce_stream_threads_left"] == 0, report["produce_streams_opened"]
    assert (tmp_path / "report.png").stat().st_size > 10_000


def test_unknown_scenario_names_the_known_ones(tmp_path):
    with pytest.raises(ValueError, match="unknown scenario 'jepsen-2014'; known: .*jepsen-2013-unsafe"):
        runner.run("jepsen-2014", duration_s=1, seed=1, out=tmp_path)
