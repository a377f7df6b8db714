"""Offsets the source writes to the Spark checkpoint, and the cluster facts it plans from.

Owns the offsets JSON. Spark decides "is there new data?" by comparing the
JSON of two offsets, so the encoding is canonical: topics sorted by name,
partitions sorted by number, same keys every time. Each topic also carries its
incarnation (the topic id the cluster gave it at creation) so that a topic
deleted and re-created under the same name is noticed instead of silently read
from the middle of a different log::

    {"version": 1,
     "topics": {"orders": {"topic_id": "5b1f...", "offsets": {"0": 42, "1": 17}}}}

An offset is the next offset to read (exclusive end of what was read).
Kafka's form ``{"orders": {"0": 42}}`` is accepted on input (topic id unknown).

A topic may also carry ``"epochs": {"0": 3}``: the leader epoch each offset was
read in (KIP-320). After a leader change the source asks the new leader where
that epoch ends in its log, which tells an unclean election's truncation under
the offset apart from "no data yet" (``truncation.py``). Offsets written without
epochs (older checkpoints, Kafka's form, user JSON) are read and not checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ads_spark.errors import InvalidConfigError

OFFSETS_FORMAT_VERSION = 1
UNKNOWN_TOPIC_ID = ""  # an offset written without an incarnation (Kafka's form); adopts the current one

TopicPartitionKey = tuple[str, int]


@dataclass(frozen=True)
class SourceOffset:
    """Per topic: its incarnation and the next offset to read of each partition."""

    topic_ids: Mapping[str, str]
    offsets: Mapping[TopicPartitionKey, int]
    # The leader epoch each offset was read in (KIP-320); a partition without one is not checked.
    epochs: Mapping[TopicPartitionKey, int] = field(default_factory=dict)

    def to_json_dict(self) -> dict[str, Any]:
        topics: dict[str, Any] = {}
        for topic in sorted(self.topic_ids):
            partitions = sorted(p for t, p in self.offsets if t == topic)
            entry = {"topic_id": self.topic_ids[topic],
                     "offsets": {str(p): int(self.offsets[(topic, p)]) for p in partitions}}
            epochs = {str(p): int(self.epochs[(topic, p)]) for p in partitions if self.epochs.get((topic, p), -1) >= 0}
            if epochs:  # absent when unknown, so offsets without epochs keep their old JSON
                entry["epochs"] = epochs
            topics[topic] = entry
        return {"version": OFFSETS_FORMAT_VERSION, "topics": topics}

    @classmethod
    def from_json_dict(cls, value: Mapping[str, Any]) -> "SourceOffset":
        if "topics" in value and "version" in value:
            if value["version"] != OFFSETS_FORMAT_VERSION:
                raise InvalidConfigError(f"checkpoint offsets have version {value['version']}; this source reads "
                                         f"version {OFFSETS_FORMAT_VERSION}")
            entries = value["topics"]
            topic_ids = {t: str(e.get("topic_id", UNKNOWN_TOPIC_ID)) for t, e in entries.items()}
            per_topic = {t: e.get("offsets", {}) for t, e in entries.items()}
            epochs = {(t, int(p)): int(epoch) for t, e in entries.items()
                      for p, epoch in (e.get("epochs") or {}).items()}
        else:
            topic_ids = {t: UNKNOWN_TOPIC_ID for t in value}
            per_topic = dict(value)
            epochs = {}
        offsets = {(t, int(p)): int(o) for t, parts in per_topic.items() for p, o in parts.items()}
        return cls(topic_ids, offsets, {k: e for k, e in epochs.items() if k in offsets})

    def partitions_of(self, topic: str) -> list[int]:
        return sorted(p for t, p in self.offsets if t == topic)


@dataclass(frozen=True)
class PartitionState:
    log_start_offset: int  # first offset still stored (retention moves it up)
    high_watermark: int  # end of the committed records, exclusive
    leader_epoch: int = -1  # the epoch the leader answered the HW in (-1: unknown)


@dataclass(frozen=True)
class TopicState:
    topic_id: str
    partitions: Mapping[int, PartitionState]


# What the driver saw of the cluster at one moment: subscribed topics only.
Snapshot = Mapping[str, TopicState]


def leader_epochs_of(snapshot: Snapshot) -> dict[TopicPartitionKey, int]:
    """The leader epoch of each partition of a snapshot: an offset planned from it was read in that epoch."""
    return {(t, p): ps.leader_epoch for t, s in snapshot.items() for p, ps in s.partitions.items()
            if ps.leader_epoch >= 0}


def latest_of(snapshot: Snapshot) -> SourceOffset:
    """The high watermarks of a snapshot as an offset (what reportLatestOffset shows)."""
    return SourceOffset({t: s.topic_id for t, s in snapshot.items()},
                        {(t, p): ps.high_watermark for t, s in snapshot.items() for p, ps in s.partitions.items()},
                        leader_epochs_of(snapshot))


def earliest_of(snapshot: Snapshot) -> SourceOffset:
    return SourceOffset({t: s.topic_id for t, s in snapshot.items()},
                        {(t, p): ps.log_start_offset for t, s in snapshot.items() for p, ps in s.partitions.items()})
