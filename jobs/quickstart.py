"""Quickstart: a local 3-broker cluster and a Spark pipeline over it, with a broker killed midway.

What `make demo` runs. It starts an embedded ZooKeeper and three brokers on
127.0.0.1 in a temporary state dir, secured as ``ads cluster up`` secures them (mutual TLS,
the ACL authorizer, ZooKeeper over TLS with ACLs; every client here, Spark's included, uses the
state dir's admin client config; ``--security none`` runs the open cluster), creates two topics (3 partitions,
replication factor 3, min.insync.replicas=2), then runs three Spark jobs:

1. producer: a streaming job writes N generated orders with
   ``writeStream.format("ads")`` (acks=all);
2. transformer: a streaming job reads ``orders`` with ``readStream.format("ads")``,
   upper-cases each value and writes to ``orders_upper``; while it runs, one
   broker is killed with SIGKILL;
3. replay: a batch job reads a range of ``orders_upper`` back by offset.

The summary checks that ``orders_upper`` holds every order exactly once (nothing
lost, nothing duplicated despite the kill) and prints the throughput of each job.
The cluster is torn down at the end, also on failure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ads_spark.client import Admin  # noqa: E402
from ads_spark.cluster import LocalCluster, unwind_on_sigterm  # noqa: E402

ORDERS, UPPER = "orders", "orders_upper"
PARTITIONS = 3
KILLED_BROKER = 2


def spark_session():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("ads-quickstart")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    return session


def spark_options(client: dict) -> dict[str, str]:
    """The cluster's client config as options of ``format("ads")`` (Kafka's keys with ``ads.``)."""
    return {f"ads.{key}": str(value) for key, value in client.items()}


def produce_job(spark, ads: dict, work: Path, records: int) -> float:
    """A streaming job that writes ``records`` generated orders to ADS (from files, so it is finite)."""
    orders = work / "generated"
    spark.range(records).selectExpr("CAST(id AS STRING) AS key", "concat('order-', id) AS value") \
        .repartition(4).write.parquet(str(orders))
    started = time.monotonic()
    query = (spark.readStream.schema("key string, value string").parquet(str(orders))
             .writeStream.format("ads").options(**ads).option("topic", ORDERS)
             .option("checkpointLocation", str(work / "ckpt-produce")).trigger(availableNow=True).start())
    query.awaitTermination()
    return time.monotonic() - started


def transform_job(spark, ads: dict, work: Path, cluster: LocalCluster, kill: bool) -> float:
    """Read orders, upper-case them, write them on; SIGKILL one broker while it runs."""
    started = time.monotonic()
    query = (spark.readStream.format("ads").options(**ads)
             .option("subscribe", ORDERS).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "2000").load()
             .selectExpr("key", "upper(CAST(value AS STRING)) AS value")
             .writeStream.format("ads").options(**ads).option("topic", UPPER)
             .option("checkpointLocation", str(work / "ckpt-transform")).trigger(availableNow=True).start())
    killer = None
    if kill:
        def kill_when_started() -> None:
            deadline = time.monotonic() + 60
            while query.isActive and not query.recentProgress and time.monotonic() < deadline:
                time.sleep(0.1)
            if query.isActive:
                print(f"  killing broker {KILLED_BROKER} (SIGKILL) while the transformer runs")
                cluster.kill_broker(KILLED_BROKER)

        killer = threading.Thread(target=kill_when_started, daemon=True)
        killer.start()
    query.awaitTermination()
    if killer is not None:
        killer.join(5)
    return time.monotonic() - started


def replay_job(spark, ads: dict, first: int, last_exclusive: int) -> int:
    """A batch read of one offset range of every partition (``startingOffsets``/``endingOffsets`` JSON)."""
    starting = json.dumps({UPPER: {str(p): first for p in range(PARTITIONS)}})
    ending = json.dumps({UPPER: {str(p): last_exclusive for p in range(PARTITIONS)}})
    return (spark.read.format("ads").options(**ads).option("subscribe", UPPER)
            .option("startingOffsets", starting).option("endingOffsets", ending).load().count())


def run(records: int, state_dir: Path, kill: bool, security: str = "tls") -> int:
    cluster = LocalCluster(state_dir / "cluster")
    started = time.monotonic()
    unwind_on_sigterm()
    try:
        cluster.up(brokers=3, security=security)
        client = cluster.client_config()
        bootstrap, ads = cluster.bootstrap_servers, spark_options(client)
        print(f"cluster up in {time.monotonic() - started:.1f}s: {bootstrap} (security: {cluster.security}"
              + (f", client config {cluster.client_properties_path}" if cluster.secured else "") + ")")
        admin = Admin(client)
        for topic in (ORDERS, UPPER):
            admin.create_topic(topic, partitions=PARTITIONS, replication_factor=3,
                               config={"min.insync.replicas": "2"})
        spark = spark_session()
        unwind_on_sigterm()  # again, with the clients and Spark's gateway started
        produce_s = produce_job(spark, ads, state_dir, records)
        print(f"producer job: {records} orders in {produce_s:.1f}s")
        transform_s = transform_job(spark, ads, state_dir, cluster, kill)
        print(f"transformer job: done in {transform_s:.1f}s")
        upper = (spark.read.format("ads").options(**ads).option("subscribe", UPPER)
                 .load().selectExpr("CAST(value AS STRING) AS value"))
        values = [row.value for row in upper.collect()]
        expected = {f"ORDER-{i}" for i in range(records)}
        lost, duplicated = len(expected - set(values)), len(values) - len(set(values))
        replayed = replay_job(spark, ads, 100, 200)
        print(f"replay job: offsets [100, 200) of each partition -> {replayed} records")
        for partition in admin.describe_topics([UPPER])[0].partitions:
            print(f"  {UPPER}-{partition.partition}: leader {partition.leader} isr {list(partition.isr)}")
        print(f"summary: {UPPER} holds {len(values)} records for {records} orders: "
              f"lost={lost} duplicated={duplicated}")
        spark.stop()
        admin.close()
        return 0 if (lost == 0 and duplicated == 0 and replayed == 100 * PARTITIONS) else 1
    finally:
        cluster.down()
        print("cluster down")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--no-kill", action="store_true", help="do not kill a broker midway")
    parser.add_argument("--dir", default=None, help="state dir (default: a temporary one)")
    parser.add_argument("--security", choices=("tls", "none"), default="tls",
                        help="tls (default): a secured cluster as `ads cluster up` runs; none: the open one")
    args = parser.parse_args()
    if args.dir:
        return run(args.records, Path(args.dir), not args.no_kill, args.security)
    with tempfile.TemporaryDirectory(prefix="ads-quickstart-") as state_dir:
        return run(args.records, Path(state_dir), not args.no_kill, args.security)


if __name__ == "__main__":
    sys.exit(main())
