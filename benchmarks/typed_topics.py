"""Typed topics against their Kafka-shaped twin in Spark, side by side in one run (issue #26, item 5).

    python -m benchmarks.typed_topics --out DIR [--rows N] [--runs K] [--quick]

On one local 3-broker cluster (RF=3, min.insync.replicas=2) and one local[2] SparkSession: a 20-column typed
topic (10 BIGINT with a monotonic ``seq``, 10 STRING of 8-16 characters; ``schema.statistics.columns=seq``)
and a Kafka-shaped topic holding the same rows as JSON values, both filled before any clock starts
(``typed_topics_data``). Each run, for reads over Flight (``ads.local.reads=false``) and local reads:

* ``json``: the Kafka-shaped topic with ``from_json`` of seq and s0;
* ``typed_full``: the typed topic, every column moved to Spark;
* ``typed_projection``: the ``columns`` option, seq and s0;
* ``typed_projection_schema``: a user ``.schema("seq bigint, s0 string")``, so no meta column is sent;
* ``typed_filter_option`` / ``typed_filter_pushed``: the projection plus ``seq >= 0.9 N``, by the ``filter``
  option and by Spark's pushed filters (``pushFilters=true`` with Spark's Python pushdown conf on);

every read is ``agg(count, sum(seq), sum(length(s0)))`` in Spark, checked against the generator's checksum
(the JSON read computes the tail's too). Then the same rows streamed (availableNow) from Parquet files into a
fresh typed topic, a fresh Kafka-shaped one (``to_json(struct(*))``), and into the Python-sink ceiling
(``ads-synthetic`` of ``spark_source_sink``) with either DataFrame. Per case: rows/s, the bytes the brokers
sent (``ads_fetch_bytes_total{reader="consumer"}``), the CPU per million rows of the brokers, the Spark JVM and
its Python workers (/proc), and the batches the brokers skipped. Writes DIR/typed_topics.json and prints the
cases and the issue's targets; ratios are taken within each run.

4M rows by default: on the 2-core machine the whole run (fill, a warm-up run, 3 runs) took ~7 minutes when
quiet (2M: 3.5 minutes); ``--quick`` is 200k rows and one run, a smoke test.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

from ads_spark.client import Admin, TopicPartition
from ads_spark.cluster import LocalCluster
from benchmarks.compaction import metric_per_broker
from benchmarks.kafka_clients import cpu_seconds
from benchmarks.spark_source_sink import local_spark, synthetic_source_class, timed
from benchmarks import typed_topics_data as data
from benchmarks.typed_topics_report import print_tables, summarise, targets

ROWS_DEFAULT = 4_000_000
ROWS_QUICK = 200_000
TOPIC_CONFIG = {"min.insync.replicas": "2"}
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
BYTES_SERIES = 'ads_fetch_bytes_total{reader="consumer"}'
SKIPPED_SERIES = "ads_fetch_batches_skipped_total"


class Bench:
    """The cluster, Spark session and topics of one benchmark, and the measuring of one case."""

    def __init__(self, cluster: LocalCluster, admin: Admin, spark, rows: int, work: Path):
        self.cluster, self.admin, self.spark, self.rows, self.work = cluster, admin, spark, rows, work
        self.bootstrap = cluster.bootstrap_servers
        self.pids = [cluster.broker_pid(b) for b in cluster.broker_ids()]
        self.tail_from = rows - rows // 10
        self.typed_topic, self.json_topic = "typed-20", "json-20"
        self.parquet = work / "parquet"
        self.jvm_pid = spark.sparkContext._gateway.proc.pid  # the Spark JVM (spark-submit) this session started

    def counters(self) -> tuple[float, ...]:
        return (sum(metric_per_broker(self.admin, BYTES_SERIES).values()),
                sum(metric_per_broker(self.admin, SKIPPED_SERIES).values()),
                sum(cpu_seconds(pid) for pid in self.pids), *spark_cpu_seconds(self.jvm_pid))

    def measure(self, action, rows: int) -> dict:
        """Run ``action`` (returns what it checks) timed, with the brokers' counters and every process's CPU
        around it (CPU in seconds per million rows)."""
        before = self.counters()
        outcome: dict = {}
        seconds = timed(lambda: outcome.setdefault("value", action()))
        delta = [a - b for a, b in zip(self.counters(), before)]
        per_m = [value / rows * 1e6 for value in delta[2:]]
        return {"rows_per_s": rows / seconds, "seconds": seconds, "fetch_bytes": delta[0],
                "batches_skipped": delta[1], "broker_cpu_s_per_m_rows": per_m[0], "jvm_cpu_s_per_m_rows": per_m[1],
                "python_workers_cpu_s_per_m_rows": per_m[2], "check": outcome["value"]}

    def reader(self, topic: str, local: bool, schema: str | None = None, **options):
        reader = self.spark.read.format("ads").option("ads.bootstrap.servers", self.bootstrap) \
            .option("subscribe", topic).option("ads.local.reads", "true" if local else "false")
        if schema is not None:
            reader = reader.schema(schema)
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load()


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(stat.parent.name))
    return children


def spark_cpu_seconds(jvm_pid: int) -> tuple[float, float]:
    """CPU of the Spark JVM and of its Python workers (every process under it, with the CPU of workers that
    exited and were waited for: /proc's cutime and cstime of their parents)."""
    children = _children()
    total, pending = 0.0, list(children.get(jvm_pid, []))
    while pending:
        pid = pending.pop()
        pending.extend(children.get(pid, []))
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    return cpu_seconds(jvm_pid), total


def _checksum(df, *conditions: str) -> list[int]:
    """count, sum(seq), sum(length(s0)) of ``df`` in Spark, then the same for each condition's rows."""
    parts = ["count(1)", "sum(seq)", "sum(length(s0))"]
    for condition in conditions:
        parts += [f"count_if({condition})", f"sum(if({condition}, seq, 0))", f"sum(if({condition}, length(s0), 0))"]
    row = df.selectExpr(*parts).collect()[0]
    return [int(v or 0) for v in row]


def read_cases(bench: Bench, local: bool) -> dict:
    """One sample of every read case, over local reads or Flight."""
    tail = f"seq >= {bench.tail_from}"
    cases = {}
    json_df = lambda: bench.reader(bench.json_topic, local).selectExpr(  # noqa: E731
        f"from_json(CAST(value AS STRING), '{data.JSON_FIELDS}') AS j").selectExpr("j.seq AS seq", "j.s0 AS s0")
    cases["json"] = bench.measure(lambda: _checksum(json_df(), tail), bench.rows)
    cases["typed_full"] = bench.measure(lambda: _checksum(bench.reader(bench.typed_topic, local)), bench.rows)
    cases["typed_projection"] = bench.measure(
        lambda: _checksum(bench.reader(bench.typed_topic, local, columns="seq,s0")), bench.rows)
    # The user .schema(...) route: the DataFrame has no meta columns besides the offset, so none is sent.
    cases["typed_projection_schema"] = bench.measure(
        lambda: _checksum(bench.reader(bench.typed_topic, local, schema="seq bigint, s0 string")), bench.rows)
    cases["typed_filter_option"] = bench.measure(
        lambda: _checksum(bench.reader(bench.typed_topic, local, columns="seq,s0", filter=tail)), bench.rows)
    bench.spark.conf.set(PUSHDOWN_CONF, "true")
    try:
        cases["typed_filter_pushed"] = bench.measure(lambda: _checksum(
            bench.reader(bench.typed_topic, local, columns="seq,s0", pushFilters="true").where(tail)), bench.rows)
    finally:
        bench.spark.conf.unset(PUSHDOWN_CONF)
    return {(("local" if local else "flight"), name): value for name, value in cases.items()}


def write_case(bench: Bench, sink: str, shape: str) -> dict:
    """Stream the Parquet rows into ``sink`` (``ads``: a fresh topic, created and deleted off the clock)."""
    stream = bench.spark.readStream.schema(data.DDL).parquet(str(bench.parquet))
    if shape == "json":
        stream = stream.selectExpr("to_json(struct(*)) AS value")
    writer = stream.writeStream.option("checkpointLocation", str(bench.work / f"ckpt-{uuid.uuid4().hex}")) \
        .trigger(availableNow=True)
    topic = f"write-{shape}-{uuid.uuid4().hex[:6]}"
    if sink == "ads":
        bench.admin.create_topic(topic, data.PARTITIONS, 3, config=TOPIC_CONFIG,
                                 schema=data.DDL if shape == "typed" else None)
        writer = writer.format("ads").option("ads.bootstrap.servers", bench.bootstrap).option("topic", topic)
    else:
        writer = writer.format("ads-synthetic")
    result = bench.measure(lambda: writer.start().awaitTermination(), bench.rows)
    if sink == "ads":
        ends = bench.admin.list_offsets([TopicPartition(topic, p) for p in range(data.PARTITIONS)], "latest")
        result["check"] = [sum(ends.values())]
        assert result["check"][0] == bench.rows, f"{topic} holds {result['check'][0]} rows, not {bench.rows}"
        bench.admin.delete_topic(topic)
    return result


def run_once(bench: Bench) -> dict:
    samples = {}
    for local in (False, True):
        samples.update(read_cases(bench, local))
    for sink, shape in (("ceiling", "typed"), ("ads", "typed"), ("ceiling", "json"), ("ads", "json")):
        samples[("write", f"{sink}_{shape}")] = write_case(bench, sink, shape)
    return samples


def check_reads(samples: dict, everything: data.Checksum, tail: data.Checksum) -> None:
    """Every read's checksum against the generator's (the JSON read's tail part too); AssertionError otherwise."""
    whole, last = list(everything.as_tuple()), list(tail.as_tuple())
    for (mode, case), sample in samples.items():
        if mode == "write":
            continue
        want = last if case.startswith("typed_filter") else whole
        got = sample["check"][:3]
        assert got == want, f"{mode} {case}: checksum {got}, the rows give {want}"
        if case == "json":
            assert sample["check"][3:] == last, f"{mode} json tail: {sample['check'][3:]} != {last}"


def setup(bench: Bench) -> tuple[data.Checksum, data.Checksum]:
    stats = {**TOPIC_CONFIG, "schema.statistics.columns": "seq"}
    bench.admin.create_topic(bench.typed_topic, data.PARTITIONS, 3, config=stats, schema=data.DDL)
    bench.admin.create_topic(bench.json_topic, data.PARTITIONS, 3, config=TOPIC_CONFIG)
    started = time.perf_counter()
    sums = data.fill(bench.bootstrap, bench.typed_topic, bench.json_topic, bench.parquet, bench.rows,
                     bench.tail_from)
    print(f"filled {bench.rows:,} rows into both topics in {time.perf_counter() - started:.1f}s", file=sys.stderr)
    return sums


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Typed topics against their Kafka-shaped twin in Spark")
    parser.add_argument("--out", required=True)
    parser.add_argument("--rows", type=int, default=None, help=f"default {ROWS_DEFAULT:,}, quick {ROWS_QUICK:,}")
    parser.add_argument("--runs", type=int, default=None, help="measured runs (default 3, quick 1)")
    parser.add_argument("--warmup-runs", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="fewer rows and one run: a smoke test")
    args = parser.parse_args(argv)
    args.rows = args.rows or (ROWS_QUICK if args.quick else ROWS_DEFAULT)
    args.runs = args.runs or (1 if args.quick else 3)
    if args.rows < 10 * data.BATCH_ROWS or args.runs < 1:
        parser.error(f"--rows must be at least {10 * data.BATCH_ROWS} and --runs at least 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    samples: dict = {}
    with tempfile.TemporaryDirectory(prefix="ads-typed-bench-") as state_dir:
        cluster = LocalCluster(Path(state_dir) / "cluster")
        spark = None
        try:
            cluster.up(brokers=3)
            admin = Admin({"bootstrap.servers": cluster.bootstrap_servers})
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            spark = local_spark("ads-typed-bench")
            spark.dataSource.register(synthetic_source_class())
            bench = Bench(cluster, admin, spark, args.rows, Path(state_dir))
            everything, tail = setup(bench)
            for run in range(-args.warmup_runs, args.runs):
                results = run_once(bench)
                check_reads(results, everything, tail)
                if run >= 0:
                    for key, value in results.items():
                        samples.setdefault(key, []).append(value)
                print(f"run {run + 1}/{args.runs} done" if run >= 0 else "warm-up run done",
                      f"at {time.strftime('%H:%M:%S')}", file=sys.stderr)
        finally:
            if spark is not None:
                spark.stop()
            cluster.down()
    skippable = (args.rows - args.rows // 10) // data.BATCH_ROWS  # batches wholly below the filter's seq
    rows = summarise(samples, data.batch_count(args.rows), skippable)
    report = {"rows": args.rows, "runs": args.runs, "batches_per_topic": data.batch_count(args.rows),
              "batches_skippable": skippable,
              "row_bytes": data.row_bytes(), "checksum_all": list(everything.as_tuple()), "checksum_tail": list(tail.as_tuple()),
              "cases": rows, "targets": targets(rows)}
    (out / "typed_topics.json").write_text(json.dumps(report, indent=2))
    print_tables(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
