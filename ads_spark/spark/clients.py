"""Client objects per Python process, shared by the Spark source's readers and the sink's writers.

A process-wide cache of ``Admin``/``Consumer``/``Producer`` (and pooled ``Connections``) keyed by
kind and client config. Spark reuses Python workers across tasks, and the streaming source's
planner process lives as long as the query; opening Flight connections once per process instead
of once per task keeps small micro-batches cheap. Readers and writers keep only option values
(they are pickled to executors); they ask this module for a client inside ``read()`` /
``write()``. A client that raised something unexpected is evicted so the next task starts afresh.

``ads_spark.client`` is imported lazily so that resolving the format name does not load Flight.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Mapping

_clients: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}
_clients_lock = threading.Lock()


def _cache_key(kind: str, config: Mapping[str, Any]) -> tuple[str, tuple[tuple[str, str], ...]]:
    return kind, tuple(sorted((str(k), str(v)) for k, v in config.items()))


def _cached(kind: str, config: Mapping[str, Any], make: Callable[[dict], Any]) -> Any:
    key = _cache_key(kind, config)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = make(dict(config))
        return client


def admin_for(config: Mapping[str, Any]):
    """An Admin from the keys of ``config`` it reads (the source's consumer or the sink's producer refuses
    the rest, see ``client.admin.admin_config``)."""
    from ads_spark.client.admin import Admin, admin_config
    return _cached("admin", admin_config(config), Admin)


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
        client = _clients.pop(_cache_key(kind, config), None)
    if client is not None:
        try:
            client.close()
        except Exception:  # closing a broken client must not hide the original error
            pass


def cached_client_count() -> int:
    return len(_clients)
