"""Typed-topic inputs the fuzz run (ads_spark/chaos/fuzz_typed.py) found unrefused or refused untyped, checked on the
pure functions that now refuse them by name: a produce batch naming a column twice (a KeyError inside pyarrow, so
UNKNOWN_SERVER_ERROR), a typed batch of no rows (accepted), a schema id int() reads leniently (" 1", "+1", "1_0",
thousands of digits shown back whole), and read filters whose values the column cannot be compared with (accepted,
skipping nothing), and a request inside a fetch session carrying a typed read of its own (ignored: accepted)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from ads_spark.broker.rpc import server
from ads_spark.broker.typed_produce import conform_typed_batch, refuse_typed_batch
from ads_spark.errors import ErrorCode, InvalidRecordError, InvalidRequestError
from ads_spark.protocol import wire
from ads_spark.protocol.typed_records import SCHEMA_ID_KEY, projected_schema, schema_id_of, typed_record_schema
from ads_spark.schemas import ddl, types
from ads_spark.schemas.statistics import predicates_from_wire
from tests.fixtures.logs import produce_batch, values_for
from tests.fixtures.typed import V1, typed_batch

pytestmark = pytest.mark.timeout(30)


class OneVersion:
    """A SchemaCache of version 1 only."""

    def latest(self, topic, topic_id, at_least=0):
        return 1, V1

    def user_schema(self, topic, topic_id, version):
        return V1


def _conform(batch: pa.RecordBatch) -> pa.RecordBatch:
    return conform_typed_batch(batch, "orders", "id", OneVersion())


@pytest.mark.parametrize("name", ["order_id", "timestamp", "region"])
def test_a_column_named_twice_is_refused_by_name(name):
    good = typed_batch(1, [1, 2])
    twice = pa.RecordBatch.from_arrays([*good.columns, good.column(name)],
                                       schema=pa.schema([*good.schema, good.schema.field(name)], good.schema.metadata))
    with pytest.raises(InvalidRecordError, match=rf"column\(s\) \['{name}'\] appear more than once"):
        _conform(twice)


def test_a_typed_batch_without_rows_is_refused():
    with pytest.raises(InvalidRequestError, match="empty record batch"):
        _conform(typed_batch(1, [1]).slice(0, 0))


@pytest.mark.parametrize("raw", [b" 1", b"+1", b"1_0", b"1\n", b"\xd9\xa1", b"9" * 5000, b"0x1"])
def test_a_schema_id_is_decimal_digits_only_and_shown_short(raw):
    schema = typed_batch(1, [1]).schema.with_metadata({SCHEMA_ID_KEY: raw})
    with pytest.raises(InvalidRequestError, match="is not a version number") as refused:
        schema_id_of(schema)
    assert len(str(refused.value)) < 200
    with pytest.raises(InvalidRecordError, match="orders.*is not a version number.*nothing was stored"):
        _conform(typed_batch(1, [1]).replace_schema_metadata({SCHEMA_ID_KEY: raw}))


def test_a_batch_naming_a_version_is_refused_by_a_kafka_shaped_topic():
    plain = produce_batch(values_for(0, 1))
    refuse_typed_batch(plain, "events")  # a Kafka-shaped batch: fine
    with pytest.raises(InvalidRecordError, match="'events' is Kafka-shaped.*schema version 1"):
        refuse_typed_batch(plain.replace_schema_metadata({SCHEMA_ID_KEY: b"1"}), "events")
    with pytest.raises(InvalidRequestError, match="not a version number"):
        refuse_typed_batch(plain.replace_schema_metadata({SCHEMA_ID_KEY: b"x"}), "events")


USERS = types.normalise(ddl.parse("id BIGINT NOT NULL, name STRING, flag BOOLEAN, day DATE, at TIMESTAMP, "
                                  "raw BINARY, amount DECIMAL(10, 2), ratio DOUBLE"))


@pytest.mark.parametrize("item", [
    {"kind": "=", "column": "id", "value": "abc"}, {"kind": "=", "column": "id", "value": True},
    {"kind": "=", "column": "id"}, {"kind": ">", "column": "id", "value": None},
    {"kind": "in", "column": "id", "value": ["a", 1]}, {"kind": "=", "column": "name", "value": 1},
    {"kind": "=", "column": "name", "value": {"b64": "eA=="}}, {"kind": "=", "column": "flag", "value": 1},
    {"kind": "=", "column": "day", "value": {"text": "2024-01-01T00:00:00"}},
    {"kind": "=", "column": "day", "value": "2024-01-01"}, {"kind": "<", "column": "at", "value": 5},
    {"kind": "=", "column": "raw", "value": "x"}, {"kind": "starts_with", "column": "name", "value": 1},
    {"kind": "is_null", "column": "id", "value": 5}, {"kind": "is_not_null", "column": "name", "value": "x"},
])
def test_a_filter_value_the_column_cannot_be_compared_with_is_refused(item):
    with pytest.raises(InvalidRequestError, match=f"filter '{item['kind']}' on column '{item['column']}'"):
        predicates_from_wire([item], USERS)


def test_filters_of_the_columns_types_still_parse():
    items = [{"kind": ">=", "column": "id", "value": 1}, {"kind": "<", "column": "id", "value": 2.5},
             {"kind": "in", "column": "id", "value": [1, None]}, {"kind": "=", "column": "name", "value": "x"},
             {"kind": "starts_with", "column": "name", "value": "ab"}, {"kind": "=", "column": "flag", "value": True},
             {"kind": "=", "column": "day", "value": {"text": "2024-02-29"}},
             {"kind": "<", "column": "at", "value": {"text": "2024-01-01T00:00:00+00:00"}},
             {"kind": "=", "column": "raw", "value": {"b64": "eA=="}}, {"kind": "<=", "column": "amount", "value": 3},
             {"kind": "<=", "column": "amount", "value": {"text": "12.50"}}, {"kind": ">", "column": "ratio", "value": 1},
             {"kind": "is_null", "column": "name"}, {"kind": "is_not_null", "column": "id", "value": None}]
    assert [p.kind for p in predicates_from_wire(items, USERS)] == [item["kind"] for item in items]


class _Chunks:
    """A fetch session's reader: each request's metadata, then the end of the stream."""

    def __init__(self, requests: list[dict]):
        self._left = [type("Chunk", (), {"app_metadata": pa.py_buffer(wire.dumps(r)), "data": None})()
                      for r in requests]

    def read_chunk(self):
        if not self._left:
            raise StopIteration
        return self._left.pop(0)


class _Written:
    def __init__(self):
        self.metadata: list[dict] = []

    def write_metadata(self, buffer):
        self.metadata.append(wire.loads(buffer, "answer"))

    def write_with_metadata(self, batch, buffer):
        self.metadata.append(wire.loads(buffer, "answer"))


def test_a_request_inside_a_fetch_session_may_not_carry_its_own_typed_read():
    """The session reads as its command said; a request's own ``typed`` was ignored, so a read of another topic
    or version looked accepted. It is refused in-stream, and the session goes on."""
    fetched = []

    class Broker:
        security = None

        def handle_fetch(self, request, replica_messages, typed):
            fetched.append(request)
            return []

    request = {"type": "fetch", "partitions": [{"topic": "orders", "partition": 0, "fetch_offset": 0}]}
    written = _Written()
    server._serve_fetch_session(Broker(), _Chunks([{**request, "typed": {"topic": "other", "version": 1}}, request]),
                                written, False)
    assert written.metadata[0]["error_code"] == int(ErrorCode.INVALID_REQUEST)
    assert "may not carry 'typed'" in written.metadata[0]["message"] and written.metadata[0]["end"] is True
    assert fetched == [request]  # only the second request reached the broker, and was answered
    assert written.metadata[1] == {"end": True}


@pytest.mark.parametrize("name", ["c", "\u00e9\u00e9"])
def test_an_error_naming_thousands_of_columns_still_fits_grpc_metadata(name):
    """A typed read of 4,096 unknown columns was refused with a message listing them all: 35 KB of gRPC metadata,
    which the client dropped as RESOURCE_EXHAUSTED (no error code left). The message is cut, saying so."""
    stored = typed_record_schema(V1, 1)
    with pytest.raises(InvalidRequestError) as refused:
        projected_schema(stored, [f"{name}{i}" for i in range(4096)])
    raised = wire.flight_error(refused.value)
    assert len(bytes(raised.extra_info)) + len(str(raised).encode()) < 16384
    assert wire.to_ads_error(raised).code == ErrorCode.INVALID_REQUEST
    assert "characters in all)" in wire.to_ads_error(raised).message
    short = wire.flight_error(InvalidRequestError("short"))
    assert str(short).startswith("INVALID_REQUEST: short") and wire.to_ads_error(short).message == "short"


@pytest.mark.parametrize("version", [0, -1, "2", 1.0, True])
def test_a_schema_version_that_is_not_a_version_number_is_refused_before_any_request(version):
    from ads_spark.client.typed import TopicSchemas
    with pytest.raises(InvalidRequestError, match="schema version must be a version number"):
        TopicSchemas(connections=None).version("orders", version)
