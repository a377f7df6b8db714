"""Where startingOffsets/endingOffsets are resolved, as Spark's Kafka connector resolves them; pure.

Owns two rules of Spark's connector that offset planning alone (``planning.py``) cannot express:

* A batch query resolves ``earliest``/``latest`` and timestamps when it *runs*, not when it was
  first planned. pyspark keeps the partitions a Python data source planned for the life of the
  DataFrame, so a DataFrame collected twice would otherwise read the offsets of its first run and
  miss the records (and the retention) in between. Each task therefore carries *bounds*
  (``Bound``) for the ends that follow an option, and resolves them against the cluster when it
  reads (``ads_spark.spark.source.lookups.resolve_piece``). A partition cut into several tasks
  keeps the cut points of planning between its pieces and only its outer ends move, so the pieces
  still tile the partition without a gap or an overlap whatever the order they run in.
* ``startingOffsetsByTimestampStrategy``: a partition with no record at or after a *starting*
  timestamp fails the query by default, naming the partition and timestamp; with ``latest`` it
  starts at its end. An *ending* timestamp with no record resolves to the end, as in Spark.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Sequence

from pyspark.sql.datasource import InputPartition

from ads_spark.errors import InvalidConfigError
from ads_spark.spark.source.offsets import Snapshot, TopicPartitionKey
from ads_spark.spark.source.options import EARLIEST, LATEST, OffsetSpec
from ads_spark.spark.source.planning import OffsetRange


@dataclass(frozen=True)
class Bound:
    """One end of a partition's range that follows an option and is resolved when the task reads."""

    kind: str  # "earliest" | "latest" | "timestamp"
    timestamp_ms: int = -1
    option: str = ""  # the option it came from, for error messages


@dataclass(frozen=True)
class DeferredRange(InputPartition):
    """One batch task's piece of one partition: ``planned`` clipped to [lower, upper), whose
    partition-wide start and end are ``start``/``end`` when given, else those of planning."""

    planned: OffsetRange
    partition_start: int  # the partition's planned start, used when ``start`` is None
    partition_end: int  # the partition's planned end, used when ``end`` is None
    start: Bound | None
    end: Bound | None
    lower: int | None  # the cut point below this piece (None: the first piece)
    upper: int | None  # the cut point above this piece (None: the last piece)


def start_bound(spec: OffsetSpec, key: TopicPartitionKey) -> Bound | None:
    if spec.kind == "earliest" or (spec.kind == "offsets" and spec.as_map().get(key) == EARLIEST):
        return Bound("earliest", option=spec.option)
    return _timestamp_bound(spec, key)


def end_bound(spec: OffsetSpec, key: TopicPartitionKey) -> Bound | None:
    if spec.kind == "latest" or (spec.kind == "offsets" and spec.as_map().get(key) == LATEST):
        return Bound("latest", option=spec.option)
    return _timestamp_bound(spec, key)


def _timestamp_bound(spec: OffsetSpec, key: TopicPartitionKey) -> Bound | None:
    if spec.kind == "timestamp":
        return Bound("timestamp", spec.timestamp_ms, spec.option)
    if spec.kind == "timestamps":
        return Bound("timestamp", spec.as_map()[key], spec.option)
    return None


def defer_batch(pieces: Sequence[OffsetRange], starting: OffsetSpec, ending: OffsetSpec, snapshot: Snapshot
                ) -> list[OffsetRange | DeferredRange]:
    """The tasks of a batch query: pieces of partitions whose start or end follows an option become
    ``DeferredRange``; a partition with nothing to read at planning still gets one (it may have
    records when the query runs). Partitions fixed at both ends stay plain ranges."""
    by_key: dict[TopicPartitionKey, list[OffsetRange]] = {}
    for piece in pieces:
        by_key.setdefault((piece.topic, piece.partition), []).append(piece)
    tasks: list[OffsetRange | DeferredRange] = []
    for topic, state in sorted(snapshot.items()):
        for p, ps in sorted(state.partitions.items()):
            key = (topic, p)
            start, end = start_bound(starting, key), end_bound(ending, key)
            own = sorted(by_key.get(key, []), key=lambda r: r.start_offset_inclusive)
            if start is None and end is None:
                tasks.extend(own)
                continue
            if not own:  # empty at planning: one task that reads whatever is there when it runs
                own = [OffsetRange(topic, p, state.topic_id, ps.high_watermark, ps.high_watermark)]
            first, last = own[0].start_offset_inclusive, own[-1].end_offset_exclusive
            for index, piece in enumerate(own):
                lower = None if index == 0 else piece.start_offset_inclusive
                upper = None if index == len(own) - 1 else piece.end_offset_exclusive
                tasks.append(DeferredRange(piece, first, last, start, end, lower, upper))
    return tasks


def piece_range(piece: DeferredRange, start: int, end: int) -> OffsetRange:
    """The piece's range once its partition resolved to [start, end) at read time."""
    planned = piece.planned
    if end < start:
        raise InvalidConfigError(f"{planned.topic}-{planned.partition}: the ending offset {end} is before the "
                                 f"starting offset {start} when the query runs (check "
                                 f"'{_option(piece.start, 'startingOffsets')}' and "
                                 f"'{_option(piece.end, 'endingOffsets')}')")
    lo = start if piece.lower is None else max(start, piece.lower)
    hi = end if piece.upper is None else min(end, piece.upper)
    return replace(planned, start_offset_inclusive=lo, end_offset_exclusive=max(lo, hi))


def _option(bound: Bound | None, default: str) -> str:
    return bound.option if bound is not None and bound.option else default


def starting_timestamp_offset(option: str, topic: str, partition: int, timestamp_ms: int, found: int,
                              high_watermark: int, strategy: str) -> int:
    """A starting timestamp's offset; ``found`` at or past the HW means no record at or after it."""
    if found < high_watermark:
        return found
    if strategy == "latest":
        return high_watermark
    raise InvalidConfigError(f"option '{option}': {topic}-{partition} has no record with a timestamp at or after "
                             f"{timestamp_ms} ms (its end is offset {high_watermark}); set "
                             f"startingOffsetsByTimestampStrategy=latest to start such partitions at their end")


def check_starting_timestamps(spec: OffsetSpec, snapshot: Snapshot, found: Mapping[TopicPartitionKey, int],
                              strategy: str) -> dict[TopicPartitionKey, int]:
    """``found`` (offsets of a starting timestamp look-up) with the strategy applied to each partition."""
    checked = {}
    for (topic, p), offset in sorted(found.items()):
        bound = _timestamp_bound(spec, (topic, p))
        hw = snapshot[topic].partitions[p].high_watermark
        ts = bound.timestamp_ms if bound is not None else -1
        checked[(topic, p)] = starting_timestamp_offset(spec.option, topic, p, ts, offset, hw, strategy)
    return checked
