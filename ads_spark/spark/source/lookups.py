"""The cluster look-ups the Spark source plans from: the only I/O of offset planning.

``take_snapshot`` and the timestamp / log-start / sample look-ups ask an ``Admin`` or ``Consumer``
(from the per-process cache, ``ads_spark.spark.clients``) and turn the answers into the plain
values ``planning.py`` consumes, so planning itself stays pure and testable without a cluster.

``ads_spark.client`` is imported lazily so that resolving the format name does not load Flight.
"""

from __future__ import annotations

import time
from typing import Mapping

from ads_spark.errors import UnknownTopicOrPartitionError
from ads_spark.spark.source.offsets import PartitionState, Snapshot, TopicPartitionKey, TopicState
from ads_spark.spark.source.options import Subscription

SAMPLE_RECORDS_MAX = 64  # records fetched per partition to estimate bytes per record
SAMPLE_FETCH_BYTES_MAX = 1 << 20

# A topic deleted between the listing and the look-ups of one snapshot is retried this often.
SNAPSHOT_ATTEMPTS_MAX = 5
SNAPSHOT_RETRY_BACKOFF_S = 0.2  # times the attempt number


def take_snapshot(admin, subscription: Subscription, *, require_existing: bool) -> Snapshot:
    """Topic ids, log start offsets and high watermarks of every subscribed partition.

    ``require_existing``: a batch query fails on a named topic/partition that does not
    exist; a stream waits for it (it is simply absent from the snapshot). A stream
    also tolerates a topic that vanishes (deleted, maybe being re-created) while the
    snapshot is taken: it takes the snapshot again, and after
    ``SNAPSHOT_ATTEMPTS_MAX`` tries raises the last error.
    """
    if require_existing:
        return _take_snapshot_once(admin, subscription, require_existing=True)
    for attempt in range(SNAPSHOT_ATTEMPTS_MAX):
        try:
            return _take_snapshot_once(admin, subscription, require_existing=False)
        except UnknownTopicOrPartitionError:
            if attempt == SNAPSHOT_ATTEMPTS_MAX - 1:
                raise
            time.sleep(SNAPSHOT_RETRY_BACKOFF_S * (attempt + 1))
    raise AssertionError("unreachable")


def _take_snapshot_once(admin, subscription: Subscription, *, require_existing: bool) -> Snapshot:
    from ads_spark.client import TopicPartition

    existing = set(admin.list_topics())
    topics = subscription.select_topics(sorted(existing))
    absent = [t for t in topics if t not in existing]
    if absent and require_existing:
        raise UnknownTopicOrPartitionError(f"topic(s) {', '.join(absent)} do not exist")
    topics = [t for t in topics if t in existing]
    if not topics:
        return {}
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
    earliest = admin.list_offsets(tps, "earliest") if tps else {}
    latest = admin.list_offsets(tps, "latest") if tps else {}
    return {
        t: TopicState(ids[t], {p: PartitionState(int(earliest[TopicPartition(t, p)]),
                                                 int(latest[TopicPartition(t, p)])) for p in partitions[t]})
        for t in sorted(partitions)
    }


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
