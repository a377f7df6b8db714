"""A fault-injection run on network-namespace test hosts: the parent side, which builds and removes the hosts.

The parent (``run_on_hosts``, in the caller's own namespace) builds the hosts
{zk, b1, b2, b3, client}, runs ``python -m ads_spark.chaos.hosted_child`` on
the client host, and removes every namespace (killing whatever still runs in
them) when the child ends, fails, times out or the parent is interrupted. The
child (``hosted_child.py``) starts ZooKeeper and the brokers each on its own
host, runs the workload from the client host, cuts links with the nemesis,
checks, and writes the report. Only the child ever opens a socket to a test
host's address. The child is its own module so that this one, which the runner
calls, never imports the runner back.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from ads_spark.chaos.hosts import HostsUnavailableError, TestNetwork, missing_requirements, sweep_stale
from ads_spark.cluster import ZOOKEEPER_HOST, broker_host_name

BROKERS = 3
CLIENT_HOST = "client"
HOST_NAMES = [ZOOKEEPER_HOST] + [broker_host_name(b) for b in range(1, BROKERS + 1)] + [CLIENT_HOST]
CHILD_MODULE = "ads_spark.chaos.hosted_child"
CHILD_OVERHEAD_S = 300.0  # start-up, heal wait, final reads and shutdown on top of the faults


def run_on_hosts(scenario: str, duration_s: float, seed: int, out: Path, client: str = "ads") -> dict:
    reason = missing_requirements()
    if reason:
        raise HostsUnavailableError(f"scenario {scenario!r} runs on network-namespace test hosts: {reason}")
    sweep_stale()
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    network = TestNetwork(HOST_NAMES)
    with tempfile.TemporaryDirectory(prefix="ads-chaos-hosts-") as state_dir, network:
        argv = network.exec_prefix(CLIENT_HOST) + [
            sys.executable, "-m", CHILD_MODULE, "--scenario", scenario, "--duration", str(duration_s),
            "--seed", str(seed), "--out", str(out), "--state-dir", state_dir, "--run-id", network.run_id,
            "--client", client]
        with open(out / "run.log", "wb") as log:
            child = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   timeout=duration_s + CHILD_OVERHEAD_S)
        if child.returncode != 0:
            tail = (out / "run.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"chaos run on test hosts failed (exit {child.returncode}); log {out / 'run.log'}:\n"
                               f"{tail}")
    return json.loads((out / "report.json").read_text())
