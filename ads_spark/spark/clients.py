"""Client objects per Python process, shared by the Spark source's readers and the sink's writers.

A process-wide cache of ``Admin``/``Consumer``/``Producer`` (and pooled ``Connections``) keyed by
kind and client config. Spark reuses Python workers across tasks, and the streaming source's
planner process lives as long as the query; opening Flight connections once per process instead
of once per task keeps small micro-batches cheap. Readers and writers keep only option values
(they are pickled to executors); they ask this module for a client inside ``read()`` /
``write()``. A client that raised something unexpected is evicted so the next task starts afresh.

``ads_spark.client`` is imported lazily so that resolving the format name does not load Flight.

Also the driver's SASL login (issue #23). A reader or writer built on the driver registers its login
here (``register_login``) and keeps only an opaque handle; the password stays in this process, in a
``Secret``. Planning calls (``driver_config``) authenticate once and re-authenticate when the token is
past half its life, so what the driver ships to executors (a partition's or writer's ``sasl.token``)
is never near its expiry. A client config that differs only in its token reuses the cache entry: the
client made with an older token is replaced (and closed), so refreshed tokens do not pile up clients.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ads_spark.spark.options import TOKEN_KEY

log = logging.getLogger("ads.spark")

TOKEN_REFRESH_FRACTION = 0.5  # a token past this fraction of its life is replaced at the next planning call
UNKNOWN_EXPIRY_RENEW_MS = 60_000  # a token whose expiry cannot be read is renewed this often
LOGINS_MAX = 64  # logins kept per process (one per distinct user and cluster); the oldest is dropped

_clients: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[str, Any]] = {}  # key -> (token, client)
_clients_lock = threading.Lock()


def _cache_key(kind: str, config: Mapping[str, Any]) -> tuple[str, tuple[tuple[str, str], ...]]:
    """Keyed without the token, so a refreshed token replaces its predecessor's client."""
    return kind, tuple(sorted((str(k), str(v)) for k, v in config.items() if k != TOKEN_KEY))


def _cached(kind: str, config: Mapping[str, Any], make: Callable[[dict], Any]) -> Any:
    key, token = _cache_key(kind, config), str(config.get(TOKEN_KEY, ""))
    stale = None
    with _clients_lock:
        entry = _clients.get(key)
        if entry is not None and entry[0] != token:
            stale, entry = entry[1], None
        if entry is None:
            entry = _clients[key] = (token, make(dict(config)))
    _close_quietly(stale)
    return entry[1]


def _close_quietly(client: Any) -> None:
    if client is None:
        return
    try:
        client.close()
    except Exception:  # closing a broken client must not hide the original error
        pass


def admin_for(config: Mapping[str, Any]):
    """An Admin from the keys of ``config`` it reads (the source's consumer or the sink's producer refuses
    the rest, see ``client.admin.admin_config``)."""
    from ads_spark.client.admin import Admin, admin_config
    return _cached("admin", admin_config(config), Admin)


# One pass over the brokers when a Spark read or write is planned; then the topic is taken as Kafka-shaped.
SCHEMA_LOOKUP_TIMEOUT_MS = 10_000


def describe_schema_once(admin, topic: str, when: str) -> dict[str, Any] | None:
    """``admin.describe_schema(topic)`` asking each broker once within SCHEMA_LOOKUP_TIMEOUT_MS (no retries), or
    None with a warning when none answers: planning goes on Kafka-shaped (the existing Spark options and their
    errors keep working without a cluster), and a typed topic then fails with the brokers' error naming it."""
    from ads_spark.errors import NetworkExceptionError, RequestTimedOutError
    try:
        return admin.describe_schema(topic, once_timeout_ms=SCHEMA_LOOKUP_TIMEOUT_MS)
    except (NetworkExceptionError, RequestTimedOutError) as exc:
        log.warning("no broker answered for topic '%s''s schema %s (%s); taking it as Kafka-shaped", topic, when, exc)
        return None


def consumer_for(config: Mapping[str, Any]):
    from ads_spark.client import Consumer
    return _cached("consumer", config, Consumer)


def producer_for(config: Mapping[str, Any]):
    from ads_spark.client import Producer
    return _cached("producer", config, Producer)


def connections_for(config: Mapping[str, Any]):
    """Pooled broker connections and metadata, shared by the per-task producers of the sink."""
    from ads_spark.protocol.connection import Connections
    return _cached("connections", config, Connections)


def evict(kind: str, config: Mapping[str, Any]) -> None:
    """Drop (and close) a cached client after an unexpected failure."""
    if kind == "admin":
        from ads_spark.client.admin import admin_config
        config = admin_config(config)  # as admin_for keyed it
    with _clients_lock:
        entry = _clients.pop(_cache_key(kind, config), None)
    _close_quietly(entry[1] if entry else None)


def cached_client_count() -> int:
    return len(_clients)


# ---- the driver's SASL login -------------------------------------------------------


@dataclass(eq=False)
class _Login:
    config: dict[str, str]  # client config without the login keys
    security: Any  # client_security.ClientSecurity; its password is a Secret
    token: str = field(default="", repr=False)
    issued_ms: int = 0
    expiry_ms: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


_logins: OrderedDict[str, _Login] = OrderedDict()
_logins_lock = threading.Lock()
_HANDLE_KEY = os.urandom(32)  # never leaves the process: a handle names a login only where it was registered


def register_login(config: Mapping[str, str], security) -> str:
    """Keep a SASL login (config without login keys + ``ClientSecurity``) in this process; an opaque handle.

    The same login registered twice gets the same handle (and shares one token), so planning several
    DataFrames as the same user authenticates once."""
    material = json.dumps([sorted(config.items()), security.username, security.password.reveal()])
    handle = hmac.new(_HANDLE_KEY, material.encode(), hashlib.sha256).hexdigest()[:32]
    with _logins_lock:
        if handle in _logins:
            _logins.move_to_end(handle)
        else:
            _logins[handle] = _Login(dict(config), security)
            while len(_logins) > LOGINS_MAX:
                _logins.popitem(last=False)
    return handle


def token_for(handle: str, now_ms: int | None = None) -> tuple[str, int]:
    """(token, expiry_ms) of a registered login: authenticates if it has none or it is past half its life.

    A refresh that fails while the current token is still valid keeps that token (logged), so a broker
    blip does not fail a planning call; an authentication error is raised as it is (non-retriable)."""
    from ads_spark.errors import AdsError, SaslAuthenticationFailedError

    with _logins_lock:
        login = _logins.get(handle)
    if login is None:
        raise SaslAuthenticationFailedError("this process holds no SASL login for the query (a task was "
                                            "planned without a token); the driver authenticates and plans")
    with login.lock:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        half_life_ms = (login.expiry_ms - login.issued_ms) * TOKEN_REFRESH_FRACTION
        if login.token and now < login.issued_ms + half_life_ms:
            return login.token, login.expiry_ms
        try:
            token, expiry_ms = _authenticate(login.config, login.security)
        except AdsError as exc:
            if not (login.token and now < login.expiry_ms and exc.retriable):
                raise
            log.warning("ads spark: could not renew the token of User:%s (%s); the current one is valid "
                        "for %d s more", login.security.username, type(exc).__name__, (login.expiry_ms - now) // 1000)
            return login.token, login.expiry_ms
        login.token, login.issued_ms, login.expiry_ms = token, now, expiry_ms
        log.info("ads spark: authenticated as User:%s; token valid for %d s", login.security.username,
                 max(0, expiry_ms - now) // 1000)
        return token, expiry_ms


def driver_config(config: Mapping[str, str], handle: str) -> dict[str, str]:
    """``config`` as the driver uses it: with the login's current token when ``handle`` names a login."""
    if not handle:
        return dict(config)
    return with_token(config, token_for(handle)[0])


def with_token(config: Mapping[str, str], token: str) -> dict[str, str]:
    return {**config, TOKEN_KEY: token}


def _authenticate(config: Mapping[str, str], security) -> tuple[str, int]:
    """One ``authenticate`` call with the password (the only place it is sent): (token, expiry_ms).

    A fresh ``ClientTransport`` per call, so each renewal really asks a broker (a transport caches its
    token until 80% of its life); the expiry is the one the token states (``transport.token_expiry_ms``)."""
    from ads_spark.protocol import wire
    from ads_spark.protocol.transport import ClientTransport, token_expiry_ms

    transport = ClientTransport(security, bootstrap=wire.parse_bootstrap(config["bootstrap.servers"]))
    token = transport.tokens.token()
    expiry_ms = token_expiry_ms(token)
    if expiry_ms is None:  # unreadable expiry: renew after a minute rather than never
        expiry_ms = int(time.time() * 1000) + 2 * UNKNOWN_EXPIRY_RENEW_MS
    return token, expiry_ms
