"""What this broker believes about the cluster: live brokers, topics, partition leaders.

The controller pushes it (``update_metadata``); every broker answers clients'
metadata requests from it, so a client can bootstrap from any broker. Updates
carrying an older controller epoch than the last one applied are rejected (the
rule of ``replication/fencing.py``, which the control handlers apply too), so a
deposed controller cannot roll the cache back.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from ads_spark.errors import error_for
from ads_spark.replication import fencing


@dataclass(frozen=True)
class BrokerInfo:
    broker_id: int
    host: str
    port: int
    rack: str | None = None
    broker_epoch: int = -1
    metrics_port: int | None = None  # its Prometheus endpoint on the same host, if it serves one
    # Every listener's advertised address, (name, host, port, protocol) sorted by name. Empty: the broker
    # registered before listeners had names, and host/port is its one (PLAINTEXT) endpoint.
    endpoints: tuple[tuple[str, str, int, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        value = {"id": self.broker_id, "host": self.host, "port": self.port, "rack": self.rack,
                 "broker_epoch": self.broker_epoch, "metrics_port": self.metrics_port}
        if self.endpoints:
            value["endpoints"] = {name: {"host": host, "port": port, "protocol": protocol}
                                  for name, host, port, protocol in self.endpoints}
        return value

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> "BrokerInfo":
        metrics_port = value.get("metrics_port")
        endpoints = tuple(sorted((str(name), str(e["host"]), int(e["port"]), str(e["protocol"]))
                                 for name, e in (value.get("endpoints") or {}).items()))
        return cls(int(value["id"]), str(value["host"]), int(value["port"]), value.get("rack") or None,
                   int(value.get("broker_epoch", -1)), int(metrics_port) if metrics_port else None, endpoints)

    def endpoint(self, listener_name: str, inter_broker_listener_name: str) -> tuple[str, int] | None:
        """Its address on ``listener_name``, None when it has no such listener. A broker registered without
        endpoints counts as one endpoint under the inter-broker name (its host/port)."""
        if not self.endpoints:
            return (self.host, self.port) if listener_name == inter_broker_listener_name else None
        found = next((e for e in self.endpoints if e[0] == listener_name), None)
        return None if found is None else (found[1], found[2])

    def on_listener(self, listener_name: str, inter_broker_listener_name: str) -> dict[str, Any] | None:
        """Its metadata entry as a client of ``listener_name`` is given it: host/port of that listener, no
        endpoints (a client dials what it is given); None when it has no such listener."""
        address = self.endpoint(listener_name, inter_broker_listener_name)
        if address is None:
            return None
        value = self.to_json()
        value.pop("endpoints", None)
        value["host"], value["port"] = address
        return value


@dataclass
class MetadataCache:
    controller_id: int = -1
    controller_epoch: int = -1
    brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    # topic -> {"topic_id": str, "partitions": {p: partition json}}
    topics: dict[str, dict[str, Any]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def apply_update(self, request: dict[str, Any]) -> None:
        epoch = int(request.get("controller_epoch", -1))
        with self.lock:
            verdict = fencing.check_control_request(self.controller_epoch, epoch)
            if not verdict.obeyed:
                raise error_for(verdict.error, f"metadata refused: {verdict.message}")
            self.controller_epoch = verdict.controller_epoch
            self.controller_id = int(request.get("controller_id", -1))
            if "brokers" in request:
                self.brokers = {b.broker_id: b for b in map(BrokerInfo.from_json, request["brokers"])}
            if request.get("full"):
                self.topics = {}
            for entry in request.get("partitions", []):
                topic = self.topics.setdefault(entry["topic"], {"topic_id": entry.get("topic_id"), "partitions": {}})
                if entry.get("topic_id") and topic.get("topic_id") != entry["topic_id"]:
                    topic["topic_id"] = entry["topic_id"]
                    topic["partitions"] = {}
                topic["partitions"][int(entry["partition"])] = entry
            for name in request.get("deleted_topics", []):
                self.topics.pop(name, None)

    def topic_names(self) -> list[str]:
        with self.lock:
            return sorted(self.topics)

    def describe(self, names: list[str] | None) -> list[dict[str, Any]]:
        with self.lock:
            chosen = sorted(self.topics) if names is None else names
            result = []
            for name in chosen:
                topic = self.topics.get(name)
                if topic is None:
                    result.append({"topic": name, "error_code": 3, "partitions": []})
                    continue
                partitions = [dict(topic["partitions"][p]) for p in sorted(topic["partitions"])]
                # Every partition entry carries its topic's overrides (the controller sends them with each):
                # the topic's config is any one of them, so `ads topics describe --json` can show it.
                config = dict(partitions[0].get("config") or {}) if partitions else {}
                result.append({"topic": name, "topic_id": topic.get("topic_id"), "error_code": 0,
                               "partitions": partitions, "config": config})
            return result

    def partition(self, topic: str, partition: int) -> dict[str, Any] | None:
        with self.lock:
            entry = self.topics.get(topic, {}).get("partitions", {}).get(partition)
            return dict(entry) if entry else None

    def broker(self, broker_id: int) -> BrokerInfo | None:
        with self.lock:
            return self.brokers.get(broker_id)

    def live_brokers(self) -> list[BrokerInfo]:
        with self.lock:
            return [self.brokers[b] for b in sorted(self.brokers)]

    def to_json(self, listener_name: str | None = None, inter_broker_listener_name: str = "") -> dict[str, Any]:
        """The cluster part of a metadata answer. With ``listener_name``: each broker's address on that
        listener, brokers without it left out (Kafka's metadata answers the caller's listener only)."""
        with self.lock:
            brokers = [self.brokers[b] for b in sorted(self.brokers)]
            epoch, controller_id = self.controller_epoch, self.controller_id
        if listener_name is None:
            entries = [b.to_json() for b in brokers]
        else:
            entries = [e for e in (b.on_listener(listener_name, inter_broker_listener_name) for b in brokers)
                       if e is not None]
        return {"controller_id": controller_id, "controller_epoch": epoch, "brokers": entries}
