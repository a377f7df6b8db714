"""The README's quickstart (``jobs/quickstart.py``, what ``make demo`` runs) end to end (issue #22 item 12).

It runs as the README runs it (from the project root), in its own process with its own cluster and Spark session: three brokers,
the producer, the transformer with a broker SIGKILLed midway, and the replay; its exit status is its own
check (every order exactly once in ``orders_upper``, the replay's count). Few records keep it short; the
run is bounded, and on a timeout SIGTERM lets the job take its cluster down (it unwinds on SIGTERM)
before the process group is killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
RECORDS = 3000  # >= 200 per partition for the replay of offsets [100, 200), two transformer triggers
RUN_TIMEOUT_S = 420
UNWIND_S = 30


def test_quickstart_runs_end_to_end(tmp_path):
    job = subprocess.Popen([sys.executable, str(REPO / "jobs" / "quickstart.py"), "--records", str(RECORDS),
                            "--dir", str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = job.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGTERM)
        try:
            output, _ = job.communicate(timeout=UNWIND_S)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            output, _ = job.communicate()
        pytest.fail(f"the quickstart did not finish within {RUN_TIMEOUT_S}s:\n{output[-4000:]}")
    assert job.returncode == 0, output[-4000:]
    assert "killing broker 2 (SIGKILL)" in output, output[-4000:]
    assert f"holds {RECORDS} records for {RECORDS} orders: lost=0 duplicated=0" in output, output[-4000:]
    assert "replay job: offsets [100, 200) of each partition -> 300 records" in output
    assert "cluster down" in output
