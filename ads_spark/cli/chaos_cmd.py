"""``ads chaos run``: a fault-injection run on a local cluster with a seeded nemesis schedule.

Writes ``DIR/report.json`` and ``DIR/report.png``; exits 1 when the checker finds
lost, duplicated or inconsistent records (or any other anomaly it counts).
"""

from __future__ import annotations

from pathlib import Path

from ads_spark.chaos.hosts import HostsUnavailableError
from ads_spark.errors import InvalidRequestError


def register(commands) -> None:
    chaos = commands.add_parser("chaos", help="fault injection in the style of Jepsen")
    actions = chaos.add_subparsers(dest="action", required=True)
    run = actions.add_parser("run")
    run.add_argument("--scenario", required=True)
    run.add_argument("--duration", type=float, default=60.0, help="seconds of faults")
    run.add_argument("--seed", type=int, default=1)
    run.add_argument("--out", default="chaos-out")
    run.add_argument("--client", default="ads", help="the workload's client: ads (ADS's own, Flight) or kafka "
                     "(confluent-kafka on the brokers' Kafka listeners)")
    run.set_defaults(func=chaos_run)


def chaos_run(args) -> int:
    from ads_spark.chaos import runner

    try:
        report = runner.run(args.scenario, args.duration, args.seed, Path(args.out), client=args.client)
    except (HostsUnavailableError, ValueError) as exc:
        raise InvalidRequestError(str(exc)) from None
    keys = ("acknowledged", "lost", "unseen", "duplicated", "inconsistent_offsets", "non_monotonic",
            "aborted_reads", "replica_divergence", "availability", "ok_share", "longest_outage_s",
            "longest_outage_partition", "longest_outage_cause", "errors", "produce_streams_opened",
            "produce_stream_threads_left")
    print(" ".join(f"{k}={report[k]}" for k in keys))
    print(f"report: {Path(args.out) / 'report.json'} and report.png")
    return 0 if report["valid"] else 1
