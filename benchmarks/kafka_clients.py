"""A Kafka client (confluent-kafka) against ADS's own Python client, side by side on one cluster (issue #25).

    python -m benchmarks.kafka_clients --out DIR [--quick] [--runs 3] [--records N]

One LocalCluster of 3 brokers; every topic has 3 partitions, RF=3, min.insync.replicas=2, and every
record carries a 1 KiB value. Each run measures, on the same brokers, alternating which client goes
first (A/B, B/A) so drift on this shared machine hits both alike:

* ``own produce_batched``: ``Producer.produce_arrow`` batches of 512, acks=all (``benchmarks.compare``'s
  case, the issue's reference); ``own produce_record``: the per-record ``Producer.produce`` (linger.ms=5);
* ``kafka produce``: confluent-kafka ``Producer.produce`` per record into the brokers' Kafka listener,
  acks=all, idempotent, the settings of ``KAFKA_PRODUCER``, delivery reports for failures only and the
  client polled every ``KAFKA_POLL_EVERY`` records (how a producer at full speed is written);
  ``kafka produce_each_report``: the same with a delivery callback per record and a poll per record;
* ``own consume`` (``Consumer.poll``, the record API), ``own consume_arrow`` (``fetch_arrow``) and
  ``kafka consume`` (confluent-kafka ``Consumer.assign`` from offset 0, ``consume`` 10,000 at a time):
  all three read the same topic, once written by the own client and once by the Kafka client.

Per phase it records records/s, MB/s (of values), and the CPU time of the three broker processes and of
this process (``/proc``: user + system, all threads; librdkafka's threads are this process's). Ratios
Kafka path / own client are computed per run and their median reported; the target is >= 0.7 in both
directions. RabbitMQ's and NATS's figures are not rerun: they come from the last full
``benchmarks.compare`` run (``PEER_RESULTS``), next to that run's own ADS figures. Writes
DIR/kafka_clients.json and DIR/table.txt and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaException
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from ads_spark.client import Admin, Consumer, TopicPartition
from ads_spark.cluster import LocalCluster, unwind_on_sigterm
from benchmarks import produce_consume, run_args

PARTITIONS = produce_consume.PARTITIONS
RECORD_BYTES = produce_consume.RECORD_BYTES
CASE_TIMEOUT_S = 300.0
TOPIC_CONFIG = {"min.insync.replicas": "2"}
PEER_RESULTS = Path(__file__).resolve().parent / "results-2026-11-24d" / "compare.json"
# acks=all + idempotence (which caps in-flight requests per broker at 5 and retries without reordering),
# linger 5 ms (as ADS's per-record produce), batches of up to 4 MiB (ADS's own client's request bound,
# max.request.size; librdkafka's default 1 MB made the broker append ~4x as many batches: 127k vs 175k
# records/s here), no compression (ADS's own client sends none either), and a local queue deep enough that
# produce() rarely meets BufferError.
KAFKA_PRODUCER = {"acks": "all", "enable.idempotence": True, "linger.ms": 5, "batch.size": 4 << 20,
                  "message.max.bytes": (4 << 20) + 65536, "batch.num.messages": 10_000, "compression.type": "none",
                  "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 2_097_152}
# The ADS consumer fetches up to 8 MiB per partition and 50 MiB per answer: the same for librdkafka.
# No group membership (assign), no commits; group.id is required by the client to exist at all.
# fetch.queue.backoff.ms: librdkafka pauses a partition's fetching for 1 s (its default) once its local
# queue passes queued.max.messages.kbytes (64 MiB); a case reading 100 MB in a fraction of a second hit
# that pause (a 0.5-1 s stall with the data already fetched), which ADS's consumer does not have.
KAFKA_CONSUMER = {"enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "max.partition.fetch.bytes": 8 << 20, "fetch.max.bytes": 50 << 20, "fetch.wait.max.ms": 500,
                  "fetch.queue.backoff.ms": 10}
KAFKA_CONSUME_BATCH = 10_000
KAFKA_POLL_EVERY = 1_000  # the lean producer serves its client (reports, callbacks) this often
KAFKA_PRODUCE_BATCH = 512  # records per produce_batch call: the own produce_batched's batch
RATIOS = {"produce, batched (produce_batch vs produce_batched)": (("kafka", "produce_batch"), ("own", "produce_batched")),
          "produce, per record (produce vs produce_record)": (("kafka", "produce"), ("own", "produce_record")),
          "produce, per record with a report each": (("kafka", "produce_each_report"), ("own", "produce_record")),
          "produce per record vs own batched": (("kafka", "produce"), ("own", "produce_batched")),
          "consume": (("kafka", "consume"), ("own", "consume")),
          "consume vs own Arrow": (("kafka", "consume"), ("own", "consume_arrow"))}
TARGET_RATIO = 0.7


def kafka_bootstrap(cluster: LocalCluster) -> str | None:
    """The brokers' Kafka listeners as a bootstrap list (LocalCluster opens one per broker); None without."""
    return getattr(cluster, "kafka_bootstrap_servers", None) or None


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a whole process (every thread), from /proc/<pid>/stat: in clock ticks (10 ms
    here), so a phase of 0.1 s on three brokers reads to about +-30 ms."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def client_cpu_seconds() -> float:
    """User + system CPU of this process, every thread (librdkafka's too), to the microsecond."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Phase:
    """Wall clock and CPU of the brokers and of this process around one measured case."""

    def __init__(self, broker_pids: list[int]):
        self.broker_pids = broker_pids

    def __enter__(self) -> "Phase":
        self.brokers_before = sum(cpu_seconds(pid) for pid in self.broker_pids)
        self.client_before = client_cpu_seconds()
        self.started = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.elapsed_s = time.perf_counter() - self.started
        self.broker_cpu_s = sum(cpu_seconds(pid) for pid in self.broker_pids) - self.brokers_before
        self.client_cpu_s = client_cpu_seconds() - self.client_before

    def sample(self, records: int) -> dict:
        return {"records_per_s": records / self.elapsed_s, "seconds": self.elapsed_s,
                "broker_cpu_s": self.broker_cpu_s, "client_cpu_s": self.client_cpu_s,
                "broker_cpu_us_per_record": self.broker_cpu_s / records * 1e6,
                "client_cpu_us_per_record": self.client_cpu_s / records * 1e6}


# ---- the Kafka client's cases --------------------------------------------------------------------


def kafka_produce(bootstrap: str, topic: str, records: int, phase: Phase) -> int:
    """confluent-kafka as a producer at full speed is written: delivery reports for failures only
    (``delivery.report.only.error``: a record is delivered when ``flush`` leaves none and no report came),
    the client served every ``KAFKA_POLL_EVERY`` records."""
    return _kafka_produce(bootstrap, topic, records, phase, each_report=False)


def kafka_produce_each_report(bootstrap: str, topic: str, records: int, phase: Phase) -> int:
    """confluent-kafka with a delivery callback per record and ``poll(0)`` after every ``produce``."""
    return _kafka_produce(bootstrap, topic, records, phase, each_report=True)


def kafka_produce_batch(bootstrap: str, topic: str, records: int, phase: Phase) -> int:
    """confluent-kafka's batched path: ``Producer.produce_batch`` of ``KAFKA_PRODUCE_BATCH`` records to one
    partition after another (the own ``produce_batched``'s shape), failure reports only."""
    failures: list = []
    producer = _kafka_producer(bootstrap, topic, failures, each_report=False)
    value = b"x" * RECORD_BYTES
    deadline = time.monotonic() + CASE_TIMEOUT_S
    with phase:
        for first in range(0, records, KAFKA_PRODUCE_BATCH):
            messages = [{"value": value} for _ in range(min(KAFKA_PRODUCE_BATCH, records - first))]
            partition = first // KAFKA_PRODUCE_BATCH % PARTITIONS
            while messages:  # the ones the full local queue refused (marked '_error') go again after a poll
                producer.produce_batch(topic, messages, partition=partition,
                                       on_delivery=lambda err, _msg: failures.append(err) if err else None)
                messages = [{"value": value} for m in messages if "_error" in m]
                if messages:
                    if time.monotonic() > deadline:
                        raise KafkaException(f"the local queue stayed full for {CASE_TIMEOUT_S}s")
                    producer.poll(0.05)
            producer.poll(0)
        remaining = producer.flush(CASE_TIMEOUT_S)
    if remaining or failures:
        raise KafkaException(f"{remaining} records undelivered, {len(failures)} failed: {failures[:3]}")
    return records


def _kafka_producer(bootstrap: str, topic: str, failures: list, each_report: bool):
    """A producer with ``KAFKA_PRODUCER``'s settings after one acknowledged record per partition (as the own
    client's warm-up: metadata, connections and InitProducerId before the clock starts)."""
    producer = KafkaProducer({"bootstrap.servers": bootstrap, **KAFKA_PRODUCER,
                              "delivery.report.only.error": not each_report,
                              "error_cb": lambda err: failures.append(err) if err.fatal() else None})
    for partition in range(PARTITIONS):
        producer.produce(topic, value=b"w", partition=partition,
                         on_delivery=lambda err, _msg: failures.append(err) if err else None)
    if producer.flush(30) or failures:
        raise RuntimeError(f"warm-up records to {topic} undelivered: {failures[:3]}")
    return producer


def _kafka_produce(bootstrap: str, topic: str, records: int, phase: Phase, each_report: bool) -> int:
    """Per-record ``produce``."""
    failures: list = []
    delivered: list = []

    def on_delivery(err, _msg) -> None:
        if err is not None:
            failures.append(err)
        elif each_report:
            delivered.append(None)

    producer = _kafka_producer(bootstrap, topic, failures, each_report)
    value = b"x" * RECORD_BYTES
    poll_every = 1 if each_report else KAFKA_POLL_EVERY
    with phase:
        for n in range(records):
            try:
                producer.produce(topic, value=value, on_delivery=on_delivery)
            except BufferError:  # the local queue is full: serve delivery reports, then once more
                producer.poll(0.05)
                producer.produce(topic, value=value, on_delivery=on_delivery)
            if n % poll_every == 0:
                producer.poll(0)
        remaining = producer.flush(CASE_TIMEOUT_S)
    if remaining or failures:
        raise KafkaException(f"{remaining} records undelivered, {len(failures)} failed: {failures[:3]}")
    if each_report and len(delivered) != records:
        raise KafkaException(f"{len(delivered)} delivery reports for {records} records")
    return records


def kafka_consume(bootstrap: str, topic: str, records: int, phase: Phase) -> int:
    consumer = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                              **KAFKA_CONSUMER})
    consumer.assign([KafkaTopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    received, errors, deadline = 0, [], time.monotonic() + CASE_TIMEOUT_S
    with phase:
        while received < records and time.monotonic() < deadline:
            # consume(n) waits for n messages or the timeout: never ask past what remains to be read
            for message in consumer.consume(min(KAFKA_CONSUME_BATCH, records - received), timeout=1.0):
                if message.error() is not None:
                    errors.append(message.error())
                else:
                    received += 1
    consumer.close()
    if received < records:
        raise TimeoutError(f"kafka consumed {received} of {records} ({errors[:3]})")
    return received


# ---- the own client's cases ----------------------------------------------------------------------


def own_produce_batched(bootstrap: str, topic: str, records: int, phase: Phase) -> int:
    return _own_produce(produce_consume.produce_batched, bootstrap, topic, records, phase)


def own_produce_record(bootstrap: str, topic: str, records: int, phase: Phase) -> int:
    return _own_produce(produce_consume.produce_per_record, bootstrap, topic, records, phase)


def _own_produce(func, bootstrap: str, topic: str, records: int, phase: Phase) -> int:
    """``produce_consume``'s cases time themselves after their warm-up; the phase brackets the whole
    call for CPU, so its wall clock is replaced by the case's own."""
    with phase:
        rate = func({"bootstrap.servers": bootstrap, "acks": "all"}, topic, records)
    phase.elapsed_s = records / rate  # the case's own clock (after its warm-up)
    return records


def own_consume(bootstrap: str, topic: str, records: int, phase: Phase) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    received, deadline = 0, time.monotonic() + CASE_TIMEOUT_S
    with phase:
        while received < records and time.monotonic() < deadline:
            for record in consumer.poll(timeout=1.0):
                received += record.value is not None
    consumer.close()
    if received < records:
        raise TimeoutError(f"own consumer read {received} of {records}")
    return received


def own_consume_arrow(bootstrap: str, topic: str, records: int, phase: Phase) -> int:
    with phase:
        rate = produce_consume.consume_all({"bootstrap.servers": bootstrap}, topic)
    total = records + PARTITIONS  # the warm-up record of each partition is read too
    phase.elapsed_s = total / rate
    return total


PRODUCERS = {"own": [("produce_batched", own_produce_batched), ("produce_record", own_produce_record)],
             "kafka": [("produce_batch", kafka_produce_batch), ("produce", kafka_produce),
                       ("produce_each_report", kafka_produce_each_report)]}
READERS = [("own", "consume", own_consume), ("own", "consume_arrow", own_consume_arrow),
           ("kafka", "consume", kafka_consume)]


# ---- one run ---------------------------------------------------------------------------------------


def run_once(cluster: LocalCluster, admin: Admin, records: int, run_index: int, samples: dict, statuses: dict) -> None:
    """Every case once; the order of the two clients flips each run. A failing case is recorded, the
    others go on. The topic written by ``produce_batched`` / ``produce`` is read by every reader, under
    ``written_by`` = the writer; the consume ratios use the own-written topic (the same input for both)."""
    bootstraps = {"own": cluster.bootstrap_servers, "kafka": kafka_bootstrap(cluster)}
    pids = [cluster.broker_pid(b) for b in cluster.broker_ids()]
    writers = ["own", "kafka"] if run_index % 2 == 0 else ["kafka", "own"]
    if bootstraps["kafka"] is None:  # no listener: the own client's half is still measured
        writers.remove("kafka")
        for key in (("kafka", "produce", "kafka"), ("kafka", "consume", "own")):
            statuses.setdefault(key, "unavailable: no Kafka listener")
    for writer in writers:
        for case, func in PRODUCERS[writer]:
            topic = f"bench-{writer}-{case}-{uuid.uuid4().hex[:6]}"
            admin.create_topic(topic, PARTITIONS, 3, config=TOPIC_CONFIG)
            readable = _measure(samples, statuses, (writer, case, writer), func, bootstraps[writer], topic, records,
                                pids)
            if readable and case in ("produce_batched", "produce"):
                readers = READERS if run_index % 2 == 0 else READERS[::-1]
                for reader, read_case, read in readers:
                    _measure(samples, statuses, (reader, read_case, writer), read, bootstraps[reader], topic,
                             records, pids)
            admin.delete_topic(topic)


def _measure(samples: dict, statuses: dict, key: tuple, func, bootstrap: str, topic: str, records: int,
             pids: list[int]) -> bool:
    if key in statuses:
        return False  # failed in an earlier run: not retried, a broken case cannot eat the time budget
    phase = Phase(pids)
    try:
        done = func(bootstrap, topic, records, phase)
    except Exception as exc:  # reported in the table, never hides the other cases
        statuses[key] = f"failed: {type(exc).__name__}: {exc}"[:300]
        print(f"{key}: {statuses[key]}", file=sys.stderr)
        return False
    samples.setdefault(key, []).append(phase.sample(done))
    return True


# ---- summary -----------------------------------------------------------------------------------------


def summarise(samples: dict, statuses: dict) -> dict:
    rows = []
    for (client, case, written_by), runs in sorted(samples.items()):
        rates = [run["records_per_s"] for run in runs]
        median = statistics.median(rates)
        row = {"client": client, "case": case, "written_by": written_by, "records_per_s": median,
               "mb_per_s": median * RECORD_BYTES / 1e6, "min": min(rates), "max": max(rates), "runs": len(runs),
               "status": statuses.get((client, case, written_by), "ok")}
        for key in ("broker_cpu_us_per_record", "client_cpu_us_per_record"):
            row[key] = statistics.median(run[key] for run in runs)
        rows.append(row)
    rows += [{"client": c, "case": case, "written_by": w, "records_per_s": None, "runs": 0, "status": status}
             for (c, case, w), status in statuses.items() if (c, case, w) not in samples]
    return {"rows": rows, "ratios": ratios(samples), "target_ratio": TARGET_RATIO,
            "settings": {"records_per_case": None, "record_bytes": RECORD_BYTES, "partitions": PARTITIONS,
                         "replication_factor": 3, "topic_config": TOPIC_CONFIG, "kafka_producer": KAFKA_PRODUCER,
                         "kafka_consumer": KAFKA_CONSUMER, "kafka_consume_batch": KAFKA_CONSUME_BATCH,
                         "kafka_poll_every": KAFKA_POLL_EVERY},
            "stored_peers": stored_peers()}


def ratios(samples: dict) -> dict:
    """Per run (runs pair up by index), Kafka path / own client; median, min, max. Consume ratios read the
    topic the own client wrote."""
    out = {}
    for name, ((kc, kcase), (oc, ocase)) in RATIOS.items():
        writer = "own" if "consume" in kcase else None
        kafka = samples.get((kc, kcase, writer or kc), [])
        own = samples.get((oc, ocase, writer or oc), [])
        per_run = [k["records_per_s"] / o["records_per_s"] for k, o in zip(kafka, own)]
        if per_run:
            out[name] = {"median": statistics.median(per_run), "min": min(per_run), "max": max(per_run),
                         "runs": len(per_run)}
    return out


def stored_peers() -> dict:
    """RabbitMQ's and NATS's rows (and that run's own ADS rows) of the last full comparison, not rerun."""
    try:
        rows = json.loads(PEER_RESULTS.read_text())
    except (OSError, ValueError) as exc:
        return {"file": str(PEER_RESULTS), "error": str(exc), "rows": []}
    keep = [r for r in rows if r["system"] in ("ads", "nats", "rabbitmq") and r["status"] == "ok"
            and r["case"] in ("produce_record", "produce_batched", "consume", "consume_arrow")]
    return {"file": str(PEER_RESULTS.relative_to(PEER_RESULTS.parents[2])),
            "rows": [{k: r[k] for k in ("system", "case", "records_per_s", "min", "max", "runs")} for r in keep]}


def table(report: dict) -> str:
    lines = [f"{'client':6} {'case':16} {'written by':10} {'records/s':>11} {'MB/s':>7} {'min-max':>21} "
             f"{'broker us/rec':>13} {'client us/rec':>13}  status"]
    for row in report["rows"]:
        if row["records_per_s"] is None:
            lines.append(f"{row['client']:6} {row['case']:16} {row['written_by']:10} {'-':>11}  {row['status']}")
            continue
        spread = f"{row['min']:,.0f}-{row['max']:,.0f}"
        status = "" if row["status"] == "ok" else row["status"]
        lines.append(f"{row['client']:6} {row['case']:16} {row['written_by']:10} {row['records_per_s']:11,.0f} "
                     f"{row['mb_per_s']:7.1f} {spread:>21} {row['broker_cpu_us_per_record']:13.2f} "
                     f"{row['client_cpu_us_per_record']:13.2f}  {status}")
    for name, ratio in report["ratios"].items():
        verdict = "meets" if ratio["median"] >= TARGET_RATIO else "BELOW"
        lines.append(f"ratio kafka / own, {name}: {ratio['median']:.2f} (runs {ratio['min']:.2f}-{ratio['max']:.2f})"
                     f" {verdict} the {TARGET_RATIO} target")
    peers = report["stored_peers"]
    lines.append(f"stored, not rerun ({peers['file']}): "
                 + ", ".join(f"{r['system']} {r['case']} {r['records_per_s']:,.0f}" for r in peers["rows"]))
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description="confluent-kafka vs ADS's own client on one ADS cluster")
    run_args.add(parser, "fewer records per case")
    return run_args.finish(parser, parser.parse_args(argv))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    unwind_on_sigterm()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    samples: dict = {}
    statuses: dict = {}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ads-kafka-clients-") as work:
        cluster = LocalCluster(Path(work) / "ads")
        admin = None
        try:
            cluster.up(brokers=3)
            admin = Admin({"bootstrap.servers": cluster.bootstrap_servers})
            for run_index in range(args.runs):
                began = time.monotonic()
                run_once(cluster, admin, args.records, run_index, samples, statuses)
                print(f"run {run_index + 1}/{args.runs} done in {time.monotonic() - began:.0f}s", file=sys.stderr)
        finally:
            if admin is not None:
                admin.close()
            cluster.down()
    report = summarise(samples, statuses)
    report["settings"]["records_per_case"] = args.records
    report["settings"]["runs"] = args.runs
    text = table(report)
    (out / "kafka_clients.json").write_text(json.dumps(report, indent=2, allow_nan=False, default=str))
    (out / "table.txt").write_text(text + "\n")
    print(text)
    print(f"{args.runs} runs in {time.monotonic() - started:.0f}s; wrote {out / 'kafka_clients.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
