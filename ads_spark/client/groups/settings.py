"""The group consumer's settings, parsed once from the consumer's config (keys: config_groups.py).

Kept apart so that the consumer can refuse a bad value by name when it is built, before any
connection, and the membership code reads plain typed fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ads_spark.client import assignors
from ads_spark.config import parse_bool, parse_int
from ads_spark.errors import InvalidConfigError

INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class GroupSettings:
    group_id: str
    group_instance_id: str
    auto_commit: bool
    auto_commit_interval_ms: int
    session_timeout_ms: int
    heartbeat_interval_ms: int
    max_poll_interval_ms: int
    strategies: tuple[str, ...]
    protocol: str  # assignors.EAGER or COOPERATIVE: what every configured assignor supports


def group_settings(config: Mapping[str, Any]) -> GroupSettings | None:
    """The settings of a consumer with a ``group.id``; None without one. ``enable.auto.commit=true`` set
    explicitly without a group is refused (Kafka's rule: there is nowhere to commit to)."""
    group_id = str(config.get("group.id") or "")
    auto_commit = parse_bool(config.get("enable.auto.commit", True), name="enable.auto.commit")
    if not group_id:
        if auto_commit and "enable.auto.commit" in config:
            raise InvalidConfigError("'enable.auto.commit' cannot be true without a 'group.id'")
        for key in ("group.instance.id",):
            if config.get(key):
                raise InvalidConfigError(f"'{key}' needs a 'group.id'")
        return None
    session_timeout_ms = parse_int(config.get("session.timeout.ms", 45000), name="session.timeout.ms",
                                   min_value=1, max_value=INT32_MAX)
    heartbeat_interval_ms = parse_int(config.get("heartbeat.interval.ms", 3000), name="heartbeat.interval.ms",
                                      min_value=1, max_value=INT32_MAX)
    if heartbeat_interval_ms >= session_timeout_ms:  # Kafka refuses it too: the session would expire between beats
        raise InvalidConfigError(f"'heartbeat.interval.ms' ({heartbeat_interval_ms}) must be below "
                                 f"'session.timeout.ms' ({session_timeout_ms})")
    strategies = assignors.parse_strategies(config.get("partition.assignment.strategy", "range,cooperative-sticky"))
    return GroupSettings(
        group_id=group_id, group_instance_id=str(config.get("group.instance.id") or ""), auto_commit=auto_commit,
        auto_commit_interval_ms=parse_int(config.get("auto.commit.interval.ms", 5000), name="auto.commit.interval.ms",
                                          min_value=0, max_value=INT32_MAX),
        session_timeout_ms=session_timeout_ms, heartbeat_interval_ms=heartbeat_interval_ms,
        max_poll_interval_ms=parse_int(config.get("max.poll.interval.ms", 300000), name="max.poll.interval.ms",
                                       min_value=1, max_value=INT32_MAX),
        strategies=strategies, protocol=assignors.rebalance_protocol(strategies))
