"""Offset planning for the "ads" source, pure: cluster facts in, offsets and ranges out.

Owns every decision about *which offsets* a query reads: resolving
startingOffsets/endingOffsets (earliest, latest, JSON, timestamps) against a
snapshot of the cluster, noticing lost data (a topic deleted or re-created, offsets
removed by retention), picking up new partitions from their earliest offset,
admission control for a micro-batch (maxOffsetsPerTrigger split in proportion to each
partition's backlog, minOffsetsPerTrigger with maxTriggerDelay, a byte budget,
Trigger.AvailableNow's target) and cutting offset ranges into Spark input partitions.

Nothing here opens a socket or reads a clock: the readers (``reader.py``) fetch
the snapshot, timestamp lookups and ``now_ms`` and pass them in, so every rule is
tested with plain values.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import Collection, Hashable, Mapping, Sequence, TypeVar

from pyspark.sql.datasource import InputPartition

from ads_spark.errors import InvalidConfigError, OffsetOutOfRangeError
from ads_spark.spark.source.offsets import UNKNOWN_TOPIC_ID, Snapshot, SourceOffset, TopicPartitionKey
from ads_spark.spark.source.options import EARLIEST, LATEST, OffsetSpec

log = logging.getLogger("ads.spark.source")

K = TypeVar("K", bound=Hashable)


class DataLossError(OffsetOutOfRangeError):
    """Offsets the query still had to read are gone; raised only with failOnDataLoss=true."""


@dataclass(frozen=True)
class DataLoss:
    topic: str
    partition: int | None  # None: the whole topic
    reason: str

    def describe(self) -> str:
        where = self.topic if self.partition is None else f"{self.topic}-{self.partition}"
        return f"{where}: {self.reason}"


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """One Spark task's work: offsets [start_offset_inclusive, end_offset_exclusive) of one partition."""

    topic: str
    partition: int
    topic_id: str
    start_offset_inclusive: int
    end_offset_exclusive: int

    @property
    def record_count(self) -> int:
        return max(0, self.end_offset_exclusive - self.start_offset_inclusive)


@dataclass(frozen=True)
class AdmissionLimits:
    max_offsets: int | None = None  # records per trigger, all partitions together
    min_offsets: int | None = None  # wait for this many records ...
    max_trigger_delay_ms: int = 0  # ... but no longer than this since the last batch
    max_bytes: int | None = None  # estimated bytes per trigger, all partitions together

    @property
    def any(self) -> bool:
        return self.max_offsets is not None or self.min_offsets is not None or self.max_bytes is not None


def raise_or_warn(losses: Sequence[DataLoss], fail_on_data_loss: bool) -> None:
    if not losses:
        return
    text = "; ".join(loss.describe() for loss in losses)
    if fail_on_data_loss:
        raise DataLossError(f"data the query has not read yet is gone: {text}. Some records may have been lost. "
                            f"To continue from the earliest offsets still available, set the option "
                            f"failOnDataLoss=false (the loss will then be logged as a warning).")
    log.warning("ads source: data may have been lost (failOnDataLoss=false, continuing from the earliest "
                "available offsets): %s", text)


# ---- resolving startingOffsets / endingOffsets -------------------------------------


def timestamp_lookups(spec: OffsetSpec, snapshot: Snapshot) -> dict[int, list[TopicPartitionKey]]:
    """The list_offsets-by-timestamp calls a spec needs: timestamp_ms -> partitions."""
    wanted: dict[int, list[TopicPartitionKey]] = {}
    if spec.kind == "timestamp":
        wanted[spec.timestamp_ms] = [(t, p) for t, s in sorted(snapshot.items()) for p in sorted(s.partitions)]
    elif spec.kind == "timestamps":
        for key, ts in sorted(spec.as_map().items()):
            wanted.setdefault(ts, []).append(key)
    return wanted


def resolve_spec(spec: OffsetSpec, snapshot: Snapshot,
                 timestamp_offsets: Mapping[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int]:
    """Concrete offsets for every partition of the snapshot (may lie outside [log start, HW])."""
    keys = [(t, p) for t, s in sorted(snapshot.items()) for p in sorted(s.partitions)]
    state = {(t, p): snapshot[t].partitions[p] for t, p in keys}
    if spec.kind == "earliest":
        return {k: state[k].log_start_offset for k in keys}
    if spec.kind == "latest":
        return {k: state[k].high_watermark for k in keys}
    if spec.kind == "timestamp":
        return {k: timestamp_offsets[k] for k in keys}
    given = spec.as_map()
    unknown = sorted(set(given) - set(keys))
    missing = sorted(set(keys) - set(given))
    if unknown:
        raise InvalidConfigError(f"option '{spec.option}' names partitions that are not read by this query or "
                                 f"do not exist: {', '.join(f'{t}-{p}' for t, p in unknown)}")
    if missing:
        raise InvalidConfigError(f"option '{spec.option}' must give every partition read by this query; "
                                 f"missing: {', '.join(f'{t}-{p}' for t, p in missing)}")
    if spec.kind == "timestamps":
        return {k: timestamp_offsets[k] for k in keys}
    special = {EARLIEST: lambda k: state[k].log_start_offset, LATEST: lambda k: state[k].high_watermark}
    return {k: special[given[k]](k) if given[k] in special else given[k] for k in keys}


def clamp_start(requested: Mapping[TopicPartitionKey, int], snapshot: Snapshot,
                option: str) -> tuple[dict[TopicPartitionKey, int], list[DataLoss]]:
    """Starting offsets moved up to the log start (a loss) and checked against the HW."""
    result, losses = {}, []
    for (topic, p), offset in requested.items():
        state = snapshot[topic].partitions[p]
        if offset < state.log_start_offset:
            losses.append(DataLoss(topic, p, f"offsets {offset}..{state.log_start_offset - 1} were removed "
                                             f"by retention (log start is {state.log_start_offset})"))
            offset = state.log_start_offset
        if offset > state.high_watermark:
            raise InvalidConfigError(f"option '{option}': offset {offset} of {topic}-{p} is beyond its high "
                                     f"watermark {state.high_watermark}")
        result[(topic, p)] = offset
    return result, losses


def initial_offset(spec: OffsetSpec, snapshot: Snapshot, timestamp_offsets: Mapping[TopicPartitionKey, int],
                   fail_on_data_loss: bool) -> SourceOffset:
    """Where a new streaming query starts."""
    start, losses = clamp_start(resolve_spec(spec, snapshot, timestamp_offsets), snapshot, spec.option)
    raise_or_warn(losses, fail_on_data_loss)
    return SourceOffset({t: s.topic_id for t, s in snapshot.items()}, start)


def plan_batch(starting: OffsetSpec, ending: OffsetSpec, snapshot: Snapshot,
               start_ts_offsets: Mapping[TopicPartitionKey, int], end_ts_offsets: Mapping[TopicPartitionKey, int],
               fail_on_data_loss: bool) -> list[OffsetRange]:
    """The ranges of a batch query (before splitting); empty ranges are dropped."""
    start, losses = clamp_start(resolve_spec(starting, snapshot, start_ts_offsets), snapshot, starting.option)
    raise_or_warn(losses, fail_on_data_loss)
    end = resolve_spec(ending, snapshot, end_ts_offsets)
    ranges = []
    for (topic, p), first in sorted(start.items()):
        last = end[(topic, p)]
        hw = snapshot[topic].partitions[p].high_watermark
        if last > hw:
            raise InvalidConfigError(f"option '{ending.option}': offset {last} of {topic}-{p} is beyond its "
                                     f"high watermark {hw}")
        if last < first:
            raise InvalidConfigError(f"{topic}-{p}: the ending offset {last} is before the starting offset "
                                     f"{first} (check '{starting.option}' and '{ending.option}')")
        if last > first:
            ranges.append(OffsetRange(topic, p, snapshot[topic].topic_id, first, last))
    return ranges


# ---- streaming: reconcile the previous end with the cluster, then admit -----------


def reconcile(start: SourceOffset, snapshot: Snapshot, *, reported_absent: Collection[str] = ()
              ) -> tuple[dict[TopicPartitionKey, int], list[DataLoss]]:
    """Where each partition of the snapshot really resumes, and what was lost on the way.

    New topics and partitions resume at their log start (not a loss). A topic that
    was deleted, re-created (new incarnation) or whose unread offsets were removed by
    retention is a loss; reading resumes at the earliest offset still stored.
    An offset above the HW (a new leader whose HW has not caught up) is kept: no data yet.
    ``reported_absent``: topics whose absence was already reported (not reported again).
    """
    resume: dict[TopicPartitionKey, int] = {}
    gone = sorted(set(start.topic_ids) - set(snapshot) - set(reported_absent))
    losses = [DataLoss(t, None, "the topic was deleted") for t in gone]
    for topic, state in sorted(snapshot.items()):
        old_id = start.topic_ids.get(topic)
        recreated = old_id not in (None, UNKNOWN_TOPIC_ID, state.topic_id)
        if recreated:
            losses.append(DataLoss(topic, None, f"the topic was deleted and re-created (incarnation {old_id} "
                                                f"-> {state.topic_id}); reading the new one from its start"))
        for p, ps in sorted(state.partitions.items()):
            offset = None if recreated or old_id is None else start.offsets.get((topic, p))
            if offset is None:
                resume[(topic, p)] = ps.log_start_offset
                continue
            if offset < ps.log_start_offset:
                losses.append(DataLoss(topic, p, f"offsets {offset}..{ps.log_start_offset - 1} were removed by "
                                                 f"retention before they were read"))
                offset = ps.log_start_offset
            resume[(topic, p)] = offset
    return resume, losses


def fair_shares(demands: Mapping[K, int], budget: int) -> dict[K, int]:
    """Max-min fair split of an integer budget: nobody gets more than it asks for, and a key gets
    less than another only if it asked for less. The total is min(budget, sum of demands)."""
    shares: dict[K, int] = {}
    remaining = max(0, budget)
    ordered = sorted(demands.items(), key=lambda kv: (kv[1], repr(kv[0])))
    for index, (key, demand) in enumerate(ordered):
        share = min(max(0, demand), remaining // (len(ordered) - index))
        shares[key] = share
        remaining -= share
    return shares


def proportional_shares(demands: Mapping[K, int], budget: int) -> dict[K, int]:
    """maxOffsetsPerTrigger as Spark's Kafka source splits it: each key in proportion to its demand.

    As Spark, a share below one record is rounded up so small partitions are not starved behind
    large ones, and larger shares are rounded down. Unlike Spark, whose rounding can overshoot or
    leave records of the budget unused, the total is exactly min(budget, sum of demands): round-ups
    the budget has no room for are dropped (smallest shares first), and what the floors leave goes
    to the largest remainders. Ties go by key order, so the same inputs always give the same split.
    """
    wanted = {k: max(0, d) for k, d in demands.items()}
    total = sum(wanted.values())
    if total <= budget:
        return wanted
    budget = max(0, budget)
    asking = sorted((k for k, d in wanted.items() if d > 0), key=repr)
    # Integer arithmetic: exact share = budget * demand / total = floor + remainder / total.
    floors = {k: budget * wanted[k] // total for k in asking}
    remainders = {k: budget * wanted[k] % total for k in asking}
    shares = {k: 0 for k in wanted}
    shares.update(floors)
    raised = [k for k in asking if floors[k] == 0]
    room = budget - sum(floors.values())
    keep = sorted(raised, key=lambda k: (-remainders[k], repr(k)))[:room]
    for k in keep:
        shares[k] = 1
    left = room - len(keep)
    by_remainder = sorted((k for k in asking if k not in raised and remainders[k]),
                          key=lambda k: (-remainders[k], repr(k)))
    for k in by_remainder[:left]:
        shares[k] += 1
    return shares


def admit(start: Mapping[TopicPartitionKey, int], available_end: Mapping[TopicPartitionKey, int],
          limits: AdmissionLimits | None, *, now_ms: int, last_trigger_ms: int,
          record_bytes: Mapping[TopicPartitionKey, float]) -> dict[TopicPartitionKey, int]:
    """The end offsets of the next micro-batch; equal to ``start`` means "no batch now".

    ``limits`` None means Spark asked for everything available (Trigger.Once).
    ``record_bytes`` is the estimated bytes per record of each partition (bytes limit only).
    """
    backlog = {k: max(0, available_end.get(k, s) - s) for k, s in start.items()}
    total = sum(backlog.values())
    if limits is None or total == 0:
        return {k: s + backlog[k] for k, s in start.items()}
    if limits.min_offsets is not None and total < limits.min_offsets \
            and now_ms - last_trigger_ms < limits.max_trigger_delay_ms:
        return dict(start)
    admitted = dict(backlog)
    if limits.max_offsets is not None:
        admitted = proportional_shares(admitted, limits.max_offsets)
    if limits.max_bytes is not None:
        admitted = _bytes_cap(admitted, limits.max_bytes, record_bytes)
    return {k: s + admitted[k] for k, s in start.items()}


def _bytes_cap(records: Mapping[TopicPartitionKey, int], max_bytes: int,
               record_bytes: Mapping[TopicPartitionKey, float]) -> dict[TopicPartitionKey, int]:
    """Records that fit a byte budget shared fairly; at least one record so a stream never stalls."""
    per_record = {k: max(1.0, float(record_bytes.get(k, 1.0))) for k in records}
    demand_bytes = {k: math.ceil(n * per_record[k]) for k, n in records.items()}
    shares = fair_shares(demand_bytes, max_bytes)
    capped = {k: min(records[k], int(shares[k] // per_record[k])) for k in records}
    if sum(capped.values()) == 0:
        first = next((k for k in sorted(records) if records[k] > 0), None)
        if first is not None:
            capped[first] = 1
    return capped


def cap_at_target(available_end: Mapping[TopicPartitionKey, int], start: Mapping[TopicPartitionKey, int],
                  target: SourceOffset, topic_ids: Mapping[str, str]) -> dict[TopicPartitionKey, int]:
    """Trigger.AvailableNow: never read past the offsets seen when the query started.
    Partitions (or incarnations) that did not exist then contribute nothing."""
    capped = {}
    for key, end in available_end.items():
        same_incarnation = target.topic_ids.get(key[0]) == topic_ids.get(key[0])
        limit = target.offsets.get(key) if same_incarnation else None
        capped[key] = start.get(key, end) if limit is None else max(start.get(key, 0), min(end, limit))
    return capped


def next_end(start: SourceOffset, snapshot: Snapshot, limits: AdmissionLimits | None, *, now_ms: int,
             last_trigger_ms: int, record_bytes: Mapping[TopicPartitionKey, float],
             target: SourceOffset | None, fail_on_data_loss: bool,
             reported_absent: Collection[str] = ()) -> SourceOffset:
    """latestOffset: reconcile the previous end with the cluster, then admit the next batch.

    Never shrinks (SPARK-41375): when no subscribed topic is visible (all deleted, or metadata
    answering empty for a moment) the end is the start; topics and partitions missing from the
    snapshot keep their offsets (``keep_absent``), so that when they are seen again they resume
    where they were instead of counting as new and being read again from their start.
    """
    if not snapshot and start.offsets:
        return start
    resume, losses = reconcile(start, snapshot, reported_absent=reported_absent)
    raise_or_warn(losses, fail_on_data_loss)
    topic_ids = {t: s.topic_id for t, s in snapshot.items()}
    available = {(t, p): ps.high_watermark for t, s in snapshot.items() for p, ps in s.partitions.items()}
    if target is not None:
        available = cap_at_target(available, resume, target, topic_ids)
    end = admit(resume, available, limits, now_ms=now_ms, last_trigger_ms=last_trigger_ms,
                record_bytes=record_bytes)
    return keep_absent(start, SourceOffset(topic_ids, end))


def keep_absent(start: SourceOffset, end: SourceOffset) -> SourceOffset:
    """``end`` plus what ``start`` knows and ``end`` lacks: topics missing from the cluster's answer,
    and partitions of a same-incarnation topic that were not answered for."""
    topic_ids, offsets, epochs = dict(end.topic_ids), dict(end.offsets), dict(end.epochs)
    for (topic, p), offset in start.offsets.items():
        old_id = start.topic_ids.get(topic, UNKNOWN_TOPIC_ID)
        if topic not in topic_ids:
            topic_ids[topic] = old_id
        same_incarnation = old_id in (UNKNOWN_TOPIC_ID, topic_ids[topic])
        if same_incarnation and (topic, p) not in offsets:
            offsets[(topic, p)] = offset
            if (topic, p) in start.epochs:
                epochs[(topic, p)] = start.epochs[(topic, p)]
    for topic, old_id in start.topic_ids.items():
        topic_ids.setdefault(topic, old_id)
    return replace(end, topic_ids=topic_ids, offsets=offsets, epochs=epochs)


# ---- streaming: ranges of a micro-batch, and splitting -----------------------------


def partitions_without_start(start: SourceOffset, end: SourceOffset) -> list[TopicPartitionKey]:
    """Partitions in ``end`` that ``start`` does not cover (new, or a new incarnation):
    the reader looks up their log start offset."""
    missing = []
    for (topic, p) in sorted(end.offsets):
        old_id = start.topic_ids.get(topic)
        known = old_id is not None and old_id in (UNKNOWN_TOPIC_ID, end.topic_ids[topic]) \
            and (topic, p) in start.offsets
        if not known:
            missing.append((topic, p))
    return missing


def plan_ranges(start: SourceOffset, end: SourceOffset,
                new_partition_starts: Mapping[TopicPartitionKey, int]) -> list[OffsetRange]:
    """The offset ranges between two offsets of a stream; partitions absent from ``end`` are dropped."""
    fresh = set(partitions_without_start(start, end))
    ranges = []
    for (topic, p), last in sorted(end.offsets.items()):
        first = new_partition_starts[(topic, p)] if (topic, p) in fresh else start.offsets[(topic, p)]
        if last > first:
            ranges.append(OffsetRange(topic, p, end.topic_ids[topic], first, last))
    return ranges


def split_ranges(ranges: Sequence[OffsetRange], min_partitions: int | None,
                 max_records_per_partition: int | None) -> list[OffsetRange]:
    """Cut ranges so there are at least ``min_partitions`` pieces (large ranges cut more)
    and none holds more than ``max_records_per_partition`` records."""
    total = sum(r.record_count for r in ranges)
    pieces: list[OffsetRange] = []
    for r in ranges:
        parts = 1
        if min_partitions is not None and total and len(ranges) < min_partitions:
            parts = max(parts, math.ceil(r.record_count * min_partitions / total))
        if max_records_per_partition is not None:
            parts = max(parts, math.ceil(r.record_count / max_records_per_partition))
        pieces.extend(_cut(r, min(parts, r.record_count)))
    return pieces


def _cut(r: OffsetRange, parts: int) -> list[OffsetRange]:
    if parts <= 1:
        return [r]
    size, extra = divmod(r.record_count, parts)
    pieces, first = [], r.start_offset_inclusive
    for index in range(parts):
        last = first + size + (1 if index < extra else 0)
        pieces.append(OffsetRange(r.topic, r.partition, r.topic_id, first, last))
        first = last
    return pieces
