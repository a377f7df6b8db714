"""Keys of log compaction: the broker's cleaner and the topic-level cleanup policy (issue #24).

Declared here and spliced into ``config.BROKER_KEYS`` and ``config.TOPIC_KEYS``; a topic key whose
default comes from a broker key is named in ``COMPACTION_TOPIC_DEFAULT_FROM_BROKER``.

Kafka's names and defaults. The topic keys are read by ``broker.log_config_for`` into ``LogConfig``; the
broker keys by ``broker/log/cleaner_manager.py`` (the cleaner thread). ``cleanup.policy`` takes exactly
``delete``, ``compact`` or ``compact,delete`` (``delete,compact`` is the same policy and is stored as
``compact,delete``), so the rest of the broker compares one spelling.
"""

from __future__ import annotations

import sys

from ads_spark.config_key import ConfigKey, _int

LONG_MAX = 2**63 - 1
# Kafka's default of log.cleaner.io.max.bytes.per.second (Double.MAX_VALUE): no limit.
UNLIMITED_BYTES_PER_SECOND = sys.float_info.max

CLEANUP_POLICIES = ("delete", "compact", "compact,delete")
# Spellings of the same policy, with the one stored.
_POLICY_ALIASES = (("delete,compact", "compact,delete"),)


def _policy(name: str, default: str | None, doc: str) -> ConfigKey:
    return ConfigKey(name, "enum", default, doc, choices=CLEANUP_POLICIES, aliases=_POLICY_ALIASES)


def _ratio(name: str, default: float | None, doc: str) -> ConfigKey:
    return ConfigKey(name, "double", default, doc, min_value=0, max_value=1)


CLEANER_BROKER_KEYS: list[ConfigKey] = [
    _policy("log.cleanup.policy", "delete", "what happens to old segments: delete (time/size retention), compact "
            "(latest record per key kept, no retention), or compact,delete (both)"),
    _ratio("log.cleaner.min.cleanable.ratio", 0.5, "a log is cleaned once its dirty bytes are at least this share of "
           "its cleanable bytes"),
    _int("log.cleaner.min.compaction.lag.ms", 0, "a record younger than this is not compacted yet", 0),
    _int("log.cleaner.max.compaction.lag.ms", LONG_MAX, "a record older than this is compacted whatever the "
         "dirty ratio", 1),
    _int("log.cleaner.delete.retention.ms", 86_400_000, "a tombstone is kept this long after its segment was "
         "first cleaned, so that readers see the delete", 0),
    ConfigKey("log.cleaner.enable", "bool", True, "run the log cleaner thread (without it, compacted topics grow)"),
    ConfigKey("log.cleaner.threads", "int", 1, "log cleaner threads", 1, 1,
              refused=(("max", "one cleaner thread per broker (more are not implemented)"),)),
    ConfigKey("log.cleaner.io.max.bytes.per.second", "double", UNLIMITED_BYTES_PER_SECOND,
              "bytes the cleaner reads plus writes per second (default: unlimited)", min_value=1),
    _int("log.cleaner.dedupe.buffer.size", 134_217_728, "memory of the cleaner's key map in bytes; it holds "
         "this / 128 keys (cleaner_manager.KEY_MAP_BYTES_PER_ENTRY)", 4096),
    _int("log.cleaner.backoff.ms", 15_000, "the cleaner's pause when no log needs cleaning", 1),
]

COMPACTION_TOPIC_KEYS: list[ConfigKey] = [
    _policy("cleanup.policy", None, "delete (time/size retention), compact (latest record per key kept, no "
            "retention; a record without a key is refused) or compact,delete (both)"),
    _ratio("min.cleanable.dirty.ratio", None, "clean once dirty bytes are this share of cleanable bytes"),
    _int("min.compaction.lag.ms", None, "a record younger than this is not compacted yet", 0),
    _int("max.compaction.lag.ms", None, "a record older than this is compacted whatever the dirty ratio", 1),
    _int("delete.retention.ms", None, "a tombstone is kept this long after its segment was first cleaned", 0),
]

COMPACTION_TOPIC_DEFAULT_FROM_BROKER: dict[str, str] = {
    "cleanup.policy": "log.cleanup.policy",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
}
