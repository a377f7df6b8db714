"""The child of a fault-injection run on test hosts: run on the client host by ``hosted.run_on_hosts``.

It starts the cluster on the hosts the parent built (``hosted.HOST_NAMES``, named by the parent's run id),
runs the scenario with ``runner.execute`` and writes the report where the parent reads it. A module of its
own, so that the runner (which calls the parent side) and this child (which calls the runner) form no cycle.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ads_spark.chaos.hosted import HOST_NAMES
from ads_spark.chaos.hosts import TestNetwork
from ads_spark.chaos.runner import execute, write_report
from ads_spark.cluster import LocalCluster


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    for flag in ("--scenario", "--out", "--state-dir", "--run-id"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--duration", type=float, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--client", default="ads")  # the workload's client (runner.CLIENTS)
    args = parser.parse_args(argv)
    network = TestNetwork(HOST_NAMES, run_id=args.run_id)  # built by the parent: only used here
    cluster = LocalCluster(Path(args.state_dir) / "cluster", network=network)
    report = execute(cluster, args.scenario, args.duration, args.seed, network, Path(args.out) / "logs",
                     args.client)
    write_report(report, Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
