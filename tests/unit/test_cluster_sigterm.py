"""A script that owns a LocalCluster tears it down on SIGTERM too (``cluster.unwind_on_sigterm``): the brokers
and ZooKeeper run in sessions of their own, so a script killed outright would leave them running.

A child process stands in for such a script: its ``finally`` is where ``cluster.down()`` would be."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

WAIT_S_MAX = 20.0

SCRIPT = textwrap.dedent("""
    import sys, time
    from ads_spark.cluster import unwind_on_sigterm
    unwind_on_sigterm()
    try:
        print("ready", flush=True)  # inside the try: the signal may come before the next line runs
        time.sleep(60)
    finally:
        print("teardown started", flush=True)
        time.sleep(0.5)  # a second SIGTERM arrives here and must not cut the teardown short
        print("teardown done", flush=True)
""")


def test_sigterm_runs_the_teardown_once_to_its_end(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        child.send_signal(signal.SIGTERM)
        assert child.stdout.readline().strip() == "teardown started"
        time.sleep(0.1)
        child.send_signal(signal.SIGTERM)
        assert child.wait(WAIT_S_MAX) == 128 + signal.SIGTERM
        assert child.stdout.read().strip() == "teardown done"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(WAIT_S_MAX)
