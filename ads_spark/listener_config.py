"""Kafka-style listeners: ``listeners``, ``advertised.listeners``, the protocol map, the inter-broker name.

A broker serves one Flight server per listener (``NAME://host:port``); each listener's security
protocol comes from ``listener.security.protocol.map`` (Kafka's default maps each protocol name to
itself, so ``SSL://h:p`` is an SSL listener). Parsed here once, at config load, so that every mistake
stops the broker before it binds anything, with an error naming the key. Kept out of ``config.py``
(which holds the key tables) because it is a grammar of its own; ``check_security`` holds the checks of
the TLS and SASL keys that only make sense together with the listeners (each refusal names its key).

ADS's own rule: a listener without TLS (PLAINTEXT, SASL_PLAINTEXT) bound to an address other hosts can
reach is refused unless ``listeners.plaintext.nonloopback.allow=true``: unencrypted records (and, for
SASL_PLAINTEXT, passwords) should cross a network only when someone decided they may.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any, Mapping

from ads_spark.errors import InvalidConfigError
from ads_spark.security.authorizer import parse_super_users
from ads_spark.security.client_security import parse_jaas_config

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})
SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})
DEFAULT_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in SECURITY_PROTOCOLS)
LISTENERS_MAX = 16  # a bound on servers (and threads) one config can ask for
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", "[::]"})
NONLOOPBACK_KEY = "listeners.plaintext.nonloopback.allow"

_NAME = re.compile(r"^[A-Za-z0-9_]{1,64}$")
_HOST_NAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}"
                        r"[A-Za-z0-9])?)*$")


@dataclass(frozen=True, slots=True)
class ListenerAddress:
    """One ``NAME://host:port`` entry as written (name upper-cased; host without IPv6 brackets)."""

    name: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    """One listener a broker serves: where it binds and what it advertises (port 0: the bound port)."""

    name: str
    protocol: str
    bind_host: str
    port: int
    advertised_host: str
    advertised_port: int

    @property
    def uses_tls(self) -> bool:
        return self.protocol in TLS_PROTOCOLS

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in SASL_PROTOCOLS


def _refuse(key: str, value: str, problem: str) -> InvalidConfigError:
    return InvalidConfigError(f"invalid value {value!r} for '{key}': {problem}")


def _listener_name(name: str, key: str, value: str) -> str:
    if not _NAME.match(name):
        raise _refuse(key, value, f"listener name {name!r} must be letters, digits and _ (as INTERNAL or SSL)")
    return name.upper()  # Kafka compares listener names upper-cased


def _host(text: str, key: str, value: str) -> str:
    """The host of an entry: empty is 127.0.0.1 (as ADS always had it), ``[v6]`` loses its brackets."""
    if not text:
        return "127.0.0.1"
    if text.startswith("[") and text.endswith("]"):
        try:
            return str(ipaddress.IPv6Address(text[1:-1]))
        except ValueError:
            raise _refuse(key, value, f"{text} is not an IPv6 address") from None
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        if not _HOST_NAME.match(text):
            raise _refuse(key, value, f"{text!r} is not a host name or an IP address") from None
        return text
    if address.version == 6:
        raise _refuse(key, value, "an IPv6 address must be in brackets: NAME://[::1]:9092")
    return text


def parse_listener_list(value: str, key: str) -> list[ListenerAddress]:
    """``NAME://host:port[,...]`` (a bare ``host:port`` is a PLAINTEXT listener, as ADS accepted before).

    Names are unique, non-zero ports are unique, at most ``LISTENERS_MAX`` entries; ``key`` is named in
    every refusal."""
    entries = [item.strip() for item in str(value).split(",") if item.strip()]
    if not entries:
        raise _refuse(key, value, "expected NAME://host:port[,NAME://host:port]")
    if len(entries) > LISTENERS_MAX:
        raise _refuse(key, value, f"at most {LISTENERS_MAX} listeners")
    parsed: list[ListenerAddress] = []
    for entry in entries:
        name, has_name, address = entry.rpartition("://")
        name = _listener_name(name, key, value) if has_name else "PLAINTEXT"
        host, sep, port = address.rpartition(":")
        if not sep or not port.isdigit() or int(port) > 65535:
            raise _refuse(key, value, f"expected NAME://host:port, got {entry!r}")
        parsed.append(ListenerAddress(name, _host(host, key, value), int(port)))
    names = [item.name for item in parsed]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise _refuse(key, value, f"listener name {twice[0]} is used twice (each listener needs its own name)")
    ports = [item.port for item in parsed if item.port]
    twice_ports = sorted({p for p in ports if ports.count(p) > 1})
    if twice_ports:
        raise _refuse(key, value, f"port {twice_ports[0]} is used twice")
    return parsed


def parse_protocol_map(value: str, key: str = "listener.security.protocol.map") -> dict[str, str]:
    """``NAME:PROTOCOL[,...]`` -> {NAME: PROTOCOL}; protocols are Kafka's four (any case)."""
    result: dict[str, str] = {}
    for entry in (item.strip() for item in str(value).split(",") if item.strip()):
        name, sep, protocol = entry.partition(":")
        if not sep:
            raise _refuse(key, value, f"expected NAME:PROTOCOL, got {entry!r}")
        name = _listener_name(name.strip(), key, value)
        protocol = protocol.strip().upper()
        if protocol not in SECURITY_PROTOCOLS:
            raise _refuse(key, value, f"{protocol!r} is not a security protocol (one of "
                                      f"{', '.join(SECURITY_PROTOCOLS)})")
        if name in result:
            raise _refuse(key, value, f"listener name {name} is mapped twice")
        result[name] = protocol
    return result


def is_loopback(host: str) -> bool:
    """Whether only this host can reach ``host``: 127.0.0.0/8, ::1 or ``localhost`` (0.0.0.0 is not)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def listener_specs(listeners: str, advertised: str, protocol_map: str, allow_nonloopback_plaintext: bool
                   ) -> list[ListenerSpec]:
    """Every listener with its protocol and advertised address, checked as a whole (see the module docstring).

    A listener that ``advertised.listeners`` does not name is advertised at its own address; a wildcard
    host (0.0.0.0, ::) is never advertised (it is where a server binds, not a place to connect to)."""
    bound = parse_listener_list(listeners, "listeners")
    told = {a.name: a for a in parse_listener_list(advertised, "advertised.listeners")} if advertised.strip() else {}
    unknown = sorted(set(told) - {a.name for a in bound})
    if unknown:
        raise _refuse("advertised.listeners", advertised, f"listener {unknown[0]} is not one of listeners "
                                                          f"({', '.join(a.name for a in bound)})")
    protocols = parse_protocol_map(protocol_map)
    specs = []
    for address in bound:
        protocol = protocols.get(address.name)
        if protocol is None:
            raise InvalidConfigError(
                f"listener {address.name} of 'listeners' has no security protocol: map it in "
                f"'listener.security.protocol.map' (e.g. {address.name}:PLAINTEXT or {address.name}:SSL)")
        if protocol not in TLS_PROTOCOLS and not is_loopback(address.host) and not allow_nonloopback_plaintext:
            raise InvalidConfigError(
                f"listener {address.name} ({protocol}) binds {address.host}, which other hosts can reach, "
                f"without TLS: refused unless '{NONLOOPBACK_KEY}' is true (or use an SSL/SASL_SSL listener)")
        advertised_address = told.get(address.name, address)
        if advertised_address.host in WILDCARD_HOSTS:
            key = "advertised.listeners" if address.name in told else "listeners"
            raise InvalidConfigError(
                f"'advertised.listeners' must name a host clients can reach for listener {address.name}: {key} "
                f"uses {advertised_address.host}, which is where a broker binds (every interface), not an address "
                "to connect to")
        specs.append(ListenerSpec(address.name, protocol, address.host, address.port,
                                  advertised_address.host, advertised_address.port))
    return specs


def check_bind_host(host: str, name: str) -> None:
    """A host an HTTP server can bind (``metrics.host``): an IPv4/IPv6 address or a host name, no port,
    scheme or path."""
    try:
        ipaddress.ip_address(host)
        return
    except ValueError:
        pass
    if not _HOST_NAME.match(host):
        raise InvalidConfigError(f"invalid value {host!r} for '{name}': expected an IP address or a host name "
                                 f"(no port: the port is metrics.port), e.g. 127.0.0.1 or 0.0.0.0")


def check_security(values: Mapping[str, Any], specs: list[ListenerSpec], inter_broker: ListenerSpec) -> None:
    """The security keys that only make sense together; never shows a password or a JAAS string."""
    tls = [spec.name for spec in specs if spec.uses_tls]
    if tls and not values["ssl.keystore.location"]:
        raise InvalidConfigError(f"listener {tls[0]} uses TLS: set 'ssl.keystore.location' to a PEM file with "
                                 "the broker's key and certificate chain")
    if values["ssl.client.auth"] == "required" and tls and not values["ssl.truststore.location"]:
        raise InvalidConfigError("'ssl.client.auth' is required: set 'ssl.truststore.location' to the PEM CA "
                                 "bundle client certificates are verified against")
    if inter_broker.uses_sasl:
        if not values["sasl.jaas.config"]:
            raise InvalidConfigError(f"the inter-broker listener {inter_broker.name} uses SASL: set "
                                     "'sasl.jaas.config' to this broker's PlainLoginModule credentials")
        parse_jaas_config(values["sasl.jaas.config"], key="sasl.jaas.config")
    parse_super_users(values["super.users"])
    if any(spec.uses_sasl for spec in specs) and values["sasl.enabled.mechanisms"] != "PLAIN":
        # The table accepts PLAIN alone; this keeps a second mechanism from being enabled by a table edit
        # without an authenticator for it (auth_middleware.py speaks PLAIN's username and password only).
        raise InvalidConfigError("'sasl.enabled.mechanisms' must be PLAIN: the only mechanism ADS serves")
    _check_principal_mapping_rules(values["ssl.principal.mapping.rules"])


def _check_principal_mapping_rules(rules: str) -> None:
    try:
        from ads_spark.security.tls import PrincipalMapper
    except ImportError:  # the TLS helpers arrive with issue #23; until then the rules are checked at use
        return
    try:
        PrincipalMapper(rules)
    except InvalidConfigError as exc:
        if "ssl.principal.mapping.rules" in str(exc):
            raise
        raise InvalidConfigError(f"invalid value for 'ssl.principal.mapping.rules': {exc}") from None
    except ValueError as exc:
        raise InvalidConfigError(f"invalid value for 'ssl.principal.mapping.rules': {exc}") from None
