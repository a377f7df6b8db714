"""Offset checkpoints of a mirror and the translation of source offsets to target offsets. Pure.

After every micro-batch the mirror writes, for each source partition the batch advanced, one
checkpoint record to ``<source alias>.checkpoints.internal`` on the target:
``(source topic, partition, source offset S, target offset T)``, meaning "the record at source
offset S (the next one after the batch) will be at target offset T". The target partition is
written by the mirror alone, record for record in source order, so every target record at or
after T comes from a source offset at or after S.

Translation of a source position ``o`` (the next offset a reader would read) picks the
checkpoint with the greatest ``S <= o`` and answers its ``T``:

* never skips: every source record at or after ``o`` sits at or after ``T`` in the target;
* re-reads at most ``o - S`` records, the records of the source partition between the
  checkpoint and ``o``. A checkpoint follows every micro-batch, so once the mirror has passed
  ``o`` this is less than one mirror micro-batch of that partition, i.e. fewer than the
  mirror's ``maxOffsetsPerTrigger`` (``TRANSLATION_BOUND``). If the mirror had not reached
  ``o`` yet, the reader also waits for (and reads once) what the mirror copies later.
* a position below every checkpoint (before the mirror's first batch ended) translates to
  ``earliest`` (-2): nothing is skipped, at most the mirror's first micro-batch is re-read.
  The special values -2 (earliest) and -1 (latest) are kept as they are.

Records are JSON: small, readable with ``ads data consume``, and nothing here needs speed.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ads_spark.errors import InvalidConfigError
from ads_spark.mirror.naming import MirrorPolicy
from ads_spark.spark.source.options import parse_partition_json

EARLIEST, LATEST = -2, -1
CHECKPOINT_VERSION = 1
TRANSLATION_BOUND = ("re-reads at most the records of one mirror micro-batch per partition "
                     "(fewer than the mirror's maxOffsetsPerTrigger); never skips")


@dataclass(frozen=True, order=True)
class Checkpoint:
    topic: str  # source topic
    partition: int
    source_offset: int  # next source offset after the batch
    target_offset: int  # where that record is (will be) in the target partition

    def to_record(self) -> tuple[bytes, bytes]:
        """(key, value) of the checkpoint record."""
        key = f"{self.topic}/{self.partition}".encode()
        value = json.dumps({"version": CHECKPOINT_VERSION, "topic": self.topic, "partition": self.partition,
                            "source_offset": self.source_offset, "target_offset": self.target_offset},
                           sort_keys=True).encode()
        return key, value

    @classmethod
    def from_value(cls, value: bytes) -> "Checkpoint":
        try:
            entry = json.loads(value)
            if entry.get("version") != CHECKPOINT_VERSION:
                raise ValueError(f"version {entry.get('version')!r}")
            return cls(str(entry["topic"]), int(entry["partition"]), int(entry["source_offset"]),
                       int(entry["target_offset"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidConfigError(f"a mirror checkpoint record cannot be read ({exc}): {value[:200]!r}") from None


class CheckpointIndex:
    """The checkpoints of one flow, per source partition, sorted by source offset."""

    def __init__(self, checkpoints: Iterable[Checkpoint] = ()):
        self._by_partition: dict[tuple[str, int], list[tuple[int, int]]] = {}
        for checkpoint in checkpoints:
            self.add(checkpoint)

    def add(self, checkpoint: Checkpoint) -> None:
        entries = self._by_partition.setdefault((checkpoint.topic, checkpoint.partition), [])
        pair = (checkpoint.source_offset, checkpoint.target_offset)
        index = bisect.bisect_left(entries, pair)
        if index == len(entries) or entries[index] != pair:  # replays write the same checkpoint again
            entries.insert(index, pair)

    def translate(self, topic: str, partition: int, source_offset: int) -> int:
        """The target offset to resume at for a reader whose next source offset is ``source_offset``."""
        if source_offset in (EARLIEST, LATEST):
            return source_offset
        entries = self._by_partition.get((topic, partition), [])
        index = bisect.bisect_right(entries, (source_offset, float("inf"))) - 1
        return entries[index][1] if index >= 0 else EARLIEST

    def partitions(self) -> list[tuple[str, int]]:
        return sorted(self._by_partition)


def parse_offsets_json(source_json: str | Mapping[str, Any]) -> dict[str, dict[int, int]]:
    """Kafka's ``{"t":{"0":23}}`` or the ads source's checkpoint form, to {topic: {partition: offset}}.

    Read by the ads source's own ``startingOffsets`` parser, so the mirror accepts exactly what a reader does."""
    raw = source_json if isinstance(source_json, str) else json.dumps(dict(source_json))
    result: dict[str, dict[int, int]] = {}
    for topic, partition, offset in parse_partition_json(raw, "startingOffsets", allow_special=True):
        result.setdefault(topic, {})[partition] = offset
    return result


def translate_offsets(source_json: str | Mapping[str, Any], index: CheckpointIndex,
                      policy: MirrorPolicy) -> str:
    """A source ``startingOffsets`` JSON as the target's (remote topic names, translated offsets)."""
    translated: dict[str, dict[str, int]] = {}
    for topic, partitions in sorted(parse_offsets_json(source_json).items()):
        remote = policy.remote_topic(topic)
        translated[remote] = {str(p): index.translate(topic, p, o) for p, o in sorted(partitions.items())}
    return json.dumps(translated, sort_keys=True)
