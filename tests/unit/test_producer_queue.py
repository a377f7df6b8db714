"""The producer's per-partition queue under answers that send batches back: a scripted leader, no sender thread.

The sender thread is replaced by the test, which takes what the producer would send
(``_take_sendable_locked``) and answers it as a leader would: the size check first (a coalesced request
above the topic's ``max.message.bytes`` is RECORD_TOO_LARGE), then the idempotence check (only the next
sequence is appended; any other is OUT_OF_ORDER_SEQUENCE_NUMBER). Found in
``test_a_topic_refusing_the_coalesced_size_gets_the_batches_one_by_one``, which stalled now and then: five
coalesced requests refused together were put back at the head one by one, in reverse, and the batch the
leader waited for sat behind four it refused forever.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from ads_spark.client.producer import Producer
from ads_spark.errors import ErrorCode, InvalidRequestError, error_for
from ads_spark.protocol.records import conform_produce_batch, now_ms
from tests.fixtures.producers import OnePartitionConnections

BATCH_RECORDS = 4
ROUNDS_MAX = 200  # each round answers every request in flight; the correct queue needs ~10


class QueueOnlyProducer(Producer):
    """A producer whose sender thread exits at once: the test moves its batches."""

    def _run_sender(self):
        return


class ScriptedLeader:
    def __init__(self, message_bytes_max: int):
        self.message_bytes_max = message_bytes_max
        self.next_sequence = 0
        self.log_end_offset = 0
        self.appended: list[bytes] = []

    def answer(self, item) -> tuple[int | None, Exception | None]:
        batch = item.materialize()
        if batch.nbytes > self.message_bytes_max:
            return None, error_for(ErrorCode.RECORD_TOO_LARGE, f"{batch.nbytes} > {self.message_bytes_max}")
        if item.base_sequence != self.next_sequence:
            return None, error_for(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                   f"expected {self.next_sequence}, got {item.base_sequence}")
        base_offset = self.log_end_offset
        self.next_sequence += batch.num_rows
        self.log_end_offset += batch.num_rows
        self.appended.extend(batch.column("value").to_pylist())
        return base_offset, None


def _batch(number: int) -> pa.RecordBatch:
    return pa.record_batch({"value": pa.array([b"%03d-%d" % (number, r) for r in range(BATCH_RECORDS)])})


def test_requests_refused_together_are_resent_in_call_order_and_all_delivered():
    batches = [_batch(b) for b in range(12)]
    one_batch_bytes = conform_produce_batch(batches[0]).nbytes  # as sent: with the produce schema's columns
    producer = QueueOnlyProducer({"acks": "all", "retry.backoff.ms": 0, "max.request.size": 2 * one_batch_bytes + 64,
                                  }, connections=OnePartitionConnections())
    producer._producer_id, producer._producer_epoch = 7, 0
    leader = ScriptedLeader(message_bytes_max=one_batch_bytes * 3 // 2)  # one batch fits, two do not
    futures = [producer.produce_arrow("t", batch, partition=0) for batch in batches]
    for _ in range(ROUNDS_MAX):
        if all(future.done() for future in futures):
            break
        with producer._lock:
            in_flight = producer._take_sendable_locked(now_ms())
        for item in in_flight:  # answered in the order sent, as one stream delivers them
            item.attempts += 1
            producer._on_response(item, *leader.answer(item))
    assert all(future.done() for future in futures), f"stalled: queue {[x.base_sequence for x in producer._ready[('t', 0)]]}"
    assert [future.result(0) for future in futures] == [b * BATCH_RECORDS for b in range(len(batches))]
    assert leader.appended == [v for batch in batches for v in batch.column("value").to_pylist()]
    producer._closed = True


def test_parts_of_a_request_that_may_be_stored_keep_that_doubt_when_split():
    """A coalesced request whose first attempt ended without an answer may be in the log; if a retry is then
    refused as too large (the topic's limit lowered meanwhile), its parts must not look never-written: a
    sequence reset would renumber and resend them as new records."""
    batches = [_batch(b) for b in range(2)]
    producer = QueueOnlyProducer({"acks": "all", "retry.backoff.ms": 0}, connections=OnePartitionConnections())
    producer._producer_id, producer._producer_epoch = 7, 0
    for batch in batches:
        producer.produce_arrow("t", batch, partition=0)
    with producer._lock:
        [request] = producer._take_sendable_locked(now_ms())
    assert len(request.parts) == 2
    request.attempts += 1
    producer._on_response(request, None, error_for(ErrorCode.REQUEST_TIMED_OUT, "no answer in time"))
    with producer._lock:
        [retry] = producer._take_sendable_locked(now_ms())
    assert retry is request  # resent whole: it may be stored under its own sequences
    retry.attempts += 1
    producer._on_response(retry, None, error_for(ErrorCode.RECORD_TOO_LARGE, "limit lowered"))
    queued = list(producer._ready[("t", 0)])
    assert [part.solo for part in queued] == [True, True]
    assert [part.maybe_written for part in queued] == [True, True]
    producer._closed = True


def test_records_are_built_into_a_batch_when_first_sent_and_coalesce_like_ready_batches():
    producer = QueueOnlyProducer({"acks": "all", "batch.size": 2_000, "retry.backoff.ms": 0},
                                 connections=OnePartitionConnections())
    producer._producer_id, producer._producer_epoch = 7, 0
    values = [b"record-%04d-" % i + b"x" * 100 for i in range(100)]
    futures = [producer.produce("t", value=value, partition=0, headers={"h": b"v"}) for value in values]
    producer.flush(timeout=0)
    queued = list(producer._ready[("t", 0)])
    assert len(queued) > 1 and all(item.batch is None for item in queued)  # sealed, not built
    assert sum(item.record_count for item in queued) == len(values)
    leader = ScriptedLeader(message_bytes_max=1 << 20)
    for _ in range(ROUNDS_MAX):
        if all(future.done() for future in futures):
            break
        with producer._lock:
            in_flight = producer._take_sendable_locked(now_ms())
        assert len(in_flight) == 1 and len(in_flight[0].parts) == len(queued)  # one request for the backlog
        for item in in_flight:
            item.attempts += 1
            producer._on_response(item, *leader.answer(item))
    assert [future.result(0).offset for future in futures] == list(range(len(values)))
    assert leader.appended == values
    producer._closed = True


def test_a_timestamp_arrow_cannot_store_is_refused_at_the_call_and_changes_nothing():
    """Accepted, it failed the whole batch when the batch was built (before that, the sender thread died
    on it, or the records sealed with it were dropped without an answer)."""
    producer = QueueOnlyProducer({"acks": "all", "retry.backoff.ms": 0}, connections=OnePartitionConnections())
    producer._producer_id, producer._producer_epoch = 7, 0
    good = producer.produce("t", value=b"kept", partition=0, timestamp=1_700_000_000_000)
    for bad in ("123", 1.5, 2 ** 70, True):
        with pytest.raises(InvalidRequestError, match="timestamp"):
            producer.produce("t", value=b"refused", partition=0, timestamp=bad)
    producer.flush(timeout=0)
    leader = ScriptedLeader(message_bytes_max=1 << 20)
    with producer._lock:
        [item] = producer._take_sendable_locked(now_ms())
    item.attempts += 1
    producer._on_response(item, *leader.answer(item))
    assert good.result(0).offset == 0 and leader.appended == [b"kept"]
    producer._closed = True


def test_a_coalesced_request_of_produce_batches_is_built_in_one_pass_with_every_column_in_record_order():
    producer = QueueOnlyProducer({"acks": "all", "batch.size": 300, "retry.backoff.ms": 0},
                                 connections=OnePartitionConnections())
    producer._producer_id, producer._producer_epoch = 7, 0
    rows = [(b"key-%d" % i if i % 3 else None, b"value-%02d-" % i + b"x" * 60,
             {"n": b"%d" % i} if i % 2 else None, 1_700_000_000_000 + i) for i in range(20)]
    for key, value, headers, timestamp in rows:
        producer.produce("t", key=key, value=value, headers=headers, partition=0, timestamp=timestamp)
    producer.flush(timeout=0)
    with producer._lock:
        [request] = producer._take_sendable_locked(now_ms())
    assert len(request.parts) > 1
    built = request.materialize()
    assert all(part.batch is None for part in request.parts)  # not built one by one and concatenated
    assert built.column("key").to_pylist() == [key for key, _, _, _ in rows]
    assert built.column("value").to_pylist() == [value for _, value, _, _ in rows]
    assert built.column("headers").to_pylist() == [
        None if headers is None else [{"key": "n", "value": headers["n"]}] for _, _, headers, _ in rows]
    assert built.column("timestamp").cast("int64").to_pylist() == [timestamp for _, _, _, timestamp in rows]
    producer._closed = True
