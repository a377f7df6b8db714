"""``__consumer_offsets``: the internal topic group coordinators keep their state in, and its creation.

Kafka creates the topic on the first FindCoordinator, and so does ADS: the broker answering finds the
topic missing from its metadata cache, writes it to ZooKeeper (the controller then elects its leaders
and tells the brokers), and answers COORDINATOR_NOT_AVAILABLE (retriable) until the group's partition
has a leader. The topic is compacted (only the latest record per key matters: ``group_records``' keys
are canonical), its replication factor is ``min(offsets.topic.replication.factor, live brokers)`` and
its ``min.insync.replicas`` ``min(2, RF)``, so an acknowledged commit is on two replicas whenever the
cluster has them. Clients may not produce to it (``data_handlers`` refuses, naming the topic): only
coordinators append, through the replica manager.

A group's partition is ``partition_for(group_id, partitions)`` over the partition count the topic HAS
(from the metadata cache), not the configured one: a topic created under another setting keeps its count.
"""

from __future__ import annotations

import logging
import threading
import time

from ads_spark.errors import AdsError, TopicAlreadyExistsError

log = logging.getLogger("ads.broker.group")

OFFSETS_TOPIC = "__consumer_offsets"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC})
# A failed creation (no live broker yet, ZooKeeper busy) is tried again by a later find_coordinator, not
# by every one of a burst of them.
CREATE_RETRY_INTERVAL_S = 1.0
OFFSETS_TOPIC_MIN_INSYNC_MAX = 2


def is_internal(topic: str) -> bool:
    return topic in INTERNAL_TOPICS


def offsets_topic_config(config, live_brokers: int) -> tuple[int, int, dict[str, str]]:
    """(partitions, replication factor, topic config) of a new ``__consumer_offsets``."""
    replication_factor = max(1, min(config["offsets.topic.replication.factor"], live_brokers))
    topic_config = {"cleanup.policy": "compact",
                    "min.insync.replicas": str(min(OFFSETS_TOPIC_MIN_INSYNC_MAX, replication_factor)),
                    "segment.bytes": str(config["offsets.topic.segment.bytes"])}
    return config["offsets.topic.num.partitions"], replication_factor, topic_config


class OffsetsTopic:
    """Finds a group's offsets partition and its leader in the metadata cache; creates the topic once."""

    def __init__(self, broker):
        self.broker = broker
        self._create_lock = threading.Lock()
        self._last_attempt_s = -CREATE_RETRY_INTERVAL_S

    def partition_count(self) -> int | None:
        """Partitions of the topic as the metadata cache knows it; None while it knows no partition of it."""
        described = self.broker.metadata.describe([OFFSETS_TOPIC])[0]
        partitions = described.get("partitions") or []
        return len(partitions) if described.get("error_code", 0) == 0 and partitions else None

    def leader_of(self, partition: int) -> int:
        entry = self.broker.metadata.partition(OFFSETS_TOPIC, partition)
        return -1 if entry is None else int(entry.get("leader", -1))

    def ensure_created(self) -> None:
        """Write the topic to ZooKeeper unless it exists; never raises (the caller answers
        COORDINATOR_NOT_AVAILABLE until the topic has leaders, and a later call tries again)."""
        membership = self.broker.zk
        if membership is None or not self._create_lock.acquire(blocking=False):
            return
        try:
            now_s = time.monotonic()
            if now_s - self._last_attempt_s < CREATE_RETRY_INTERVAL_S:
                return
            self._last_attempt_s = now_s
            if membership.topic_exists(OFFSETS_TOPIC):
                return
            live = len(membership.zk.live_brokers())
            partitions, replication_factor, topic_config = offsets_topic_config(self.broker.config, live)
            plan = membership.plan_topic(OFFSETS_TOPIC, partitions, replication_factor, None, None)
            membership.create_planned_topic(OFFSETS_TOPIC, plan, topic_config, None)
            log.info("created %s: %s partitions, replication factor %s, %s", OFFSETS_TOPIC, partitions,
                     replication_factor, topic_config)
        except TopicAlreadyExistsError:
            pass  # another broker's find_coordinator created it first
        except (AdsError, OSError, RuntimeError) as exc:
            log.warning("could not create %s yet: %s", OFFSETS_TOPIC, exc)
        except Exception:
            log.exception("could not create %s yet", OFFSETS_TOPIC)
        finally:
            self._create_lock.release()
