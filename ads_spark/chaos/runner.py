"""A fault-injection run: a cluster, an acks=all workload, a seeded nemesis schedule, the checker.

Process-level scenarios run on 127.0.0.1: ``kill-leader`` (SIGKILL a partition
leader, restart it later), ``pause-leader`` (SIGSTOP/SIGCONT, a long GC pause),
``rolling-restart`` (SIGTERM and restart every broker in turn). The scenarios
that cut links (``jepsen-2013``, its unsafe negative control,
``partition-random``, ``last-replica-standing``, and ``mixed`` when test hosts
can be built) run on network-namespace test hosts (ads_spark.chaos.hosted).
Every fault is healed before the final reads, so every acknowledged record must
be readable, except in the negative control.

``client``: ``"ads"`` drives the workload through ADS's own client (Flight);
``"kafka"`` through confluent-kafka on the brokers' Kafka listeners
(ads_spark.chaos.kafka_workload), from the client host on test hosts. The final reads
and the replica comparison always use ADS's own reads of the stored log.

Writes ``<out>/report.json`` (the checker's counts) and ``<out>/report.png``
(latency of every send over time, coloured by outcome, faults shaded).
"""

from __future__ import annotations

import bisect
import json
import os
import random
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from ads_spark.chaos import hosted
from ads_spark.chaos.checker import FAILED, OK, UNKNOWN, Attempt, NemesisWindow, check
from ads_spark.chaos.hosts import missing_requirements
from ads_spark.client import Admin, Consumer, Producer, TopicPartition
from ads_spark.protocol import wire
from ads_spark.protocol.connection import Connections
from ads_spark.client.producer_channel import live_stream_threads
from ads_spark.cluster import LocalCluster
from ads_spark.errors import ErrorCode

PROCESS_SCENARIOS = ("kill-leader", "pause-leader", "rolling-restart")
HOSTED_SCENARIOS = ("jepsen-2013", "jepsen-2013-unsafe", "partition-random", "last-replica-standing", "mixed")
SCENARIOS = PROCESS_SCENARIOS + HOSTED_SCENARIOS
CLIENTS = ("ads", "kafka")
SAFE_TOPIC_CONFIG = {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}
UNSAFE_TOPIC_CONFIG = {"min.insync.replicas": "1", "unclean.leader.election.enable": "true"}
BROKER_OVERRIDES = ["replica.lag.time.max.ms=3000"]
TOPIC, PARTITIONS = "chaos", 3
FAULT_GAP_S, FAULT_LENGTH_S = (2.0, 4.0), (2.0, 5.0)
SENDS_IN_FLIGHT_MAX = 200
HEAL_WAIT_S = 60.0


class Workload:
    """Unique values, acks=all, idempotent; every attempt's outcome recorded; consumers polling throughout.

    Each partition has its own cap on sends in flight, so a partition that is
    down (its sends wait out their delivery timeout) does not starve the others,
    as independent Jepsen clients would not.
    """

    def __init__(self, bootstrap: str):
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2,
                                  "delivery.timeout.ms": 15_000, "request.timeout.ms": 5_000})
        # Test hosts are separate machines in spirit: no reading the brokers' files through the shared disk.
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "request.timeout.ms": 5_000,
                                  "local.reads": "false"})
        self.attempts: list[Attempt] = []
        self.consumer_reads: list[tuple[int, int, bytes]] = []
        self.producing_stopped_s: float | None = None
        self.produce_stream_threads_left = -1  # set by stop()
        self.error_examples: dict[str, str] = {}  # error type -> its first message (bounded by the types)
        self._stop = threading.Event()
        self._in_flight = [threading.Semaphore(SENDS_IN_FLIGHT_MAX // PARTITIONS) for _ in range(PARTITIONS)]
        self._threads = [threading.Thread(target=self._produce, daemon=True),
                         threading.Thread(target=self._consume, daemon=True)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)
        self.producing_stopped_s = time.time()
        self.producer.flush(30)
        self.producer.close(timeout=5)
        self.consumer.close()
        # Every stream a fault broke must have ended too, not only the producer's last ones.
        self.produce_stream_threads_left = live_stream_threads()

    def _produce(self) -> None:
        n = 0
        while not self._stop.is_set():
            partition = n % PARTITIONS
            n += 1
            if not self._in_flight[partition].acquire(blocking=False):
                time.sleep(0.002 / PARTITIONS)
                continue
            value, started = f"v{n}".encode(), time.time()
            try:
                future = self.producer.produce(TOPIC, value=value, partition=partition)
            except Exception as exc:  # refused before it was queued (e.g. metadata unavailable): never sent
                self.error_examples.setdefault(type(exc).__name__, str(exc)[:300])
                self.attempts.append(Attempt(value, partition, FAILED, -1, started, time.time(), type(exc).__name__))
                self._in_flight[partition].release()
                time.sleep(0.05)
                continue
            future.add_done_callback(lambda f, v=value, p=partition, s=started: self._record(f, v, p, s))
            time.sleep(0.002)

    def _record(self, future, value: bytes, partition: int, started: float) -> None:
        error = future.exception()
        if error is None:
            outcome, offset, error_name = OK, future.result().offset, ""
        else:  # definite only when refused before any append on the single attempt made; else it may be stored
            definite = getattr(error, "attempts", 2) <= 1 and getattr(error, "code", None) == ErrorCode.NOT_ENOUGH_REPLICAS
            code = getattr(error, "code", None)
            outcome, offset = (FAILED if definite else UNKNOWN), -1
            error_name = code.name if isinstance(code, ErrorCode) else type(error).__name__
            self.error_examples.setdefault(error_name, str(error)[:300])
        self.attempts.append(Attempt(value, partition, outcome, offset, started, time.time(), error_name))
        self._in_flight[partition].release()

    def _consume(self) -> None:
        positions = {p: 0 for p in range(PARTITIONS)}
        while not self._stop.is_set():
            for partition in range(PARTITIONS):
                try:
                    chunk = self.consumer.fetch_chunk(TopicPartition(TOPIC, partition), positions[partition],
                                                      max_wait_ms=100)
                except Exception:  # a fault is on: try again later
                    time.sleep(0.2)
                    continue
                offsets = chunk.table.column("offset").to_pylist()
                values = chunk.table.column("value").to_pylist()
                self.consumer_reads.extend((partition, o, v) for o, v in zip(offsets, values))
                positions[partition] = chunk.next_offset


class Nemesis:
    def __init__(self, cluster: LocalCluster, admin: Admin, rng: random.Random):
        self.cluster, self.admin, self.rng = cluster, admin, rng
        self.windows: list[NemesisWindow] = []

    def leader_of(self, partition: int) -> int:
        """The partition's leader now (any broker while it has none)."""
        try:
            leader = self.admin.describe_topics([TOPIC])[0].partitions[partition].leader
        except Exception:  # metadata unavailable during a fault: pick any broker
            leader = -1
        return leader if leader >= 0 else self.rng.choice(self.cluster.broker_ids())

    def controller(self) -> int:
        try:
            controller = int(self.admin.cluster().get("controller_id", -1))
        except Exception:
            controller = -1
        return controller if controller >= 0 else self.rng.choice(self.cluster.broker_ids())

    def _leader(self) -> int:
        return self.leader_of(self.rng.randrange(PARTITIONS))

    def run_one(self, kind: str) -> None:
        started = time.time()
        if kind == "kill-leader":
            victim = self._leader()
            self.cluster.kill_broker(victim)
            time.sleep(self.rng.uniform(*FAULT_LENGTH_S))
            self.cluster.start_broker(victim)
        elif kind == "pause-leader":
            victim = self._leader()
            pid = self.cluster.broker_pid(victim)
            os.kill(pid, signal.SIGSTOP)
            try:
                time.sleep(self.rng.uniform(*FAULT_LENGTH_S))
            finally:
                os.kill(pid, signal.SIGCONT)
        elif kind == "rolling-restart":
            for broker in self.cluster.broker_ids():
                self.cluster.stop_broker(broker)
                self.cluster.start_broker(broker)
        self.windows.append(NemesisWindow(kind, started, time.time()))


def run(scenario: str, duration_s: float, seed: int, out: Path, state_dir: Path | None = None,
        client: str = "ads") -> dict:
    """One run of ``scenario`` with the workload of ``client``; writes ``out``/report.json and report.png and
    returns the report."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}")
    if client not in CLIENTS:
        raise ValueError(f"unknown client {client!r}; known: {', '.join(CLIENTS)}")
    if scenario in HOSTED_SCENARIOS and not (scenario == "mixed" and missing_requirements()):
        return hosted.run_on_hosts(scenario, duration_s, seed, out, client)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ads-chaos-") as tmp:
        cluster = LocalCluster(state_dir or Path(tmp))
        report = execute(cluster, scenario, duration_s, seed, None, out / "logs", client)
    return write_report(report, out)


def topic_config(scenario: str) -> dict[str, str]:
    return UNSAFE_TOPIC_CONFIG if scenario.endswith("-unsafe") else SAFE_TOPIC_CONFIG


def keep_logs(cluster_dir: Path, out_logs: Path | None) -> None:
    if out_logs is None:
        return
    out_logs.mkdir(parents=True, exist_ok=True)
    for log in cluster_dir.glob("*.log"):
        shutil.copy(log, out_logs / log.name)


def execute(cluster: LocalCluster, scenario: str, duration_s: float, seed: int, network,
            out_logs: Path | None = None, client: str = "ads") -> dict:
    """Bring the cluster up, run workload and nemesis, check; the cluster is down again on return."""
    rng = random.Random(seed)
    try:
        cluster.up(brokers=3, overrides=BROKER_OVERRIDES)
        admin = Admin({"bootstrap.servers": cluster.bootstrap_servers, "request.timeout.ms": 3000})
        admin.create_topic(TOPIC, PARTITIONS, 3, config=topic_config(scenario))
        nemesis = Nemesis(cluster, admin, rng)
        if network is not None:
            from ads_spark.chaos.network_nemesis import HostNemesis

            nemesis = HostNemesis(cluster, network, rng, nemesis)
        verdict = _run_workload(cluster, admin, scenario, duration_s, rng, nemesis, client)
        admin.close()
    finally:
        cluster.down()
        keep_logs(cluster.dir, out_logs)
    report = {"scenario": scenario, "client": client, "seed": seed, "duration_s": duration_s,
              "hosts": network is not None,
              "nemesis_windows": [[w.name, round(w.started_s - verdict["began"], 2),
                                   round(w.ended_s - verdict["began"], 2)] for w in verdict["windows"]],
              **verdict["verdict"]}
    report["_attempts"], report["_windows"] = verdict["attempts"], verdict["windows"]
    report["_lost_values"] = verdict["lost_values"]
    return report


def write_report(report: dict, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    attempts, windows = report.pop("_attempts", []), report.pop("_windows", [])
    lost_values = report.pop("_lost_values", set())
    (out / "report.json").write_text(json.dumps(report, indent=2, sort_keys=True))
    _plot(attempts, windows, out / "report.png", f"{report['scenario']}, seed {report['seed']}", lost_values)
    return report


def _next_fault(scenario: str, nemesis, rng: random.Random) -> None:
    from ads_spark.chaos import network_nemesis as nn

    if scenario.startswith("jepsen-2013"):
        return nemesis.jepsen_2013_cycle()
    if scenario == "last-replica-standing":
        return nemesis.last_replica_standing_cycle()
    time.sleep(rng.uniform(*FAULT_GAP_S))
    if scenario == "partition-random":
        return nemesis.run_one(rng.choice(nn.PARTITION_KINDS))
    if scenario == "mixed":
        kinds = nn.MIXED_KINDS if hasattr(nemesis, "network") else PROCESS_SCENARIOS
        return nemesis.run_one(rng.choice(kinds))
    nemesis.run_one(scenario)


def _new_workload(cluster: LocalCluster, client: str):
    if client == "kafka":
        from ads_spark.chaos.kafka_workload import KafkaWorkload

        return KafkaWorkload(cluster.kafka_client_config(), TOPIC, PARTITIONS, SENDS_IN_FLIGHT_MAX)
    return Workload(cluster.bootstrap_servers)


def _run_workload(cluster: LocalCluster, admin: Admin, scenario: str, duration_s: float, rng: random.Random,
                  nemesis, client: str = "ads"):
    workload = _new_workload(cluster, client)
    began = time.time()
    workload.start()
    while time.time() - began < duration_s:
        _next_fault(scenario, nemesis, rng)
    time.sleep(2)
    workload.stop()
    ended = workload.producing_stopped_s
    _, healed = wait_healed(admin)
    finals = final_reads(cluster.bootstrap_servers)
    batches = replica_batches(cluster)
    # librdkafka re-sends possibly stored batches under a bumped epoch (checker: resent_under_new_epoch);
    # ADS's own client never does, so its runs count every second copy as a duplicate.
    producer_at = producers_by_offset(batches) if client == "kafka" else None
    verdict = check(workload.attempts, finals, [workload.consumer_reads], batches, nemesis.windows, (began, ended),
                    producer_at)
    stored = {value for rows in finals.values() for _, value in rows}
    lost = {a.value for a in workload.attempts if a.outcome == OK and a.value not in stored}
    return {"verdict": {**verdict.to_json(), "healed": healed, "error_examples": workload.error_examples,
                        "produce_streams_opened": getattr(workload.producer, "streams_opened", 0),
                        "consumer_reads": len(workload.consumer_reads),
                        "produce_stream_threads_left": workload.produce_stream_threads_left},
            "attempts": workload.attempts, "lost_values": lost,
            "windows": nemesis.windows, "began": began}


def wait_healed(admin: Admin, topics=(TOPIC,), timeout_s: float = HEAL_WAIT_S,
                interval_s: float = 0.5) -> tuple[bool, list]:
    """Until every partition of ``topics`` has a leader and its full ISR (bounded): whether they all did, and
    [partition, leader, isr] as last seen."""
    deadline = time.monotonic() + timeout_s
    seen: list = []
    while True:
        try:
            partitions = [p for d in admin.describe_topics(list(topics)) for p in d.partitions]
            seen = [[p.partition, p.leader, sorted(p.isr)] for p in partitions]
            if all(p.leader >= 0 and set(p.isr) == set(p.replicas) for p in partitions):
                return True, seen
        except Exception:  # noqa: BLE001 - metadata not back yet
            pass
        if time.monotonic() >= deadline:
            return False, seen
        time.sleep(interval_s)


def final_reads(bootstrap: str, topic: str = TOPIC, partitions=range(PARTITIONS),
                config: dict | None = None) -> dict[int, list[tuple[int, bytes]]]:
    """Every stored record of ``partitions`` of ``topic``, log start to high watermark: [(offset, value)]."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "local.reads": "false", **(config or {})})
    try:
        out = {}
        for partition in partitions:
            tp = TopicPartition(topic, partition)
            start, high_watermark = consumer.get_watermark_offsets(tp)
            table = consumer.fetch_arrow(tp, start, high_watermark)
            out[partition] = list(zip(table.column("offset").to_pylist(), table.column("value").to_pylist()))
        return out
    finally:
        consumer.close()


def replica_batches(cluster: LocalCluster, client_config: dict | None = None,
                    address_of: Callable[[int], tuple[str, int]] | None = None,
                    topic: str = TOPIC) -> dict[int, dict[int, list]]:
    """Every replica's batches below the smallest HW of the partition's replicas (they must agree), asked
    with ``client_config`` (default: the open cluster's) at ``address_of(broker_id)`` (default: its
    registered port)."""
    connections = Connections(client_config or {"bootstrap.servers": cluster.bootstrap_servers})
    ports = {broker["id"]: broker["port"] for broker in cluster.state["brokers"]}
    address_of = address_of or (lambda broker_id: (cluster.broker_address(broker_id), ports[broker_id]))
    statuses: dict[int, dict[int, dict]] = {}
    try:
        for broker_id in ports:
            answer = connections.call_action(*address_of(broker_id), wire.ACTION_REPLICA_STATUS, {"topic": topic})
            for item in answer["partitions"]:
                statuses.setdefault(item["partition"], {})[broker_id] = item
    finally:
        connections.close()
    out = {}
    for partition, by_broker in statuses.items():
        common = min(s["high_watermark"] for s in by_broker.values())
        out[partition] = {b: [tuple(x) for x in s["batches"] if x[0] + x[1] <= common] for b, s in by_broker.items()}
    return out


def producers_by_offset(batches: dict[int, dict[int, list]]):
    """``checker.ProducerAt`` over ``replica_batches``' answer: (producer id, producer epoch) of the batch
    holding an offset, from the first replica that reports one (replicas agree below their common HW)."""
    spans = {partition: sorted(next(iter(by_broker.values()), [])) for partition, by_broker in batches.items()}
    starts = {partition: [batch[0] for batch in rows] for partition, rows in spans.items()}

    def producer_at(partition: int, offset: int):
        i = bisect.bisect_right(starts.get(partition, []), offset) - 1
        if i < 0:
            return None
        batch = spans[partition][i]
        if not batch[0] <= offset < batch[0] + batch[1] or len(batch) < 6:
            return None
        return batch[4], batch[5]
    return producer_at


def _plot(attempts, windows, path: Path, title: str, lost_values: set = frozenset()) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not attempts:
        return
    t0 = min(a.started_s for a in attempts)
    fig, ax = plt.subplots(figsize=(11, 4.5))
    for window in windows:
        ax.axvspan(window.started_s - t0, window.ended_s - t0, color="0.85", zorder=0)
        ax.text(window.started_s - t0, 0.02, window.name, fontsize=7, rotation=90, va="bottom", color="0.3",
                transform=ax.get_xaxis_transform())
    kinds = ((OK, "tab:blue", lambda a: a.outcome == OK and a.value not in lost_values),
             (UNKNOWN, "tab:orange", lambda a: a.outcome == UNKNOWN),
             (FAILED, "tab:red", lambda a: a.outcome == FAILED),
             ("ok, then lost", "black", lambda a: a.outcome == OK and a.value in lost_values))
    for label, colour, wanted in kinds:
        chosen = [a for a in attempts if wanted(a)]
        if chosen or label != "ok, then lost":
            ax.scatter([a.started_s - t0 for a in chosen], [(a.ended_s - a.started_s) * 1000 for a in chosen],
                       s=2, color=colour, label=f"{label} ({len(chosen)})")
    ax.set_yscale("log")
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("acks=all send latency (ms)")
    ax.set_title(title)
    ax.legend(loc="upper right", markerscale=4)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
