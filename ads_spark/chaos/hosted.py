"""A fault-injection run on network-namespace test hosts: the parent builds and removes the hosts, a child runs.

The parent (``run_on_hosts``, in the caller's own namespace) builds the hosts
{zk, b1, b2, b3, client}, runs ``python -m ads_spark.chaos.hosted`` on the
client host, and removes every namespace (killing whatever still runs in them)
when the child ends, fails, times out or the parent is interrupted. The child
starts ZooKeeper and the brokers each on its own host, runs the workload from
the client host, cuts links with the nemesis, checks, and writes the report.
Only the child ever opens a socket to a test host's address.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from ads_spark.chaos.hosts import HostsUnavailableError, TestNetwork, missing_requirements, sweep_stale
from ads_spark.cluster import ZOOKEEPER_HOST, LocalCluster, broker_host_name

BROKERS = 3
CLIENT_HOST = "client"
HOST_NAMES = [ZOOKEEPER_HOST] + [broker_host_name(b) for b in range(1, BROKERS + 1)] + [CLIENT_HOST]
CHILD_OVERHEAD_S = 300.0  # start-up, heal wait, final reads and shutdown on top of the faults


def run_on_hosts(scenario: str, duration_s: float, seed: int, out: Path) -> dict:
    reason = missing_requirements()
    if reason:
        raise HostsUnavailableError(f"scenario {scenario!r} runs on network-namespace test hosts: {reason}")
    sweep_stale()
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    network = TestNetwork(HOST_NAMES)
    with tempfile.TemporaryDirectory(prefix="ads-chaos-hosts-") as state_dir, network:
        argv = network.exec_prefix(CLIENT_HOST) + [
            sys.executable, "-m", "ads_spark.chaos.hosted", "--scenario", scenario, "--duration", str(duration_s),
            "--seed", str(seed), "--out", str(out), "--state-dir", state_dir, "--run-id", network.run_id]
        with open(out / "run.log", "wb") as log:
            child = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   timeout=duration_s + CHILD_OVERHEAD_S)
        if child.returncode != 0:
            tail = (out / "run.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"chaos run on test hosts failed (exit {child.returncode}); log {out / 'run.log'}:\n"
                               f"{tail}")
    return json.loads((out / "report.json").read_text())


def main(argv: list[str] | None = None) -> int:
    from ads_spark.chaos.runner import execute, write_report

    parser = argparse.ArgumentParser(description=__doc__)
    for flag in ("--scenario", "--out", "--state-dir", "--run-id"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--duration", type=float, required=True)
    parser.add_argument("--seed", type=int, required=True)
    args = parser.parse_args(argv)
    network = TestNetwork(HOST_NAMES, run_id=args.run_id)  # built by the parent: only used here
    cluster = LocalCluster(Path(args.state_dir) / "cluster", network=network)
    report = execute(cluster, args.scenario, args.duration, args.seed, network, Path(args.out) / "logs")
    write_report(report, Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
