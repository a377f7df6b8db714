"""Issue #22 item 5: the Consumer, the Admin and the Spark sink refuse a client config key they do not read,
naming it, before any connection is made; a config shared by several clients (the Spark sink's, which its
Admin also gets) is cut to the Admin's keys, so nothing that works today breaks."""

from __future__ import annotations

import pytest

from ads_spark.client.admin import Admin, admin_config
from ads_spark.client.consumer import Consumer
from ads_spark.config import ADMIN_KEYS, CONSUMER_KEYS
from ads_spark.errors import InvalidConfigError
from ads_spark.spark import clients
from ads_spark.spark.sink.options import parse_sink_options

BOOTSTRAP = "127.0.0.1:1"  # never dialled: keys are checked when the client is built


@pytest.mark.parametrize("key", ["group.protocol", "fetch.min.bytes", "acks", "client.rak"])
def test_the_consumer_refuses_a_key_it_does_not_read(key):
    with pytest.raises(InvalidConfigError, match=f"unknown consumer config '{key}'"):
        Consumer({"bootstrap.servers": BOOTSTRAP, key: "1"})


@pytest.mark.parametrize("key", ["acks", "enable.idempotence", "client.rack", "request.timeout"])
def test_the_admin_refuses_a_key_it_does_not_read(key):
    with pytest.raises(InvalidConfigError, match=f"unknown admin config '{key}'"):
        Admin({"bootstrap.servers": BOOTSTRAP, key: "1"})


def test_a_bad_admin_timeout_names_the_key():
    with pytest.raises(InvalidConfigError, match="'default.api.timeout.ms'.*must be an integer"):
        Admin({"bootstrap.servers": BOOTSTRAP, "default.api.timeout.ms": "soon"})


def test_a_shared_config_is_cut_to_the_admin_keys_and_its_consumer_accepts_them():
    sink_config = {"bootstrap.servers": BOOTSTRAP, "acks": "all", "enable.idempotence": "true", "linger.ms": "5",
                   "default.api.timeout.ms": "5000", "client.rack": "a"}
    assert admin_config(sink_config) == {"bootstrap.servers": BOOTSTRAP, "default.api.timeout.ms": "5000"}
    assert set(ADMIN_KEYS) <= set(CONSUMER_KEYS)  # Admin.list_offsets builds a Consumer from the Admin's config
    admin = Admin(admin_config(sink_config))
    try:
        assert admin.api_timeout_ms == 5000
        Consumer(admin.config, admin._connections).close()
    finally:
        admin.close()


def test_the_spark_clients_cache_gives_a_sink_config_an_admin():
    sink_config = {"bootstrap.servers": BOOTSTRAP, "acks": "all", "enable.idempotence": "true"}
    before = clients.cached_client_count()
    admin = clients.admin_for(sink_config)
    try:
        assert admin.config == {"bootstrap.servers": BOOTSTRAP}
        assert clients.admin_for({**sink_config, "acks": "1"}) is admin  # keyed by what the Admin reads
    finally:
        clients.evict("admin", sink_config)
    assert clients.cached_client_count() == before


@pytest.mark.parametrize("option", ["ads.lingr.ms", "ads.client.rack", "ads.group.id"])
def test_the_sink_refuses_an_ads_option_the_producer_does_not_read(option):
    with pytest.raises(InvalidConfigError, match=f"option '{option}' is not a producer setting"):
        parse_sink_options({"ads.bootstrap.servers": BOOTSTRAP, "topic": "t", option: "5"})


def test_the_sink_passes_producer_options_on():
    parsed = parse_sink_options({"ads.bootstrap.servers": BOOTSTRAP, "topic": "t", "ads.linger.ms": "5",
                                 "ads.batch.size": "1000", "ads.delivery.timeout.ms": "9000"})
    assert parsed.client_config["linger.ms"] == "5" and parsed.client_config["delivery.timeout.ms"] == "9000"


def test_the_consumer_reads_the_group_keys():
    """Issue #24: the group keys are the consumer's now (client/groups/settings.py), each parsed by name."""
    consumer = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": "g", "group.instance.id": "host-1",
                         "enable.auto.commit": "false", "auto.commit.interval.ms": "250", "session.timeout.ms": "9000",
                         "heartbeat.interval.ms": "700", "max.poll.interval.ms": "60000",
                         "partition.assignment.strategy": "cooperative-sticky"})
    try:
        settings = consumer._group.settings
        assert (settings.group_id, settings.group_instance_id, settings.auto_commit, settings.auto_commit_interval_ms,
                settings.session_timeout_ms, settings.heartbeat_interval_ms, settings.max_poll_interval_ms,
                settings.strategies, settings.protocol) == ("g", "host-1", False, 250, 9000, 700, 60000,
                                                            ("cooperative-sticky",), "cooperative")
    finally:
        consumer.close()
    with pytest.raises(InvalidConfigError, match="'session.timeout.ms'.*must be an integer"):
        Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": "g", "session.timeout.ms": "soon"})
