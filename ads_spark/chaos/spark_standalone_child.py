"""The child of a multi-host deployment run, on the ``client`` host (``spark_standalone.run_deployment``).

Starts ZooKeeper and the brokers on their hosts (``LocalCluster`` with the network, secured or open),
the Spark master here and a worker on each broker host, then runs the quickstart pipeline
(``jobs/quickstart.py``: produce, transform with a broker host cut off by the firewall once the
first micro-batch is done, replay) with a session on that master. Every executor's Python workers
come from ``read_probe``, so each fetch is recorded with its reader's host and its kind; between
produce and transform, batch reads of ``orders`` run until every worker host has read locally and
remotely (tasks land on executors at random: nothing in Spark's Python data source API asks for a
host). The report counts per host, the invariant "local iff the leader is on the reader's host",
and lost/duplicated by a plain consumer reading ``orders_upper`` back while the host is still cut.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import sys
import time
from pathlib import Path

from ads_spark.chaos.hosts import TestNetwork
from ads_spark.chaos.read_probe import LOCAL, PROBE_DIR_ENV, read_records
from ads_spark.chaos.spark_standalone import BROKERS, CLIENT_HOST, HOST_NAMES, WORKER_HOSTS, StandaloneSpark
from ads_spark.client import Admin, Consumer, TopicPartition
from ads_spark.cluster import LocalCluster, broker_host_name

QUICKSTART = Path(__file__).resolve().parents[2] / "jobs" / "quickstart.py"
EXECUTORS_WAIT_S = 90.0
LOCALITY_READS_MAX = 6
LOCALITY_READ_TASKS = 12
NETWORK_TIMEOUT = "15s"  # an executor on a cut host is declared lost after this (default 120s)
# A call to the cut host fails after this instead of Kafka's 30 s, so its partitions move on sooner (a
# setting docs/deploy.md gives for deployments that want fail-over in seconds).
CLIENT_REQUEST_TIMEOUT_MS = "5000"


def load_quickstart():
    spec = importlib.util.spec_from_file_location("ads_quickstart", QUICKSTART)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def spark_session(master_url: str, driver_address: str, probe_dir: Path):
    from pyspark.sql import SparkSession

    # Python workers Spark starts on the driver (the data source's planning and commit) take these.
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    conf = {"spark.driver.host": driver_address, "spark.driver.bindAddress": driver_address,
            "spark.driver.memory": "512m", "spark.executor.memory": "512m", "spark.executor.cores": "1",
            "spark.cores.max": str(len(WORKER_HOSTS)), "spark.pyspark.python": sys.executable,
            "spark.pyspark.driver.python": sys.executable,
            "spark.python.daemon.module": "ads_spark.chaos.read_probe",
            f"spark.executorEnv.{PROBE_DIR_ENV}": str(probe_dir),
            "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "3", "spark.sql.session.timeZone": "UTC",
            "spark.network.timeout": NETWORK_TIMEOUT, "spark.network.timeoutInterval": "2s",
            "spark.executor.heartbeatInterval": "2s"}
    builder = SparkSession.builder.master(master_url).appName("ads-multihost")
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def wait_for_executors(spark, count: int) -> list[str]:
    """The executors' host addresses once ``count`` have registered (the driver's entry is left out)."""
    deadline = time.monotonic() + EXECUTORS_WAIT_S
    driver = spark.sparkContext.getConf().get("spark.driver.host")
    while True:
        infos = spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()
        executors = sorted(info.host() for info in infos if info.host() != driver)
        if len(executors) >= count or time.monotonic() > deadline:
            return executors
        time.sleep(0.5)


def locality(network: TestNetwork, probe_dir: Path) -> tuple[dict, int]:
    """Per worker host: fetches (and records) read locally and over the network; and how many fetches broke
    the rule "local exactly when the leader is on the reader's host"."""
    host_of_name = {network.hostname(h): h for h in network.hosts}
    host_of_address = {network.address(h): h for h in network.hosts}
    per_host = {h: {"local_fetches": 0, "remote_fetches": 0, "local_records": 0, "remote_records": 0}
                for h in WORKER_HOSTS}
    misplaced = 0
    for record in read_records(str(probe_dir)):
        reader, leader = host_of_name.get(record["reader"]), host_of_address.get(record["leader"])
        kind = "local" if record["kind"] == LOCAL else "remote"
        if reader in per_host:
            per_host[reader][f"{kind}_fetches"] += 1
            per_host[reader][f"{kind}_records"] += record["records"]
        if (kind == "local") != (reader is not None and reader == leader):
            misplaced += 1
    return per_host, misplaced


def read_until_every_host_read_locally(spark, ads: dict, topic: str, network: TestNetwork, probe_dir: Path) -> int:
    """Batch reads of ``topic`` (small tasks) until each worker host has fetched locally and remotely."""
    for attempt in range(1, LOCALITY_READS_MAX + 1):
        (spark.read.format("ads").options(**ads).option("subscribe", topic)
         .option("minPartitions", str(LOCALITY_READ_TASKS)).load().count())
        per_host, _ = locality(network, probe_dir)
        if all(c["local_fetches"] and c["remote_fetches"] for c in per_host.values()):
            return attempt
    return LOCALITY_READS_MAX


class HostCutter:
    """Stands in for the quickstart's cluster: "killing" broker ``i`` cuts host ``b<i>`` off every other host."""

    def __init__(self, network: TestNetwork, started: float):
        self.network, self.started = network, started
        self.cut: dict = {}

    def kill_broker(self, broker_id: int) -> None:
        host = broker_host_name(broker_id)
        self.network.isolate(host, list(self.network.hosts))
        self.cut = {"host": host, "broker": broker_id, "at_s": round(time.monotonic() - self.started, 1)}


def count_back(client: dict, topic: str, partitions: int, records: int) -> dict:
    """A plain consumer's read of ``topic``: how many of the expected ORDER-<i> values are lost, duplicated."""
    admin, consumer = Admin(client), Consumer(client)
    try:
        values = []
        for partition in range(partitions):
            tp = TopicPartition(topic, partition)
            end = int(admin.list_offsets([tp], "latest")[tp])
            values += consumer.fetch_arrow(tp, 0, end).column("value").to_pylist()
    finally:
        consumer.close()
        admin.close()
    seen = [bytes(v).decode() for v in values]
    expected = {f"ORDER-{i}" for i in range(records)}
    return {"read": len(seen), "lost": len(expected - set(seen)), "duplicated": len(seen) - len(set(seen)),
            "unexpected": len(set(seen) - expected)}


def leaders(admin: Admin, topic: str) -> dict[int, str]:
    return {p.partition: broker_host_name(p.leader) if p.leader >= 0 else "none"
            for p in admin.describe_topics([topic])[0].partitions}


def pipeline(spark, cluster: LocalCluster, network: TestNetwork, work: Path, probe_dir: Path, records: int,
             started: float) -> dict:
    quickstart = load_quickstart()
    client = cluster.client_config(**{"request.timeout.ms": CLIENT_REQUEST_TIMEOUT_MS})
    ads = quickstart.spark_options(client)
    admin = Admin(client)
    try:
        for topic in (quickstart.ORDERS, quickstart.UPPER):
            admin.create_topic(topic, partitions=quickstart.PARTITIONS, replication_factor=BROKERS,
                               config={"min.insync.replicas": "2"})
        figures: dict = {"leaders_before": leaders(admin, quickstart.ORDERS)}
        mark = time.monotonic()
        figures["produce_s"] = round(quickstart.produce_job(spark, ads, work, records), 1)
        mark, figures["locality_reads"] = time.monotonic(), read_until_every_host_read_locally(
            spark, ads, quickstart.ORDERS, network, probe_dir)
        figures["locality_reads_s"] = round(time.monotonic() - mark, 1)
        cutter = HostCutter(network, started)
        figures["transform_s"] = round(quickstart.transform_job(spark, ads, work, cutter, kill=True), 1)
        figures["cut"] = cutter.cut
        figures["leaders_after"] = leaders(admin, quickstart.UPPER)
        figures["replayed"] = quickstart.replay_job(spark, ads, 100, 200)
        figures["replay_expected"] = 100 * quickstart.PARTITIONS
        figures["check"] = count_back(client, quickstart.UPPER, quickstart.PARTITIONS, records)
        return figures
    finally:
        admin.close()


def broker_security(cluster: LocalCluster) -> dict[str, str]:
    """The security settings broker 1 ran with (file names and modes only: its config holds no secret)."""
    wanted = ("listeners", "ssl.client.auth", "authorizer.class.name", "zookeeper.ssl.client.enable",
              "zookeeper.set.acl")
    lines = cluster.broker_config_path(1).read_text().splitlines()
    settings = dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))
    return {key: settings.get(key, "") for key in wanted}


def run(network: TestNetwork, state: Path, security: str, records: int) -> dict:
    started = time.monotonic()
    probe_dir = state / "read-probe"
    probe_dir.mkdir(parents=True, exist_ok=True)
    cluster = LocalCluster(state / "cluster", network=network)
    daemons = StandaloneSpark(network, state / "spark", CLIENT_HOST, WORKER_HOSTS)
    spark = None
    report: dict = {"security": security, "records": records,
                    "hostnames": {h: network.hostname(h) for h in network.hosts}}
    try:
        daemons.start(worker_env={PROBE_DIR_ENV: str(probe_dir)})
        # An open cluster's PLAINTEXT listeners face other hosts here: allowed explicitly, as its operator must.
        cluster.up(brokers=BROKERS, security=security,
                   overrides=["listeners.plaintext.nonloopback.allow=true"] if security == "none" else [])
        report["cluster_up_s"] = round(time.monotonic() - started, 1)
        print(f"cluster up at {report['cluster_up_s']}s ({security})", flush=True)
        report["client_security_protocol"] = cluster.client_config().get("security.protocol", "PLAINTEXT")
        report["broker_security"] = broker_security(cluster)
        daemons.wait_for_workers()
        spark = spark_session(daemons.master_url, network.address(CLIENT_HOST), probe_dir)
        report["executors"] = wait_for_executors(spark, len(WORKER_HOSTS))
        report["spark_up_s"] = round(time.monotonic() - started, 1)
        print(f"spark up at {report['spark_up_s']}s: executors {report['executors']}", flush=True)
        report.update(pipeline(spark, cluster, network, state / "work", probe_dir, records, started))
        report["locality"], report["misplaced_fetches"] = locality(network, probe_dir)
        report["run_s"] = round(time.monotonic() - started, 1)
        return report
    finally:
        if spark is not None:
            spark.stop()
        daemons.stop()
        for broker_id in cluster.broker_ids():  # the cut host would make a controlled shutdown wait it out
            cluster.kill_broker(broker_id)
        cluster.down()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag in ("--state-dir", "--out", "--run-id"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--security", choices=("tls", "none"), required=True)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--hostnames", choices=("own", "shared"), default="own")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # built by the parent: only used here
    network = TestNetwork(HOST_NAMES, run_id=args.run_id, hostnames=args.hostnames == "own")
    report = run(network, Path(args.state_dir), args.security, args.records)
    (Path(args.out) / "report.json").write_text(json.dumps(report, indent=2, sort_keys=True))
    print(json.dumps(report, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
