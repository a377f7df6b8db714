"""The source's schema and the vectorised conversion of stored records into it; readers pickle."""

import pickle

import pyarrow as pa
import pytest
from pyspark.sql.types import StringType, StructField, StructType

from ads_spark.errors import InvalidConfigError
from ads_spark.protocol.records import RECORD_SCHEMA
from ads_spark.spark import clients
from ads_spark.spark.source.options import parse_source_options
from ads_spark.spark.source.reader import AdsBatchReader, AdsStreamReader
from ads_spark.spark.source.schema import arrow_schema, check_user_schema, spark_schema, to_spark_batches


def records(n=3, first_offset=40):
    return pa.table({
        "offset": pa.array(range(first_offset, first_offset + n), pa.int64()),
        "timestamp": pa.array([1_700_000_000_123 + i for i in range(n)], pa.timestamp("ms")),
        "key": pa.array([b"k%d" % i if i % 2 else None for i in range(n)], pa.binary()),
        "value": pa.array([b"v%d" % i for i in range(n)], pa.binary()),
        "headers": pa.array([[{"key": "h", "value": b"x"}] if i == 0 else None for i in range(n)],
                            RECORD_SCHEMA.field("headers").type),
    }, schema=RECORD_SCHEMA)


def test_spark_schema_is_kafkas():
    assert spark_schema(False).simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int>")
    assert spark_schema(True).simpleString().endswith(",headers:array<struct<key:string,value:binary>>>")


@pytest.mark.parametrize("include_headers", [False, True])
def test_conversion_matches_the_arrow_schema_spark_expects(include_headers):
    batches = to_spark_batches(records(), "orders", 7, include_headers)
    table = pa.Table.from_batches(batches)
    assert table.schema.equals(arrow_schema(include_headers))
    assert table.column("topic").to_pylist() == ["orders"] * 3
    assert table.column("partition").to_pylist() == [7] * 3
    assert table.column("offset").to_pylist() == [40, 41, 42]
    assert table.column("timestampType").to_pylist() == [0, 0, 0]
    assert table.column("timestamp")[0].value == 1_700_000_000_123_000  # microseconds, UTC
    assert table.column("key").to_pylist() == [None, b"k1", None]
    if include_headers:
        assert table.column("headers").to_pylist()[0] == [{"key": "h", "value": b"x"}]


def test_records_without_headers_read_back_as_null_as_from_kafka():
    table = records().set_column(4, "headers", pa.array([[{"key": "h", "value": b"x"}], [], None],
                                                        RECORD_SCHEMA.field("headers").type))
    headers = pa.Table.from_batches(to_spark_batches(table, "orders", 0, True)).column("headers")
    assert headers.to_pylist() == [[{"key": "h", "value": b"x"}], None, None]


def test_empty_table_gives_no_batches():
    assert to_spark_batches(RECORD_SCHEMA.empty_table(), "t", 0, False) == []


def test_user_schema_rejected():
    check_user_schema(None, False)
    check_user_schema(spark_schema(True), True)
    with pytest.raises(InvalidConfigError, match="fixed schema"):
        check_user_schema(StructType([StructField("value", StringType())]), False)


def test_readers_pickle_without_clients():
    options = parse_source_options({"ads.bootstrap.servers": "h:1", "subscribe": "t"}, streaming=True)
    before = clients.cached_client_count()
    for reader in (AdsStreamReader(options), AdsBatchReader(parse_source_options(
            {"ads.bootstrap.servers": "h:1", "subscribe": "t"}, streaming=False))):
        copy = pickle.loads(pickle.dumps(reader))
        assert copy.options == reader.options
    assert clients.cached_client_count() == before
