"""What log compaction costs (issue #24): the cleaner's throughput and its effect on produce latency, one run.

    python -m benchmarks.compaction --out benchmarks/results [--mb 128] [--keys 4000] [--runs 3]
                                    [--rate-per-s 500] [--cleaner-io-bytes-per-s B] [--no-cluster]

Two parts:

* ``cleaner``: ``cleaner.clean_log`` in this process on a log of ``--mb`` MiB of keyed 1 KiB records
  (``--keys`` distinct keys, 500-record batches, 4 MiB segments, every segment but the active one
  cleanable), unthrottled: MB/s read and written, records kept and removed; a fresh log per run (copied
  from one written once), median of ``--runs``.
* ``latency``: a 3-broker local cluster (RF=3, min.insync.replicas=2, acks=all); a 1-partition topic
  ``lat`` (cleanup.policy=delete) gets keyed 1 KiB records paced at ``--rate-per-s``, and each record's
  time from ``produce`` to its acknowledgement is sampled (records produced inside the window, after a
  1 s warm-up). A compacted topic ``churn`` (RF=3, 1 MiB segments) is filled with ``--mb`` MiB of
  keyed records before each run while ``min.cleanable.dirty.ratio=1.0`` (a dirty ratio is never above 1:
  the cleaners leave it alone). Each run has two windows, their order alternating run by run: ``idle``
  (nothing to clean) and ``running`` (``min.cleanable.dirty.ratio`` altered to 0.01: every broker's
  cleaner rewrites its replica; the window lasts until all three have finished, read from
  ``ads_log_cleaner_runs_total``; then the ratio goes back to 1.0). The idle window lasts as long as the
  running one of the same run. The cluster-side cleaner MB/s is the brokers' ``ads_log_cleaner_bytes_read``
  over the running window. ``--cleaner-io-bytes-per-s`` sets the brokers' ``log.cleaner.io.max.bytes.per.second``
  (default: unlimited, Kafka's default), to see what the throttle buys.

Writes DIR/compaction.json (every sample's summary) and DIR/compaction.md (the tables); p50/p99 running
over idle are ratios within one run, the figures the note (docs/perf/compaction.md) quotes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pyarrow as pa

from ads_spark.broker.log import LogConfig
from ads_spark.broker.log.partition_log import PartitionLog
from ads_spark.client import Admin, Producer
from ads_spark.cluster import LocalCluster, unwind_on_sigterm
from ads_spark.protocol.records import PRODUCE_SCHEMA

VALUE_BYTES = 1024
BATCH_RECORDS = 500
SEGMENT_BYTES = 4 << 20
CHURN_SEGMENT_BYTES = 1 << 20
WINDOW_MAX_S = 300  # a running window that does not finish within this is reported as such
IDLE_RATIO, RUNNING_RATIO = "1.0", "0.01"
WARMUP_S = 1.0  # the paced writer's first second (leaders learned, streams open) is not sampled


def keyed_batch(first: int, keys: int, records: int = BATCH_RECORDS) -> pa.RecordBatch:
    numbers = range(first, first + records)
    return pa.RecordBatch.from_pydict({
        "timestamp": pa.array([int(time.time() * 1000)] * records, pa.timestamp("ms")),
        "key": pa.array([b"key-%06d" % (n % keys) for n in numbers], pa.binary()),
        "value": pa.array([b"%010d" % n + b"v" * (VALUE_BYTES - 10) for n in numbers], pa.binary()),
        "headers": pa.array([[]] * records, PRODUCE_SCHEMA.field("headers").type),
    }, schema=PRODUCE_SCHEMA)


# ---- part 1: the cleaner alone ------------------------------------------------------------------------------


def write_log(directory: Path, megabytes: int, keys: int) -> None:
    config = LogConfig(segment_bytes=SEGMENT_BYTES, cleanup_policy="compact")
    log = PartitionLog.open(directory, config, recovery_point=0, clean_shutdown=False, now_ms=int(time.time() * 1000))
    written = 0
    while log.size_bytes < megabytes << 20:
        log.append_as_leader(keyed_batch(written, keys), leader_epoch=0, now_ms=int(time.time() * 1000))
        written += BATCH_RECORDS
    log.roll(int(time.time() * 1000))
    log.close()


def clean_once(source: Path, work: Path) -> dict:
    from ads_spark.broker.log.cleaner import clean_log

    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(source, work)
    config = LogConfig(segment_bytes=SEGMENT_BYTES, cleanup_policy="compact")
    now = int(time.time() * 1000)
    log = PartitionLog.open(work, config, recovery_point=0, clean_shutdown=True, now_ms=now)
    try:
        end = log.segment_summaries()[-1][0]
        size_before = log.size_bytes
        started = time.perf_counter()
        stats = clean_log(log, clean_end_offset_exclusive=end, now_ms=now, delete_retention_ms=86_400_000,
                          min_compaction_lag_ms=0, key_map_entries_max=1 << 20, throttle=lambda _n: None)
        seconds = time.perf_counter() - started
        return {"seconds": seconds, "log_mb_s": size_before / seconds / 1e6,
                "bytes_read": stats.bytes_read, "bytes_written": stats.bytes_written,
                "read_mb_s": stats.bytes_read / seconds / 1e6, "written_mb_s": stats.bytes_written / seconds / 1e6,
                "records_kept": stats.records_kept, "records_removed": stats.records_removed,
                "log_bytes_before": size_before, "log_bytes_after": log.size_bytes}
    finally:
        log.close()


def cleaner_part(work: Path, args) -> dict:
    source = work / "source-0"
    write_log(source, args.mb, args.keys)
    runs = [clean_once(source, work / "clean-0") for _ in range(args.runs)]
    return {"runs": runs, "median_log_mb_s": statistics.median(r["log_mb_s"] for r in runs),
            "median_read_mb_s": statistics.median(r["read_mb_s"] for r in runs),
            "median_written_mb_s": statistics.median(r["written_mb_s"] for r in runs),
            "median_seconds": statistics.median(r["seconds"] for r in runs)}


# ---- part 2: produce latency with the cleaner idle and running -----------------------------------------------


def percentiles(latencies_ms: list[float]) -> dict[str, float]:
    samples = sorted(latencies_ms)
    if not samples:
        return {"p50_ms": float("nan"), "p99_ms": float("nan")}
    return {"p50_ms": samples[len(samples) // 2], "p99_ms": samples[min(len(samples) - 1, int(0.99 * len(samples)))]}


class PacedWriter:
    """acks=all records paced at ``rate_per_s`` to ``topic``; each one's produce-to-acknowledgement time.

    Only records produced inside the window (after a warm-up of ``WARMUP_S``) count."""

    def __init__(self, bootstrap: str, topic: str, rate_per_s: float):
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
        self.topic, self.rate_per_s = topic, rate_per_s
        self.samples: list[tuple[float, float]] = []  # (produced at, latency ms)
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        started, sent = time.monotonic(), 0
        value = b"l" * VALUE_BYTES
        while not self._stop.is_set():
            due = int((time.monotonic() - started) * self.rate_per_s) - sent
            for _ in range(max(0, due)):
                at = time.perf_counter()
                future = self.producer.produce(self.topic, value=value, key=b"k%d" % (sent % 100), partition=0)
                future.add_done_callback(lambda f, at=at: self._done(f, at))
                sent += 1
            time.sleep(0.002)

    def _done(self, future, at: float) -> None:
        if future.exception() is None:
            self.samples.append((at, (time.perf_counter() - at) * 1000))
        else:
            self.errors += 1

    def window(self, body) -> dict:
        """Runs ``body()`` while sampling (after the warm-up); the window's percentiles, samples and seconds."""
        self._thread.start()
        time.sleep(WARMUP_S)
        started = time.perf_counter()
        try:
            body()
        finally:
            ended = time.perf_counter()
            self._stop.set()
            self._thread.join(30)
            self.producer.flush(60)
            self.producer.close()
        inside = [latency for at, latency in self.samples if started <= at <= ended]
        return {"seconds": ended - started, "samples": len(inside), "errors": self.errors, **percentiles(inside)}


def metric_per_broker(admin: Admin, series: str) -> dict[int, float]:
    """A series per broker, from each broker's metrics port (registered in ZooKeeper)."""
    ports = {int(b["id"]): b.get("metrics_port") for b in admin.cluster().get("brokers", [])}
    return {broker_id: _scrape(port, series) if port else 0.0 for broker_id, port in ports.items()}


def _scrape(port: int, series: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return next((float(line.split()[1]) for line in text.splitlines() if line.startswith(series + " ")), 0.0)


def fill_churn(bootstrap: str, megabytes: int, keys: int, first: int) -> int:
    with Producer({"bootstrap.servers": bootstrap, "acks": "all"}) as producer:
        batches = (megabytes << 20) // (BATCH_RECORDS * VALUE_BYTES)
        futures = [producer.produce_arrow("churn", keyed_batch(first + i * BATCH_RECORDS, keys), partition=0)
                   for i in range(batches)]
        for future in futures:
            future.result(timeout=300)
    return first + batches * BATCH_RECORDS


def running_window(admin: Admin, bootstrap: str, rate_per_s: float) -> dict:
    runs_before = metric_per_broker(admin, "ads_log_cleaner_runs_total")
    read_before = metric_per_broker(admin, "ads_log_cleaner_bytes_read_total")
    writer = PacedWriter(bootstrap, "lat", rate_per_s)
    finished = {"all": False}

    def clean():
        admin.alter_configs("churn", {"min.cleanable.dirty.ratio": RUNNING_RATIO})
        deadline = time.monotonic() + WINDOW_MAX_S
        while time.monotonic() < deadline:
            runs = metric_per_broker(admin, "ads_log_cleaner_runs_total")
            if all(runs[b] > runs_before[b] for b in runs):
                finished["all"] = True
                break
            time.sleep(0.2)
        admin.alter_configs("churn", {"min.cleanable.dirty.ratio": IDLE_RATIO})

    result = writer.window(clean)
    read = sum(metric_per_broker(admin, "ads_log_cleaner_bytes_read_total").values()) - sum(read_before.values())
    return {**result, "cleaners_finished": finished["all"], "cleaner_bytes_read": read,
            "cleaner_read_mb_s_all_brokers": read / result["seconds"] / 1e6}


def latency_part(work: Path, args) -> dict:
    cluster = LocalCluster(work / "cluster")
    overrides = ["log.cleaner.backoff.ms=100", "replica.lag.time.max.ms=10000"]
    if args.cleaner_io_bytes_per_s:
        overrides.append(f"log.cleaner.io.max.bytes.per.second={args.cleaner_io_bytes_per_s}")
    cluster.up(brokers=3, overrides=overrides)
    unwind_on_sigterm()
    bootstrap = cluster.bootstrap_servers
    admin = Admin({"bootstrap.servers": bootstrap})
    try:
        admin.create_topic("lat", 1, 3, config={"min.insync.replicas": "2"})
        admin.create_topic("churn", 1, 3, config={"min.insync.replicas": "2", "cleanup.policy": "compact",
                                                  "segment.bytes": str(CHURN_SEGMENT_BYTES),
                                                  "min.cleanable.dirty.ratio": IDLE_RATIO})
        time.sleep(2)
        runs, first = [], 0
        for index in range(args.runs):
            first = fill_churn(bootstrap, args.mb, args.keys, first)
            order = ("idle", "running") if index % 2 == 0 else ("running", "idle")
            run = {"order": order}
            for kind in order:
                if kind == "running":
                    run["running"] = running_window(admin, bootstrap, args.rate_per_s)
                else:
                    seconds = run["running"]["seconds"] if "running" in run else args.idle_s
                    run["idle"] = PacedWriter(bootstrap, "lat", args.rate_per_s).window(lambda s=seconds: time.sleep(s))
            run["p50_ratio"] = run["running"]["p50_ms"] / run["idle"]["p50_ms"]
            run["p99_ratio"] = run["running"]["p99_ms"] / run["idle"]["p99_ms"]
            runs.append(run)
            print(f"run {index}: idle p50/p99 {run['idle']['p50_ms']:.1f}/{run['idle']['p99_ms']:.1f} ms, running "
                  f"{run['running']['p50_ms']:.1f}/{run['running']['p99_ms']:.1f} ms over "
                  f"{run['running']['seconds']:.1f} s", file=sys.stderr)
        return {"runs": runs, "median_p50_ratio": statistics.median(r["p50_ratio"] for r in runs),
                "median_p99_ratio": statistics.median(r["p99_ratio"] for r in runs)}
    finally:
        admin.close()
        for broker_id in cluster.broker_ids():
            cluster.kill_broker(broker_id)
        cluster.down()


def markdown(report: dict) -> str:
    lines = []
    cleaner = report["cleaner"]
    lines += ["| cleaner (in process, unthrottled) | log MB/s cleaned | read MB/s (both passes) | written MB/s | "
              "seconds | records kept / removed |", "|---|---|---|---|---|---|"]
    for i, run in enumerate(cleaner["runs"]):
        lines.append(f"| run {i} | {run['log_mb_s']:.1f} | {run['read_mb_s']:.1f} | {run['written_mb_s']:.1f} | "
                     f"{run['seconds']:.2f} | {run['records_kept']} / {run['records_removed']} |")
    lines.append(f"| **median** | **{cleaner['median_log_mb_s']:.1f}** | {cleaner['median_read_mb_s']:.1f} | "
                 f"{cleaner['median_written_mb_s']:.1f} | {cleaner['median_seconds']:.2f} | |")
    latency = report.get("latency")
    if latency:
        lines += ["", "| run (order) | idle p50 / p99 ms | running p50 / p99 ms | p50 x | p99 x | window s | "
                  "cleaners MB/s (3 brokers) |", "|---|---|---|---|---|---|---|"]
        for i, run in enumerate(latency["runs"]):
            idle, running = run["idle"], run["running"]
            lines.append(f"| {i} ({' then '.join(run['order'])}) | {idle['p50_ms']:.1f} / {idle['p99_ms']:.1f} | "
                         f"{running['p50_ms']:.1f} / {running['p99_ms']:.1f} | {run['p50_ratio']:.2f} | "
                         f"{run['p99_ratio']:.2f} | {running['seconds']:.1f} | "
                         f"{running['cleaner_read_mb_s_all_brokers']:.1f} |")
        lines.append(f"| **median** | | | **{latency['median_p50_ratio']:.2f}** | **{latency['median_p99_ratio']:.2f}** "
                     f"| | |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--mb", type=int, default=128)
    parser.add_argument("--keys", type=int, default=4000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate-per-s", type=float, default=500)
    parser.add_argument("--idle-s", type=float, default=5, help="idle window when it comes first")
    parser.add_argument("--no-cluster", action="store_true", help="the in-process cleaner part only")
    parser.add_argument("--cleaner-io-bytes-per-s", type=float, default=None,
                        help="the brokers' log.cleaner.io.max.bytes.per.second (default: unlimited)")
    args = parser.parse_args()
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="ads-compaction-bench-"))
    try:
        report = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                  "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                              "load_average": os.getloadavg()},
                  "cleaner": cleaner_part(work, args)}
        if not args.no_cluster:
            report["latency"] = latency_part(work, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["total_seconds"] = round(time.monotonic() - started, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "compaction.json").write_text(json.dumps(report, indent=2) + "\n")
    table = markdown(report)
    (args.out / "compaction.md").write_text(table)
    print(table)
    print(f"total {report['total_seconds']} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
