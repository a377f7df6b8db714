"""Keys of consumer groups: the broker's group coordinator and the group consumer (issue #24).

Declared here and spliced into ``config.BROKER_KEYS`` and ``config.CONSUMER_KEYS``.
"""

from __future__ import annotations

from ads_spark.config_key import ConfigKey, _int  # noqa: F401

GROUP_BROKER_KEYS: list[ConfigKey] = []

GROUP_CONSUMER_KEYS: list[ConfigKey] = []
