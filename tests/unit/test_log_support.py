"""Helpers shared by the storage-engine tests (tests/unit/test_log_*.py); holds no tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from ads_spark.broker.log import LogConfig, PartitionLog
from ads_spark.protocol.records import PRODUCE_SCHEMA


def produce_batch(values: list[bytes], timestamps_ms: list[int] | None = None) -> pa.RecordBatch:
    """A PRODUCE_SCHEMA batch whose values are ``values`` (timestamps default to 1000, 1001, ...)."""
    n = len(values)
    timestamps = timestamps_ms if timestamps_ms is not None else list(range(1000, 1000 + n))
    return pa.RecordBatch.from_arrays(
        [pa.array(np.asarray(timestamps, dtype=np.int64), pa.timestamp("ms")),
         pa.array([b"k%d" % i for i in range(n)], pa.binary()),
         pa.array(values, pa.binary()),
         pa.array([[{"key": "h", "value": v}] for v in values], PRODUCE_SCHEMA.field("headers").type)],
        schema=PRODUCE_SCHEMA)


def values_for(first: int, count: int) -> list[bytes]:
    return [b"value-%d" % i for i in range(first, first + count)]


def open_log(directory: Path, config: LogConfig | None = None, *, recovery_point: int = 0,
             clean_shutdown: bool = False, now_ms: int = 0, log_start_offset: int | None = None) -> PartitionLog:
    return PartitionLog.open(directory, config or LogConfig(), recovery_point=recovery_point,
                             clean_shutdown=clean_shutdown, now_ms=now_ms, log_start_offset=log_start_offset)


def stored_values(log: PartitionLog) -> dict[int, bytes]:
    """offset -> value for every record of the log at/after its start offset."""
    result: dict[int, bytes] = {}
    for batch, header in log.batches():
        offsets = batch.column("offset").to_pylist()
        assert offsets == list(range(header.base_offset, header.next_offset))
        for offset, value in zip(offsets, batch.column("value").to_pylist()):
            if offset >= log.log_start_offset:
                result[offset] = value
    return result
