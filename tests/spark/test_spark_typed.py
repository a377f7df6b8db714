"""format("ads") on typed topics (issue #26): the schema from the topic, projection that moves only the asked
columns (the brokers' byte counter), the filter option and Spark's pushed filters (explain() shows them,
results equal the unpushed read), and a streaming query across an added column and across a change it
cannot read (fails naming the versions, works after a restart). A real 3-broker cluster, the shared
local SparkSession, results compared with chispa."""

from __future__ import annotations

import contextlib
import io
import uuid

import pyarrow as pa
import pytest
from chispa import assert_df_equality

from ads_spark.client import Admin, Producer
from tests.fixtures.cluster import metric_values
from tests.fixtures.spark import reader

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

DDL = "order_id BIGINT NOT NULL, region STRING, amount DOUBLE"
ROWS = 400


def produce_rows(bootstrap: str, topic: str, first: int, count: int, batches: int = 4, **extra) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    try:
        step = count // batches
        futures = []
        for start in range(first, first + count, step):
            ids = list(range(start, start + step))
            columns = {"order_id": ids, "region": [f"r{i % 4}" for i in ids], "amount": [i * 0.25 for i in ids]}
            columns.update({name: make(ids) for name, make in extra.items()})
            futures.append(producer.produce_arrow(topic, pa.table(columns), partition=0))
        for future in futures:
            future.result(30)
    finally:
        producer.close()


@pytest.fixture(scope="module")
def orders(cluster):
    """A typed topic of ROWS rows in 4 batches, with statistics on order_id."""
    topic = f"typed-{uuid.uuid4().hex[:8]}"
    admin = Admin({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topic(topic, 1, 3, schema=DDL, config={"schema.statistics.columns": "order_id"})
    admin.close()
    produce_rows(cluster.bootstrap_servers, topic, 0, ROWS)
    return topic


def expected(spark, first: int, count: int, columns=("order_id", "region", "amount")):
    rows = [(i, f"r{i % 4}", i * 0.25) for i in range(first, first + count)]
    frame = spark.createDataFrame(rows, "order_id bigint, region string, amount double")
    return frame.select(*columns)


def test_a_batch_read_has_the_topic_columns_then_the_kafka_ones(spark, cluster, orders):
    df = reader(spark, cluster.bootstrap_servers, subscribe=orders)
    assert df.schema.simpleString() == ("struct<order_id:bigint,region:string,amount:double,key:binary,"
                                        "topic:string,partition:int,offset:bigint,timestamp:timestamp,"
                                        "timestampType:int>")
    assert not df.schema["order_id"].nullable
    assert_df_equality(df.select("order_id", "region", "amount"), expected(spark, 0, ROWS),
                       ignore_row_order=True, ignore_nullable=True)
    assert sorted(r.offset for r in df.select("offset").collect()) == list(range(ROWS))


def test_projection_moves_only_the_asked_columns(spark, cluster, orders):
    def consumer_bytes() -> float:
        return sum(metric_values(cluster, 'ads_fetch_bytes_total{reader="consumer"}').values())

    over_flight = {"ads.local.reads": "false"}  # the brokers count what they send; local reads send nothing
    before = consumer_bytes()
    full = reader(spark, cluster.bootstrap_servers, subscribe=orders, **over_flight).collect()
    middle = consumer_bytes()
    by_option = reader(spark, cluster.bootstrap_servers, subscribe=orders, columns="region", **over_flight)
    assert by_option.columns == ["region", "key", "topic", "partition", "offset", "timestamp", "timestampType"]
    regions = by_option.collect()
    after = consumer_bytes()
    assert len(full) == len(regions) == ROWS
    assert 0 < after - middle < 0.8 * (middle - before)
    by_schema = (spark.read.format("ads").option("ads.bootstrap.servers", cluster.bootstrap_servers)
                 .option("subscribe", orders).schema("amount double, offset bigint").load())
    assert_df_equality(by_schema.select("amount"), expected(spark, 0, ROWS, ["amount"]), ignore_row_order=True,
                       ignore_nullable=True)
    with pytest.raises(Exception, match="must be a subset of topic"):
        (spark.read.format("ads").option("ads.bootstrap.servers", cluster.bootstrap_servers)
         .option("subscribe", orders).schema("amount string").load().collect())


def test_the_filter_option_keeps_exactly_the_matching_rows(spark, cluster, orders):
    df = reader(spark, cluster.bootstrap_servers, subscribe=orders, filter="order_id >= 360 AND region = 'r1'")
    want = expected(spark, 0, ROWS).where("order_id >= 360 AND region = 'r1'")
    assert_df_equality(df.select("order_id", "region", "amount"), want, ignore_row_order=True, ignore_nullable=True)
    with pytest.raises(Exception, match="column 'nope' is not a column"):
        reader(spark, cluster.bootstrap_servers, subscribe=orders, filter="nope = 1").collect()


def test_pushed_filters_show_in_explain_and_equal_the_unpushed_read(spark, cluster, orders):
    condition = "order_id >= 360 AND region IN ('r1', 'r2')"
    unpushed = reader(spark, cluster.bootstrap_servers, subscribe=orders).where(condition)
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        pushed = reader(spark, cluster.bootstrap_servers, subscribe=orders, pushFilters="true").where(condition)
        shown = io.StringIO()
        with contextlib.redirect_stdout(shown):
            pushed.explain("formatted")
        pushed_line = next(line for line in shown.getvalue().splitlines() if line.startswith("PushedFilters"))
        assert "GreaterThanOrEqual(order_id,360)" in pushed_line and "In(region" in pushed_line, shown.getvalue()
        assert_df_equality(pushed.select("order_id", "region", "amount"),
                           unpushed.select("order_id", "region", "amount"), ignore_row_order=True)
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")
    with pytest.raises(Exception, match="DATA_SOURCE_PUSHDOWN_DISABLED|filterPushdown"):
        reader(spark, cluster.bootstrap_servers, subscribe=orders, pushFilters="true").where(condition).collect()


def test_a_stream_reads_added_columns_after_a_restart_and_fails_by_name_on_a_change_it_cannot_read(
        spark, cluster, tmp_path):
    bootstrap = cluster.bootstrap_servers
    topic = f"typed-{uuid.uuid4().hex[:8]}"
    admin = Admin({"bootstrap.servers": bootstrap})
    admin.create_topic(topic, 1, 3, schema=DDL, config={"schema.compatibility": "NONE"})
    produce_rows(bootstrap, topic, 0, 40, batches=2)
    checkpoint = str(tmp_path / "checkpoint")

    def start(df, seen: list):
        # foreachBatch (not the memory sink) so that a restart resumes from the checkpoint.
        return df.writeStream.foreachBatch(lambda batch, _id: seen.extend(batch.collect())) \
            .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()

    def run_once():
        df = spark.readStream.format("ads").option("ads.bootstrap.servers", bootstrap).option("subscribe", topic) \
            .option("startingOffsets", "earliest").load()
        seen: list = []
        query = start(df, seen)
        try:
            query.awaitTermination(120)
        finally:
            query.stop()
        return df.columns, seen

    columns, seen = run_once()
    assert "note" not in columns and len(seen) == 40
    admin.register_schema(topic, DDL + ", note STRING")  # an added nullable column
    produce_rows(bootstrap, topic, 40, 20, batches=1, note=lambda ids: [f"n{i}" for i in ids])
    columns, seen = run_once()
    assert "note" in columns and sorted((r.order_id, r.note) for r in seen) == [(i, f"n{i}") for i in range(40, 60)]

    # A change the running query's version cannot read: region becomes a number (NONE allows it), registered
    # after the stream was planned (at version 2).
    planned_at_v2 = spark.readStream.format("ads").option("ads.bootstrap.servers", bootstrap) \
        .option("subscribe", topic).load()
    admin.register_schema(topic, "order_id BIGINT NOT NULL, region BIGINT, amount DOUBLE, note STRING")
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce_arrow(topic, pa.table({"order_id": [60], "region": [7], "amount": [1.0], "note": ["x"]}),
                           partition=0, schema_version=3).result(30)
    producer.close()
    query = start(planned_at_v2, [])
    with pytest.raises(Exception, match=r"at offset 60 is in schema version 3, which a reader of version 2 "
                                        r"cannot read.*restart"):
        query.awaitTermination(120)
    query.stop()
    columns, seen = run_once()  # restarted: planned at version 3, it reads on from the checkpoint
    assert [(r.order_id, r.region) for r in seen] == [(60, 7)]
    admin.close()


# ---- writes ---------------------------------------------------------------------------------------------


def test_a_write_matches_columns_by_name_refuses_a_mismatch_before_any_task_and_merges_when_asked(
        spark, cluster):
    bootstrap = cluster.bootstrap_servers
    topic = f"typed-{uuid.uuid4().hex[:8]}"
    admin = Admin({"bootstrap.servers": bootstrap})
    admin.create_topic(topic, 2, 3, schema=DDL)
    # Columns in another order, an INT where the topic has BIGINT, and a key to route by.
    df = spark.createDataFrame([(f"r{i % 4}", i, i * 0.25, f"k{i}") for i in range(100)],
                               "region string, order_id int, amount double, key string")
    df.write.format("ads").mode("append").option("ads.bootstrap.servers", bootstrap).option("topic", topic).save()
    back = reader(spark, bootstrap, subscribe=topic)
    assert_df_equality(back.select("order_id", "region", "amount"), expected(spark, 0, 100), ignore_row_order=True,
                       ignore_nullable=True)

    extra = df.withColumn("note", df.region)
    with pytest.raises(Exception, match=r"column\(s\) \['note'\] are not in topic"):
        extra.write.format("ads").mode("append").option("ads.bootstrap.servers", bootstrap) \
            .option("topic", topic).save()
    wrong = spark.createDataFrame([("x", 1.5)], "region string, order_id double")
    with pytest.raises(Exception, match="column 'order_id' is double, the topic's is int64"):
        wrong.write.format("ads").mode("append").option("ads.bootstrap.servers", bootstrap) \
            .option("topic", topic).save()
    assert reader(spark, bootstrap, subscribe=topic).count() == 100  # nothing of either was written

    extra.write.format("ads").mode("append").option("ads.bootstrap.servers", bootstrap).option("topic", topic) \
        .option("mergeSchema", "true").save()
    assert admin.describe_schema(topic)["latest"] == 2
    across_versions = reader(spark, bootstrap, subscribe=topic)  # version 1 rows read as version 2: note null
    assert across_versions.count() == 200 and across_versions.where("note IS NULL").count() == 100
    assert_df_equality(across_versions.where("note IS NOT NULL").select("order_id", "region", "amount"),
                       expected(spark, 0, 100), ignore_row_order=True, ignore_nullable=True)
    admin.close()


def test_a_stream_writes_a_typed_topic_it_creates(spark, cluster, orders, checkpoint_dir):
    bootstrap = cluster.bootstrap_servers
    target = f"typed-{uuid.uuid4().hex[:8]}"
    source = spark.readStream.format("ads").option("ads.bootstrap.servers", bootstrap).option("subscribe", orders) \
        .option("startingOffsets", "earliest").load().select("order_id", "region", "amount")
    query = source.writeStream.format("ads").option("ads.bootstrap.servers", bootstrap).option("topic", target) \
        .option("createTypedTopic", "true").option("checkpointLocation", checkpoint_dir) \
        .trigger(availableNow=True).start()
    query.awaitTermination(120)
    query.stop()
    copied = reader(spark, bootstrap, subscribe=target)
    assert_df_equality(copied.select("order_id", "region", "amount"), expected(spark, 0, ROWS),
                       ignore_row_order=True, ignore_nullable=True)
