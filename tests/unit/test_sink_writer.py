"""The sink's task loop with a fake producer: grouping, chunking, acknowledgement, failure."""

from concurrent.futures import Future
from types import SimpleNamespace

import pyarrow as pa
import pytest

from ads_spark.errors import NotEnoughReplicasError, UnknownTopicOrPartitionError
from ads_spark.protocol.partitioner import key_partition
from ads_spark.spark.sink import writer
from ads_spark.spark.sink.options import parse_sink_options


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
    def __init__(self, partitions, max_message_bytes=None):
        self.partitions, self.max_message_bytes = partitions, max_message_bytes or {}

    def describe_topics(self, names):
        if names[0] not in self.partitions:
            raise UnknownTopicOrPartitionError("nope")
        return [SimpleNamespace(topic=names[0], partitions=list(range(self.partitions[names[0]])))]

    def describe_configs(self, topic):
        value = self.max_message_bytes.get(topic, 8 << 20)
        return {"topic": topic, "configs": [{"name": "max.message.bytes", "value": str(value)},
                                            {"name": "retention.ms", "value": "604800000"}]}


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
    px, py = key_partition(b"x", 3), key_partition(b"y", 3)
    assert by_target[("b", 0)] == [b"4"]
    assert sum(len(v) for (t, _), v in by_target.items() if t == "a") == 3
    assert b"1" in by_target[("a", px)] and b"2" in by_target[("a", py)]
    assert sum(message.records_by_partition.values()) == 4


def test_large_partition_batches_are_chunked(fakes):
    options = parse_sink_options({"ads.bootstrap.servers": "h:1", "topic": "b", "ads.batch.size": "1000"})
    writer.write_batches(options, iter([batch(value=[b"v" * 300] * 10)]))
    assert [b.num_rows for _, _, b in fakes.sent] == [3, 3, 3, 1]


def test_without_a_batch_size_batches_fill_the_request_limit_within_the_topics(monkeypatch):
    """One request per produce batch (the sink never coalesces): batches as large as a request may be, and
    no larger than the topic accepts."""
    producer = FakeProducer()
    monkeypatch.setattr(writer.clients, "producer_for", lambda config: producer)
    monkeypatch.setattr(writer.clients, "admin_for",
                        lambda config: FakeAdmin({"big": 1, "small": 1}, max_message_bytes={"small": 5_000}))
    for topic in ("big", "small"):
        writer.write_batches(parse_sink_options({"ads.bootstrap.servers": "h:1", "topic": topic}),
                             iter([batch(value=[b"v" * 1000] * 6000)]))
    big = [b for t, _, b in producer.sent if t == "big"]
    small = [b for t, _, b in producer.sent if t == "small"]
    assert sum(b.num_rows for b in big) == sum(b.num_rows for b in small) == 6000
    assert len(big) == 2 and all(b.nbytes <= 4 << 20 for b in big)  # 6 MB in 4 MiB requests
    assert all(b.nbytes <= 5_000 for b in small) and max(b.num_rows for b in small) == 4


def test_a_chunk_over_the_limit_after_the_estimate_is_halved(fakes):
    """Headers are not in the per-row estimate: a chunk whose Arrow size still exceeds the limit is halved
    until it fits, so the cut stays a function of the rows (replays cut the same batches)."""
    header = [{"key": "h", "value": b"x" * 200}]
    options = parse_sink_options({"ads.bootstrap.servers": "h:1", "topic": "b", "ads.batch.size": "600"})
    rows = batch(value=[b"v"] * 8, headers=[header] * 8)
    for _ in range(2):
        fakes.sent.clear()
        writer.write_batches(options, iter([rows]))
        assert [b.num_rows for _, _, b in fakes.sent] == [2, 2, 2, 2]
        assert all(b.nbytes <= 600 for _, _, b in fakes.sent)


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


def test_a_batch_bound_for_one_partition_is_sent_as_it_came(fakes):
    """The topic option and null keys: every row of a Spark batch goes to one partition in order, and the sink
    sends the batch's own buffers (no take copy); a batch split over partitions is still split (above)."""
    options = parse_sink_options({"ads.bootstrap.servers": "h:1", "topic": "a"})
    values = pa.array([b"v%d" % i for i in range(100)], pa.binary())
    writer.write_batches(options, iter([pa.RecordBatch.from_arrays([values], names=["value"])]))
    [(topic, _, sent)] = fakes.sent
    assert topic == "a" and sent.column("value").to_pylist() == values.to_pylist()
    assert sent.column("value").buffers()[2].address == values.buffers()[2].address
