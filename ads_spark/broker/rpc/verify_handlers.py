"""``replica_status``: what a broker's replicas hold below their high watermark, for verification.

Each replica reports its batches (base offset, record count, leader epoch, CRC)
from the log start to its HW; ``ads verify-replicas`` compares replicas of a
partition over the range every one of them has committed. The CRC covers the
records and the header, so equal lists mean identical logs (invariant 8).

A compacted replica (``cleanup.policy`` with ``compact``) cleans on its own schedule, so its batches
differ from its peers' below where it cleaned. It reports in addition ``cleaned_up_to`` (the cleaner's
checkpoint, or past the last batch the cleaner rewrote if that is further: the checkpoint is written just
after a swap) and ``records``: [offset, key digest, value digest or null] of each record below the HW
(8-byte BLAKE2b digests, at most ``RECORDS_REPORTED_MAX``; ``records_end`` says how far they go). The
CLI compares the latest value per key below the cleaned points and every record above them.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ads_spark.broker.log.cleaner_manager import compacted, first_dirty_offset
from ads_spark.protocol import wire

BATCHES_REPORTED_MAX = 1_000_000
RECORDS_REPORTED_MAX = 1_000_000


def _digest(data: bytes | None) -> str | None:
    return None if data is None else hashlib.blake2b(data, digest_size=8).hexdigest()


def compacted_status(partition_log, high_watermark: int, start: int, checkpointed: int | None) -> dict[str, Any]:
    """The extra fields of a compacted replica's status (see the module docstring)."""
    cleaned_up_to = first_dirty_offset(checkpointed, start, partition_log.log_end_offset)
    records: list[list] = []
    records_end = start
    for batch, header in partition_log.batches(start):
        if header.base_offset >= high_watermark or len(records) + batch.num_rows > RECORDS_REPORTED_MAX:
            break
        if header.cleaned:
            cleaned_up_to = max(cleaned_up_to, header.next_offset)
        offsets, keys, values = (batch.column(name).to_pylist() for name in ("offset", "key", "value"))
        records.extend([offset, _digest(key), _digest(value)] for offset, key, value in zip(offsets, keys, values))
        records_end = header.next_offset
    return {"cleanup_policy": partition_log.config.cleanup_policy, "cleaned_up_to": cleaned_up_to,
            "records": records, "records_end": records_end}


class VerifyHandlers:
    def __init__(self, broker):
        self.broker = broker

    def handle_replica_status(self, body: dict[str, Any]) -> dict[str, Any]:
        topic_filter = wire.optional(body, "topic", str, None, "replica_status")
        partitions = []
        for partition in self.broker.replica_manager.partitions():
            if topic_filter is not None and partition.topic != topic_filter:
                continue
            with partition.changed:
                high_watermark = partition.high_watermark
                start = partition.log.log_start_offset
                role = partition.state.role.value
            batches = []
            for _batch, header in partition.log.batches(start):
                if header.base_offset >= high_watermark or len(batches) >= BATCHES_REPORTED_MAX:
                    break
                # the producer fields last: readers that index the first four are unaffected
                batches.append([header.base_offset, header.record_count, header.leader_epoch, header.crc,
                                header.producer_id, header.producer_epoch, header.base_sequence])
            state = partition.state
            partitions.append({"topic": partition.topic, "partition": partition.partition, "role": role,
                               "leader_epoch": state.leader_epoch, "partition_epoch": state.partition_epoch,
                               "isr": sorted(state.isr), "fenced": state.fenced,
                               "pending_isr": None if state.pending_isr is None else sorted(state.pending_isr.proposed.isr),
                               "followers": {str(r): {"log_end_offset": p.log_end_offset, "broker_epoch": p.broker_epoch,
                                                      "last_caught_up_ms": p.last_caught_up_ms}
                                             for r, p in state.progress.items()},
                               "high_watermark": high_watermark, "log_start_offset": start,
                               "log_end_offset": partition.log.log_end_offset, "batches": batches})
            if compacted(partition.log.config.cleanup_policy):
                checkpointed = self.broker.cleaner.checkpointed_offset(partition.key)
                partitions[-1].update(compacted_status(partition.log, high_watermark, start, checkpointed))
        return {"broker_id": self.broker.broker_id, "partitions": partitions}
