"""Broker and topic configuration: Kafka's names, types, defaults and validation.

Every key a user can set is declared once here with its type, default and
allowed range, so that the broker, the CLI and the admin API reject an unknown
key or a bad value with the same message, naming the key, before anything
changes. Topic-level keys fall back to the broker-level default (``retention.ms``
falls back to ``log.retention.ms``) exactly as in Kafka.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from ads_spark.errors import InvalidConfigError

LONG_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class ConfigKey:
    name: str
    kind: str  # "int" | "bool" | "str" | "list" | "enum"
    default: Any
    doc: str
    min_value: int | None = None
    max_value: int | None = None
    choices: tuple[str, ...] = ()
    required: bool = False


def _int(name, default, doc, min_value=None, max_value=None, required=False) -> ConfigKey:
    return ConfigKey(name, "int", default, doc, min_value, max_value, required=required)


BROKER_KEYS: dict[str, ConfigKey] = {
    k.name: k
    for k in [
        _int("broker.id", None, "unique id of this broker", 0, 2**31 - 1, required=True),
        ConfigKey("listeners", "str", "PLAINTEXT://127.0.0.1:0", "address the Flight server binds (port 0: choose one)"),
        ConfigKey("advertised.listeners", "str", "", "address clients are told; defaults to listeners"),
        ConfigKey("log.dirs", "str", None, "directory holding this broker's partition logs", required=True),
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
        _int("default.replication.factor", 1, "replication factor of auto-created topics", 1, 32),
        _int("num.partitions", 1, "partitions of auto-created topics", 1, 100000),
        _int("min.insync.replicas", 1, "default minimum ISR size for acks=all", 1, 32),
        ConfigKey("unclean.leader.election.enable", "bool", False, "elect out-of-sync replicas (loses data)"),
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
        _int("request.timeout.ms.max", 300000, "upper bound on a produce request's timeout", 1),
        _int("fetch.wait.max.ms.max", 30000, "upper bound on a fetch long-poll", 0),
        _int("fetch.max.bytes", 57671680, "upper bound on the record bytes of one fetch answer, all partitions "
             "together (one batch may pass it so that a reader gets past a large batch)", 1024),
        _int("flight.streams.max", 1000, "produce streams and fetch sessions open on this broker at once; "
             "one more is refused (NETWORK_EXCEPTION, retriable)", 1),
        _int("flight.streams.per.connection.max", 100, "produce streams and fetch sessions open at once on one "
             "client connection; one more is refused (NETWORK_EXCEPTION, retriable)", 1),
        _int("connections.max.idle.ms", 600000, "a connection whose streams carried no data for this long is "
             "closed (-1 or 0: never)", -1),
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
        ConfigKey("observers", "list", "", "broker ids replicating as non-voting observers"),
    ]
}

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


def parse_value(key: ConfigKey, raw: Any) -> Any:
    """Convert ``raw`` (usually a string) to the key's type, raising InvalidConfigError naming the key."""
    if raw is None:
        return None
    text = raw.strip() if isinstance(raw, str) else raw
    try:
        if key.kind == "int":
            return parse_int(raw, name=key.name, min_value=key.min_value, max_value=key.max_value)
        if key.kind == "bool":
            return parse_bool(raw, name=key.name)
        if key.kind == "enum":
            if text not in key.choices:
                raise ValueError(f"must be one of {', '.join(key.choices)}")
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

    def __getitem__(self, name: str) -> Any:
        if name not in self._values:
            raise InvalidConfigError(f"unknown broker config '{name}'")
        return self._values[name]

    def as_dict(self) -> dict[str, Any]:
        return dict(self._values)

    @property
    def broker_id(self) -> int:
        return self._values["broker.id"]

    @property
    def listen_host_port(self) -> tuple[str, int]:
        return parse_listener(self._values["listeners"])

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


def parse_listener(listener: str) -> tuple[str, int]:
    """'PLAINTEXT://127.0.0.1:9092' or '127.0.0.1:9092' -> ('127.0.0.1', 9092)."""
    first = listener.split(",")[0].strip()
    _, _, address = first.rpartition("://")
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise InvalidConfigError(f"invalid value {listener!r} for 'listeners': expected host:port")
    return host or "127.0.0.1", int(port)


def effective_topic_config(broker_defaults: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Topic config as it applies: parsed overrides over broker-supplied defaults."""
    merged = dict(broker_defaults)
    merged.update(validate(TOPIC_KEYS, overrides, "topic"))
    return merged


def validate_topic_config(overrides: Mapping[str, Any], replication_factor: int | None) -> dict[str, str]:
    """Check a topic's overrides (create or alter); returns them as strings, as stored in ZooKeeper."""
    parsed = validate(TOPIC_KEYS, overrides, "topic")
    min_isr = parsed.get("min.insync.replicas")
    if min_isr is not None and replication_factor is not None and min_isr > replication_factor:
        raise InvalidConfigError(
            f"invalid value {min_isr} for 'min.insync.replicas': larger than the replication "
            f"factor {replication_factor}, so acks=all writes could never succeed"
        )
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
