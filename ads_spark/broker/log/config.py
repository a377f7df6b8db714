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


CLEANUP_DELETE = "delete"
CLEANUP_COMPACT = "compact"
# Kafka accepts the two in either order; "compact,delete" is the spelling ADS writes back.
CLEANUP_POLICIES = (CLEANUP_DELETE, CLEANUP_COMPACT, "compact,delete", "delete,compact")


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1 << 30  # segment.bytes: roll before a segment file would exceed this
    segment_ms: int = 7 * 24 * 3600 * 1000  # segment.ms: roll a non-empty segment this old
    retention_ms: int = 7 * 24 * 3600 * 1000  # retention.ms, -1 = unlimited
    retention_bytes: int = UNLIMITED  # retention.bytes per partition, -1 = unlimited
    flush_interval_messages: int = LONG_MAX  # flush.messages: fsync after this many unflushed records
    flush_interval_ms: int = LONG_MAX  # flush.ms: fsync when the last flush is this old
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES  # largest batch accepted (Arrow nbytes)
    cleanup_policy: str = CLEANUP_DELETE  # cleanup.policy: delete | compact | compact,delete
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio: dirty bytes / log bytes to clean
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms: a record stays uncompacted at least this long
    max_compaction_lag_ms: int = LONG_MAX  # max.compaction.lag.ms: dirty records this old are cleaned anyway
    delete_retention_ms: int = 86_400_000  # delete.retention.ms: tombstones live this long after first cleaned
    # schema.statistics.columns: a typed topic's columns whose min/max/null count the leader keeps per batch
    statistics_columns: tuple[str, ...] = ()

    @property
    def compact(self) -> bool:
        return CLEANUP_COMPACT in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        """Time and size retention apply (``delete`` or ``compact,delete``)."""
        return CLEANUP_DELETE in self.cleanup_policy.split(",")

    def __post_init__(self) -> None:
        for name in ("segment_bytes", "segment_ms", "flush_interval_messages", "flush_interval_ms",
                     "max_message_bytes"):
            if getattr(self, name) < 1:
                raise InvalidConfigError(f"log config {name}={getattr(self, name)} must be >= 1")
        for name in ("retention_ms", "retention_bytes"):
            if getattr(self, name) < UNLIMITED:
                raise InvalidConfigError(f"log config {name}={getattr(self, name)} must be >= -1")
        if self.cleanup_policy not in CLEANUP_POLICIES:
            raise InvalidConfigError(f"log config cleanup_policy={self.cleanup_policy!r} must be one of "
                                     f"{', '.join(CLEANUP_POLICIES)}")
        if not 0.0 <= self.min_cleanable_dirty_ratio <= 1.0:
            raise InvalidConfigError(f"log config min_cleanable_dirty_ratio={self.min_cleanable_dirty_ratio} "
                                     "must be in [0, 1]")
        for name in ("min_compaction_lag_ms", "delete_retention_ms"):
            if getattr(self, name) < 0:
                raise InvalidConfigError(f"log config {name}={getattr(self, name)} must be >= 0")
        if self.max_compaction_lag_ms < 1:
            raise InvalidConfigError(f"log config max_compaction_lag_ms={self.max_compaction_lag_ms} must be >= 1")
