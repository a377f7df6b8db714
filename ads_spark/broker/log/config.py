"""Per-partition log settings, with Kafka's topic-level names in Kafka's units.

The broker builds one from the effective topic config (broker defaults plus
topic overrides); the log only reads it, so a config change is a new value.
"""

from __future__ import annotations

from dataclasses import dataclass

from ads_spark.errors import InvalidConfigError

LONG_MAX = 2**63 - 1
UNLIMITED = -1

# Room for the IPC framing and header metadata on top of a 1 MiB body, as Kafka's
# default message.max.bytes (1 MiB + 12 bytes) leaves room for its batch header.
DEFAULT_MAX_MESSAGE_BYTES = (1 << 20) + (64 << 10)


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1 << 30  # segment.bytes: roll before a segment file would exceed this
    segment_ms: int = 7 * 24 * 3600 * 1000  # segment.ms: roll a non-empty segment this old
    retention_ms: int = 7 * 24 * 3600 * 1000  # retention.ms, -1 = unlimited
    retention_bytes: int = UNLIMITED  # retention.bytes per partition, -1 = unlimited
    flush_interval_messages: int = LONG_MAX  # flush.messages: fsync after this many unflushed records
    flush_interval_ms: int = LONG_MAX  # flush.ms: fsync when the last flush is this old
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES  # largest batch accepted (Arrow nbytes)

    def __post_init__(self) -> None:
        for name in ("segment_bytes", "segment_ms", "flush_interval_messages", "flush_interval_ms",
                     "max_message_bytes"):
            if getattr(self, name) < 1:
                raise InvalidConfigError(f"log config {name}={getattr(self, name)} must be >= 1")
        for name in ("retention_ms", "retention_bytes"):
            if getattr(self, name) < UNLIMITED:
                raise InvalidConfigError(f"log config {name}={getattr(self, name)} must be >= -1")
