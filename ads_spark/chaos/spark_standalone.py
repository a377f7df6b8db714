"""A multi-host deployment run: ADS brokers next to a Spark standalone cluster, each host a network namespace.

Why: ADS is meant to run with a broker on every Spark worker host, executors reading their own
host's segment files (``ads_spark/local_reads.py``) and every other broker over the network. One
machine can only show that with hosts that are machines of their own to the processes on them:
``hosts.TestNetwork(hostnames=True)`` gives each namespace its own address and its own host name
(a UTS namespace), which is what the local read path compares.

Layout (``HOST_NAMES``): ZooKeeper on ``zk``; broker ``i`` and one Spark worker (1 core, 512m) on
``b<i>``; the Spark master and the driver on ``client``. ``run_deployment`` (the parent, in the
machine's own namespace) builds the hosts, runs ``spark_standalone_child`` on ``client`` and removes
every namespace, process and device when the child ends, fails or overruns. The child starts
everything (``StandaloneSpark`` here starts the Spark daemons with the pyspark wheel's
``spark-class``), runs the quickstart pipeline (``jobs/quickstart.py``) with one broker host cut off
by the firewall mid-job, and writes ``report.json``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from ads_spark.chaos.hosts import HostsUnavailableError, TestNetwork, missing_requirements, sweep_stale
from ads_spark.cluster import ZOOKEEPER_HOST, broker_host_name

BROKERS = 3
CLIENT_HOST = "client"
WORKER_HOSTS = [broker_host_name(b) for b in range(1, BROKERS + 1)]
HOST_NAMES = [ZOOKEEPER_HOST, *WORKER_HOSTS, CLIENT_HOST]
CHILD_MODULE = "ads_spark.chaos.spark_standalone_child"
MASTER_PORT, MASTER_UI_PORT, WORKER_UI_PORT = 7077, 8080, 8081
WORKER_CORES, WORKER_MEMORY, DAEMON_MEMORY = 1, "512m", "256m"
# The master drops a worker it has not heard from for this long (default 60); a worker heartbeats every
# quarter of its own setting, so both get it.
WORKER_TIMEOUT_S = 20
WORKERS_WAIT_S = 90.0
STOP_WAIT_S = 10.0
RUN_TIMEOUT_S_DEFAULT = 420.0


def spark_home() -> Path:
    import pyspark  # the wheel ships bin/spark-class and the jars

    return Path(pyspark.__file__).resolve().parent


def spark_missing() -> str | None:
    """Why a Spark standalone cluster cannot be started here, or None."""
    try:
        home = spark_home()
    except ImportError:
        return "pyspark is not installed"
    if not (home / "bin" / "spark-class").exists():
        return f"{home}/bin/spark-class is missing (the pyspark wheel ships it)"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "no Java (Spark needs Java 17; `make install` installs it as root)"
    if shutil.which("unshare") is None or shutil.which("hostname") is None:
        return "`unshare`/`hostname` missing (util-linux, hostname): test hosts need their own host names"
    return None


class StandaloneSpark:
    """A Spark master on ``master_host`` and one worker on each of ``worker_hosts``, logs in ``directory``."""

    def __init__(self, network: TestNetwork, directory: Path, master_host: str, worker_hosts: list[str]):
        self.network = network
        self.dir = Path(directory)
        self.master_host = master_host
        self.worker_hosts = list(worker_hosts)
        self.processes: dict[str, subprocess.Popen] = {}

    @property
    def master_url(self) -> str:
        return f"spark://{self.network.address(self.master_host)}:{MASTER_PORT}"

    def _env(self, host: str, extra: dict[str, str]) -> dict[str, str]:
        conf_dir = self.dir / "conf"  # empty: no spark-env.sh or defaults from anywhere else
        conf_dir.mkdir(parents=True, exist_ok=True)
        return {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_CONF_DIR": str(conf_dir),
                "SPARK_LOCAL_IP": self.network.address(host), "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
                "PYSPARK_PYTHON": sys.executable, "SPARK_NO_DAEMONIZE": "1", **extra}

    def _spawn(self, name: str, host: str, argv: list[str], extra_env: dict[str, str]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / f"{name}.log", "ab") as log:
            self.processes[name] = subprocess.Popen(
                self.network.exec_prefix(host) + [str(spark_home() / "bin" / "spark-class"), *argv],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                env=self._env(host, extra_env), cwd=self.dir)

    def start(self, worker_env: dict[str, str] | None = None) -> None:
        """Start the master and the workers (returns at once; ``wait_for_workers`` waits)."""
        master_address = self.network.address(self.master_host)
        self._spawn("spark-master", self.master_host,
                    ["org.apache.spark.deploy.master.Master", "--host", master_address, "--port", str(MASTER_PORT),
                     "--webui-port", str(MASTER_UI_PORT)],
                    {"SPARK_MASTER_OPTS": f"-Dspark.worker.timeout={WORKER_TIMEOUT_S}"})
        for host in self.worker_hosts:
            work_dir = self.dir / f"work-{host}"
            self._spawn(f"spark-worker-{host}", host,
                        ["org.apache.spark.deploy.worker.Worker", "--host", self.network.address(host),
                         "--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY, "--work-dir", str(work_dir),
                         "--webui-port", str(WORKER_UI_PORT), self.master_url],
                        {"SPARK_WORKER_OPTS": f"-Dspark.worker.timeout={WORKER_TIMEOUT_S}", **(worker_env or {})})

    def alive_workers(self) -> list[str]:
        """The hosts (addresses) of the workers the master reports ALIVE (its web UI's JSON)."""
        url = f"http://{self.network.address(self.master_host)}:{MASTER_UI_PORT}/json/"
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                state = json.loads(answer.read())
        except (OSError, ValueError):
            return []
        return [w.get("host", "") for w in state.get("workers", []) if w.get("state") == "ALIVE"]

    def wait_for_workers(self, timeout_s: float = WORKERS_WAIT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if len(self.alive_workers()) >= len(self.worker_hosts):
                return
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise RuntimeError(f"{name} exited at start-up; see {self.dir / (name + '.log')}")
            time.sleep(0.5)
        raise TimeoutError(f"{len(self.worker_hosts)} Spark workers not registered within {timeout_s}s "
                           f"(alive: {self.alive_workers()}); logs in {self.dir}")

    def stop(self) -> None:
        """SIGTERM each daemon's process group (the workers take their executors), SIGKILL after a bound."""
        for process in self.processes.values():
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + STOP_WAIT_S
        for process in self.processes.values():
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait(STOP_WAIT_S)
        self.processes.clear()


def run_deployment(out: Path, security: str = "tls", records: int = 6000,
                   timeout_s: float = RUN_TIMEOUT_S_DEFAULT, own_hostnames: bool = True) -> dict:
    """Build the hosts, run the child on ``client``, remove everything; the child's report (plus ``wall_s``).

    ``own_hostnames=False`` is the negative control: every host keeps the machine's name, so the local
    read path takes every broker for a local one (the filesystem is shared) and the report shows
    misplaced fetches and no remote ones.

    Raises HostsUnavailableError when hosts or Spark cannot be had here, RuntimeError (with the log's
    tail) when the child fails, subprocess.TimeoutExpired when it overruns ``timeout_s``."""
    reason = missing_requirements() or spark_missing()
    if reason:
        raise HostsUnavailableError(reason)
    sweep_stale()
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    network = TestNetwork(HOST_NAMES, hostnames=own_hostnames)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ads-multihost-") as state_dir, network:
        argv = network.exec_prefix(CLIENT_HOST) + [
            sys.executable, "-m", CHILD_MODULE, "--state-dir", state_dir, "--out", str(out),
            "--run-id", network.run_id, "--security", security, "--records", str(records),
            "--hostnames", "own" if own_hostnames else "shared"]
        with open(out / "run.log", "wb") as log:
            child = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   timeout=timeout_s, cwd=str(Path(__file__).resolve().parents[2]))
        _keep_logs(Path(state_dir), out / "logs")
        if child.returncode != 0:
            tail = (out / "run.log").read_text(errors="replace")[-4000:]
            raise RuntimeError(f"multi-host run failed (exit {child.returncode}); logs in {out}:\n{tail}")
    report = json.loads((out / "report.json").read_text())
    report["wall_s"] = round(time.monotonic() - started, 1)
    return report


def _keep_logs(state_dir: Path, target: Path) -> None:
    """The brokers', ZooKeeper's and Spark's logs (executors': their stderr), copied out before the state dir goes."""
    target.mkdir(parents=True, exist_ok=True)
    for log in [*state_dir.rglob("*.log"), *state_dir.glob("spark/work-*/*/*/stderr")]:
        if log.is_file():
            name = "-".join(log.relative_to(state_dir).parts[-3:]) if log.name == "stderr" else log.parent.name
            shutil.copy(log, target / (f"{name}-{log.name}" if log.name != "stderr" else name))
