"""Keys of consumer groups: the broker's group coordinator and the group consumer (issue #24).

Declared here and spliced into ``config.BROKER_KEYS`` and ``config.CONSUMER_KEYS``.
"""

from __future__ import annotations

from ads_spark.config_key import ConfigKey, _int  # noqa: F401

# The group coordinator's keys (Kafka's names and defaults; broker/group/). group.max.size is bounded here
# where Kafka's is not: every member's metadata is held in memory and sent to the group's leader.
GROUP_MAX_SIZE_MAX = 10_000
GROUP_BROKER_KEYS: list[ConfigKey] = [
    _int("offsets.topic.replication.factor", 3, "replication factor of __consumer_offsets when the first "
         "find_coordinator creates it (min(this, live brokers))", 1, 64),
    _int("offsets.topic.num.partitions", 50, "partitions of __consumer_offsets (a group's coordinator leads "
         "partition abs(hash(group)) % this)", 1, 1000),
    _int("offsets.topic.segment.bytes", 104857600, "segment.bytes of __consumer_offsets", 1024),
    _int("offsets.retention.minutes", 10080, "committed offsets of a group without members expire this long "
         "after it became empty (or after the commit, for a group that never had members)", 1),
    _int("offsets.retention.ms", -1, "ADS (Kafka has minutes only): the same retention in ms when set; -1: "
         "offsets.retention.minutes applies", -1),
    _int("offsets.retention.check.interval.ms", 600000, "how often the coordinator looks for expired offsets", 1),
    _int("offsets.commit.timeout.ms", 5000, "how long an offset commit waits for its acks=all append", 1),
    _int("offset.metadata.max.bytes", 4096, "longest metadata string of a committed offset (UTF-8 bytes)", 0),
    _int("group.min.session.timeout.ms", 6000, "shortest session.timeout.ms a member may join with", 1),
    _int("group.max.session.timeout.ms", 1800000, "longest session.timeout.ms a member may join with", 1),
    _int("group.initial.rebalance.delay.ms", 3000, "how long the first rebalance of an empty group waits for "
         "more members to join", 0),
    _int("group.max.size", 1000, "most members a group may have (a join beyond it: GROUP_MAX_SIZE_REACHED)", 1,
         GROUP_MAX_SIZE_MAX),
]

# The group consumer's keys (Kafka's names and defaults; client/group_consumer.py reads them).
GROUP_CONSUMER_KEYS: list[ConfigKey] = [
    ConfigKey("group.id", "str", "", "the consumer group: subscribe() and commit() need it"),
    ConfigKey("group.instance.id", "str", "", "static membership: a restart under the same id within "
              "session.timeout.ms takes back its partitions without a rebalance"),
    ConfigKey("enable.auto.commit", "bool", True, "commit the positions every auto.commit.interval.ms (in poll), "
              "before a rebalance and on close (with a group.id only)"),
    _int("auto.commit.interval.ms", 5000, "how often auto commit commits", 0),
    _int("session.timeout.ms", 45000, "the coordinator removes a member it heard no heartbeat from for this long", 1),
    _int("heartbeat.interval.ms", 3000, "pause between heartbeats (below session.timeout.ms)", 1),
    _int("max.poll.interval.ms", 300000, "a member that does not poll for this long leaves its group; also its "
         "rebalance timeout", 1),
    ConfigKey("partition.assignment.strategy", "list", "range,cooperative-sticky", "assignors in preference "
              "order: range, roundrobin, cooperative-sticky (or Kafka's class names)"),
]
