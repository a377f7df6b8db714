"""A broker process: logs, the Flight endpoint, ZooKeeper membership, fetchers, periodic work.

Start-up order matters: logs are recovered before anything is served; the
ZooKeeper session comes up (and, on a secured broker, the users, token secrets
and ACLs are loaded) before any port opens, so no request reaches a broker that
cannot judge it yet, and a broker that cannot reach ZooKeeper never listens;
the listeners open next, and the broker registers in ZooKeeper (which makes it
eligible for leadership, and publishes the bound ports) last. Shutdown is the
reverse; a controlled shutdown first asks the controller to move leadership away
(see ``controlled_shutdown``).
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable

from ads_spark.broker.schema_cache import SchemaCache
from ads_spark.broker.rpc.admin_handlers import AdminHandlers
from ads_spark.broker.rpc.control_handlers import ControlHandlers
from ads_spark.broker.rpc.data_handlers import DataHandlers
from ads_spark.broker.replica.fetcher import ReplicaFetcherManager
from ads_spark.broker.replica.isr_writer import IsrWriter
from ads_spark.broker.log import LeaderEpochFile, LogConfig, LogDirs
from ads_spark.broker.log.config import LONG_MAX
from ads_spark.broker.log.cleaner_manager import CleanerSettings, LogCleanerManager, retention_deletes
from ads_spark.broker.metadata_cache import MetadataCache
from ads_spark.broker.metrics import BrokerMetrics
from ads_spark.broker.replica.partition import Partition
from ads_spark.broker.replica.replica_manager import ReplicaManager
from ads_spark.broker.rpc.server import BrokerFlightServer
from ads_spark.broker.rpc.verify_handlers import VerifyHandlers
from ads_spark.broker.group.coordinator import GroupCoordinator
from ads_spark.broker.rpc.group_handlers import GroupHandlers
from ads_spark.broker.rpc.security_handlers import SecurityHandlers
from ads_spark.broker.security_state import BrokerSecurity
from ads_spark.protocol import wire
from ads_spark.config import BrokerConfig, effective_topic_config
from ads_spark.protocol.records import now_ms
from ads_spark.replication.state import PartitionConfig

log = logging.getLogger("ads.broker")

PERIODIC_TICK_MS = 100
SERVER_SHUTDOWN_WAIT_S = 2.0


def log_config_for(effective: dict[str, Any]) -> LogConfig:
    return LogConfig(
        segment_bytes=effective["segment.bytes"], segment_ms=effective["segment.ms"],
        retention_ms=effective["retention.ms"], retention_bytes=effective["retention.bytes"],
        flush_interval_messages=effective["flush.messages"], flush_interval_ms=effective["flush.ms"],
        max_message_bytes=effective["max.message.bytes"],
        cleanup_policy=effective.get("cleanup.policy", "delete"),
        min_cleanable_dirty_ratio=float(effective.get("min.cleanable.dirty.ratio", 0.5)),
        min_compaction_lag_ms=effective.get("min.compaction.lag.ms", 0),
        max_compaction_lag_ms=effective.get("max.compaction.lag.ms", LONG_MAX),
        delete_retention_ms=effective.get("delete.retention.ms", 86_400_000),
        statistics_columns=tuple(effective.get("schema.statistics.columns") or ()),
    )


class Broker:
    """One broker process: builds its parts, wires them to each other, and runs its periodic work.

    Owns, built in this order by the constructor: the validated ``config``; the
    ``MetadataCache`` the controller pushes (clients' metadata is answered from it); the
    ``ReplicaManager`` (the hosted ``Partition``s, the wake-ups of long-polling fetches, the
    session fence's flag); the ``ReplicaFetcherManager`` (follower fetcher threads, one per
    leader and fetcher index); the ``IsrWriter`` (one thread carrying ISR proposals to
    ZooKeeper, bounded queue); the ``LogDirs`` (``log.dirs``, recovered before anything
    is served); the data, control, admin and verify request handlers; ``BrokerMetrics``
    (prometheus_client's HTTP thread, unless ``metrics.port`` is -1); the
    ``BrokerFlightServer`` of each listener (``servers``, by listener name; ``server`` is the
    inter-broker listener's; built and listening only in ``start``, a gRPC thread per call, the
    stream bounds and idle-connection sweeper of ``rpc/connections.py``); the ``KafkaServer`` of each
    Kafka listener (``kafka_servers``, ads_spark/kafka/server.py: opened after the Flight ones, registered
    in ``endpoints`` as ``kafka.<NAME>``, closed first on stop); and, from
    ``zk_factory``, ``zk``: the ``ZkMembership`` (kazoo session, registration and broker
    epoch, ``SessionGuard``, producer-id blocks, admin writes, and the ``Controller`` with
    its event thread, rebalance timer and per-broker channel threads). Its own state: each
    topic's config overrides as last told, its broker epoch, and ``fatal_error``, on which
    the process's main loop (``ads broker start``) stops it.

    Its one thread, ``broker-periodic``, every ``PERIODIC_TICK_MS``: the ZooKeeper session
    check, ``ReplicaManager.tick_all`` (ISR lag, ISR write re-sends, produce deadlines; a
    failed tick sets ``fatal_error``), log flushes, the HW / recovery-point / producer-state
    checkpoints, retention (by time and size; none for ``cleanup.policy=compact``). The log cleaner
    (``cleaner``, broker/log/cleaner_manager.py) has its own thread, from ``start`` to ``stop``; so has the
    group coordinator (``group_coordinator``, broker/group/coordinator.py: the consumer groups of the
    ``__consumer_offsets`` partitions this broker leads), whose actions ``groups`` serves.
    ``ensure_partition`` opens a replica's log and builds its ``Partition`` when the controller first names it.

    Delegates: every replication decision to ``ads_spark.replication`` through each
    ``Partition``; leadership to the controller role (whichever broker holds it). ``start``
    connects to ZooKeeper (secured: and loads the security state) before opening any port,
    and registers last, once it can serve (that makes it eligible to lead).
    ``stop(controlled=True)`` stops following, asks the controller to move leadership away,
    then stops fetchers, the ISR writer, ZooKeeper, the replicas, checkpoints, closes the
    logs and the server (waiting at most ``SERVER_SHUTDOWN_WAIT_S`` for open streams).
    """

    def __init__(self, config: BrokerConfig, zk_factory: Callable[["Broker"], Any] | None = None):
        self.config = config
        self.broker_id = config.broker_id
        # ``bind_host`` is where the inter-broker listener's server listens (``listeners``, may be 0.0.0.0);
        # ``host``/``port`` are its advertised address (``advertised.listeners``): what ZooKeeper's top-level
        # registration and the controller use. ``endpoints`` has every listener's advertised address.
        self.bind_host = config.inter_broker_listener.bind_host
        self.metadata = MetadataCache()
        self.replica_manager = ReplicaManager(self.broker_id)
        self.fetchers = ReplicaFetcherManager(self.broker_id, config, self.replica_manager, self.broker_epoch)
        self.fetchers.on_fatal = self._on_fatal
        self.isr_writer = IsrWriter(self._write_isr)
        # Security on: the logs become owner-only (0700 / 0600), so no other Unix user reads around the ACLs.
        self.logs = LogDirs.open(config.log_dir_paths(), log_config_for(self._effective({})), now_ms(),
                                 private=config.security_enabled)
        # The log cleaner of compacted topics (broker/log/cleaner_manager.py): its thread runs from start to stop.
        self.cleaner = LogCleanerManager(CleanerSettings.from_config(config), config.log_dir_paths(),
                                         self.replica_manager.partitions)
        self.data = DataHandlers(self)
        self.control = ControlHandlers(self)
        self.admin = AdminHandlers(self)
        self.verify = VerifyHandlers(self)
        # Consumer groups (broker/group/): the coordinator of the __consumer_offsets partitions this broker leads.
        self.group_coordinator = GroupCoordinator(self)
        self.groups = GroupHandlers(self)
        # Users, token secrets and the ACL cache (loaded from ZooKeeper by the membership's start; until then
        # every authorization is refused except for super users).
        self.security = BrokerSecurity(config)
        self.security_handlers = SecurityHandlers(self)
        self.metrics = BrokerMetrics(self)
        self._topic_overrides: dict[str, dict[str, str]] = {}
        self._broker_epoch = -1
        # Set when the broker must stop (e.g. its log directory failed); the main loop exits on it.
        self.fatal_error: str | None = None
        # The listeners, opened by ``start`` once the broker can judge requests (see the module docstring).
        self.servers: dict[str, BrokerFlightServer] = {}
        self.endpoints: dict[str, tuple[str, int, str]] = {}
        self.server: BrokerFlightServer | None = None
        # The Kafka protocol listeners (ads_spark/kafka/server.py; ``kafka.listeners``), by listener name; their
        # endpoints are in ``endpoints`` as ``kafka.<NAME>``.
        self.kafka_servers: dict[str, Any] = {}
        self.host, self.port = config.inter_broker_listener.advertised_host, 0
        self.zk = zk_factory(self) if zk_factory else None
        self.schemas = SchemaCache(lambda: self.zk.zk)  # typed topics' registered versions
        self._stopping = threading.Event()
        self._periodic = threading.Thread(target=self._run_periodic, name="broker-periodic", daemon=True)

    def _open_listeners(self) -> None:
        """Open every listener's server. Their serve() is not called on purpose: it installs C-level
        SIGINT/SIGTERM handlers that shut the server down behind our back and keep the Python handler (the
        controlled shutdown) from ever running."""
        self.servers, self.endpoints = self._start_servers()
        self.server = self.servers[self.config.inter_broker_listener_name]
        self.host, self.port = self.endpoints[self.config.inter_broker_listener_name][:2]
        self._open_kafka_listeners()

    def _open_kafka_listeners(self) -> None:
        """The Kafka listeners, after the Flight ones (a port that cannot bind fails the start like theirs)."""
        specs = self.config.kafka_listener_specs()
        if not specs:
            return
        from ads_spark.config_kafka import endpoint_name
        from ads_spark.kafka.server import open_servers  # only brokers with a Kafka port load the Kafka layer

        self.kafka_servers = open_servers(self)
        for spec in specs:
            server = self.kafka_servers[spec.name]
            self.endpoints[endpoint_name(spec.name)] = (spec.advertised_host, spec.advertised_port or server.port,
                                                        spec.protocol)
            server.start()

    def _abort_start(self) -> None:
        """After a failed ``start``: close the ports, the ZooKeeper session and the threads it opened. The logs
        stay as recovered (not checkpointed or marked clean: the process is about to exit on the error)."""
        self._stopping.set()
        self.isr_writer.stop()
        self.cleaner.stop()
        self.group_coordinator.stop()
        for closing in (self.zk.stop if self.zk is not None else None, self._shutdown_server, self.metrics.close):
            if closing is None:
                continue
            try:
                closing()
            except Exception:
                log.warning("closing after a failed start", exc_info=True)

    def _start_servers(self) -> tuple[dict[str, BrokerFlightServer], dict[str, tuple[str, int, str]]]:
        """One Flight server per listener (each listening from its constructor), and the advertised endpoints
        {name: (host, port, protocol)}, port 0 being the bound port. A listener that cannot bind closes the
        ones already open: the error leaves nothing listening."""
        servers: dict[str, BrokerFlightServer] = {}
        endpoints: dict[str, tuple[str, int, str]] = {}
        tls = None
        try:
            for spec in self.config.listener_specs():
                if spec.uses_tls and tls is None:
                    from ads_spark.security.tls import server_tls  # only TLS brokers load the certificate code
                    tls = server_tls(self.config.as_dict(), required=True)
                server = BrokerFlightServer(self, spec.bind_host, spec.port, listener_name=spec.name,
                                            security_protocol=spec.protocol, tls=tls if spec.uses_tls else None)
                servers[spec.name] = server
                endpoints[spec.name] = (spec.advertised_host, spec.advertised_port or server.port, spec.protocol)
        except BaseException:
            for server in servers.values():
                server.shutdown()
            raise
        return servers, endpoints

    # ---- lifecycle ----------------------------------------------------------------

    def start(self) -> None:
        """ZooKeeper session (secured: and the security state loaded), then the listeners and the metrics
        port, then the registration. A failure closes what was opened (no port stays open) and re-raises."""
        self.isr_writer.start()
        self._periodic.start()
        try:
            if self.zk is not None:
                self.zk.connect(wait_for_security=self.config.security_enabled or self.security.authorizer_enabled)
            self._open_listeners()
            self.metrics.serve(self.config["metrics.port"])
            if self.zk is not None:
                self._broker_epoch = self.zk.register()
            self.cleaner.start()
            self.group_coordinator.start()  # serves groups once it leads __consumer_offsets partitions
        except BaseException as exc:
            log.critical("broker %s cannot start: %s; no listener is left open", self.broker_id, exc)
            self._abort_start()
            raise
        for name, server in self.servers.items():
            host, port, protocol = self.endpoints[name]
            log.info("broker %s listener %s (%s) serving on port %s, advertised as %s:%s", self.broker_id, name,
                     protocol, server.port, host, port)
        for name, server in self.kafka_servers.items():
            host, port, protocol = self.endpoints[server.endpoint_name]
            log.info("broker %s Kafka listener %s (%s) serving on port %s, advertised as %s:%s", self.broker_id,
                     name, protocol, server.port, host, port)
        log.info("broker %s started (epoch %s); inter-broker listener %s", self.broker_id, self._broker_epoch,
                 self.config.inter_broker_listener_name)

    def broker_epoch(self) -> int:
        return self._broker_epoch

    def stop(self, controlled: bool = True) -> None:
        if self._stopping.is_set():
            return
        if controlled and self.zk is not None and self.config["controlled.shutdown.enable"]:
            # Stop following first: a follower that keeps fetching while the controller takes it out of
            # the ISRs is caught up, and its leaders would add it straight back (Kafka fences such
            # brokers in the controller, KIP-841; not fetching has the same effect here).
            self.fetchers.shutdown()
            try:
                self.zk.controlled_shutdown()
            except Exception:
                log.warning("controlled shutdown did not complete; stopping anyway", exc_info=True)
        self._stopping.set()
        self._stop_kafka_listeners()
        self.group_coordinator.stop()  # unloads every group: waiting joins and syncs answered NOT_COORDINATOR
        self.cleaner.stop()  # before the logs close; a clean in progress is abandoned (its swap is crash-safe)
        self.fetchers.shutdown()
        self.isr_writer.stop()
        if self.zk is not None:
            self.zk.stop()
        self.replica_manager.shutdown()
        self._checkpoint()
        self.logs.close()
        self._shutdown_server()
        self.metrics.close()

    def _stop_kafka_listeners(self) -> None:
        """Close the Kafka ports before the parts their requests use stop, so that Kafka's clients move to
        other brokers at once (Kafka's broker stops its socket server first too). Bounded as the Flight stop."""
        deadline = time.monotonic() + SERVER_SHUTDOWN_WAIT_S
        for server in self.kafka_servers.values():
            server.shutdown(max(0.0, deadline - time.monotonic()))

    def _shutdown_server(self) -> None:
        """Stop the Flight server, waiting at most SERVER_SHUTDOWN_WAIT_S for open streams.

        Flight's shutdown waits for every RPC in progress, and a client may hold a
        produce stream open for its whole life (a cached producer in a Spark worker);
        the logs are already closed and checkpointed, so past the bound we just exit.
        """
        stoppers = [threading.Thread(target=server.shutdown, name=f"flight-shutdown-{name}", daemon=True)
                    for name, server in self.servers.items()]
        stoppers += [threading.Thread(target=server.shutdown, name=f"kafka-shutdown-{name}", daemon=True)
                     for name, server in self.kafka_servers.items()]
        for stopper in stoppers:
            stopper.start()
        deadline = time.monotonic() + SERVER_SHUTDOWN_WAIT_S  # one bound for every listener together
        for stopper in stoppers:
            stopper.join(max(0.0, deadline - time.monotonic()))
        if any(stopper.is_alive() for stopper in stoppers):
            log.info("clients still hold streams open after %ss; exiting without waiting for them",
                     SERVER_SHUTDOWN_WAIT_S)

    def wait(self) -> None:
        self._stopping.wait()

    # ---- hooks for handlers ------------------------------------------------------------

    def action_handlers(self) -> dict[str, Callable[[dict], dict]]:
        return {
            wire.ACTION_LIST_OFFSETS: self.data.handle_list_offsets,
            wire.ACTION_LOCATE: self.data.handle_locate,
            wire.ACTION_OFFSET_FOR_LEADER_EPOCH: self.data.handle_offset_for_leader_epoch,
            wire.ACTION_LEADER_AND_ISR: self.control.handle_leader_and_isr,
            wire.ACTION_UPDATE_METADATA: self.control.handle_update_metadata,
            wire.ACTION_STOP_REPLICA: self.control.handle_stop_replica,
            wire.ACTION_REPLICA_LOG_ENDS: self.control.handle_replica_log_ends,
            wire.ACTION_REPLICA_STATUS: self.verify.handle_replica_status,
            **self.admin.handlers(),
            **self.security_handlers.handlers(),
            **self.groups.handlers(),
        }

    def handle_fetch(self, request: dict, replica_messages: bool = False, typed=None) -> list:
        return self.data.handle_fetch(request, replica_messages, typed)

    def handle_produce_chunk(self, batch, app_metadata, respond) -> None:
        self.data.handle_produce_chunk(batch, app_metadata, respond)

    def _effective(self, overrides: dict[str, str]) -> dict[str, Any]:
        return effective_topic_config(self.config.topic_defaults(), overrides)

    def topic_config(self, topic: str) -> dict[str, Any]:
        return self._effective(self._topic_overrides.get(topic, {}))

    def partition_config(self, effective: dict[str, Any]) -> PartitionConfig:
        return PartitionConfig(
            min_insync_replicas=effective["min.insync.replicas"],
            replica_lag_time_max_ms=self.config["replica.lag.time.max.ms"],
            unclean_leader_election_enable=bool(effective["unclean.leader.election.enable"]),
        )

    def ensure_partition(self, topic: str, number: int, topic_id: str, overrides: dict[str, str]) -> Partition:
        existing = self.replica_manager.maybe_get(topic, number)
        effective = self._effective(overrides)
        if existing is not None:
            self._topic_overrides[topic] = dict(overrides)
            existing.update_config(self.partition_config(effective), now_ms())
            return existing
        # First: it refuses a name that is not a topic's, before anything (even this broker's memory) holds it.
        partition_log = self.logs.get_or_create(topic, number, log_config_for(effective), topic_id)
        self._topic_overrides[topic] = dict(overrides)
        # A damaged epoch cache is rebuilt from the log's batch headers rather than keep the broker from starting.
        epochs = LeaderEpochFile(Path(partition_log.directory) / "leader-epoch-checkpoint",
                                 rebuild_from=partition_log.leader_epoch_starts)
        partition = Partition(topic, number, topic_id, partition_log, epochs, self.broker_id,
                              self.partition_config(effective),
                              high_watermark_checkpoint=self.logs.read_high_watermarks().get((topic, number), 0),
                              isr_sender=self.isr_writer.submit)
        partition.schema_lookup = lambda version: self.schemas.stored_schema(topic, topic_id, version)
        return self.replica_manager.add(partition)

    def apply_topic_config(self, partition: Partition, overrides: dict[str, str]) -> None:
        self._topic_overrides[partition.topic] = dict(overrides)
        effective = self._effective(overrides)
        partition.update_config(self.partition_config(effective), now_ms())
        partition.log.update_config(log_config_for(effective))

    def close_partition_log(self, topic: str, number: int, delete: bool) -> None:
        if delete:
            self.logs.remove(topic, number)

    def may_serve_follower_read(self, client_rack: str | None) -> bool:
        """KIP-392: a consumer on this broker's rack may read from this replica as a follower (below its HW)."""
        rack = self.config["broker.rack"] or None
        return client_rack is not None and rack is not None and client_rack == rack

    def _write_isr(self, topic: str, number: int, proposed):
        if self.zk is None:
            return None, None  # no ZooKeeper (unit tests): an ISR change can never be committed
        return self.zk.update_isr(topic, number, proposed)

    def _on_fatal(self, reason: str) -> None:
        self.fatal_error = reason

    # ---- periodic work --------------------------------------------------------------------

    def _run_periodic(self) -> None:
        last_checkpoint_ms = last_retention_ms = now_ms()
        while not self._stopping.wait(PERIODIC_TICK_MS / 1000):
            current = now_ms()
            self._check_zookeeper_session()
            try:
                self.replica_manager.tick_all(current)
            except Exception as exc:  # a broken invariant in the core: stop serving
                self._on_fatal(f"replication tick failed: {exc}")
                return
            for partition in self.replica_manager.partitions():
                try:
                    partition.log.maybe_flush(current)
                except Exception:
                    log.exception("flush of %s-%s failed", partition.topic, partition.partition)
            if current - last_checkpoint_ms >= self.config["replica.high.watermark.checkpoint.interval.ms"]:
                last_checkpoint_ms = current
                self._checkpoint()
            if current - last_retention_ms >= self.config["log.retention.check.interval.ms"]:
                last_retention_ms = current
                self._apply_retention(current)

    def _check_zookeeper_session(self) -> None:
        check = getattr(self.zk, "check_session", None)  # absent without ZooKeeper and in test doubles
        if check is None:
            return
        try:
            check()
        except Exception:
            log.exception("ZooKeeper session check failed")

    def _checkpoint(self) -> None:
        try:
            self.logs.checkpoint_high_watermarks(
                {p.key: p.high_watermark for p in self.replica_manager.partitions()})
            self.logs.checkpoint_recovery_points()
            for partition in self.replica_manager.partitions():
                partition.write_producer_snapshot()
        except Exception:
            log.exception("checkpoint failed")

    def _apply_retention(self, current_ms: int) -> None:
        for partition in self.replica_manager.partitions():
            if not retention_deletes(partition.log.config.cleanup_policy):
                continue  # cleanup.policy=compact: no time or size deletion (the cleaner keeps every key)
            try:
                partition.apply_retention(current_ms)
            except Exception:
                log.exception("retention of %s-%s failed", partition.topic, partition.partition)
