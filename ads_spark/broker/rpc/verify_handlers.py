"""``replica_status``: what a broker's replicas hold below their high watermark, for verification.

Each replica reports its batches (base offset, record count, leader epoch, CRC)
from the log start to its HW; ``ads verify-replicas`` compares replicas of a
partition over the range every one of them has committed. The CRC covers the
records and the header, so equal lists mean identical logs (invariant 8).
"""

from __future__ import annotations

from typing import Any

from ads_spark.protocol import wire

BATCHES_REPORTED_MAX = 1_000_000


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
                batches.append([header.base_offset, header.record_count, header.leader_epoch, header.crc])
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
        return {"broker_id": self.broker.broker_id, "partitions": partitions}
