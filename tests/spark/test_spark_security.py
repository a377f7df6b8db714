"""format("ads") against a broker with a SASL_PLAINTEXT listener and the ACL authorizer (issue #23 item 8).

One broker: a PLAINTEXT listener (the inter-broker one; ``User:ANONYMOUS`` is a super user there, so the
test sets up users, topics, ACLs and data through it) and a SASL_PLAINTEXT listener the queries use as
``User:alice``, who may Read and Describe topic A and Write and Describe topic C (what Kafka's
``--consumer`` and ``--producer`` grant, without DescribeConfigs). A batch and a streaming read of A and a
batch write to C work; a read of B and a streaming write to A (no Write) fail at once with the
authorization error; the password shows in no plan, explain output, error, log line or broker log.
Tokens live ``TOKEN_LIFETIME_MS``: a stream reading topic D runs past two lifetimes.
"""

from __future__ import annotations

import logging
import time
import uuid
from types import SimpleNamespace

import pytest

from ads_spark.cluster import LocalCluster, free_port
from tests.fixtures.spark import produce

pytestmark = pytest.mark.spark

PASSWORD = f"pw-{uuid.uuid4().hex}"  # unique, so finding it anywhere is a leak
FAIL_FAST_S = 10.0  # a refused read must fail within this (no retry until a timeout)
STREAM_FAIL_FAST_S = 30.0  # a refused streaming write: query start-up plus one micro-batch on a busy machine
STREAM_WAIT_S = 120.0
TOKEN_LIFETIME_MS = 15_000  # short, so one test can outlive two tokens (the others finish well within one)


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """The cluster, its two bootstrap addresses and topics A (alice may read) and B (she may not)."""
    cluster = LocalCluster(tmp_path_factory.mktemp("ads-spark-sasl"))
    try:
        cluster.up(brokers=1)
        plain = cluster.bootstrap_servers
        sasl = f"127.0.0.1:{free_port()}"
        cluster.stop_broker(1)  # restarted with a second listener and the authorizer on
        cluster.state["overrides"] = [
            f"listeners=PLAINTEXT://{plain},SASL_PLAINTEXT://{sasl}", "inter.broker.listener.name=PLAINTEXT",
            "authorizer.class.name=kafka.security.authorizer.AclAuthorizer", "super.users=User:ANONYMOUS",
            "credential.hash.iterations=4096", f"authentication.token.lifetime.ms={TOKEN_LIFETIME_MS}"]
        cluster.start_broker(1)
        yield SimpleNamespace(cluster=cluster, plain=plain, sasl=sasl, **_set_up(plain))
    finally:
        cluster.down()


def _set_up(plain: str) -> dict:
    from ads_spark.client import Admin
    from ads_spark.security.authorizer import AclBinding

    admin = Admin({"bootstrap.servers": plain})
    try:
        topic_a, topic_b, topic_c, topic_d = (f"{kind}-{uuid.uuid4().hex[:8]}" for kind in "abcd")
        for name in (topic_a, topic_b, topic_c, topic_d):
            admin.create_topic(name, partitions=2, replication_factor=1)
        admin.upsert_user("alice", PASSWORD)
        admin.create_acls([AclBinding("Topic", topic, "LITERAL", "User:alice", "*", operation, "ALLOW")
                           for topic, operation in ((topic_a, "Read"), (topic_a, "Describe"), (topic_d, "Read"),
                                                    (topic_c, "Write"), (topic_c, "Describe"))])
    finally:
        admin.close()
    produce(plain, topic_a, [(i % 2, None, f"v{i}".encode(), None) for i in range(10)])
    produce(plain, topic_b, [(0, None, b"secret-data", None)])
    return {"topic_a": topic_a, "topic_b": topic_b, "topic_c": topic_c, "topic_d": topic_d}


def sasl_options(secured, **extra) -> dict:
    return {"ads.bootstrap.servers": secured.sasl, "ads.security.protocol": "SASL_PLAINTEXT",
            "ads.sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                    f'username="alice" password="{PASSWORD}";', **extra}


def assert_no_password(*texts: str) -> None:
    for text in texts:
        assert PASSWORD not in text


def broker_logs(secured) -> str:
    return "".join(path.read_text(errors="replace") for path in secured.cluster.dir.glob("*.log"))


def test_batch_read_of_a_permitted_topic(spark, secured, caplog, capsys):
    caplog.set_level(logging.DEBUG, logger="ads")
    df = spark.read.format("ads").options(**sasl_options(secured, subscribe=secured.topic_a)).load()
    values = sorted(row.value.decode() for row in df.select("value").collect())
    assert values == sorted(f"v{i}" for i in range(10))
    df.explain(extended=True)
    explained = capsys.readouterr().out
    assert "BatchScan" in explained or "Scan" in explained
    plans = df._jdf.queryExecution().toString() + df._jdf.queryExecution().logical().toString()
    assert_no_password(explained, plans, caplog.text, broker_logs(secured))


def test_read_of_a_forbidden_topic_fails_fast(spark, secured, caplog):
    caplog.set_level(logging.DEBUG, logger="ads")
    df = spark.read.format("ads").options(**sasl_options(secured, subscribe=secured.topic_b)).load()
    started = time.monotonic()
    with pytest.raises(Exception) as excinfo:
        df.collect()
    elapsed = time.monotonic() - started
    assert "TOPIC_AUTHORIZATION_FAILED" in str(excinfo.value)
    assert elapsed < FAIL_FAST_S, f"took {elapsed:.1f} s"
    assert_no_password(str(excinfo.value), caplog.text)


def test_wrong_password_fails_fast_without_echoing_it(spark, secured):
    options = {**sasl_options(secured, subscribe=secured.topic_a),
               "ads.sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                       'username="alice" password="not-the-password";'}
    started = time.monotonic()
    with pytest.raises(Exception) as excinfo:
        spark.read.format("ads").options(**options).load().collect()
    assert "SASL_AUTHENTICATION_FAILED" in str(excinfo.value) and time.monotonic() - started < FAIL_FAST_S
    assert "not-the-password" not in str(excinfo.value)


def test_stream_read_of_a_permitted_topic(spark, secured, checkpoint_dir, capsys):
    table = f"sasl_{uuid.uuid4().hex[:8]}"
    stream = spark.readStream.format("ads").options(**sasl_options(secured, subscribe=secured.topic_a,
                                                                   startingOffsets="earliest")).load()
    query = (stream.selectExpr("CAST(value AS STRING) AS value").writeStream.format("memory").queryName(table)
             .option("checkpointLocation", checkpoint_dir).trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(STREAM_WAIT_S)
        assert query.exception() is None
        assert sorted(r.value for r in spark.sql(f"SELECT value FROM {table}").collect()) == \
            sorted(f"v{i}" for i in range(10))
        query.explain(extended=True)
        assert_no_password(capsys.readouterr().out, str(query.lastProgress), str(query.recentProgress))
    finally:
        query.stop()


def test_stream_write_without_write_acl_fails_fast(spark, secured, checkpoint_dir):
    rows = spark.readStream.format("rate").option("rowsPerSecond", "5").load()
    started = time.monotonic()
    query = (rows.selectExpr("CAST(value AS STRING) AS value").writeStream.format("ads")
             .options(**sasl_options(secured, topic=secured.topic_a))
             .option("checkpointLocation", checkpoint_dir).start())
    try:
        with pytest.raises(Exception) as excinfo:
            query.awaitTermination(STREAM_WAIT_S)
        elapsed = time.monotonic() - started
        assert "TOPIC_AUTHORIZATION_FAILED" in str(excinfo.value) and "to Write" in str(excinfo.value)
        assert elapsed < STREAM_FAIL_FAST_S, f"took {elapsed:.1f} s"
        assert_no_password(str(excinfo.value), broker_logs(secured))
    finally:
        query.stop()


def test_batch_write_with_write_and_describe_only(spark, secured):
    from ads_spark.client import Admin, TopicPartition

    df = spark.range(20).selectExpr("CAST(id AS STRING) AS value")
    df.write.format("ads").mode("append").options(**sasl_options(secured, topic=secured.topic_c)).save()
    admin = Admin({"bootstrap.servers": secured.plain})
    try:
        ends = admin.list_offsets([TopicPartition(secured.topic_c, p) for p in (0, 1)], "latest")
    finally:
        admin.close()
    assert sum(ends.values()) == 20


def test_a_stream_outlives_its_tokens(spark, secured, checkpoint_dir):
    """The driver renews the token past half its life while planning micro-batches and ships the new one
    with each batch's partitions; executors' cached clients switch to it. Reads on for 2.5 lifetimes."""
    table = f"sasl_{uuid.uuid4().hex[:8]}"
    stream = spark.readStream.format("ads").options(**sasl_options(secured, subscribe=secured.topic_d,
                                                                   startingOffsets="earliest")).load()
    query = (stream.selectExpr("CAST(value AS STRING) AS value").writeStream.format("memory").queryName(table)
             .option("checkpointLocation", checkpoint_dir).trigger(processingTime="1 second").start())
    sent: list[str] = []
    try:
        end = time.monotonic() + 2.5 * TOKEN_LIFETIME_MS / 1000
        while time.monotonic() < end and query.isActive:
            value = f"d{len(sent)}"
            produce(secured.plain, secured.topic_d, [(len(sent) % 2, None, value.encode(), None)])
            sent.append(value)
            time.sleep(1.0)
        deadline = time.monotonic() + 60
        seen: list[str] = []
        while time.monotonic() < deadline and query.isActive and len(seen) < len(sent):
            seen = [r.value for r in spark.sql(f"SELECT value FROM {table}").collect()]
            time.sleep(0.5)
        assert query.exception() is None and query.isActive
        assert sorted(seen) == sorted(sent)
    finally:
        query.stop()
