"""Option parsing shared by the Spark source and sink "ads": the client pass-through and the scalar kinds.

Spark hands a Python data source its options as case-insensitive strings. Both sides of
``format("ads")`` read them the same way, so the rules live here once: keys are lower-cased,
every ``ads.<name>`` option becomes ``<name>`` in the client config (``ads.bootstrap.servers``
-> ``bootstrap.servers``, ``ads.client.rack`` -> ``client.rack`` ...), ``kafka.*`` keys are
refused with a hint, client settings no ADS client honours (``interceptor.classes``) are
refused, and booleans, positive integers, durations and sizes are parsed with one
"option '<name>' ..." message each. Pure: no connection is opened and nothing heavy is imported.

Security (issue #23) follows Spark's Kafka connector with ``ads.`` for ``kafka.``:
``ads.security.protocol``, ``ads.ssl.*`` and ``ads.sasl.*`` (``ads.sasl.jaas.config`` parsed as data by
``security.client_security``, its errors naming the ``ads.`` key). The SASL login is split off the
client config here (``split_login``): the password lives only in a ``Secret`` on the driver, which
authenticates and ships ``sasl.token`` to executors (``ads_spark.spark.clients``).
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from ads_spark.config import parse_bool
from ads_spark.errors import InvalidConfigError
from ads_spark.security.client_security import ClientSecurity, SecurityConfigError, parse_client_security

CLIENT_PREFIX = "ads."

_DURATION_UNITS_MS = {"ms": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000,
                      "d": 86_400_000}
_BYTE_UNITS = {"b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30, "gb": 1 << 30,
               "t": 1 << 40, "tb": 1 << 40}


# Client settings neither side of format("ads") can honour; passing them through would accept them silently.
_CLIENT_KEYS_UNSUPPORTED = {
    "interceptor.classes": "the ADS clients run no interceptors (Spark's Kafka source refuses them too: "
                           "an interceptor could change the records a query reads)",
}


# Kafka's client security keys the source and sink pass on (as ``ads.<key>``); the clients read them.
SECURITY_KEYS = frozenset({
    "security.protocol", "sasl.mechanism", "sasl.username", "sasl.password", "sasl.jaas.config",
    "ssl.truststore.location", "ssl.keystore.location", "ssl.key.password", "ssl.endpoint.identification.algorithm",
})
# Who the driver logs in as: read on the driver only, never part of a config that reaches an executor.
LOGIN_KEYS = ("sasl.username", "sasl.password", "sasl.jaas.config")
TOKEN_KEY = "sasl.token"  # what executors authenticate with instead (set by the driver, never by the user)


def lower_keys(options: Mapping[str, Any]) -> dict[str, str]:
    """Spark hands Python data sources case-insensitive options; normalise to lower case."""
    return {str(k).lower(): str(v) for k, v in dict(options).items()}


def parse_client_config(opts: Mapping[str, str]) -> dict[str, str]:
    """The ``ads.*`` options as a client config; ``ads.bootstrap.servers`` is required."""
    kafka_keys = sorted(k for k in opts if k.startswith("kafka."))
    if kafka_keys:
        raise InvalidConfigError(f"option '{kafka_keys[0]}' uses the Kafka prefix; "
                                 f"ADS options start with 'ads.' (e.g. 'ads.{kafka_keys[0][6:]}')")
    config = {k[len(CLIENT_PREFIX):]: v for k, v in opts.items() if k.startswith(CLIENT_PREFIX)}
    for key, reason in _CLIENT_KEYS_UNSUPPORTED.items():
        if key in config:
            raise InvalidConfigError(f"option 'ads.{key}' is not supported: {reason}")
    check_security(opts)
    servers = config.get("bootstrap.servers", "").strip()
    if not servers:
        raise InvalidConfigError("option 'ads.bootstrap.servers' is required: a comma-separated list of "
                                 "host:port, e.g. .option('ads.bootstrap.servers', '127.0.0.1:9092')")
    for item in servers.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not item.strip() or not sep or not host or not port.isdigit():
            raise InvalidConfigError(f"option 'ads.bootstrap.servers' has a bad entry {item.strip()!r}: "
                                     f"expected host:port")
    config["bootstrap.servers"] = servers
    return config


def check_security(opts: Mapping[str, str]) -> ClientSecurity:
    """Validate the ``ads.`` security options (``client_security.parse_client_security`` with the ``ads.``
    prefix, so errors name the option as the user wrote it, never its value: it may be a password)."""
    if opts.get(CLIENT_PREFIX + TOKEN_KEY, "") != "":
        raise SecurityConfigError(CLIENT_PREFIX + TOKEN_KEY, "is set by the driver for its executors; give "
                                  "ads.sasl.username and ads.sasl.password, or ads.sasl.jaas.config")
    return parse_client_security(opts, prefix=CLIENT_PREFIX)


def split_login(config: Mapping[str, str]) -> tuple[dict[str, str], ClientSecurity | None]:
    """``config`` (a parsed client config) without the SASL login keys, and the login (its password a
    ``Secret``) when the protocol is SASL_*; the login keys must never reach an executor."""
    security = parse_client_security(config)
    rest = {k: v for k, v in config.items() if k not in LOGIN_KEYS}
    return rest, (security if security.uses_sasl else None)


def option_bool(opts: Mapping[str, str], key: str, option: str, default: bool) -> bool:
    """``opts[key]`` as 'true' or 'false' (any case; ``ads_spark.config.parse_bool``), ``default`` when absent."""
    if key not in opts:
        return default
    try:
        return parse_bool(opts[key], name=option)
    except InvalidConfigError:  # in the voice of every other Spark option error
        raise InvalidConfigError(f"option '{option}' must be 'true' or 'false', got {opts[key]!r}") from None


def positive_int(opts: Mapping[str, str], key: str, option: str) -> int | None:
    if key not in opts:
        return None
    text = opts[key].strip()
    if not text.isdigit() or int(text) <= 0:
        raise InvalidConfigError(f"option '{option}' must be a positive integer, got {opts[key]!r}")
    return int(text)


def parse_duration_ms(raw: str | None, option: str, default_ms: int) -> int:
    """'15m', '30s', '500ms', '1h', '2d' or a bare number of ms."""
    if raw is None:
        return default_ms
    match = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", raw.lower())
    if not match or (match.group(2) and match.group(2) not in _DURATION_UNITS_MS):
        raise InvalidConfigError(f"option '{option}' must be a duration like '500ms', '30s', '15m', '1h', got {raw!r}")
    return int(match.group(1)) * _DURATION_UNITS_MS.get(match.group(2) or "ms", 1)


def parse_bytes(raw: str | None, option: str) -> int | None:
    """'1048576', '512k', '64m', '1g' (binary multiples); must be positive."""
    if raw is None:
        return None
    match = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", raw.lower())
    if not match or (match.group(2) and match.group(2) not in _BYTE_UNITS) or int(match.group(1)) <= 0:
        raise InvalidConfigError(f"option '{option}' must be a positive size like '1048576', '512k', '64m', "
                                 f"'1g', got {raw!r}")
    return int(match.group(1)) * _BYTE_UNITS.get(match.group(2) or "b", 1)
