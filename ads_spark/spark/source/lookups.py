"""The cluster look-ups the Spark source plans from: the only I/O of offset planning.

``take_snapshot``, the timestamp / log-start / sample look-ups and a batch task's read-time
resolution of its offsets (``resolve_piece``) ask an ``Admin`` or ``Consumer``
(from the per-process cache, ``ads_spark.spark.clients``) and turn the answers into the plain
values ``planning.py`` consumes, so planning itself stays pure and testable without a cluster.
For a stream they also decide what a partition that cannot answer now (no leader, leader
unreachable) means: it is left out of the answer, so its offsets stay where they were.

``ads_spark.client`` is imported lazily so that resolving the format name does not load Flight.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Mapping

from ads_spark.errors import (
    AdsError,
    LeaderNotAvailableError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from ads_spark.spark.source.offsets import PartitionState, Snapshot, TopicPartitionKey, TopicState
from ads_spark.spark.source.options import Subscription
from ads_spark.spark.source.planning import OffsetRange
from ads_spark.spark.source.resolution import Bound, DeferredRange, piece_range, starting_timestamp_offset

SAMPLE_RECORDS_MAX = 64  # records fetched per partition to estimate bytes per record
SAMPLE_FETCH_BYTES_MAX = 1 << 20

# A topic deleted between the listing and the look-ups of one snapshot is retried this often.
SNAPSHOT_ATTEMPTS_MAX = 5
SNAPSHOT_RETRY_BACKOFF_S = 0.2  # times the attempt number
# A new stream (or an AvailableNow run) waits this long for every subscribed partition to have a leader.
COMPLETE_SNAPSHOT_WAIT_S_MAX = 120.0
COMPLETE_SNAPSHOT_BACKOFF_S = 1.0
LEADERLESS_WARNING_INTERVAL_S = 60.0  # per partition: a long outage is logged once a minute, not every trigger

log = logging.getLogger("ads.spark.source")
_leaderless_warned_at: dict[TopicPartitionKey, float] = {}


def take_snapshot(admin, subscription: Subscription, *, require_existing: bool) -> Snapshot:
    """Topic ids, log start offsets and high watermarks of every subscribed partition.

    ``require_existing``: a batch query fails on a named topic/partition that does not
    exist, or whose offsets cannot be listed (no leader: the Consumer's error); a stream
    waits for it (``take_stream_snapshot``).
    """
    if require_existing:
        return _take_snapshot_once(admin, subscription, require_existing=True)[0]
    return take_stream_snapshot(admin, subscription)[0]


def take_stream_snapshot(admin, subscription: Subscription) -> tuple[Snapshot, list[TopicPartitionKey]]:
    """A stream's snapshot, and the partitions left out of it because they cannot answer now.

    A partition without a leader (or whose leader cannot be reached, or is not the leader any
    more) is left out: the planner keeps its previous offset (``planning.keep_absent``), so it
    makes no progress until it answers again, and the query lives on. A stream also tolerates
    a topic that vanishes (deleted, maybe being re-created) while the snapshot is taken: it
    takes the snapshot again, and after ``SNAPSHOT_ATTEMPTS_MAX`` tries raises the last error.
    """
    for attempt in range(SNAPSHOT_ATTEMPTS_MAX):
        try:
            return _take_snapshot_once(admin, subscription, require_existing=False)
        except UnknownTopicOrPartitionError:
            if attempt == SNAPSHOT_ATTEMPTS_MAX - 1:
                raise
            time.sleep(SNAPSHOT_RETRY_BACKOFF_S * (attempt + 1))
    raise AssertionError("unreachable")


def take_complete_snapshot(admin, subscription: Subscription,
                           wait_s_max: float = COMPLETE_SNAPSHOT_WAIT_S_MAX) -> Snapshot:
    """A stream's snapshot with every existing subscribed partition in it: where a new stream starts
    (startingOffsets applies to each partition) and an AvailableNow run's target. Waits up to
    ``wait_s_max`` for partitions without a leader, then raises LeaderNotAvailableError naming them."""
    deadline = time.monotonic() + wait_s_max
    while True:
        snapshot, unavailable = take_stream_snapshot(admin, subscription)
        if not unavailable:
            return snapshot
        if time.monotonic() >= deadline:
            raise LeaderNotAvailableError(f"partition(s) {_names(unavailable)} had no reachable leader for "
                                          f"{wait_s_max:.0f} s; the stream cannot place its starting offsets")
        time.sleep(COMPLETE_SNAPSHOT_BACKOFF_S)


def _names(keys) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(keys))


def _take_snapshot_once(admin, subscription: Subscription, *,
                        require_existing: bool) -> tuple[Snapshot, list[TopicPartitionKey]]:
    from ads_spark.client import TopicPartition

    existing = set(admin.list_topics())
    topics = subscription.select_topics(sorted(existing))
    absent = [t for t in topics if t not in existing]
    _check_authorized(admin, absent)
    if absent and require_existing:
        raise UnknownTopicOrPartitionError(f"topic(s) {', '.join(absent)} do not exist")
    topics = [t for t in topics if t in existing]
    if not topics:
        return {}, []
    ids: dict[str, str] = {}
    partitions: dict[str, list[int]] = {}
    for description in admin.describe_topics(topics):
        numbers = [int(p.partition) for p in description.partitions]
        wanted = subscription.wanted_partitions(description.topic, numbers)
        unknown = sorted(set(wanted) - set(numbers))
        if unknown and require_existing:
            raise UnknownTopicOrPartitionError(f"topic '{description.topic}' has no partition(s) "
                                               f"{', '.join(map(str, unknown))} (it has {len(numbers)})")
        ids[description.topic] = description.topic_id
        partitions[description.topic] = [p for p in wanted if p in numbers]
    tps = [TopicPartition(t, p) for t in sorted(partitions) for p in partitions[t]]
    if require_existing:
        earliest, latest, unavailable = *_offsets_of(admin, tps), []
    else:
        earliest, latest, unavailable = _offsets_of_answering(admin, tps)
    return {
        t: TopicState(ids[t], {p: PartitionState(int(earliest[TopicPartition(t, p)]),
                                                 *latest[TopicPartition(t, p)])
                               for p in partitions[t] if TopicPartition(t, p) in latest})
        for t in sorted(partitions)
    }, unavailable


def _check_authorized(admin, absent: list[str]) -> None:
    """A named topic missing from the all-topics listing may be one the caller may not Describe (the
    broker leaves those out, issue #23): asked by name, the broker answers TOPIC_AUTHORIZATION_FAILED
    (for a missing topic too: no existence oracle), which fails the query now, non-retriable, as Kafka's
    source does, instead of a batch read reporting "does not exist" or a stream waiting for ever."""
    if not absent:
        return
    try:
        admin.describe_topics(absent)
    except TopicAuthorizationFailedError:
        raise TopicAuthorizationFailedError(f"not authorized to describe topic(s) {', '.join(absent)}: the "
                                            f"query's principal needs Read (which implies Describe) on them") from None
    except UnknownTopicOrPartitionError:
        pass  # really absent: the caller decides (a batch fails, a stream waits)


def _offsets_of(admin, tps) -> tuple[dict, dict]:
    """Log start, and (HW, leader epoch), of each partition; the Consumer's errors as they come."""
    if not tps:
        return {}, {}
    return admin.list_offsets(tps, "earliest"), latest_with_epochs(admin, tps)


def _offsets_of_answering(admin, tps) -> tuple[dict, dict, list[TopicPartitionKey]]:
    """``_offsets_of`` for the partitions that can answer now, and those that cannot."""
    answers, unavailable = _ask_answering(admin._connections, tps, lambda group: _offsets_of(admin, group),
                                          lambda tp: (tp.topic, tp.partition))
    earliest = {tp: e for group_earliest, _ in answers for tp, e in group_earliest.items()}
    latest = {tp: hw for _, group_latest in answers for tp, hw in group_latest.items()}
    return earliest, latest, unavailable


def _ask_answering(connections, keys: list, ask, key_of) -> tuple[list, list[TopicPartitionKey]]:
    """``[ask(keys)]`` for the partitions whose leader the metadata names, so a leaderless one costs
    nothing (the Consumer would wait default.api.timeout.ms for it); after a retriable failure of
    that call, ``ask`` per leader, so one unreachable broker costs only its own partitions: the
    answers, and the partitions that could not answer."""
    by_leader, unavailable = _group_by_leader(connections, keys, key_of)
    led = [key for group in by_leader.values() for key in group]
    try:
        answers = [ask(led)] if led else []
    except AdsError as exc:
        if not _transient(exc):
            raise
        answers = []
        for _leader, group in sorted(by_leader.items()):
            try:
                answers.append(ask(group))
            except AdsError as exc:
                if not _transient(exc):
                    raise
                unavailable.extend(key_of(key) for key in group)
    _warn_leaderless(unavailable)
    return answers, sorted(unavailable)


def _group_by_leader(connections, keys: list, key_of) -> tuple[dict[int, list], list[TopicPartitionKey]]:
    """``keys`` by the leader the metadata names, and the partitions it names none for (mid election)."""
    by_leader: dict[int, list] = {}
    unavailable: list[TopicPartitionKey] = []
    for key in keys:
        try:
            meta, _ = connections.leader_of(*key_of(key))
        except AdsError as exc:
            if not _transient(exc):
                raise
            unavailable.append(key_of(key))
            continue
        by_leader.setdefault(meta.leader, []).append(key)
    return by_leader, unavailable


def _transient(exc: AdsError) -> bool:
    """Retriable, and not a topic that vanished (``take_stream_snapshot`` takes the snapshot again for that)."""
    return exc.retriable and not isinstance(exc, UnknownTopicOrPartitionError)


def _warn_leaderless(keys) -> None:
    now = time.monotonic()
    due = [k for k in keys if now - _leaderless_warned_at.get(k, -1e18) >= LEADERLESS_WARNING_INTERVAL_S]
    if not due:
        return
    _leaderless_warned_at.update({k: now for k in due})
    log.warning("ads source: partition(s) %s have no reachable leader; they make no progress and keep their "
                "offsets until they answer again", _names(due))


def latest_with_epochs(admin, tps) -> dict:
    """(HW, leader epoch) per partition, both from one answer of its leader (KIP-320: the epoch an offset
    planned from that HW was read in; taken from separate answers, a leader change in between would pair a
    new leader's HW with the old epoch and look like a truncation)."""
    from ads_spark.client import Consumer

    return Consumer(admin.config, admin._connections).list_offsets_with_epochs(tps, "latest")


def epoch_end_offsets(consumer, epochs: Mapping[TopicPartitionKey, int]) -> dict[TopicPartitionKey, dict]:
    """KIP-320: each partition's leader's answer for the epoch an offset was read in (offset_for_leader_epoch).
    A partition whose leader cannot answer now (lost since the snapshot) has no answer: the caller leaves
    it out of this trigger rather than move its offset unchecked."""
    answers, _ = _ask_answering(consumer._connections, sorted(epochs),
                                lambda keys: consumer.offsets_for_leader_epochs({k: epochs[k] for k in keys}),
                                lambda key: key)
    return {key: answer for group in answers for key, answer in group.items()}


def without_partitions(snapshot: Snapshot, keys) -> Snapshot:
    """``snapshot`` less some partitions (their offsets are then kept as they are: ``planning.keep_absent``)."""
    drop = set(keys)
    return {t: replace(s, partitions={p: ps for p, ps in s.partitions.items() if (t, p) not in drop})
            for t, s in snapshot.items()}


def offsets_for_timestamps(admin, lookups: Mapping[int, list[TopicPartitionKey]]) -> dict[TopicPartitionKey, int]:
    """First offset whose timestamp is >= the given ms (the HW when there is none)."""
    from ads_spark.client import TopicPartition

    found: dict[TopicPartitionKey, int] = {}
    for timestamp_ms, keys in sorted(lookups.items()):
        result = admin.list_offsets([TopicPartition(t, p) for t, p in keys], int(timestamp_ms))
        found.update({(t, p): int(result[TopicPartition(t, p)]) for t, p in keys})
    return found


def log_start_offsets(admin, keys: list[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
    from ads_spark.client import TopicPartition

    if not keys:
        return {}
    result = admin.list_offsets([TopicPartition(t, p) for t, p in keys], "earliest")
    return {(t, p): int(result[TopicPartition(t, p)]) for t, p in keys}


def record_bytes_estimates(consumer, start: Mapping[TopicPartitionKey, int],
                           end: Mapping[TopicPartitionKey, int]) -> dict[TopicPartitionKey, float]:
    """Bytes per record of each partition with a backlog, from a small sample at its start."""
    from ads_spark.client import TopicPartition

    estimates = {}
    for (topic, p), first in sorted(start.items()):
        last = min(end.get((topic, p), first), first + SAMPLE_RECORDS_MAX)
        if last <= first:
            continue
        sample = consumer.fetch_arrow(TopicPartition(topic, p), first, last, max_bytes=SAMPLE_FETCH_BYTES_MAX)
        if sample.num_rows:
            estimates[(topic, p)] = sample.nbytes / sample.num_rows
    return estimates


def resolve_piece(admin, piece: DeferredRange, starting_timestamp_strategy: str) -> OffsetRange:
    """A batch task's offsets, resolved now (``resolution.py``): the log start for ``earliest``,
    the HW for ``latest``, the first offset at or after a timestamp (the HW when there is none)."""
    from ads_spark.client import TopicPartition

    tp = TopicPartition(piece.planned.topic, piece.planned.partition)
    hw = int(admin.list_offsets([tp], "latest")[tp])

    def resolve(bound: Bound | None, planned: int, starting: bool) -> int:
        if bound is None:
            return planned
        if bound.kind == "latest":
            return hw
        if bound.kind == "earliest":
            return int(admin.list_offsets([tp], "earliest")[tp])
        found = int(admin.list_offsets([tp], int(bound.timestamp_ms))[tp])
        if not starting:
            return min(found, hw)  # no record at or after an ending timestamp: the end, as Spark
        return starting_timestamp_offset(bound.option, tp.topic, tp.partition, bound.timestamp_ms, found, hw,
                                         starting_timestamp_strategy)

    start = resolve(piece.start, piece.partition_start, starting=True)
    end = resolve(piece.end, piece.partition_end, starting=False)
    return piece_range(piece, start, end)
