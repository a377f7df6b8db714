"""A secured broker opens no port before it can judge requests (issue #23, SECURITY.md's "a restarting broker
hammered with forbidden requests": none succeeds before its ACL cache loads; no listener opens while
ZooKeeper is unreachable).

One secured 1-broker cluster for the module (``ads cluster up``'s: mutual TLS, the ACL authorizer,
ZooKeeper over TLS with ACLs; its SSL listener on a fixed port chosen free at run time).

* ZooKeeper stopped, the broker started: no connection to its port is accepted and the process holds no
  listening TCP socket at all (metrics included), until its connect bound passes and it exits with an
  error naming ZooKeeper; started again, then ZooKeeper started: it comes up and serves.
* The broker restarted while another thread hammers it with forbidden calls from ``User:mallory`` (a
  certificate of the cluster's own CA, no ACL) and asks, as the admin (a super user), for its ACL cache
  version: no forbidden call is ever answered, and no answer at all comes from the broker before its
  ACL cache is loaded (``cache_version >= 0`` in every answer); afterwards a granted call succeeds.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid

import pyarrow.flight as flight
import pytest

from ads_spark.client.admin import Admin
from ads_spark.cluster import LocalCluster, pid_alive
from ads_spark.cluster_security import ClusterSecurity
from ads_spark.errors import ErrorCode
from ads_spark.protocol import wire
from ads_spark.protocol.transport import ClientTransport
from ads_spark.security import certs
from ads_spark.security.authorizer import AclBinding
from tests.fixtures.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

BROKER = 1
CALL_TIMEOUT_S = 2.0
# The broker's ZooKeeper connect bound (ZkSession's connect timeout, twice: the chroot's client, then the
# session's) plus its start-up: the longest a broker without ZooKeeper may take to give up.
GIVE_UP_WITHIN_S = 60.0
PROBE_INTERVAL_S = 0.05
PROBE_BEFORE_ZOOKEEPER_S = 2.0
HAMMER_MAX_S = 120.0
HAMMER_AFTER_REGISTERED_S = 1.0
TCP_LISTEN = "0A"  # /proc/net/tcp's state of a listening socket


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("ads-secure-start"))
    try:
        cluster.up(brokers=1, security="tls")
        yield cluster
    finally:
        cluster.down()


def _certificate_config(cluster: LocalCluster, directory, name: str) -> dict:
    """The client config of ``User:<name>``: a certificate of the cluster's own CA (TLS lets it in)."""
    security = ClusterSecurity(cluster.dir)
    issued = certs.issue_certificate(certs.load_ca(security.dir), directory / name, name,
                                     [name, "localhost", "127.0.0.1"], server=False)
    return {"bootstrap.servers": cluster.bootstrap_servers, "security.protocol": "SSL",
            "ssl.truststore.location": str(security.truststore), "ssl.keystore.location": str(issued.keystore_path)}


def _broker_port(cluster: LocalCluster) -> int:
    return next(b["port"] for b in cluster.state["brokers"] if b["id"] == BROKER)


def _listening_ports(pid: int) -> set[int]:
    """The TCP ports process ``pid`` listens on (its socket inodes matched against /proc/net/tcp{,6})."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[len("socket:["):-1])
    except OSError:  # the process is gone
        return set()
    ports = set()
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as lines:
                for line in list(lines)[1:]:
                    fields = line.split()
                    if fields[3] == TCP_LISTEN and fields[9] in inodes:
                        ports.add(int(fields[1].rsplit(":", 1)[1], 16))
        except OSError:
            continue
    return ports


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def _broker_accepts(pid: int, port: int) -> bool:
    """A connection to ``port`` that broker ``pid`` accepts. Under make test's parallel workers, another
    worker's process may be given a port this broker held before it was stopped: only its own counts."""
    return _accepts(port) and port in _listening_ports(pid)


def _action(config: dict, port: int, name: str, body: dict) -> dict:
    """A DoAction's answer; ``{"error_code": N}`` for a refusal (an unreachable broker included)."""
    client = ClientTransport.from_config(config).connect("127.0.0.1", port)
    try:
        options = flight.FlightCallOptions(timeout=CALL_TIMEOUT_S)
        results = list(client.do_action(flight.Action(name, wire.dumps(body)), options))
        return wire.loads(results[0].body, name) if results else {}
    except flight.FlightError as exc:
        return {"error_code": int(wire.to_ads_error(exc).code)}
    finally:
        client.close()


def test_no_port_opens_while_zookeeper_is_unreachable_and_the_broker_comes_up_with_it(secured):
    port = _broker_port(secured)
    secured.down()  # the broker, then ZooKeeper
    # ZooKeeper stays down: the broker waits for it (bounded), never listening, then gives up.
    secured.start_broker(BROKER, wait=False)
    pid = secured.broker_pid(BROKER)
    deadline = time.monotonic() + GIVE_UP_WITHIN_S
    while pid_alive(pid) and time.monotonic() < deadline:
        assert not _broker_accepts(pid, port), "the broker accepted a connection with no ZooKeeper session"
        assert _listening_ports(pid) == set(), "the broker listens with no ZooKeeper session"
        time.sleep(PROBE_INTERVAL_S)
    assert not pid_alive(pid), f"the broker still waits for ZooKeeper after {GIVE_UP_WITHIN_S}s"
    output = (secured.dir / f"broker-{BROKER}.log").read_text()
    assert "cannot start" in output and "ZooKeeper" in output
    # Started again, and ZooKeeper after it: it comes up once ZooKeeper answers, and serves.
    secured.start_broker(BROKER, wait=False)
    pid = secured.broker_pid(BROKER)
    probe_until = time.monotonic() + PROBE_BEFORE_ZOOKEEPER_S
    while time.monotonic() < probe_until:
        assert not _broker_accepts(pid, port) and _listening_ports(pid) == set()
        time.sleep(PROBE_INTERVAL_S)
    secured.up()  # starts ZooKeeper (the broker runs already) and waits until the broker is registered
    assert port in _listening_ports(secured.broker_pid(BROKER))
    admin = Admin(secured.client_config(**{"request.timeout.ms": 5000}))
    try:
        assert [b["id"] for b in admin.cluster()["brokers"]] == [BROKER]
    finally:
        admin.close()


class _Hammer:
    """Forbidden calls as mallory, and the admin's describe_acls, in a loop on one thread (bounded)."""

    def __init__(self, port: int, mallory: dict, admin: dict, topic: str):
        self.port, self.mallory, self.admin, self.topic = port, mallory, admin, topic
        self.answered_forbidden: list[tuple[str, dict]] = []  # what must stay empty
        self.refused = self.unreachable = 0
        self.cache_versions: list[int] = []  # of every describe_acls the broker answered
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="forbidden-hammer", daemon=True)

    def __enter__(self) -> "_Hammer":
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join(CALL_TIMEOUT_S * 4)

    def _forbidden(self, name: str, body: dict) -> None:
        answer = _action(self.mallory, self.port, name, body)
        code = answer.get("error_code", 0)
        if code in (int(ErrorCode.TOPIC_AUTHORIZATION_FAILED), int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)):
            self.refused += 1
        elif code == 0:
            self.answered_forbidden.append((name, answer))
        else:
            self.unreachable += 1

    def _run(self) -> None:
        deadline = time.monotonic() + HAMMER_MAX_S
        while not self._stop.is_set() and time.monotonic() < deadline:
            self._forbidden("list_offsets", {"partitions": [{"topic": self.topic, "partition": 0, "timestamp": -1}]})
            self._forbidden("create_topics", {"topics": [{"topic": f"mallory-{uuid.uuid4().hex[:8]}",
                                                          "partitions": 1, "replication_factor": 1}]})
            self._forbidden("describe_acls", {})
            answer = _action(self.admin, self.port, "describe_acls", {})
            if answer.get("error_code", 0) == 0:
                self.cache_versions.append(int(answer["cache_version"]))


def test_a_restarting_broker_hammered_with_forbidden_calls_answers_none_before_its_acls_load(
        secured, tmp_path):
    port = _broker_port(secured)
    secured.up()  # whatever an earlier test left stopped
    admin_config = secured.client_config(**{"request.timeout.ms": 5000})
    mallory = _certificate_config(secured, tmp_path, "mallory")
    reader = _certificate_config(secured, tmp_path, "reader")
    topic = f"start-{uuid.uuid4().hex[:8]}"
    admin = Admin(admin_config)
    try:
        admin.create_topic(topic, partitions=1, replication_factor=1)
        admin.create_acls([AclBinding("Topic", topic, "LITERAL", "User:reader", "*", "Describe", "Allow")])
    finally:
        admin.close()
    list_offsets = {"partitions": [{"topic": topic, "partition": 0, "timestamp": -1}]}
    with _Hammer(port, mallory, admin_config, topic) as hammer:
        wait_until(lambda: hammer.refused > 0 and hammer.cache_versions, timeout_s=30, what="the hammer under way")
        secured.stop_broker(BROKER)
        before_restart = len(hammer.cache_versions)
        secured.start_broker(BROKER, wait=True)
        time.sleep(HAMMER_AFTER_REGISTERED_S)
    assert hammer.answered_forbidden == []
    assert hammer.unreachable > 0  # it did hammer the broker while it was down and starting
    assert len(hammer.cache_versions) > before_restart  # ... and after it came back
    assert min(hammer.cache_versions) >= 0, "the broker answered before its ACL cache was loaded"
    # The granted call works on the restarted broker (once it leads the partition again).
    wait_until(lambda: _action(reader, port, "list_offsets", list_offsets).get("partitions", [{}])[0]
               .get("error_code") == 0, timeout_s=30, what="reader's list_offsets answered")
    assert _action(mallory, port, "list_offsets", list_offsets)["error_code"] == int(
        ErrorCode.TOPIC_AUTHORIZATION_FAILED)
