"""Prometheus metrics of a broker, with the names operators know from Kafka (INTERFACES.md).

Gauges are computed when scraped, from the broker's own state, so nothing on a
hot path updates them; counters (ISR shrinks and expands, failed ISR updates,
elections) are read from the plain integers the ISR writer and the controller
keep. The endpoint listens on
``metrics.host`` (127.0.0.1 unless set: Prometheus on another host needs 0.0.0.0 or
the host's address) at ``metrics.port`` (0 picks a free port; -1 turns it off).

The leader election time is a histogram (Kafka's LeaderElectionRateAndTimeMs): the
controller shell observes each election into a ``DurationHistogram`` (plain counts
under a lock, no prometheus object on the controller's path), read when scraped.
"""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from ads_spark.broker.group.lag_metrics import GroupLagCollector

# Upper bounds of the election time buckets, seconds (a ZooKeeper write and a push to the brokers:
# milliseconds on a healthy cluster, seconds when a broker is slow to answer).
ELECTION_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class DurationHistogram:
    """Counts of observed durations per bucket, their sum and count; safe to observe from one thread
    and read from another (the scrape)."""

    def __init__(self, bounds_s: tuple[float, ...] = ELECTION_BUCKETS_S):
        self.bounds_s = bounds_s
        self._counts = [0] * (len(bounds_s) + 1)  # the last: above every bound (+Inf only)
        self._sum_s = 0.0
        self._lock = threading.Lock()

    def observe(self, seconds: float) -> None:
        index = next((i for i, bound in enumerate(self.bounds_s) if seconds <= bound), len(self.bounds_s))
        with self._lock:
            self._counts[index] += 1
            self._sum_s += seconds

    @property
    def sum_s(self) -> float:
        return self._sum_s

    def snapshot(self) -> tuple[list[tuple[str, int]], float]:
        """Cumulative (upper bound, count) pairs ending with +Inf, and the sum: prometheus' histogram form."""
        with self._lock:
            counts, total_s = list(self._counts), self._sum_s
        buckets, running = [], 0
        for bound, count in zip([*map(repr, self.bounds_s), "+Inf"], counts):
            running += count
            buckets.append((bound, running))
        return buckets, total_s



class BrokerMetrics:
    def __init__(self, broker):
        self.broker = broker
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_StateCollector(broker))
        self.group_lag = GroupLagCollector(broker)  # ads_consumer_group_* on a group's coordinator
        self.registry.register(self.group_lag)
        self.port = -1
        self._server = None
        self._lock = threading.Lock()

    def serve(self, port: int, host: str | None = None) -> int:
        """Listen on ``host`` (default: the broker's ``metrics.host``) at ``port``; the bound port."""
        if port < 0:
            return -1
        if host is None:
            config = getattr(self.broker, "config", None)
            host = config["metrics.host"] if config is not None else "127.0.0.1"
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        self._server = server
        self.port = server.server_address[1]
        return self.port

    def close(self) -> None:
        self.group_lag.close()
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
        # Kafka's per-partition UnderReplicated: 1 on the leader of a partition whose ISR is short, else 0.
        partition_under = GaugeMetricFamily("ads_partition_under_replicated", "1 if this broker leads the "
                                            "partition and its ISR is smaller than its replica set",
                                            labels=["topic", "partition"])
        for partition in self.broker.replica_manager.partitions():
            labels = [partition.topic, str(partition.partition)]
            leo.add_metric(labels, partition.log.log_end_offset)
            size.add_metric(labels, partition.log.size_bytes)
            state = partition.state
            short = partition.is_leader and len(state.isr) < len(state.replicas)
            partition_under.add_metric(labels, 1 if short else 0)
            if partition.is_leader:
                isr = len(state.isr)
                if short:
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
                ("ads_unclean_recovery_elections", "leaders elected by unclean recovery after a whole-cluster "
                 "crash (KIP-966) by this broker's controller", getattr(controller, "recovery_elections", 0))):
            yield CounterMetricFamily(name, help_text, value=value)
        yield from _election_time(controller)
        yield from _failed_requests(getattr(self.broker, "data", None))
        requests = CounterMetricFamily("ads_requests", "data-plane requests handled, by kind", labels=["request"])
        handlers = getattr(self.broker, "data", None)
        for kind, count in (getattr(handlers, "request_counts", None) or {}).items():
            requests.add_metric([kind], count)
        yield requests
        fetched = CounterMetricFamily("ads_fetch_bytes", "Arrow bytes of the record batches fetches returned, by "
                                      "reader (consumer, follower)", labels=["reader"])
        for reader, count in (getattr(handlers, "fetched_bytes", None) or {}).items():
            fetched.add_metric([reader], count)
        yield fetched
        yield CounterMetricFamily("ads_fetch_batches_skipped", "Batches typed reads did not send because their "
                                  "statistics ruled out the read's filters",
                                  value=getattr(handlers, "skipped_batches", 0))
        yield from _stream_metrics(getattr(getattr(self.broker, "server", None), "streams", None))
        yield from _cleaner_metrics(getattr(self.broker, "cleaner", None))
        yield from _kafka_listener_metrics(getattr(self.broker, "kafka_servers", None))
        yield leo
        yield size
        yield partition_under


def _cleaner_metrics(cleaner):
    """The log cleaner's (broker/log/cleaner_manager.py): plain numbers it keeps, read here (Kafka's
    kafka.log:type=LogCleaner and LogCleanerManager beans)."""
    if cleaner is None:
        return
    yield CounterMetricFamily("ads_log_cleaner_bytes_read", "bytes the log cleaner read", value=cleaner.bytes_read)
    yield CounterMetricFamily("ads_log_cleaner_bytes_written", "bytes the log cleaner wrote",
                              value=cleaner.bytes_written)
    yield CounterMetricFamily("ads_log_cleaner_runs", "logs cleaned", value=cleaner.runs)
    yield CounterMetricFamily("ads_log_cleaner_failures", "cleaner passes that failed", value=cleaner.failures)
    yield GaugeMetricFamily("ads_log_cleaner_last_run_duration_seconds", "time of the last clean",
                            value=cleaner.last_run_duration_s)
    yield GaugeMetricFamily("ads_log_cleaner_max_dirty_ratio", "highest dirty ratio among compacted logs at the "
                            "last pass", value=cleaner.max_dirty_ratio)


def _kafka_listener_metrics(servers):
    """The Kafka listeners' (kafka/server.py): connections open and refused over kafka.connections.max, and
    requests served by API name (Kafka's RequestsPerSec by request)."""
    if not servers:
        return
    shared = next(iter(servers.values())).shared  # one count and budget for every Kafka listener of the broker
    yield GaugeMetricFamily("ads_kafka_connections", "open Kafka protocol connections", value=shared.connections)
    yield CounterMetricFamily("ads_kafka_connections_refused", "Kafka connections refused over "
                              "kafka.connections.max", value=shared.refused_connections)
    requests = CounterMetricFamily("ads_kafka_requests", "Kafka protocol requests decoded, by API", labels=["api"])
    for name, count in sorted(shared.request_counts().items()):
        requests.add_metric([name], count)
    yield requests


def _failed_requests(handlers):
    failed = getattr(handlers, "failed_counts", None) or {}
    yield CounterMetricFamily("ads_failed_produce_requests", "partition produces refused or failed "
                              "(Kafka's FailedProduceRequestsPerSec)", value=failed.get("produce", 0))
    yield CounterMetricFamily("ads_failed_fetch_requests", "partition fetches answered with an error "
                              "(Kafka's FailedFetchRequestsPerSec)", value=failed.get("fetch", 0))


def _election_time(controller):
    """Kafka's LeaderElectionRateAndTimeMs as a histogram: each partition-state write of this broker's
    controller, from the write to the step answering it (its pushes to the brokers included)."""
    histogram = getattr(controller, "election_time", None)
    buckets, total_s = histogram.snapshot() if histogram is not None else ([("+Inf", 0)], 0.0)
    yield HistogramMetricFamily("ads_leader_election_seconds", "time this broker's controller took per "
                                "election (writing a decision and pushing it)", buckets=buckets, sum_value=total_s)


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
