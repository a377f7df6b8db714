"""Spark through format("ads") against the Python Data Source ceiling, measured in one run.

    python -m benchmarks.spark_source_sink --out benchmarks/results [--records 300000] [--runs 3]

On one local 3-broker cluster and one local SparkSession (local[2]), with 1 KiB
values, alternating run by run:

* read_batch:   spark.read.format("ads") of a topic into the noop sink, next to
                the same plan over ``ads-synthetic``, an in-memory Python data
                source that yields ready Arrow batches of the same schema and
                size (the ceiling of any Python data source on this machine);
* read_stream:  readStream.format("ads") with Trigger.AvailableNow into noop,
                next to the same stream over ``ads-synthetic`` (one micro-batch of
                every row; the ratio to the batch ceiling is printed beside it);
* write_stream: readStream of Parquet files written beforehand, into
                writeStream.format("ads") (acks=all, RF=3, min ISR 2), next to
                the same stream into ``ads-synthetic``'s Python sink, which takes
                each Arrow batch Spark hands its Python worker and drops it (the
                ceiling of any Python data source sink), and into Spark's own
                ``noop`` sink (``noop``: no Python at all, for reference). The
                ADS topic is created before the clock starts and deleted after
                it stops.

Writes DIR/spark_source_sink.json and a table of medians with min-max and the
ratios to the ceilings; only ratios within one run are meant to be compared.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pyarrow as pa

from ads_spark.client import Admin, Producer
from ads_spark.cluster import LocalCluster

VALUE_BYTES = 1024
PARTITIONS = 3
PRODUCE_BATCH_RECORDS = 512


def synthetic_batches(rows: int):
    """``rows`` rows of the ads source schema as ready 2048-row Arrow batches: all a ceiling reader does."""
    from ads_spark.spark.source.schema import arrow_schema

    schema = arrow_schema(include_headers=False)
    per_batch = 2048
    value = pa.array([b"s" * VALUE_BYTES] * per_batch, pa.binary())
    columns = {"key": pa.nulls(per_batch, pa.binary()), "value": value,
               "topic": pa.array(["synthetic"] * per_batch), "partition": pa.array([0] * per_batch, pa.int32()),
               "offset": pa.array(range(per_batch), pa.int64()),
               "timestamp": pa.array([0] * per_batch, pa.timestamp("us", tz="UTC")),
               "timestampType": pa.array([0] * per_batch, pa.int32())}
    batch = pa.RecordBatch.from_pydict({f.name: columns[f.name] for f in schema}, schema=schema)
    for start in range(0, rows, per_batch):
        yield batch.slice(0, min(per_batch, rows - start))


def synthetic_source_class():
    """A Python data source yielding pre-built Arrow batches in the ads source schema: the ceiling.

    Batch reads, and streaming reads as one Trigger.AvailableNow micro-batch of every row (the
    shape of the ads stream in ``run_once``), so a streaming query's own fixed costs (its
    source-runner process, offset and commit logs) are in the streaming ceiling too. As a
    streaming sink it receives Spark's Arrow batches in the Python worker, counts their rows and
    drops them: what every Python sink pays before it does anything of its own.
    """
    from pyspark.sql.datasource import (DataSource, DataSourceReader, DataSourceStreamArrowWriter,
                                        DataSourceStreamReader, InputPartition, WriterCommitMessage)
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

    from ads_spark.spark.source.schema import spark_schema

    class SyntheticReader(DataSourceReader):
        def __init__(self, rows: int, partition_count: int):
            self.rows, self.partition_count = rows, partition_count

        def partitions(self):
            return [InputPartition(i) for i in range(self.partition_count)]

        def read(self, partition):
            return synthetic_batches(self.rows // self.partition_count)

    class SyntheticStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        def __init__(self, rows: int, partition_count: int):
            self.rows, self.partition_count = rows, partition_count

        def initialOffset(self):
            return {"rows": 0}

        def latestOffset(self, start, limit):
            return {"rows": self.rows}

        def prepareForTriggerAvailableNow(self):
            pass

        def partitions(self, start, end):
            if end["rows"] <= start["rows"]:
                return []
            return [InputPartition(i) for i in range(self.partition_count)]

        def read(self, partition):
            return synthetic_batches(self.rows // self.partition_count)

        def commit(self, end):
            pass

    class SyntheticStreamWriter(DataSourceStreamArrowWriter):
        def write(self, iterator):
            for _ in iterator:  # each batch is already in this process: the cost being measured
                pass
            return WriterCommitMessage()

        def commit(self, messages, batch_id):
            pass

        def abort(self, messages, batch_id):
            pass

    class SyntheticSource(DataSource):
        @classmethod
        def name(cls):
            return "ads-synthetic"

        def schema(self):
            return spark_schema(include_headers=False)

        def _shape(self) -> tuple[int, int]:
            return int(self.options["rows"]), int(self.options.get("partitions", PARTITIONS))

        def reader(self, schema):
            return SyntheticReader(*self._shape())

        def streamReader(self, schema):
            return SyntheticStreamReader(*self._shape())

        def streamWriter(self, schema, overwrite):
            return SyntheticStreamWriter()

    return SyntheticSource


def fill_topic(bootstrap: str, topic: str, records: int) -> None:
    batch = pa.record_batch({"value": pa.array([b"v" * VALUE_BYTES] * PRODUCE_BATCH_RECORDS, pa.binary())})
    with Producer({"bootstrap.servers": bootstrap, "acks": "all"}) as producer:
        futures = [producer.produce_arrow(topic, batch, partition=i % PARTITIONS)
                   for i in range(records // PRODUCE_BATCH_RECORDS)]
        for future in futures:
            future.result(timeout=300)


def timed(action) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def run_once(spark, bootstrap: str, admin: Admin, work: Path, records: int, source_topic: str,
             stream_ceiling: bool = False) -> dict:
    """One sample of every case; ``stream_ceiling`` adds ("ceiling", "read_stream")."""
    rows = (records // PRODUCE_BATCH_RECORDS) * PRODUCE_BATCH_RECORDS
    ads = spark.read.format("ads").option("ads.bootstrap.servers", bootstrap).option("subscribe", source_topic)
    synthetic = spark.read.format("ads-synthetic").option("rows", str(rows))
    # "ads" reads the brokers' segment files when they are on this host (the local read path, on by
    # default); "ads-network" is the same read over Flight, as from executors on other hosts.
    # (a DataFrameReader's option() changes the reader itself: the network one is a reader of its own)
    ads_network = spark.read.format("ads").option("ads.bootstrap.servers", bootstrap) \
        .option("subscribe", source_topic).option("ads.local.reads", "false")
    # The ceiling goes first: the first query after the previous run's write phase is slowed by what that
    # phase left behind (writeback of ~0.5 GB, the topic deletion), and that cost is nobody's read.
    result = {("ceiling", "read_batch"): rows / timed(
        lambda: synthetic.load().write.format("noop").mode("overwrite").save())}
    result[("ads", "read_batch")] = rows / timed(lambda: ads.load().write.format("noop").mode("overwrite").save())
    result[("ads-network", "read_batch")] = rows / timed(
        lambda: ads_network.load().write.format("noop").mode("overwrite").save())

    def stream_read(stream) -> None:
        (stream.load().writeStream.format("noop")
         .option("checkpointLocation", str(work / f"ckpt-{uuid.uuid4().hex}")).trigger(availableNow=True)
         .start().awaitTermination())

    ads_stream = spark.readStream.format("ads").option("ads.bootstrap.servers", bootstrap) \
        .option("subscribe", source_topic).option("startingOffsets", "earliest")
    result[("ads", "read_stream")] = rows / timed(lambda: stream_read(ads_stream))
    if stream_ceiling:
        synthetic_stream = spark.readStream.format("ads-synthetic").option("rows", str(rows))
        result[("ceiling", "read_stream")] = rows / timed(lambda: stream_read(synthetic_stream))
    files = work / f"input-{uuid.uuid4().hex[:6]}"
    spark.range(rows).selectExpr(f"repeat('w', {VALUE_BYTES}) AS value").repartition(PARTITIONS) \
        .write.parquet(str(files))

    def stream_write(sink: str) -> float:
        """Seconds the query took; topic creation and deletion are outside them."""
        topic = f"bench-write-{uuid.uuid4().hex[:6]}"
        writer = spark.readStream.schema("value string").parquet(str(files)).writeStream
        if sink == "ads":
            admin.create_topic(topic, PARTITIONS, 3, config={"min.insync.replicas": "2"})
            writer = writer.format("ads").option("ads.bootstrap.servers", bootstrap).option("topic", topic)
        else:
            writer = writer.format(sink)
        writer = writer.option("checkpointLocation", str(work / f"ckpt-{uuid.uuid4().hex}")) \
            .trigger(availableNow=True)
        seconds = timed(lambda: writer.start().awaitTermination())
        if sink == "ads":
            admin.delete_topic(topic)
        return seconds

    result[("ads", "write_stream")] = rows / stream_write("ads")
    result[("ceiling", "write_stream")] = rows / stream_write("ads-synthetic")
    result[("noop", "write_stream")] = rows / stream_write("noop")
    return result


def local_spark(app_name: str):
    """A quiet local[2] SparkSession on this interpreter (no UI, no progress bars, 2g driver), as every
    benchmark here measures Spark."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName(app_name)
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "2g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def spark_session():
    """``local_spark`` with the ``ads-synthetic`` ceiling source registered."""
    spark = local_spark("ads-bench")
    spark.dataSource.register(synthetic_source_class())
    return spark


def summarise(samples: dict) -> list[dict]:
    rows = []
    for (system, case), values in sorted(samples.items()):
        median = statistics.median(values)
        rows.append({"system": system, "case": case, "records_per_s": median,
                     "mb_per_s": median * VALUE_BYTES / 1e6, "min": min(values), "max": max(values),
                     "runs": len(values), "samples": [round(v) for v in values]})
    by_key = {(r["system"], r["case"]): r["records_per_s"] for r in rows}
    for row in rows:
        if row["system"] not in ("ads", "ads-network"):
            continue
        # A stream is compared with a stream of the synthetic source when one was measured (the same
        # query shape and fixed costs); the batch ceiling stays beside it for older results.
        ceiling = by_key.get(("ceiling", row["case"]))
        if row["case"] == "read_stream":
            batch_ceiling = by_key.get(("ceiling", "read_batch"))
            if batch_ceiling:
                row["ratio_to_batch_ceiling"] = row["records_per_s"] / batch_ceiling
            ceiling = ceiling or batch_ceiling
        if ceiling:
            row["ratio_to_ceiling"] = row["records_per_s"] / ceiling
    return rows


def print_table(rows: list[dict]) -> None:
    print(f"{'system':11} {'case':13} {'records/s':>11} {'MB/s':>7} {'min-max':>21} {'vs ceiling':>10} "
          f"{'vs batch ceiling':>16}")
    for row in rows:
        ratio = f"{row['ratio_to_ceiling']:.2f}" if "ratio_to_ceiling" in row else ""
        batch_ratio = f"{row['ratio_to_batch_ceiling']:.2f}" if "ratio_to_batch_ceiling" in row else ""
        print(f"{row['system']:11} {row['case']:13} {row['records_per_s']:11,.0f} {row['mb_per_s']:7.1f} "
              f"{row['min']:10,.0f}-{row['max']:<10,.0f} {ratio:>10} {batch_ratio:>16}")


def main() -> int:
    parser = argparse.ArgumentParser(description="Spark source/sink throughput vs the Python data source ceiling")
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--warmup-runs", type=int, default=1)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ads-spark-bench-") as state_dir:
        cluster = LocalCluster(Path(state_dir) / "cluster")
        spark = None
        try:
            cluster.up(brokers=3)
            admin = Admin({"bootstrap.servers": cluster.bootstrap_servers})
            source_topic = f"bench-read-{uuid.uuid4().hex[:6]}"
            admin.create_topic(source_topic, PARTITIONS, 3, config={"min.insync.replicas": "2"})
            fill_topic(cluster.bootstrap_servers, source_topic, args.records)
            spark = spark_session()
            samples: dict = {}
            # One untimed run first: Python workers start, modules import, the JIT and page cache warm
            # (the first run of each case moved by up to 10x and says nothing about steady state).
            for run in range(-args.warmup_runs, args.runs):
                results = run_once(spark, cluster.bootstrap_servers, admin, Path(state_dir), args.records,
                                   source_topic, stream_ceiling=True)
                if run >= 0:
                    for key, value in results.items():
                        samples.setdefault(key, []).append(value)
                print(f"run {run + 1}/{args.runs} done" if run >= 0 else "warm-up run done", file=sys.stderr)
        finally:
            if spark is not None:
                spark.stop()
            cluster.down()
    rows = summarise(samples)
    (out / "spark_source_sink.json").write_text(json.dumps(rows, indent=2))
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
