"""Broker keys of the Kafka protocol listener (issue #25; docs/DESIGN.md, "Kafka protocol listener").

Declared here and spliced into ``config.BROKER_KEYS``; ``kafka_listener_specs`` turns them into the Kafka
listeners a broker serves (ads_spark/kafka/server.py), checked at config load so that a mistake stops the
broker before it binds anything, with an error naming the key. The grammar is ``listeners``' own
(listener_config.py), under Kafka-port key names; the rules are the Flight listeners' too: Kafka's four
security protocols, a wildcard host is never advertised, and a PLAINTEXT or SASL_PLAINTEXT listener off
loopback needs ``listeners.plaintext.nonloopback.allow``. A Kafka listener NAME is registered as
``kafka.<NAME>`` in ``broker.endpoints`` (a Flight listener name cannot hold a dot), so ZooKeeper's
registration, UpdateMetadata and a connection's ``CallContext.listener_name`` carry it unchanged.
"""

from __future__ import annotations

from typing import Any, Mapping

from ads_spark.config_key import ConfigKey, _int
from ads_spark.errors import InvalidConfigError
from ads_spark.listener_config import (
    DEFAULT_PROTOCOL_MAP, LISTENERS_MAX, NONLOOPBACK_KEY, TLS_PROTOCOLS, WILDCARD_HOSTS, ListenerSpec, is_loopback,
    parse_listener_list, parse_protocol_map,
)

LISTENERS_KEY = "kafka.listeners"
ADVERTISED_KEY = "kafka.advertised.listeners"
PROTOCOL_MAP_KEY = "kafka.listener.security.protocol.map"
REQUEST_MAX_KEY = "socket.request.max.bytes"
QUEUED_MAX_KEY = "queued.max.request.bytes"
CONNECTIONS_MAX_KEY = "kafka.connections.max"
AUTO_CREATE_KEY = "auto.create.topics.enable"
ENDPOINT_PREFIX = "kafka."
ENDPOINT_NAME_CHARS_MAX = 64  # a registration's endpoint names (protocol/request_schemas.py)
CONNECTIONS_MAX_LIMIT = 10_000  # a thread per connection: a bound one config cannot lift past

KAFKA_BROKER_KEYS = [
    ConfigKey(LISTENERS_KEY, "str", "", "NAME://host:port[,...]: one Kafka protocol listener per entry (port 0: "
              "choose one); empty: no Kafka port"),
    ConfigKey(ADVERTISED_KEY, "str", "", "NAME://host:port[,...] the Kafka listeners give clients in Metadata "
              "and FindCoordinator, names among kafka.listeners; empty (or one left out): its own address"),
    ConfigKey(PROTOCOL_MAP_KEY, "str", DEFAULT_PROTOCOL_MAP, "NAME:PROTOCOL[,...]: the security protocol "
              "(PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) of each Kafka listener name"),
    _int(REQUEST_MAX_KEY, 104857600, "largest Kafka request accepted; a bigger size prefix closes the "
         "connection before anything is allocated", 64, 2**31 - 1),
    _int(QUEUED_MAX_KEY, 536870912, "bytes of Kafka requests read and not yet answered, all connections "
         "together; a request waits (bounded) for room (at least socket.request.max.bytes)", 64),
    _int(CONNECTIONS_MAX_KEY, 256, "open Kafka connections per broker; one more is accepted, logged and closed",
         1, CONNECTIONS_MAX_LIMIT),
    ConfigKey(AUTO_CREATE_KEY, "bool", True, "Metadata naming an unknown topic creates it (num.partitions, "
              "default.replication.factor) when the caller may create it"),
]


def endpoint_name(listener_name: str) -> str:
    """The name a Kafka listener is registered under in ``broker.endpoints`` and its calls' contexts."""
    return ENDPOINT_PREFIX + listener_name


def kafka_listener_specs(values: Mapping[str, Any], flight_specs: list[ListenerSpec]) -> list[ListenerSpec]:
    """The Kafka listeners of a broker config (parsed values), each refusal naming its key; [] when
    ``kafka.listeners`` is empty. ``flight_specs``: the Flight listeners (a fixed port may serve one only)."""
    if values[QUEUED_MAX_KEY] < values[REQUEST_MAX_KEY]:
        raise InvalidConfigError(f"invalid value {values[QUEUED_MAX_KEY]} for '{QUEUED_MAX_KEY}': below "
                                 f"'{REQUEST_MAX_KEY}' ({values[REQUEST_MAX_KEY]}), a request that size could "
                                 "never be read")
    protocols = parse_protocol_map(values[PROTOCOL_MAP_KEY], PROTOCOL_MAP_KEY)
    listeners = str(values[LISTENERS_KEY]).strip()
    advertised = str(values[ADVERTISED_KEY]).strip()
    if not listeners:
        if advertised:
            raise InvalidConfigError(f"'{ADVERTISED_KEY}' is set but '{LISTENERS_KEY}' is empty")
        return []
    bound = parse_listener_list(listeners, LISTENERS_KEY)
    told = {a.name: a for a in parse_listener_list(advertised, ADVERTISED_KEY)} if advertised else {}
    unknown = sorted(set(told) - {a.name for a in bound})
    if unknown:
        raise InvalidConfigError(f"invalid value {advertised!r} for '{ADVERTISED_KEY}': listener {unknown[0]} is "
                                 f"not one of {LISTENERS_KEY} ({', '.join(a.name for a in bound)})")
    if len(bound) + len(flight_specs) > LISTENERS_MAX:  # the endpoints of a registration are bounded
        raise InvalidConfigError(f"invalid value {listeners!r} for '{LISTENERS_KEY}': at most {LISTENERS_MAX} "
                                 "listeners with those of 'listeners'")
    long_names = [a.name for a in bound if len(endpoint_name(a.name)) > ENDPOINT_NAME_CHARS_MAX]
    if long_names:
        raise InvalidConfigError(f"invalid value {listeners!r} for '{LISTENERS_KEY}': listener name "
                                 f"{long_names[0]} is longer than {ENDPOINT_NAME_CHARS_MAX - len(ENDPOINT_PREFIX)}")
    flight_ports = {spec.port for spec in flight_specs if spec.port}
    specs = []
    for address in bound:
        protocol = protocols.get(address.name)
        if protocol is None:
            raise InvalidConfigError(f"Kafka listener {address.name} of '{LISTENERS_KEY}' has no security "
                                     f"protocol: map it in '{PROTOCOL_MAP_KEY}' (e.g. {address.name}:PLAINTEXT)")
        if address.port in flight_ports:
            raise InvalidConfigError(f"invalid value {listeners!r} for '{LISTENERS_KEY}': port {address.port} is "
                                     "a Flight listener's (listeners)")
        if protocol not in TLS_PROTOCOLS and not is_loopback(address.host) and not values[NONLOOPBACK_KEY]:
            raise InvalidConfigError(
                f"Kafka listener {address.name} ({protocol}) of '{LISTENERS_KEY}' binds {address.host}, which "
                f"other hosts can reach, without TLS: refused unless '{NONLOOPBACK_KEY}' is true")
        shown = told.get(address.name, address)
        if shown.host in WILDCARD_HOSTS:
            raise InvalidConfigError(f"'{ADVERTISED_KEY}' must name a host clients can reach for Kafka listener "
                                     f"{address.name}: {shown.host} is where a broker binds, not an address")
        specs.append(ListenerSpec(address.name, protocol, address.host, address.port, shown.host, shown.port))
    _check_kafka_security(values, specs)
    return specs


def _check_kafka_security(values: Mapping[str, Any], specs: list[ListenerSpec]) -> None:
    tls = [spec.name for spec in specs if spec.uses_tls]
    if tls and not values["ssl.keystore.location"]:
        raise InvalidConfigError(f"Kafka listener {tls[0]} uses TLS: set 'ssl.keystore.location' to a PEM file "
                                 "with the broker's key and certificate chain")
    if tls and values["ssl.client.auth"] == "required" and not values["ssl.truststore.location"]:
        raise InvalidConfigError("'ssl.client.auth' is required: set 'ssl.truststore.location' to the PEM CA "
                                 "bundle client certificates are verified against")
