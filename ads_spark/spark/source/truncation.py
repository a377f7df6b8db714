"""KIP-320 for the "ads" source: a truncation under a checkpointed offset told apart from "no data yet". Pure.

An offset the source checkpoints carries the leader epoch it was read in
(``offsets.py``). After an unclean election the new leader's log may end below
that offset, and the records it writes next land on offsets the query has
already passed: without a check, the stream would resume at its old offset and
never see them. So when a partition's leader epoch is no longer the one its
offset was read in, the reader asks the leader where that epoch ends in its log
(``lookups.epoch_end_offsets``) and this module decides:

* the epoch ends at or after the offset: nothing the query read is gone;
* it ends below: offsets [end, offset) were truncated. failOnDataLoss=true fails
  the query naming topic, partition and range; false logs them, and the next
  micro-batch *rewinds* that partition to the end (reads nothing, moves the offset
  back), so the batch after it reads what the log holds there now.

A rewinding batch (end below start for a partition) is how the resume point gets
into Spark's offset log: ``plan_ranges`` plans nothing for it, and a restart that
replays the batch replays the rewind. Offsets without an epoch are not checked.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Mapping

from ads_spark.replication.epochs import consumer_divergence
from ads_spark.spark.source.offsets import (
    UNKNOWN_TOPIC_ID,
    Snapshot,
    SourceOffset,
    TopicPartitionKey,
    leader_epochs_of,
)
from ads_spark.spark.source.planning import DataLossError

log = logging.getLogger("ads.spark.source")


@dataclass(frozen=True)
class Truncation:
    topic: str
    partition: int
    lost_from_offset: int  # also where reading resumes
    lost_to_offset_exclusive: int  # the offset the query had reached
    leader_epoch: int  # the epoch the leader answered in: the resumed offset's epoch

    def describe(self) -> str:
        return (f"{self.topic}-{self.partition}: offsets {self.lost_from_offset}.."
                f"{self.lost_to_offset_exclusive - 1} were truncated from the log by an unclean leader "
                f"election (leader epoch now {self.leader_epoch})")


def offsets_to_check(start: SourceOffset, snapshot: Snapshot) -> dict[TopicPartitionKey, int]:
    """Partitions whose offset was read in another leader epoch than the current one: key -> that epoch.

    Skipped: offsets without an epoch, offset 0 (nothing read), partitions gone from the snapshot and
    topics re-created under the same name (``planning.reconcile`` reports those)."""
    wanted = {}
    for (topic, p), offset in sorted(start.offsets.items()):
        epoch = start.epochs.get((topic, p), -1)
        state = snapshot.get(topic)
        if epoch < 0 or offset <= 0 or state is None or p not in state.partitions:
            continue
        if start.topic_ids.get(topic) not in (UNKNOWN_TOPIC_ID, state.topic_id):
            continue
        current = state.partitions[p].leader_epoch
        if current >= 0 and current != epoch:
            wanted[(topic, p)] = epoch
    return wanted


def truncations(start: SourceOffset, answers: Mapping[TopicPartitionKey, Mapping]) -> list[Truncation]:
    """The partitions whose leader's log no longer holds what the query read below its offset.

    ``answers``: the leader's offset_for_leader_epoch answer per checked partition
    (``leader_epoch``, ``end_offset``, ``log_end_offset``, ``current_leader_epoch``)."""
    found = []
    for (topic, p), answer in sorted(answers.items()):
        offset = start.offsets[(topic, p)]
        divergence = consumer_divergence(offset, start.epochs[(topic, p)],
                                         (int(answer["leader_epoch"]), int(answer["end_offset"])),
                                         int(answer.get("log_end_offset", -1)))
        if divergence is not None:
            found.append(Truncation(topic, p, divergence[0], offset, int(answer.get("current_leader_epoch", -1))))
    return found


def rewind(start: SourceOffset, found: list[Truncation], fail_on_data_loss: bool) -> SourceOffset | None:
    """The end of a micro-batch that moves truncated partitions back (others stay), or None when none was.

    failOnDataLoss=true raises DataLossError naming every truncated partition and range."""
    if not found:
        return None
    text = "; ".join(t.describe() for t in found)
    if fail_on_data_loss:
        raise DataLossError(f"records the query already read are gone: {text}. Other records may have been "
                            f"written at those offsets since. To read them and continue, set the option "
                            f"failOnDataLoss=false (the truncation will then be logged as a warning).")
    log.warning("ads source: %s; failOnDataLoss=false, so reading resumes at the truncation point", text)
    offsets, epochs = dict(start.offsets), dict(start.epochs)
    for t in found:
        offsets[(t.topic, t.partition)] = t.lost_from_offset
        if t.leader_epoch >= 0:
            epochs[(t.topic, t.partition)] = t.leader_epoch
        else:
            epochs.pop((t.topic, t.partition), None)
    return SourceOffset(dict(start.topic_ids), offsets, epochs)


def with_epochs(end: SourceOffset, start: SourceOffset | None, snapshot: Snapshot) -> SourceOffset:
    """``end`` (planned from ``snapshot``) labelled with the epoch each offset was read in: the snapshot's
    leader epoch (every record below a HW it answered has an epoch at or below it), or for a partition the
    snapshot lacks and whose offset did not move, the epoch ``start`` had."""
    current = leader_epochs_of(snapshot)
    epochs = {}
    for key, offset in end.offsets.items():
        if key in current:
            epochs[key] = current[key]
        elif start is not None and start.offsets.get(key) == offset and key in start.epochs:
            epochs[key] = start.epochs[key]
    return SourceOffset(dict(end.topic_ids), dict(end.offsets), epochs)
