"""The Kafka listener's network layer on real brokers (issue #25; ads_spark/kafka/server.py, sasl.py).

An open 2-broker cluster (idle bound and connection bound set low) shows: ``kcat -L`` lists the brokers'
Kafka endpoints and a topic; ApiVersions answers the table and an unknown version gets error 35 in v0;
an idle connection, a half frame and an oversized size prefix are each closed (the last at once, nothing
allocated) while other connections are served; connections over ``kafka.connections.max`` are refused
while an open one keeps being answered. A secured 1-broker cluster (mutual TLS on the Kafka SSL
listener, plus a SASL_SSL Kafka listener with the admin's login LocalCluster makes) shows: a SASL PLAIN
login with the right password gets the user's ACLs, a wrong password gets SASL_AUTHENTICATION_FAILED (58) and a closed connection; a client
certificate is mapped to its principal by ``ssl.principal.mapping.rules``; confluent-kafka, kafka-python and
aiokafka each produce (idempotent, acks=all) and consume as a group with commits over SASL_SSL, and
``kcat -L`` lists over it.

The raw protocol is spoken with kio's own messages over plain sockets, so every byte is the test's.
"""

from __future__ import annotations

import io
import json
import socket
import ssl
import struct
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from kio.serial import entity_reader, entity_writer

from ads_spark.cluster import LocalCluster
from ads_spark.cluster_security import ClusterSecurity
from ads_spark.kafka import entities
from tests.fixtures.cluster import start_cluster, stop_cluster
from tests.fixtures.kafka_clients import LIBRARIES, PRODUCERS, consume_as_group, items, kafka_sasl_endpoint, kcat_args

IDLE_MS = 4000
CONNECTIONS_MAX = 20
OPEN_OVERRIDES = [f"connections.max.idle.ms={IDLE_MS}", f"kafka.connections.max={CONNECTIONS_MAX}"]
SASL_LISTENER = "SASL_SSL"
SECURED_OVERRIDES = ["credential.hash.iterations=4096",  # credentials.MIN_ITERATIONS: ~2 ms a login
                     "ssl.principal.mapping.rules=RULE:^(carol)$/$1-ops/,DEFAULT"]
IO_TIMEOUT_S = 20.0


# ---- the raw protocol ---------------------------------------------------------------------------------


def send_request(sock, api_key: int, version: int, fields: dict, correlation_id: int = 1,
                 version_on_wire: int | None = None) -> None:
    request_cls = entities.request_class(api_key, version)
    header_cls = request_cls.__header_schema__
    out = io.BytesIO()
    entity_writer(header_cls)(out, header_cls(request_api_key=api_key, request_api_version=version,
                                              correlation_id=correlation_id, client_id="k2-listener-test"))
    entity_writer(request_cls)(out, request_cls(**fields))
    data = bytearray(out.getvalue())
    if version_on_wire is not None:  # the same bytes, announced as another version
        data[2:4] = struct.pack(">h", version_on_wire)
    sock.sendall(struct.pack(">i", len(data)) + data)


def _read_exact(sock, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {count} bytes")
        data += chunk
    return data


def read_response(sock, api_key: int, version: int):
    """(correlation id, response entity) of the next answer, read as ``api_key`` at ``version``."""
    response_cls = entities.response_class(api_key, version)
    (size,) = struct.unpack(">i", _read_exact(sock, 4))
    frame = _read_exact(sock, size)
    (correlation_id,) = struct.unpack_from(">i", frame)
    offset = 4 + (1 if response_cls.__header_schema__.__version__ >= 1 else 0)
    entity, used = entity_reader(response_cls)(memoryview(frame).toreadonly(), offset)
    assert offset + used == len(frame)
    return correlation_id, entity


def api_versions(sock, version: int = 3, correlation_id: int = 1):
    fields = {"client_software_name": "k2", "client_software_version": "1"} if version >= 3 else {}
    send_request(sock, 18, version, fields, correlation_id)
    got_id, answer = read_response(sock, 18, version)
    assert got_id == correlation_id
    return answer


def closed_within(sock, timeout_s: float) -> float:
    """Seconds until the broker closes ``sock`` (reads, discarding anything, until EOF); fails past timeout_s."""
    started = time.monotonic()
    sock.settimeout(timeout_s)
    try:
        while sock.recv(65536):
            pass
    except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
        pass
    except socket.timeout:
        pytest.fail(f"the connection was still open after {timeout_s}s")
    return time.monotonic() - started


def address(bootstrap: str) -> tuple[str, int]:
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    return host, int(port)


def connect(bootstrap: str) -> socket.socket:
    return socket.create_connection(address(bootstrap), timeout=IO_TIMEOUT_S)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


# ---- the open cluster -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def open_cluster(tmp_path_factory):
    started = start_cluster(tmp_path_factory, 2, OPEN_OVERRIDES)
    yield started
    stop_cluster(started)


def test_kcat_lists_every_brokers_kafka_endpoint_and_a_topic(open_cluster):
    from ads_spark.client import Admin

    admin = Admin(open_cluster.client_config())
    try:
        admin.create_topic("kcat-listed", partitions=3, replication_factor=2)
    finally:
        admin.close()
    listed = subprocess.run(["kcat", "-b", open_cluster.kafka_bootstrap_servers, "-L", "-J", "-m", "20"],
                            capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    metadata = json.loads(listed.stdout)
    kafka_ports = {open_cluster.kafka_port(b) for b in open_cluster.broker_ids()}
    assert {int(b["name"].rsplit(":", 1)[1]) for b in metadata["brokers"]} == kafka_ports
    topic = next(t for t in metadata["topics"] if t["topic"] == "kcat-listed")
    assert len(topic["partitions"]) == 3


def test_api_versions_answers_the_table_and_an_unknown_version_gets_35_in_v0(open_cluster):
    with connect(open_cluster.kafka_bootstrap_servers) as sock:
        send_request(sock, 18, 3, {"client_software_name": "k2", "client_software_version": "1"}, 11,
                     version_on_wire=4)  # kafka-python asks v4 first
        correlation_id, fallback = read_response(sock, 18, 0)
        assert correlation_id == 11 and int(fallback.error_code) == 35
        table = {k.api_key: (k.min_version, k.max_version) for k in fallback.api_keys}
        assert table[18] == (0, 3) and table[3][1] >= 4
        for version in (3, 2, 0):  # the same connection goes on
            answer = api_versions(sock, version, correlation_id=100 + version)
            assert int(answer.error_code) == 0
            assert {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys} == table


def test_an_idle_connection_is_closed_after_connections_max_idle_ms(open_cluster):
    with connect(open_cluster.kafka_bootstrap_servers) as sock:
        api_versions(sock)
        waited = closed_within(sock, IDLE_MS / 1000 + 10)
    assert IDLE_MS / 1000 - 0.5 <= waited <= IDLE_MS / 1000 + 5


def test_a_half_frame_and_an_oversized_size_prefix_are_closed_while_others_are_served(open_cluster):
    bootstrap = open_cluster.kafka_bootstrap_servers
    pid = open_cluster.broker_pid(open_cluster.broker_ids()[0])
    with connect(bootstrap) as bystander, connect(bootstrap) as half, connect(bootstrap) as huge:
        api_versions(bystander)
        rss_before = rss_kib(pid)
        half.sendall(struct.pack(">i", 100) + b"\x00\x12\x00\x03" + b"\x00" * 6)  # 10 of 100 bytes, then nothing
        huge.sendall(struct.pack(">i", 300 << 20))  # claims 300 MiB, over socket.request.max.bytes (100 MiB)
        assert closed_within(huge, 5) < 2
        api_versions(bystander, correlation_id=2)
        assert rss_kib(pid) - rss_before < 50 * 1024  # nothing near the 300 MiB was allocated
        assert closed_within(half, IDLE_MS / 1000 + 10) >= 1  # (the bystander idled out meanwhile)
    with connect(bootstrap) as after:
        api_versions(after, correlation_id=3)
    log = (open_cluster.dir / f"broker-{open_cluster.broker_ids()[0]}.log").read_text()
    assert f"frame size {300 << 20} is over socket.request.max.bytes" in log
    assert "in the middle of a frame (10 of 100 bytes read)" in log


def test_connections_over_kafka_connections_max_are_refused_while_an_open_one_is_served(open_cluster):
    bootstrap = address(open_cluster.kafka_bootstrap_servers)  # one broker: the bound is per broker
    open_now = []
    try:
        served = socket.create_connection(bootstrap, timeout=IO_TIMEOUT_S)
        open_now.append(served)
        api_versions(served)
        for number in range(CONNECTIONS_MAX - 1):  # up to the bound, each admitted (it answers)
            filler = socket.create_connection(bootstrap, timeout=IO_TIMEOUT_S)
            open_now.append(filler)
            api_versions(filler, correlation_id=number)
        refused = 0
        for number in range(300):
            with socket.create_connection(bootstrap, timeout=IO_TIMEOUT_S) as extra:
                try:
                    send_request(extra, 18, 0, {}, 7)
                except OSError:
                    pass
                closed_within(extra, 5)
                refused += 1
            if number % 50 == 49:  # the open ones (the idle bound is 4 s) keep being answered
                for index, sock in enumerate(open_now):
                    api_versions(sock, correlation_id=1000 + index)
        assert refused == 300
        for sock in open_now[1:]:
            sock.close()
        del open_now[1:]
        deadline = time.monotonic() + 10
        while True:  # room again once the broker saw them go
            with socket.create_connection(bootstrap, timeout=IO_TIMEOUT_S) as again:
                try:
                    assert int(api_versions(again).error_code) == 0
                    break
                except (ConnectionError, OSError):
                    assert time.monotonic() < deadline, "no connection admitted after the others closed"
                    time.sleep(0.2)
        api_versions(served, correlation_id=5)
    finally:
        for sock in open_now:
            sock.close()
    log = (open_cluster.dir / f"broker-{open_cluster.broker_ids()[0]}.log").read_text()
    assert f"{CONNECTIONS_MAX} connections open (kafka.connections.max)" in log


# ---- the secured cluster ----------------------------------------------------------------------------


class KafkaSecuredCluster(LocalCluster):
    """A secured cluster serving Kafka with SASL_SSL (``kafka_security_protocol``; LocalCluster makes the
    admin's login) whose brokers also serve an SSL Kafka listener (port kept in cluster.json)."""

    def ssl_port(self, broker_id: int) -> int:
        return self.extra_port(broker_id, "kafka-ssl")

    def broker_config_lines(self, broker_id: int, lines: list[str]) -> list[str]:
        return [f"{line},SSL://127.0.0.1:{self.ssl_port(broker_id)}" if line.startswith("kafka.listeners=")
                else line for line in lines]

    def ssl_client_config(self) -> dict:
        """The admin's certificate on the SSL Kafka listener (no SASL)."""
        config = {key: value for key, value in self.kafka_client_config().items() if not key.startswith("sasl.")}
        return {**config, "security.protocol": "SSL",
                "bootstrap.servers": ",".join(f"127.0.0.1:{self.ssl_port(b)}" for b in self.broker_ids())}


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    cluster = KafkaSecuredCluster(tmp_path_factory.mktemp("kafka-secured"))
    try:
        cluster.up(brokers=1, overrides=SECURED_OVERRIDES, security="tls", kafka_security_protocol=SASL_LISTENER)
    except BaseException:
        cluster.down()
        raise
    yield cluster
    stop_cluster(cluster)


def _admin(cluster):
    from ads_spark.client import Admin

    return Admin(cluster.client_config())


def _grant_describe(admin, topic: str, principal: str) -> None:
    from ads_spark.security.authorizer import AclBinding

    admin.create_acls([AclBinding("Topic", topic, "LITERAL", principal, "*", "Describe", "ALLOW")])


def _tls_socket(cluster, port: int, keystore: Path | None) -> ssl.SSLSocket:
    security = ClusterSecurity(cluster.dir)
    context = ssl.create_default_context(cafile=str(security.truststore))
    if keystore is not None:
        context.load_cert_chain(str(keystore))
    raw = socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT_S)
    return context.wrap_socket(raw, server_hostname="127.0.0.1")


def _topics_seen(config: dict) -> set[str]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient(config).list_topics(timeout=20).topics)


def test_sasl_ssl_right_password_logs_in_and_a_wrong_one_gets_58_and_a_closed_connection(secured):
    admin = _admin(secured)
    try:
        admin.upsert_user("kafka-user", "right-password")
        admin.create_topic("sasl-visible", partitions=1, replication_factor=1)
        admin.create_topic("sasl-hidden", partitions=1, replication_factor=1)
        _grant_describe(admin, "sasl-visible", "User:kafka-user")
    finally:
        admin.close()
    broker_id = secured.broker_ids()[0]
    assert secured.kafka_client_config()["sasl.username"] == "admin"  # made by LocalCluster.up, a super user
    assert {"sasl-visible", "sasl-hidden"} <= _topics_seen(secured.kafka_client_config())
    seen = _topics_seen(secured.kafka_client_config("kafka-user", "right-password"))
    assert "sasl-visible" in seen and "sasl-hidden" not in seen  # User:kafka-user's ACLs, not the cert's admin
    sasl_port = secured.kafka_port(broker_id)
    keystore = ClusterSecurity(secured.dir).keystore("admin")
    with _tls_socket(secured, sasl_port, keystore) as sock:
        assert int(api_versions(sock).error_code) == 0  # served before a login
        send_request(sock, 17, 1, {"mechanism": "PLAIN"}, 2)
        assert int(read_response(sock, 17, 1)[1].error_code) == 0
        send_request(sock, 36, 2, {"auth_bytes": b"\x00kafka-user\x00wrong-password"}, 3)
        correlation_id, refused = read_response(sock, 36, 2)
        assert correlation_id == 3 and int(refused.error_code) == 58
        assert refused.error_message == "Authentication failed: Invalid username or password"
        assert closed_within(sock, 5) < 5
    with _tls_socket(secured, sasl_port, keystore) as sock:  # an unknown user: the same answer
        send_request(sock, 17, 1, {"mechanism": "PLAIN"}, 2)
        read_response(sock, 17, 1)
        send_request(sock, 36, 2, {"auth_bytes": b"\x00nobody\x00right-password"}, 3)
        _, unknown = read_response(sock, 36, 2)
        assert (int(unknown.error_code), unknown.error_message) == (58, refused.error_message)
        assert closed_within(sock, 5) < 5
    with _tls_socket(secured, sasl_port, keystore) as sock:  # another mechanism: 33, the list
        send_request(sock, 17, 1, {"mechanism": "SCRAM-SHA-256"}, 2)
        _, handshake = read_response(sock, 17, 1)
        assert int(handshake.error_code) == 33 and handshake.mechanisms == ("PLAIN",)
        assert closed_within(sock, 5) < 5
    with _tls_socket(secured, sasl_port, keystore) as sock:  # Metadata before a login: closed
        send_request(sock, 3, 4, {"topics": None, "allow_auto_topic_creation": False}, 2)
        assert closed_within(sock, 5) < 5
    log = (secured.dir / f"broker-{broker_id}.log").read_text()
    assert "Metadata before SASL authentication" in log and "right-password" not in log


def test_an_ssl_client_certificate_is_mapped_to_its_principal(secured, tmp_path):
    from ads_spark.security import certs

    admin = _admin(secured)
    try:
        admin.create_topic("cert-visible", partitions=1, replication_factor=1)
        _grant_describe(admin, "cert-visible", "User:carol-ops")  # the mapped name, not the certificate's
    finally:
        admin.close()
    security = ClusterSecurity(secured.dir)
    ca = certs.load_ca(security.dir)
    keystores = {name: certs.issue_certificate(ca, tmp_path / name, name, [name], server=False).keystore_path
                 for name in ("carol", "dave")}

    def config(name: str) -> dict:
        return {**secured.ssl_client_config(), "ssl.certificate.location": str(keystores[name]),
                "ssl.key.location": str(keystores[name])}

    assert "cert-visible" in _topics_seen(config("carol"))      # carol -> User:carol-ops (RULE), allowed
    assert "cert-visible" not in _topics_seen(config("dave"))   # dave -> User:dave (DEFAULT), no ACL
    assert "cert-visible" in _topics_seen(secured.ssl_client_config())  # admin: a super user
    kcat = subprocess.run(["kcat", "-L", "-J", "-m", "20"] + [arg for key, value in secured.ssl_client_config().items()
                                                             for arg in ("-X", f"{key}={value}")],
                          capture_output=True, text=True, timeout=60)  # the README's secured kcat line
    assert kcat.returncode == 0, kcat.stderr
    assert "cert-visible" in {t["topic"] for t in json.loads(kcat.stdout)["topics"]}
    port = secured.ssl_port(secured.broker_ids()[0])
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        with _tls_socket(secured, port, None) as sock:  # no certificate: the handshake or first read fails
            api_versions(sock)


def test_the_client_libraries_produce_and_consume_as_a_group_over_sasl_ssl(secured):
    """Each library as the admin's SASL PLAIN login (its certificate too: the listener requires one)."""
    endpoint = kafka_sasl_endpoint(secured)
    assert endpoint.security_protocol == "SASL_SSL" and endpoint.sasl_username == "admin"
    admin = _admin(secured)
    try:
        for library in LIBRARIES:
            topic, group = f"sasl-{library}", f"sasl-group-{library}"
            admin.create_topic(topic, partitions=2, replication_factor=1)
            produced = PRODUCERS[library](endpoint, topic, items(6, library))
            assert len({(r.partition, r.offset) for r in produced}) == 6, produced
            run = consume_as_group(library, endpoint, topic, group, members=1, expected=6, timeout_s=30)
            assert not run.errors, (library, run.errors)
            handled = [record for _, record in run.records]
            assert set(Counter(handled).values()) == {1} and set(handled) == set(produced), (library, handled)
            committed = admin.list_consumer_group_offsets(group)
            ends = Counter(r.partition for r in produced)
            assert {tp.partition: meta.offset for tp, meta in committed.items()} == dict(ends), (library, committed)
    finally:
        admin.close()
    listed = subprocess.run([*kcat_args(endpoint), "-L", "-J", "-m", "20"], capture_output=True, text=True,
                            timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert {f"sasl-{library}" for library in LIBRARIES} <= {t["topic"] for t in json.loads(listed.stdout)["topics"]}
