"""The readers of the "ads" source: the I/O shell around ``planning.py``.

Owns what happens on the driver (look at the cluster, ask ``planning`` for
offsets and ranges) and on executors (fetch one offset range as Arrow and hand it
to Spark as record batches of the Kafka schema, never row by row, with the next
fetch already running on a read-ahead thread: ``prefetch.py``).

Readers are pickled to executors, so they hold only the parsed options and small
plain values; clients come from ``ads_spark.spark.clients`` inside ``read()`` and the planner
methods. The streaming reader's planner instance lives in one Python process for
the whole query, which is where its trigger clock and AvailableNow target live.

Data loss at read time (offsets removed by retention after planning, a topic
re-created, records planned but no longer below the HW) follows failOnDataLoss
exactly as planning does: an error naming the option, or a warning and the
earliest offsets still available.

Security (SASL): a reader registers the query's login in the driver process and keeps only its
handle (``clients.register_login``); every planning call uses ``clients.driver_config``, which
authenticates once and renews the token past half its life, and every planned partition travels
wrapped with the current token (``TokenPartition``), so executors read with a token that has at
least half its life left and never see the password. The hook for a long stream is ``partitions``
(planned each micro-batch on the driver); the executor-side reader Spark pickles once per query
carries no token at all.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from ads_spark.errors import AdsError, OffsetOutOfRangeError
from ads_spark.protocol.records import now_ms
from ads_spark.spark import clients
from ads_spark.spark.source import lookups, truncation
from ads_spark.spark.source.group_commit import GroupOffsetsCommitter
from ads_spark.spark.source.offsets import SourceOffset, latest_of
from ads_spark.spark.source.options import SourceOptions
from ads_spark.spark.source.planning import (
    AdmissionLimits,
    DataLoss,
    OffsetRange,
    initial_offset,
    next_end,
    partitions_without_start,
    plan_batch,
    plan_ranges,
    raise_or_warn,
    split_ranges,
    timestamp_lookups,
)
from ads_spark.spark.source.prefetch import read_ahead
from ads_spark.spark.source.resolution import DeferredRange, check_starting_timestamps, defer_batch
from ads_spark.spark.source.schema import to_spark_batches
from ads_spark.spark.source.typed import predicate_of, to_spark_batches as typed_batches

log = logging.getLogger("ads.spark.source")

READ_STEP_RECORDS_INITIAL = 4096  # first sub-range of a task; later ones aim at READ_STEP_BYTES_TARGET
READ_STEP_RECORDS_MAX = 1 << 20
READ_STEP_BYTES_TARGET = 8 << 20
FETCH_BYTES_MAX = 8 << 20  # per fetch request
# A new leader's HW may lag behind the planned end until its followers fetch again (KIP-207), and
# until an ISR member that died with the old leader is dropped: replica.lag.time.max.ms (30 s by
# default) after a ZooKeeper session timeout and an election. Only after that is an empty read taken
# for lost data; Spark's Kafka source waits kafkaConsumer.pollTimeoutMs (120 s by default) alike.
EMPTY_FETCH_WAIT_S_MAX = 120.0
EMPTY_FETCH_BACKOFF_S = 0.2


# ---- executor side: one offset range -> Arrow batches ------------------------------


def read_range(options: SourceOptions, r: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Records [start, end) of one partition as Spark-schema batches, in bounded steps."""
    config = options.client_config
    try:
        yield from _read_range(options, r)
    except AdsError:
        raise
    except Exception:
        clients.evict("consumer", config)
        clients.evict("admin", config)
        raise


def _read_range(options: SourceOptions, r: OffsetRange) -> Iterator[pa.RecordBatch]:
    from ads_spark.client import TopicPartition

    consumer, admin = clients.consumer_for(options.client_config), clients.admin_for(options.client_config)
    tp = TopicPartition(r.topic, r.partition)
    if not _same_incarnation(admin, r, options.fail_on_data_loss):
        return
    position, step_records, empty_since = r.start_offset_inclusive, READ_STEP_RECORDS_INITIAL, None
    typed = options.typed
    typed_read = typed.read_request() if typed is not None else None
    while position < r.end_offset_exclusive:
        upper = min(r.end_offset_exclusive, position + step_records)
        try:
            # next_offset passes the offsets compaction removed (a compacted topic has gaps, even at a range's
            # end), so a range whose last offsets are gone completes, and no step asks for a gap twice.
            # Rows past the step up to the range's end are kept: the batch holding the step's end is fetched once.
            fetched = consumer.fetch_range(tp, position, upper, max_bytes=FETCH_BYTES_MAX, typed=typed_read,
                                           keep_until_exclusive=r.end_offset_exclusive)
        except OffsetOutOfRangeError:
            position = _skip_to_log_start(admin, r, position, options.fail_on_data_loss)
            continue
        table = fetched.table
        if fetched.next_offset <= position:  # nothing readable at the position: not (yet) below the HW
            empty_since = empty_since or time.monotonic()
            if time.monotonic() - empty_since <= EMPTY_FETCH_WAIT_S_MAX:
                time.sleep(EMPTY_FETCH_BACKOFF_S)
                continue
            raise_or_warn([DataLoss(r.topic, r.partition, f"offsets {position}..{r.end_offset_exclusive - 1} "
                                                          f"were planned but are no longer below the high "
                                                          f"watermark (log truncated?)")],
                          options.fail_on_data_loss)
            return
        if table.num_rows:
            yield from (typed_batches(table, typed, r.partition) if typed is not None
                        else to_spark_batches(table, r.topic, r.partition, options.include_headers))
        # Steps are offset distances: sized by bytes per OFFSET read, so a sparse (compacted) stretch takes
        # longer steps instead of one fetch per few records; never more than READ_STEP_RECORDS_MAX offsets.
        bytes_per_offset = max(1e-3, table.nbytes / (fetched.next_offset - position))
        step_records = int(min(READ_STEP_RECORDS_MAX, max(1, READ_STEP_BYTES_TARGET // bytes_per_offset)))
        empty_since, position = None, fetched.next_offset


def _same_incarnation(admin, r: OffsetRange, fail_on_data_loss: bool) -> bool:
    if not r.topic_id:
        return True
    current = {d.topic: d.topic_id for d in admin.describe_topics([r.topic])}.get(r.topic)
    if current == r.topic_id:
        return True
    raise_or_warn([DataLoss(r.topic, None, f"the topic was re-created (incarnation {r.topic_id} -> {current}) "
                                           f"after offsets {r.start_offset_inclusive}..{r.end_offset_exclusive - 1} "
                                           f"were planned")], fail_on_data_loss)
    return False


def _skip_to_log_start(admin, r: OffsetRange, position: int, fail_on_data_loss: bool) -> int:
    from ads_spark.client import TopicPartition

    tp = TopicPartition(r.topic, r.partition)
    log_start = int(admin.list_offsets([tp], "earliest")[tp])
    if log_start <= position:
        raise OffsetOutOfRangeError(f"{r.topic}-{r.partition}: offset {position} is out of range although the "
                                    f"log starts at {log_start}")
    raise_or_warn([DataLoss(r.topic, r.partition, f"offsets {position}..{log_start - 1} were removed by retention "
                                                  f"before they were read")], fail_on_data_loss)
    return log_start


def _read_resolved(options: SourceOptions, piece: DeferredRange) -> Iterator[pa.RecordBatch]:
    """A batch task whose offsets follow earliest/latest/timestamps: resolved now, then read."""
    admin = clients.admin_for(options.client_config)
    yield from read_range(options, lookups.resolve_piece(admin, piece, options.starting_timestamp_strategy))


@dataclass(frozen=True)
class TokenPartition(InputPartition):
    """A planned partition and the token (SASL) its task authenticates with; the token is kept out of repr."""

    inner: InputPartition
    token: str = field(repr=False)


def _secured(options: SourceOptions) -> SourceOptions:
    """On the driver: the login moves into this process's registry; the reader keeps its handle."""
    if options.login is None:
        return options
    return replace(options, login=None, login_handle=clients.register_login(options.client_config, options.login))


def _driver_config(options: SourceOptions) -> dict:
    return clients.driver_config(options.client_config, options.login_handle)


def _with_token(options: SourceOptions, config: dict, partitions: list) -> list:
    """Each partition wrapped with the token of ``config`` (the driver's), when the query uses SASL."""
    if not options.login_handle:
        return partitions
    return [TokenPartition(p, config[clients.TOKEN_KEY]) for p in partitions]


def _read_partition(options: SourceOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if isinstance(partition, TokenPartition):
        options = replace(options, client_config=clients.with_token(options.client_config, partition.token))
        partition = partition.inner
    if isinstance(partition, DeferredRange):
        return read_ahead(lambda: _read_resolved(options, partition))
    if not isinstance(partition, OffsetRange):  # Spark's placeholder when there is nothing to read
        return iter(())
    return read_ahead(lambda: read_range(options, partition))


# ---- batch --------------------------------------------------------------------------


class AdsBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions):
        self.options = _secured(options)

    def partitions(self) -> list[OffsetRange | DeferredRange]:
        """Planned once per DataFrame (pyspark keeps the result), so ends that follow an option
        are resolved again by each task when it reads (``resolution.py``); planning checks them
        now too, so that a bad option fails before any task runs."""
        o = self.options
        config = _driver_config(o)
        admin = clients.admin_for(config)
        snapshot = lookups.take_snapshot(admin, o.subscription, require_existing=True)
        start_ts = lookups.offsets_for_timestamps(admin, timestamp_lookups(o.starting, snapshot))
        start_ts = check_starting_timestamps(o.starting, snapshot, start_ts, o.starting_timestamp_strategy)
        end_ts = lookups.offsets_for_timestamps(admin, timestamp_lookups(o.ending, snapshot))
        ranges = plan_batch(o.starting, o.ending, snapshot, start_ts, end_ts, o.fail_on_data_loss)
        pieces = split_ranges(ranges, o.min_partitions, o.max_records_per_partition)
        return _with_token(o, config, defer_batch(pieces, o.starting, o.ending, snapshot))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_partition(self.options, partition)


class AdsFilteringBatchReader(AdsBatchReader):
    """A batch reader that takes Spark's pushed filters (option ``pushFilters=true``, with Spark's
    ``spark.sql.python.filterPushdown.enabled``): those on a typed topic's user columns that
    ``typed.predicate_of`` can state are applied here (brokers skip batches, ``typed.to_spark_batches`` keeps the
    matching rows), so Spark does not evaluate them again; every other filter is handed back to Spark."""

    def pushFilters(self, filters):
        typed = self.options.typed
        taken = []
        for spark_filter in filters:
            predicate = predicate_of(spark_filter, typed.user_schema) if typed is not None else None
            if predicate is None:
                yield spark_filter
            else:
                taken.append(predicate)
        if taken:
            self.options = replace(self.options, typed=replace(typed, predicates=typed.predicates + tuple(taken)))


# ---- streaming ----------------------------------------------------------------------


class AdsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions):
        self.options = _secured(options)
        # Planner-process state (never needed on executors, harmless when pickled):
        self._last_trigger_ms: int | None = None  # when the last non-empty batch was admitted
        self._available_now_target: dict | None = None  # offsets JSON seen at AvailableNow start
        self._latest_seen: dict | None = None  # HWs of the last snapshot, for reportLatestOffset
        self._absent_reported: frozenset = frozenset()  # subscribed topics already reported deleted
        self._group_committer = None  # ads.commitOffsetsToGroup: made on first use (a thread; never pickled)

    def _snapshot(self):
        """Partitions that cannot answer now (no leader) are left out: they keep their offsets (lookups.py)."""
        admin = clients.admin_for(_driver_config(self.options))
        return admin, lookups.take_snapshot(admin, self.options.subscription, require_existing=False)

    def _complete_snapshot(self):
        """Every existing partition, waiting (bounded) for leaders: startingOffsets applies to each of them."""
        admin = clients.admin_for(_driver_config(self.options))
        return admin, lookups.take_complete_snapshot(admin, self.options.subscription)

    def initialOffset(self) -> dict:
        admin, snapshot = self._complete_snapshot()
        ts_offsets = lookups.offsets_for_timestamps(admin, timestamp_lookups(self.options.starting, snapshot))
        ts_offsets = check_starting_timestamps(self.options.starting, snapshot, ts_offsets,
                                               self.options.starting_timestamp_strategy)
        first = initial_offset(self.options.starting, snapshot, ts_offsets, self.options.fail_on_data_loss)
        return truncation.with_epochs(first, None, snapshot).to_json_dict()

    def getDefaultReadLimit(self) -> ReadLimit:
        o = self.options
        if o.max_offsets_per_trigger is not None:
            return ReadMaxRows(o.max_offsets_per_trigger)
        if o.max_bytes_per_trigger is not None:
            return ReadMaxBytes(o.max_bytes_per_trigger)
        if o.min_offsets_per_trigger is not None:
            return ReadMinRows(o.min_offsets_per_trigger)
        return ReadAllAvailable()

    def admission_limits(self, limit: ReadLimit) -> AdmissionLimits | None:
        """All option limits apply together unless Spark asks for everything (Trigger.Once)."""
        if isinstance(limit, ReadAllAvailable):
            return None
        o = self.options
        max_rows, max_bytes, min_rows = o.max_offsets_per_trigger, o.max_bytes_per_trigger, o.min_offsets_per_trigger
        if isinstance(limit, ReadMaxRows):
            max_rows = min(limit.max_rows, max_rows or limit.max_rows)
        elif isinstance(limit, ReadMaxBytes):
            max_bytes = min(limit.max_bytes, max_bytes or limit.max_bytes)
        elif isinstance(limit, ReadMinRows):
            min_rows = limit.min_rows
        return AdmissionLimits(max_rows, min_rows, o.max_trigger_delay_ms, max_bytes)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        self._commit_to_group(start)  # Spark is done with ``start``: see group_commit.py for why here too
        admin, snapshot = self._snapshot()
        now = now_ms()
        if self._last_trigger_ms is None:
            self._last_trigger_ms = now
        limits = self.admission_limits(limit)
        start_offset = SourceOffset.from_json_dict(start)
        rewound, snapshot = self._rewind_truncated(start_offset, snapshot)
        if rewound is not None:  # a batch that only moves truncated partitions back (truncation.py)
            self._latest_seen = latest_of(snapshot).to_json_dict()
            return rewound.to_json_dict()
        record_bytes = {}
        if limits is not None and limits.max_bytes is not None:
            consumer = clients.consumer_for(_driver_config(self.options))
            hws = latest_of(snapshot).offsets
            record_bytes = lookups.record_bytes_estimates(consumer, start_offset.offsets, hws)
        target = SourceOffset.from_json_dict(self._available_now_target) if self._available_now_target else None
        end = next_end(start_offset, snapshot, limits, now_ms=now, last_trigger_ms=self._last_trigger_ms,
                       record_bytes=record_bytes, target=target,
                       fail_on_data_loss=self.options.fail_on_data_loss,
                       reported_absent=self._absent_reported)
        end = truncation.with_epochs(end, start_offset, snapshot).to_json_dict()
        if snapshot:  # a deleted topic is kept in the offsets (SPARK-41375); report it once, not every trigger
            self._absent_reported = frozenset(set(start_offset.topic_ids) - set(snapshot))
        if end != start:
            self._last_trigger_ms = now
        self._latest_seen = latest_of(snapshot).to_json_dict()
        return end

    def _rewind_truncated(self, start: SourceOffset, snapshot):
        """KIP-320: after a leader change, ask the leader whether what was read below ``start`` is still in its
        log; an unclean election's truncation fails the query or rewinds (failOnDataLoss, truncation.py).
        Returns the rewound offset or None, and the snapshot less partitions whose leader could not answer
        (left unchecked, they must not move this trigger)."""
        wanted = truncation.offsets_to_check(start, snapshot)
        if not wanted:
            return None, snapshot
        answers = lookups.epoch_end_offsets(clients.consumer_for(_driver_config(self.options)), wanted)
        snapshot = lookups.without_partitions(snapshot, set(wanted) - set(answers))
        return truncation.rewind(start, truncation.truncations(start, answers),
                                 self.options.fail_on_data_loss), snapshot

    def reportLatestOffset(self) -> dict | None:
        """The high watermarks seen by the last latestOffset call (no extra request)."""
        return self._latest_seen

    def prepareForTriggerAvailableNow(self) -> None:
        _, snapshot = self._complete_snapshot()
        self._available_now_target = latest_of(snapshot).to_json_dict()

    def partitions(self, start: dict, end: dict) -> list[OffsetRange]:
        start_offset, end_offset = SourceOffset.from_json_dict(start), SourceOffset.from_json_dict(end)
        missing = partitions_without_start(start_offset, end_offset)
        config = _driver_config(self.options)  # the micro-batch hook: a token past half its life is renewed
        new_starts = {}
        if missing:
            new_starts = lookups.log_start_offsets(clients.admin_for(config), missing)
        ranges = plan_ranges(start_offset, end_offset, new_starts)
        return _with_token(self.options, config, split_ranges(ranges, self.options.min_partitions,
                                                               self.options.max_records_per_partition))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_partition(self.options, partition)

    def commit(self, end: dict) -> None:
        """Offsets live in Spark's checkpoint; with ads.commitOffsetsToGroup they are also committed to that
        consumer group, for watching the query's lag (group_commit.py). Never fails the query."""
        self._commit_to_group(end)

    def _commit_to_group(self, offsets: dict | None) -> None:
        group_id = self.options.commit_offsets_to_group
        if group_id is None or not offsets:
            return
        if self._group_committer is None:
            self._group_committer = GroupOffsetsCommitter(group_id, clients.admin_for)
        try:
            self._group_committer.submit(_driver_config(self.options), offsets)
        except Exception as exc:  # e.g. a SASL login failing now: the query's own calls will report it
            log.warning("ads source: offsets not committed to consumer group '%s': %s", group_id, exc)

    def stop(self) -> None:
        """The query stopped: give the last offsets a bounded time to reach the group."""
        if self._group_committer is not None:
            self._group_committer.close()


class RejectedStreamReader(DataSourceStreamReader):
    """Stands in for a stream reader whose options were rejected, and raises that error on first use.

    pyspark 4.3's streaming source runner hides any exception raised while the reader is
    created behind an UnboundLocalError of its own (its ``finally: reader.stop()``), so the
    user would not see which option is wrong. Raising from ``initialOffset`` instead shows
    our message as the query's error.
    """

    def __init__(self, error: Exception):
        self.error = error

    def _fail(self, *_args, **_kwargs):
        raise self.error

    initialOffset = latestOffset = partitions = read = _fail
