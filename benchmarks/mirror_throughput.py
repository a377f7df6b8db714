"""The mirror's throughput between two local clusters, one run over a fixed load.

    python -m benchmarks.mirror_throughput [--records 100000] [--value-bytes 1024] [--out FILE.json]

Two clusters on 127.0.0.1 (``east`` and ``west``), each with its own embedded ZooKeeper and
2 brokers; a topic of 3 partitions, RF 2, on east is filled first (``produce_arrow``, acks=all),
then ``ads_spark.mirror`` copies it to ``east.<topic>`` on west with ``Trigger.AvailableNow``
(exactly-once sink, acks=all, RF 2) in a local[2] SparkSession. The clock runs from the start of
the query to its end (query start-up and the first topic sync included), and the target is then
checked record for record against the source (``ads_spark.mirror.verify``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

PARTITIONS = 3
PRODUCE_BATCH_ROWS = 2000


def fill(bootstrap: str, topic: str, records: int, value_bytes: int) -> None:
    from ads_spark.client import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    try:
        futures = []
        for start in range(0, records, PRODUCE_BATCH_ROWS):
            rows = range(start, min(records, start + PRODUCE_BATCH_ROWS))
            values = [f"{i:012d}".encode().ljust(value_bytes, b"x") for i in rows]
            batch = pa.RecordBatch.from_arrays([pa.array(values, pa.binary())], names=["value"])
            futures.append(producer.produce_arrow(topic, batch, partition=(start // PRODUCE_BATCH_ROWS) % PARTITIONS))
        producer.flush(300)
        for future in futures:
            future.result(timeout=60)
    finally:
        producer.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from ads_spark.client import Admin
    from ads_spark.cluster import LocalCluster
    from ads_spark.mirror.job import MAX_OFFSETS_PER_TRIGGER_DEFAULT, MirrorConfig, run_mirror
    from ads_spark.mirror.naming import MirrorPolicy
    from ads_spark.mirror.verify import compare_topic

    work = Path(tempfile.mkdtemp(prefix="ads-mirror-bench-"))
    east, west = LocalCluster(work / "east"), LocalCluster(work / "west")
    try:
        east.up(brokers=2)
        west.up(brokers=2)
        admin = Admin({"bootstrap.servers": east.bootstrap_servers})
        admin.create_topic("bench", partitions=PARTITIONS, replication_factor=2)
        admin.close()
        fill(east.bootstrap_servers, "bench", args.records, args.value_bytes)
        spark = (SparkSession.builder.master("local[2]").appName("ads-mirror-bench")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "2").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        policy = MirrorPolicy("east", "west", pattern="bench")
        per_trigger = args.max_offsets_per_trigger or MAX_OFFSETS_PER_TRIGGER_DEFAULT
        config = MirrorConfig(policy, east.bootstrap_servers, west.bootstrap_servers, str(work / "ckpt"),
                              max_offsets_per_trigger=per_trigger, available_now=True)
        started = time.monotonic()
        batch = run_mirror(spark, config)
        elapsed_s = time.monotonic() - started
        comparison = compare_topic(east.bootstrap_servers, west.bootstrap_servers, policy, "bench", PARTITIONS)
        result = {"records": args.records, "value_bytes": args.value_bytes, "elapsed_s": round(elapsed_s, 2),
                  "records_per_s": round(args.records / elapsed_s), "max_offsets_per_trigger": per_trigger,
                  "value_mb_per_s": round(args.records * args.value_bytes / elapsed_s / 1e6, 2),
                  "micro_batches": batch.batches, "exact": all(c.exact for c in comparison)}
        print(json.dumps(result, indent=2))
        if args.out:
            Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
        spark.stop()
        return 0 if result["exact"] else 1
    finally:
        east.down()
        west.down()


if __name__ == "__main__":
    sys.exit(main())
