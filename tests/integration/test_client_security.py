"""Clients over TLS against real brokers (issue #23 items 2 and 3, the client half).

A producer and a consumer round trip through an SSL listener (server certificate only) and through a
mutual-TLS listener (the secured cluster ``ads cluster up`` runs, with replication between brokers over
mutual TLS and the brokers' own TLS client transport); misconfigured clients (another CA, plaintext at a
TLS listener, no or a foreign client certificate) fail with the non-retriable
SslAuthenticationFailedError within 2 s instead of retrying until their timeout. On a SASL_PLAINTEXT
listener, password clients authenticate and outlive their first token, a client given only
``sasl.token`` works until that token expires and then says it cannot refresh it, and a wrong password
or unknown user fails at once.
"""

from __future__ import annotations

import time

import pytest

from ads_spark.client import Admin, Consumer, Producer, TopicPartition
from ads_spark.errors import SaslAuthenticationFailedError, SslAuthenticationFailedError
from ads_spark.security import certs

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

FAIL_FAST_S = 2.0
RECORDS = 200


def _round_trip(config: dict, topic: str, replication_factor: int) -> None:
    admin = Admin(config)
    try:
        admin.create_topic(topic, partitions=1, replication_factor=replication_factor)
    finally:
        admin.close()
    producer = Producer({**config, "acks": "all", "linger.ms": 1})
    try:
        for index in range(RECORDS):
            producer.produce(topic, f"v{index}".encode())
        assert producer.flush(60) == 0
    finally:
        producer.close()
    consumer = Consumer({**config, "auto.offset.reset": "earliest", "local.reads": "false"})
    try:
        consumer.assign([TopicPartition(topic, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(values) < RECORDS and time.monotonic() < deadline:
            values += [record.value for record in consumer.poll(1.0)]
        assert values == [f"v{index}".encode() for index in range(RECORDS)]
    finally:
        consumer.close()


def _fails_fast(config: dict, match: str, topic: str) -> None:
    """A producer's first record and a consumer's assignment both fail at once, not retriably."""
    producer = Producer({**config, "acks": "all"})
    consumer = Consumer(config)
    try:
        for attempt in (lambda: producer.produce(topic, b"x").result(30),
                        lambda: consumer.assign([TopicPartition(topic, 0)])):
            started = time.monotonic()
            with pytest.raises(SslAuthenticationFailedError, match=match) as info:
                attempt()
            assert time.monotonic() - started < FAIL_FAST_S and not info.value.retriable
    finally:
        producer.close(1)
        consumer.close()


def _without(config: dict, *keys: str) -> dict:
    return {key: value for key, value in config.items() if key not in keys}


def test_ssl_listener_round_trip_and_fast_failures(fresh_cluster, topic_name, tmp_path):
    # The secured cluster's SSL listener without client certificates (and so without the authorizer, which
    # would have no principal for the brokers' own calls).
    cluster = fresh_cluster(brokers=1, security="tls", overrides=["ssl.client.auth=none", "authorizer.class.name="])
    config = _without(cluster.client_config(), "ssl.keystore.location")
    _round_trip(config, topic_name, replication_factor=1)
    other_ca = certs.create_ca(tmp_path / "other-ca", common_name="Another CA")
    _fails_fast({**config, "ssl.truststore.location": str(other_ca.cert_path)}, "not signed by a CA", topic_name)
    _fails_fast(_without(config, "security.protocol", "ssl.truststore.location"), "expects TLS", topic_name)


def test_mutual_tls_round_trip_with_replication_and_certificate_failures(fresh_cluster, topic_name, tmp_path):
    cluster = fresh_cluster(brokers=2, security="tls")
    config = cluster.client_config()
    assert config["security.protocol"] == "SSL" and config["ssl.keystore.location"]
    _round_trip(config, topic_name, replication_factor=2)  # acks=all: the follower fetched over mutual TLS
    _fails_fast(_without(config, "ssl.keystore.location"), "requires a client certificate", topic_name)
    rogue_ca = certs.create_ca(tmp_path / "rogue-ca", common_name="Rogue CA")
    rogue = certs.issue_certificate(rogue_ca, tmp_path / "rogue", "admin", sans=("admin",))
    _fails_fast({**config, "ssl.keystore.location": str(rogue.keystore_path)}, "refused this client's certificate",
                topic_name)
    _fails_fast(_without(config, "security.protocol", "ssl.truststore.location", "ssl.keystore.location"),
                "expects TLS", topic_name)


TOKEN_LIFETIME_MS = 3000  # short, so the clients below outlive their first token


@pytest.fixture
def sasl_broker(tmp_path, zk_connect):
    """An in-process broker with a PLAINTEXT (inter-broker, admin) and a SASL_PLAINTEXT listener; user alice."""
    from ads_spark.broker.broker import Broker
    from ads_spark.broker.zk.membership import ZkMembership
    from ads_spark.config import BrokerConfig

    config = BrokerConfig({"broker.id": "1", "log.dirs": str(tmp_path / "data"), "metrics.port": "-1",
                           "zookeeper.connect": zk_connect, "zookeeper.session.timeout.ms": "4000",
                           "controlled.shutdown.enable": "false",
                           "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                           "inter.broker.listener.name": "PLAINTEXT", "credential.hash.iterations": "4096",
                           "authentication.token.lifetime.ms": str(TOKEN_LIFETIME_MS)})
    broker = Broker(config, zk_factory=ZkMembership)
    try:
        broker.start()
        admin = Admin({"bootstrap.servers": f"127.0.0.1:{broker.endpoints['PLAINTEXT'][1]}"})
        try:
            admin.upsert_user("alice", "alice-secret")
        finally:
            admin.close()
        yield broker
    finally:
        broker.stop(controlled=False)


def _list_topics(config: dict) -> list[str]:
    admin = Admin(config)
    try:
        return admin.list_topics()
    finally:
        admin.close()


def _jaas(username: str, password: str) -> str:
    return (f'org.apache.kafka.common.security.plain.PlainLoginModule required username="{username}" '
            f'password="{password}";')


def test_sasl_clients_authenticate_once_refresh_their_token_and_fail_fast_on_a_wrong_password(sasl_broker,
                                                                                              topic_name):
    from ads_spark.protocol.transport import ClientTransport

    config = {"bootstrap.servers": f"127.0.0.1:{sasl_broker.endpoints['SASL_PLAINTEXT'][1]}",
              "security.protocol": "SASL_PLAINTEXT", "sasl.jaas.config": _jaas("alice", "alice-secret")}
    _round_trip(config, topic_name, replication_factor=1)
    # Outlive the first token: the clients' metadata calls and new streams get a new one on their own.
    time.sleep(TOKEN_LIFETIME_MS / 1000 + 0.5)
    _round_trip(config, topic_name + "-later", replication_factor=1)
    # What Spark executors get: a token, no password.
    token = ClientTransport.from_config(config).tokens.token()
    assert token.startswith("ads1.")
    token_config = {**_without(config, "sasl.jaas.config"), "sasl.token": token}
    _round_trip(token_config, topic_name + "-token", replication_factor=1)
    time.sleep(TOKEN_LIFETIME_MS / 1000 + 0.5)
    with pytest.raises(SaslAuthenticationFailedError, match="sasl.token .*cannot be refreshed"):
        _list_topics(token_config)
    for wrong in ({**config, "sasl.jaas.config": _jaas("alice", "wrong")},
                  {**config, "sasl.jaas.config": _jaas("nobody", "alice-secret")}):
        started = time.monotonic()
        with pytest.raises(SaslAuthenticationFailedError, match="invalid username or password") as info:
            _list_topics(wrong)
        assert time.monotonic() - started < FAIL_FAST_S and not info.value.retriable
