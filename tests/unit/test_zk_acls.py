"""The znode ACL policy (zookeeper.set.acl), its enforcement on every create, and the ZooKeeper TLS settings."""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.protocol.serialization import Create, Create2, Delete, SetData, Transaction
from kazoo.security import ACL, OPEN_ACL_UNSAFE, Id, Permissions

from ads_spark.broker.zk import embedded
from ads_spark.broker.zk.acls import SECRET_PATHS, acls_for, is_secret_path
from ads_spark.broker.zk.session import GuardedKazooClient, ZkSession
from ads_spark.broker.zk.tls import ZkTls, zk_security_kwargs
from ads_spark.errors import InvalidConfigError

WORLD = Id("world", "anyone")
CREATOR = Id("auth", "")


def _world_perms(acls: list[ACL]) -> int:
    return sum(acl.perms for acl in acls if acl.id == WORLD)


@pytest.mark.parametrize("path, secret", [
    ("/", False), ("/brokers/ids/1", False), ("/controller", False), ("/brokers/topics/t/partitions/0/state", False),
    ("/config", False), ("/config/topics/t", False), ("/config/usersx", False), ("/securityx", False),
    ("/acls/LITERAL/Topic/t", False), ("/config/users", True), ("/config/users/alice", True),
    ("/security", True), ("/security/token_secrets", True),
])
def test_acls_for_table(path, secret):
    assert is_secret_path(path) is secret
    assert acls_for(path, False) == list(OPEN_ACL_UNSAFE)  # set_acl off: today's open znodes
    acls = acls_for(path, True)
    assert ACL(Permissions.ALL, CREATOR) in acls
    # Nobody but the creator may ever write, create, delete or change ACLs; secrets are not even readable.
    assert _world_perms(acls) == (0 if secret else Permissions.READ)
    assert all(acl.id in (WORLD, CREATOR) for acl in acls)


def test_secret_paths_never_world_readable_with_an_explicit_owner():
    for secret in SECRET_PATHS:
        for path in (secret, secret + "/x", secret + "/x/y"):
            acls = acls_for(path, True, principal_id="CN=ads-brokers")
            assert acls == [ACL(Permissions.ALL, Id("x509", "CN=ads-brokers"))]


def _client(set_acl: bool) -> GuardedKazooClient:
    # Never started: only the request funnel is exercised.
    return GuardedKazooClient(hosts="127.0.0.1:1/ads", acl_policy=lambda path: acls_for(path, set_acl))


def test_every_create_request_carries_the_policy_acl_whatever_the_caller_passed():
    client = _client(True)
    single = client._with_acls(Create("/ads/config/users/alice", b"x", list(OPEN_ACL_UNSAFE), 0))
    assert single.acl == acls_for("/config/users/alice", True)
    with_data = client._with_acls(Create2("/ads/brokers/ids/1", b"x", None, 1))
    assert with_data.acl == acls_for("/brokers/ids/1", True)
    multi = client._with_acls(Transaction([
        Create("/ads/security/token_secrets", b"[]", list(OPEN_ACL_UNSAFE), 0),
        SetData("/ads/controller_epoch", b"1", 0),
        Create("/ads/isr_change_notification/isr_change_", b"{}", None, 2),
        Delete("/ads/x", -1),
    ]))
    creates = [op for op in multi.operations if isinstance(op, Create)]
    assert [op.acl for op in creates] == [acls_for("/security", True), acls_for("/brokers", True)]
    assert multi.operations[1] == SetData("/ads/controller_epoch", b"1", 0)


def test_without_set_acl_creates_stay_open():
    request = _client(False)._with_acls(Create("/ads/brokers/ids/1", b"x", None, 1))
    assert request.acl == list(OPEN_ACL_UNSAFE)


def test_zk_security_kwargs_reads_the_broker_keys():
    off = zk_security_kwargs({})
    assert off == {"tls": None, "set_acl": False}
    on = zk_security_kwargs({"zookeeper.ssl.client.enable": "true", "zookeeper.set.acl": True,
                             "zookeeper.ssl.keystore.location": "/k.pem",
                             "zookeeper.ssl.truststore.location": "/ca.pem"})
    assert on == {"tls": ZkTls("/k.pem", "/ca.pem", check_hostname=True), "set_acl": True}
    no_check = zk_security_kwargs({"zookeeper.ssl.client.enable": "true", "zookeeper.ssl.keystore.location": "/k",
                                   "zookeeper.ssl.truststore.location": "/ca",
                                   "zookeeper.ssl.endpoint.identification.algorithm": ""})
    assert no_check["tls"].check_hostname is False


@pytest.mark.parametrize("settings, named", [
    ({"zookeeper.set.acl": "true"}, "zookeeper.set.acl"),
    ({"zookeeper.ssl.client.enable": "true", "zookeeper.ssl.truststore.location": "/ca"},
     "zookeeper.ssl.keystore.location"),
    ({"zookeeper.ssl.client.enable": "true", "zookeeper.ssl.keystore.location": "/k"},
     "zookeeper.ssl.truststore.location"),
    ({"zookeeper.ssl.client.enable": "yes"}, "zookeeper.ssl.client.enable"),
    ({"zookeeper.ssl.endpoint.identification.algorithm": "none"}, "zookeeper.ssl.endpoint.identification.algorithm"),
])
def test_zk_security_kwargs_refuses_naming_the_key(settings, named):
    with pytest.raises(InvalidConfigError, match=named):
        zk_security_kwargs(settings)


def test_session_refuses_set_acl_without_tls():
    with pytest.raises(ValueError, match="set_acl needs tls"):
        ZkSession("127.0.0.1:1", set_acl=True)


def test_from_broker_config_passes_tls_and_acls():
    from ads_spark.config import BrokerConfig

    config = BrokerConfig({"broker.id": "1", "log.dirs": "/tmp/ads-unit-never-created",
                           "zookeeper.connect": "127.0.0.1:2181/ads-x", "zookeeper.session.timeout.ms": "6000",
                           "zookeeper.ssl.client.enable": "true", "zookeeper.set.acl": "true",
                           "zookeeper.ssl.keystore.location": "/k.pem",
                           "zookeeper.ssl.truststore.location": "/ca.pem"})
    session = ZkSession.from_broker_config(config)
    assert (session.hosts, session.chroot, session.session_timeout_ms) == ("127.0.0.1:2181", "/ads-x", 6000)
    assert session.tls == ZkTls("/k.pem", "/ca.pem", True) and session.set_acl is True


def test_tls_zoo_cfg_has_no_plaintext_port_and_enforces_x509():
    tls = embedded.ZkServerTls("/k.pem", "/ca.pem")
    lines = embedded.render_zoo_cfg(Path("/tmp/zk"), 2182, host="127.0.0.1", tls=tls).splitlines()
    assert not [line for line in lines if line.startswith(("clientPort", "clientPortAddress"))]
    for expected in ("secureClientPort=2182", "secureClientPortAddress=127.0.0.1", "ssl.clientAuth=need",
                     "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
                     "enforce.auth.enabled=true", "enforce.auth.schemes=x509", "ssl.keyStore.type=PEM"):
        assert expected in lines
    plain = embedded.render_zoo_cfg(Path("/tmp/zk"), 2181).splitlines()
    assert "clientPort=2181" in plain and not [line for line in plain if line.startswith("secure")]


def test_zookeeper_client_trusts_only_the_configured_ca(tmp_path):
    # kazoo's own TLS also loads the system's CA roots; ADS's context holds the truststore alone.
    from ads_spark.security.certs import create_ca, issue_certificate

    ca = create_ca(tmp_path / "ca")
    client = issue_certificate(ca, tmp_path, "client", sans=("ads-brokers",))
    context = ZkTls(str(client.keystore_path), str(ca.cert_path)).context()
    assert [dict(entry[0] for entry in cert["subject"]) for cert in context.get_ca_certs()] == [
        {"commonName": "ADS CA"}]
    assert context.check_hostname is True


def test_zookeeper_client_refuses_an_encrypted_key_naming_the_key(tmp_path):
    from ads_spark.security.certs import create_ca, issue_certificate

    ca = create_ca(tmp_path / "ca")
    client = issue_certificate(ca, tmp_path, "client", sans=("ads-brokers",), key_password="s3cret-pw")
    with pytest.raises(ValueError, match="zookeeper.ssl.keystore.location") as raised:
        ZkTls(str(client.keystore_path), str(ca.cert_path)).context()
    assert "s3cret-pw" not in str(raised.value)
