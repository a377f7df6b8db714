"""Sink options and input columns: clear errors, casting, defaults; writers pickle."""

import pickle

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DoubleType,
    IntegerType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ads_spark.errors import InvalidConfigError, InvalidRequestError
from ads_spark.protocol.records import PRODUCE_SCHEMA
from ads_spark.spark.sink.options import check_input_schema, parse_sink_options, to_produce_rows
from ads_spark.spark.sink.writer import AdsBatchWriter, AdsStreamWriter, WriteTaskIdentity, producer_config_for

BASE = {"ads.bootstrap.servers": "127.0.0.1:9092"}


def schema(**columns):
    return StructType([StructField(name, kind) for name, kind in columns.items()])


def test_defaults_acks_all_and_passthrough():
    o = parse_sink_options({**BASE, "topic": "out", "ads.linger.ms": "5"})
    assert o.client_config == {"bootstrap.servers": "127.0.0.1:9092", "acks": "all", "enable.idempotence": "true",
                               "linger.ms": "5"}
    assert o.topic == "out"
    assert parse_sink_options({**BASE, "ads.acks": "1"}).client_config["acks"] == "1"
    with pytest.raises(InvalidConfigError, match="'ads.acks' must be 0, 1 or all"):
        parse_sink_options({**BASE, "ads.acks": "2"})
    with pytest.raises(InvalidConfigError, match="'ads.bootstrap.servers' is required"):
        parse_sink_options({"topic": "x"})


def test_schema_errors_name_the_column():
    with_topic = parse_sink_options({**BASE, "topic": "out"})
    with pytest.raises(InvalidConfigError, match="needs a 'value' column"):
        check_input_schema(schema(key=BinaryType()), with_topic)
    with pytest.raises(InvalidConfigError, match="column 'value' must be binary or string, got double"):
        check_input_schema(schema(value=DoubleType()), with_topic)
    with pytest.raises(InvalidConfigError, match="column 'partition' must be int"):
        check_input_schema(schema(value=StringType(), partition=StringType()), with_topic)
    with pytest.raises(InvalidConfigError, match="column 'headers' must be array<struct<key: string"):
        check_input_schema(schema(value=StringType(), headers=ArrayType(StringType())), with_topic)
    with pytest.raises(InvalidConfigError, match="no topic to write to"):
        check_input_schema(schema(value=StringType()), parse_sink_options(BASE))
    check_input_schema(schema(value=StringType(), topic=StringType()), parse_sink_options(BASE))
    check_input_schema(schema(value=BinaryType(), key=StringType(), partition=IntegerType(),
                              timestamp=TimestampType(), extra=DoubleType()), with_topic)


def test_batch_conversion_casts_strings_and_keeps_timestamps():
    header_type = pa.list_(pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())])))
    batch = pa.RecordBatch.from_pydict({
        "value": pa.array(["a", "b"]),
        "key": pa.array(["k", None]),
        "headers": pa.array([[{"key": "h", "value": b"1"}], None], header_type),
        "timestamp": pa.array([1_000_000, None], pa.timestamp("us", tz="UTC")),
        "partition": pa.array([1, None], pa.int32()),
        "topic": pa.array(["x", "y"]),
    })
    rows = to_produce_rows(batch, parse_sink_options(BASE))
    assert rows.records.schema.equals(PRODUCE_SCHEMA)
    assert rows.records.column("value").to_pylist() == [b"a", b"b"]
    assert rows.records.column("key").to_pylist() == [b"k", None]
    assert rows.records.column("timestamp")[0].value == 1000 and rows.records.column("timestamp")[1].is_valid
    assert rows.topics.to_pylist() == ["x", "y"] and rows.partitions.to_pylist() == [1, None]
    overridden = to_produce_rows(batch, parse_sink_options({**BASE, "topic": "forced"}))
    assert overridden.topics is None


def test_null_topic_and_null_header_key_fail():
    batch = pa.RecordBatch.from_pydict({"value": pa.array([b"a"]), "topic": pa.array([None], pa.string())})
    with pytest.raises(InvalidRequestError, match="a record has no topic"):
        to_produce_rows(batch, parse_sink_options(BASE))
    header_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    batch = pa.RecordBatch.from_pydict({"value": pa.array([b"a"]),
                                        "headers": pa.array([[{"key": None, "value": b"1"}]], header_type)})
    with pytest.raises(InvalidRequestError, match="null key"):
        to_produce_rows(batch, parse_sink_options({**BASE, "topic": "t"}))


def test_overwrite_points_to_append_and_writers_pickle():
    df_schema = schema(value=StringType())
    with pytest.raises(InvalidConfigError, match=r"mode\('append'\)"):
        AdsBatchWriter.create({**BASE, "topic": "t"}, df_schema, overwrite=True)
    for writer in (AdsBatchWriter.create({**BASE, "topic": "t"}, df_schema, False),
                   AdsStreamWriter.create({**BASE, "topic": "t"}, df_schema, True)):
        assert pickle.loads(pickle.dumps(writer)).options == writer.options


def test_identity_hook_outside_spark():
    identity = WriteTaskIdentity.current()
    assert identity == WriteTaskIdentity(None, None, 0, 0)
    options = parse_sink_options({**BASE, "topic": "t"})
    assert producer_config_for(options, identity) == options.client_config
