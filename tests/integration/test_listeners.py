"""Kafka-style listeners (issue #23 item 1): one Flight server per listener, metadata per listener.

Two brokers, each with ``INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0`` (both PLAINTEXT through the
protocol map) and ``inter.broker.listener.name=INTERNAL``: a client bootstrapped at an EXTERNAL address
is given only EXTERNAL addresses and produces and consumes through them, another broker (or a client
of the INTERNAL listener) only INTERNAL ones, and the follower replicates from the leader's INTERNAL
listener. The brokers run in this process (as in test_zookeeper_guard.py) so that the test can read
which server and which fetcher each one uses; ZooKeeper is the real embedded one.
"""

from __future__ import annotations

import pytest

from ads_spark.client import Admin, Consumer, Producer, TopicPartition
from tests.fixtures.waiting import wait_until

pytestmark = pytest.mark.integration

WAIT_S = 30.0
LISTENERS = {"listeners": "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
             "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
             "inter.broker.listener.name": "INTERNAL"}


def _start_brokers(tmp_path, connect: str, count: int) -> list:
    from ads_spark.broker.broker import Broker
    from ads_spark.broker.zk.membership import ZkMembership
    from ads_spark.config import BrokerConfig

    brokers = []
    try:
        for broker_id in range(1, count + 1):
            config = BrokerConfig({"broker.id": str(broker_id), "log.dirs": str(tmp_path / f"data-{broker_id}"),
                                   "metrics.port": "-1", "zookeeper.connect": connect,
                                   "zookeeper.session.timeout.ms": "4000", "controlled.shutdown.enable": "false",
                                   "replica.fetch.wait.max.ms": "200", **LISTENERS})
            brokers.append(Broker(config, zk_factory=ZkMembership))
            brokers[-1].start()
    except BaseException:
        _stop(brokers)
        raise
    return brokers


def _stop(brokers: list) -> None:
    for broker in reversed(brokers):
        broker.stop(controlled=False)


def _bootstrap(brokers, listener: str) -> str:
    return ",".join(f"127.0.0.1:{broker.endpoints[listener][1]}" for broker in brokers)


def _addresses(cluster: dict) -> dict[int, int]:
    return {b["id"]: b["port"] for b in cluster["brokers"]}


def test_clients_get_the_endpoints_of_their_listener_and_brokers_replicate_over_theirs(
        tmp_path, zookeeper_server, zk_chroot, topic_name):
    brokers = _start_brokers(tmp_path, f"{zookeeper_server.connect_string}{zk_chroot}", 2)
    external_admin = Admin({"bootstrap.servers": _bootstrap(brokers, "EXTERNAL"), "request.timeout.ms": 5000})
    internal_admin = Admin({"bootstrap.servers": _bootstrap(brokers, "INTERNAL"), "request.timeout.ms": 5000})
    try:
        for broker in brokers:
            assert set(broker.servers) == {"INTERNAL", "EXTERNAL"}
            assert broker.server is broker.servers["INTERNAL"]
            assert broker.endpoints["INTERNAL"] == ("127.0.0.1", broker.servers["INTERNAL"].port, "PLAINTEXT")
            assert broker.endpoints["EXTERNAL"] == ("127.0.0.1", broker.servers["EXTERNAL"].port, "PLAINTEXT")
            assert broker.port == broker.servers["INTERNAL"].port != broker.servers["EXTERNAL"].port
        registered = brokers[0].zk.zk.live_brokers()
        assert {b: info["endpoints"]["EXTERNAL"]["port"] for b, info in registered.items()} == {
            b.broker_id: b.endpoints["EXTERNAL"][1] for b in brokers}
        assert all(info["port"] == info["endpoints"]["INTERNAL"]["port"] for info in registered.values())

        external = {b.broker_id: b.endpoints["EXTERNAL"][1] for b in brokers}
        internal = {b.broker_id: b.endpoints["INTERNAL"][1] for b in brokers}
        wait_until(lambda: _addresses(external_admin.cluster()) == external, WAIT_S, what="EXTERNAL metadata")
        assert _addresses(internal_admin.cluster()) == internal

        external_admin.create_topic(topic_name, partitions=1, replication_factor=2,
                                    config={"min.insync.replicas": "2"})
        bootstrap = _bootstrap(brokers, "EXTERNAL")
        with Producer({"bootstrap.servers": bootstrap, "acks": "all"}) as producer:
            offsets = [producer.produce(topic_name, value=f"v{i}".encode(), partition=0).result(timeout=WAIT_S).offset
                       for i in range(3)]
        assert offsets == [0, 1, 2]  # acks=all with min ISR 2: the follower has every record

        leader = next(b for b in brokers if (p := b.replica_manager.maybe_get(topic_name, 0)) and p.is_leader)
        follower = next(b for b in brokers if b is not leader)
        # The follower's fetcher dials the leader's INTERNAL server (thread key: leader, index, host, port).
        assert {key[3] for key in follower.fetchers._threads} == {leader.endpoints["INTERNAL"][1]}

        consumer = Consumer({"bootstrap.servers": bootstrap, "local.reads": "false"})
        try:
            consumer.assign([TopicPartition(topic_name, 0, 0)])
            polled: list = []
            wait_until(lambda: polled.extend(consumer.poll(timeout=1.0)) or len(polled) >= 3, WAIT_S,
                       what="the three records")
            assert [r.value for r in polled] == [b"v0", b"v1", b"v2"]
        finally:
            consumer.close()
    finally:
        external_admin.close()
        internal_admin.close()
        _stop(brokers)


def test_an_ssl_listener_serves_tls_and_requires_a_client_certificate_when_told(tmp_path):
    """Next to a PLAINTEXT listener, an SSL one is a ``grpc+tls`` server with the keystore's certificate; with
    ssl.client.auth=required a client without a certificate is refused in the handshake."""
    import pyarrow.flight as flight

    from ads_spark.broker.broker import Broker
    from ads_spark.config import BrokerConfig
    from ads_spark.security.certs import create_ca, issue_certificate
    from ads_spark.security.tls import read_pem_keystore

    ca = create_ca(tmp_path / "ca")
    issued = issue_certificate(ca, tmp_path / "certs", "broker-1")
    config = BrokerConfig({"broker.id": "1", "log.dirs": str(tmp_path / "data"), "zookeeper.connect": "127.0.0.1:1",
                           "metrics.port": "-1", "listeners": "INTERNAL://127.0.0.1:0,SSL://127.0.0.1:0",
                           "listener.security.protocol.map": "INTERNAL:PLAINTEXT,SSL:SSL",
                           "ssl.keystore.location": str(issued.keystore_path),
                           "ssl.truststore.location": str(tmp_path / "ca" / "ca.pem"), "ssl.client.auth": "required"})
    broker = Broker(config)  # no ZooKeeper: start() opens the servers at once
    roots = (tmp_path / "ca" / "ca.pem").read_bytes()
    chain, key = read_pem_keystore(str(issued.keystore_path))
    try:
        broker.start()
        assert broker.endpoints["SSL"][2] == "SSL" and broker.servers["SSL"].security_protocol == "SSL"
        assert broker.server is broker.servers["INTERNAL"]  # the first listener is the inter-broker one
        port = broker.endpoints["SSL"][1]
        with flight.connect(f"grpc+tls://127.0.0.1:{port}", tls_root_certs=roots, cert_chain=chain,
                            private_key=key) as client:
            assert "metadata" in {action.type for action in client.list_actions()}
        with flight.connect(f"grpc+tls://127.0.0.1:{port}", tls_root_certs=roots) as anonymous:
            with pytest.raises(flight.FlightUnavailableError):
                list(anonymous.list_actions(flight.FlightCallOptions(timeout=10)))
    finally:
        broker.stop(controlled=False)
