"""Every config key ADS accepts acts somewhere: a walk over the broker, topic, producer and consumer tables.

Issue #22 item 5: keys were accepted and did nothing. ``EVIDENCE`` names, for every key of every table in
``ads_spark/config.py``, where its effect is shown, one of:

* ``("test", "path under tests/", "function")``: a test that sets the key and checks what it does; the
  function must exist and its source must name the key;
* ``("read in", "module path")``: the module that reads the key (a string literal equal to the key);
* ``("default of topic key", "topic key")``: a broker key that only supplies a topic key's default
  (``TOPIC_DEFAULT_FROM_BROKER``); the topic key has its own evidence.

The table must list exactly the keys of the tables, so a key added to config.py without evidence fails
here; and every key, whatever its evidence, must be read somewhere in ``ads_spark`` outside its
declaration (its literal in another module, or ``self._values["key"]`` in config.py), so an entry cannot
point at a key nothing consumes. ``conf/broker.properties`` is checked against the broker table too.
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

import pytest

from ads_spark.config import (
    BROKER_KEYS, CONSUMER_KEYS, PRODUCER_KEYS, TOPIC_DEFAULT_FROM_BROKER, TOPIC_KEYS, BrokerConfig, parse_value,
    read_properties,
)

REPO = Path(__file__).resolve().parents[2]
TABLES = {"broker": BROKER_KEYS, "topic": TOPIC_KEYS, "producer": PRODUCER_KEYS, "consumer": CONSUMER_KEYS}

EVIDENCE = {
    ("broker", "broker.id"): (
        "test", "integration/test_zookeeper_guard.py",
        "test_a_broker_whose_kazoo_thread_dies_stops_leading_and_reports_fatal"),
    ("broker", "listeners"): (
        "test", "unit/test_listener_config.py", "test_listeners_parse_into_specs_with_protocols_and_advertised_addresses"),
    ("broker", "advertised.listeners"): (
        "test", "integration/test_config_effects.py",
        "test_unset_counts_advertised_address_log_dirs_and_log_append_time"),
    ("broker", "log.dirs"): (
        "test", "integration/test_config_effects.py",
        "test_unset_counts_advertised_address_log_dirs_and_log_append_time"),
    ("broker", "zookeeper.connect"): (
        "test", "integration/test_zookeeper_guard.py",
        "test_a_broker_whose_kazoo_thread_dies_stops_leading_and_reports_fatal"),
    ("broker", "zookeeper.session.timeout.ms"):
        ("test", "integration/test_replication_failover.py", "test_isr_members_back_from_expired_sessions_lead_again"),
    ("broker", "broker.rack"): ("test", "unit/test_contracts.py", "test_properties_file_parsing"),
    ("broker", "num.replica.fetchers"): ("read in", "ads_spark/broker/replica/fetcher.py"),
    ("broker", "replica.fetch.max.bytes"): ("read in", "ads_spark/broker/replica/fetcher.py"),
    ("broker", "replica.fetch.response.max.bytes"): ("read in", "ads_spark/broker/replica/fetcher.py"),
    ("broker", "replica.fetch.wait.max.ms"): (
        "test", "integration/test_replica_fetcher.py",
        "test_a_new_topic_replicates_without_waiting_for_parked_follower_fetches"),
    ("broker", "replica.fetch.backoff.ms"): ("read in", "ads_spark/broker/replica/fetcher.py"),
    ("broker", "replica.lag.time.max.ms"): (
        "test", "integration/test_replication_failover.py",
        "test_offline_until_unclean_election_is_enabled_and_the_loss_is_counted"),
    ("broker", "replica.high.watermark.checkpoint.interval.ms"): ("read in", "ads_spark/broker/broker.py"),
    ("broker", "default.replication.factor"): (
        "test", "integration/test_config_effects.py",
        "test_unset_counts_advertised_address_log_dirs_and_log_append_time"),
    ("broker", "num.partitions"): (
        "test", "integration/test_config_effects.py",
        "test_unset_counts_advertised_address_log_dirs_and_log_append_time"),
    ("broker", "min.insync.replicas"):
        ("test", "integration/test_cluster_cli.py", "test_bad_input_gets_clear_errors_and_the_broker_keeps_serving"),
    ("broker", "unclean.leader.election.enable"): (
        "test", "integration/test_replication_failover.py",
        "test_offline_until_unclean_election_is_enabled_and_the_loss_is_counted"),
    ("broker", "unclean.recovery.timeout.ms"): (
        "test", "unit/test_replication_controller.py",
        "test_past_the_timeout_the_last_known_elr_alone_recovers_reported_as_unclean"),
    ("broker", "auto.leader.rebalance.enable"):
        ("test", "integration/test_controller_ops.py", "test_preferred_leaders_come_back_after_a_restart"),
    ("broker", "leader.imbalance.per.broker.percentage"): ("read in", "ads_spark/replication/controller_state.py"),
    ("broker", "leader.imbalance.check.interval.seconds"):
        ("test", "integration/test_controller_ops.py", "test_preferred_leaders_come_back_after_a_restart"),
    ("broker", "controlled.shutdown.enable"): (
        "test", "integration/test_zookeeper_guard.py",
        "test_a_broker_whose_kazoo_thread_dies_stops_leading_and_reports_fatal"),
    ("broker", "controlled.shutdown.max.retries"): ("read in", "ads_spark/broker/zk/membership.py"),
    ("broker", "controlled.shutdown.retry.backoff.ms"): ("read in", "ads_spark/broker/zk/membership.py"),
    ("broker", "log.segment.bytes"): ("default of topic key", "segment.bytes"),
    ("broker", "log.roll.ms"): ("default of topic key", "segment.ms"),
    ("broker", "log.retention.ms"):
        ("test", "unit/test_contracts.py", "test_topic_config_falls_back_to_broker_defaults"),
    ("broker", "log.retention.bytes"): ("default of topic key", "retention.bytes"),
    ("broker", "log.retention.check.interval.ms"): ("read in", "ads_spark/broker/broker.py"),
    ("broker", "log.flush.interval.messages"): ("default of topic key", "flush.messages"),
    ("broker", "log.flush.interval.ms"): ("default of topic key", "flush.ms"),
    ("broker", "message.max.bytes"): ("default of topic key", "max.message.bytes"),
    ("broker", "metrics.port"): (
        "test", "integration/test_zookeeper_guard.py",
        "test_a_broker_whose_kazoo_thread_dies_stops_leading_and_reports_fatal"),
    ("broker", "request.timeout.ms.max"): ("read in", "ads_spark/broker/rpc/data_handlers.py"),
    ("broker", "fetch.wait.max.ms.max"): ("read in", "ads_spark/broker/rpc/data_handlers.py"),
    ("broker", "fetch.max.bytes"): ("test", "integration/test_bad_input.py", "test_7_one_fetch_answer_is_bounded"),
    ("broker", "flight.streams.max"):
        ("test", "integration/test_stream_limits.py", "test_streams_are_bounded_refused_at_once_and_freed_when_idle"),
    ("broker", "flight.streams.per.connection.max"):
        ("test", "integration/test_stream_limits.py", "test_streams_are_bounded_refused_at_once_and_freed_when_idle"),
    ("broker", "unclean.recovery.timeout.ms"): (
        "test", "unit/test_replication_controller.py",
        "test_past_the_timeout_the_last_known_elr_alone_recovers_reported_as_unclean"),
    ("broker", "metrics.host"): ("read in", "ads_spark/broker/metrics.py"),
    ("broker", "connections.max.idle.ms"):
        ("test", "integration/test_stream_limits.py", "test_streams_are_bounded_refused_at_once_and_freed_when_idle"),
    # Issue #23. Listeners: parsed into the specs the broker serves (tests/integration/test_listeners.py shows
    # one server per listener and metadata per listener); the security keys: read where they act.
    ("broker", "listener.security.protocol.map"): (
        "test", "unit/test_listener_config.py", "test_listeners_parse_into_specs_with_protocols_and_advertised_addresses"),
    ("broker", "inter.broker.listener.name"): (
        "test", "unit/test_listener_config.py", "test_listeners_parse_into_specs_with_protocols_and_advertised_addresses"),
    ("broker", "listeners.plaintext.nonloopback.allow"): (
        "test", "unit/test_listener_config.py", "test_plaintext_off_loopback_is_allowed_only_when_asked_for"),
    ("broker", "ssl.keystore.type"): ("read in", "ads_spark/security/tls.py"),
    ("broker", "ssl.truststore.type"): ("read in", "ads_spark/security/tls.py"),
    ("broker", "ssl.keystore.location"): ("read in", "ads_spark/security/tls.py"),
    ("broker", "ssl.key.password"): ("read in", "ads_spark/security/tls.py"),
    ("broker", "ssl.truststore.location"): ("read in", "ads_spark/security/tls.py"),
    ("broker", "ssl.client.auth"): ("read in", "ads_spark/security/tls.py"),
    ("broker", "ssl.principal.mapping.rules"): ("read in", "ads_spark/broker/rpc/auth_middleware.py"),
    ("broker", "ssl.endpoint.identification.algorithm"): (
        "test", "unit/test_listener_config.py", "test_the_inter_broker_client_config_is_the_inter_broker_listeners"),
    ("broker", "sasl.enabled.mechanisms"): ("read in", "ads_spark/listener_config.py"),
    ("broker", "sasl.jaas.config"): (
        "test", "unit/test_listener_config.py", "test_the_inter_broker_client_config_is_the_inter_broker_listeners"),
    ("broker", "authorizer.class.name"): ("read in", "ads_spark/broker/security_state.py"),
    ("broker", "super.users"): ("read in", "ads_spark/broker/security_state.py"),
    ("broker", "allow.everyone.if.no.acl.found"): ("read in", "ads_spark/broker/security_state.py"),
    ("broker", "authentication.token.lifetime.ms"): ("read in", "ads_spark/broker/security_state.py"),
    ("broker", "credential.hash.iterations"): ("read in", "ads_spark/broker/security_state.py"),
    ("broker", "zookeeper.set.acl"): ("read in", "ads_spark/broker/zk/tls.py"),
    ("broker", "zookeeper.ssl.client.enable"): ("read in", "ads_spark/broker/zk/tls.py"),
    ("broker", "zookeeper.ssl.keystore.location"): ("read in", "ads_spark/broker/zk/tls.py"),
    ("broker", "zookeeper.ssl.truststore.location"): ("read in", "ads_spark/broker/zk/tls.py"),
    ("broker", "zookeeper.ssl.endpoint.identification.algorithm"): ("read in", "ads_spark/broker/zk/tls.py"),
    ("topic", "min.insync.replicas"):
        ("test", "integration/test_cluster_cli.py", "test_bad_input_gets_clear_errors_and_the_broker_keeps_serving"),
    ("topic", "unclean.leader.election.enable"): (
        "test", "integration/test_replication_failover.py",
        "test_offline_until_unclean_election_is_enabled_and_the_loss_is_counted"),
    ("topic", "retention.ms"):
        ("test", "integration/test_zookeeper_adapter.py", "test_watches_fire_and_topic_deletion"),
    ("topic", "retention.bytes"): ("read in", "ads_spark/broker/broker.py"),
    ("topic", "segment.bytes"): ("read in", "ads_spark/broker/broker.py"),
    ("topic", "segment.ms"): ("test", "unit/test_request_schemas.py", "test_what_our_clients_send_is_accepted"),
    ("topic", "max.message.bytes"):
        ("test", "integration/test_cluster_cli.py", "test_oversized_batch_is_rejected_and_changes_nothing"),
    ("topic", "flush.messages"): ("read in", "ads_spark/broker/broker.py"),
    ("topic", "flush.ms"): ("read in", "ads_spark/broker/broker.py"),
    ("topic", "message.timestamp.type"): (
        "test", "integration/test_config_effects.py",
        "test_unset_counts_advertised_address_log_dirs_and_log_append_time"),
    # Log compaction (issue #24): the topic keys reach LogConfig (broker.log_config_for), whose fields the cleaner
    # (broker/log/cleaner_manager.py, cleaner.py) and retention read; the broker keys set the cleaner's bounds.
    ("topic", "cleanup.policy"): ("test", "unit/test_config_key_effects.py", "test_cleanup_policy_is_delete_compact_or_both"),
    **{("topic", key): ("test", "unit/test_config_key_effects.py",
                        "test_compaction_topic_keys_fall_back_to_the_broker_keys_and_reach_the_log_config")
       for key in ("min.cleanable.dirty.ratio", "min.compaction.lag.ms", "max.compaction.lag.ms", "delete.retention.ms")},
    ("broker", "log.cleanup.policy"): ("default of topic key", "cleanup.policy"),
    # Typed topics (issue #26, config_schemas.py): the admin handlers apply them on a real broker.
    ("topic", "schema.type"): ("test", "integration/test_typed_topics_admin.py",
                               "test_schema_type_is_fixed_and_the_rules_hold_on_alter"),
    ("topic", "schema.compatibility"): ("test", "integration/test_typed_topics_admin.py",
                                        "test_schema_compatibility_is_the_rule_a_registration_passes"),
    ("topic", "schema.statistics.columns"): ("test", "integration/test_typed_statistics.py",
                                             "test_filters_skip_batches_by_statistics_and_offsets_stay_whole"),
    ("broker", "log.cleaner.min.cleanable.ratio"): ("default of topic key", "min.cleanable.dirty.ratio"),
    ("broker", "log.cleaner.min.compaction.lag.ms"): ("default of topic key", "min.compaction.lag.ms"),
    ("broker", "log.cleaner.max.compaction.lag.ms"): ("default of topic key", "max.compaction.lag.ms"),
    ("broker", "log.cleaner.delete.retention.ms"): ("default of topic key", "delete.retention.ms"),
    **{("broker", key): ("test", "unit/test_config_key_effects.py", "test_the_cleaner_broker_keys_set_its_bounds")
       for key in ("log.cleaner.enable", "log.cleaner.threads", "log.cleaner.io.max.bytes.per.second",
                   "log.cleaner.dedupe.buffer.size", "log.cleaner.backoff.ms")},
    # The group coordinator (issue #24): bounds checked in a unit test, the rest read where they act.
    **{("broker", key): ("test", "unit/test_config_key_effects.py", "test_the_group_coordinator_broker_keys_set_its_bounds")
       for key in ("offsets.topic.replication.factor", "offsets.topic.num.partitions", "offsets.topic.segment.bytes",
                   "group.min.session.timeout.ms", "group.max.session.timeout.ms", "group.initial.rebalance.delay.ms",
                   "group.max.size", "offsets.retention.minutes")},
    ("broker", "offsets.retention.ms"): ("test", "integration/test_group_coordinator_retention.py",
                                         "test_offsets_retention_expires_an_empty_groups_offsets"),
    ("broker", "offsets.retention.check.interval.ms"): ("test", "integration/test_group_coordinator_retention.py",
                                                        "test_offsets_retention_expires_an_empty_groups_offsets"),
    ("broker", "offsets.commit.timeout.ms"): ("read in", "ads_spark/broker/group/coordinator.py"),
    ("broker", "offset.metadata.max.bytes"): ("test", "integration/test_group_coordinator.py",
                                              "test_commit_and_fetch_round_trip_metadata_and_leader_epoch"),
    # The Kafka protocol listener (issue #25, config_kafka.py): parsed into the Kafka listeners and the servers'
    # bounds (tests/integration/test_kafka_listener.py shows each bound closing connections on a real broker).
    **{("broker", key): ("test", "unit/test_config_key_effects.py",
                         "test_the_kafka_listener_keys_make_the_listeners_and_set_the_servers_bounds")
       for key in ("kafka.listeners", "kafka.advertised.listeners", "kafka.listener.security.protocol.map",
                   "socket.request.max.bytes", "queued.max.request.bytes", "kafka.connections.max")},
    ("broker", "auto.create.topics.enable"): (
        "test", "unit/test_kafka_data_handlers.py",
        "test_metadata_does_not_auto_create_when_the_request_or_the_broker_says_no"),
    ("producer", "bootstrap.servers"):
        ("test", "integration/test_acks_zero.py", "test_acks_zero_completes_while_the_broker_is_paused"),
    ("producer", "request.timeout.ms"):
        ("test", "integration/test_consumer_poll.py", "test_poll_rides_out_a_leader_failover"),
    ("producer", "retry.backoff.ms"):
        ("test", "unit/test_config_key_effects.py", "test_retries_bounds_the_resends_of_a_failing_batch"),
    ("producer", "metadata.max.age.ms"): ("read in", "ads_spark/protocol/connection.py"),
    ("producer", "default.api.timeout.ms"):
        ("test", "integration/test_cluster_cli.py", "test_admin_reads_wait_out_a_broker_restart"),
    ("producer", "acks"):
        ("test", "integration/test_acks_zero.py", "test_acks_zero_completes_while_the_broker_is_paused"),
    ("producer", "enable.idempotence"): (
        "test", "unit/test_config_key_effects.py",
        "test_retries_0_with_idempotence_asked_for_is_refused_and_off_by_default"),
    ("producer", "linger.ms"):
        ("test", "integration/test_acks_zero.py", "test_acks_zero_completes_while_the_broker_is_paused"),
    ("producer", "batch.size"): (
        "test", "integration/test_producer_batching.py",
        "test_null_key_records_stick_to_a_partition_for_batch_size_bytes"),
    ("producer", "max.request.size"): (
        "test", "unit/test_producer_queue.py",
        "test_requests_refused_together_are_resent_in_call_order_and_all_delivered"),
    ("producer", "delivery.timeout.ms"):
        ("test", "integration/test_cluster_cli.py", "test_sigkill_mid_write_recovers_every_acknowledged_record"),
    ("producer", "max.in.flight.requests.per.connection"): ("read in", "ads_spark/client/producer_config.py"),
    ("producer", "retries"):
        ("test", "unit/test_config_key_effects.py", "test_retries_bounds_the_resends_of_a_failing_batch"),
    ("producer", "ads.producer.id"):
        ("test", "integration/test_producer_batching.py", "test_a_caller_chosen_producer_id_never_coalesces"),
    ("producer", "ads.producer.epoch"): ("read in", "ads_spark/client/producer_config.py"),
    # Issue #23's client security keys (both tables): parsed where the client's transport is made.
    ("producer", "security.protocol"): ("read in", "ads_spark/security/client_security.py"),
    ("producer", "sasl.mechanism"): ("read in", "ads_spark/security/client_security.py"),
    ("producer", "sasl.username"): ("read in", "ads_spark/security/client_security.py"),
    ("producer", "sasl.password"): ("read in", "ads_spark/security/client_security.py"),
    ("producer", "sasl.jaas.config"): ("read in", "ads_spark/security/client_security.py"),
    ("producer", "sasl.token"): ("read in", "ads_spark/security/client_security.py"),
    ("producer", "ssl.truststore.location"): ("read in", "ads_spark/security/client_security.py"),
    ("producer", "ssl.keystore.location"): ("read in", "ads_spark/security/client_security.py"),
    ("producer", "ssl.key.password"): ("read in", "ads_spark/security/client_security.py"),
    ("producer", "ssl.endpoint.identification.algorithm"): ("read in", "ads_spark/security/client_security.py"),
    ("consumer", "security.protocol"): ("read in", "ads_spark/security/client_security.py"),
    ("consumer", "sasl.mechanism"): ("read in", "ads_spark/security/client_security.py"),
    ("consumer", "sasl.username"): ("read in", "ads_spark/security/client_security.py"),
    ("consumer", "sasl.password"): ("read in", "ads_spark/security/client_security.py"),
    ("consumer", "sasl.jaas.config"): ("read in", "ads_spark/security/client_security.py"),
    ("consumer", "sasl.token"): ("read in", "ads_spark/security/client_security.py"),
    ("consumer", "ssl.truststore.location"): ("read in", "ads_spark/security/client_security.py"),
    ("consumer", "ssl.keystore.location"): ("read in", "ads_spark/security/client_security.py"),
    ("consumer", "ssl.key.password"): ("read in", "ads_spark/security/client_security.py"),
    ("consumer", "ssl.endpoint.identification.algorithm"): ("read in", "ads_spark/security/client_security.py"),
    ("consumer", "bootstrap.servers"):
        ("test", "integration/test_acks_zero.py", "test_acks_zero_completes_while_the_broker_is_paused"),
    ("consumer", "request.timeout.ms"):
        ("test", "integration/test_consumer_poll.py", "test_poll_rides_out_a_leader_failover"),
    ("consumer", "retry.backoff.ms"):
        ("test", "unit/test_config_key_effects.py", "test_retries_bounds_the_resends_of_a_failing_batch"),
    ("consumer", "metadata.max.age.ms"): ("read in", "ads_spark/protocol/connection.py"),
    ("consumer", "default.api.timeout.ms"):
        ("test", "integration/test_cluster_cli.py", "test_admin_reads_wait_out_a_broker_restart"),
    ("consumer", "client.rack"):
        ("test", "integration/test_controller_ops.py", "test_rack_aware_placement_and_same_rack_follower_reads"),
    ("consumer", "fetch.max.bytes"): ("test", "integration/test_bad_input.py", "test_7_one_fetch_answer_is_bounded"),
    ("consumer", "max.partition.fetch.bytes"):
        ("test", "integration/test_consumer_local_reads.py", "test_local_reads_equal_network_reads"),
    ("consumer", "fetch.max.wait.ms"):
        ("test", "integration/test_consumer_poll.py", "test_poll_wakes_when_records_are_committed_and_idles_cheaply"),
    ("consumer", "max.poll.records"):
        ("test", "integration/test_consumer_poll.py", "test_poll_returns_at_most_max_poll_records_and_loses_none"),
    ("consumer", "auto.offset.reset"): ("read in", "ads_spark/client/consumer.py"),
    ("consumer", "local.reads"):
        ("test", "integration/test_consumer_local_reads.py", "test_local_reads_equal_network_reads"),
    # Consumer groups (issue #24): client/groups/settings.py parses them, client/groups/membership.py acts.
    ("consumer", "group.id"): ("test", "integration/test_group_consumer.py",
                               "test_three_members_one_killed_the_others_take_over_from_the_committed_offsets"),
    ("consumer", "group.instance.id"): ("test", "unit/test_consumer_group_member.py",
                                        "test_a_static_member_names_its_instance_and_does_not_leave_on_close"),
    ("consumer", "enable.auto.commit"): ("test", "unit/test_consumer_group_member.py",
                                         "test_auto_commit_interval_paces_commits_in_poll_and_disabled_auto_commit_never_commits"),
    ("consumer", "auto.commit.interval.ms"): ("test", "unit/test_consumer_group_member.py",
                                              "test_auto_commit_interval_paces_commits_in_poll_and_disabled_auto_commit_never_commits"),
    ("consumer", "session.timeout.ms"): ("test", "unit/test_consumer_group_member.py",
                                         "test_a_member_joins_with_the_id_the_coordinator_gives_leads_and_starts_at_committed_offsets"),
    ("consumer", "heartbeat.interval.ms"): ("test", "unit/test_consumer_group_member.py",
                                            "test_a_heartbeat_answered_rebalance_in_progress_makes_the_next_poll_rejoin_and_eager_revokes_first"),
    ("consumer", "max.poll.interval.ms"): ("test", "unit/test_consumer_group_member.py",
                                           "test_a_member_that_does_not_poll_within_max_poll_interval_leaves_and_rejoins_on_its_next_poll"),
    ("consumer", "partition.assignment.strategy"): ("test", "unit/test_consumer_group_member.py",
                                                    "test_cooperative_sticky_revokes_a_moving_partition_first_and_gives_it_in_a_follow_up_rebalance"),
    # Client security keys (issue #23), the same in both tables (parsed by security/client_security.py).
    **{(table, key): evidence for table in ("producer", "consumer") for key, evidence in {
        "security.protocol":
            ("test", "integration/test_client_security.py", "test_ssl_listener_round_trip_and_fast_failures"),
        "sasl.mechanism": ("read in", "ads_spark/security/client_security.py"),
        "sasl.username": ("test", "unit/test_credentials.py", "test_sasl_username_and_password_keys"),
        "sasl.password": ("test", "unit/test_credentials.py", "test_sasl_username_and_password_keys"),
        "sasl.jaas.config": ("test", "integration/test_client_security.py",
                             "test_sasl_clients_authenticate_once_refresh_their_token_and_fail_fast_on_a_wrong_password"),
        "sasl.token": ("test", "integration/test_client_security.py",
                       "test_sasl_clients_authenticate_once_refresh_their_token_and_fail_fast_on_a_wrong_password"),
        "ssl.truststore.location":
            ("test", "integration/test_client_security.py", "test_ssl_listener_round_trip_and_fast_failures"),
        "ssl.keystore.location": ("test", "integration/test_client_security.py",
                                  "test_mutual_tls_round_trip_with_replication_and_certificate_failures"),
        "ssl.key.password":
            ("test", "unit/test_transport.py", "test_tls_and_mutual_tls_round_trips_with_an_encrypted_client_key"),
        "ssl.endpoint.identification.algorithm":
            ("test", "unit/test_transport.py", "test_an_empty_endpoint_identification_algorithm_is_refused_naming_the_key"),
    }.items()},
}


def _string_literals(path: Path) -> list[str]:
    values = []
    for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if token.type == tokenize.STRING:
            try:
                value = ast.literal_eval(token.string)
            except (ValueError, SyntaxError):  # f-strings
                continue
            if isinstance(value, str):
                values.append(value)
    return values


def _literals_outside_config() -> set[str]:
    found: set[str] = set()
    for path in (REPO / "ads_spark").rglob("*.py"):
        if path.relative_to(REPO).as_posix() != "ads_spark/config.py":
            found.update(_string_literals(path))
    return found


def test_the_evidence_table_lists_exactly_the_accepted_keys():
    accepted = {(table, key) for table, keys in TABLES.items() for key in keys}
    assert sorted(accepted - set(EVIDENCE)) == [], "keys without evidence: add an entry to EVIDENCE"
    assert sorted(set(EVIDENCE) - accepted) == [], "evidence for keys no table has"


def test_every_accepted_key_is_read_somewhere():
    literals = _literals_outside_config()
    config_source = (REPO / "ads_spark" / "config.py").read_text()
    unread = []
    for table, key in EVIDENCE:
        if table == "broker" and key in TOPIC_DEFAULT_FROM_BROKER.values():
            continue  # supplies a topic key's default: that key is checked
        if key not in literals and f'self._values["{key}"]' not in config_source:
            unread.append((table, key))
    assert unread == []


@pytest.mark.parametrize("table, key", sorted(EVIDENCE))
def test_the_evidence_of_each_key_holds(table, key):
    kind, where, *function_name = EVIDENCE[(table, key)]
    if kind == "test":
        path, function = where, function_name[0]
        source = (REPO / "tests" / path).read_text()
        node = next((n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == function),
                    None)
        assert node is not None, f"{path}::{function} does not exist"
        body = ast.get_source_segment(source, node)
        assert f'"{key}"' in body or f"{key}=" in body or f"'{key}'" in body, f"{function} does not set {key}"
    elif kind == "read in":
        assert key in _string_literals(REPO / where), f"{where} does not read {key}"
    else:
        assert kind == "default of topic key" and table == "broker"
        assert TOPIC_DEFAULT_FROM_BROKER.get(where) == key and ("topic", where) in EVIDENCE


# ---- conf/broker.properties (issue #22 item 6) -----------------------------------------------------------

# Values the shipped file sets for one local broker instead of the default: the keys without a default, and
# a fixed port (the default, 0, picks a free port at every start, which no client could be told in advance).
LOCAL_BROKER_VALUES = {"broker.id": "1", "log.dirs": "/tmp/ads-logs", "zookeeper.connect": "127.0.0.1:2181/ads",
                       "listeners": "PLAINTEXT://127.0.0.1:9092"}


def test_the_shipped_broker_properties_lists_every_broker_key_at_its_default():
    path = REPO / "conf" / "broker.properties"
    values = read_properties(path)
    # After adding or changing a broker key: .venv/bin/python scripts/broker_properties.py
    assert sorted(values) == sorted(BROKER_KEYS), "conf/broker.properties must list exactly config.BROKER_KEYS"
    for name, key in BROKER_KEYS.items():
        if name in LOCAL_BROKER_VALUES:
            assert values[name] == LOCAL_BROKER_VALUES[name]
        else:
            shipped = parse_value(key, values[name])
            assert shipped == key.default or (shipped == "" and key.default is None), name
    text = path.read_text().splitlines()
    for name in BROKER_KEYS:  # each key has its one-line comment right above it
        line = text.index(next(t for t in text if t.startswith(f"{name}=")))
        assert text[line - 1].startswith("# "), name
    BrokerConfig(values)  # complete as shipped: a local broker starts from it alone
