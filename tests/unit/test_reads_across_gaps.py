"""Reads of a log with offset gaps (a compacted topic), everywhere a reader reads.

A cleaned batch keeps its offset span (``record_count``) but holds fewer rows, and whole batches may be
gone, so the last row read + 1 can be an offset nobody stores. The fetch answer (and the local read's
locate answer) names where the next read starts (``data_handlers.consumer_next_offset``); the consumer's
chunks (``chunks.fetched_chunk``), its plain reads (``fetch_arrow``/``fetch_range``), its poll path and the
Spark executor's read loop move past the gap instead of asking for it again, and a range whose last
offsets were removed completes. The log here is a real ``PartitionLog`` holding cleaned batches.
"""

from __future__ import annotations

import datetime
import threading
import time
from types import SimpleNamespace

import pyarrow as pa
import pytest

from ads_spark.broker.log.config import LogConfig
from ads_spark.broker.log.partition_log import PartitionLog
from ads_spark.broker.log.segment import encode_batch_message
from ads_spark.broker.rpc.data_handlers import DataHandlers, consumer_next_offset
from ads_spark.client.chunks import FetchedChunk, TopicPartition, fetched_chunk
from ads_spark.client.consumer import Consumer
from ads_spark.client.poll_fetcher import PollFetcher
from ads_spark.local_reads import describe_segments, host_identity, read_located
from ads_spark.protocol.records import RECORD_SCHEMA, BatchHeader, seal
from ads_spark.replication.state import Role
from ads_spark.spark.source import reader
from ads_spark.spark.source.options import parse_source_options
from ads_spark.spark.source.planning import OffsetRange

TOPIC = "compacted"
# (base offset, offset span, offsets kept): what a cleaner leaves. Offsets 6..9 were removed at the end of
# the first batch, 10..19 with a whole batch, 26..34 at the end of the last one: the log ends in a gap.
LAYOUT = [(0, 10, [0, 3, 5]), (20, 5, [20, 21, 22, 23, 24]), (25, 10, [25])]
PRESENT = [0, 3, 5, 20, 21, 22, 23, 24, 25]
LOG_END = 35


def record_batch(offsets: list[int]) -> pa.RecordBatch:
    n = len(offsets)
    return pa.RecordBatch.from_pydict(
        {"offset": offsets, "timestamp": [datetime.datetime(2026, 1, 1)] * n, "key": [b"k%d" % o for o in offsets],
         "value": [b"v%d" % o for o in offsets], "headers": [None] * n}, schema=RECORD_SCHEMA)


@pytest.fixture
def gapped_log(tmp_path):
    log = PartitionLog.open(tmp_path / f"{TOPIC}-0", LogConfig(), recovery_point=0, clean_shutdown=True, now_ms=0)
    messages = []
    for base, span, rows in LAYOUT:
        batch = record_batch(rows)
        header = seal(batch, BatchHeader(base, span, 0, 0, row_count=len(rows)))
        messages.append((encode_batch_message(batch, header), header))
    log.append_encoded(messages, now_ms=0)
    assert log.log_end_offset == LOG_END
    yield log
    log.close()


def broker_answer(log: PartitionLog, start: int, high_watermark: int, max_bytes: int) -> FetchedChunk:
    """What a consumer makes of a broker's fetch answer: the batches the log reads, and the answer's next offset
    as ``DataHandlers._read_one`` names it."""
    batches = log.read(start, max_bytes=max_bytes, end_offset_exclusive=high_watermark) \
        if start < high_watermark else []
    next_offset = consumer_next_offset(start, high_watermark,
                                       [(header.base_offset, header.record_count) for _, header in batches[-1:]])
    return fetched_chunk([batch for batch, _ in batches], start, high_watermark, log.log_start_offset, 0, next_offset)


def consumer_over(log: PartitionLog, high_watermark: int = LOG_END) -> tuple[Consumer, list[int]]:
    """A consumer whose fetches are answered from ``log`` one batch at a time; the offsets it asked for."""
    consumer = Consumer({"bootstrap.servers": "127.0.0.1:1", "local.reads": "false"})
    asked: list[int] = []

    def fetch_once(tp, start, max_bytes, max_wait_ms, prefer_rack=True, typed=None):
        asked.append(start)
        assert len(asked) < 50, f"the reader keeps asking: {asked}"
        return broker_answer(log, start, high_watermark, max_bytes=1)

    consumer._fetch_once = fetch_once
    return consumer, asked


def offsets_of(table: pa.Table) -> list[int]:
    return table.column("offset").to_pylist()


def test_a_fetch_names_the_end_of_the_last_span_sent_or_the_bound_past_a_gap():
    assert consumer_next_offset(6, 35, [(0, 10)]) == 10  # rows 6..9 of the batch were removed
    assert consumer_next_offset(0, 8, [(0, 10)]) == 8  # never past the bound (the HW)
    assert consumer_next_offset(12, 18, []) == 18  # nothing stored in [12, 18): the reader goes to the bound
    assert consumer_next_offset(35, 35, []) is None  # at the HW: nothing to say


def handlers_over(log: PartitionLog, high_watermark: int) -> DataHandlers:
    """The broker's data handlers over one partition served from ``log``, led here, with HW ``high_watermark``."""
    partition = SimpleNamespace(
        state=SimpleNamespace(role=Role.LEADER, log_start_offset=log.log_start_offset,
                              log_end_offset=log.log_end_offset, leader_epoch=0),
        consumer_read_bound=lambda epoch, fetch_offset, allow_follower: high_watermark,
        read=lambda offset, end, max_bytes: log.read(offset, max_bytes=max_bytes, end_offset_exclusive=end)
        if offset < end else [],
        locate=lambda offset, end, max_bytes: log.locate(offset, max_bytes=max_bytes, end_offset_exclusive=end)
        if offset < end else [])
    replicas = SimpleNamespace(get=lambda topic, number: partition, unwatch=lambda keys, event: None,
                               watch=lambda keys, wake_on_high_watermark: threading.Event())
    broker = SimpleNamespace(replica_manager=replicas, may_serve_follower_read=lambda rack: False,
                             config={"fetch.wait.max.ms.max": 30_000, "fetch.max.bytes": 1 << 20})
    return DataHandlers(broker)


def test_the_broker_names_the_next_offset_and_answers_a_gap_without_long_polling(gapped_log):
    handlers = handlers_over(gapped_log, high_watermark=18)  # nothing stored in [10, 18)

    def fetch(offset: int, max_wait_ms: int) -> dict:
        started = time.monotonic()
        [(meta, batches)] = handlers.handle_fetch({"max_wait_ms": max_wait_ms, "partitions": [
            {"topic": TOPIC, "partition": 0, "fetch_offset": offset, "partition_max_bytes": 1}]})
        return {**meta, "rows": sum(batch.num_rows for batch, _ in batches), "s": time.monotonic() - started}

    assert fetch(6, 0)["next_offset"] == 10  # the rest of the first batch's span was compacted away
    gap = fetch(12, 5_000)
    assert gap["next_offset"] == 18 and gap["rows"] == 0 and gap["s"] < 2  # answered at once, not long-polled
    assert "next_offset" not in fetch(18, 0)  # at the HW: nothing to say
    located = handlers.handle_locate({"topic": TOPIC, "partition": 0, "fetch_offset": 12})
    assert located["segments"] == [] and located["next_offset"] == 18
    located = handlers_over(gapped_log, LOG_END).handle_locate({"topic": TOPIC, "partition": 0, "fetch_offset": 26})
    assert located["next_offset"] == LOG_END and len(located["segments"][0]["batches"]) == 1


def test_a_chunk_whose_last_rows_were_compacted_away_ends_at_its_span(gapped_log):
    chunk = broker_answer(gapped_log, 6, LOG_END, max_bytes=1)
    assert chunk.table.num_rows == 0 and chunk.next_offset == 10
    chunk = broker_answer(gapped_log, 1, LOG_END, max_bytes=1)
    assert offsets_of(chunk.table) == [3, 5] and chunk.next_offset == 10
    chunk = broker_answer(gapped_log, 12, LOG_END, max_bytes=1)  # in the gap between batches: the next batch
    assert offsets_of(chunk.table) == [20, 21, 22, 23, 24] and chunk.next_offset == 25


def test_fetch_arrow_returns_exactly_the_records_present_and_asks_for_no_offset_twice(gapped_log):
    consumer, asked = consumer_over(gapped_log)
    assert offsets_of(consumer.fetch_arrow(TopicPartition(TOPIC, 0), 0, LOG_END)) == PRESENT
    assert asked == [0, 10, 25]
    assert offsets_of(consumer.fetch_arrow(TopicPartition(TOPIC, 0), 4, 22)) == [5, 20, 21]


def test_a_step_keeps_the_rest_of_its_last_batch_up_to_the_range_end_instead_of_fetching_it_again(gapped_log):
    consumer, asked = consumer_over(gapped_log)
    step = consumer.fetch_range(TopicPartition(TOPIC, 0), 20, 22, keep_until_exclusive=24)
    assert offsets_of(step.table) == [20, 21, 22, 23] and step.next_offset == 24 and asked == [20]
    plain = consumer.fetch_range(TopicPartition(TOPIC, 0), 20, 22)  # without: cut at the step, 22.. fetched again
    assert offsets_of(plain.table) == [20, 21] and plain.next_offset == 22


def test_a_range_whose_last_offsets_were_compacted_away_completes(gapped_log):
    consumer, asked = consumer_over(gapped_log)
    fetched = consumer.fetch_range(TopicPartition(TOPIC, 0), 26, LOG_END)
    assert fetched.table.num_rows == 0 and fetched.next_offset == LOG_END and asked == [26]
    fetched = consumer.fetch_range(TopicPartition(TOPIC, 0), 6, 15)  # the range is all gap
    assert fetched.table.num_rows == 0 and fetched.next_offset == 15
    consumer, asked = consumer_over(gapped_log, high_watermark=18)  # a gap up to the HW: go to the HW
    fetched = consumer.fetch_range(TopicPartition(TOPIC, 0), 12, 30)
    assert fetched.table.num_rows == 0 and fetched.next_offset == 18 and asked == [12]
    assert consumer.fetch_range(TopicPartition(TOPIC, 0), 18, 30).next_offset == 18  # at the HW: no progress


def test_poll_moves_past_a_gap_instead_of_asking_for_it_again(gapped_log):
    consumer = Consumer({"bootstrap.servers": "127.0.0.1:1", "local.reads": "false"})
    key = (TOPIC, 0)
    consumer._positions[key] = 6  # after reading 0, 3, 5: the rest of that batch's span is gone
    fetcher = consumer._poll_fetcher = PollFetcher(consumer)
    asked: list[int] = []

    def send_fetches(positions):
        for k, position in positions.items():
            if k not in fetcher._answers:
                asked.append(position)
                assert len(asked) < 50, f"poll keeps asking: {asked}"
                batches = gapped_log.read(position, max_bytes=1, end_offset_exclusive=LOG_END)
                info = {"error_code": 0, "high_watermark": LOG_END, "log_start_offset": 0, "leader_epoch": 0,
                        "next_offset": consumer_next_offset(position, LOG_END,
                                                            [(h.base_offset, h.record_count) for _, h in batches[-1:]])}
                fetcher._answers[k] = fetcher._answer_from(k, position, info, [b for b, _ in batches])
        return float("inf")

    fetcher._send_fetches = send_fetches
    try:
        polled = consumer.poll_arrow(timeout=0.5)
        assert offsets_of(polled[TopicPartition(*key)]) == [20, 21, 22, 23, 24]
        assert consumer.position(TopicPartition(*key)) == 25 and asked == [6, 10]
        assert offsets_of(consumer.poll_arrow(timeout=0.5)[TopicPartition(*key)]) == [25]
        assert consumer.position(TopicPartition(*key)) == LOG_END  # past the gap the log ends in
    finally:
        consumer.close()


def test_a_local_read_maps_cleaned_batches_and_names_the_next_offset(gapped_log):
    located = gapped_log.locate(6, max_bytes=1 << 20, end_offset_exclusive=LOG_END)
    segments = describe_segments(located)
    batches = read_located({"host_id": host_identity(), "segments": segments})  # NotLocal before: rows < span
    assert [batch.num_rows for batch in batches] == [3, 5, 1]
    spans = [(base, count) for segment in segments for _, _, base, count in segment["batches"]]
    chunk = fetched_chunk(batches, 6, LOG_END, 0, 0, consumer_next_offset(6, LOG_END, spans))
    assert offsets_of(chunk.table) == [20, 21, 22, 23, 24, 25] and chunk.next_offset == LOG_END


def test_the_spark_read_loop_reads_a_compacted_range_to_its_end(gapped_log, monkeypatch):
    consumer, asked = consumer_over(gapped_log)
    admin = SimpleNamespace(describe_topics=lambda names: [SimpleNamespace(topic=TOPIC, topic_id="id1")])
    monkeypatch.setattr(reader.clients, "consumer_for", lambda config: consumer)
    monkeypatch.setattr(reader.clients, "admin_for", lambda config: admin)
    monkeypatch.setattr(reader, "READ_STEP_RECORDS_INITIAL", 4)  # steps that end in gaps, as a long range has
    monkeypatch.setattr(reader, "EMPTY_FETCH_WAIT_S_MAX", 0.05)  # a stall would be reported as data loss
    options = parse_source_options({"ads.bootstrap.servers": "h:1", "subscribe": TOPIC,
                                    "failOnDataLoss": "true"}, streaming=True)
    batches = list(reader.read_range(options, OffsetRange(TOPIC, 0, "id1", 0, LOG_END)))
    assert offsets_of(pa.Table.from_batches(batches)) == PRESENT
    assert asked == sorted(set(asked))  # every fetch further on: no gap asked for twice
