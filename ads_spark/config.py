"""Broker and topic configuration: Kafka's names, types, defaults and validation.

Every key a user can set is declared once here with its type, default and
allowed range, so that the broker, the CLI and the admin API reject an unknown
key or a bad value with the same message, naming the key, before anything
changes. Topic-level keys fall back to the broker-level default (``retention.ms``
falls back to ``log.retention.ms``) exactly as in Kafka.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

from ads_spark.errors import InvalidConfigError
from ads_spark.listener_config import (
    NONLOOPBACK_KEY, SASL_PROTOCOLS, TLS_PROTOCOLS, ListenerSpec, check_bind_host,
    check_security, listener_specs,
)

from ads_spark.config_key import ConfigKey, _int
from ads_spark.config_compaction import (
    CLEANER_BROKER_KEYS, COMPACTION_TOPIC_DEFAULT_FROM_BROKER, COMPACTION_TOPIC_KEYS,
)
from ads_spark.config_groups import GROUP_BROKER_KEYS, GROUP_CONSUMER_KEYS
from ads_spark.config_kafka import KAFKA_BROKER_KEYS, kafka_listener_specs
from ads_spark.config_schemas import SCHEMA_TOPIC_KEYS, check_topic_schema_config
from ads_spark.config_security import NO_HOSTNAME_SKIP, SECURITY_BROKER_KEYS

LONG_MAX = 2**63 - 1


BROKER_KEYS: dict[str, ConfigKey] = {
    k.name: k
    for k in [
        _int("broker.id", None, "unique id of this broker", 0, 2**31 - 1, required=True),
        ConfigKey("listeners", "str", "PLAINTEXT://127.0.0.1:0", "NAME://host:port[,...]: one Flight server per "
                  "listener (port 0: choose one; 0.0.0.0: every interface, then advertised.listeners must name a "
                  "reachable host); a bare host:port is a PLAINTEXT listener"),
        ConfigKey("advertised.listeners", "str", "", "NAME://host:port[,...] registered in ZooKeeper and given to "
                  "clients in metadata, names among listeners; empty (or a listener left out): its listeners "
                  "address (port 0 here: the bound port)"),
        ConfigKey("log.dirs", "str", None, "comma-separated directories for partition logs; a new partition goes "
                  "to the one holding fewest", required=True),
        ConfigKey("zookeeper.connect", "str", None, "host:port[,host:port][/chroot]", required=True),
        _int("zookeeper.session.timeout.ms", 18000, "ZooKeeper session timeout", 1000, 600000),
        ConfigKey("broker.rack", "str", "", "rack (failure domain) of this broker"),
        _int("num.replica.fetchers", 1, "follower fetcher threads per source broker", 1, 64),
        _int("replica.fetch.max.bytes", 1048576, "bytes fetched per partition per follower request", 1024),
        _int("replica.fetch.response.max.bytes", 10485760, "bytes per follower fetch response", 1024),
        _int("replica.fetch.wait.max.ms", 500, "long-poll wait of a follower fetch", 0, 60000),
        _int("replica.fetch.backoff.ms", 1000, "pause after a failed follower fetch", 0, 60000),
        _int("replica.lag.time.max.ms", 30000, "follower not caught up for this long leaves the ISR", 100),
        _int("replica.high.watermark.checkpoint.interval.ms", 5000, "HW checkpoint interval", 10),
        _int("default.replication.factor", 1, "replication factor of a topic created without one", 1, 32),
        _int("num.partitions", 1, "partitions of a topic created without a count", 1, 100000),
        _int("min.insync.replicas", 1, "default minimum ISR size for acks=all", 1, 32),
        ConfigKey("unclean.leader.election.enable", "bool", False, "elect out-of-sync replicas (loses data)"),
        _int("unclean.recovery.timeout.ms", 300000, "after a crash of every ISR/ELR member, how long unclean "
             "recovery waits for every replica before the last known ELR alone may lead", 0, 86400000),
        ConfigKey("auto.leader.rebalance.enable", "bool", True, "periodic preferred leader election"),
        _int("leader.imbalance.per.broker.percentage", 10, "imbalance that triggers a rebalance", 0, 100),
        _int("leader.imbalance.check.interval.seconds", 300, "how often the controller checks balance", 1),
        ConfigKey("controlled.shutdown.enable", "bool", True, "move leadership away before stopping"),
        _int("controlled.shutdown.max.retries", 3, "controlled shutdown attempts", 0, 100),
        _int("controlled.shutdown.retry.backoff.ms", 1000, "pause between attempts", 0, 60000),
        _int("log.segment.bytes", 1 << 30, "segment size before a roll", 1024),
        _int("log.roll.ms", 7 * 24 * 3600 * 1000, "segment age before a roll", 1),
        _int("log.retention.ms", 7 * 24 * 3600 * 1000, "retention by time (-1 unlimited)", -1),
        _int("log.retention.bytes", -1, "retention by size per partition (-1 unlimited)", -1),
        _int("log.retention.check.interval.ms", 300000, "how often retention runs", 10),
        _int("log.flush.interval.messages", LONG_MAX, "fsync after this many records", 1),
        _int("log.flush.interval.ms", LONG_MAX, "fsync after this many ms", 1),
        _int("message.max.bytes", 1048588 * 8, "largest record batch accepted (Arrow bytes)", 64),
        _int("metrics.port", -1, "Prometheus metrics port (-1 off, 0 choose one)", -1, 65535),
        ConfigKey("metrics.host", "str", "127.0.0.1", "address the metrics endpoint binds (loopback by default; "
                  "0.0.0.0 or a host's address lets Prometheus on another host scrape it)"),
        _int("request.timeout.ms.max", 300000, "upper bound on a produce request's timeout", 1),
        _int("fetch.wait.max.ms.max", 30000, "upper bound on a fetch long-poll", 0),
        _int("fetch.max.bytes", 57671680, "upper bound on the record bytes of one fetch answer, all partitions "
             "together (one batch may pass it so that a reader gets past a large batch)", 1024),
        _int("flight.streams.max", 1000, "produce streams and fetch sessions open on this broker at once; "
             "one more is refused (NETWORK_EXCEPTION, retriable)", 1),
        _int("flight.streams.per.connection.max", 100, "produce streams and fetch sessions open at once on one "
             "client connection; one more is refused (NETWORK_EXCEPTION, retriable)", 1),
        _int("connections.max.idle.ms", 600000, "a connection whose streams carried no data for this long is "
             "closed, a Kafka connection that sent no request for this long too (-1 or 0: never)", -1),
        *SECURITY_BROKER_KEYS,
        *GROUP_BROKER_KEYS,
        *CLEANER_BROKER_KEYS,
        *KAFKA_BROKER_KEYS,
    ]
}

TOPIC_KEYS: dict[str, ConfigKey] = {
    k.name: k
    for k in [
        _int("min.insync.replicas", None, "minimum ISR size for acks=all", 1, 32),
        ConfigKey("unclean.leader.election.enable", "bool", None, "elect out-of-sync replicas (loses data)"),
        _int("retention.ms", None, "retention by time (-1 unlimited)", -1),
        _int("retention.bytes", None, "retention by size (-1 unlimited)", -1),
        _int("segment.bytes", None, "segment size before a roll", 1024),
        _int("segment.ms", None, "segment age before a roll", 1),
        _int("max.message.bytes", None, "largest record batch accepted (Arrow bytes)", 64),
        _int("flush.messages", None, "fsync after this many records", 1),
        _int("flush.ms", None, "fsync after this many ms", 1),
        ConfigKey(
            "message.timestamp.type", "enum", "CreateTime", "record timestamps",
            choices=("CreateTime", "LogAppendTime"),
        ),
        *COMPACTION_TOPIC_KEYS,
        *SCHEMA_TOPIC_KEYS,
    ]
}

# Client keys (Kafka's names). Every key here is read by the client named; the clients parse the
# values themselves (config.parse_int / parse_bool), and ``check_client_keys`` refuses any other key.
_CONNECTION_KEYS = [
    ConfigKey("bootstrap.servers", "str", None, "host:port[,host:port] of brokers to ask for metadata", required=True),
    _int("request.timeout.ms", 30000, "how long a request may wait for its answer", 0),
    _int("retry.backoff.ms", 100, "pause before a retriable request is sent again", 0),
    _int("metadata.max.age.ms", 300000, "cluster metadata older than this is refreshed", 0),
    _int("default.api.timeout.ms", 60000, "bound on a blocking call (list offsets, describe, ...)", 0),
    # Security (issue #23): parsed by security/client_security.py, used by protocol/transport.py.
    ConfigKey("security.protocol", "enum", "PLAINTEXT", "how the client reaches brokers",
              choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")),
    ConfigKey("sasl.mechanism", "enum", "PLAIN", "SASL mechanism (only PLAIN)", choices=("PLAIN",)),
    ConfigKey("sasl.username", "str", "", "SASL user (with sasl.password)"),
    ConfigKey("sasl.password", "str", "", "SASL password: sent only to the brokers' authenticate action"),
    ConfigKey("sasl.jaas.config", "str", "", "PlainLoginModule required username=\"...\" password=\"...\";"),
    ConfigKey("sasl.token", "str", "", "ADS: a token from authenticate, used instead of a password (cannot be "
              "refreshed)"),
    ConfigKey("ssl.truststore.location", "str", "", "PEM CA bundle the brokers' certificates are checked against "
              "(empty: the system CAs)"),
    ConfigKey("ssl.keystore.location", "str", "", "PEM private key + certificate chain for mutual TLS"),
    ConfigKey("ssl.key.password", "str", "", "password of an encrypted key in ssl.keystore.location"),
    ConfigKey("ssl.endpoint.identification.algorithm", "enum", "https", "https: check the broker certificate's "
              "host names (always: empty is refused)", choices=("https",), refused=NO_HOSTNAME_SKIP),
]
PRODUCER_KEYS: dict[str, ConfigKey] = {
    k.name: k
    for k in [
        *_CONNECTION_KEYS,
        ConfigKey("acks", "enum", "all", "0: fire and forget; 1: the leader has it; all: every ISR member has it",
                  choices=("0", "1", "all", "-1")),
        ConfigKey("enable.idempotence", "bool", None, "broker-side dedupe of resends (default: acks=all)"),
        _int("linger.ms", 5, "how long a batch waits for more records", 0),
        _int("batch.size", 1 << 20, "bytes of records after which a batch is sent", 1),
        _int("max.request.size", 4 << 20, "queued batches of a partition sent together up to this size", 0),
        _int("delivery.timeout.ms", 120000, "a record not acknowledged within this fails", 1),
        _int("max.in.flight.requests.per.connection", 5, "unanswered batches per partition", 1),
        _int("retries", 2**31 - 1, "resends of a batch after retriable errors (and within delivery.timeout.ms)", 0),
        _int("ads.producer.id", None, "a caller-chosen idempotent identity (the Spark sink's)", 0),
        _int("ads.producer.epoch", 0, "epoch of ads.producer.id", 0),
    ]
}
CONSUMER_KEYS: dict[str, ConfigKey] = {
    k.name: k
    for k in [
        *_CONNECTION_KEYS,
        ConfigKey("client.rack", "str", "", "read from a replica on this rack (KIP-392)"),
        _int("fetch.max.bytes", 50 << 20, "record bytes per fetch answer", 1),
        _int("max.partition.fetch.bytes", 8 << 20, "record bytes per partition per fetch", 1),
        _int("fetch.max.wait.ms", 500, "long-poll wait of a fetch", 0),
        _int("max.poll.records", 500, "records returned by one poll", 1),
        ConfigKey("auto.offset.reset", "enum", "latest", "where to start without a position",
                  choices=("earliest", "latest", "none")),
        ConfigKey("local.reads", "bool", True, "read the segment files of brokers on this host directly"),
        *GROUP_CONSUMER_KEYS,
    ]
}

# The admin client reads the connection keys only (``default.api.timeout.ms`` bounds its reads). A config shared
# with a producer or consumer (a Spark source's or sink's) is cut to these keys before it makes an Admin
# (``client.admin.admin_config``); the producer or consumer made from the same config refuses the unknown ones.
ADMIN_KEYS: dict[str, ConfigKey] = {k.name: k for k in _CONNECTION_KEYS}


def check_client_keys(keys: Mapping[str, ConfigKey], config: Mapping[str, Any], what: str) -> None:
    """Refuse a client config key the client does not read (a typo, or a Kafka key ADS has not got)."""
    unknown = sorted(name for name in config if name not in keys)
    if unknown:
        raise InvalidConfigError(f"unknown {what} config '{unknown[0]}' (known: {', '.join(sorted(keys))})")


# Topic key -> the broker key that supplies its default.
TOPIC_DEFAULT_FROM_BROKER = {
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "max.message.bytes": "message.max.bytes",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    **COMPACTION_TOPIC_DEFAULT_FROM_BROKER,
}


def parse_bool(value: Any, *, name: str) -> bool:
    """``value`` as a boolean: a bool, or "true"/"false" in any case with surrounding blanks ignored.

    The one parser of boolean settings (broker, topic, client and Spark options); anything else raises
    ``InvalidConfigError`` naming the setting, instead of quietly counting as false.
    """
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise InvalidConfigError(f"invalid value {value!r} for '{name}': must be true or false")


def parse_int(value: Any, *, name: str, min_value: int | None = None, max_value: int | None = None) -> int:
    """``value`` (an int, or its decimal text with surrounding blanks ignored) as an int within the bounds.

    The one parser of integer settings (broker, topic and client); anything else raises
    ``InvalidConfigError`` naming the setting, instead of a bare ``ValueError``.
    """
    try:
        number = int(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise InvalidConfigError(f"invalid value {value!r} for '{name}': must be an integer") from None
    if min_value is not None and number < min_value:
        raise InvalidConfigError(f"invalid value {value!r} for '{name}': must be >= {min_value}")
    if max_value is not None and number > max_value:
        raise InvalidConfigError(f"invalid value {value!r} for '{name}': must be <= {max_value}")
    return number


def parse_double(value: Any, *, name: str, min_value: float | None = None, max_value: float | None = None) -> float:
    """``value`` (a number, or its decimal text, ``1e6`` forms included) as a finite float within the bounds."""
    try:
        number = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise InvalidConfigError(f"invalid value {value!r} for '{name}': must be a number") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise InvalidConfigError(f"invalid value {value!r} for '{name}': must be a finite number")
    if min_value is not None and number < min_value:
        raise InvalidConfigError(f"invalid value {value!r} for '{name}': must be >= {min_value}")
    if max_value is not None and number > max_value:
        raise InvalidConfigError(f"invalid value {value!r} for '{name}': must be <= {max_value}")
    return number


def parse_value(key: ConfigKey, raw: Any) -> Any:
    """Convert ``raw`` (usually a string) to the key's type, raising InvalidConfigError naming the key."""
    if raw is None:
        return None
    text = raw.strip() if isinstance(raw, str) else raw
    try:
        if key.kind == "int":
            number = parse_int(raw, name=key.name, min_value=key.min_value)
            if key.max_value is not None and number > key.max_value:
                raise ValueError(dict(key.refused).get("max", f"must be <= {key.max_value}"))
            return number
        if key.kind == "double":
            return parse_double(raw, name=key.name, min_value=key.min_value, max_value=key.max_value)
        if key.kind == "bool":
            return parse_bool(raw, name=key.name)
        if key.kind == "enum":
            text = dict(key.aliases).get(text, text)
            reason = dict(key.refused).get(text)
            if reason is not None:
                raise ValueError(reason)
            if text not in key.choices:
                raise ValueError(f"must be one of {', '.join(repr(c) if not c else c for c in key.choices)}")
            return text
        if key.kind == "list":
            if isinstance(text, (list, tuple)):
                return [str(v) for v in text]
            return [item.strip() for item in str(text).split(",") if item.strip()]
        return str(text)
    except (TypeError, ValueError) as exc:
        raise InvalidConfigError(f"invalid value {raw!r} for '{key.name}': {exc}") from exc


def validate(keys: Mapping[str, ConfigKey], values: Mapping[str, Any], what: str) -> dict[str, Any]:
    """Parse every entry of ``values``; unknown keys are rejected by name."""
    parsed = {}
    for name, raw in values.items():
        if name not in keys:
            known = ", ".join(sorted(keys))
            raise InvalidConfigError(f"unknown {what} config '{name}' (known: {known})")
        parsed[name] = parse_value(keys[name], raw)
    return parsed


class BrokerConfig:
    """A broker's validated configuration; ``config["replica.lag.time.max.ms"]`` reads a value."""

    def __init__(self, values: Mapping[str, Any]):
        parsed = validate(BROKER_KEYS, values, "broker")
        missing = [k.name for k in BROKER_KEYS.values() if k.required and parsed.get(k.name) is None]
        if missing:
            raise InvalidConfigError(f"missing required broker config: {', '.join(missing)}")
        self._values = {name: key.default for name, key in BROKER_KEYS.items()}
        self._values.update(parsed)
        # Checked now, so that a bad address, directory list or security setting stops the broker before it
        # opens anything.
        self._listeners = listener_specs(self._values["listeners"], self._values["advertised.listeners"],
                                         self._values["listener.security.protocol.map"],
                                         self._values[NONLOOPBACK_KEY])
        self._inter_broker = self._inter_broker_listener()
        check_security(self._values, self._listeners, self._inter_broker)
        self._kafka_listeners = kafka_listener_specs(self._values, self._listeners)  # config_kafka.py
        self.log_dir_paths()
        check_bind_host(self._values["metrics.host"], "metrics.host")

    def __getitem__(self, name: str) -> Any:
        if name not in self._values:
            raise InvalidConfigError(f"unknown broker config '{name}'")
        return self._values[name]

    def as_dict(self) -> dict[str, Any]:
        return dict(self._values)

    @property
    def broker_id(self) -> int:
        return self._values["broker.id"]

    # ---- listeners (ads_spark/listener_config.py) ---------------------------------------------------

    def listener_specs(self) -> list[ListenerSpec]:
        """Every listener, in the order of ``listeners`` (advertised port 0: the broker fills in the bound port)."""
        return list(self._listeners)

    def kafka_listener_specs(self) -> list[ListenerSpec]:
        """The Kafka protocol listeners (``kafka.listeners``; none when empty), as ``listener_specs``."""
        return list(self._kafka_listeners)

    @property
    def inter_broker_listener_name(self) -> str:
        return self._inter_broker.name

    @property
    def inter_broker_listener(self) -> ListenerSpec:
        return self._inter_broker

    @property
    def security_enabled(self) -> bool:
        """Any listener other than PLAINTEXT, or ACLs on: logs become private to the broker's user, and so on."""
        return (any(spec.protocol != "PLAINTEXT" for spec in [*self._listeners, *self._kafka_listeners])
                or bool(self._values["authorizer.class.name"]))

    def inter_broker_client_config(self, bootstrap: str) -> dict[str, str]:
        """The client config of this broker's own calls to other brokers (controller channels, membership,
        replica fetchers): the inter-broker listener's protocol and the TLS / SASL settings it needs."""
        protocol = self._inter_broker.protocol
        config = {"bootstrap.servers": bootstrap, "security.protocol": protocol}
        if protocol in TLS_PROTOCOLS:
            config["ssl.endpoint.identification.algorithm"] = self._values["ssl.endpoint.identification.algorithm"]
            for key in ("ssl.truststore.location", "ssl.keystore.location", "ssl.key.password"):
                if self._values[key]:
                    config[key] = self._values[key]
        if protocol in SASL_PROTOCOLS:
            config["sasl.mechanism"] = "PLAIN"
            config["sasl.jaas.config"] = self._values["sasl.jaas.config"]
        return config

    def _inter_broker_listener(self) -> ListenerSpec:
        wanted = self._values["inter.broker.listener.name"].strip().upper()
        if not wanted:
            return self._listeners[0]
        found = next((spec for spec in self._listeners if spec.name == wanted), None)
        if found is None:
            raise InvalidConfigError(
                f"invalid value {self._values['inter.broker.listener.name']!r} for 'inter.broker.listener.name': "
                f"not one of listeners ({', '.join(spec.name for spec in self._listeners)})")
        return found

    @property
    def listen_host_port(self) -> tuple[str, int]:
        """The inter-broker listener's bind address (callers from before there were several listeners)."""
        return self._inter_broker.bind_host, self._inter_broker.port

    def advertised_host_port(self, bound_port: int) -> tuple[str, int]:
        """The inter-broker listener's advertised address, port 0 being ``bound_port`` (see listener_config)."""
        return self._inter_broker.advertised_host, self._inter_broker.advertised_port or bound_port

    def log_dir_paths(self) -> list[Path]:
        """``log.dirs`` as paths, in the order given: at least one, no directory twice."""
        paths = [Path(item.strip()) for item in str(self._values["log.dirs"]).split(",") if item.strip()]
        if not paths:
            raise InvalidConfigError("invalid value '' for 'log.dirs': name at least one directory")
        seen: set[Path] = set()
        for path in paths:
            resolved = path.resolve()
            if resolved in seen:
                raise InvalidConfigError(f"invalid value {self._values['log.dirs']!r} for 'log.dirs': "
                                         f"{path} is named twice")
            seen.add(resolved)
        return paths

    @property
    def zookeeper_hosts_and_chroot(self) -> tuple[str, str]:
        connect = self._values["zookeeper.connect"]
        hosts, _, chroot = connect.partition("/")
        return hosts, "/" + chroot if chroot else "/ads"

    def topic_defaults(self) -> dict[str, Any]:
        defaults = {name: key.default for name, key in TOPIC_KEYS.items()}
        for topic_key, broker_key in TOPIC_DEFAULT_FROM_BROKER.items():
            defaults[topic_key] = self._values[broker_key]
        return defaults


def effective_topic_config(broker_defaults: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Topic config as it applies: parsed overrides over broker-supplied defaults."""
    merged = dict(broker_defaults)
    merged.update(validate(TOPIC_KEYS, overrides, "topic"))
    return merged


# Names users try as topic configs that are not configs here, with where the setting lives instead.
# Observers are part of the placement (which brokers hold a copy), like the replica list: Kafka keeps
# placement out of topic configs, and a config alter could not move data to or from a broker.
NOT_TOPIC_CONFIGS = {
    "observers": "observers are placed when the topic is created: ads topics create --observers 4,5",
}


def validate_topic_config(overrides: Mapping[str, Any], replication_factor: int | None,
                          defaults: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Check a topic's overrides (create or alter); returns them as strings, as stored in ZooKeeper.
    ``defaults``: the broker's topic defaults, for the rules that depend on a key the topic leaves unset."""
    for name in overrides:
        if name in NOT_TOPIC_CONFIGS:
            raise InvalidConfigError(f"'{name}' is not a topic config: {NOT_TOPIC_CONFIGS[name]}")
    parsed = validate(TOPIC_KEYS, overrides, "topic")
    min_isr = parsed.get("min.insync.replicas")
    if min_isr is not None and replication_factor is not None and min_isr > replication_factor:
        raise InvalidConfigError(
            f"invalid value {min_isr} for 'min.insync.replicas': larger than the replication "
            f"factor {replication_factor}, so acks=all writes could never succeed"
        )
    check_topic_schema_config(parsed, defaults)  # config_schemas.py: typed topics
    return {name: _to_text(value) for name, value in parsed.items()}


def _to_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value)
    return str(value)


def read_properties(path: Path) -> dict[str, str]:
    """Java properties (the subset Kafka's files use): key=value, # and ! comments."""
    values: dict[str, str] = {}
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise InvalidConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        key, sep, value = stripped.partition("=")
        if not sep:
            key, sep, value = stripped.partition(":")
        if not sep:
            raise InvalidConfigError(f"{path}:{number}: expected key=value, got {stripped!r}")
        values[key.strip()] = value.strip()
    return values


def parse_overrides(pairs: list[str] | None) -> dict[str, str]:
    """['k=v', ...] from the command line."""
    result = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InvalidConfigError(f"invalid override {pair!r}: expected key=value")
        result[key.strip()] = value.strip()
    return result


def load_broker_config(path: Path | None, overrides: list[str] | None = None) -> BrokerConfig:
    values: dict[str, str] = read_properties(path) if path else {}
    values.update(parse_overrides(overrides))
    return BrokerConfig(values)


Validator = Callable[[Any], None]
