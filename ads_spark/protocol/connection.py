"""Connections to brokers and the client's view of cluster metadata.

A client holds one Flight connection per broker address and one metadata cache
(brokers, partition leaders and epochs, topic ids) refreshed from any reachable
broker. Every call goes through ``call_action``/``call_fetch`` so that Flight
and socket failures come out as typed ``AdsError``s, and a retriable error marks
the metadata stale so the next attempt finds the new leader. Connections and
call options (TLS, the SASL token) come from one ``transport.ClientTransport``
built from the same config; a TLS or authentication failure is not retriable,
so the retry loops here stop at once instead of running to their timeout.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

import pyarrow.flight as flight

from ads_spark.protocol import wire
from ads_spark.protocol.transport import ClientTransport
from ads_spark.errors import (
    AdsError,
    ErrorCode,
    LeaderNotAvailableError,
    NetworkExceptionError,
    BrokerNotAvailableError,
    RequestTimedOutError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)

METADATA_MAX_AGE_MS_DEFAULT = 300_000
RETRY_BACKOFF_MS_DEFAULT = 100
FAILED_BROKER_LAST_S = 30.0  # how long a broker that did not answer is asked last


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    elr: tuple[int, ...] = ()
    observers: tuple[int, ...] = ()
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    broker_id: int
    host: str
    port: int
    rack: str | None


@dataclass
class ClusterView:
    brokers: dict[int, BrokerAddress] = field(default_factory=dict)
    controller_id: int = -1
    topics: dict[str, dict[int, PartitionMetadata]] = field(default_factory=dict)
    topic_ids: dict[str, str] = field(default_factory=dict)
    fetched_at_ms: int = 0
    # Topics the caller named but may not Describe (TOPIC_AUTHORIZATION_FAILED), with the broker's message.
    refused: dict[str, str] = field(default_factory=dict)


class Connections:
    """Flight clients by address and the metadata cache; safe to share between threads."""

    def __init__(self, config: dict[str, Any], transport: ClientTransport | None = None):
        self.bootstrap = wire.parse_bootstrap(config.get("bootstrap.servers", ""))
        self.transport = transport or ClientTransport.from_config(config)
        self.transport.set_authentication_candidates(self._candidates)
        self.request_timeout_ms = int(config.get("request.timeout.ms", 30000))
        self.retry_backoff_ms = int(config.get("retry.backoff.ms", RETRY_BACKOFF_MS_DEFAULT))
        self.metadata_max_age_ms = int(config.get("metadata.max.age.ms", METADATA_MAX_AGE_MS_DEFAULT))
        self._clients: dict[tuple[str, int], flight.FlightClient] = {}
        self._lock = threading.Lock()
        self._failed_at: dict[tuple[str, int], float] = {}  # bounded by the brokers ever known
        self._view = ClusterView()
        self._stale = True

    # ---- raw calls -------------------------------------------------------------

    def client_for(self, host: str, port: int) -> flight.FlightClient:
        key = (host, port)
        with self._lock:
            found = self._clients.get(key)
            if found is None:
                found = self.transport.connect(host, port)
                self._clients[key] = found
            return found

    def drop(self, host: str, port: int) -> None:
        with self._lock:
            found = self._clients.pop((host, port), None)
        if found is not None:
            try:
                found.close()
            except Exception:
                pass

    def call_action(self, host: str, port: int, action: str, body: dict[str, Any],
                    timeout_ms: int | None = None) -> dict[str, Any]:
        timeout_s = (timeout_ms or self.request_timeout_ms) / 1000
        for attempt in range(2):  # a second only when the broker refused a token the transport then dropped
            options = self.transport.call_options(timeout_s, (host, port))
            try:
                results = list(self.client_for(host, port).do_action(flight.Action(action, wire.dumps(body)), options))
                break
            except Exception as exc:
                error = self.transport.refused(wire.to_ads_error(exc), options)
                if isinstance(error, NetworkExceptionError):
                    self.drop(host, port)
                    error = self.transport.explain_unreachable(error, host, port)
                if attempt or error.code != ErrorCode.SASL_AUTHENTICATION_FAILED or not error.retriable:
                    raise error from None
        if not results:
            return {}
        return wire.loads(results[0].body, f"{action} response")

    def call_broker(self, broker_id: int, action: str, body: dict[str, Any],
                    timeout_ms: int | None = None) -> dict[str, Any]:
        address = self.broker(broker_id)
        return self.call_action(address.host, address.port, action, body, timeout_ms)

    def _candidates(self) -> list[tuple[str, int]]:
        """The known brokers (shuffled), then the bootstrap list."""
        candidates = [(b.host, b.port) for b in self._view.brokers.values()]
        random.shuffle(candidates)
        return candidates + [a for a in self.bootstrap if a not in candidates]

    def call_any(self, action: str, body: dict[str, Any], timeout_ms: int | None = None) -> dict[str, Any]:
        """Try the known brokers, then the bootstrap list; the first answer wins. A non-retriable error
        (TLS, authentication, authorization) ends the search: another broker would answer the same."""
        candidates = self._candidates()
        # A broker that just failed to answer goes last: asking an unreachable one first costs a whole
        # request timeout, on threads (a producer's sender) that every partition waits for.
        now = time.monotonic()
        with self._lock:
            failed_at = dict(self._failed_at)
        candidates.sort(key=lambda a: now - failed_at.get(a, -1e9) < FAILED_BROKER_LAST_S)
        last: AdsError | None = None
        for host, port in candidates:
            try:
                answer = self.call_action(host, port, action, body, timeout_ms)
            except (NetworkExceptionError, RequestTimedOutError, BrokerNotAvailableError) as exc:  # down, stalled, new
                last = exc
                with self._lock:
                    self._failed_at[(host, port)] = time.monotonic()
                continue
            with self._lock:
                self._failed_at.pop((host, port), None)
            return answer
        raise last or NetworkExceptionError("no broker reachable")

    # ---- metadata ----------------------------------------------------------------

    def mark_stale(self) -> None:
        self._stale = True

    def refresh(self, topics: Iterable[str] | None = None) -> ClusterView:
        response = self.call_any(wire.ACTION_METADATA, {"topics": list(topics) if topics is not None else None})
        view = ClusterView(controller_id=int(response.get("controller_id", -1)),
                           fetched_at_ms=int(time.time() * 1000))
        for b in response.get("brokers", []):
            view.brokers[int(b["id"])] = BrokerAddress(int(b["id"]), b["host"], int(b["port"]), b.get("rack"))
        for topic in response.get("topics", []):
            if topic.get("error_code"):
                if topic["error_code"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                    view.refused[topic["topic"]] = topic.get("message") or f"not authorized for topic '{topic['topic']}'"
                continue
            view.topic_ids[topic["topic"]] = topic.get("topic_id") or ""
            view.topics[topic["topic"]] = {
                int(p["partition"]): _partition_metadata(topic["topic"], p) for p in topic.get("partitions", [])
            }
        with self._lock:
            if topics is not None:
                merged_topics = dict(self._view.topics)
                merged_topics.update(view.topics)
                merged_ids = dict(self._view.topic_ids)
                merged_ids.update(view.topic_ids)
                view.topics, view.topic_ids = merged_topics, merged_ids
            self._view = view
            self._stale = False
        return view

    def view(self) -> ClusterView:
        age_ms = time.time() * 1000 - self._view.fetched_at_ms
        if self._stale or age_ms > self.metadata_max_age_ms:
            self.refresh()
        return self._view

    def partitions_for(self, topic: str) -> dict[int, PartitionMetadata]:
        found = self.view().topics.get(topic)
        if found is None:
            fresh = self.refresh([topic])
            found = fresh.topics.get(topic)
            if topic in fresh.refused:  # authorization comes before existence: never "does not exist" here
                raise TopicAuthorizationFailedError(fresh.refused[topic])
        if found is None:
            raise _absent(f"topic '{topic}' does not exist")
        return found

    def partition(self, topic: str, partition: int) -> PartitionMetadata:
        found = self.partitions_for(topic).get(partition)
        if found is None:  # maybe partitions were added since the cached view: look once more
            found = (self.refresh([topic]).topics.get(topic) or {}).get(partition)
        if found is None:
            raise _absent(f"topic '{topic}' has no partition {partition}")
        return found

    def leader_of(self, topic: str, partition: int) -> tuple[PartitionMetadata, BrokerAddress]:
        meta = self.partition(topic, partition)
        if meta.leader < 0 or meta.leader not in self._view.brokers:
            self.mark_stale()
            raise LeaderNotAvailableError(f"{topic}-{partition} has no leader right now")
        return meta, self._view.brokers[meta.leader]

    def broker(self, broker_id: int) -> BrokerAddress:
        view = self.view()
        if broker_id not in view.brokers:
            view = self.refresh()
        if broker_id not in view.brokers:
            raise BrokerNotAvailableError(f"broker {broker_id} is not alive")
        return view.brokers[broker_id]

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            try:
                client.close()
            except Exception:
                pass


def _partition_metadata(topic: str, p: dict[str, Any]) -> PartitionMetadata:
    return PartitionMetadata(
        topic=topic, partition=int(p["partition"]), leader=int(p.get("leader", -1)),
        leader_epoch=int(p.get("leader_epoch", -1)), replicas=tuple(p.get("replicas", ())),
        isr=tuple(p.get("isr", ())), elr=tuple(p.get("elr", ()) or ()),
        observers=tuple(p.get("observers", ()) or ()),
        offline_replicas=tuple(p.get("offline_replicas", ()) or ()),
    )


def _absent(message: str) -> UnknownTopicOrPartitionError:
    """Fresh metadata says it does not exist: retrying will not make it appear, so not retriable.

    (A broker answering UNKNOWN_TOPIC_OR_PARTITION for a partition the metadata does
    list, e.g. while a new replica is being created, stays retriable.)
    """
    error = UnknownTopicOrPartitionError(message)
    error.retriable = False
    return error


def backoff_sleep(attempt: int, base_ms: int, max_ms: int = 1000) -> None:
    """Exponential back-off with jitter, bounded by ``max_ms``."""
    delay_ms = min(max_ms, base_ms * (2 ** min(attempt, 10)))
    time.sleep(delay_ms * (0.5 + random.random() / 2) / 1000)
