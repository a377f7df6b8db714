"""Kafka-style listeners and the security keys of issue #23, as config: parsing, and every refusal naming its key.

What the broker does with the parsed listeners (one server each, endpoints in metadata) is in
tests/integration/test_listeners.py; this is the grammar and the checks at load, which stop a broker
before it binds anything.
"""

from __future__ import annotations

import re

import pytest

from ads_spark.config import BrokerConfig
from ads_spark.errors import InvalidConfigError
from ads_spark.listener_config import ListenerSpec, is_loopback

BASE = {"broker.id": "1", "log.dirs": "/tmp/ads-unused", "zookeeper.connect": "127.0.0.1:1"}
TWO = {"listeners": "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
       "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT"}
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
        'password="broker-secret";')


def _config(**values) -> BrokerConfig:
    return BrokerConfig({**BASE, **{key.replace("_", "."): value for key, value in values.items()}})


def test_listeners_parse_into_specs_with_protocols_and_advertised_addresses():
    config = BrokerConfig({**BASE, "listeners": "internal://127.0.0.1:0,EXTERNAL://[::1]:9093,SSL://localhost:0",
                           "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:SASL_PLAINTEXT,SSL:SSL",
                           "advertised.listeners": "EXTERNAL://broker-1.example:19093",
                           "inter.broker.listener.name": "internal", "ssl.keystore.location": "/k.pem",
                           "sasl.jaas.config": JAAS})
    assert config.listener_specs() == [
        ListenerSpec("INTERNAL", "PLAINTEXT", "127.0.0.1", 0, "127.0.0.1", 0),  # names upper-cased, as Kafka
        ListenerSpec("EXTERNAL", "SASL_PLAINTEXT", "::1", 9093, "broker-1.example", 19093),
        ListenerSpec("SSL", "SSL", "localhost", 0, "localhost", 0),  # not advertised: its own address
    ]
    assert config.inter_broker_listener_name == "INTERNAL"
    assert config.security_enabled
    # Callers from before there were several listeners get the inter-broker listener's addresses.
    assert config.listen_host_port == ("127.0.0.1", 0)
    assert config.advertised_host_port(bound_port=4444) == ("127.0.0.1", 4444)


@pytest.mark.parametrize("listeners, expected", [
    ("PLAINTEXT://127.0.0.1:0", ("PLAINTEXT", "127.0.0.1", 0)),  # the default, as before
    ("127.0.0.1:9000", ("PLAINTEXT", "127.0.0.1", 9000)),  # a bare host:port, as ADS accepted before
    ("PLAINTEXT://:9001", ("PLAINTEXT", "127.0.0.1", 9001)),  # an empty host: loopback, as before
])
def test_the_one_listener_forms_of_before_keep_working(listeners, expected):
    config = _config(listeners=listeners)
    (spec,) = config.listener_specs()
    assert (spec.name, spec.bind_host, spec.port) == expected
    assert config.inter_broker_listener_name == "PLAINTEXT" and not config.security_enabled


def test_the_inter_broker_listener_is_the_first_unless_named():
    assert BrokerConfig({**BASE, **TWO}).inter_broker_listener_name == "INTERNAL"
    named = BrokerConfig({**BASE, **TWO, "inter.broker.listener.name": "EXTERNAL"})
    assert named.inter_broker_listener_name == "EXTERNAL"
    assert named.listen_host_port == ("127.0.0.1", 0)


@pytest.mark.parametrize("values, key", [
    ({"listeners": "A://127.0.0.1:1,a://127.0.0.1:2", "listener.security.protocol.map": "A:PLAINTEXT"}, "listeners"),
    ({"listeners": "A://127.0.0.1:7,B://127.0.0.1:7",
      "listener.security.protocol.map": "A:PLAINTEXT,B:PLAINTEXT"}, "listeners"),
    ({"listeners": "PLAINTEXT://::1:0"}, "listeners"),  # IPv6 needs brackets
    ({"listeners": "PLAINTEXT://[zz]:0"}, "listeners"),
    ({"listeners": "BAD-NAME://127.0.0.1:0"}, "listeners"),
    ({"listeners": "PLAINTEXT://127.0.0.1"}, "listeners"),
    ({"listeners": ""}, "listeners"),
    ({"listeners": ",".join(f"L{i}://127.0.0.1:0" for i in range(17))}, "listeners"),
    ({"listeners": "INTERNAL://127.0.0.1:0"}, "listener.security.protocol.map"),  # no protocol for the name
    ({"listener.security.protocol.map": "PLAINTEXT:TLS"}, "listener.security.protocol.map"),
    ({"listener.security.protocol.map": "PLAINTEXT"}, "listener.security.protocol.map"),
    ({"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,plaintext:SSL"}, "listener.security.protocol.map"),
    ({**TWO, "advertised.listeners": "OTHER://h:1"}, "advertised.listeners"),  # not a subset of listeners
    ({**TWO, "advertised.listeners": "EXTERNAL://0.0.0.0:0"}, "advertised.listeners"),  # wildcard advertised
    ({**TWO, "inter.broker.listener.name": "REPLICATION"}, "inter.broker.listener.name"),
    ({"listeners": "PLAINTEXT://0.0.0.0:0"}, "listeners.plaintext.nonloopback.allow"),
    ({"listeners": "PLAINTEXT://10.1.2.3:0"}, "listeners.plaintext.nonloopback.allow"),
    ({"listeners": "PLAINTEXT://broker-1.example:0"}, "listeners.plaintext.nonloopback.allow"),
    ({"listeners": "SASL_PLAINTEXT://0.0.0.0:0", "sasl.jaas.config": JAAS,
      "advertised.listeners": "SASL_PLAINTEXT://h:1"}, "listeners.plaintext.nonloopback.allow"),
    ({"listeners": "SSL://127.0.0.1:0"}, "ssl.keystore.location"),
    ({"listeners": "SASL_SSL://127.0.0.1:0", "sasl.jaas.config": JAAS}, "ssl.keystore.location"),
    ({"ssl.client.auth": "requested"}, "ssl.client.auth"),
    ({"ssl.client.auth": "always"}, "ssl.client.auth"),
    ({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": "/k.pem", "ssl.client.auth": "required"},
     "ssl.truststore.location"),
    ({"ssl.keystore.type": "JKS"}, "ssl.keystore.type"),
    ({"ssl.truststore.type": "PKCS12"}, "ssl.truststore.type"),
    ({"ssl.endpoint.identification.algorithm": "none"}, "ssl.endpoint.identification.algorithm"),
    ({"ssl.endpoint.identification.algorithm": ""}, "ssl.endpoint.identification.algorithm"),
    ({"ssl.principal.mapping.rules": "RULE:unclosed"}, "ssl.principal.mapping.rules"),
    ({"sasl.enabled.mechanisms": "SCRAM-SHA-256"}, "sasl.enabled.mechanisms"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0"}, "sasl.jaas.config"),  # inter-broker SASL: own credentials
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.jaas.config": "not jaas"}, "sasl.jaas.config"),
    ({"authorizer.class.name": "com.example.MyAuthorizer"}, "authorizer.class.name"),
    ({"super.users": "alice"}, "super.users"),
    ({"allow.everyone.if.no.acl.found": "maybe"}, "allow.everyone.if.no.acl.found"),
    ({"authentication.token.lifetime.ms": "0"}, "authentication.token.lifetime.ms"),
    ({"credential.hash.iterations": "1000"}, "credential.hash.iterations"),
    ({"zookeeper.set.acl": "yes"}, "zookeeper.set.acl"),
    ({"zookeeper.ssl.client.enable": "1"}, "zookeeper.ssl.client.enable"),
    ({"zookeeper.ssl.endpoint.identification.algorithm": "HTTP"}, "zookeeper.ssl.endpoint.identification.algorithm"),
])
def test_each_refusal_names_its_key(values, key):
    # The key itself, not a longer key holding it ('listeners' in 'advertised.listeners').
    with pytest.raises(InvalidConfigError, match=rf"(?<![\w.]){re.escape(key)}(?![\w.])"):
        BrokerConfig({**BASE, **values})


def test_a_refusal_shows_neither_the_key_password_nor_the_jaas_string():
    secret = "hunter2-do-not-show"
    with pytest.raises(InvalidConfigError) as refused:
        BrokerConfig({**BASE, "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
                      "sasl.jaas.config": f'org.example.Other required username="u" password="{secret}";'})
    assert secret not in str(refused.value)
    with pytest.raises(InvalidConfigError) as refused:
        BrokerConfig({**BASE, "listeners": "SSL://127.0.0.1:0", "ssl.key.password": secret})
    assert secret not in str(refused.value)


def test_ssl_client_auth_requested_says_why():
    with pytest.raises(InvalidConfigError, match="Flight cannot request a certificate without requiring it"):
        _config(ssl_client_auth="requested")


def test_plaintext_off_loopback_is_allowed_only_when_asked_for():
    for host in ("127.0.0.1", "127.8.9.10", "[::1]", "localhost"):
        assert _config(listeners=f"PLAINTEXT://{host}:0").listener_specs()[0].bind_host == host.strip("[]")
    allowed = BrokerConfig({**BASE, "listeners": "PLAINTEXT://0.0.0.0:9092", "advertised.listeners":
                            "PLAINTEXT://10.0.0.5:9092", "listeners.plaintext.nonloopback.allow": "true"})
    assert allowed.advertised_host_port(bound_port=9092) == ("10.0.0.5", 9092)
    # A TLS listener may bind any address without it.
    tls = BrokerConfig({**BASE, "listeners": "SSL://0.0.0.0:9093", "advertised.listeners": "SSL://10.0.0.5:9093",
                        "ssl.keystore.location": "/k.pem"})
    assert tls.listener_specs()[0].protocol == "SSL"
    assert [is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.1", "::1", "LOCALHOST")] == [
        False, False, False, True, True]


def test_the_inter_broker_client_config_is_the_inter_broker_listeners():
    assert BrokerConfig({**BASE, **TWO}).inter_broker_client_config("127.0.0.1:1") == {
        "bootstrap.servers": "127.0.0.1:1", "security.protocol": "PLAINTEXT"}
    tls = BrokerConfig({**BASE, "listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": "/k.pem",
                        "ssl.truststore.location": "/ca.pem", "ssl.key.password": "pw"})
    assert tls.inter_broker_client_config("h:1") == {
        "bootstrap.servers": "h:1", "security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "https",
        "ssl.truststore.location": "/ca.pem", "ssl.keystore.location": "/k.pem", "ssl.key.password": "pw"}
    sasl = BrokerConfig({**BASE, "listeners": "SASL_SSL://127.0.0.1:0", "ssl.keystore.location": "/k.pem",
                         "sasl.jaas.config": JAAS})
    config = sasl.inter_broker_client_config("h:1")
    assert config["security.protocol"] == "SASL_SSL" and config["sasl.jaas.config"] == JAAS
    assert config["sasl.mechanism"] == "PLAIN" and config["ssl.endpoint.identification.algorithm"] == "https"


def test_security_is_enabled_by_a_non_plaintext_listener_or_the_authorizer():
    assert not _config().security_enabled
    assert BrokerConfig({**BASE, "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}).security_enabled
    assert BrokerConfig({**BASE, "listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.jaas.config": JAAS,
                         "sasl.enabled.mechanisms": "PLAIN"}).security_enabled


# ---- endpoints in the registration, the controller's requests and the metadata cache ----------------------


def _registration(broker_id: int, endpoints: dict | None) -> dict:
    info = {"id": broker_id, "host": "10.0.0.%d" % broker_id, "port": 9000 + broker_id, "rack": None}
    if endpoints is not None:
        info["endpoints"] = endpoints
    return info


def test_metadata_answers_each_broker_on_the_callers_listener_and_leaves_out_brokers_without_it():
    from ads_spark.broker.metadata_cache import MetadataCache
    from ads_spark.protocol import request_schemas
    from ads_spark.replication.controller_decisions import brokers_json
    from ads_spark.replication.controller_state import live_from_dicts

    both = {"INTERNAL": {"host": "10.0.0.1", "port": 9001, "protocol": "PLAINTEXT"},
            "EXTERNAL": {"host": "broker-1.example", "port": 19001, "protocol": "SSL"}}
    internal_only = {"INTERNAL": {"host": "10.0.0.2", "port": 9002, "protocol": "PLAINTEXT"}}
    registered = {1: _registration(1, both), 2: _registration(2, internal_only), 3: _registration(3, None)}
    # The controller carries the registrations' endpoints to every broker (update_metadata's "brokers").
    live = live_from_dicts({b: {k: v for k, v in info.items() if k != "id"} for b, info in registered.items()})

    class _State:
        pass

    state = _State()
    state.live = live
    brokers = brokers_json(state)
    assert brokers[0]["endpoints"] == both and "endpoints" not in brokers[2]
    body = {"controller_id": 1, "controller_epoch": 1, "brokers": brokers}
    request_schemas.checker("update_metadata")(body)  # the schema takes them
    cache = MetadataCache()
    cache.apply_update(body)

    def addresses(listener):
        return [(b["id"], b["host"], b["port"]) for b in cache.to_json(listener, "INTERNAL")["brokers"]]

    assert addresses("EXTERNAL") == [(1, "broker-1.example", 19001)]
    # Broker 3 registered before listeners had names: its one address counts under the inter-broker name.
    assert addresses("INTERNAL") == [(1, "10.0.0.1", 9001), (2, "10.0.0.2", 9002), (3, "10.0.0.3", 9003)]
    assert all("endpoints" not in b for b in cache.to_json("EXTERNAL", "INTERNAL")["brokers"])
