"""``ads cluster up`` runs a secured cluster by default (issue #23, item 7), through the real CLI.

One secured 3-broker cluster per module, started exactly as a user starts it: ``ads cluster up`` in a
fresh working directory (state in ``./state``). The CLI then works with no security flags (it reads the
state dir's ``client.properties``); a client without that config is refused quickly instead of
retrying; the state dir and keys are private; ZooKeeper refuses clients without the cluster's
certificate; a certificate of the same CA for another user gets no topic access (the authorizer is on);
``--security none`` still gives the open cluster.
"""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ads_spark.cluster import LocalCluster
from ads_spark.errors import AdsError

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

FAIL_FAST_S = 10.0  # a refused TLS client must give up well inside the 60 s default.api.timeout.ms


def ads(cwd: Path, *argv: str, stdin: str | None = None, timeout_s: float = 120):
    return subprocess.run([sys.executable, "-m", "ads_spark.cli.main", *argv], input=stdin, capture_output=True,
                          text=True, timeout=timeout_s, cwd=cwd)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A working directory where `ads cluster up` (no flags) made ``./state``; torn down after the module."""
    cwd = tmp_path_factory.mktemp("secure-up")
    started = time.monotonic()
    up = ads(cwd, "cluster", "up", "--brokers", "3", timeout_s=180)
    try:
        assert up.returncode == 0, up.stderr
        print(f"secured cluster up in {time.monotonic() - started:.1f}s")
        yield cwd
    finally:
        ads(cwd, "cluster", "down", timeout_s=120)
        LocalCluster(cwd / "state").down()  # whatever the CLI left, e.g. after a failed up


def test_the_cli_round_trip_works_with_no_security_flags(workdir):
    topic = "secured-orders"
    created = ads(workdir, "topics", "create", "--topic", topic, "--partitions", "3", "--replication-factor", "3")
    assert created.returncode == 0, created.stderr
    lines = [f"order-{i:03d}" for i in range(200)]
    produced = ads(workdir, "produce", "--topic", topic, "--acks", "all", stdin="\n".join(lines) + "\n")
    assert produced.returncode == 0, produced.stderr
    consumed = ads(workdir, "consume", "--topic", topic, "--from-beginning", "--max-messages", "200",
                   "--timeout-ms", "20000")
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(consumed.stdout.splitlines()) == lines
    explicit = ads(workdir, "topics", "list", "--bootstrap-server", LocalCluster(workdir / "state").bootstrap_servers,
                   "--command-config", str(workdir / "state" / "client.properties"))
    assert explicit.returncode == 0, explicit.stderr
    assert topic in explicit.stdout.split()


def test_status_names_the_security_mode_and_prints_no_secret(workdir):
    text = ads(workdir, "cluster", "status")
    as_json = ads(workdir, "cluster", "status", "--json")
    assert text.returncode == 0 and as_json.returncode == 0, text.stderr + as_json.stderr
    assert "Security: tls" in text.stdout
    status = json.loads(as_json.stdout)
    assert status["security"] == "tls"
    assert [b["alive"] for b in status["brokers"]] == [True, True, True]
    assert status["controller_id"] is not None  # the admin's certificate got the cluster's metadata
    properties = (workdir / "state" / "client.properties").read_text()
    assert "security.protocol=SSL" in properties
    for output in (text.stdout, as_json.stdout, properties):
        assert "PRIVATE KEY" not in output and "password" not in output.lower()


def test_state_dir_and_keys_are_private(workdir):
    state = workdir / "state"
    mode = lambda path: stat.S_IMODE(path.stat().st_mode)  # noqa: E731
    assert mode(state) == 0o700
    assert mode(state / "security") == 0o700
    assert mode(state / "client.properties") == 0o600
    keystores = [p for p in (state / "security").glob("*.pem") if p.name != "ca.pem"]
    assert {p.stem for p in keystores} >= {"ca-key", "admin", "zookeeper", "zookeeper-client",
                                           "broker-1", "broker-2", "broker-3"}
    for path in keystores:
        assert mode(path) == 0o600, path
    config = (state / "broker-1" / "broker.properties").read_text()
    for line in ("ssl.client.auth=required", "inter.broker.listener.name=SSL", "zookeeper.set.acl=true",
                 "zookeeper.ssl.client.enable=true", "authorizer.class.name=kafka.security.authorizer.AclAuthorizer",
                 "super.users=User:broker-1;User:broker-2;User:broker-3;User:admin"):
        assert line in config.splitlines()
    assert "listeners=SSL://127.0.0.1:" in config


def _refused_quickly(config: dict) -> AdsError:
    from ads_spark.client import Admin

    started = time.monotonic()
    admin = Admin(config)
    try:
        with pytest.raises(AdsError) as refused:
            admin.list_topics()
    finally:
        admin.close()
    assert time.monotonic() - started < FAIL_FAST_S
    return refused.value


def test_a_client_without_the_config_is_refused_fast(workdir):
    from ads_spark.errors import SslAuthenticationFailedError

    cluster = LocalCluster(workdir / "state")
    plaintext = _refused_quickly({"bootstrap.servers": cluster.bootstrap_servers})
    assert not getattr(plaintext, "retriable", False), plaintext
    no_certificate = _refused_quickly({"bootstrap.servers": cluster.bootstrap_servers, "security.protocol": "SSL",
                                       "ssl.truststore.location": str(workdir / "state" / "security" / "ca.pem")})
    assert isinstance(no_certificate, SslAuthenticationFailedError), no_certificate
    started = time.monotonic()
    cli = ads(workdir, "topics", "list", "--bootstrap-server", cluster.bootstrap_servers)
    assert cli.returncode != 0 and time.monotonic() - started < FAIL_FAST_S + 5
    assert "Traceback" not in cli.stderr


def test_another_certificate_of_the_ca_gets_only_what_the_admin_grants(workdir):
    """The authorizer is on: only the brokers and User:admin are super users; admin's CLI grants ACLs."""
    from ads_spark.client import Admin
    from ads_spark.errors import TopicAuthorizationFailedError
    from ads_spark.security import certs

    security = workdir / "state" / "security"
    alice = certs.issue_certificate(certs.load_ca(security), workdir / "alice", "alice", ("alice",), server=False)
    cluster = LocalCluster(workdir / "state")
    topic = "secured-no-acl"
    created = ads(workdir, "topics", "create", "--topic", topic, "--partitions", "1", "--replication-factor", "3")
    assert created.returncode == 0, created.stderr
    admin = Admin({"bootstrap.servers": cluster.bootstrap_servers, "security.protocol": "SSL",
                   "ssl.truststore.location": str(security / "ca.pem"),
                   "ssl.keystore.location": str(alice.keystore_path), "default.api.timeout.ms": 10_000})
    try:
        assert topic not in admin.list_topics()  # TLS works for alice; the topic is hidden from her
        with pytest.raises(TopicAuthorizationFailedError):
            admin.describe_topics([topic])
        granted = ads(workdir, "acls", "add", "--allow-principal", "User:alice", "--operation", "Describe",
                      "--topic", topic)  # as User:admin, from the state dir's client config
        assert granted.returncode == 0, granted.stderr
        assert [d.topic for d in admin.describe_topics([topic])] == [topic]
    finally:
        admin.close()


def test_zookeeper_refuses_clients_without_the_cluster_certificate(workdir):
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError

    cluster = LocalCluster(workdir / "state")
    security = workdir / "state" / "security"
    ca, ours = str(security / "ca.pem"), str(security / "zookeeper-client.pem")
    attempts = {"plaintext": {}, "tls without a certificate": {"use_ssl": True, "ca": ca}}
    for what, tls in attempts.items():
        client = KazooClient(hosts=cluster.zookeeper_connect, timeout=2, connection_retry={"max_tries": 0}, **tls)
        with pytest.raises(KazooTimeoutError):
            client.start(timeout=4)
            pytest.fail(f"ZooKeeper accepted a {what} client")
        client.stop()
        client.close()
    allowed = KazooClient(hosts=cluster.zookeeper_connect, timeout=4, use_ssl=True, ca=ca, certfile=ours, keyfile=ours)
    try:
        allowed.start(timeout=15)  # the control: the address is right, the certificate makes the difference
        assert allowed.exists("/ads") is not None
    finally:
        allowed.stop()
        allowed.close()


def test_security_none_runs_the_open_cluster_and_a_dir_keeps_its_mode(workdir, tmp_path):
    refused = ads(workdir, "cluster", "up", "--security", "none")
    assert refused.returncode != 0 and "--security tls" in refused.stderr
    up = ads(tmp_path, "cluster", "up", "--brokers", "1", "--security", "none", timeout_s=180)
    try:
        assert up.returncode == 0, up.stderr
        assert not (tmp_path / "state" / "client.properties").exists()
        assert not (tmp_path / "state" / "security").exists()
        status = ads(tmp_path, "cluster", "status")
        assert "Security: none" in status.stdout, status.stderr
        created = ads(tmp_path, "topics", "create", "--topic", "open", "--partitions", "1", "--replication-factor", "1")
        assert created.returncode == 0, created.stderr
        from ads_spark.client import Admin

        admin = Admin({"bootstrap.servers": LocalCluster(tmp_path / "state").bootstrap_servers})
        try:
            assert "open" in admin.list_topics()
        finally:
            admin.close()
    finally:
        ads(tmp_path, "cluster", "down", timeout_s=120)
        LocalCluster(tmp_path / "state").down()
