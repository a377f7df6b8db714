"""Config keys that used to be accepted and ignored (issue #22 item 5), each shown to act or to be refused.

* ``listeners`` / ``advertised.listeners``: the advertised address is what the broker registers; a wildcard
  bind address without an advertised host is refused naming the key.
* ``log.dirs`` with several directories: a new partition goes to the directory holding fewest, and a
  restart finds every partition where it was.
* ``message.timestamp.type=LogAppendTime``: a produce answer's append time is what the producer reports.
* ``retries``: a batch failing with retriable errors fails after ``retries`` resends, not at the delivery
  timeout.
* ``num.partitions`` / ``default.replication.factor``: a create-topic request that leaves them out gets them.
* ``producer.id.expiration.ms`` (not implemented) and any other unknown key: refused by name.
"""

from __future__ import annotations

import time

import pytest

from ads_spark.broker.log import LogConfig, LogDirs
from ads_spark.broker.rpc.admin_handlers import AdminHandlers
from ads_spark.client.delivery import BatchOutcome, DeliveryFuture
from ads_spark.client.producer import Producer
from ads_spark.config import BrokerConfig
from ads_spark.errors import InvalidConfigError, NotLeaderOrFollowerError

BASE = {"broker.id": "1", "log.dirs": "/tmp/ads-unused", "zookeeper.connect": "127.0.0.1:1"}


# ---- listeners / advertised.listeners ------------------------------------------------------------


def test_the_advertised_address_is_advertised_listeners_and_port_0_means_the_bound_port():
    config = BrokerConfig({**BASE, "listeners": "PLAINTEXT://127.0.0.1:0",
                           "advertised.listeners": "PLAINTEXT://broker-1.example:0"})
    assert config.listen_host_port == ("127.0.0.1", 0)
    assert config.advertised_host_port(bound_port=40123) == ("broker-1.example", 40123)
    fixed = BrokerConfig({**BASE, "listeners": "PLAINTEXT://0.0.0.0:9092", "listeners.plaintext.nonloopback.allow": "true",
                          "advertised.listeners": "PLAINTEXT://10.1.2.3:19092"})
    assert fixed.listen_host_port == ("0.0.0.0", 9092)
    assert fixed.advertised_host_port(bound_port=9092) == ("10.1.2.3", 19092)
    # Unset: the listeners address, as in Kafka.
    assert BrokerConfig({**BASE, "listeners": "127.0.0.1:9000"}).advertised_host_port(9000) == ("127.0.0.1", 9000)


@pytest.mark.parametrize("values", [
    {"listeners": "PLAINTEXT://0.0.0.0:9092", "listeners.plaintext.nonloopback.allow": "true"},
    {"listeners": "PLAINTEXT://127.0.0.1:9092", "advertised.listeners": "PLAINTEXT://0.0.0.0:9092"},
])
def test_a_wildcard_address_is_never_advertised(values):
    with pytest.raises(InvalidConfigError, match="advertised.listeners"):
        BrokerConfig({**BASE, **values})


@pytest.mark.parametrize("key", ["listeners", "advertised.listeners"])
@pytest.mark.parametrize("value", ["PLAINTEXT://127.0.0.1:1,PLAINTEXT://127.0.0.1:2", "FTP://127.0.0.1:9093",
                                   "127.0.0.1", "PLAINTEXT://h:70000"])
def test_a_listener_ads_cannot_serve_is_refused_naming_the_key(key, value):
    with pytest.raises(InvalidConfigError, match=f"'{key}'"):
        BrokerConfig({**BASE, key: value})


# ---- log.dirs -----------------------------------------------------------------------------------


def test_several_log_dirs_take_new_partitions_by_fewest_and_a_restart_finds_them(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    logs = LogDirs.open(dirs[:1], LogConfig(), 0)  # a broker that had one directory: a holds t-0 and t-1
    for number in (0, 1):
        logs.get_or_create("t", number, LogConfig(), "id-t", now_ms=0)
    logs.close()
    logs = LogDirs.open(dirs, LogConfig(), 0)  # b and c added: new partitions fill the emptiest first
    for number in range(2, 8):
        logs.get_or_create("t", number, LogConfig(), "id-t", now_ms=0)
    logs.close()
    held = {d.name: sorted(p.name for p in d.iterdir() if p.is_dir()) for d in dirs}
    assert held == {"a": ["t-0", "t-1", "t-6"], "b": ["t-2", "t-4", "t-7"], "c": ["t-3", "t-5"]}
    reopened = LogDirs.open(dirs, LogConfig(), 0)
    try:
        assert sorted(reopened.logs()) == [("t", n) for n in range(8)]
        for name, partitions in held.items():
            for partition in partitions:
                assert reopened.get("t", int(partition[2:])).directory.parent == tmp_path / name
        assert reopened.recovered_from_clean_shutdown
        # Each directory checkpoints the high watermarks of the partitions it holds, and they read back.
        reopened.checkpoint_high_watermarks({("t", n): 10 + n for n in range(8)})
        assert {key: offset for manager in reopened.managers for key, offset in manager.read_high_watermarks().items()
                if key[1] in (3, 5)} == {("t", 3): 13, ("t", 5): 15}
        assert sorted(reopened.managers[2].read_high_watermarks()) == [("t", 3), ("t", 5)]
        assert reopened.read_high_watermarks() == {("t", n): 10 + n for n in range(8)}
    finally:
        reopened.close()


def test_a_partition_in_two_log_dirs_is_refused_at_start(tmp_path):
    for name in ("a", "b"):
        logs = LogDirs.open([tmp_path / name], LogConfig(), 0)
        logs.get_or_create("t", 0, LogConfig(), "id-t", now_ms=0)
        logs.close()
    with pytest.raises(InvalidConfigError, match="'log.dirs'.*t-0"):
        LogDirs.open([tmp_path / "a", tmp_path / "b"], LogConfig(), 0)


def test_log_dirs_naming_a_directory_twice_or_none_is_refused(tmp_path):
    with pytest.raises(InvalidConfigError, match="'log.dirs'.*twice"):
        BrokerConfig({**BASE, "log.dirs": f"{tmp_path}/a,{tmp_path}/b,{tmp_path}/a/"})
    with pytest.raises(InvalidConfigError, match="'log.dirs'"):
        BrokerConfig({**BASE, "log.dirs": " , "})
    assert BrokerConfig({**BASE, "log.dirs": f"{tmp_path}/a, {tmp_path}/b"}).log_dir_paths() == [
        tmp_path / "a", tmp_path / "b"]


# ---- message.timestamp.type ------------------------------------------------------------------------


def test_a_log_append_time_answer_is_the_timestamp_the_producer_reports():
    outcome = BatchOutcome("t", 0, [111, 222])
    outcome.complete(10, None, log_append_time_ms=9_000)
    assert [DeliveryFuture(outcome, i).result().timestamp for i in range(2)] == [9_000, 9_000]
    create_time = BatchOutcome("t", 0, [111, 222])
    create_time.complete(10, None)
    assert [DeliveryFuture(create_time, i).result().timestamp for i in range(2)] == [111, 222]


# ---- retries ---------------------------------------------------------------------------------------


class _NoLeaderConnections:
    """Metadata says the partition exists; every send finds no leader (a retriable error)."""

    def __init__(self):
        self.sends = 0

    def partitions_for(self, topic):
        return [0]

    def leader_of(self, topic, partition):
        self.sends += 1
        raise NotLeaderOrFollowerError("no leader yet")

    def mark_stale(self):
        pass

    def close(self):
        pass


@pytest.mark.parametrize("retries", [0, 2])
def test_retries_bounds_the_resends_of_a_failing_batch(retries):
    connections = _NoLeaderConnections()
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "acks": "1", "linger.ms": "0", "retries": retries,
                         "retry.backoff.ms": "10", "delivery.timeout.ms": "60000"}, connections=connections)
    try:
        started = time.monotonic()
        with pytest.raises(NotLeaderOrFollowerError) as failed:
            producer.produce("t", b"v", partition=0).result(timeout=10)
        assert time.monotonic() - started < 10  # long before delivery.timeout.ms
        assert connections.sends == retries + 1 and failed.value.attempts == retries + 1
    finally:
        producer.close()


def test_retries_0_with_idempotence_asked_for_is_refused_and_off_by_default():
    with pytest.raises(InvalidConfigError, match="'retries'"):
        Producer({"bootstrap.servers": "127.0.0.1:1", "retries": "0", "enable.idempotence": "true"},
                 connections=_NoLeaderConnections())
    with pytest.raises(InvalidConfigError, match="'retries'"):
        Producer({"bootstrap.servers": "127.0.0.1:1", "retries": "-1"}, connections=_NoLeaderConnections())
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "retries": "0"}, connections=_NoLeaderConnections())
    try:
        assert not producer.idempotent
    finally:
        producer.close()


@pytest.mark.parametrize("key", ["producer.id.expiration.ms", "retires", "partitioner.class", "client.rack"])
def test_a_producer_key_it_does_not_read_is_refused_by_name(key):
    with pytest.raises(InvalidConfigError, match=f"'{key}'"):
        Producer({"bootstrap.servers": "127.0.0.1:1", key: "1"}, connections=_NoLeaderConnections())


def test_producer_id_expiration_ms_is_refused_as_a_broker_and_a_topic_key():
    from ads_spark.config import validate_topic_config

    with pytest.raises(InvalidConfigError, match="'producer.id.expiration.ms'"):
        BrokerConfig({**BASE, "producer.id.expiration.ms": "86400000"})
    with pytest.raises(InvalidConfigError, match="'producer.id.expiration.ms'"):
        validate_topic_config({"producer.id.expiration.ms": "1"}, 1)


# ---- num.partitions / default.replication.factor -----------------------------------------------------


class _Broker:
    def __init__(self, values):
        self.config = BrokerConfig({**BASE, **values})


def test_a_create_topic_that_leaves_out_counts_gets_the_broker_defaults():
    handlers = AdminHandlers(_Broker({"num.partitions": "6", "default.replication.factor": "3"}))
    name, partitions, replication_factor, *_ = handlers._plan_topic({"topic": "t"})
    assert (name, partitions, replication_factor) == ("t", 6, 3)
    _, partitions, replication_factor, *_ = handlers._plan_topic({"topic": "t", "partitions": 2,
                                                                  "replication_factor": None})
    assert (partitions, replication_factor) == (2, 3)


# ---- log compaction keys (issue #24) --------------------------------------------------------------------


@pytest.mark.parametrize("given, stored", [("delete", "delete"), ("compact", "compact"),
                                           ("compact,delete", "compact,delete"), ("delete,compact", "compact,delete")])
def test_cleanup_policy_is_delete_compact_or_both(given, stored):
    from ads_spark.config import validate_topic_config

    assert validate_topic_config({"cleanup.policy": given}, 3) == {"cleanup.policy": stored}
    assert BrokerConfig({**BASE, "log.cleanup.policy": given}).topic_defaults()["cleanup.policy"] == stored


@pytest.mark.parametrize("value", ["", "compacted", "compact,compact", "delete,", "COMPACT", "compact;delete"])
def test_any_other_cleanup_policy_is_refused_naming_the_key(value):
    from ads_spark.config import validate_topic_config

    with pytest.raises(InvalidConfigError, match="'cleanup.policy'"):
        validate_topic_config({"cleanup.policy": value}, 3)
    with pytest.raises(InvalidConfigError, match="'log.cleanup.policy'"):
        BrokerConfig({**BASE, "log.cleanup.policy": value})


def test_compaction_topic_keys_fall_back_to_the_broker_keys_and_reach_the_log_config():
    from ads_spark.broker.broker import log_config_for
    from ads_spark.config import effective_topic_config

    config = BrokerConfig({**BASE, "log.cleanup.policy": "compact", "log.cleaner.min.cleanable.ratio": "0.25",
                           "log.cleaner.min.compaction.lag.ms": "1000", "log.cleaner.max.compaction.lag.ms": "60000",
                           "log.cleaner.delete.retention.ms": "5000"})
    inherited = log_config_for(effective_topic_config(config.topic_defaults(), {}))
    assert (inherited.cleanup_policy, inherited.min_cleanable_dirty_ratio, inherited.min_compaction_lag_ms,
            inherited.max_compaction_lag_ms, inherited.delete_retention_ms) == ("compact", 0.25, 1000, 60000, 5000)
    overridden = log_config_for(effective_topic_config(config.topic_defaults(), {
        "cleanup.policy": "delete,compact", "min.cleanable.dirty.ratio": "0.9", "min.compaction.lag.ms": "0",
        "max.compaction.lag.ms": "100", "delete.retention.ms": "0"}))
    assert (overridden.cleanup_policy, overridden.min_cleanable_dirty_ratio, overridden.min_compaction_lag_ms,
            overridden.max_compaction_lag_ms, overridden.delete_retention_ms) == ("compact,delete", 0.9, 0, 100, 0)
    default = log_config_for(effective_topic_config(BrokerConfig(BASE).topic_defaults(), {}))
    assert (default.cleanup_policy, default.min_cleanable_dirty_ratio, default.delete_retention_ms) == (
        "delete", 0.5, 86_400_000)


@pytest.mark.parametrize("key, value", [("min.cleanable.dirty.ratio", "1.5"), ("min.cleanable.dirty.ratio", "-0.1"),
                                        ("min.cleanable.dirty.ratio", "nan"), ("min.cleanable.dirty.ratio", "half"),
                                        ("min.compaction.lag.ms", "-1"), ("max.compaction.lag.ms", "0"),
                                        ("delete.retention.ms", "-1")])
def test_a_compaction_topic_value_out_of_range_is_refused_naming_the_key(key, value):
    from ads_spark.config import validate_topic_config

    with pytest.raises(InvalidConfigError, match=f"'{key}'"):
        validate_topic_config({key: value}, 3)


def test_the_cleaner_broker_keys_set_its_bounds():
    from ads_spark.broker.log.cleaner_manager import KEY_MAP_BYTES_PER_ENTRY, CleanerSettings

    settings = CleanerSettings.from_config(BrokerConfig({
        **BASE, "log.cleaner.enable": "false", "log.cleaner.threads": "1",
        "log.cleaner.io.max.bytes.per.second": "1.5e6", "log.cleaner.dedupe.buffer.size": "1048576",
        "log.cleaner.backoff.ms": "250"}))
    assert settings == CleanerSettings(enabled=False, io_max_bytes_per_second=1.5e6,
                                       key_map_entries_max=1048576 // KEY_MAP_BYTES_PER_ENTRY, backoff_ms=250)
    default = CleanerSettings.from_config(BrokerConfig(BASE))
    assert default.enabled and default.key_map_entries_max == 134_217_728 // KEY_MAP_BYTES_PER_ENTRY
    with pytest.raises(InvalidConfigError, match="'log.cleaner.threads': one cleaner thread per broker"):
        BrokerConfig({**BASE, "log.cleaner.threads": "2"})
    for key, value in (("log.cleaner.io.max.bytes.per.second", "0"), ("log.cleaner.io.max.bytes.per.second", "inf"),
                       ("log.cleaner.dedupe.buffer.size", "100"), ("log.cleaner.backoff.ms", "0")):
        with pytest.raises(InvalidConfigError, match=f"'{key}'"):
            BrokerConfig({**BASE, key: value})


# ---- the group coordinator's keys (issue #24, config_groups.GROUP_BROKER_KEYS) ------------------------------


def test_the_group_coordinator_broker_keys_set_its_bounds():
    from ads_spark.broker.group.coordinator import group_config, retention_ms
    from ads_spark.broker.group.offsets_topic import offsets_topic_config

    config = BrokerConfig({**BASE, "offsets.topic.replication.factor": "3", "offsets.topic.num.partitions": "7",
                           "offsets.topic.segment.bytes": "65536", "group.min.session.timeout.ms": "500",
                           "group.max.session.timeout.ms": "9000", "group.initial.rebalance.delay.ms": "0",
                           "group.max.size": "4", "offsets.retention.minutes": "2"})
    # __consumer_offsets: RF min(configured, live brokers), min ISR min(2, RF), compacted, its segment size.
    assert offsets_topic_config(config, 5) == (7, 3, {"cleanup.policy": "compact", "min.insync.replicas": "2",
                                                      "segment.bytes": "65536"})
    assert offsets_topic_config(config, 1)[1:] == (1, {"cleanup.policy": "compact", "min.insync.replicas": "1",
                                                       "segment.bytes": "65536"})
    bounds = group_config(config)
    assert (bounds.min_session_timeout_ms, bounds.max_session_timeout_ms, bounds.initial_rebalance_delay_ms,
            bounds.max_size) == (500, 9000, 0, 4)
    assert retention_ms(config) == 120_000
    assert retention_ms(BrokerConfig({**BASE, "offsets.retention.ms": "1500"})) == 1500  # ADS's finer key wins
    assert retention_ms(BrokerConfig(BASE)) == 10080 * 60_000
    with pytest.raises(InvalidConfigError, match="'group.min.session.timeout.ms'"):
        group_config(BrokerConfig({**BASE, "group.min.session.timeout.ms": "10000",
                                   "group.max.session.timeout.ms": "9000"}))
    for key, value in (("group.max.size", "0"), ("group.max.size", "10001"), ("offsets.topic.num.partitions", "0"),
                       ("offsets.topic.replication.factor", "0"), ("offsets.commit.timeout.ms", "0"),
                       ("offset.metadata.max.bytes", "-1"), ("offsets.retention.check.interval.ms", "0")):
        with pytest.raises(InvalidConfigError, match=f"'{key}'"):
            BrokerConfig({**BASE, key: value})


# ---- the Kafka listener's keys (issue #25, config_kafka.KAFKA_BROKER_KEYS) ----------------------------------


def test_the_kafka_listener_keys_make_the_listeners_and_set_the_servers_bounds():
    from ads_spark.kafka.server import _Shared

    config = BrokerConfig({**BASE, "kafka.listeners": "PLAINTEXT://127.0.0.1:0,EXTERNAL://127.0.0.1:19092",
                           "kafka.advertised.listeners": "EXTERNAL://kafka.example:29092",
                           "kafka.listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTERNAL:SASL_PLAINTEXT",
                           "socket.request.max.bytes": "1048576", "queued.max.request.bytes": "4194304",
                           "kafka.connections.max": "7", "auto.create.topics.enable": "false"})
    assert [(s.name, s.protocol, s.bind_host, s.port, s.advertised_host, s.advertised_port)
            for s in config.kafka_listener_specs()] == [
        ("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 0, "127.0.0.1", 0),
        ("EXTERNAL", "SASL_PLAINTEXT", "127.0.0.1", 19092, "kafka.example", 29092)]
    assert config.security_enabled  # a SASL Kafka listener: the security state is loaded before ports open
    shared = _Shared(config)
    assert (shared.request_max_bytes, shared.budget.capacity, shared.connections_max) == (1048576, 4194304, 7)
    assert config["auto.create.topics.enable"] is False
    assert BrokerConfig(BASE).kafka_listener_specs() == []  # empty: no Kafka port
    assert _Shared(BrokerConfig(BASE)).idle_s == 600.0  # connections.max.idle.ms, as for Flight


@pytest.mark.parametrize("values, key", [
    ({"kafka.listeners": "PLAINTEXT://0.0.0.0:9092"}, "listeners.plaintext.nonloopback.allow"),
    ({"kafka.listeners": "FTP://127.0.0.1:9092"}, "kafka.listener.security.protocol.map"),
    ({"kafka.listeners": "PLAINTEXT://127.0.0.1:9092,PLAINTEXT://127.0.0.1:9093"}, "kafka.listeners"),
    ({"kafka.listeners": "PLAINTEXT://127.0.0.1:9000", "listeners": "PLAINTEXT://127.0.0.1:9000"}, "kafka.listeners"),
    ({"kafka.listeners": "SSL://127.0.0.1:9092"}, "ssl.keystore.location"),
    ({"kafka.listeners": "PLAINTEXT://127.0.0.1:9092", "kafka.advertised.listeners": "OTHER://h:1"},
     "kafka.advertised.listeners"),
    ({"kafka.advertised.listeners": "PLAINTEXT://h:1"}, "kafka.advertised.listeners"),
    ({"kafka.listeners": "PLAINTEXT://127.0.0.1:9092", "kafka.advertised.listeners": "PLAINTEXT://0.0.0.0:9092"},
     "kafka.advertised.listeners"),
    ({"kafka.listener.security.protocol.map": "X:TLS"}, "kafka.listener.security.protocol.map"),
    ({"socket.request.max.bytes": "0"}, "socket.request.max.bytes"),
    ({"socket.request.max.bytes": "600000000"}, "queued.max.request.bytes"),
    ({"kafka.connections.max": "0"}, "kafka.connections.max"),
    ({"auto.create.topics.enable": "yes"}, "auto.create.topics.enable"),
])
def test_a_kafka_listener_value_ads_cannot_serve_is_refused_naming_the_key(values, key):
    with pytest.raises(InvalidConfigError, match=f"'{key}'"):
        BrokerConfig({**BASE, **values})
