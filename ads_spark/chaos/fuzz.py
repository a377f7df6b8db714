"""The fuzz run of issue #20: bad input must never crash, corrupt, blind or block a broker.

A cluster holds a ``keep`` topic of acknowledged records (acks=all, min.insync.replicas=2). Then
malformed inputs go to every broker, category by category (``fuzz_inputs``: every DoAction name
with bad bodies, tickets, descriptors, fetch sessions, produce streams with bad metadata and bad
Arrow data, typed produce batches and typed reads aimed at a typed topic whose acknowledged rows
must read back after each of them (``fuzz_typed``), forged control-plane calls, one amplified fetch,
many connections and half-open streams; create_partitions counts a broker must refuse on the keep
topic, and one valid grow of keep that the brokers must then serve, ``fuzz_grow``), each call bounded
by a deadline. After each category the run looks for what a refused input must not do: a dead
broker, a changed znode or file (``fuzz_state``), a broker cut off from ZooKeeper or deaf to the
real controller. At the end it checks that ``ads verify-replicas`` passes, that every acknowledged
record (and typed row) reads back, that a new topic can be created, produced to and read, that a
preferred leader election works, that RSS and thread counts came back, and that no answer carried
Python exception text. ``report.json`` in ``--out`` holds all of it; the exit is non-zero if any check failed.

With ``heal`` (the default), a broker that crashed, lost its ZooKeeper session for good, stopped
answering or stopped obeying the controller is recorded and then restarted, so that the categories
after it still test three brokers (and a broker that cannot restart is itself a finding).

    python -m ads_spark.chaos.fuzz --brokers 3 --seed 1 --duration-s 600 --out fuzz-out
    python -m ads_spark.chaos.fuzz --cluster-dir state --seed 1 --out fuzz-out   # a running `ads cluster`

Only 127.0.0.1 is ever contacted. With ``--cluster-dir`` the run plants a file in ``<dir>/../x``
(where the path-traversal topic name would write) and removes it at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import pyarrow.flight as flight

from ads_spark.broker.allocator import ARENAS_MAX, TRIM_THRESHOLD_BYTES
from ads_spark.broker.zk.model import CONTROLLER_EPOCH_PATH, CONTROLLER_PATH, broker_path
from ads_spark.chaos import fuzz_grow as grow
from ads_spark.chaos import fuzz_inputs as inputs
from ads_spark.chaos.runner import keep_logs, wait_healed
from ads_spark.chaos import fuzz_special as special
from ads_spark.chaos import fuzz_streams as streams
from ads_spark.chaos import fuzz_typed as typed
from ads_spark.chaos.fuzz_checks import end_checks, run_checks
from ads_spark.chaos.fuzz_report import Answer, CategoryStats, render_table, totals
from ads_spark.chaos.fuzz_send import Targets, send
from ads_spark.chaos.fuzz_state import (
    PROBE_PREFIX, broker_view, connect_zookeeper, layout_of, plant_victim, proc_status, remove_victim, snapshot,
)
from ads_spark.chaos.fuzz_state import diff as state_diff
from ads_spark.client import Admin, Producer
from ads_spark.cluster import LocalCluster, pid_alive, unwind_on_sigterm
from ads_spark.config import BROKER_KEYS
from ads_spark.errors import TopicAlreadyExistsError

READ_ACTIONS = ("metadata", "list_offsets", "locate", "replica_status", "init_producer_id")
ADMIN_ACTIONS = ("describe_configs", "create_topics", "delete_topics", "alter_configs", "elect_leaders",
                 "alter_partition_reassignments", "create_partitions", "controlled_shutdown", "register_schema",
                 "describe_schema")
CONTROL_ACTIONS = ("leader_and_isr", "update_metadata", "stop_replica", "replica_log_ends")
# Short enough for the checks of one category to see what its inputs did (a phantom partition reaches
# the checkpoint, a fetch long-poll ends), and a stream bound below the half-open streams the run opens
# so that the bound is exercised; applied only where the brokers know the key.
BROKER_OVERRIDES = {"replica.high.watermark.checkpoint.interval.ms": "200", "fetch.wait.max.ms.max": "2000",
                    "replica.lag.time.max.ms": "10000", "flight.streams.max": "200"}
HANGS_BEFORE_SKIP = 2  # hangs in a row before the rest of a category skips that broker
DEATH_GRACE_S = 0.5  # a call that failed right as its broker died: wait this long to see it gone
SETTLE_S = 0.5  # after a category, for the controller's reactions and the 200 ms checkpoints to land
CUT_OFF_GRACE_S = 8.0  # past the clusters' 6 s ZooKeeper session timeout: a reconnecting broker is back by then
HEAL_TIMEOUT_S = 45.0
HEAL_STOP_TIMEOUT_S = 10.0
HEAL_SETTLE_S = 20.0
LOG_TAIL_LINES = 12
# A broker keeps up to ARENAS_MAX x TRIM_THRESHOLD_BYTES of freed memory by design (broker/allocator.py, 128 MiB):
# RSS may grow that much from buffers already freed. Beyond it and a margin, something is being held.
RSS_GROWTH_MAX_MIB = ARENAS_MAX * TRIM_THRESHOLD_BYTES / (1 << 20) + 64


@dataclass
class FuzzSettings:
    """The run's knobs; the defaults are the documented long run, the test passes smaller ones."""

    brokers: int = 3
    seed: int = 1
    duration_s: float = 0.0  # repeat rounds of every category until this much time has passed (at least one)
    per_group: int | None = None  # variants per (target, kind) group; None: all of them
    call_timeout_s: float = 5.0
    keep_records: int = 3000
    half_open_streams: int = 300  # per broker
    connections: int = 100  # per broker
    hold_s: float = 2.0  # how long the half-open streams stay open
    threads_settle_s: float = 3.0  # after they are closed, before the thread count is read again
    rss_growth_max_mib: float = RSS_GROWTH_MAX_MIB
    threads_slack: int = 30
    fetch_answer_bytes_max: int = 64 << 20  # Kafka's fetch.max.bytes default is 50 MiB
    budget_s: float | None = None  # no category starts after this (the test's bound on a broken cluster)
    heal: bool = True

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def broker_overrides() -> list[str]:
    return [f"{key}={value}" for key, value in BROKER_OVERRIDES.items() if key in BROKER_KEYS]


class Fuzzer:
    def __init__(self, cluster: LocalCluster, settings: FuzzSettings, say: Callable[[str], None] = print):
        self.cluster, self.settings, self.say = cluster, settings, say
        self.layout = layout_of(cluster)
        self.zk = connect_zookeeper(self.layout)  # first: it raises when ZooKeeper does not answer
        self.admin = Admin({"bootstrap.servers": cluster.bootstrap_servers, "request.timeout.ms": 5000,
                            "default.api.timeout.ms": 15000})
        self.targets = Targets()
        self.stats: dict[str, CategoryStats] = {}
        self.acked: dict[tuple[int, int], bytes] = {}
        self.typed_acked: dict[tuple[int, int], tuple] = {}  # the typed topic's rows (fuzz_typed.py)
        self.typed_losses: list[dict] = []  # typed categories after which those rows did not read back
        self.crashes, self.zk_losses, self.unresponsive, self.heals, self.probes = [], [], [], [], []
        self.state_changes, self.partition_state_changes, self.not_run = [], [], []
        self.exit_status: dict[int, str] = {}
        self.down: set[int] = set()  # brokers that could not be restarted: no longer sent to
        self.baseline: dict = {}
        self.rss_before: dict[int, dict | None] = {}  # /proc status after setup, and after the last category
        self.rss_after: dict[int, dict | None] = {}
        self.pids_before: dict[int, int | None] = {}  # the same process before and after, or RSS is not compared
        self.pids_after: dict[int, int | None] = {}
        self.planted: Path | None = None
        self.planted_dirs: list[Path] = []
        # Probe topics are named per run: a second run against the same --cluster-dir must not find them taken.
        self.probe_prefix = f"{PROBE_PREFIX}{uuid.uuid4().hex[:6]}-"
        self.action_names: list[str] = []
        self.keep_partitions = 0  # keep's partition count as the run made it (fuzz_grow.py); the state diff's oracle
        self.grows: list[dict] = []
        self.started_s = time.monotonic()
        self._probes_made = 0

    # ---- the run -----------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        try:
            self._setup()
            self._run_rounds()
            checks = end_checks(self)
        finally:
            self.admin.close()
            self.zk.stop()
            self.zk.close()
        return self._report(checks)

    def _setup(self) -> None:
        brokers = len(self.layout.brokers)
        self._create_or_reuse(inputs.KEEP_TOPIC, min(3, brokers), {"min.insync.replicas": str(min(2, brokers))})
        self._create_or_reuse(inputs.SINK_TOPIC, min(3, brokers), {})
        self._produce_keep()
        typed.setup_typed_topic(self)
        self.keep_partitions = grow.zk_partition_count(self) or 0
        self.planted, self.planted_dirs = plant_victim(self.layout)
        self.action_names = self._list_actions()
        self.refresh_targets()
        time.sleep(SETTLE_S)
        self.pids_before = {b: self.cluster.broker_pid(b) for b in self.layout.brokers}
        self.rss_before = {b: proc_status(pid) for b, pid in self.pids_before.items()}
        self.baseline = snapshot(self.layout, self.zk)
        self.say(f"fuzz: {len(self.acked)} acknowledged records in '{inputs.KEEP_TOPIC}', {len(self.typed_acked)} "
                 f"rows in '{typed.TYPED_TOPIC}'; "
                 f"{len(self.action_names)} actions: {', '.join(self.action_names)}")

    def _create_or_reuse(self, topic: str, replication_factor: int, config: dict[str, str]) -> None:
        """A topic of 3 partitions; one left by an earlier run against the same cluster is used as it is."""
        try:
            self.admin.create_topic(topic, 3, replication_factor, config=config)
        except TopicAlreadyExistsError:
            pass

    def _produce_keep(self) -> None:
        producer = Producer({"bootstrap.servers": self.cluster.bootstrap_servers, "acks": "all", "linger.ms": 5})
        try:
            futures = []
            for i in range(self.settings.keep_records):
                value = f"keep-{self.settings.seed}-{i:07d}-".encode().ljust(64, b".")
                futures.append((value, producer.produce(inputs.KEEP_TOPIC, value=value, partition=i % 3)))
            producer.flush(60)
            for value, future in futures:
                if future.exception(timeout=30) is None:
                    metadata = future.result()
                    self.acked[(metadata.partition, metadata.offset)] = value
        finally:
            producer.close(10)

    def _list_actions(self) -> list[str]:
        port = next(iter(self.layout.brokers.values())).port
        client = flight.FlightClient(f"grpc+tcp://127.0.0.1:{port}")
        try:
            return sorted(action.type for action in client.list_actions(flight.FlightCallOptions(timeout=10)))
        finally:
            client.close()

    def refresh_targets(self) -> None:
        """The controller and, per broker, a partition of keep and of the sink that it leads."""
        led: dict[str, dict[int, int]] = {}
        for topic in (inputs.KEEP_TOPIC, inputs.SINK_TOPIC, typed.TYPED_TOPIC):
            try:
                for partition in self.admin.describe_topics([topic])[0].partitions:
                    led.setdefault(topic, {}).setdefault(partition.leader, partition.partition)
            except Exception:  # noqa: BLE001 - a cluster without metadata: inputs go to partition 0
                pass
        controller_id, epoch = -1, -1
        try:
            epoch = int(self.zk.get(self.layout.chroot + CONTROLLER_EPOCH_PATH)[0])
            controller_id = json.loads(self.zk.get(self.layout.chroot + CONTROLLER_PATH)[0])["broker_id"]
        except Exception:  # noqa: BLE001 - no controller right now: the placeholders say -1
            pass
        self.targets = Targets(controller_id, epoch, led)

    def _plan(self, rng: random.Random) -> list[tuple[str, Any, bool]]:
        """(category, inputs or a special runner, probe the controller afterwards), in running order:
        reads first, then the inputs that crashed or cut off brokers before (issue #20), control last."""
        per_group = self.settings.per_group
        actions = inputs.action_inputs(self.action_names, rng, per_group)
        named = set(READ_ACTIONS + ADMIN_ACTIONS + CONTROL_ACTIONS)
        plan = [(f"action:{n}", actions[f"action:{n}"], False) for n in READ_ACTIONS if n in self.action_names]
        plan += [("tickets", inputs.ticket_inputs(rng, per_group), False),
                 ("fetch_session", inputs.session_inputs(rng, per_group), False),
                 ("typed_tickets", typed.typed_category(typed.typed_ticket_inputs(rng, per_group)), False),
                 ("typed_fetch_session", typed.typed_category(typed.typed_session_inputs(rng, per_group)), False),
                 ("descriptors", streams.descriptor_inputs(), False),
                 ("fetch_amplification", special.fetch_amplification, False),
                 ("connections", special.connections, False),
                 ("produce_metadata", streams.produce_meta_inputs(rng, per_group), False),
                 ("produce_arrow", streams.produce_arrow_inputs(rng), False),
                 ("produce_raw", streams.produce_raw_inputs(rng), False),
                 ("typed_produce", typed.typed_category(typed.typed_produce_inputs(rng, per_group)), False)]
        plan += [(f"action:{n}", actions[f"action:{n}"], False) for n in ADMIN_ACTIONS if n in self.action_names]
        if "create_partitions" in self.action_names:  # after its malformed bodies: a real topic grows here
            plan.append(("partition_increase", grow.partition_increase, False))
        plan += [(f"action:{n}", actions[f"action:{n}"], True) for n in self.action_names if n not in named]
        plan += [(f"action:{n}", actions[f"action:{n}"], True) for n in CONTROL_ACTIONS if n in self.action_names]
        plan.append(("forged_control", inputs.forged_inputs(), True))
        return plan

    def _run_rounds(self) -> None:
        round_number = 0
        while True:
            rng = random.Random(f"{self.settings.seed}:{round_number}")
            for name, work, probe in self._plan(rng):
                if self.settings.budget_s is not None and time.monotonic() - self.started_s > self.settings.budget_s:
                    self.not_run.append(name)
                    continue
                self._run_category(name, work, probe)
            round_number += 1
            if time.monotonic() - self.started_s >= self.settings.duration_s or self.not_run:
                return

    def _run_category(self, name: str, work, probe: bool) -> None:
        stats = self.stats.setdefault(name, CategoryStats(name))
        began = time.monotonic()
        if callable(work):
            work(self, stats)
        else:
            stats.inputs += len(work)
            self.send_all(stats, work)
        stats.extra["elapsed_s"] = round(stats.extra.get("elapsed_s", 0) + time.monotonic() - began, 1)
        self._after_category(name, probe)
        counts = stats.to_json()
        self.say(f"fuzz: {name}: {counts['inputs']} inputs, {counts['typed']} typed, {counts['untyped']} untyped, "
                 f"{counts['success']} accepted, {counts['hang']} hangs, {counts['exception_answers']} with "
                 f"exception text ({time.monotonic() - began:.1f}s)")

    # ---- sending ------------------------------------------------------------------------

    def live_brokers(self) -> list[int]:
        return [b for b in self.layout.brokers if b not in self.down]

    def send_all(self, stats: CategoryStats, chosen: list[inputs.FuzzInput]) -> None:
        """Every input to every live broker, one thread per broker, inputs in order."""
        lock = threading.Lock()
        threads = [threading.Thread(target=self._send_to_broker, args=(b, chosen, stats, lock), daemon=True,
                                    name=f"fuzz-broker-{b}") for b in self.live_brokers()]
        for thread in threads:
            thread.start()
        per_input_s = max((i.timeout_s or self.settings.call_timeout_s) for i in chosen) if chosen else 0
        deadline = time.monotonic() + len(chosen) * per_input_s + 60
        for thread in threads:  # each call has its own deadline; this bound is for a bug in the sender
            thread.join(max(0.0, deadline - time.monotonic()))

    def _send_to_broker(self, broker_id: int, chosen, stats: CategoryStats, lock: threading.Lock) -> None:
        port = self.layout.brokers[broker_id].port
        client = flight.FlightClient(f"grpc+tcp://127.0.0.1:{port}")
        hangs_in_a_row, skipping = 0, None
        try:
            for inp in chosen:
                if skipping is None and not self.alive(broker_id):
                    skipping = "not sent: the broker is dead"
                if skipping is None and hangs_in_a_row >= HANGS_BEFORE_SKIP:
                    skipping = f"not sent: the broker hung {hangs_in_a_row} times in a row"
                if skipping is not None:
                    answer = Answer("skipped", texts=(skipping,))
                else:
                    answer = send(client, inp, broker_id, port, self.targets, self.settings.call_timeout_s,
                                  lambda: self.alive(broker_id, DEATH_GRACE_S))
                    hangs_in_a_row = hangs_in_a_row + 1 if answer.outcome == "hang" else 0
                with lock:
                    stats.record(inp.kind, inp.label, broker_id, answer)
        finally:
            client.close()

    def alive(self, broker_id: int, grace_s: float = 0.0) -> bool:
        """Whether the broker's process lives (for ``grace_s`` more); notes how it ended if it is our child."""
        deadline = time.monotonic() + grace_s
        while True:
            pid = self.cluster.broker_pid(broker_id)
            living = pid is not None and self._pid_lives(broker_id, pid)
            if not living or time.monotonic() >= deadline:
                return living
            time.sleep(0.05)

    def _pid_lives(self, broker_id: int, pid: int) -> bool:
        try:
            waited, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # not our child (an external cluster), or already reaped
            return pid_alive(pid)
        if waited == 0:
            return True
        self.exit_status[broker_id] = (f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
                                       if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}")
        return False

    # ---- after each category ---------------------------------------------------------------

    def _after_category(self, name: str, probe: bool) -> None:
        self.stats[name].extra["rss_kib_after"] = {
            str(b): (proc_status(self.cluster.broker_pid(b)) or {}).get("rss_kib") for b in self.live_brokers()}
        dead = [b for b in self.live_brokers() if not self.alive(b)]
        for broker_id in dead:
            self.crashes.append({"category": name, "broker": broker_id, "how": self.exit_status.get(broker_id, "gone"),
                                 "log_tail": self.log_tail(broker_id)})
        time.sleep(SETTLE_S)
        after = snapshot(self.layout, self.zk)
        changes, moved = state_diff(self.baseline, after, {inputs.KEEP_TOPIC: self.keep_partitions})
        self.state_changes += [{"category": name, "change": change} for change in changes]
        self.partition_state_changes += [{"category": name, "change": change} for change in moved]
        cut_off = self._cut_off([b for b in self.live_brokers() if b not in dead], after["views"])
        self.zk_losses += [{"category": name, "broker": b} for b in cut_off]
        silent = [b for b in self.live_brokers()
                  if b not in dead and after["views"].get(str(b), "").startswith("no answer")]
        self.unresponsive += [{"category": name, "broker": b} for b in silent]
        deaf = []
        if probe:
            result = special.probe_controller(self, f"{self.probe_prefix}{self._next_probe()}")
            self.probes.append({"category": name, **result})
            deaf = result["not_obeying"]
        to_heal = sorted(set(dead) | set(cut_off) | set(silent) | set(deaf))
        if to_heal and self.settings.heal:
            self._heal(name, to_heal)
            self._wait_in_sync()
            after = snapshot(self.layout, self.zk)
        self.baseline = after
        self.refresh_targets()

    def _next_probe(self) -> int:
        self._probes_made += 1
        return self._probes_made

    def _cut_off(self, candidates: list[int], views: dict[str, str]) -> list[int]:
        """Live brokers cut off from ZooKeeper: unregistered, or saying so themselves (BROKER_NOT_AVAILABLE), and
        still so after a grace. A broker whose kazoo thread died keeps its registration until the session
        expires (zookeeper.session.timeout.ms), so its own answer is the first sign."""
        suspects = [b for b in candidates
                    if not self._registered(b) or views.get(str(b), "").startswith("error BROKER_NOT_AVAILABLE")]
        deadline = time.monotonic() + CUT_OFF_GRACE_S
        while suspects and time.monotonic() < deadline:
            time.sleep(0.5)
            suspects = [b for b in suspects if not self._registered(b)
                        or broker_view(self.layout.brokers[b].port).startswith("error BROKER_NOT_AVAILABLE")]
        return suspects

    def _registered(self, broker_id: int) -> bool:
        try:
            return self.zk.exists(self.layout.chroot + broker_path(broker_id)) is not None
        except Exception:  # noqa: BLE001 - our own session trouble is not the broker's
            return True

    def _heal(self, category: str, broker_ids: list[int]) -> None:
        """Restart each broker in turn: the dead ones at once, the others after a controlled stop (SIGKILL if
        that overruns), so that a heal does not itself take the keep topic's replicas out together."""
        for broker_id in broker_ids:
            was_alive = self.alive(broker_id)
            before = self._registration(broker_id)
            if was_alive:
                self.cluster.stop_broker(broker_id, HEAL_STOP_TIMEOUT_S)
            self.cluster.start_broker(broker_id, wait=False)
            error = self._wait_registered_anew(broker_id, before)
            self.heals.append({"category": category, "broker": broker_id, "was_alive": was_alive, "ok": error is None,
                               **({"error": error, "log_tail": self.log_tail(broker_id)} if error else {})})
            if error:  # a broker that cannot restart is a finding, not the end of the run
                self.down.add(broker_id)

    def _registration(self, broker_id: int) -> bytes | None:
        try:
            return self.zk.get(self.layout.chroot + broker_path(broker_id))[0]
        except Exception:  # noqa: BLE001 - not registered
            return None

    def _wait_registered_anew(self, broker_id: int, before: bytes | None) -> str | None:
        """Until the restarted broker registers with a new broker epoch (not just an old registration that the
        cluster still lists), alive; None, or why not."""
        deadline = time.monotonic() + HEAL_TIMEOUT_S
        while time.monotonic() < deadline:
            if not self.alive(broker_id):
                return f"exited at start-up ({self.exit_status.get(broker_id, 'gone')})"
            now = self._registration(broker_id)
            if now is not None and now != before:
                return None
            time.sleep(0.25)
        return f"not registered anew within {HEAL_TIMEOUT_S}s"

    def _wait_in_sync(self) -> None:
        """After a heal, until keep's and the sink's replicas are back in sync (bounded): what settles after the
        new baseline would be blamed on the next category."""
        topics = (inputs.KEEP_TOPIC, inputs.SINK_TOPIC, typed.TYPED_TOPIC)
        if wait_healed(self.admin, topics, HEAL_SETTLE_S, 0.25)[0]:
            time.sleep(SETTLE_S)

    def log_tail(self, broker_id: int, lines: int = LOG_TAIL_LINES) -> list[str]:
        try:
            text = (self.cluster.dir / f"broker-{broker_id}.log").read_text(errors="replace")
        except OSError:
            return []
        return [line[:300] for line in text.splitlines()[-lines:]]

    # ---- the report ---------------------------------------------------------------------------

    def _report(self, checks: dict[str, dict]) -> dict[str, Any]:
        categories = {name: stats.to_json() for name, stats in self.stats.items()}
        report = {"seed": self.settings.seed, "settings": self.settings.to_json(),
                  "elapsed_s": round(time.monotonic() - self.started_s, 1),
                  "acknowledged_records": len(self.acked), "typed_acknowledged_rows": len(self.typed_acked),
                  "typed_losses": self.typed_losses, "actions": self.action_names,
                  "categories": categories, "totals": totals(categories), "crashes": self.crashes,
                  "zookeeper_sessions_lost": self.zk_losses, "unresponsive": self.unresponsive, "heals": self.heals,
                  "controller_probes": self.probes, "state_changes": self.state_changes,
                  "partition_state_changes": self.partition_state_changes, "not_run": self.not_run,
                  "partition_increases": self.grows}
        report.update(run_checks(self, report, checks))
        return report


def run(settings: FuzzSettings, out: Path, cluster_dir: Path | None = None,
        say: Callable[[str], None] = print) -> dict[str, Any]:
    """One fuzz run against ``cluster_dir`` (an ``ads cluster`` state dir) or a cluster of its own on
    127.0.0.1, stopped at the end even on failure; writes ``out``/report.json and returns the report."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ads-fuzz-") as tmp:
        own = cluster_dir is None
        cluster = LocalCluster(Path(tmp) / "cluster" if own else cluster_dir)
        fuzzer = None
        try:
            if own:
                cluster.up(brokers=settings.brokers, overrides=broker_overrides())
            fuzzer = Fuzzer(cluster, settings, say)
            report = fuzzer.run()
        finally:
            if own:
                cluster.down()
                keep_logs(cluster.dir, out / "logs")
            if fuzzer is not None and fuzzer.planted is not None:
                remove_victim(fuzzer.planted, fuzzer.planted_dirs)
    (out / "report.json").write_text(json.dumps(report, indent=2, sort_keys=True, default=str))
    say(render_table(report))
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ads_spark.chaos.fuzz", description=__doc__.split("\n\n")[0])
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--cluster-dir", type=Path, default=None, help="state dir of a running `ads cluster up`")
    target.add_argument("--brokers", type=int, default=3, help="start a cluster of this many brokers (default 3)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--duration-s", type=float, default=0.0, help="repeat rounds of all categories this long")
    parser.add_argument("--per-group", type=int, default=None,
                        help="variants per (target, kind) group (default: all of them)")
    parser.add_argument("--out", type=Path, default=Path("fuzz-out"))
    args = parser.parse_args(argv)
    unwind_on_sigterm()
    settings = FuzzSettings(brokers=args.brokers, seed=args.seed, duration_s=args.duration_s, per_group=args.per_group)
    report = run(settings, args.out, args.cluster_dir)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
