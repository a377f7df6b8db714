"""Produce and consume throughput through the Python client, 1 KiB records, on a local cluster.

    python -m benchmarks.produce_consume --out benchmarks/results [--records 200000] [--runs 3]

Runs in one process against one local 3-broker cluster, for each case: RF=1
acks=1 (the unreplicated reference) and RF=3 acks=all min.insync.replicas=2,
each through (a) the per-record API (`produce()` with linger batching),
(b) explicit Arrow batches of 512 records (`produce_arrow`), and (c) consuming
everything back as Arrow tables. Cases alternate run by run so drift on the
machine hits them alike. Writes DIR/produce_consume.json and prints a table of
medians with min-max; the figures to compare are ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pyarrow as pa

from ads_spark.client import Admin, Consumer, Producer, TopicPartition
from ads_spark.cluster import LocalCluster

RECORD_BYTES = 1024
ARROW_BATCH_RECORDS = 512
PARTITIONS = 3


def warm_up(producer: Producer, topic: str) -> None:
    """One acknowledged record per partition before the clock starts: the producer learns the topic's
    leaders and opens its stream to each of them, as the RabbitMQ case declares its publisher and waits
    for one confirm first. Without it, those ~15 ms fell inside a run of ~0.3 s."""
    for partition in range(PARTITIONS):
        producer.produce(topic, value=b"w", partition=partition)
    if producer.flush(30):
        raise RuntimeError(f"warm-up records to {topic} undelivered")


def produce_per_record(config: dict, topic: str, records: int) -> float:
    value = b"x" * RECORD_BYTES
    with Producer({**config, "linger.ms": 5, "batch.size": 1 << 20}) as producer:
        warm_up(producer, topic)
        started = time.perf_counter()
        for _ in range(records):
            producer.produce(topic, value=value)
        remaining = producer.flush(300)
        elapsed = time.perf_counter() - started
    if remaining:
        raise RuntimeError(f"{remaining} records undelivered")
    return records / elapsed


def produce_batched(config: dict, topic: str, records: int) -> float:
    batch = pa.record_batch({"value": pa.array([b"y" * RECORD_BYTES] * ARROW_BATCH_RECORDS, pa.binary())})
    batches = records // ARROW_BATCH_RECORDS
    with Producer(config) as producer:
        warm_up(producer, topic)
        started = time.perf_counter()
        futures = [producer.produce_arrow(topic, batch, partition=i % PARTITIONS) for i in range(batches)]
        for future in futures:
            future.result(timeout=300)
        elapsed = time.perf_counter() - started
    return batches * ARROW_BATCH_RECORDS / elapsed


def consume_all(config: dict, topic: str) -> float:
    consumer = Consumer(config)
    total = 0
    started = time.perf_counter()
    for partition in range(PARTITIONS):
        tp = TopicPartition(topic, partition)
        _, high_watermark = consumer.get_watermark_offsets(tp)
        total += consumer.fetch_arrow(tp, 0, high_watermark).num_rows
    elapsed = time.perf_counter() - started
    consumer.close()
    return total / elapsed


def run_cases(bootstrap: str, records: int, runs: int) -> list[dict]:
    config = {"bootstrap.servers": bootstrap}
    admin = Admin(config)
    systems = {"ads-rf1": (1, "1", {}), "ads": (3, "all", {"min.insync.replicas": "2"})}
    samples: dict[tuple[str, str], list[float]] = {}
    for run in range(runs):
        for system, (replication_factor, acks, topic_config) in systems.items():
            producer_config = {**config, "acks": acks}
            for case, func in (("produce_record", produce_per_record), ("produce_batched", produce_batched)):
                topic = f"bench-{system}-{case}-{uuid.uuid4().hex[:6]}"
                admin.create_topic(topic, PARTITIONS, replication_factor, config=topic_config)
                samples.setdefault((system, case), []).append(func(producer_config, topic, records))
                if case == "produce_batched":
                    samples.setdefault((system, "consume_arrow"), []).append(consume_all(config, topic))
                admin.delete_topic(topic)
            print(f"run {run + 1}/{runs} {system} done", file=sys.stderr)
    return [{"system": system, "case": case, "records_per_s": statistics.median(values),
             "mb_per_s": statistics.median(values) * RECORD_BYTES / 1e6, "min": min(values), "max": max(values),
             "runs": len(values)} for (system, case), values in samples.items()]


def print_table(rows: list[dict]) -> None:
    print(f"{'system':10} {'case':16} {'records/s':>12} {'MB/s':>8} {'min-max':>22}")
    for row in rows:
        print(f"{row['system']:10} {row['case']:16} {row['records_per_s']:12,.0f} {row['mb_per_s']:8.1f} "
              f"{row['min']:10,.0f}-{row['max']:<10,.0f}")
    by_key = {(r["system"], r["case"]): r["records_per_s"] for r in rows}
    for case in ("produce_record", "produce_batched"):
        if ("ads", case) in by_key and ("ads-rf1", case) in by_key:
            print(f"ratio RF=3 acks=all / RF=1 acks=1, {case}: {by_key[('ads', case)] / by_key[('ads-rf1', case)]:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description="ADS produce/consume throughput")
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ads-bench-") as state_dir:
        cluster = LocalCluster(Path(state_dir))
        try:
            cluster.up(brokers=3)
            rows = run_cases(cluster.bootstrap_servers, args.records, args.runs)
        finally:
            cluster.down()
    (out / "produce_consume.json").write_text(json.dumps(rows, indent=2))
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
