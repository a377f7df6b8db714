"""The writers of the "ads" sink: Arrow batches from Spark to ``Producer.produce_arrow``.

Owns the task-side write loop and the driver-side commit/abort. Each Arrow batch
Spark hands a task is converted once (``options.to_produce_rows``), grouped by
topic and partition with numpy (``partitioning.py``) and sent as one produce
batch per partition; no Python runs per row. A task succeeds only when every
batch it sent is acknowledged (acks=all by default): any record that cannot be
written fails the task with the producer's error, and Spark retries it.

Streaming writes are exactly-once per offset across replays: each task writes
under a producer id derived from (query id, micro-batch id, task partition) and
numbers its produce batches from 0 per partition; a task retried, or a
micro-batch re-executed after the query restarts from its checkpoint, sends the
same batches with the same numbers and the brokers' idempotence drops the ones
they already hold (``derived_producer_id``). This relies on a re-executed
micro-batch seeing the same rows in the same order per task, which holds for
a deterministic plan over the offsets the checkpoint recorded. Batch writes
(no query) and ``ads.enable.idempotence=false`` are at-least-once, as Spark's
Kafka sink is.

Batch writes: Spark only lets Python data sources write in mode("append") or
mode("overwrite"); the default (errorifexists) fails in Spark before this code
runs. ``overwrite`` is refused here with a message pointing to append.

Writers are pickled to executors; they hold options and the schema only.
The producer comes from the per-process cache in ``ads_spark.spark.clients``.

Security (SASL): the writer is made on the driver, which authenticates there (``_validated``:
a wrong password fails ``save()``/``start()`` at once) and gives the writer ``sasl.token`` in
place of the login. Spark pickles a streaming writer once per query, so its tasks keep that
token: a streaming write cannot outlive the broker's ``authentication.token.lifetime.ms``; its
tasks then fail with SASL_AUTHENTICATION_FAILED and a restart from the checkpoint (exactly-once)
authenticates again.
"""

from __future__ import annotations

import hashlib
import logging
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Mapping

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from ads_spark.errors import (
    InvalidConfigError,
    RequestTimedOutError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from ads_spark.spark.sink.options import (
    BATCH_MODE_HINT,
    SinkOptions,
    check_input_schema,
    parse_sink_options,
    to_produce_rows,
)
from ads_spark.spark.sink.partitioning import assign_partitions, chunk_bounds, group_by_topic, group_rows
from ads_spark.spark.sink.typed import plan_typed_sink
from ads_spark.spark.options import lower_keys, option_bool
from ads_spark.spark import clients

log = logging.getLogger("ads.spark.sink")

IN_FLIGHT_BATCHES_MAX = 64  # produce batches a task may have unacknowledged before it waits
IN_FLIGHT_BYTES_MAX = 64 << 20  # and their bytes (so a task holds at most this much unacknowledged data)
# A produce batch's rows in Arrow beyond their key and value bytes: timestamp 8, three offsets 4 each, and
# validity bits. An estimate to cut by; a chunk whose Arrow size still exceeds the limit is halved.
ROW_OVERHEAD_BYTES = 24

QUERY_ID_PROPERTY = "sql.streaming.queryId"  # local properties Spark sets on streaming tasks
BATCH_ID_PROPERTY = "streaming.sql.batchId"


@dataclass(frozen=True)
class WriteTaskIdentity:
    """What identifies one task's write, stable across re-executions of the same micro-batch."""

    query_id: str | None  # streaming query id; None for batch writes
    batch_id: int | None  # micro-batch id; None for batch writes
    task_partition_id: int
    attempt_number: int

    @classmethod
    def current(cls) -> "WriteTaskIdentity":
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is None:
            return cls(None, None, 0, 0)
        batch_id = context.getLocalProperty(BATCH_ID_PROPERTY)
        return cls(context.getLocalProperty(QUERY_ID_PROPERTY), int(batch_id) if batch_id else None,
                   context.partitionId(), context.attemptNumber())


# Derived producer ids live far above the ids brokers hand out from ZooKeeper blocks (which start
# at 0 and grow by a block per broker start), so the two kinds never meet.
DERIVED_PRODUCER_ID_BASE = 1 << 53
DERIVED_PRODUCER_ID_SPAN = 1 << 52


def derived_producer_id(identity: WriteTaskIdentity) -> int | None:
    """The producer id of a streaming write task: the same for every re-execution of its micro-batch.

    None for batch writes (no query id / batch id): they get a fresh id from a broker and are
    at-least-once across task retries, as Spark's own Kafka sink is.
    """
    if identity.query_id is None or identity.batch_id is None:
        return None
    text = f"{identity.query_id}/{identity.batch_id}/{identity.task_partition_id}".encode()
    digest = int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")
    return DERIVED_PRODUCER_ID_BASE + digest % DERIVED_PRODUCER_ID_SPAN


def producer_config_for(options: SinkOptions, identity: WriteTaskIdentity) -> dict[str, str]:
    """The producer config of one task: with a derived identity when the write can be replayed.

    A re-executed micro-batch (task retry, or the query restarted from its checkpoint)
    reads the same offsets, splits rows into the same produce batches and numbers them
    with the same sequences under the same producer id, so the brokers' idempotence
    drops every batch they already hold and appends only what the failed attempt missed.
    """
    config = dict(options.client_config)
    producer_id = derived_producer_id(identity)
    if producer_id is not None and options.exactly_once:
        config["ads.producer.id"] = str(producer_id)
        config["ads.producer.epoch"] = "0"
    return config


@dataclass
class AdsCommitMessage(WriterCommitMessage):
    identity: WriteTaskIdentity
    records_written: int = 0
    records_by_partition: dict[tuple[str, int], int] = field(default_factory=dict)


@dataclass
class _Sent:
    topic: str
    partition: int
    rows: int
    future: Future
    size_bytes: int = 0


def write_batches(options: SinkOptions, batches: Iterator[pa.RecordBatch]) -> AdsCommitMessage:
    identity = WriteTaskIdentity.current()
    config = producer_config_for(options, identity)
    if "ads.producer.id" in config:
        # Its own producer (sequences start at 0 for this task) over the process's pooled connections.
        from ads_spark.client import Producer

        producer = Producer(config, connections=clients.connections_for(options.client_config))
        try:
            return _write(options, config, identity, batches, producer)
        finally:
            producer.close(timeout=0)
    try:
        return _write(options, config, identity, batches, clients.producer_for(config))
    except Exception as exc:
        if not _is_ads_error(exc):
            clients.evict("producer", config)
        raise


def _write(options: SinkOptions, config: dict[str, str], identity: WriteTaskIdentity,
           batches: Iterator[pa.RecordBatch], producer) -> AdsCommitMessage:
    admin = clients.admin_for(options.client_config)
    partition_counts: dict[str, int] = {}
    chunk_limits: dict[str, int] = {}
    sent: deque[_Sent] = deque()
    in_flight_bytes = 0
    message = AdsCommitMessage(identity)
    for batch_index, batch in enumerate(batches):
        if batch.num_rows == 0:
            continue
        rows = to_produce_rows(batch, options)
        round_robin = identity.task_partition_id + batch_index
        for topic, indices in _rows_by_topic(rows, options):
            count = partition_counts.get(topic) or partition_counts.setdefault(topic, _partition_count(admin, topic))
            keys = _rows_at(rows.records.column("key"), indices)
            explicit = _rows_at(rows.partitions, indices) if rows.partitions is not None else None
            chosen = assign_partitions(keys, explicit, count, round_robin, topic)
            limit = chunk_limits.get(topic) or chunk_limits.setdefault(topic, _chunk_bytes_max(admin, topic, config))
            for partition, subset in group_rows(chosen):
                records = _rows_at(rows.records, indices[subset])
                for records_chunk in _chunks(records, limit):
                    sent.append(_Sent(topic, partition, records_chunk.num_rows,
                                      producer.produce_arrow(topic, records_chunk, partition=partition),
                                      records_chunk.nbytes))
                    in_flight_bytes += records_chunk.nbytes
        while len(sent) > IN_FLIGHT_BATCHES_MAX or (in_flight_bytes > IN_FLIGHT_BYTES_MAX and sent):
            in_flight_bytes -= _collect(sent.popleft(), message, options.delivery_wait_s)
    undelivered = producer.flush(timeout=options.delivery_wait_s)
    while sent:
        _collect(sent.popleft(), message, options.delivery_wait_s)
    if undelivered:
        raise RequestTimedOutError(f"{undelivered} records were not acknowledged within {options.delivery_wait_s}s")
    return message


def _rows_at(rows, indices):
    """``rows.take(indices)`` for ascending, distinct indices, without the copy when they are every row: the
    usual batch (the topic option, null keys) goes to one partition whole, and that copy was ~40% of the
    sink's own CPU (docs/perf/typed-topics.md). The same rows in the same order, so the same cut and replays."""
    count = len(rows)
    if len(indices) == count and (count == 0 or (indices[0] == 0 and indices[-1] == count - 1)):
        return rows
    return rows.take(indices)


def _chunk_bytes_max(admin, topic: str, config: Mapping[str, str]) -> int:
    """The Arrow bytes of one produce batch: ``ads.batch.size`` if set, else the producer's request limit
    (``max.request.size``, 4 MiB) within the topic's ``max.message.bytes``.

    Each produce batch of the sink is one request (a caller-chosen producer id never coalesces), and a
    request costs the brokers about as much as a MiB of data: 1 MiB batches (the sink's cut until
    issue #7's ninth round) cost the brokers 6.6-7.5 us of CPU per 1 KiB row against 2.9 us for the
    batched produce path's 4 MiB requests. A replay cuts the same batches as long as this limit, and
    so the topic's config, is the same (as ``ads.batch.size`` must be).
    """
    if "batch.size" in config:
        return int(config["batch.size"])
    from ads_spark.client.producer_config import DEFAULT_REQUEST_BYTES_MAX

    request_max = int(config.get("max.request.size", DEFAULT_REQUEST_BYTES_MAX))
    try:
        described = admin.describe_configs(topic)
    except TopicAuthorizationFailedError:
        # A producer needs Write and Describe, not DescribeConfigs (Kafka's `--producer` grants none): without
        # it the topic's limit is unknown and the producer's applies (a larger batch is refused, a clear error).
        return max(1, request_max)
    configs = {entry["name"]: entry["value"] for entry in described.get("configs", [])}
    topic_max = int(configs.get("max.message.bytes") or request_max)
    return max(1, min(request_max, topic_max))


def _chunks(records: pa.RecordBatch, max_bytes: int) -> list[pa.RecordBatch]:
    """Zero-copy slices of one partition's rows, each of at most ``max_bytes`` Arrow bytes (a single larger
    row gets a chunk of its own, which the broker refuses as too large, a clear error)."""
    if records.nbytes <= max_bytes:
        return [records]
    import numpy as np
    import pyarrow.compute as pc

    if "value" in records.schema.names:
        row_bytes = ROW_OVERHEAD_BYTES + sum(np.asarray(pc.binary_length(records.column(name)).fill_null(0))
                                             for name in ("key", "value"))
    else:  # a typed topic's rows: their columns' bytes spread evenly (the halving below corrects the estimate)
        row_bytes = np.full(records.num_rows, ROW_OVERHEAD_BYTES + records.nbytes // max(1, records.num_rows))
    pending = deque(records.slice(start, end - start) for start, end in chunk_bounds(row_bytes, max_bytes))
    chunks: list[pa.RecordBatch] = []
    while pending:  # halving ends: every split makes chunks of fewer rows, and one row is never split
        chunk = pending.popleft()
        if chunk.nbytes <= max_bytes or chunk.num_rows == 1:
            chunks.append(chunk)
        else:  # more than the estimate (headers, or many tiny rows): halve, deterministically, in order
            half = chunk.num_rows // 2
            pending.extendleft((chunk.slice(half), chunk.slice(0, half)))
    return chunks


def _rows_by_topic(rows, options: SinkOptions):
    import numpy as np

    if rows.topics is None:
        return [(options.topic, np.arange(rows.records.num_rows))]
    return group_by_topic(rows.topics)


def _partition_count(admin, topic: str) -> int:
    try:
        descriptions = admin.describe_topics([topic])
    except UnknownTopicOrPartitionError:
        descriptions = []
    if not descriptions or not descriptions[0].partitions:
        raise UnknownTopicOrPartitionError(f"topic '{topic}' does not exist; create it first "
                                           f"(ads topics create --topic {topic} ...)")
    return len(descriptions[0].partitions)


def _collect(item: _Sent, message: AdsCommitMessage, wait_s: float) -> int:
    """Wait for one produce batch (its error, if any, fails the task); its bytes."""
    item.future.result(timeout=wait_s)
    message.records_written += item.rows
    key = (item.topic, item.partition)
    message.records_by_partition[key] = message.records_by_partition.get(key, 0) + item.rows
    return item.size_bytes


def _is_ads_error(exc: BaseException) -> bool:
    from ads_spark.errors import AdsError

    return isinstance(exc, AdsError)


def _validated(options: Mapping[str, Any], schema, overwrite: bool) -> SinkOptions:
    if overwrite:
        raise InvalidConfigError(f"mode('overwrite') is not supported: {BATCH_MODE_HINT}")
    parsed = parse_sink_options(options)
    if parsed.login is not None:
        handle = clients.register_login(parsed.client_config, parsed.login)
        parsed = replace(parsed, client_config=clients.driver_config(parsed.client_config, handle), login=None)
    raw = lower_keys(options)
    typed = plan_typed_sink(clients.admin_for(parsed.client_config), parsed.topic, schema,
                            option_bool(raw, "mergeschema", "mergeSchema", False),
                            option_bool(raw, "createtypedtopic", "createTypedTopic", False))
    if typed is None:
        check_input_schema(schema, parsed)
        return parsed
    return replace(parsed, typed=typed)


def _summarise(messages, what: str) -> int:
    written = sum(m.records_written for m in messages if isinstance(m, AdsCommitMessage))
    log.info("ads sink: %s wrote %d records", what, written)
    return written


class AdsBatchWriter(DataSourceArrowWriter):
    def __init__(self, options: SinkOptions):
        self.options = options

    @classmethod
    def create(cls, options: Mapping[str, Any], schema, overwrite: bool) -> "AdsBatchWriter":
        return cls(_validated(options, schema, overwrite))

    def write(self, iterator: Iterator[pa.RecordBatch]) -> AdsCommitMessage:
        return write_batches(self.options, iterator)

    def commit(self, messages) -> None:
        _summarise(messages, "batch write")

    def abort(self, messages) -> None:
        log.warning("ads sink: batch write aborted; %d records already acknowledged stay in the log "
                    "(a log cannot withdraw records)", _summarise(messages, "aborted batch write"))


class AdsStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: SinkOptions):
        self.options = options

    @classmethod
    def create(cls, options: Mapping[str, Any], schema, overwrite: bool) -> "AdsStreamWriter":
        return cls(_validated(options, schema, False))  # complete/update output modes are appends to a log

    def write(self, iterator: Iterator[pa.RecordBatch]) -> AdsCommitMessage:
        return write_batches(self.options, iterator)

    def commit(self, messages, batchId: int) -> None:
        _summarise(messages, f"micro-batch {batchId}")

    def abort(self, messages, batchId: int) -> None:
        log.warning("ads sink: micro-batch %d aborted; %d records already acknowledged stay in the log and "
                    "will be written again when the batch is re-run", batchId,
                    _summarise(messages, f"aborted micro-batch {batchId}"))
