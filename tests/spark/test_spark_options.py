"""format("ads") through a real SparkSession: the name resolves with no registration, and bad
options fail with this package's messages (which proves our code ran). No broker needed."""

import pytest

pytestmark = pytest.mark.spark

BOOTSTRAP = {"ads.bootstrap.servers": "127.0.0.1:1"}  # never contacted: every case fails before I/O


def error_text(excinfo) -> str:
    return str(excinfo.value)


def test_format_name_resolves_and_missing_bootstrap_is_our_error(spark):
    with pytest.raises(Exception) as excinfo:
        spark.read.format("ads").option("subscribe", "t").load()
    assert "option 'ads.bootstrap.servers' is required" in error_text(excinfo)


def test_schema_at_load_time(spark):
    df = spark.read.format("ads").options(**BOOTSTRAP, subscribe="t").load()
    assert df.schema.simpleString() == ("struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
                                        "timestamp:timestamp,timestampType:int>")
    with_headers = spark.readStream.format("ads").options(**BOOTSTRAP, subscribe="t", includeHeaders="true").load()
    assert with_headers.columns[-1] == "headers" and with_headers.isStreaming


def test_subscription_error_at_load(spark):
    with pytest.raises(Exception) as excinfo:
        spark.read.format("ads").options(**BOOTSTRAP, subscribe="t", assign='{"t":[0]}').load()
    assert "exactly one of the options 'subscribe', 'subscribePattern' or 'assign'" in error_text(excinfo)


def test_batch_only_rule_when_the_query_runs(spark):
    df = spark.read.format("ads").options(**BOOTSTRAP, subscribe="t", startingOffsets="latest").load()
    with pytest.raises(Exception) as excinfo:
        df.collect()
    assert "startingOffsets='latest' is not allowed in a batch query" in error_text(excinfo)


def test_stream_rejects_ending_offsets_with_our_message(spark, checkpoint_dir):
    df = spark.readStream.format("ads").options(**BOOTSTRAP, subscribe="t", endingOffsets="latest").load()
    query = df.writeStream.format("noop").option("checkpointLocation", checkpoint_dir).start()
    with pytest.raises(Exception) as excinfo:
        query.awaitTermination(60)
    assert "'endingOffsets' is for batch queries only" in error_text(excinfo)


def test_user_schema_rejected(spark):
    df = spark.read.format("ads").schema("value string").options(**BOOTSTRAP, subscribe="t").load()
    with pytest.raises(Exception) as excinfo:
        df.collect()
    assert "fixed schema" in error_text(excinfo)


def test_batch_write_modes(spark):
    df = spark.range(2).selectExpr("CAST(id AS STRING) AS value")
    with pytest.raises(Exception) as excinfo:
        df.write.format("ads").options(**BOOTSTRAP, topic="t").save()
    assert "Append" in error_text(excinfo)  # Spark's own check: the default mode is not allowed
    with pytest.raises(Exception) as excinfo:
        df.write.format("ads").mode("overwrite").options(**BOOTSTRAP, topic="t").save()
    assert "mode('append')" in error_text(excinfo)


def test_write_column_errors(spark):
    no_value = spark.range(1).selectExpr("CAST(id AS STRING) AS body")
    with pytest.raises(Exception) as excinfo:
        no_value.write.format("ads").mode("append").options(**BOOTSTRAP, topic="t").save()
    assert "needs a 'value' column" in error_text(excinfo)
    no_topic = spark.range(1).selectExpr("CAST(id AS STRING) AS value")
    with pytest.raises(Exception) as excinfo:
        no_topic.write.format("ads").mode("append").options(**BOOTSTRAP).save()
    assert "no topic to write to" in error_text(excinfo)


def test_interceptors_and_a_bad_timestamp_strategy_refused_at_load(spark):
    with pytest.raises(Exception) as excinfo:
        spark.read.format("ads").options(**BOOTSTRAP, subscribe="t", **{"ads.interceptor.classes": "I"}).load()
    assert "option 'ads.interceptor.classes' is not supported" in error_text(excinfo)
    with pytest.raises(Exception) as excinfo:
        spark.readStream.format("ads").options(**BOOTSTRAP, subscribe="t",
                                               startingOffsetsByTimestampStrategy="earliest").load()
    assert "'startingOffsetsByTimestampStrategy' must be 'error' or 'latest'" in error_text(excinfo)


def test_an_ads_option_the_producer_does_not_read_is_refused_when_the_write_starts(spark):
    """Refused by the driver's option check, in its words, not by a Producer built in a task."""
    df = spark.range(1).selectExpr("CAST(id AS STRING) AS value")
    with pytest.raises(Exception) as excinfo:
        df.write.format("ads").mode("append").options(**BOOTSTRAP, topic="t", **{"ads.lingr.ms": "5"}).save()
    assert "option 'ads.lingr.ms' is not a producer setting" in error_text(excinfo)


def test_an_ads_option_the_consumer_does_not_read_is_refused_at_load(spark):
    """Refused by the driver's option check at load(), in its words, not by a Consumer built in a task."""
    with pytest.raises(Exception) as excinfo:
        spark.read.format("ads").options(**BOOTSTRAP, subscribe="t", **{"ads.max.poll.record": "5"}).load()
    assert "option 'ads.max.poll.record' is not a consumer setting" in error_text(excinfo)
