"""The Kafka APIs a broker serves: the per-call objects handlers receive, and the version table.

Each ``handlers_*`` module (and ``sasl``) declares ``API_HANDLERS``, a list of ``ApiHandler``: the API
key, the versions it implements in full, and the function. ``registry()`` merges them: ApiVersions
answers exactly that table, so a client never picks a version or an API without a handler (an
advertised API without one makes clients disconnect, and clients switch features on from versions).

A handler is ``handler(call, request) -> dict | None``: the decoded kio request in, the response's
fields as a plain dict out (``entities.build`` makes the version's entity), or None for no response at
all (Produce with acks=0). Errors of a partition or a group are answered in the dict; an exception
that escapes a handler closes the connection (server.py), which Kafka's clients answer by reconnecting.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from ads_spark.broker.rpc.call_context import CallContext

# The modules whose API_HANDLERS make up the table (imported lazily: handler modules import the broker's).
HANDLER_MODULES = (
    "ads_spark.kafka.handlers_metadata",
    "ads_spark.kafka.handlers_data",
    "ads_spark.kafka.handlers_groups",
    "ads_spark.kafka.handlers_admin",
    "ads_spark.kafka.sasl",
)


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


class ConnectionState:
    """One Kafka connection's identity, owned by server.py. ``context``: who is calling (the principal of a
    verified certificate, of a SASL login, or ANONYMOUS), from which host, through which listener
    (``kafka.<NAME>``, so ADS's metadata and coordinator answers name that listener's addresses).
    ``authenticated``: False on a SASL listener until SaslAuthenticate succeeded; only handlers with
    ``before_auth`` are served until then. ``sasl``: sasl.py's state of the exchange in progress."""

    __slots__ = ("context", "authenticated", "sasl")

    def __init__(self, context: CallContext, authenticated: bool):
        self.context = context
        self.authenticated = authenticated
        self.sasl: Any = None

    def set_principal(self, principal: str) -> None:
        ctx = self.context
        self.context = CallContext(principal, ctx.host, ctx.listener_name, ctx.security_protocol)
        self.authenticated = True


@dataclass(frozen=True, slots=True)
class KafkaCall:
    broker: Any  # ads_spark.broker.broker.Broker
    header: RequestHeader
    connection: ConnectionState

    @property
    def version(self) -> int:
        return self.header.api_version

    @property
    def context(self) -> CallContext:
        return self.connection.context


Handler = Callable[[KafkaCall, Any], "dict | None"]


@dataclass(frozen=True, slots=True)
class ApiHandler:
    api_key: int
    name: str
    min_version: int
    max_version: int
    handler: Handler
    before_auth: bool = False  # ApiVersions, SaslHandshake, SaslAuthenticate: served before a SASL login

    def serves(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


_registry: dict[int, ApiHandler] | None = None


def registry() -> dict[int, ApiHandler]:
    """Every served API by key (built once). Two modules claiming one key is a programming error."""
    global _registry
    if _registry is None:
        table: dict[int, ApiHandler] = {}
        for module_name in HANDLER_MODULES:
            for entry in importlib.import_module(module_name).API_HANDLERS:
                if entry.api_key in table:
                    raise RuntimeError(f"API key {entry.api_key} ({entry.name}) is served twice")
                table[entry.api_key] = entry
        _registry = table
    return _registry
