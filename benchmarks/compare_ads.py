"""The ADS and transport-ceiling workloads of `benchmarks.compare`, on shared local processes.

``AdsBench`` measures one topic setting (``ads``: RF=3 acks=all min ISR 2, or
``ads-rf1``: RF=1 acks=1) on a LocalCluster the comparison starts once. The
produce cases and ``consume_arrow`` are ``benchmarks.produce_consume``'s own
functions; ``consume`` reads records one by one through ``Consumer.poll``;
``latency`` paces ``Producer.produce`` (linger.ms=1) from one thread while a
second thread polls. ``CeilingBench`` wraps ``benchmarks.relay``.

Not run on its own: ``python -m benchmarks.compare`` drives it.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

from ads_spark.client import Admin, Consumer, Producer, TopicPartition
from ads_spark.cluster import LocalCluster
from benchmarks import produce_consume
from benchmarks.latency import paced_due, stamp, stamp_age_ms
from benchmarks.relay import Relay

PARTITIONS = produce_consume.PARTITIONS
RECORD_BYTES = produce_consume.RECORD_BYTES
CASE_TIMEOUT_S = 300.0
TICK_S = 0.001
LATENCY_LINGER_MS = 1


class AdsBench:
    def __init__(self, system: str, cluster: LocalCluster, replication_factor: int, acks: str,
                 topic_config: dict[str, str]):
        self.system, self.cluster = system, cluster
        self.replication_factor, self.acks, self.topic_config = replication_factor, acks, topic_config
        self.admin: Admin | None = None

    @property
    def config(self) -> dict:
        return {"bootstrap.servers": self.cluster.bootstrap_servers}

    def up(self) -> None:
        if not self.cluster.state:
            self.cluster.up(brokers=3)
        self.admin = Admin(self.config)

    def down(self) -> None:
        if self.admin is not None:
            self.admin.close()
            self.admin = None
        self.cluster.down()

    def new_topic(self) -> str:
        name = f"bench-{self.system}-{uuid.uuid4().hex[:6]}"
        self.admin.create_topic(name, PARTITIONS, self.replication_factor, config=self.topic_config)
        return name

    def delete_topic(self, name: str) -> None:
        self.admin.delete_topic(name)

    def produce_record(self, topic: str, records: int) -> float:
        return produce_consume.produce_per_record({**self.config, "acks": self.acks}, topic, records)

    def produce_batched(self, topic: str, records: int) -> float:
        return produce_consume.produce_batched({**self.config, "acks": self.acks}, topic, records)

    def consume_arrow(self, topic: str, records: int) -> float:
        return produce_consume.consume_all(self.config, topic)

    def consume(self, topic: str, records: int) -> float:
        consumer = Consumer(self.config)
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        received, deadline = 0, time.monotonic() + CASE_TIMEOUT_S
        started = time.perf_counter()
        while received < records and time.monotonic() < deadline:
            for record in consumer.poll(timeout=1.0):
                received += record.value is not None
        elapsed = time.perf_counter() - started
        consumer.close()
        if received < records:
            raise TimeoutError(f"{self.system} consumed {received} of {records}")
        return received / elapsed

    def latency(self, topic: str, rate_per_s: float, duration_s: float) -> list[float]:
        latencies_ms: list[float] = []
        producing = threading.Event()
        producing.set()
        sent = 0

        def read() -> None:
            consumer = Consumer(self.config)
            consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
            deadline = time.monotonic() + duration_s + 60
            while (producing.is_set() or len(latencies_ms) < sent) and time.monotonic() < deadline:
                for record in consumer.poll(timeout=0.1):
                    latencies_ms.append(stamp_age_ms(record.value))
            consumer.close()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        with Producer({**self.config, "acks": self.acks, "linger.ms": LATENCY_LINGER_MS}) as producer:
            started = time.monotonic()
            while time.monotonic() - started < duration_s:
                for _ in range(paced_due(started, rate_per_s, sent)):
                    producer.produce(topic, value=stamp(RECORD_BYTES))
                    sent += 1
                time.sleep(TICK_S)
            producer.flush(CASE_TIMEOUT_S)
        producing.clear()
        reader.join(70)
        return latencies_ms


class CeilingBench:
    """``ceiling``: the relay with two followers; ``ceiling-rf1``: with none (acknowledged once written)."""

    def __init__(self, work_dir: Path | None = None, followers: int = 2):
        self.system = "ceiling" if followers else "ceiling-rf1"
        self.relay = Relay(work_dir, followers=followers)

    def up(self) -> None:
        self.relay.up()

    def down(self) -> None:
        self.relay.down()

    def new_topic(self) -> str:
        return "log"

    def delete_topic(self, name: str) -> None:
        pass

    def produce_batched(self, topic: str, records: int) -> float:
        return self.relay.produce_batched(records, produce_consume.ARROW_BATCH_RECORDS, RECORD_BYTES)
