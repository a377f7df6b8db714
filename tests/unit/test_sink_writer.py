"""The sink's task loop with a fake producer: grouping, chunking, acknowledgement, failure."""

import zlib
from concurrent.futures import Future
from types import SimpleNamespace

import pyarrow as pa
import pytest

from ads_spark.errors import NotEnoughReplicasError, UnknownTopicOrPartitionError
from ads_spark.sink import writer
from ads_spark.sink.options import parse_sink_options


class FakeProducer:
    def __init__(self, fail_topic=None):
        self.sent, self.fail_topic = [], fail_topic

    def produce_arrow(self, topic, batch, partition):
        self.sent.append((topic, partition, batch))
        future = Future()
        if topic == self.fail_topic:
            future.set_exception(NotEnoughReplicasError("only 1 in-sync replica"))
        else:
            future.set_result(len(self.sent))
        return future

    def flush(self, timeout=None):
        return 0


class FakeAdmin:
    def __init__(self, partitions):
        self.partitions = partitions

    def describe_topics(self, names):
        if names[0] not in self.partitions:
            raise UnknownTopicOrPartitionError("nope")
        return [SimpleNamespace(topic=names[0], partitions=list(range(self.partitions[names[0]])))]


@pytest.fixture
def fakes(monkeypatch):
    producer, admin = FakeProducer(), FakeAdmin({"a": 3, "b": 1})
    monkeypatch.setattr(writer.clients, "producer_for", lambda config: producer)
    monkeypatch.setattr(writer.clients, "admin_for", lambda config: admin)
    return producer


def batch(**columns):
    return pa.RecordBatch.from_pydict({k: pa.array(v) for k, v in columns.items()})


def test_rows_grouped_by_topic_and_partition_in_order(fakes):
    options = parse_sink_options({"ads.bootstrap.servers": "h:1"})
    keys = [b"x", b"y", None, b"x"]
    message = writer.write_batches(options, iter([batch(value=[b"1", b"2", b"3", b"4"], key=keys,
                                                        topic=["a", "a", "a", "b"])]))
    assert message.records_written == 4
    by_target = {(t, p): b.column("value").to_pylist() for t, p, b in fakes.sent}
    px, py = zlib.crc32(b"x") % 3, zlib.crc32(b"y") % 3
    assert by_target[("b", 0)] == [b"4"]
    assert sum(len(v) for (t, _), v in by_target.items() if t == "a") == 3
    assert b"1" in by_target[("a", px)] and b"2" in by_target[("a", py)]
    assert sum(message.records_by_partition.values()) == 4


def test_large_partition_batches_are_chunked(fakes):
    options = parse_sink_options({"ads.bootstrap.servers": "h:1", "topic": "b", "ads.batch.size": "1000"})
    writer.write_batches(options, iter([batch(value=[b"v" * 300] * 10)]))
    assert [b.num_rows for _, _, b in fakes.sent] == [3, 3, 3, 1]


def test_unacknowledged_batch_fails_the_task(monkeypatch):
    monkeypatch.setattr(writer.clients, "producer_for", lambda config: FakeProducer(fail_topic="a"))
    monkeypatch.setattr(writer.clients, "admin_for", lambda config: FakeAdmin({"a": 1}))
    with pytest.raises(NotEnoughReplicasError):
        writer.write_batches(parse_sink_options({"ads.bootstrap.servers": "h:1", "topic": "a"}),
                             iter([batch(value=[b"1"])]))


def test_missing_topic_is_a_clear_error(fakes):
    with pytest.raises(UnknownTopicOrPartitionError, match="topic 'zz' does not exist; create it first"):
        writer.write_batches(parse_sink_options({"ads.bootstrap.servers": "h:1", "topic": "zz"}),
                             iter([batch(value=[b"1"])]))
