"""Consumer-group lag as Prometheus gauges, on the broker that coordinates each group.

Owns ``ads_consumer_group_committed_offset{group,topic,partition}`` and
``ads_consumer_group_lag{group,topic,partition}`` (high watermark minus committed offset: what the group
has not read of what it could read). Only the coordinator knows a group's offsets, so each broker exports
the groups of the ``__consumer_offsets`` partitions it leads and loaded (``coordinator.loaded_partitions``);
summed over the brokers, every group appears once (twice for a moment during a coordinator move is
possible; Prometheus keeps both series apart by instance).

The high watermark of a partition this broker leads is read from the replica when scraped. Other
partitions' come from their leaders: a daemon thread asks each leader with one ``list_offsets`` per
``REMOTE_HW_REFRESH_S`` for the partitions the last scrape needed (and at once when a scrape needs one it
has never asked), each call bounded by ``REMOTE_HW_TIMEOUT_MS``. So a remote HW is at most about
``REMOTE_HW_REFRESH_S + REMOTE_HW_TIMEOUT_MS`` old; one not refreshed for ``REMOTE_HW_STALE_MAX_S`` (its
leader does not answer) is dropped, and its lag is not exported rather than shown stale (the committed
offset still is). A stale HW can be below a newer commit: lag is clamped at 0. The thread starts on the
first scrape that needs it, so a broker nobody scrapes asks nothing.

Bounded: at most ``LAG_SERIES_MAX`` (group, partition) series per broker; what is left out is counted in
``ads_consumer_group_lag_series_dropped``.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Iterable

from prometheus_client.core import GaugeMetricFamily

log = logging.getLogger("ads.broker.group")

LAG_SERIES_MAX = 10_000
REMOTE_HW_REFRESH_S = 5.0
REMOTE_HW_TIMEOUT_MS = 2_000
REMOTE_HW_STALE_MAX_S = 30.0
LIST_OFFSETS_LATEST = -1

Key = tuple[str, int]
# (leader broker id, partitions) -> {partition: high watermark}; raises on a failed call
FetchHighWatermarks = Callable[[int, list[Key]], dict[Key, int]]


class RemoteHighWatermarks:
    """High watermarks of partitions led elsewhere, refreshed on a daemon thread (see the module doc)."""

    def __init__(self, leader_of: Callable[[Key], int], fetch: FetchHighWatermarks,
                 refresh_s: float = REMOTE_HW_REFRESH_S, stale_max_s: float = REMOTE_HW_STALE_MAX_S,
                 clock: Callable[[], float] = time.monotonic):
        self._leader_of = leader_of
        self._fetch = fetch
        self._refresh_s = refresh_s
        self._stale_max_s = stale_max_s
        self._clock = clock
        self._lock = threading.Lock()
        self._wanted: frozenset[Key] = frozenset()
        self._known: dict[Key, tuple[int, float]] = {}  # key -> (HW, when it was answered)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def want(self, keys: Iterable[Key]) -> None:
        """The partitions the last scrape needed; the thread starts (or is woken) when one is new."""
        wanted = frozenset(keys)
        with self._lock:
            self._wanted = wanted
            new = any(key not in self._known for key in wanted)
            for key in [k for k in self._known if k not in wanted]:
                del self._known[key]  # only what is wanted is kept: bounded by LAG_SERIES_MAX
            if wanted and self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._run, name="ads-group-lag-hw", daemon=True)
                self._thread.start()
        if new:
            self._wake.set()

    def get(self, key: Key) -> int | None:
        with self._lock:
            found = self._known.get(key)
        if found is None or self._clock() - found[1] > self._stale_max_s:
            return None
        return found[0]

    def refresh(self) -> None:
        """One round: every wanted partition asked of its leader, one call per leader."""
        with self._lock:
            wanted = sorted(self._wanted)
        by_leader: dict[int, list[Key]] = {}
        for key in wanted:
            leader = self._leader_of(key)
            if leader >= 0:
                by_leader.setdefault(leader, []).append(key)
        for leader, keys in sorted(by_leader.items()):
            try:
                answered = self._fetch(leader, keys)
            except Exception as exc:  # down or slow: its HWs go stale, then unexported
                log.debug("lag gauges: broker %d did not answer list_offsets: %s", leader, exc)
                continue
            now = self._clock()
            with self._lock:
                for key, hw in answered.items():
                    if key in self._wanted:
                        self._known[key] = (int(hw), now)

    def close(self) -> None:
        self._stop.set()
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self.refresh()
            except Exception:
                log.warning("lag gauges: refreshing high watermarks failed", exc_info=True)
            self._wake.wait(self._refresh_s)


def leader_fetcher(broker) -> tuple[FetchHighWatermarks, Callable[[], None]]:
    """``list_offsets`` to a leader's inter-broker endpoint as this broker, and a close function for its
    connections."""
    from ads_spark.protocol import wire
    from ads_spark.protocol.connection import Connections

    # As the controller's channels: the inter-broker listener's security, this broker as the bootstrap.
    config = broker.config.inter_broker_client_config(f"{broker.host}:{broker.port}")
    connections = Connections({**config, "request.timeout.ms": REMOTE_HW_TIMEOUT_MS})
    listener = broker.config.inter_broker_listener_name

    def fetch(leader: int, keys: list[Key]) -> dict[Key, int]:
        info = broker.metadata.broker(leader)
        address = None if info is None else info.endpoint(listener, listener)
        if address is None:
            return {}
        body = {"partitions": [{"topic": t, "partition": p, "timestamp": LIST_OFFSETS_LATEST} for t, p in keys]}
        answer = connections.call_action(address[0], address[1], wire.ACTION_LIST_OFFSETS, body,
                                         timeout_ms=REMOTE_HW_TIMEOUT_MS)
        return {(item["topic"], int(item["partition"])): int(item["offset"])
                for item in answer.get("partitions", []) if not item.get("error_code")}

    return fetch, connections.close


def committed_offsets(coordinator, limit: int) -> list[tuple[str, str, int, int]]:
    """(group, topic, partition, committed offset) of the groups in the coordinator's loaded and current
    ``__consumer_offsets`` partitions, at most ``limit``; each partition's lock is held only to copy it."""
    entries: list[tuple[str, str, int, int]] = []
    for part in sorted(coordinator.loaded_partitions(), key=lambda p: p.number):
        with part.lock:
            held = [(group_id, topic, partition, committed.offset)
                    for group_id, offsets in part.offsets.items() for (topic, partition), committed in offsets.items()]
        entries.extend(sorted(held))
        if len(entries) >= limit:
            return entries[:limit]
    return entries


def _leader_from_metadata(broker) -> Callable[[Key], int]:
    def leader_of(key: Key) -> int:
        entry = broker.metadata.partition(key[0], key[1])
        return -1 if entry is None else int(entry.get("leader", -1))
    return leader_of


class GroupLagCollector:
    """The Prometheus collector BrokerMetrics registers; reads ``broker.group_coordinator`` when scraped."""

    def __init__(self, broker, remote: RemoteHighWatermarks | None = None, series_max: int = LAG_SERIES_MAX):
        self.broker = broker
        self.series_max = series_max
        self._remote = remote
        self._close_connections: Callable[[], None] = lambda: None
        self._lock = threading.Lock()

    def _remote_hws(self) -> RemoteHighWatermarks:
        with self._lock:
            if self._remote is None:
                fetch, self._close_connections = leader_fetcher(self.broker)
                self._remote = RemoteHighWatermarks(_leader_from_metadata(self.broker), fetch)
            return self._remote

    def close(self) -> None:
        with self._lock:
            if self._remote is not None:
                self._remote.close()
            self._close_connections()

    def collect(self):
        committed = GaugeMetricFamily("ads_consumer_group_committed_offset", "a group's committed offset (the "
                                      "next offset it reads), on its coordinator", labels=["group", "topic",
                                                                                          "partition"])
        lag = GaugeMetricFamily("ads_consumer_group_lag", "high watermark minus the group's committed offset, on "
                                "its coordinator (remote HWs at most ~7 s old)", labels=["group", "topic",
                                                                                        "partition"])
        coordinator = getattr(self.broker, "group_coordinator", None)
        entries = committed_offsets(coordinator, self.series_max + 1) if coordinator is not None else []
        dropped = max(0, len(entries) - self.series_max)
        entries = entries[:self.series_max]
        local = {(p.topic, p.partition): p.high_watermark for p in self.broker.replica_manager.partitions()
                 if p.is_leader}
        remote_keys = {(topic, partition) for _, topic, partition, _ in entries} - set(local)
        remote = self._remote_hws() if remote_keys or self._remote is not None else None
        if remote is not None:
            remote.want(remote_keys)
        for group_id, topic, partition, offset in entries:
            labels = [group_id, topic, str(partition)]
            committed.add_metric(labels, offset)
            hw = local.get((topic, partition))
            if hw is None and remote is not None:
                hw = remote.get((topic, partition))
            if hw is not None:
                lag.add_metric(labels, max(0, hw - offset))
        yield committed
        yield lag
        yield GaugeMetricFamily("ads_consumer_group_lag_series_dropped", f"(group, partition) series left out "
                                f"over the limit of {self.series_max} per broker", value=dropped)
