"""Log compaction with real processes (issue #24): nothing compaction keeps is lost when a cleaner is killed.

Three brokers, one compacted partition (``cleanup.policy=compact``, RF=3, min ISR 2, small segments that
roll every 300 ms so that they become cleanable, a dirty ratio of 0.01 so that every broker's cleaner keeps
rewriting its replica, throttled so that one clean lasts long enough to be caught). A writer sends keyed
records (some tombstones) with acks=all throughout. A broker is SIGKILLed while its cleaner has swap files
in the partition's directory (mid-rewrite), written to some more, restarted (its recovery completes or rolls
back the swap) and cleans again. Then a consumer from offset 0 sees, for every key, its latest acknowledged
record (or a later one; or nothing once a tombstone was the latest and was removed), offsets strictly
increasing, with gaps where compaction removed records (and no time or size retention, set to delete
everything, ran: ``cleanup.policy=compact`` alone keeps every key); ``ads verify-replicas`` finds the replicas
agreeing (latest value per key below the cleaned points, every record above); and a record without a key is
refused, nothing appended.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from ads_spark.client import Admin, Consumer, Producer, TopicPartition
from ads_spark.errors import AdsError, InvalidRecordError
from tests.fixtures.cluster import leader_of, metric_values
from tests.fixtures.waiting import wait_until

pytestmark = pytest.mark.integration

KEYS = 60
VALUE_BYTES = 600
TOMBSTONE_EVERY = 37  # every 37th write deletes its key
BROKER_OVERRIDES = ["log.cleaner.backoff.ms=100", "log.cleaner.io.max.bytes.per.second=3000000",
                    "replica.lag.time.max.ms=4000", "log.retention.check.interval.ms=200"]
# retention.ms=100 would delete every sealed segment within 0.3 s under cleanup.policy=delete: with
# compact alone, time and size retention must not run at all (or keys acknowledged long ago are lost).
TOPIC_CONFIG = {"cleanup.policy": "compact", "min.insync.replicas": "2", "segment.bytes": "32768",
                "segment.ms": "300", "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "0",
                "retention.ms": "100", "retention.bytes": "1024"}


class KeyedWriter:
    """Sends keyed records (acks=all) until stopped; remembers what each key was last acknowledged as."""

    def __init__(self, bootstrap: str, topic: str):
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                                  "delivery.timeout.ms": 60_000, "request.timeout.ms": 5_000})
        self.topic = topic
        self.acked: dict[bytes, tuple[int, bytes | None]] = {}  # key -> (offset, value) of its latest ack
        self.tombstoned: set[bytes] = set()  # keys a tombstone was sent for (acknowledged or not)
        self.errors: list[AdsError] = []
        self.sent = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "KeyedWriter":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            key = b"k%03d" % (self.sent % KEYS)
            value = None if self.sent % TOMBSTONE_EVERY == 0 else b"%08d:" % self.sent + b"v" * VALUE_BYTES
            if value is None:
                self.tombstoned.add(key)
            future = self.producer.produce(self.topic, value=value, key=key, partition=0)
            future.add_done_callback(lambda f, k=key, v=value: self._done(f, k, v))
            self.sent += 1
            if self.sent % 200 == 0:  # at most ~2,000 writes/s: enough to keep the cleaners busy, no more
                self.producer.flush(70)
                self._stop.wait(0.1)

    def _done(self, future, key: bytes, value: bytes | None) -> None:
        if future.exception() is not None:
            self.errors.append(future.exception())
            return
        offset = future.result().offset
        with self._lock:
            if offset > self.acked.get(key, (-1, None))[0]:
                self.acked[key] = (offset, value)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(90)
        self.producer.flush(70)
        self.producer.close()


def _cleaning(cluster, topic: str) -> int | None:
    """A broker whose cleaner is rewriting the partition now (its swap files are in the directory)."""
    for broker_id in cluster.broker_ids():
        directory = cluster.dir / f"broker-{broker_id}" / "data" / f"{topic}-0"
        try:
            names = [path.name for path in directory.iterdir()]
        except FileNotFoundError:
            continue
        if any(name.endswith((".cleaned", ".swap")) or name == "cleaner-swap.json" for name in names):
            return broker_id
    return None


def _read_from_zero(bootstrap: str, topic: str) -> tuple[list[tuple[int, bytes, bytes | None]], int, int]:
    """Every committed record from offset 0 through a consumer's poll loop, the log start and the HW."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "fetch.max.wait.ms": 100})
    try:
        tp = TopicPartition(topic, 0)
        log_start, high_watermark = consumer.get_watermark_offsets(tp)
        consumer.assign([TopicPartition(topic, 0, 0)])
        records = []
        deadline = time.monotonic() + 60
        while consumer.position(tp) < high_watermark:
            assert time.monotonic() < deadline, f"the consumer stalled at {consumer.position(tp)} < {high_watermark}"
            records.extend((r.offset, r.key, r.value) for r in consumer.poll(1.0))
        return records, log_start, high_watermark
    finally:
        consumer.close()


def _cleaner_runs(cluster) -> dict[int, float]:
    return metric_values(cluster, "ads_log_cleaner_runs_total")


def test_a_cleaner_killed_mid_rewrite_loses_nothing_compaction_keeps(fresh_cluster, topic_name, record_property):
    started = time.monotonic()
    cluster = fresh_cluster(3, overrides=BROKER_OVERRIDES)
    admin = Admin({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topic(topic_name, partitions=1, replication_factor=3, config=TOPIC_CONFIG)
    wait_until(lambda: len(leader_of(admin, topic_name)[1]) == 3, what="a full ISR")
    writer = KeyedWriter(cluster.bootstrap_servers, topic_name).start()
    try:
        victim = wait_until(lambda: _cleaning(cluster, topic_name), timeout_s=60,
                            what="a broker's cleaner rewriting the partition")
        cluster.kill_broker(victim)
        acked_at_kill = len(writer.acked), writer.sent
        wait_until(lambda: writer.sent >= acked_at_kill[1] + 1500, what="1500 more writes after the kill")
        cluster.start_broker(victim)
        wait_until(lambda: len(leader_of(admin, topic_name)[1]) == 3, what="the killed broker back in the ISR")
        # The restarted broker's recovered replica is cleaned again (its counters restarted at 0).
        wait_until(lambda: _cleaner_runs(cluster).get(victim, 0) >= 1, what="the restarted broker's cleaner to run")
    finally:
        writer.stop()
    assert all(error.retriable for error in writer.errors), writer.errors[:3]

    records, log_start, high_watermark = _read_from_zero(cluster.bootstrap_servers, topic_name)
    assert log_start == 0, "time or size retention deleted segments of a compact-only topic"
    offsets = [offset for offset, _, _ in records]
    assert offsets == sorted(set(offsets)), "offsets must strictly increase"
    assert len(records) < high_watermark, "compaction removed nothing"
    latest = {key: (offset, value) for offset, key, value in records}
    for key, (acked_offset, acked_value) in writer.acked.items():
        if key not in latest:  # only a removed tombstone may leave a key with nothing
            assert acked_value is None or key in writer.tombstoned, f"{key!r} lost (acked at {acked_offset})"
            continue
        offset, value = latest[key]
        assert offset >= acked_offset, f"{key!r}: {offset} seen, but {acked_offset} was acknowledged later"
        if offset == acked_offset:
            assert value == acked_value, key

    def replicas_agree():
        verify = subprocess.run([sys.executable, "-m", "ads_spark.cli.main", "verify-replicas", "--bootstrap-server",
                                 cluster.bootstrap_servers, "--topic", topic_name],
                                capture_output=True, text=True, timeout=60)
        return verify if verify.returncode == 0 else None
    verify = wait_until(replicas_agree, timeout_s=30, what="verify-replicas to find the replicas agreeing")
    assert "agree (compacted" in verify.stdout, verify.stdout

    refused = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "retries": "0"})
    try:
        future = refused.produce(topic_name, value=b"no key", partition=0)
        refused.flush(20)
    finally:
        refused.close()
    error = future.exception()
    assert isinstance(error, InvalidRecordError) and topic_name in str(error) and "cleanup.policy=compact" in str(error)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic_name, 0))[1] == high_watermark  # nothing appended
    finally:
        consumer.close()
    assert sum(metric_values(cluster, "ads_log_cleaner_bytes_read_total").values()) > 0
    record_property("records_read_of_offsets", f"{len(records)}/{high_watermark}")
    record_property("test_s", round(time.monotonic() - started, 1))
    print(f"killed broker {victim} mid-clean; {writer.sent} writes, {len(writer.acked)} keys acknowledged; "
          f"{len(records)} records left below HW {high_watermark}")
    admin.close()
