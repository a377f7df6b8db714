"""ZooKeeper protected (issue #23 item 5): TLS only, x509 client certificates, ACLs on every znode ADS creates.

Against a real embedded ZooKeeper serving TLS only (``secured_zookeeper``), one chroot per test. The
brokers' ZooKeeper identity is ``CN=ads-brokers``; ``CN=mallory`` holds a certificate of the same CA.
"""

from __future__ import annotations

import time
import uuid

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.security import OPEN_ACL_UNSAFE, Permissions

from ads_spark.broker.zk.client import ZkClient
from ads_spark.broker.zk.model import (
    BROKER_IDS_PATH, CONTROLLER_EPOCH_PATH, CONTROLLER_PATH, ZooKeeperUnavailable, broker_path, partition_state_path,
    topic_path,
)
from ads_spark.broker.zk.session import ZkSession, ZooKeeperAccessDenied
from ads_spark.broker.zk.tls import ZkTls, ZooKeeperTlsError
from ads_spark.cli.main import main as ads_main
from tests.fixtures.zookeeper import BROKER_ZK_DN, acl_walk

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

REFUSED_CONNECT_TIMEOUT_S = 3.0
CALL_TIMEOUT_S = 10.0
USERS_PATH, TOKEN_SECRETS_PATH = "/config/users", "/security/token_secrets"


@pytest.fixture
def chroot() -> str:
    return f"/ads-secure-{uuid.uuid4().hex}"


@pytest.fixture
def sessions(secured_zookeeper, chroot):
    """Open ZkClients on this test's chroot (broker identity and set_acl by default); all closed afterwards."""
    opened: list[ZkSession] = []

    def open_session(tls: ZkTls | None = None, set_acl: bool = True, hosts: str | None = None,
                     connect_timeout_s: float = 10.0) -> ZkClient:
        client = ZkClient(hosts or secured_zookeeper.connect_string, chroot=chroot, session_timeout_ms=4000,
                          connect_timeout_s=connect_timeout_s, tls=tls or secured_zookeeper.broker_tls,
                          set_acl=set_acl)
        opened.append(client)
        return client.connect()

    yield open_session
    for client in opened:
        client.close()


@pytest.fixture
def mallory_client(secured_zookeeper):
    """A started kazoo client with another certificate of the same CA (CN=mallory), on a given chroot."""
    opened = []

    def start(zookeeper, chroot: str):
        client = ZkSession(zookeeper.connect_string + chroot, tls=zookeeper.other_tls).open_unmanaged_client()
        opened.append(client)
        return client

    yield start
    for client in opened:
        client.stop()
        client.close()


def _broker_like_tree(zk: ZkClient) -> None:
    """What a broker (and the security store) creates: registration, controller, a topic, users, secrets."""
    zk.register_broker(1, "127.0.0.1", 9092, None)
    assert zk.try_become_controller(1) is not None
    zk.create_topic("orders", {0: [1]}, {"retention.ms": "1000"})
    zk.client.ensure_path_async(USERS_PATH).get(timeout=CALL_TIMEOUT_S)
    zk.client.create_async(f"{USERS_PATH}/alice", b'{"salted": "x"}').get(timeout=CALL_TIMEOUT_S)
    zk.client.create_async(TOKEN_SECRETS_PATH, b'["c2VjcmV0"]', makepath=True).get(timeout=CALL_TIMEOUT_S)


def _problems(walk: dict) -> list[str]:
    """Znodes anyone may change, and secrets anyone may read."""
    problems = []
    for path, acls in walk.items():
        world = sum(acl.perms for acl in acls if acl.id.scheme == "world")
        if world & ~Permissions.READ:
            problems.append(f"{path} is world-writable: {acls}")
        secret = path.startswith((USERS_PATH, "/security"))
        if secret and world:
            problems.append(f"{path} is a secret readable by anyone: {acls}")
        if any(acl.id.scheme not in ("world", "x509") or acl.id.scheme == "x509" and acl.id.id != BROKER_ZK_DN
               for acl in acls):
            problems.append(f"{path} grants someone else: {acls}")
    return problems


def test_plaintext_and_certificate_less_clients_cannot_connect(secured_zookeeper):
    for tls_kwargs in ({}, {"use_ssl": True, "ca": str(secured_zookeeper.ca_path), "verify_certs": True}):
        client = KazooClient(hosts=secured_zookeeper.connect_string, timeout=2.0,
                             connection_retry={"max_tries": 1}, **tls_kwargs)
        with pytest.raises(KazooTimeoutError):
            client.start(timeout=REFUSED_CONNECT_TIMEOUT_S)
        client.close()


def test_rogue_ca_certificate_is_refused(sessions, secured_zookeeper):
    started = time.monotonic()
    with pytest.raises(ZooKeeperUnavailable):
        sessions(tls=secured_zookeeper.rogue_tls, connect_timeout_s=REFUSED_CONNECT_TIMEOUT_S)
    assert time.monotonic() - started < REFUSED_CONNECT_TIMEOUT_S * 3


def test_another_certificate_of_the_ca_cannot_touch_broker_znodes(sessions, secured_zookeeper, mallory_client):
    broker = sessions()
    _broker_like_tree(broker)
    with pytest.raises(ZooKeeperAccessDenied):  # an ADS session needs to own the tree's znodes
        sessions(tls=secured_zookeeper.other_tls)
    raw = mallory_client(secured_zookeeper, broker.chroot)  # connects: same CA, another DN
    state = partition_state_path("orders", 0)
    attempts = {
        "delete the registration": lambda: raw.delete_async(broker_path(1)),
        "take the controller": lambda: raw.set_async(CONTROLLER_PATH, b'{"broker_id": 666}'),
        "bump the controller epoch": lambda: raw.set_async(CONTROLLER_EPOCH_PATH, b"999"),
        "rewrite partition state": lambda: raw.set_async(state, b'{"leader": 666}'),
        "delete partition state": lambda: raw.delete_async(state),
        "register a fake broker": lambda: raw.create_async(broker_path(666), b"{}", ephemeral=True),
        "create a topic": lambda: raw.create_async(topic_path("evil"), b"{}"),
        "grant itself an ACL": lambda: raw.create_async("/acls/LITERAL/Topic/orders", b"[]", makepath=True),
        "open a znode's ACL": lambda: raw.set_acls_async(BROKER_IDS_PATH, OPEN_ACL_UNSAFE),
        "read a credential": lambda: raw.get_async(f"{USERS_PATH}/alice"),
        "list the users": lambda: raw.get_children_async(USERS_PATH),
        "read the token secrets": lambda: raw.get_async(TOKEN_SECRETS_PATH),
    }
    for what, attempt in attempts.items():
        with pytest.raises(NoAuthError):
            attempt().get(timeout=CALL_TIMEOUT_S)
            pytest.fail(f"a certificate of another DN could {what}")
    # Reading what is not secret still works (tools, monitoring), and the broker's znodes are intact.
    assert raw.get_async(state).get(timeout=CALL_TIMEOUT_S)[0] == broker.client.get(state)[0]
    assert broker.live_brokers().keys() == {1} and broker.controller_id() == 1


def test_walk_of_the_chroot_finds_nothing_open(sessions, secured_zookeeper):
    broker = sessions()
    _broker_like_tree(broker)
    walk = acl_walk(broker.client)
    assert {"/", broker_path(1), CONTROLLER_PATH, partition_state_path("orders", 0), f"{USERS_PATH}/alice",
            TOKEN_SECRETS_PATH} <= walk.keys()
    assert _problems(walk) == []
    # The chroot node itself and its parent side: created by the session's bootstrap client with the policy too.
    outside = KazooClient(hosts=secured_zookeeper.connect_string, use_ssl=True, timeout=4.0,
                          ca=secured_zookeeper.broker_tls.truststore_location,
                          certfile=secured_zookeeper.broker_tls.keystore_location,
                          keyfile=secured_zookeeper.broker_tls.keystore_location)
    outside.start(timeout=10)
    try:
        chroot_acls, _ = outside.get_acls_async(broker.chroot).get(timeout=CALL_TIMEOUT_S)
    finally:
        outside.stop()
        outside.close()
    assert _problems({broker.chroot: chroot_acls}) == []


def test_zookeeper_certificate_not_naming_the_dialled_host_is_refused(sessions, secured_zookeeper):
    # The server certificate names 127.0.0.1 only; "localhost" resolves there but is not in its SAN.
    by_name = f"localhost:{secured_zookeeper.port}"
    started = time.monotonic()
    with pytest.raises(ZooKeeperTlsError, match="Hostname mismatch"):
        sessions(hosts=by_name)
    assert time.monotonic() - started < 5.0  # refused at once, not retried until the connect timeout
    unchecked = ZkTls(secured_zookeeper.broker_tls.keystore_location,
                      secured_zookeeper.broker_tls.truststore_location, check_hostname=False)
    assert sessions(tls=unchecked, hosts=by_name).connected  # the hostname was the only reason


def test_ads_zookeeper_secure_locks_down_a_chroot_created_open(sessions, secured_zookeeper, chroot, tmp_path,
                                                              capsys, mallory_client):
    broker = sessions(set_acl=False)  # an older cluster: TLS, but every znode open
    _broker_like_tree(broker)
    assert _problems(acl_walk(broker.client)) != []
    config = tmp_path / "zk-admin.properties"
    config.write_text("zookeeper.ssl.client.enable=true\n"
                      f"zookeeper.ssl.keystore.location={secured_zookeeper.broker_tls.keystore_location}\n"
                      f"zookeeper.ssl.truststore.location={secured_zookeeper.broker_tls.truststore_location}\n")
    assert ads_main(["zookeeper", "secure", "--zookeeper", f"{secured_zookeeper.connect_string}{chroot}",
                     "--command-config", str(config)]) == 0
    walk = acl_walk(broker.client)
    out = capsys.readouterr().out
    assert f"secured {len(walk)} znodes" in out and "4 secret" in out  # /config/users(/alice), /security(/token_secrets)
    assert "keystore" not in out and "BEGIN" not in out
    assert _problems(walk) == []
    with pytest.raises(NoAuthError):
        mallory_client(secured_zookeeper, chroot).delete_async(broker_path(1)).get(timeout=CALL_TIMEOUT_S)


def test_ads_zookeeper_secure_refuses_unknown_keys(secured_zookeeper, chroot, tmp_path, capsys):
    config = tmp_path / "bad.properties"
    config.write_text("zookeeper.ssl.client.enable=true\nssl.key.password=hunter2\n")
    assert ads_main(["zookeeper", "secure", "--zookeeper", f"{secured_zookeeper.connect_string}{chroot}",
                     "--command-config", str(config)]) == 1
    err = capsys.readouterr().err
    assert "ssl.key.password" in err and "hunter2" not in err
