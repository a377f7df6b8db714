"""Spark source/sink security options (issue #23 item 8) without a cluster: the ``ads.`` security keys reach
the client config, the SASL login stays on the driver (only a token is pickled for executors), the token
is renewed past half its life, and a topic the query may not describe fails the query at once."""

import logging
import pickle
from types import SimpleNamespace

import pytest
from pyspark.sql.types import BinaryType, StructField, StructType

from ads_spark.errors import InvalidConfigError, TopicAuthorizationFailedError, UnknownTopicOrPartitionError
from ads_spark.spark import clients
from ads_spark.spark.sink import writer
from ads_spark.spark.sink.options import parse_sink_options
from ads_spark.spark.source import lookups, reader
from ads_spark.spark.source.offsets import PartitionState, TopicState
from ads_spark.spark.source.options import parse_source_options, parse_subscription

PASSWORD = "pw-Zq8!unique-password"
SASL = {"ads.bootstrap.servers": "h:1", "ads.security.protocol": "SASL_PLAINTEXT",
        "ads.sasl.username": "alice", "ads.sasl.password": PASSWORD}
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" '
        f'password="{PASSWORD}";')


@pytest.fixture
def auth(monkeypatch):
    """clients._authenticate replaced: counts calls, hands out numbered tokens valid for 1000 s."""
    calls = []
    clock = SimpleNamespace(now_ms=1_000_000)

    def authenticate(config, security):
        assert "sasl.password" not in config and security.password.reveal() == PASSWORD
        calls.append(security.username)
        return f"TOKEN-{len(calls)}", clock.now_ms + 1_000_000

    monkeypatch.setattr(clients, "_authenticate", authenticate)
    monkeypatch.setattr(clients, "time", SimpleNamespace(time=lambda: clock.now_ms / 1000))
    monkeypatch.setattr(clients, "_logins", type(clients._logins)())
    return SimpleNamespace(calls=calls, clock=clock)


class FakeAdmin:
    """Topic "a" (one partition, offsets [0, 10)); topics in ``forbidden`` are left out of the listing and
    refused by name, as an authorizing broker does."""

    def __init__(self, forbidden=()):
        self.forbidden, self.configs = set(forbidden), []

    def list_topics(self):
        return ["a"]

    def describe_schema(self, topic, once_timeout_ms=None):
        return {"topic": topic, "schema_type": "kafka", "compatibility": None, "latest": 0, "versions": []}

    def describe_topics(self, names):
        if set(names) & self.forbidden:
            raise TopicAuthorizationFailedError(f"topic '{names[0]}' does not exist")
        if set(names) - {"a"}:
            raise UnknownTopicOrPartitionError("nope")
        return [SimpleNamespace(topic="a", topic_id="id-a", partitions=[SimpleNamespace(partition=0)])]


@pytest.fixture
def fake_cluster(monkeypatch):
    admin = FakeAdmin(forbidden={"b"})

    def admin_for(config):
        admin.configs.append(dict(config))
        return admin

    monkeypatch.setattr(reader.clients, "admin_for", admin_for)
    monkeypatch.setattr(reader.lookups, "take_snapshot",
                        lambda admin, sub, require_existing: {"a": TopicState("id-a", {0: PartitionState(0, 10)})})
    return admin


# ---- option mapping ----------------------------------------------------------------------------------


def test_security_options_map_to_client_keys_and_the_login_is_split_off():
    options = parse_source_options({**SASL, "ads.security.protocol": "SASL_SSL", "subscribe": "a",
                                    "ads.ssl.truststore.location": "/etc/ads/ca.pem",
                                    "ads.ssl.endpoint.identification.algorithm": ""}, streaming=False)
    assert options.client_config == {"bootstrap.servers": "h:1", "security.protocol": "SASL_SSL",
                                     "ssl.truststore.location": "/etc/ads/ca.pem",
                                     "ssl.endpoint.identification.algorithm": ""}
    assert options.login.username == "alice" and options.login.password.reveal() == PASSWORD
    assert PASSWORD not in repr(options)
    sink = parse_sink_options({"ADS.SASL.JAAS.CONFIG": JAAS, **{k: v for k, v in SASL.items() if "user" not in k
                                                                and "password" not in k}, "topic": "a"})
    assert "sasl.jaas.config" not in sink.client_config and sink.login.username == "alice"
    assert sink.client_config["security.protocol"] == "SASL_PLAINTEXT"


def test_plaintext_has_no_login():
    options = parse_source_options({"ads.bootstrap.servers": "h:1", "subscribe": "a"}, streaming=True)
    assert options.login is None and reader.AdsStreamReader(options).options.login_handle == ""


@pytest.mark.parametrize("extra, named, problem", [
    ({"ads.sasl.jaas.config": "PlainLoginModule required username=\"a\" password=\"" + PASSWORD + "\";"},
     "ads.sasl.jaas.config", "not a supported login module"),
    ({"ads.sasl.jaas.config": JAAS[:-1]}, "ads.sasl.jaas.config", "missing ';'"),
    ({"ads.sasl.mechanism": "SCRAM-SHA-512"}, "ads.sasl.mechanism", "must be one of PLAIN"),
    ({"ads.sasl.token": "t"}, "ads.sasl.token", "set by the driver"),
    ({"ads.sasl.frobnicate": "x"}, "ads.sasl.frobnicate", "is not a"),  # unknown ads.* refused as before
])
def test_bad_security_options_name_the_ads_key_and_never_the_password(extra, named, problem):
    opts = {**SASL, **extra, "subscribe": "a"}
    if "ads.sasl.jaas.config" in extra:
        opts = {k: v for k, v in opts.items() if k not in ("ads.sasl.username", "ads.sasl.password")}
    for parse in (lambda: parse_source_options(opts, streaming=True), lambda: parse_sink_options(opts)):
        with pytest.raises(InvalidConfigError) as excinfo:
            parse()
        assert f"'{named}'" in str(excinfo.value) and problem in str(excinfo.value)
        assert PASSWORD not in str(excinfo.value)


def test_sasl_settings_need_a_sasl_protocol():
    with pytest.raises(InvalidConfigError, match="'ads.sasl.username': needs ads.security.protocol SASL_"):
        parse_sink_options({"ads.bootstrap.servers": "h:1", "ads.sasl.username": "u", "topic": "a"})


# ---- the password stays on the driver; partitions carry the token ------------------------------------


def test_batch_reader_and_partitions_pickle_without_the_password(auth, fake_cluster):
    batch = reader.AdsBatchReader(parse_source_options({**SASL, "subscribe": "a"}, streaming=False))
    shipped = pickle.dumps(batch)  # what Spark sends to executors, pickled before partitions() is called
    partitions = batch.partitions()
    payload = shipped + pickle.dumps(partitions) + pickle.dumps(batch)
    assert PASSWORD.encode() not in payload and b"TOKEN-1" not in shipped
    assert all(isinstance(p, reader.TokenPartition) and p.token == "TOKEN-1" for p in partitions)
    assert "TOKEN-1" not in repr(partitions)
    assert fake_cluster.configs[-1]["sasl.token"] == "TOKEN-1"
    assert all("sasl.password" not in c and "sasl.username" not in c for c in fake_cluster.configs)
    batch.partitions()
    reader.AdsBatchReader(parse_source_options({**SASL, "subscribe": "a"}, streaming=False)).partitions()
    assert auth.calls == ["alice"]  # one authenticate for the same login in this process


def test_jaas_login_is_not_pickled_either(auth, fake_cluster):
    opts = {**{k: v for k, v in SASL.items() if "user" not in k and "password" not in k},
            "ads.sasl.jaas.config": JAAS, "subscribe": "a"}
    batch = reader.AdsBatchReader(parse_source_options(opts, streaming=False))
    payload = pickle.dumps(batch) + pickle.dumps(batch.partitions())
    assert PASSWORD.encode() not in payload and b"PlainLoginModule" not in payload


def test_options_with_the_login_refuse_pickling():
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(parse_source_options({**SASL, "subscribe": "a"}, streaming=False))


def test_executor_reads_with_the_partition_token(auth, monkeypatch):
    seen = []
    monkeypatch.setattr(reader, "read_range", lambda options, r: seen.append(options.client_config) or iter(()))
    monkeypatch.setattr(reader, "read_ahead", lambda make: make())
    executor_side = pickle.loads(pickle.dumps(reader.AdsStreamReader(
        parse_source_options({**SASL, "subscribe": "a"}, streaming=True))))
    r = reader.OffsetRange("a", 0, "id-a", 0, 10)
    list(executor_side.read(reader.TokenPartition(r, "TOKEN-9")))
    assert seen == [{"bootstrap.servers": "h:1", "security.protocol": "SASL_PLAINTEXT", "sasl.token": "TOKEN-9"}]
    assert auth.calls == []  # executors never authenticate


def test_stream_planning_renews_the_token_past_half_its_life(auth, fake_cluster, monkeypatch):
    monkeypatch.setattr(reader.lookups, "log_start_offsets", lambda admin, missing: {})
    stream = reader.AdsStreamReader(parse_source_options({**SASL, "subscribe": "a"}, streaming=True))
    start = {"version": 1, "topics": {"a": {"id": "id-a", "offsets": {"0": 0}}}}
    end = {"version": 1, "topics": {"a": {"id": "id-a", "offsets": {"0": 5}}}}
    assert [p.token for p in stream.partitions(start, end)] == ["TOKEN-1"]
    auth.clock.now_ms += 499_000  # token issued at 1_000_000, valid 1_000_000 ms: half life not reached
    assert [p.token for p in stream.partitions(start, end)] == ["TOKEN-1"]
    auth.clock.now_ms += 2_000
    assert [p.token for p in stream.partitions(start, end)] == ["TOKEN-2"]
    assert auth.calls == ["alice", "alice"]


def test_a_failed_renewal_keeps_a_valid_token(auth, caplog):
    from ads_spark.errors import BrokerNotAvailableError, SaslAuthenticationFailedError

    handle = clients.register_login({"bootstrap.servers": "h:1", "security.protocol": "SASL_PLAINTEXT"},
                                    parse_source_options({**SASL, "subscribe": "a"}, streaming=True).login)
    assert clients.token_for(handle)[0] == "TOKEN-1"
    auth.clock.now_ms += 600_000
    clients._authenticate = lambda config, security: (_ for _ in ()).throw(BrokerNotAvailableError("down"))
    with caplog.at_level(logging.DEBUG, logger="ads.spark"):
        assert clients.token_for(handle)[0] == "TOKEN-1"
    clients._authenticate = lambda config, security: (_ for _ in ()).throw(SaslAuthenticationFailedError("no"))
    with pytest.raises(SaslAuthenticationFailedError):
        clients.token_for(handle)
    assert PASSWORD not in caplog.text and "TOKEN-1" not in caplog.text


def test_sink_writer_ships_a_token_not_the_password(auth):
    schema = StructType([StructField("value", BinaryType())])
    for made in (writer.AdsBatchWriter.create({**SASL, "topic": "a"}, schema, False),
                 writer.AdsStreamWriter.create({**SASL, "topic": "a"}, schema, False)):
        payload = pickle.dumps(made)
        assert PASSWORD.encode() not in payload and made.options.login is None
        assert made.options.client_config["sasl.token"] == "TOKEN-1"
        assert "sasl.username" not in made.options.client_config
    assert auth.calls == ["alice"]


def test_a_refreshed_token_replaces_the_cached_client(monkeypatch):
    made, closed = [], []

    class Client:
        def __init__(self, config):
            self.config = config
            made.append(self)

        def close(self):
            closed.append(self)

    monkeypatch.setattr(clients, "_clients", {})
    base = {"bootstrap.servers": "h:1", "security.protocol": "SASL_PLAINTEXT"}
    first = clients._cached("consumer", {**base, "sasl.token": "T1"}, Client)
    assert clients._cached("consumer", {**base, "sasl.token": "T1"}, Client) is first
    second = clients._cached("consumer", {**base, "sasl.token": "T2"}, Client)
    assert second is not first and closed == [first] and clients.cached_client_count() == 1


# ---- fail fast on a topic the query may not describe -------------------------------------------------


@pytest.mark.parametrize("require_existing", [True, False])
def test_forbidden_topic_fails_the_snapshot_at_once(require_existing):
    admin = FakeAdmin(forbidden={"b"})
    with pytest.raises(TopicAuthorizationFailedError, match="not authorized to describe topic"):
        lookups._take_snapshot_once(admin, parse_subscription({"subscribe": "b"}), require_existing=require_existing)


def test_a_missing_topic_is_still_missing():
    admin = FakeAdmin()
    with pytest.raises(UnknownTopicOrPartitionError, match="do not exist"):
        lookups._take_snapshot_once(admin, parse_subscription({"subscribe": "c"}), require_existing=True)
    assert lookups._take_snapshot_once(admin, parse_subscription({"subscribe": "c"}), require_existing=False) \
        == ({}, [])


def test_sink_without_describe_configs_cuts_by_the_producer_limit():
    class NoDescribeConfigs:
        def describe_configs(self, topic):
            raise TopicAuthorizationFailedError("User:alice is not authorized to DescribeConfigs Topic:a")

    assert writer._chunk_bytes_max(NoDescribeConfigs(), "a", {"max.request.size": "1000"}) == 1000


@pytest.mark.parametrize("streaming", [False, True])
def test_pysparks_task_payload_holds_the_token_not_the_password(auth, fake_cluster, streaming):
    """The bytes pyspark's planner worker sends for the tasks: the read function (which closes over the
    reader and the DataSource instance) and the planned partitions, made by pyspark's own code."""
    import io

    from pyspark.sql.datasource import CaseInsensitiveDict
    from pyspark.sql.worker.plan_data_source_read import write_read_func_and_partitions

    from ads_spark.spark.source.datasource import AdsDataSource
    from ads_spark.spark.source.schema import spark_schema

    source = AdsDataSource(options=CaseInsensitiveDict({**SASL, "subscribe": "a"}))
    made = source.streamReader(spark_schema(False)) if streaming else source.reader(spark_schema(False))
    out = io.BytesIO()
    write_read_func_and_partitions(out, reader=made, data_source=source, schema=spark_schema(False),
                                   max_arrow_batch_size=1000, binary_as_bytes=True)
    payload = out.getvalue()
    if streaming:  # stream partitions are planned per micro-batch by the planner process
        start = {"version": 1, "topics": {"a": {"id": "id-a", "offsets": {"0": 0}}}}
        end = {"version": 1, "topics": {"a": {"id": "id-a", "offsets": {"0": 5}}}}
        payload += pickle.dumps(made.partitions(start, end))
    assert PASSWORD.encode() not in payload and b"TOKEN-1" in payload
