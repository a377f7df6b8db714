"""Short runs of the README's other chaos scenarios (issue #22 item 12): ``rolling-restart`` and ``mixed`` on
127.0.0.1 (``mixed`` runs on test hosts when they can be built), ``partition-random`` and
``last-replica-standing`` on network-namespace test hosts (root and nftables; skipped, saying why, otherwise).

Each run is short (one fault or a few, a fixed seed) to stay within the CI budget; the long runs are the
README's commands. The checker must find nothing lost, duplicated or inconsistent, and no produce-stream
thread may be left behind.
"""

from __future__ import annotations

import pytest

from ads_spark.chaos import runner
from ads_spark.chaos.hosts import missing_requirements

pytestmark = [pytest.mark.chaos, pytest.mark.integration]

NEEDS_HOSTS = pytest.mark.skipif(missing_requirements() is not None, reason=str(missing_requirements()))
# Seconds of workload under faults: a few restarts or faults each; last-replica-standing needs one whole
# cycle (followers cut one by one, the last replica down, healed: about 22 s).
RUNS = [
    pytest.param("rolling-restart", 12, id="rolling-restart"),
    pytest.param("mixed", 12, id="mixed"),
    pytest.param("partition-random", 12, marks=NEEDS_HOSTS, id="partition-random"),
    pytest.param("last-replica-standing", 22, marks=NEEDS_HOSTS, id="last-replica-standing"),
]


@pytest.mark.parametrize("scenario,duration_s", RUNS)
def test_short_run_loses_nothing(scenario, duration_s, tmp_path):
    report = runner.run(scenario, duration_s=duration_s, seed=5, out=tmp_path)
    assert report["scenario"] == scenario and report["acknowledged"] > 100, report
    assert (report["lost"], report["duplicated"], report["inconsistent_offsets"], report["non_monotonic"],
            report["aborted_reads"], report["replica_divergence"]) == (0, 0, 0, 0, 0, 0), report
    assert report["nemesis_windows"], "no fault was injected"
    assert report["produce_stream_threads_left"] == 0, report["produce_streams_opened"]
