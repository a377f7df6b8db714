"""What security costs: produce, consume, small calls and Spark reads in five security modes, one run.

    python -m benchmarks.security_cost --out benchmarks/results [--records 50000] [--runs 5] [--no-spark]

3-broker local clusters on this machine, all of the same shape: topics of 6 partitions, RF=3,
min.insync.replicas=2, producers with acks=all, 1 KiB values. ZooKeeper runs over TLS with ACLs in
every mode (``LocalCluster(security="tls")``), so what differs between modes is only what the brokers'
Flight listeners and the authorizer do:

* ``plaintext``:    PLAINTEXT listener, no authorizer (every cluster before issue #23): the reference;
* ``ssl``:          SSL listener, ``ssl.client.auth=none``, no authorizer (encryption only);
* ``mtls``:         SSL with client certificates required (clients and brokers), no authorizer;
* ``mtls_acl``:     ``mtls`` plus the ACL authorizer; the client (``User:bench``, a certificate of the
                    cluster's CA) holds exactly Write and Read on its topic, nothing else, and is not
                    a super user (the brokers and ``User:admin`` are);
* ``sasl_ssl_acl``: an extra SASL_SSL listener per broker for the client, which logs in with a
                    password once and sends a bearer token on every call; the brokers talk to each
                    other over the ``mtls`` listener; authorizer and ACLs as ``mtls_acl``. (ADS's
                    ``ssl.client.auth`` is broker-wide, so the client presents its certificate here too;
                    its principal is still the token's.)

The plaintext cluster runs for the whole run; each secured mode gets a window: its cluster is
started, checked to refuse what it must (a plaintext client at TLS, a client without a certificate
under mTLS, the client on a topic it has no ACL for, a wrong password: a misconfigured mode cannot
pass for a secured one), then measured run by run alternating with the plaintext cluster (which of
the two goes first alternates too), then stopped. Each secured figure is compared with the plaintext
figure of its own window, so the machine's drift (it is shared) hits both sides alike.

Per cluster and window, ``--runs`` timed runs after one untimed one, each: ``produce``
(``produce_arrow`` of 512-record batches round-robin over the partitions, clock to the last
acknowledgement), ``consume`` (the run's records read back with ``fetch_arrow`` three times, over
Flight with ``local.reads=false`` and with local reads, the consumer's default) and ``metadata`` (one
topic's metadata from one broker on an open connection: p50/p99 of ``--calls`` calls per run); then
``connect`` (a new client's first call: TLS handshake and, on SASL, ``authenticate``). With Spark
(``local[2]``, one session for the whole run), in ``--spark-modes`` windows: a batch read of the
whole topic into the noop sink, local reads on and off, alternated likewise (one untimed round first).

Writes DIR/security_cost.json and DIR/security_cost.md (tables of medians and ratios to the
plaintext figure of the same window); only ratios within one run are meant to be compared.
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
import time
from pathlib import Path

import pyarrow as pa

from ads_spark.client import Admin, Consumer, Producer, TopicPartition
from ads_spark.cluster import LocalCluster, unwind_on_sigterm
from ads_spark.cluster_security import ClusterSecurity, broker_principal_name, super_users

MODES = ("plaintext", "ssl", "mtls", "mtls_acl", "sasl_ssl_acl")
SPARK_MODES = ("mtls_acl", "sasl_ssl_acl")  # each with the plaintext cluster beside it
MODE_DESCRIPTIONS = {
    "plaintext": "PLAINTEXT listener, no authorizer",
    "ssl": "SSL listener (TLS), ssl.client.auth=none, no authorizer",
    "mtls": "SSL listener, ssl.client.auth=required (clients and brokers), no authorizer",
    "mtls_acl": "SSL listener, ssl.client.auth=required, ACL authorizer; client User:bench with Write+Read on the "
                "topic only",
    "sasl_ssl_acl": "client on a SASL_SSL listener (PLAIN login once, bearer token per call; certificate too), "
                    "brokers on mTLS, ACL authorizer; client User:bench with Write+Read on the topic only",
}
VALUE_BYTES = 1024
PARTITIONS = 6
REPLICATION_FACTOR = 3
BATCH_RECORDS = 512
BENCH_USER = "bench"
BENCH_PASSWORD = "bench-password-not-secret"  # a throw-away cluster's; never printed
CONNECT_SAMPLES = 5
CONSUME_PASSES = 3  # reads of each run's records per consumer: a local read of one run takes ~10 ms
ACL_AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
# Keys the mode decides; LocalCluster's secured lines for them are replaced, the rest (ZooKeeper over TLS,
# log dirs, timeouts) kept.
MODE_KEYS = ("listeners", "inter.broker.listener.name", "ssl.", "authorizer.class.name", "super.users",
             "sasl.", "credential.hash.iterations")


class BenchCluster(LocalCluster):
    """A ``security="tls"`` LocalCluster whose brokers' listeners and authorizer follow ``mode``."""

    def __init__(self, state_dir: Path, mode: str):
        super().__init__(state_dir)
        self.mode = mode

    @property
    def files(self) -> ClusterSecurity:
        return ClusterSecurity(self.dir)

    def sasl_port(self, broker_id: int) -> int:
        return self.extra_port(broker_id, "SASL_SSL")

    def mode_lines(self, broker_id: int) -> list[str]:
        port = next(b["port"] for b in self.state["brokers"] if b["id"] == broker_id)
        if self.mode == "plaintext":
            return [f"listeners=PLAINTEXT://127.0.0.1:{port}"]
        lines = [f"ssl.keystore.location={self.files.keystore(broker_principal_name(broker_id))}",
                 f"ssl.truststore.location={self.files.truststore}", "inter.broker.listener.name=SSL",
                 f"ssl.client.auth={'none' if self.mode == 'ssl' else 'required'}"]
        if self.mode == "sasl_ssl_acl":
            lines.append(f"listeners=SSL://127.0.0.1:{port},SASL_SSL://127.0.0.1:{self.sasl_port(broker_id)}")
        else:
            lines.append(f"listeners=SSL://127.0.0.1:{port}")
        if self.mode.endswith("_acl"):
            lines += [f"authorizer.class.name={ACL_AUTHORIZER}", f"super.users={super_users(self.broker_ids())}"]
        return lines

    def broker_config_lines(self, broker_id: int, lines: list[str]) -> list[str]:
        kept = [line for line in lines if not any(line.startswith(key) for key in MODE_KEYS)]
        return kept + self.mode_lines(broker_id)

    def client_config(self, **extra) -> dict:
        """The admin's config (a super user where the authorizer is on); used by ``up`` too."""
        if self.mode == "plaintext":
            return {"bootstrap.servers": self.bootstrap_servers, **extra}
        return {**self.files.client_config(self.bootstrap_servers), **extra}

    def bench_config(self) -> dict:
        """The measured client's config: ``User:bench`` wherever there is a principal to have."""
        if self.mode == "plaintext":
            return {"bootstrap.servers": self.bootstrap_servers}
        config = {"bootstrap.servers": self.bootstrap_servers, "security.protocol": "SSL",
                  "ssl.truststore.location": str(self.files.truststore)}
        if self.mode != "ssl":
            config["ssl.keystore.location"] = str(self.bench_keystore())
        if self.mode == "sasl_ssl_acl":
            sasl_bootstrap = ",".join(f"127.0.0.1:{self.sasl_port(b)}" for b in self.broker_ids())
            config.update({"bootstrap.servers": sasl_bootstrap, "security.protocol": "SASL_SSL",
                           "sasl.mechanism": "PLAIN", "sasl.username": BENCH_USER, "sasl.password": BENCH_PASSWORD})
        return config

    def bench_keystore(self) -> Path:
        from ads_spark.security import certs

        path = self.files.keystore(BENCH_USER)
        if not path.exists():
            certs.issue_certificate(certs.load_ca(self.files.dir), self.files.dir, BENCH_USER,
                                    [BENCH_USER, "localhost", "127.0.0.1"], server=False)
        return path


FORBIDDEN_TOPIC = "bench-forbidden"
CHECK_TIMEOUTS = {"request.timeout.ms": 2000, "default.api.timeout.ms": 4000}


def refused(config: dict, action) -> str | None:
    """The error class name ``action(client config)`` fails with, None when it succeeds."""
    try:
        action({**config, **CHECK_TIMEOUTS})
    except Exception as exc:  # which failure is recorded; any failure is the refusal looked for
        return type(exc).__name__
    return None


def describing(topic: str):
    def call(config: dict) -> None:
        admin = Admin(config)
        try:
            admin.describe_topics([topic])
        finally:
            admin.close()
    return call


def check_mode(cluster: BenchCluster, topic: str) -> dict:
    """Proof that the mode is what it says (each check a refusal that must happen): a PLAINTEXT client is
    refused by TLS listeners, a certificate-less one where certificates are required, the measured client
    on a topic it holds no ACL for, a wrong password. Raises when a refusal does not happen."""
    def send_one(config: dict) -> None:
        with Producer({**config, "acks": "all"}) as producer:
            producer.produce_arrow(FORBIDDEN_TOPIC, pa.record_batch({"value": pa.array([b"x"])})).result(10)

    bench, mode, checks = cluster.bench_config(), cluster.mode, {}
    if mode != "plaintext":
        checks["plaintext_client"] = refused({"bootstrap.servers": bench["bootstrap.servers"]}, describing(topic))
    if mode not in ("plaintext", "ssl"):
        no_certificate = {k: v for k, v in bench.items() if k != "ssl.keystore.location"}
        checks["client_without_certificate"] = refused(no_certificate, describing(topic))
    if mode.endswith("_acl"):
        checks["produce_without_acl"] = refused(bench, send_one)
        checks["describe_without_acl"] = refused(bench, describing(FORBIDDEN_TOPIC))
    if mode == "sasl_ssl_acl":
        checks["wrong_password"] = refused({**bench, "sasl.password": "wrong"}, describing(topic))
    missing = [name for name, error in checks.items() if error is None]
    if missing:
        raise RuntimeError(f"mode {mode}: not refused: {', '.join(missing)}")
    return checks


def start_cluster(directory: Path, mode: str) -> BenchCluster:
    """``mode``'s cluster, up, with the forbidden topic and (SASL) the measured client's login."""
    cluster = BenchCluster(directory, mode)
    cluster.up(brokers=3, security="tls", overrides=["replica.lag.time.max.ms=10000"])
    admin = Admin(cluster.client_config())
    try:
        admin.create_topic(FORBIDDEN_TOPIC, 1, REPLICATION_FACTOR)
        if mode == "sasl_ssl_acl":
            admin.upsert_user(BENCH_USER, BENCH_PASSWORD)
    finally:
        admin.close()
    unwind_on_sigterm()
    return cluster


def produce(config: dict, topic: str, records: int) -> float:
    """Seconds to send ``records`` records as Arrow batches and have every one acknowledged (acks=all)."""
    batch = pa.record_batch({"value": pa.array([b"v" * VALUE_BYTES] * BATCH_RECORDS, pa.binary())})
    with Producer({**config, "acks": "all"}) as producer:
        for partition in range(PARTITIONS):  # leaders learned and streams open before the clock starts
            producer.produce(topic, value=b"w", partition=partition)
        if producer.flush(60):
            raise RuntimeError("warm-up records undelivered")
        started = time.perf_counter()
        futures = [producer.produce_arrow(topic, batch, partition=i % PARTITIONS)
                   for i in range(records // BATCH_RECORDS)]
        for future in futures:
            future.result(timeout=300)
        return time.perf_counter() - started


def consume(consumer: Consumer, topic: str, ranges: dict[int, tuple[int, int]]) -> tuple[float, int]:
    """Seconds to read each partition's [start, end) back CONSUME_PASSES times, and the records read."""
    started, rows = time.perf_counter(), 0
    for _ in range(CONSUME_PASSES):
        for partition, (start, end) in ranges.items():
            rows += consumer.fetch_arrow(TopicPartition(topic, partition), start, end).num_rows
    return time.perf_counter() - started, rows


def metadata_latencies_us(config: dict, topic: str, calls: int) -> list[float]:
    """``calls`` one-topic metadata calls to one broker over one open connection (one untimed first)."""
    from ads_spark.protocol import wire
    from ads_spark.protocol.connection import Connections

    connections = Connections(config)
    try:
        host, port = connections.bootstrap[0]
        samples = []
        for i in range(calls + 1):
            started = time.perf_counter()
            connections.call_action(host, port, wire.ACTION_METADATA, {"topics": [topic]})
            if i:
                samples.append((time.perf_counter() - started) * 1e6)
        return samples
    finally:
        connections.close()


def connect_ms(config: dict, topic: str) -> float:
    """A new client's first call: TLS handshake, SASL ``authenticate`` where there is one, metadata."""
    started = time.perf_counter()
    describing(topic)(config)
    return (time.perf_counter() - started) * 1e3


def percentile(samples: list[float], quantile: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(quantile * len(ordered)))]


class ModeRunner:
    """The measured client of one cluster during one window: a topic of its own, its samples.

    Each run's records are read back by two consumers, CONSUME_PASSES times each: one with local reads
    (the default: segment files mapped, one ``locate`` call per fetch) and one without (every byte over
    the Flight listener, so through TLS where there is TLS)."""

    def __init__(self, cluster: BenchCluster, label: str, topic: str, args):
        self.cluster, self.label, self.topic, self.args = cluster, label, topic, args
        self.config = cluster.bench_config()
        self.sent = (args.records // BATCH_RECORDS) * BATCH_RECORDS
        self.samples: dict[str, list[float]] = {}
        self.latencies_us: list[float] = []
        self.topic_records = 0
        admin = Admin(cluster.client_config())
        try:
            admin.create_topic(topic, PARTITIONS, REPLICATION_FACTOR, config={"min.insync.replicas": "2"})
            if cluster.mode.endswith("_acl"):  # exactly what the client needs; Write and Read imply Describe
                from ads_spark.security.authorizer import AclBinding

                admin.create_acls([AclBinding("Topic", topic, "LITERAL", f"User:{BENCH_USER}", "*", op, "Allow")
                                   for op in ("Write", "Read")])
        finally:
            admin.close()
        self.consumers = {"local": Consumer(self.config), "network": Consumer({**self.config, "local.reads": "false"})}

    def add(self, key: str, value: float, timed: bool) -> None:
        if timed:
            self.samples.setdefault(key, []).append(value)

    def log_ends(self) -> dict[int, int]:
        consumer = self.consumers["network"]
        return {p: consumer.get_watermark_offsets(TopicPartition(self.topic, p))[1] for p in range(PARTITIONS)}

    def run(self, timed: bool) -> None:
        before = self.log_ends()
        self.add("produce_records_per_s", self.sent / produce(self.config, self.topic, self.args.records), timed)
        after = self.log_ends()
        self.topic_records = sum(after.values())
        ranges = {p: (before[p] + 1, after[p]) for p in range(PARTITIONS)}  # + 1: the warm-up record
        for name, consumer in self.consumers.items():
            seconds, rows = consume(consumer, self.topic, ranges)
            if rows != self.sent * CONSUME_PASSES:
                raise RuntimeError(f"{self.label}: read back {rows} records of {self.sent * CONSUME_PASSES}")
            self.add(f"consume_{name}_records_per_s", rows / seconds, timed)
        latencies = metadata_latencies_us(self.config, self.topic, self.args.calls)
        if timed:
            self.latencies_us += latencies

    def spark_read(self, spark, local: bool, timed: bool) -> None:
        """A batch read of the whole topic into noop."""
        read = spark.read.format("ads").option("subscribe", self.topic).option("ads.local.reads", str(local).lower())
        for key, value in self.config.items():
            read = read.option(f"ads.{key}", value)
        started = time.perf_counter()
        read.load().write.format("noop").mode("overwrite").save()
        name = "local" if local else "network"
        self.add(f"spark_read_{name}_records_per_s", self.topic_records / (time.perf_counter() - started), timed)

    def finish(self) -> dict:
        """Close the consumers, delete the topic, and return the window's samples."""
        local_fetches = {name: consumer.local_fetches for name, consumer in self.consumers.items()}
        for consumer in self.consumers.values():
            consumer.close()
        if not local_fetches["local"] or local_fetches["network"]:
            raise RuntimeError(f"{self.label}: local fetches {local_fetches}: the consumers did not read as meant")
        connects = [connect_ms(self.config, self.topic) for _ in range(CONNECT_SAMPLES)]
        admin = Admin(self.cluster.client_config())
        try:
            admin.delete_topic(self.topic)
        finally:
            admin.close()
        return {"mode": self.label, "security_mode": self.cluster.mode, **self.samples, "local_fetches": local_fetches,
                "metadata_p50_us": percentile(self.latencies_us, 0.5),
                "metadata_p99_us": percentile(self.latencies_us, 0.99),
                "connect_ms": statistics.median(connects), "connect_ms_samples": connects}


def spark_session():
    from benchmarks.spark_source_sink import local_spark

    return local_spark("ads-security-bench")


def run_window(index: int, base: BenchCluster, work: Path, mode: str, args, spark) -> list[dict]:
    """One secured mode beside plaintext: its cluster up (the plaintext one stays up for the whole run),
    its refusals checked, then every run alternating the two (which goes first alternates too), Spark
    reads likewise when ``spark`` is given; its cluster stopped and deleted. Returns the two results."""
    started = time.monotonic()
    directory = work / f"{index}-{mode}"
    cluster = start_cluster(directory, mode)
    try:
        topic = f"bench-security-{index}"
        refusals = check_mode(cluster, topic)
        pair = [ModeRunner(base, f"plaintext (beside {mode})", topic, args), ModeRunner(cluster, mode, topic, args)]
        load = os.getloadavg()[0]
        for run in range(-1, args.runs):  # run -1: untimed (first segments, first connections, imports)
            for runner in (pair if run % 2 else pair[::-1]):
                runner.run(timed=run >= 0)
        if spark is not None:
            for run in range(-1, args.runs):
                for local in (True, False):
                    for runner in (pair if run % 2 else pair[::-1]):
                        runner.spark_read(spark, local, timed=run >= 0)
        results = [runner.finish() for runner in pair]
        results[1]["refusals"] = refusals
        for result in results:
            result.update({"window": index, "load_average_1m_at_start": load,
                           "window_seconds": round(time.monotonic() - started, 1)})
        return results
    finally:
        cluster.down()
        shutil.rmtree(directory, ignore_errors=True)


MEASURES = ("produce_records_per_s", "consume_local_records_per_s", "consume_network_records_per_s",
            "spark_read_local_records_per_s", "spark_read_network_records_per_s")  # higher is better


def summarise(results: list[dict]) -> list[dict]:
    """One row per mode and window: medians over runs, MB/s of values, and (secured modes) every ratio to
    the plaintext cluster's figure of the same window."""
    rows = []
    for result in results:
        row = {"mode": result["mode"], "security": MODE_DESCRIPTIONS[result["security_mode"]],
               "metadata_p50_us": result["metadata_p50_us"],
               "metadata_p99_us": result["metadata_p99_us"], "connect_ms": result["connect_ms"]}
        for key in MEASURES:
            if key in result:
                row[key] = statistics.median(result[key])
                row[f"{key}_min"], row[f"{key}_max"] = min(result[key]), max(result[key])
                row[key.replace("records_per_s", "mb_per_s")] = row[key] * VALUE_BYTES / 1e6
        row["window"] = result["window"]
        rows.append(row)
    for row in rows:  # each secured mode against the plaintext cluster measured in the same window
        base = next(r for r in rows if r["window"] == row["window"] and r["mode"].startswith("plaintext"))
        if base is row:
            continue
        for key in [*MEASURES, "metadata_p50_us", "metadata_p99_us", "connect_ms"]:
            if key in row and base.get(key):
                row[f"{key}_vs_plaintext"] = row[key] / base[key]
    return rows


def _ratio(row: dict, key: str) -> str:
    ratio = row.get(f"{key}_vs_plaintext")
    if ratio is None:
        return "ref" if row["mode"].startswith("plaintext") else "-"
    return f"{ratio:.2f}"


def _throughput(row: dict, key: str) -> str:
    if key not in row:
        return "- | -"
    return f"{row[key] * VALUE_BYTES / 1e6:.1f} ({row[key]:,.0f}) | {_ratio(row, key)}"


def markdown_table(rows: list[dict]) -> str:
    """Three tables (throughput, small calls, Spark reads) of medians, each secured measure's ratio to the
    plaintext row above it (same window) in the column after it (x)."""
    lines = [f"- {mode}: {text}" for mode, text in MODE_DESCRIPTIONS.items()
             if any(row["mode"].split()[0] == mode for row in rows)]
    lines += ["", "| mode | produce MB/s (records/s) | x | consume over Flight MB/s (records/s) | x "
             "| consume, local reads MB/s (records/s) | x |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {row['mode']} | {_throughput(row, 'produce_records_per_s')} "
              f"| {_throughput(row, 'consume_network_records_per_s')} "
              f"| {_throughput(row, 'consume_local_records_per_s')} |" for row in rows]
    lines += ["", "| mode | metadata p50 us | p99 us | x p50 | x p99 | new client's first call ms | x |",
              "|---|---|---|---|---|---|---|"]
    lines += [f"| {row['mode']} | {row['metadata_p50_us']:.0f} | {row['metadata_p99_us']:.0f} "
              f"| {_ratio(row, 'metadata_p50_us')} | {_ratio(row, 'metadata_p99_us')} | {row['connect_ms']:.1f} "
              f"| {_ratio(row, 'connect_ms')} |" for row in rows]
    spark_rows = [row for row in rows if "spark_read_local_records_per_s" in row]
    if spark_rows:
        lines += ["", "| mode | Spark read, local reads on: MB/s (records/s) | x | local reads off: MB/s "
                  "(records/s) | x | on / off |", "|---|---|---|---|---|---|"]
        lines += [f"| {row['mode']} | {_throughput(row, 'spark_read_local_records_per_s')} "
                  f"| {_throughput(row, 'spark_read_network_records_per_s')} "
                  f"| {row['spark_read_local_records_per_s'] / row['spark_read_network_records_per_s']:.2f} |"
                  for row in spark_rows]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--records", type=int, default=50_000, help="records produced per run and mode")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200, help="metadata calls per run")
    parser.add_argument("--modes", default=",".join(MODES[1:]), help="secured modes, each beside plaintext")
    parser.add_argument("--spark-modes", default=",".join(SPARK_MODES))
    parser.add_argument("--no-spark", action="store_true")
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    spark_modes = {m for m in args.spark_modes.split(",") if m}
    unknown = sorted((set(modes) | spark_modes) - set(MODES[1:]))
    if unknown:
        parser.error(f"unknown secured mode(s) {', '.join(unknown)}; known: {', '.join(MODES[1:])}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    unwind_on_sigterm()
    started = time.monotonic()
    results, spark = [], None
    with tempfile.TemporaryDirectory(prefix="ads-security-bench-") as work:
        base = start_cluster(Path(work) / "plaintext", "plaintext")
        try:
            spark = None if args.no_spark else spark_session()
            for index, mode in enumerate(modes):
                results += run_window(index, base, Path(work), mode, args, spark if mode in spark_modes else None)
                print(f"{mode} done ({results[-1]['window_seconds']} s)", file=sys.stderr)
        finally:
            if spark is not None:
                spark.stop()
            base.down()
    rows = summarise(results)
    report = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "pyarrow": pa.__version__,
                          "platform": platform.platform()},
              "shape": {"brokers": 3, "partitions": PARTITIONS, "replication_factor": REPLICATION_FACTOR,
                        "min_insync_replicas": 2, "acks": "all", "value_bytes": VALUE_BYTES,
                        "records_per_run": args.records, "runs": args.runs, "metadata_calls_per_run": args.calls},
              "total_seconds": round(time.monotonic() - started, 1), "summary": rows, "samples": results}
    (out / "security_cost.json").write_text(json.dumps(report, indent=2) + "\n")
    table = markdown_table(rows)
    (out / "security_cost.md").write_text(table)
    print(table)
    print(f"total {report['total_seconds']} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
