"""Keeping the target's remote topics like their sources: existence, partition count, configs.

The driver of ``jobs/mirror.py`` calls ``sync_topics`` before the first micro-batch and before
every batch that names a topic it has not synced recently, so a new source topic (matched by
the pattern) or new partitions exist on the target before a record of theirs is written.

* A missing remote topic is created with the source's partition count, the source's
  replication factor capped by the target's broker count (or ``replication_factor``), and the
  source's mirrorable config overrides.
* Config overrides are copied (set and removed) except those that describe the source cluster
  rather than the data (``CONFIGS_NOT_MIRRORED``), as MirrorMaker 2 does.
* More source partitions than target partitions: the target is grown to the source's count
  (``Admin.create_partitions``) before a record of a new partition is written, so every record
  keeps its partition number. More target partitions than source ones (a topic cannot shrink;
  identity naming onto a bigger topic) is left alone.

Also the checkpoint topic: created (one partition) when missing, read back in full for offset
translation (``read_checkpoints``; it holds a record per partition per micro-batch).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ads_spark.errors import UnknownTopicOrPartitionError
from ads_spark.mirror.checkpoints import Checkpoint, CheckpointIndex
from ads_spark.mirror.naming import MirrorPolicy

log = logging.getLogger("ads.mirror")

# Overrides tied to the source cluster's brokers or durability choices, not to the data.
CONFIGS_NOT_MIRRORED = frozenset({"min.insync.replicas", "unclean.leader.election.enable", "observers",
                                  "message.timestamp.type"})
CREATE_TIMEOUT_S = 60.0


@dataclass
class SyncReport:
    created: list[str] = field(default_factory=list)
    grown: dict[str, tuple[int, int]] = field(default_factory=dict)  # remote -> (before, after)
    configs_changed: list[str] = field(default_factory=list)


def mirrored_configs(source_overrides: dict[str, str]) -> dict[str, str]:
    return {k: str(v) for k, v in source_overrides.items() if k not in CONFIGS_NOT_MIRRORED and v is not None}


def _overrides(admin, topic: str) -> dict[str, str]:
    return {k: str(v) for k, v in (admin.describe_configs(topic).get("overrides") or {}).items()}


def _target_broker_count(admin) -> int:
    return max(1, len(admin.cluster().get("brokers", [])))


def sync_topics(source_admin, target_admin, policy: MirrorPolicy, topics: list[str],
                replication_factor: int | None = None) -> SyncReport:
    """Make the remote topic of each source topic in ``topics`` match it (see the module docstring)."""
    report = SyncReport()
    existing = set(target_admin.list_topics())
    for topic in topics:
        try:
            described = source_admin.describe_topics([topic])
        except UnknownTopicOrPartitionError:
            continue  # deleted since it was listed: nothing to mirror
        if not described:
            continue
        source = described[0]
        partitions = len(source.partitions)
        configs = mirrored_configs(_overrides(source_admin, topic))
        remote = policy.remote_topic(topic)
        if remote not in existing:
            source_rf = max((len(p.replicas) for p in source.partitions), default=1)
            rf = replication_factor or min(source_rf, _target_broker_count(target_admin))
            target_admin.create_topic(remote, partitions=partitions, replication_factor=rf, config=configs,
                                      timeout_s=CREATE_TIMEOUT_S)
            existing.add(remote)
            report.created.append(remote)
            log.info("mirror: created %s (%d partitions, RF %d, configs %s)", remote, partitions, rf, configs)
            continue
        _sync_partitions(target_admin, remote, partitions, report)
        _sync_configs(target_admin, remote, configs, report)
    return report


def _sync_partitions(target_admin, remote: str, wanted: int, report: SyncReport) -> None:
    have = len(target_admin.describe_topics([remote])[0].partitions)
    if have >= wanted:
        return
    target_admin.create_partitions(remote, wanted, timeout_s=CREATE_TIMEOUT_S)
    report.grown[remote] = (have, wanted)
    log.info("mirror: %s grown from %d to %d partitions", remote, have, wanted)


def _sync_configs(target_admin, remote: str, wanted: dict[str, str], report: SyncReport) -> None:
    current = mirrored_configs(_overrides(target_admin, remote))
    to_set = {k: v for k, v in wanted.items() if current.get(k) != v}
    to_delete = sorted(k for k in current if k not in wanted)
    if to_set or to_delete:
        target_admin.alter_configs(remote, set_configs=to_set, delete_configs=to_delete)
        report.configs_changed.append(remote)
        log.info("mirror: %s configs set %s, removed %s", remote, to_set, to_delete)


def ensure_checkpoint_topic(target_admin, policy: MirrorPolicy, replication_factor: int | None = None) -> str:
    name = policy.checkpoint_topic
    if name not in set(target_admin.list_topics()):
        rf = replication_factor or min(3, _target_broker_count(target_admin))
        target_admin.create_topic(name, partitions=1, replication_factor=rf, timeout_s=CREATE_TIMEOUT_S)
    return name


def read_checkpoints(target_bootstrap: str, policy: MirrorPolicy, client_config: dict | None = None) -> CheckpointIndex:
    """Every checkpoint of the flow, read from the target's checkpoint topic (log start to HW)."""
    from ads_spark.client import Consumer, TopicPartition

    consumer = Consumer({**(client_config or {}), "bootstrap.servers": target_bootstrap})
    try:
        tp = TopicPartition(policy.checkpoint_topic, 0)
        start, high_watermark = consumer.get_watermark_offsets(tp)
        values = consumer.fetch_arrow(tp, start, high_watermark).column("value").to_pylist() \
            if high_watermark > start else []
    finally:
        consumer.close()
    return CheckpointIndex(Checkpoint.from_value(v) for v in values)


def translate_starting_offsets(source_json, target_bootstrap: str, source_alias: str, target_alias: str = "target",
                               naming: str = "prefix", client_config: dict | None = None) -> str:
    """A reader's source ``startingOffsets`` JSON (Kafka's form or the ads source's checkpoint form) as
    the JSON to start from on the target, using the checkpoints the mirror wrote there.

    Bound (see ``ads_spark.mirror.checkpoints``): never skips a record; re-reads at most the records of
    one mirror micro-batch per partition when the mirror had passed the reader's position."""
    from ads_spark.mirror.checkpoints import parse_offsets_json, translate_offsets

    policy = MirrorPolicy(source_alias, target_alias, naming)
    parse_offsets_json(source_json)  # bad input is refused before any connection is opened
    return translate_offsets(source_json, read_checkpoints(target_bootstrap, policy, client_config), policy)
