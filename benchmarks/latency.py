"""End-to-end latency helpers for `benchmarks.compare`: stamped records, pacing, percentiles.

A record's first 8 bytes are ``time.perf_counter_ns()`` when it was handed to
the client; the reader (in the same process) subtracts that from the time it
sees the record, so the figure covers client batching, the replicated
acknowledgement path and delivery to a consumer. The producer is paced to a
fixed rate in ticks; the first ``WARMUP_FRACTION`` of samples is dropped.
"""

from __future__ import annotations

import struct
import time

WARMUP_FRACTION = 0.1
_STAMP = struct.Struct("<q")


def stamp(record_bytes: int) -> bytes:
    return _STAMP.pack(time.perf_counter_ns()) + b"l" * (record_bytes - _STAMP.size)


def stamp_age_ms(value: bytes) -> float:
    return (time.perf_counter_ns() - _STAMP.unpack_from(value)[0]) / 1e6


def paced_due(started_monotonic_s: float, rate_per_s: float, sent: int) -> int:
    """How many records are due now for a producer paced at ``rate_per_s`` since ``started_monotonic_s``."""
    return max(0, int((time.monotonic() - started_monotonic_s) * rate_per_s) - sent)


def percentiles_ms(latencies_ms: list[float]) -> dict[str, float]:
    samples = sorted(latencies_ms[int(len(latencies_ms) * WARMUP_FRACTION):])
    if not samples:
        return {"p50_ms": float("nan"), "p99_ms": float("nan"), "p999_ms": float("nan")}

    def at(quantile: float) -> float:
        return samples[min(len(samples) - 1, int(quantile * len(samples)))]
    return {"p50_ms": at(0.5), "p99_ms": at(0.99), "p999_ms": at(0.999)}
