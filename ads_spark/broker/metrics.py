"""Prometheus metrics of a broker, with the names operators know from Kafka (INTERFACES.md).

Gauges are computed when scraped, from the broker's own state, so nothing on a
hot path updates them; counters (ISR shrinks and expands, failed ISR updates,
elections) are read from the plain integers the ISR writer and the controller
keep. The endpoint listens on
127.0.0.1 at ``metrics.port`` (0 picks a free port; -1 turns it off).
"""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily



class BrokerMetrics:
    def __init__(self, broker):
        self.broker = broker
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_StateCollector(broker))
        self.port = -1
        self._server = None
        self._lock = threading.Lock()

    def serve(self, port: int) -> int:
        if port < 0:
            return -1
        server, _thread = start_http_server(port, addr="127.0.0.1", registry=self.registry)
        self._server = server
        self.port = server.server_address[1]
        return self.port

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server = None


class _StateCollector:
    def __init__(self, broker):
        self.broker = broker

    def collect(self):
        under_replicated = under_min_isr = 0
        leo = GaugeMetricFamily("ads_log_end_offset", "log end offset", labels=["topic", "partition"])
        size = GaugeMetricFamily("ads_log_size_bytes", "log size in bytes", labels=["topic", "partition"])
        for partition in self.broker.replica_manager.partitions():
            labels = [partition.topic, str(partition.partition)]
            leo.add_metric(labels, partition.log.log_end_offset)
            size.add_metric(labels, partition.log.size_bytes)
            state = partition.state
            if partition.is_leader:
                isr = len(state.isr)
                if isr < len(state.replicas):
                    under_replicated += 1
                if isr < state.config.min_insync_replicas:
                    under_min_isr += 1
        yield GaugeMetricFamily("ads_under_replicated_partitions", "led partitions whose ISR is smaller than "
                                "their replica set", value=under_replicated)
        yield GaugeMetricFamily("ads_under_min_isr_partition_count", "led partitions below min.insync.replicas",
                                value=under_min_isr)
        controller = getattr(getattr(self.broker, "zk", None), "controller", None)
        active = bool(controller and controller.active)
        yield GaugeMetricFamily("ads_active_controller_count", "1 on the active controller",
                                value=1 if active else 0)
        offline = controller.offline_partition_count() if active and hasattr(
            controller, "offline_partition_count") else 0
        yield GaugeMetricFamily("ads_offline_partitions_count", "partitions without a leader (controller only)",
                                value=offline)
        writer = getattr(self.broker, "isr_writer", None)
        for name, help_text, value in (
                ("ads_isr_shrinks", "ISR shrinks on partitions this broker leads", getattr(writer, "shrinks", 0)),
                ("ads_isr_expands", "ISR expansions on partitions this broker leads", getattr(writer, "expands", 0)),
                ("ads_failed_isr_updates", "ISR writes rejected by ZooKeeper or unanswered",
                 getattr(writer, "failed_updates", 0)),
                ("ads_leader_elections", "leader changes written by this broker's controller",
                 getattr(controller, "elections", 0)),
                ("ads_unclean_leader_elections", "unclean elections written by this broker's controller",
                 getattr(controller, "unclean_elections", 0)),
                ("ads_leader_election_seconds", "time this broker's controller spent writing and pushing decisions",
                 getattr(controller, "election_seconds", 0.0))):
            yield CounterMetricFamily(name, help_text, value=value)
        requests = CounterMetricFamily("ads_requests", "data-plane requests handled, by kind", labels=["request"])
        handlers = getattr(self.broker, "data", None)
        for kind, count in (getattr(handlers, "request_counts", None) or {}).items():
            requests.add_metric([kind], count)
        yield requests
        yield from _stream_metrics(getattr(getattr(self.broker, "server", None), "streams", None))
        yield leo
        yield size


def _stream_metrics(streams):
    """The Flight stream bounds of broker/rpc/connections.py: what is open, what was refused, what was closed."""
    if streams is None:
        return
    yield GaugeMetricFamily("ads_flight_streams_open", "produce streams and fetch sessions open on this broker",
                            value=streams.open_count())
    yield GaugeMetricFamily("ads_flight_stream_connections", "client connections holding an open stream",
                            value=streams.connection_count())
    refused = CounterMetricFamily("ads_flight_streams_refused", "streams refused over flight.streams.max (broker) "
                                  "or flight.streams.per.connection.max (connection)", labels=["limit"])
    for limit, count in streams.refused_by_limit.items():
        refused.add_metric([limit], count)
    yield refused
    yield CounterMetricFamily("ads_connections_closed_idle", "connections closed after connections.max.idle.ms "
                              "without data", value=streams.closed_idle)
