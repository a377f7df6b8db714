"""The producer: records accumulate into Arrow batches, batches stream to leaders.

``produce`` appends one record to its partition's open batch; a batch is sent
when it reaches ``batch.size`` bytes or has waited ``linger.ms``.
``produce_arrow`` hands over a ready Arrow batch, after sealing the partition's
open batch (one partition's writes are stored in call order, whichever call made
them). A sender thread writes batches onto one long-lived Flight ``do_exchange``
stream per broker (``producer_channel.py``) (pipelined, at most ``max.in.flight.requests.per.connection``
batches per partition) and completes each batch's futures when its response
arrives (acks=0: once written to the stream, with offset -1; no answer is awaited). Batches queued behind a full window leave together, up to
``max.request.size`` bytes per request (``producer_batch.py``: the brokers' cost
is mostly per request). Retriable errors refresh metadata and resend the same
batch, bounded by ``delivery.timeout.ms``; a batch retried is put back at its
place in call order on its partition's queue (``producer_batch.put_back``).

Idempotence: batches are numbered per partition. When a batch fails for good
(its delivery timeout passed, or a non-retriable error), its sequence numbers
are a hole the broker will wait for forever: every later batch would be
refused as out of order. So, as Kafka's producer does since KIP-360, once that
partition has nothing in flight the producer bumps its epoch for the partition
and numbers the queued batches from 0 again; a queued batch that may already
have been written under the old numbering (one of its attempts ended without a
definite refusal) is failed instead of resent, so the reset never duplicates.
A caller-chosen identity (``ads.producer.id``) is never reset: its numbering
must be the same on every replay.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from concurrent.futures import Future
from typing import Any, Callable

import pyarrow as pa

from ads_spark.config import PRODUCER_KEYS, check_client_keys
from ads_spark.protocol import wire
from ads_spark.protocol.connection import Connections
from ads_spark.client.delivery import DeliveryFuture, RecordMetadata
from ads_spark.client.producer_batch import OpenBatch, ProducerBatch, put_back, take_coalesced
from ads_spark.client.producer_channel import BrokerChannel
from ads_spark.client.producer_config import parse_producer_settings
from ads_spark.client.producer_partitioner import PartitionChooser
from ads_spark.errors import (
    AdsError, ErrorCode, InvalidRequestError, RecordTooLargeError, RequestTimedOutError, error_for,
)
from ads_spark.protocol.records import conform_produce_batch, now_ms
from ads_spark.protocol.typed_records import schema_id_of
from ads_spark.client.typed import TopicSchemas, fit_to_latest, is_typed_batch

log = logging.getLogger("ads.client.producer")

TIMESTAMP_MS_MIN, TIMESTAMP_MS_MAX = -(2 ** 63), 2 ** 63 - 1  # Arrow's timestamp[ms] is an int64
BUFFERED_RECORDS_MAX = 1_000_000  # produce() blocks past this many undelivered records
# A broker answers a produce within the request's timeout (acks=all: REQUEST_TIMED_OUT); past this
# margin on top, the stream is taken for dead (producer_channel.fail_overdue).
ANSWER_MARGIN_MS = 5_000
OVERDUE_CHECK_INTERVAL_S = 0.1
OVERDUE_CHECK_INTERVAL_MS = int(OVERDUE_CHECK_INTERVAL_S * 1000)  # also the sender's longest sleep
# Answers that prove the broker did not append the batch on that attempt.
REFUSED_BEFORE_APPEND = frozenset({
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.UNKNOWN_PRODUCER_ID,
    ErrorCode.CORRUPT_MESSAGE, ErrorCode.RECORD_TOO_LARGE,
})


class Producer:
    """A Kafka-style producer: records in, Arrow batches out to partition leaders, one outcome per batch.

    Owns, under one mutex (``_lock`` is a Condition over it): per partition the open batch
    being filled (``_open``), the sealed batches queued to send in call order (``_ready``),
    the count in flight (``_in_flight``, at most ``max.in.flight.requests.per.connection``);
    the count of undelivered records (``produce`` waits past ``BUFFERED_RECORDS_MAX``);
    and, when idempotent, the producer id and epoch (from ``init_producer_id``, or
    caller-chosen with ``ads.producer.id``), the next sequence of each partition and the
    partitions whose sequences must be reset after a batch failed for good (KIP-360).

    Threads: ``ads-producer-sender`` seals batches on linger (a linger-sealed batch waits
    while its partition has one in flight), takes what may be sent (coalescing queued
    batches up to ``max.request.size``), expires batches past ``delivery.timeout.ms``,
    resets sequences, and breaks overdue streams; it sleeps until the next linger or retry
    backoff ends. Each ``BrokerChannel`` (``producer_channel.py``, one per leader broker, a
    ``do_exchange`` stream) has a writer and a reader thread; answers come back on the
    reader thread (``_on_response``: retry in call-order place, split a refused coalesced
    request, or complete).

    Delegates: reading its config keys to ``producer_config.py``; the partition of each record
    (key hash, sticky partition of null keys) to ``producer_partitioner.py``, whose count of the
    sticky partition's bytes it updates under its mutex; metadata, leaders and connections to
    ``protocol/connection.Connections`` (shared when passed in); batch building and coalescing to ``producer_batch.py``;
    per-record futures to ``delivery.py`` (records of a batch share one outcome); dedupe
    and ordering to the leaders, which answer a resent batch with its first offsets.
    """

    def __init__(self, config: dict[str, Any], connections: Connections | None = None):
        check_client_keys(PRODUCER_KEYS, config, "producer")  # a key it would not read: refused by name
        self.config = dict(config)
        self._connections = connections or Connections(config)
        self._owns_connections = connections is None
        # Keys read and combined in producer_config.py; copied to attributes, which the hot path reads.
        settings = parse_producer_settings(self.config)
        self.acks, self.idempotent, self.retries = settings.acks, settings.idempotent, settings.retries
        self.linger_ms, self.batch_size_bytes = settings.linger_ms, settings.batch_size_bytes
        # Queued batches of a partition leave together up to this size (client/producer_batch.py).
        self.request_bytes_max = settings.request_bytes_max
        self.delivery_timeout_ms, self.request_timeout_ms = settings.delivery_timeout_ms, settings.request_timeout_ms
        self.max_in_flight, self.retry_backoff_ms = settings.max_in_flight, settings.retry_backoff_ms
        # -1: asked of a broker (from a ZooKeeper-allocated block) before the first send
        self._producer_id, self._producer_epoch = settings.producer_id, settings.producer_epoch
        self._next_sequence: dict[tuple[str, int], int] = {}
        self._resets_sequences = self.idempotent and not settings.caller_chosen_id
        self._partition_epoch: dict[tuple[str, int], int] = {}  # after a reset; else the producer's epoch
        self._sequence_unresolved: set[tuple[str, int]] = set()  # a batch failed: reset once none in flight
        # produce() takes the bare mutex (a Condition's Python-level __enter__/__exit__ were ~10% of the
        # per-record cost); everything that waits or notifies uses the Condition over the same mutex.
        self._mutex = threading.Lock()
        self._lock = threading.Condition(self._mutex)
        self._open: dict[tuple[str, int], OpenBatch] = {}
        self._ready: dict[tuple[str, int], deque[ProducerBatch]] = {}
        self._in_flight: dict[tuple[str, int], int] = {}
        self._undelivered = 0
        self._channels: dict[tuple[int, int], BrokerChannel] = {}  # (broker id, schema id) -> its stream
        self._schemas = TopicSchemas(self._connections)  # typed topics' versions, for produce_arrow
        self.streams_opened = 0  # produce streams opened over the producer's life: more than its brokers after faults
        self._partitioner = PartitionChooser(self._connections, self.batch_size_bytes)
        self._sticky = self._partitioner.sticky  # the same dict: produce() reads it without a call (hot path)
        self._queue_order = itertools.count()  # ProducerBatch.queue_order
        # When the sleeping sender will wake (None while it runs: it looks at every open batch before it
        # sleeps). A batch opened due earlier wakes it; one due later does not, so a burst of records
        # opening batches on many partitions wakes it once, not once per partition.
        self._sender_asleep_until_ms: int | None = None
        self._closed = False
        self._sender = threading.Thread(target=self._run_sender, name="ads-producer-sender", daemon=True)
        self._sender.start()

    # ---- public API ---------------------------------------------------------------

    def produce(self, topic: str, value: bytes | str | None = None, key: bytes | str | None = None,
                headers: list[tuple[str, bytes | str | None]] | dict | None = None, partition: int | None = None,
                on_delivery: Callable | None = None, timestamp: int | None = None) -> DeliveryFuture:
        """Queue one record; the future's value is its ``RecordMetadata`` once acknowledged.

        Hot path (issue #7): nothing here is per record beyond appending to the open
        batch's lists; the future shares its batch's outcome, and the sender thread is
        woken only when a batch is sealed, or opened with a linger that ends before it would wake.
        """
        if self._closed:
            raise InvalidRequestError("producer is closed")
        key_bytes = key if key is None or type(key) is bytes else _to_bytes(key)
        value_bytes = value if value is None or type(value) is bytes else _to_bytes(value)
        header_list = None if headers is None else _normalize_headers(headers)
        if timestamp is not None and not _is_timestamp_ms(timestamp):
            # Checked here: a value Arrow cannot store would otherwise fail the whole batch when it is built.
            raise InvalidRequestError(f"timestamp must be an int of ms since the epoch, got {timestamp!r}")
        sticky = partition is None and key_bytes is None
        number = self._sticky.get(topic) if sticky else None
        if number is None:
            number = self._partitioner.choose(topic, key_bytes, partition)
        size = (len(value_bytes) if value_bytes else 0) + (len(key_bytes) if key_bytes else 0) + 16
        if header_list:  # the batch's size is this estimate until it is built (``OpenBatch``)
            size += sum(len(header["key"]) + len(header["value"] or b"") + 8 for header in header_list)
        created_ms = time.time_ns() // 1_000_000
        with self._mutex:
            if self._undelivered >= BUFFERED_RECORDS_MAX:
                self._lock.wait_for(lambda: self._undelivered < BUFFERED_RECORDS_MAX or self._closed, timeout=60)
            batch = self._open.get((topic, number))
            if batch is None:
                batch = self._open[(topic, number)] = OpenBatch(topic, number, created_ms)
                asleep_until_ms = self._sender_asleep_until_ms
                if asleep_until_ms is not None and created_ms + self.linger_ms < asleep_until_ms:
                    self._lock.notify_all()
            future = DeliveryFuture(batch.outcome, len(batch.values))
            batch.keys.append(key_bytes)
            batch.values.append(value_bytes)
            batch.headers.append(header_list)
            batch.timestamps_ms.append(timestamp if timestamp is not None else created_ms)
            batch.size_bytes += size
            self._undelivered += 1
            if sticky:
                self._partitioner.count_sticky(topic, number, size)
            if batch.size_bytes >= self.batch_size_bytes:
                self._seal_locked((topic, number))
                self._lock.notify_all()
        if on_delivery is not None:
            future.on_delivery(on_delivery)
        return future

    def produce_arrow(self, topic: str, batch: pa.RecordBatch | pa.Table, partition: int | None = None,
                      schema_version: int | None = None) -> Future:
        """Send a ready batch as one unit: PRODUCE_SCHEMA columns (only ``value`` required) to a Kafka-shaped
        topic; to a typed topic, its columns by name (``client/typed.py``: checked and cast to the latest
        registered version, or to ``schema_version``), with optional ``timestamp``, ``key``, ``headers``."""
        self._check_open()
        if isinstance(batch, pa.Table):
            batch = batch.combine_chunks().to_batches()[0] if batch.num_rows else None
        if batch is None or batch.num_rows == 0:
            raise InvalidRequestError("produce_arrow needs a non-empty batch")
        if schema_version is not None or is_typed_batch(batch):
            named = schema_version if schema_version is not None else schema_id_of(batch.schema) or None
            conformed = fit_to_latest(self._schemas, batch, topic, named)
        else:
            conformed = conform_produce_batch(batch)
        number = self._partitioner.choose(topic, None, partition)
        future: Future = Future()
        item = ProducerBatch(topic, number, batch=conformed, arrow_future=future, record_count=conformed.num_rows,
                             created_ms=now_ms(), deadline_ms=now_ms() + self.delivery_timeout_ms,
                             size_bytes=conformed.nbytes)
        with self._lock:
            self._undelivered += conformed.num_rows
            if partition is None:
                self._partitioner.count_sticky(topic, number, conformed.nbytes)
            # Records produce() left in the partition's open batch were called first: they go first.
            self._seal_locked((topic, number))
            self._enqueue_locked(item)
            self._lock.notify_all()
        return future

    def flush(self, timeout: float | None = 30) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            for key in list(self._open):
                self._seal_locked(key)
            self._lock.notify_all()
            while self._undelivered and not self._closed:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                self._lock.wait(remaining if remaining is not None else 1.0)
            return self._undelivered

    def close(self, timeout: float = 30) -> None:
        if self._closed:
            return
        self.flush(timeout)
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        self._sender.join(5)
        for channel in list(self._channels.values()):
            channel.close()
        self._fail_everything(RequestTimedOutError("producer closed before delivery"))
        if self._owns_connections:
            self._connections.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- helpers -------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidRequestError("producer is closed")

    # ---- batching ------------------------------------------------------------------

    def _seal_locked(self, key: tuple[str, int]) -> None:
        open_batch = self._open.pop(key, None)
        if open_batch is None or not open_batch.values:
            return
        item = ProducerBatch(key[0], key[1], records=open_batch, outcome=open_batch.outcome,
                             record_count=len(open_batch.values), created_ms=open_batch.created_ms,
                             deadline_ms=open_batch.created_ms + self.delivery_timeout_ms,
                             size_bytes=open_batch.size_bytes)
        self._enqueue_locked(item)

    def _enqueue_locked(self, item: ProducerBatch) -> None:
        key = (item.topic, item.partition)
        item.queue_order = next(self._queue_order)
        if self.idempotent:
            item.base_sequence = self._next_sequence.get(key, 0)
            self._next_sequence[key] = item.base_sequence + item.record_count
        self._ready.setdefault(key, deque()).append(item)

    def _ensure_producer_id(self) -> None:
        if not self.idempotent or self._producer_id >= 0:
            return
        answer = self._connections.call_any(wire.ACTION_INIT_PRODUCER_ID, {}, self.request_timeout_ms)
        self._producer_epoch = int(answer["producer_epoch"])
        self._producer_id = int(answer["producer_id"])

    def _run_sender(self) -> None:
        next_overdue_check = 0.0
        while True:
            if time.monotonic() >= next_overdue_check:
                next_overdue_check = time.monotonic() + OVERDUE_CHECK_INTERVAL_S
                for channel in list(self._channels.values()):
                    channel.fail_overdue()
            with self._lock:
                if self._closed:
                    return
                now = now_ms()
                wake_ms = now + OVERDUE_CHECK_INTERVAL_MS
                for key, open_batch in list(self._open.items()):
                    # A batch sealed on linger (not full) waits until its partition has nothing in
                    # flight or queued, so acknowledgements clock small batches: at a moderate steady
                    # rate the partition sends one batch per round trip, as large as the round trip
                    # lets it grow, instead of filling the in-flight window with tiny ones that each
                    # cost the brokers a replicated append (ADS RF=3 at 5k records/s, linger.ms=1:
                    # e2e p50/p99 36-44/80-95 ms with the window of 5 kept full, 14/26-28 ms with
                    # one). Full batches are sealed at once and use the whole window (throughput).
                    # Not idle: its partition's answer wakes the sender (``_on_response``).
                    if not self._idle_locked(key):
                        continue
                    if now - open_batch.created_ms >= self.linger_ms:
                        self._seal_locked(key)
                    else:
                        wake_ms = min(wake_ms, open_batch.created_ms + self.linger_ms)
                sendable = self._take_sendable_locked(now)
                if not sendable:
                    # Sleep until the next linger or retry backoff ends, not a fixed poll: a record opening a
                    # batch wakes the sender (``produce``), so linger.ms=0 sends at once, and an idle
                    # producer does not wake every millisecond.
                    wake_ms = self._next_retry_ms_locked(now, wake_ms)
                    self._sender_asleep_until_ms = wake_ms
                    self._lock.wait(max(1, wake_ms - now) / 1000)
                    self._sender_asleep_until_ms = None
                    continue
            for item in sendable:
                self._send(item)

    def _next_retry_ms_locked(self, now: int, wake_ms: int) -> int:
        """``wake_ms``, or earlier if a queue's head waits for its retry backoff to end before that. (A head
        held by its partition's full window or unresolved sequences waits for an answer, which wakes the
        sender.)"""
        for queue in self._ready.values():
            if queue and now < queue[0].retry_not_before_ms < wake_ms:
                wake_ms = queue[0].retry_not_before_ms
        return wake_ms

    def _idle_locked(self, key: tuple[str, int]) -> bool:
        return not self._ready.get(key) and not self._in_flight.get(key, 0)

    def _take_sendable_locked(self, now: int) -> list[ProducerBatch]:
        for key in [k for k in self._sequence_unresolved if self._in_flight.get(k, 0) == 0]:
            self._reset_sequences_locked(key)
        taken = []
        for key, queue in self._ready.items():
            if key in self._sequence_unresolved:
                continue
            while queue and self._in_flight.get(key, 0) < self.max_in_flight:
                head = queue[0]
                if head.retry_not_before_ms > now:
                    break
                queue.popleft()
                if head.deadline_ms <= now:
                    self._finish_locked(head, None, _expired(head, key, self.delivery_timeout_ms))
                    if key in self._sequence_unresolved:
                        break
                    continue
                self._in_flight[key] = self._in_flight.get(key, 0) + 1
                taken.append(take_coalesced(head, queue, now, self.request_bytes_max))
        return taken

    def _reset_sequences_locked(self, key: tuple[str, int]) -> None:
        """A new epoch for the partition, its queued batches renumbered from 0 (see the module docstring)."""
        self._sequence_unresolved.discard(key)
        if self._producer_id >= 0:
            self._partition_epoch[key] = self._partition_epoch.get(key, self._producer_epoch) + 1
        kept: deque[ProducerBatch] = deque()
        for item in self._ready.get(key, ()):
            if item.maybe_written:
                error = item.last_error or RequestTimedOutError(f"{key[0]}-{key[1]}: outcome unknown")
                self._finish_locked(item, None, error, unresolved=False)
            else:
                kept.append(item)
        sequence = 0
        for item in kept:
            item.base_sequence, sequence = sequence, sequence + item.record_count
        self._next_sequence[key] = sequence
        self._ready[key] = kept
        log.info("%s-%s: sequences reset after a failed batch (epoch %s)", key[0], key[1],
                 self._partition_epoch.get(key, self._producer_epoch))

    def _send(self, item: ProducerBatch) -> None:
        item.attempts += 1
        try:
            self._ensure_producer_id()
            meta, _ = self._connections.leader_of(item.topic, item.partition)
            channel = self._channel_for(meta.leader, item.materialize().schema)
            channel.send(item, {"topic": item.topic, "partition": item.partition, "acks": self.acks,
                                "timeout_ms": self.request_timeout_ms, "producer_id": self._producer_id,
                                "producer_epoch": self._partition_epoch.get((item.topic, item.partition),
                                                                            self._producer_epoch),
                                "base_sequence": item.base_sequence},
                         self._on_response)
        except Exception as exc:
            self._on_response(item, None, wire.to_ads_error(exc))

    def _channel_for(self, broker_id: int, schema: pa.Schema) -> BrokerChannel:
        # One stream per broker and schema: Kafka-shaped batches share one, each typed version has its own.
        stream_key = (broker_id, schema_id_of(schema))
        channel = self._channels.get(stream_key)
        if channel is None or channel.broken or not channel.schema.equals(schema, check_metadata=True):
            address = self._connections.broker(broker_id)
            client = self._connections.client_for(address.host, address.port)
            channel = BrokerChannel(client, broker_id, self.request_timeout_ms + ANSWER_MARGIN_MS,
                                    on_unsolicited_error=lambda error: self._connections.mark_stale(),
                                    transport=self._connections.transport, address=(address.host, address.port),
                                    schema=schema)
            previous = self._channels.get(stream_key)
            if previous is not None and not previous.broken:
                previous.close()  # another topic's version under the same id: one stream per key at a time
            self._channels[stream_key] = channel
            self.streams_opened += 1
        return channel

    def _on_response(self, item: ProducerBatch, base_offset: int | None, error: AdsError | None) -> None:
        with self._lock:
            key = (item.topic, item.partition)
            self._in_flight[key] = max(0, self._in_flight.get(key, 0) - 1)
            if error is not None and getattr(error, "code", None) not in REFUSED_BEFORE_APPEND:
                item.maybe_written = True
            if item.parts is not None and getattr(error, "code", None) == ErrorCode.RECORD_TOO_LARGE:
                self._split_refused_locked(item)
            elif (error is not None and self._may_retry(error) and not self._closed and now_ms() < item.deadline_ms
                  and item.attempts <= self.retries):
                item.last_error = error
                self._connections.mark_stale()
                item.retry_not_before_ms = now_ms() + min(1000, self.retry_backoff_ms * item.attempts)
                put_back(self._ready.setdefault(key, deque()), item)
            else:
                if error is not None and not isinstance(error, AdsError):
                    error = wire.to_ads_error(error)
                self._finish_locked(item, base_offset, error)
            self._lock.notify_all()

    def _split_refused_locked(self, item: ProducerBatch) -> None:
        """A coalesced request the topic refused as too large (its ``max.message.bytes`` is below
        ``max.request.size``): its parts go back to their places in the queue, each to be sent on its
        own, so the outcome is what it would have been without coalescing."""
        queue = self._ready.setdefault((item.topic, item.partition), deque())
        for part in item.parts:
            part.solo = True
            # An earlier attempt of the whole that ended without a definite refusal may have stored it.
            part.maybe_written = part.maybe_written or item.maybe_written
            put_back(queue, part)

    def _may_retry(self, error: AdsError) -> bool:
        # An idempotent batch refused as out of order waits for an earlier batch's retry to land
        # first; the broker's sequence check keeps the log in order and free of duplicates.
        return error.retriable or (self.idempotent and error.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)

    def _finish_locked(self, item: ProducerBatch, base_offset: int | None, error: AdsError | None,
                       unresolved: bool = True) -> None:
        if error is not None:
            # How many times the batch went out: after more than one, a failure cannot prove it is not stored.
            error.attempts = item.attempts
            if self._resets_sequences and unresolved:
                self._sequence_unresolved.add((item.topic, item.partition))
        self._undelivered -= item.record_count
        item.complete(base_offset, error)

    def _fail_everything(self, error: AdsError) -> None:
        with self._lock:
            for key in list(self._open):
                self._seal_locked(key)
            for queue in self._ready.values():
                while queue:
                    self._finish_locked(queue.popleft(), None, error)
            self._lock.notify_all()


def _expired(item: ProducerBatch, key: tuple[str, int], delivery_timeout_ms: int) -> AdsError:
    """The error of a batch whose delivery timeout passed: the last broker error if there was one."""
    message = f"{key[0]}-{key[1]}: not delivered within delivery.timeout.ms={delivery_timeout_ms}"
    if item.last_error is None:
        return RequestTimedOutError(message)
    return error_for(item.last_error.code, f"{message}; last error: {item.last_error.message or item.last_error}")


def _is_timestamp_ms(value) -> bool:
    return type(value) is int and TIMESTAMP_MS_MIN <= value <= TIMESTAMP_MS_MAX


def _to_bytes(value) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise InvalidRequestError(f"keys and values must be bytes or str, got {type(value).__name__}")


def _normalize_headers(headers) -> list[dict] | None:
    if headers is None:
        return None
    items = headers.items() if isinstance(headers, dict) else headers
    return [{"key": str(k), "value": _to_bytes(v)} for k, v in items]


__all__ = ["Producer", "RecordMetadata", "RecordTooLargeError"]
