"""A checker for a mirror: source and target partitions compared record for record.

Reads each source partition and its remote partition (log start to high watermark) and
reports, per partition, how many records each side holds, the values missing from the
target, the values the target holds more than once, and whether the order differs. Meant
for tests and for an operator after a drill; it reads everything, so it is for small topics.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ads_spark.mirror.naming import MirrorPolicy


@dataclass(frozen=True)
class PartitionComparison:
    topic: str
    partition: int
    source_records: int
    target_records: int
    missing: int  # source records absent from the target
    duplicated: int  # target records beyond the source's count of their value
    same_order: bool

    @property
    def exact(self) -> bool:
        return self.missing == 0 and self.duplicated == 0 and self.same_order


def partition_values(bootstrap: str, topic: str, partition: int) -> list[bytes]:
    from ads_spark.client import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap})
    try:
        tp = TopicPartition(topic, partition)
        start, high_watermark = consumer.get_watermark_offsets(tp)
        if high_watermark <= start:
            return []
        return consumer.fetch_arrow(tp, start, high_watermark).column("value").to_pylist()
    finally:
        consumer.close()


def compare_topic(source_bootstrap: str, target_bootstrap: str, policy: MirrorPolicy, topic: str,
                  partitions: int) -> list[PartitionComparison]:
    result = []
    for partition in range(partitions):
        source = partition_values(source_bootstrap, topic, partition)
        target = partition_values(target_bootstrap, policy.remote_topic(topic), partition)
        # Per value, against its multiplicity in the source (a producer retry may have written it twice there).
        source_counts, target_counts = Counter(source), Counter(target)
        missing = sum(max(0, c - target_counts[v]) for v, c in source_counts.items())
        duplicated = sum(max(0, c - source_counts[v]) for v, c in target_counts.items())
        result.append(PartitionComparison(topic, partition, len(source), len(target), missing, duplicated,
                                          source == target))
    return result
