"""ADS against NATS JetStream and RabbitMQ streams, 3 replicas each, 1 KiB records, in one process run.

    python -m benchmarks.compare --out DIR [--quick] [--runs 3] [--records N] [--no-spark] [--no-peers]

Peers need ``bash benchmarks/peers/install.sh`` first (not part of CI); a peer
that cannot be installed or started is reported as ``unavailable: <reason>``
and everything else is still measured. Systems, all on 127.0.0.1:

* ads:      3 brokers, RF=3, acks=all, min.insync.replicas=2;
* ads-rf1:  the same brokers, RF=1 acks=1 (the unreplicated reference);
* ceiling:  ``benchmarks.relay``, a bare replicated Flight relay (produce_batched only);
* ceiling-rf1: the same relay without followers, so the bare relay's own RF=3/RF=1 ratio on this
  machine stands next to ADS's;
* nats:     3-node JetStream cluster, file storage, R3 (acknowledged by a quorum);
* rabbitmq: 3-node cluster, a stream of 3 replicas (confirmed by a quorum).

Cases: produce_record (the client's per-record call with its own batching),
produce_batched (explicit batches of 512), consume (everything back through
the record API; ads also consume_arrow), latency (p50/p99/p99.9 end to end at
``--rate-per-s``), and after the peers are down, unless --no-spark, Spark
streaming read and write (spark_read, spark_write) next to the in-memory source
ceiling from ``benchmarks.spark_source_sink`` (for writes: a Python sink that
drops what Spark hands it; ``spark-noop`` is Spark's own noop sink, no Python).
Runs alternate system by system (A/B/A/B) so drift hits them alike. Prints
medians with min-max and writes DIR/compare.json and DIR/compare.png.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from pathlib import Path

from ads_spark.cluster import LocalCluster, unwind_on_sigterm
from benchmarks import compare_report, run_args
from benchmarks.compare_ads import AdsBench, CeilingBench
from benchmarks.latency import percentiles_ms
from benchmarks.peers.procs import PeerUnavailable

CASES = {
    "ads": ["produce_record", "produce_batched", "consume", "consume_arrow", "latency"],
    "ads-rf1": ["produce_record", "produce_batched", "consume_arrow", "latency"],
    "ceiling": ["produce_batched"],
    "ceiling-rf1": ["produce_batched"],
    "nats": ["produce_record", "produce_batched", "consume", "latency"],
    "rabbitmq": ["produce_record", "produce_batched", "consume", "latency"],
}
READ_CASES = ("consume", "consume_arrow")
# Each ADS case next to the ceiling's same kind of query: a streaming read includes the query's start-up
# (~1.5 s here, the same for any Python source), which a batch read does not.
SPARK_CASES = {("ads", "read_stream"): ("ads", "spark_read"), ("ceiling", "read_stream"): ("ceiling", "spark_read"),
               ("ads", "read_batch"): ("ads", "spark_read_batch"),
               ("ceiling", "read_batch"): ("ceiling", "spark_read_batch"),
               ("ads-network", "read_batch"): ("ads-network", "spark_read_batch"),
               ("ads", "write_stream"): ("ads", "spark_write"), ("ceiling", "write_stream"): ("ceiling", "spark_write"),
               ("noop", "write_stream"): ("spark-noop", "spark_write")}


def build_systems(work: Path, with_peers: bool) -> list:
    cluster = LocalCluster(work / "ads")
    systems = [AdsBench("ads", cluster, 3, "all", {"min.insync.replicas": "2"}),
               AdsBench("ads-rf1", cluster, 1, "1", {}), CeilingBench(work / "relay"),
               CeilingBench(work / "relay-rf1", followers=0)]
    if with_peers:
        from benchmarks.compare_peers import NatsBench, RabbitBench

        systems += [NatsBench(), RabbitBench()]
    return systems


def start_systems(systems: list, statuses: dict) -> list:
    """Starts each system; one that cannot start is reported unavailable and left out."""
    started = []
    for bench in systems:
        began = time.monotonic()
        try:
            bench.up()
        except Exception as exc:  # whatever stops a system from starting is reported, the rest still run
            if not isinstance(exc, PeerUnavailable):
                traceback.print_exc(file=sys.stderr)
            statuses[(bench.system, "*")] = f"unavailable: {exc}"
            print(f"{bench.system}: unavailable: {exc}", file=sys.stderr)
            continue
        print(f"{bench.system} up in {time.monotonic() - began:.1f}s", file=sys.stderr)
        started.append(bench)
    return started


def measure_system(bench, records: int, rate_per_s: float, latency_s: float, samples: dict, statuses: dict) -> None:
    """One run of every case of one system; a failing case is recorded and the rest go on."""
    produced_topic = None
    for case in CASES[bench.system]:
        if (bench.system, case) in statuses:
            continue  # failed in an earlier run: not retried, so a broken case cannot eat the time budget
        if case in READ_CASES and produced_topic is None:
            continue  # nothing was produced to read back this run
        topic = produced_topic if case in READ_CASES else bench.new_topic()
        try:
            if case == "latency":
                latencies_ms = bench.latency(topic, rate_per_s, latency_s)
                sample = {"records_per_s": len(latencies_ms) / latency_s, **percentiles_ms(latencies_ms)}
            else:
                sample = {"records_per_s": getattr(bench, case)(topic, records)}
            samples.setdefault((bench.system, case), []).append(sample)
            if case == "produce_batched":
                produced_topic = topic
        except Exception as exc:  # reported in the table, never hides the other cases
            statuses[(bench.system, case)] = f"failed: {type(exc).__name__}: {exc}"[:300]
            traceback.print_exc(file=sys.stderr)
        if topic is not produced_topic:
            _delete_quietly(bench, topic)
    if produced_topic is not None:
        _delete_quietly(bench, produced_topic)


def _delete_quietly(bench, topic: str) -> None:
    try:
        bench.delete_topic(topic)
    except Exception as exc:  # a leftover topic costs disk, not correctness; the cluster is removed at the end
        print(f"{bench.system}: could not delete {topic}: {exc}", file=sys.stderr)


def spark_phase(ads: AdsBench, work: Path, records: int, runs: int, samples: dict, statuses: dict) -> None:
    """``spark_source_sink.run_once`` per run on the ADS cluster already up, the peers already down."""
    from benchmarks import spark_source_sink

    spark = None
    try:
        topic = ads.new_topic()
        spark_source_sink.fill_topic(ads.cluster.bootstrap_servers, topic, records)
        spark = spark_source_sink.spark_session()
        for run in range(runs):
            result = spark_source_sink.run_once(spark, ads.cluster.bootstrap_servers, ads.admin, work / "spark",
                                                records, topic, stream_ceiling=True)
            for key, value in result.items():
                samples.setdefault(SPARK_CASES[key], []).append({"records_per_s": value})
            print(f"spark run {run + 1}/{runs} done", file=sys.stderr)
    except Exception as exc:
        statuses[("ads", "spark_read")] = f"failed: {type(exc).__name__}: {exc}"[:300]
        traceback.print_exc(file=sys.stderr)
    finally:
        if spark is not None:
            spark.stop()


def run(args, work: Path) -> list[dict]:
    samples: dict = {}
    statuses: dict = {}
    systems = build_systems(work, not args.no_peers)
    try:
        running = start_systems(systems, statuses)
        for run_index in range(args.runs):
            for bench in running:
                unwind_on_sigterm()  # again after each system's clients started (see its docstring)
                began = time.monotonic()
                measure_system(bench, args.records, args.rate_per_s, args.latency_s, samples, statuses)
                print(f"run {run_index + 1}/{args.runs} {bench.system} done in {time.monotonic() - began:.0f}s",
                      file=sys.stderr)
        for bench in running:
            if bench.system not in ("ads", "ads-rf1"):
                bench.down()
        ads = systems[0]
        if not args.no_spark and ads in running:
            spark_phase(ads, work, args.spark_records, args.runs, samples, statuses)
    finally:
        for bench in systems:  # each down is idempotent and acts only on what that system started
            try:
                bench.down()
            except Exception:
                traceback.print_exc(file=sys.stderr)
    return compare_report.summarise(samples, statuses)


def parse_args(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description="ADS vs NATS JetStream vs RabbitMQ streams, replicated")
    run_args.add(parser, "a run of a few minutes: fewer records, shorter latency")
    parser.add_argument("--spark-records", type=int, default=None)
    parser.add_argument("--rate-per-s", type=float, default=5000.0, help="the latency case's fixed produce rate")
    parser.add_argument("--latency-s", type=float, default=None, help="seconds per latency run (default 10, quick 3)")
    parser.add_argument("--no-spark", action="store_true")
    parser.add_argument("--no-peers", action="store_true")
    args = run_args.finish(parser, parser.parse_args(argv))
    args.spark_records = args.spark_records or (30_720 if args.quick else 307_200)
    args.latency_s = args.latency_s or (3.0 if args.quick else 10.0)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    unwind_on_sigterm()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ads-compare-") as work:
        rows = run(args, Path(work))
    compare_report.write_json(rows, out / "compare.json")
    chart_problem = compare_report.write_chart(rows, out / "compare.png")
    compare_report.print_table(rows)
    print(f"{args.runs} runs in {time.monotonic() - started:.0f}s; wrote {out / 'compare.json'}"
          + (f" ({chart_problem})" if chart_problem else f" and {out / 'compare.png'}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
