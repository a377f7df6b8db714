"""The executor-side read loop with a fake consumer: steps, retention skips, truncation."""

from types import SimpleNamespace

import pyarrow as pa
import pytest

from ads_spark.errors import OffsetOutOfRangeError
from ads_spark.protocol.records import RECORD_SCHEMA
from ads_spark.spark.source import reader
from ads_spark.spark.source.options import parse_source_options
from ads_spark.spark.source.planning import DataLossError, OffsetRange


class FakeLog:
    """One partition with offsets [log_start, hw); fetches return at most ``chunk`` records."""

    def __init__(self, log_start, hw, topic_id="id1", chunk=7):
        self.log_start, self.hw, self.topic_id, self.chunk, self.calls = log_start, hw, topic_id, chunk, []

    def fetch_arrow(self, tp, start, end, max_bytes=None):
        self.calls.append((start, end))
        if start < self.log_start:
            raise OffsetOutOfRangeError("below log start")
        last = min(end, self.hw, start + self.chunk)
        n = max(0, last - start)
        return pa.table({"offset": pa.array(range(start, start + n), pa.int64()),
                         "timestamp": pa.array([0] * n, pa.timestamp("ms")),
                         "key": pa.nulls(n, pa.binary()), "value": pa.array([b"v"] * n, pa.binary()),
                         "headers": pa.nulls(n, RECORD_SCHEMA.field("headers").type)}, schema=RECORD_SCHEMA)

    def fetch_range(self, tp, start, end, max_bytes=None, typed=None, keep_until_exclusive=None):
        table = self.fetch_arrow(tp, start, end, max_bytes)
        next_offset = table.column("offset")[-1].as_py() + 1 if table.num_rows else start
        return SimpleNamespace(table=table, next_offset=next_offset)

    def describe_topics(self, names):
        return [SimpleNamespace(topic=names[0], topic_id=self.topic_id)]

    def list_offsets(self, tps, spec):
        return {tps[0]: self.log_start}


def read(log, monkeypatch, fail_on_data_loss="true", start=0, end=20):
    monkeypatch.setattr(reader.clients, "consumer_for", lambda config: log)
    monkeypatch.setattr(reader.clients, "admin_for", lambda config: log)
    monkeypatch.setattr(reader, "EMPTY_FETCH_BACKOFF_S", 0.001)
    monkeypatch.setattr(reader, "EMPTY_FETCH_WAIT_S_MAX", 0.05)
    options = parse_source_options({"ads.bootstrap.servers": "h:1", "subscribe": "t",
                                    "failOnDataLoss": fail_on_data_loss}, streaming=True)
    batches = list(reader.read_range(options, OffsetRange("t", 0, "id1", start, end)))
    return pa.Table.from_batches(batches).column("offset").to_pylist() if batches else []


def test_reads_the_whole_range_in_steps(monkeypatch):
    log = FakeLog(0, 100)
    assert read(log, monkeypatch) == list(range(20))
    assert len(log.calls) == 3


def test_retention_during_read(monkeypatch):
    with pytest.raises(DataLossError, match="offsets 0..4 were removed by retention"):
        read(FakeLog(5, 100), monkeypatch)
    assert read(FakeLog(5, 100), monkeypatch, fail_on_data_loss="false") == list(range(5, 20))


def test_truncated_below_planned_end(monkeypatch):
    with pytest.raises(DataLossError, match="no longer below the high watermark"):
        read(FakeLog(0, 10), monkeypatch)
    assert read(FakeLog(0, 10), monkeypatch, fail_on_data_loss="false") == list(range(10))


def test_recreated_topic_detected_before_reading(monkeypatch):
    log = FakeLog(0, 100, topic_id="id2")
    with pytest.raises(DataLossError, match="re-created"):
        read(log, monkeypatch)
    assert read(log, monkeypatch, fail_on_data_loss="false") == [] and log.calls == []
