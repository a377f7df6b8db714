"""Keys of log compaction: the broker's cleaner and the topic-level cleanup policy (issue #24).

Declared here and spliced into ``config.BROKER_KEYS`` and ``config.TOPIC_KEYS``; a topic key whose
default comes from a broker key is named in ``COMPACTION_TOPIC_DEFAULT_FROM_BROKER``.
"""

from __future__ import annotations

from ads_spark.config_key import ConfigKey, _int  # noqa: F401

CLEANER_BROKER_KEYS: list[ConfigKey] = []

COMPACTION_TOPIC_KEYS: list[ConfigKey] = []

COMPACTION_TOPIC_DEFAULT_FROM_BROKER: dict[str, str] = {}
