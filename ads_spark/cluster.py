"""A local cluster: an embedded ZooKeeper and N broker processes on 127.0.0.1.

Used by ``ads cluster``, the quickstart job and the integration tests, so all
three exercise the same real processes. Every process runs in its own process
group with a pid file in the state dir; ``down`` (and ``kill``) act only on
those pids, so nothing else on the machine is touched and nothing is left
behind. Ports are chosen at run time and kept in ``cluster.json`` so a restart
comes back on the same addresses.

With a ``network`` (ads_spark.chaos.hosts.TestNetwork) each process runs on a
test host of its own (host ``zk`` and ``b<id>``), listening on that host's
address; the caller must then itself run on a host of that network.

``security``: ``"tls"`` (what ``ads cluster up`` and the quickstart run) gives every listener mutual
TLS, the ACL authorizer and ZooKeeper over TLS with ACLs, with a CA and certificates in the state dir
(``ads_spark.cluster_security``) and ``client.properties`` for clients; ``"none"`` is the open cluster
(the Python default, which the integration fixtures not about security use). The mode is chosen when
the state dir is created and kept in ``cluster.json``.

Every broker also serves Kafka's protocol (issue #25, ads_spark/kafka/) on a port of its own, kept in
``cluster.json`` like the Flight ports, with the client listener's security protocol: PLAINTEXT on an
open cluster, SSL with client certificates on a secured one (or SASL_SSL when the state dir was made
with ``kafka_security_protocol="SASL_SSL"``). ``kafka_bootstrap_servers`` and ``kafka_client_config``
are what Kafka's clients (kcat, confluent-kafka) take.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ads_spark.cluster_security import ADMIN_NAME, ClusterSecurity, check_security_mode
from ads_spark.errors import InvalidRequestError, RequestTimedOutError

STATE_FILE = "cluster.json"
KAFKA_PORT_PURPOSE = "kafka"
KAFKA_ADMIN_PASSWORD_FILE = "kafka-admin.password"
KAFKA_PROTOCOLS = {"none": ("PLAINTEXT", "SASL_PLAINTEXT"), "tls": ("SSL", "SASL_SSL")}
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


# A cluster keeps each broker's ports across restarts (cluster.json). They are chosen below the kernel's
# ephemeral range (net.ipv4.ip_local_port_range): a port in that range, free while its broker is down, can be
# taken by the local end of any outgoing connection or by any port-0 listener, and the broker then cannot
# start again (seen in parallel test runs once every broker also had a Kafka port and clients).
FIXED_PORTS_LOW = 10000
FIXED_PORT_TRIES = 64


def free_port() -> int:
    """A port free now on 127.0.0.1, below the ephemeral range when there is room; else any free port.

    Ports are handed out from a cursor that walks the range from a point set by this process's id, so one
    process never hands out a port twice (random picks did: a cluster's ports are all chosen before any
    broker binds, and two brokers of one run were given the same port) and processes running side by side
    start far apart."""
    global _port_cursor
    high = _ephemeral_low() - 1
    if high > FIXED_PORTS_LOW:
        span = high - FIXED_PORTS_LOW + 1
        with _port_lock:
            if _port_cursor is None:
                _port_cursor = (os.getpid() * 7919) % span
            for _ in range(FIXED_PORT_TRIES):
                port = FIXED_PORTS_LOW + _port_cursor
                _port_cursor = (_port_cursor + 1) % span
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                    try:
                        sock.bind(("127.0.0.1", port))
                    except OSError:
                        continue
                    return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


_port_cursor: int | None = None
_port_lock = threading.Lock()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours counts as dead
        waited, _ = os.waitpid(pid, os.WNOHANG)
        return waited == 0
    except ChildProcessError:
        return True


def unwind_on_sigterm() -> None:
    """Make SIGTERM unwind like Ctrl-C (SystemExit 143), so a ``finally: cluster.down()`` runs: the
    brokers and ZooKeeper run in sessions of their own and would outlive a script killed outright.

    Call it again after starting clients: something below them (gRPC/Flight, seen in
    ``benchmarks.compare``) can replace the C-level action while Python's record stays unchanged.
    """
    signal.signal(signal.SIGTERM, _exit_on_first_sigterm)


def _exit_on_first_sigterm(signum, _frame) -> None:
    # A second signal must not cut the teardown the first one started short.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(128 + signum)


ZOOKEEPER_HOST, HOSTED_ZOOKEEPER_PORT, HOSTED_BROKER_PORT = "zk", 2181, 9092


def _answers_ruok(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1) as sock:
            sock.sendall(b"ruok")
            return sock.recv(4) == b"imok"
    except OSError:
        return False


def broker_host_name(broker_id: int) -> str:
    return f"b{broker_id}"


class LocalCluster:
    def __init__(self, state_dir: Path, network=None):
        self.dir = Path(state_dir).resolve()
        self.network = network
        self.state: dict[str, Any] = {}
        state_file = self.dir / STATE_FILE
        if state_file.exists():
            self.state = json.loads(state_file.read_text())

    # ---- state -------------------------------------------------------------------

    def _save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(self.state, indent=2, sort_keys=True))
        tmp.rename(self.dir / STATE_FILE)

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{self.broker_address(b['id'])}:{b['port']}" for b in self.state.get("brokers", []))

    def broker_address(self, broker_id: int) -> str:
        return self.network.address(broker_host_name(broker_id)) if self.network else "127.0.0.1"

    @property
    def zookeeper_connect(self) -> str:
        return self.state["zookeeper"]

    @property
    def security(self) -> str:
        """``"tls"`` or ``"none"`` (state dirs from before security was added are open clusters)."""
        return self.state.get("security", "none")

    @property
    def secured(self) -> bool:
        return self.security != "none"

    @property
    def client_properties_path(self) -> Path | None:
        """The client config file of a secured cluster (None for an open one)."""
        return ClusterSecurity(self.dir).client_properties_path if self.secured else None

    def client_config(self, **extra) -> dict[str, Any]:
        """A client config for this cluster: bootstrap servers and, when secured, the admin's TLS settings."""
        if self.secured:
            return {**ClusterSecurity(self.dir).client_config(self.bootstrap_servers), **extra}
        return {"bootstrap.servers": self.bootstrap_servers, **extra}

    def broker_ids(self) -> list[int]:
        return [b["id"] for b in self.state.get("brokers", [])]

    # ---- the Kafka protocol listener ----------------------------------------------------------------

    @property
    def kafka_security_protocol(self) -> str:
        """The Kafka listeners' protocol: as chosen at ``up``, else the client listener's (SSL / PLAINTEXT)."""
        return self.state.get("kafka_security_protocol") or KAFKA_PROTOCOLS[self.security][0]

    def kafka_port(self, broker_id: int) -> int:
        return self.extra_port(broker_id, KAFKA_PORT_PURPOSE)

    @property
    def kafka_bootstrap_servers(self) -> str:
        """host:port of every broker's Kafka listener (a broker never started yet has none)."""
        ports = self.state.get("extra_ports", {}).get(KAFKA_PORT_PURPOSE, {})
        return ",".join(f"{self.broker_address(b)}:{ports[str(b)]}" for b in self.broker_ids() if str(b) in ports)

    def kafka_client_config(self, username: str | None = None, password: str | None = None) -> dict[str, str]:
        """A Kafka client's config (librdkafka's names: confluent-kafka, ``kcat -X``) for this cluster: the
        bootstrap, the protocol, and on a secured cluster the CA and the admin's certificate and key (one
        PEM file); ``username``/``password``: a SASL PLAIN login (default on a SASL_* cluster: ``admin``'s)."""
        protocol = self.kafka_security_protocol
        config = {"bootstrap.servers": self.kafka_bootstrap_servers, "security.protocol": protocol}
        if self.secured:
            security = ClusterSecurity(self.dir)
            admin_pem = str(security.keystore(ADMIN_NAME))
            config.update({"ssl.ca.location": str(security.truststore), "ssl.certificate.location": admin_pem,
                           "ssl.key.location": admin_pem})
        if username is None and protocol.startswith("SASL_") and self.kafka_admin_password_path.exists():
            username, password = ADMIN_NAME, self.kafka_admin_password_path.read_text().strip()
        if username is not None:
            config.update({"sasl.mechanism": "PLAIN", "sasl.username": username, "sasl.password": password or ""})
        return config

    @property
    def kafka_admin_password_path(self) -> Path:
        return self.dir / KAFKA_ADMIN_PASSWORD_FILE

    def _ensure_kafka_admin_login(self) -> None:
        """A SASL Kafka listener's admin login: user ``admin`` (User:admin, the secured cluster's super user)
        with a random password, made once and kept (0600) in the state dir for ``kafka_client_config``."""
        path = self.kafka_admin_password_path
        if path.exists():
            return
        from ads_spark.client import Admin

        password = secrets.token_urlsafe(24)
        admin = Admin(self.client_config())
        try:
            admin.upsert_user(ADMIN_NAME, password)
        finally:
            admin.close()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(password + "\n")

    def _kafka_listener_lines(self, broker_id: int) -> list[str]:
        return [f"kafka.listeners={self.kafka_security_protocol}://{self.broker_address(broker_id)}:"
                f"{self.kafka_port(broker_id)}"]

    def _pid(self, name: str) -> int | None:
        path = self.dir / f"{name}.pid"
        try:
            return int(path.read_text().strip())
        except (OSError, ValueError):
            return None

    # ---- up ---------------------------------------------------------------------

    def up(self, brokers: int = 3, racks: list[str] | None = None, zookeeper: str | None = None,
           overrides: list[str] | None = None, timeout_s: float = START_TIMEOUT_S,
           security: str | None = None, kafka_security_protocol: str | None = None) -> None:
        """Start what is not running. ``security`` (``"tls"``/``"none"``) applies to a new state dir
        (None: ``"none"``); an existing one keeps its mode, and asking for the other is refused.
        ``kafka_security_protocol``: the Kafka listeners' protocol of a new state dir (None: the client
        listener's; SASL_SSL on a secured cluster, SASL_PLAINTEXT on an open one)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        if not self.state:
            hosted = self.network is not None
            zookeeper_default = (f"{self.network.address(ZOOKEEPER_HOST)}:{HOSTED_ZOOKEEPER_PORT}" if hosted
                                 else f"127.0.0.1:{free_port()}")
            self.state = {"zookeeper": zookeeper or zookeeper_default,
                          "security": check_security_mode(security or "none"),
                          "embedded_zookeeper": zookeeper is None, "overrides": list(overrides or []),
                          "brokers": [{"id": i, "port": HOSTED_BROKER_PORT if hosted else free_port(),
                                       "rack": racks[(i - 1) % len(racks)] if racks else None}
                                      for i in range(1, brokers + 1)]}
            if kafka_security_protocol is not None:
                if kafka_security_protocol not in KAFKA_PROTOCOLS[self.state["security"]]:
                    raise InvalidRequestError(
                        f"a cluster with --security {self.state['security']} serves Kafka with one of "
                        f"{', '.join(KAFKA_PROTOCOLS[self.state['security']])}, not {kafka_security_protocol}")
                self.state["kafka_security_protocol"] = kafka_security_protocol
            self._save()
        elif security is not None and check_security_mode(security) != self.security:
            raise InvalidRequestError(f"the cluster in {self.dir} runs with --security {self.security}; it cannot be "
                                      f"restarted with --security {security} (use another --dir)")
        if self.secured:
            self._prepare_security()
        if self.state.get("embedded_zookeeper") and not pid_alive(self._pid("zookeeper")):
            self._start_zookeeper(timeout_s)
        for broker in self.state["brokers"]:
            if not pid_alive(self._pid(f"broker-{broker['id']}")):
                self.start_broker(broker["id"], wait=False)
        self.wait_for_brokers(self.broker_ids(), timeout_s)
        if self.kafka_security_protocol.startswith("SASL_"):
            self._ensure_kafka_admin_login()

    def _prepare_security(self) -> None:
        """CA, certificates and client.properties of a secured cluster (kept across restarts)."""
        security = ClusterSecurity(self.dir)
        zookeeper_host = self.state["zookeeper"].rsplit(":", 1)[0]
        security.create({b["id"]: ([broker_host_name(b["id"]), self.broker_address(b["id"])] if self.network
                                   else []) for b in self.state["brokers"]},
                        [zookeeper_host] + ([ZOOKEEPER_HOST] if self.network else []))
        security.write_client_properties(self.bootstrap_servers)

    def _spawn(self, name: str, argv: list[str], host: str | None = None) -> int:
        log_file = open(self.dir / f"{name}.log", "ab")
        on_host = self.network.exec_prefix(host) if self.network and host else []
        process = subprocess.Popen([*on_host, sys.executable, "-m", "ads_spark.cli.main", *argv], stdout=log_file,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                   cwd=self.dir)
        log_file.close()
        (self.dir / f"{name}.pid").write_text(str(process.pid))
        return process.pid

    def _start_zookeeper(self, timeout_s: float) -> None:
        host, port = self.state["zookeeper"].rsplit(":", 1)[0], int(self.state["zookeeper"].rsplit(":", 1)[1])
        argv = ["zookeeper", "start", "--data-dir", str(self.dir / "zookeeper"), "--port", str(port), "--host", host]
        security = ClusterSecurity(self.dir) if self.secured else None
        if security is not None:
            argv += security.zookeeper_server_args()
        self._spawn("zookeeper", argv, host=ZOOKEEPER_HOST)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if security.zookeeper_answers(host, port) if security is not None else _answers_ruok(host, port):
                return
            if not pid_alive(self._pid("zookeeper")):
                raise RuntimeError(f"ZooKeeper exited at start-up; see {self.dir / 'zookeeper.log'}")
            time.sleep(0.2)
        raise RequestTimedOutError(f"ZooKeeper did not answer within {timeout_s}s; see {self.dir / 'zookeeper.log'}")

    def _open_listener_lines(self, address: str, port: int) -> list[str]:
        # A test network's hosts have no route off their /24 (chaos/hosts.py), so an open listener on a
        # host's address is as private as loopback: say so instead of tripping the non-loopback refusal.
        allow = ["listeners.plaintext.nonloopback.allow=true"] if self.network else []
        return [f"listeners=PLAINTEXT://{address}:{port}", *allow]

    def broker_config_lines(self, broker_id: int, lines: list[str]) -> list[str]:
        """The config lines a broker is started with, as written before each start. A subclass that runs
        brokers differently (more listeners, a security stage) changes them here."""
        return lines

    def extra_port(self, broker_id: int, purpose: str) -> int:
        """A further port of a broker (a second listener), chosen once and kept in ``cluster.json``, so a
        restarted broker listens where its clients and peers last saw it."""
        ports = self.state.setdefault("extra_ports", {}).setdefault(purpose, {})
        if str(broker_id) not in ports:
            ports[str(broker_id)] = free_port()
            self._save()
        return ports[str(broker_id)]

    def broker_config_path(self, broker_id: int) -> Path:
        return self.dir / f"broker-{broker_id}" / "broker.properties"

    def start_broker(self, broker_id: int, wait: bool = True, timeout_s: float = START_TIMEOUT_S) -> None:
        broker = next(b for b in self.state["brokers"] if b["id"] == broker_id)
        home = self.dir / f"broker-{broker_id}"
        home.mkdir(parents=True, exist_ok=True)
        address = self.broker_address(broker_id)
        listener = (ClusterSecurity(self.dir).broker_lines(broker_id, address, broker["port"], self.broker_ids(),
                                                           bool(self.state.get("embedded_zookeeper")))
                    if self.secured else self._open_listener_lines(address, broker["port"]))
        lines = [f"broker.id={broker_id}", *listener, *self._kafka_listener_lines(broker_id),
                 f"log.dirs={home / 'data'}",
                 f"zookeeper.connect={self.state['zookeeper']}/ads", "zookeeper.session.timeout.ms=6000",
                 "replica.lag.time.max.ms=10000", "replica.fetch.wait.max.ms=200", "metrics.port=0"]
        if broker.get("rack"):
            lines.append(f"broker.rack={broker['rack']}")
        lines += self.state.get("overrides", [])
        lines = self.broker_config_lines(broker_id, lines)
        self.broker_config_path(broker_id).write_text("\n".join(lines) + "\n")
        self._spawn(f"broker-{broker_id}", ["broker", "start", "--config", str(self.broker_config_path(broker_id))],
                    host=broker_host_name(broker_id))
        if wait:
            self.wait_for_brokers([broker_id], timeout_s)

    def wait_for_brokers(self, broker_ids: list[int], timeout_s: float = START_TIMEOUT_S) -> None:
        """Until every broker in ``broker_ids`` is registered and known to the cluster's metadata."""
        from ads_spark.client import Admin

        deadline = time.monotonic() + timeout_s
        last_error = None
        while time.monotonic() < deadline:
            for broker_id in broker_ids:
                if not pid_alive(self._pid(f"broker-{broker_id}")):
                    raise RuntimeError(f"broker {broker_id} exited at start-up; see "
                                       f"{self.dir / f'broker-{broker_id}.log'}")
            try:
                admin = Admin(self.client_config(**{"request.timeout.ms": 2000}))
                try:
                    known = {b["id"] for b in admin.cluster().get("brokers", [])}
                finally:
                    admin.close()
                if set(broker_ids) <= known:
                    return
            except Exception as exc:  # not up yet
                last_error = exc
            time.sleep(0.2)
        raise RequestTimedOutError(f"brokers {broker_ids} not registered within {timeout_s}s ({last_error}); "
                                   f"logs in {self.dir}")

    # ---- status / down ------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return {
            "bootstrap_servers": self.bootstrap_servers, "zookeeper": self.state.get("zookeeper"),
            "kafka_bootstrap_servers": self.kafka_bootstrap_servers, "kafka_security_protocol":
                self.kafka_security_protocol,
            "security": self.security,
            "client_config": str(self.client_properties_path) if self.secured else None,
            "zookeeper_alive": pid_alive(self._pid("zookeeper")) if self.state.get("embedded_zookeeper") else None,
            "brokers": [{"id": b["id"], "pid": self._pid(f"broker-{b['id']}"),
                         "address": f"{self.broker_address(b['id'])}:{b['port']}", "rack": b.get("rack"),
                         "alive": pid_alive(self._pid(f"broker-{b['id']}"))} for b in self.state.get("brokers", [])],
        }

    def broker_pid(self, broker_id: int) -> int | None:
        """The pid of a broker this cluster started (None when it is not running)."""
        return self._pid(f"broker-{broker_id}")

    def signal_broker(self, broker_id: int, signum: int) -> None:
        pid = self._pid(f"broker-{broker_id}")
        if pid_alive(pid):
            os.killpg(pid, signum)

    def kill_broker(self, broker_id: int) -> None:
        """SIGKILL: the crash case."""
        self._stop(f"broker-{broker_id}", signal.SIGKILL, STOP_TIMEOUT_S)

    def stop_broker(self, broker_id: int, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM: a controlled shutdown, then SIGKILL if it overruns."""
        self._stop(f"broker-{broker_id}", signal.SIGTERM, timeout_s)

    def _stop(self, name: str, signum: int, timeout_s: float) -> None:
        pid = self._pid(name)
        if not pid_alive(pid):
            (self.dir / f"{name}.pid").unlink(missing_ok=True)
            return
        try:
            os.killpg(pid, signum)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + timeout_s
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if pid_alive(pid):
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            while pid_alive(pid) and time.monotonic() < deadline + 10:
                time.sleep(0.1)
        (self.dir / f"{name}.pid").unlink(missing_ok=True)

    def down(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        for broker_id in self.broker_ids():
            self.stop_broker(broker_id, timeout_s)
        if self.state.get("embedded_zookeeper"):
            self._stop("zookeeper", signal.SIGTERM, timeout_s)
