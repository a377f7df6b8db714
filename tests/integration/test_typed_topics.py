"""Typed topics end to end on a real 3-broker cluster (issue #26), through the public surface: a typed
produce refused with every column named and no replica's log end moved, an evolution that rolls the
segment while old segments stay plain Arrow streams, reads across versions, and projection measured by
the brokers' byte counter."""

from __future__ import annotations

import time
import uuid

import pyarrow as pa
import pyarrow.flight as flight
import pyarrow.ipc as ipc
import pytest

from ads_spark.client import Admin, Consumer, Producer, TopicPartition
from ads_spark.client.typed import typed_read
from ads_spark.errors import ErrorCode, InvalidRecordError, InvalidRequestError, PolicyViolationError
from ads_spark.protocol import wire
from ads_spark.protocol.typed_records import check_stored_schema, typed_produce_schema
from tests.fixtures.cluster import metric_values

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

V1_DDL = "order_id BIGINT NOT NULL, region STRING, payload STRING"
V2_DDL = "order_id BIGINT NOT NULL, region STRING, payload STRING, amount DOUBLE"


def rows(first: int, count: int, version: int) -> pa.Table:
    ids = list(range(first, first + count))
    columns = {"order_id": pa.array(ids, pa.int32()),  # narrower than BIGINT: the client casts it
               "region": [f"r{i % 3}" for i in ids], "payload": ["x" * 200 for _ in ids]}
    if version == 2:
        columns["amount"] = [i * 0.5 for i in ids]
    return pa.table(columns)


def log_end_offsets(cluster, topic: str) -> dict[int, float]:
    return metric_values(cluster, f'ads_log_end_offset{{partition="0",topic="{topic}"}}')


def wait_for(predicate, what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def raw_produce(bootstrap: str, admin: Admin, topic: str, batch: pa.RecordBatch) -> dict:
    """One batch straight to the leader's produce stream, past the client's own checks: the broker's answer."""
    leader = admin.describe_topics([topic])[0].partitions[0].leader
    address = {b["id"]: b for b in admin.cluster()["brokers"]}[leader]
    client = flight.FlightClient(f"grpc+tcp://{address['host']}:{address['port']}")
    try:
        descriptor = flight.FlightDescriptor.for_command(wire.dumps({"type": wire.PRODUCE}))
        writer, reader = client.do_put(descriptor, batch.schema)
        writer.write_with_metadata(batch, pa.py_buffer(wire.dumps(
            {"topic": topic, "partition": 0, "correlation_id": 1, "acks": "all"})))
        answer = wire.loads(reader.read(), "produce answer")
        writer.close()
        return answer
    finally:
        client.close()


@pytest.fixture(scope="module")
def typed(cluster):
    topic = f"typed-{uuid.uuid4().hex[:8]}"
    admin = Admin({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topic(topic, 1, 3, config={"min.insync.replicas": "2"}, schema=V1_DDL)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    # Over Flight (the brokers' byte counter sees every read); test_local_reads_... reads the files.
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "typed-readers",
                         "local.reads": "false"})
    yield cluster, admin, producer, consumer, topic
    producer.close()
    consumer.close()
    admin.close()


def test_a_typed_topic_takes_rows_refuses_wrong_ones_and_evolves(typed):
    cluster, admin, producer, consumer, topic = typed
    described = admin.describe_schema(topic)
    assert (described["schema_type"], described["latest"]) == ("arrow", 1)
    assert producer.produce_arrow(topic, rows(0, 100, 1), partition=0).result(30) == 0

    # A wrong batch sent past the client's checks: every offending column named, nothing stored anywhere.
    wait_for(lambda: set(log_end_offsets(cluster, topic).values()) == {100.0}, "every replica at 100")
    v1 = admin.get_schema(topic, 1)[1]
    wrong_schema = pa.schema([*typed_produce_schema(v1, 1)][:4] + [pa.field("region", pa.int64()),
                                                                 pa.field("bogus", pa.string())],
                             metadata=typed_produce_schema(v1, 1).metadata)
    wrong = pa.RecordBatch.from_arrays([
        pa.array([1], pa.timestamp("ms")), pa.nulls(1, pa.binary()), pa.nulls(1, wrong_schema.field("headers").type),
        pa.array([None], pa.int64()), pa.array([7]), pa.array(["?"])], schema=wrong_schema)
    answer = raw_produce(cluster.bootstrap_servers, admin, topic, wrong)
    message = answer.get("message", "")
    assert answer["error_code"] == int(ErrorCode.INVALID_RECORD), answer
    for named in (f"topic '{topic}' schema version 1", "NOT NULL column 'order_id' holds 1 null(s)",
                  "column 'region' is int64, the schema says string", "['bogus'] are not in the schema"):
        assert named in message, message
    time.sleep(1)
    assert set(log_end_offsets(cluster, topic).values()) == {100.0}
    # The client refuses what it cannot fit before sending, naming the columns too.
    with pytest.raises(InvalidRecordError, match="'amount'.*not in the schema"):
        producer.produce_arrow(topic, rows(100, 5, 2), partition=0)

    # An incompatible version is refused with its rule; a compatible one rolls the segment on every replica.
    with pytest.raises(PolicyViolationError, match="BACKWARD"):
        admin.register_schema(topic, "order_id STRING NOT NULL, region STRING, payload STRING")
    assert admin.register_schema(topic, V2_DDL) == (2, True)
    assert producer.produce_arrow(topic, rows(100, 50, 2), partition=0).result(30) == 100
    assert producer.produce_arrow(topic, rows(150, 10, 1), partition=0, schema_version=1).result(30) == 150
    wait_for(lambda: set(log_end_offsets(cluster, topic).values()) == {160.0}, "every replica at 160")
    for broker in (1, 2, 3):
        files = sorted((cluster.dir / f"broker-{broker}" / "data" / f"{topic}-0").glob("*.arrows"))
        versions = [check_stored_schema(ipc.open_stream(pa.memory_map(str(f))).schema) for f in files]
        assert versions == [1, 2], (broker, files)
        first = ipc.open_stream(pa.memory_map(str(files[0]))).read_all()  # a plain Arrow stream, any tool reads it
        assert first.column("order_id").to_pylist() == list(range(100))


def test_reads_across_versions_and_projection_moves_only_the_asked_columns(typed):
    cluster, admin, producer, consumer, topic = typed
    tp = TopicPartition(topic, 0)
    wait_for(lambda: admin.describe_schema(topic)["latest"] == 2, "version 2")  # the first test registered it
    latest = consumer.fetch_range(tp, 0, 160, typed=typed_read(topic, 2)).table
    assert latest.column("order_id").to_pylist() == list(range(160))
    amounts = latest.column("amount").to_pylist()
    assert amounts[:100] == [None] * 100 and amounts[100:150] == [i * 0.5 for i in range(100, 150)]
    assert amounts[150:] == [None] * 10  # produced as version 1, stored resolved to version 2
    old_reader = consumer.fetch_range(tp, 0, 160, typed=typed_read(topic, 1)).table
    assert "amount" not in old_reader.column_names and old_reader.num_rows == 160

    def consumer_bytes() -> float:
        return sum(metric_values(cluster, 'ads_fetch_bytes_total{reader="consumer"}').values())

    before = consumer_bytes()
    full = consumer.fetch_range(tp, 0, 160, typed=typed_read(topic, 2)).table
    middle = consumer_bytes()
    projected = consumer.fetch_range(tp, 0, 160, typed=typed_read(topic, 2, ["order_id"])).table
    after = consumer_bytes()
    assert projected.column_names == ["offset", "timestamp", "key", "headers", "order_id"]  # offset rebuilt
    assert projected.column("order_id").equals(full.column("order_id"))
    bare = consumer.fetch_range(tp, 0, 160, typed=typed_read(topic, 2, ["order_id"], meta=[])).table
    bare_bytes = consumer_bytes() - after
    assert bare.column_names == ["offset", "order_id"] and bare.column("offset").to_pylist() == list(range(160))
    full_bytes, projected_bytes = middle - before, after - middle
    assert 0 < bare_bytes < 0.06 * full_bytes, (full_bytes, bare_bytes)  # 8 of ~230 bytes a row
    # What is left: the prefix every typed read carries (offset and timestamp, 16 bytes a row; key and headers,
    # null here, their 4-byte offsets) beside order_id's 8 bytes, against ~230 bytes a row read whole.
    assert 0 < projected_bytes < 0.2 * full_bytes, (full_bytes, projected_bytes)


def test_a_kafka_shaped_read_of_a_typed_topic_is_refused_by_name(typed):
    _, _, _, consumer, topic = typed
    with pytest.raises(Exception, match="is typed"):
        consumer.fetch_range(TopicPartition(topic, 0), 0, 10)


def test_local_reads_give_what_flight_gives_without_touching_other_columns(typed):
    cluster, _, _, flight_consumer, topic = typed
    tp = TopicPartition(topic, 0)
    local = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "typed-local"})
    try:
        for read in (typed_read(topic, 2), typed_read(topic, 2, ["amount", "order_id"]), typed_read(topic, 1)):
            before = local.local_fetches
            mapped = local.fetch_range(tp, 0, 160, typed=read).table
            assert local.local_fetches > before
            assert mapped.equals(flight_consumer.fetch_range(tp, 0, 160, typed=read).table)
    finally:
        local.close()


def test_poll_arrow_reads_a_typed_topic_projected_with_a_kafka_shaped_one(typed):
    cluster, admin, producer, _, topic = typed
    plain = f"plain-{uuid.uuid4().hex[:8]}"
    admin.create_topic(plain, 1, 3)
    producer.produce(plain, value=b"v", partition=0)
    producer.flush(30)
    for local_reads in ("true", "false"):
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "local.reads": local_reads,
                             "group.id": f"poll-{local_reads}"})
        try:
            schema = consumer.read_typed(topic, ["order_id"], version=2)
            assert schema.names == ["offset", "timestamp", "key", "headers", "order_id"]
            consumer.assign([TopicPartition(topic, 0, 0), TopicPartition(plain, 0, 0)])
            got: dict = {}
            deadline = time.monotonic() + 30
            while sum(t.num_rows for t in got.get(topic, [])) < 160 or plain not in got:
                assert time.monotonic() < deadline, {k: sum(t.num_rows for t in v) for k, v in got.items()}
                for tp, table in consumer.poll_arrow(1.0).items():
                    got.setdefault(tp.topic, []).append(table)
            typed_rows = pa.concat_tables(got[topic])
            assert typed_rows.schema.names == schema.names
            assert typed_rows.column("order_id").to_pylist() == list(range(160))
            assert pa.concat_tables(got[plain]).column("value").to_pylist() == [b"v"]
            with pytest.raises(Exception, match="read with poll_arrow"):
                consumer.poll(0.1)
        finally:
            consumer.close()


def test_a_read_of_a_version_never_registered_fails_at_once_by_name(typed):
    _, _, _, consumer, topic = typed
    started = time.monotonic()
    with pytest.raises(InvalidRequestError, match=f"typed read of topic '{topic}': .*no schema version 9"):
        consumer.fetch_range(TopicPartition(topic, 0), 0, 10, typed=typed_read(topic, 9))
    assert time.monotonic() - started < 10  # not retried as a missing partition would be
