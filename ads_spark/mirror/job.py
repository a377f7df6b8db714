"""The mirror's Spark side: one streaming query from a source cluster to a target cluster.

``start_mirror`` starts ``readStream.format("ads")`` on the source (``subscribePattern`` built by
the policy, headers included) and a ``foreachBatch`` that, for micro-batch ``n``:

1. reads the batch's end offsets from the query's own offsets log (``offsets/<n>`` in the
   checkpoint location: what Spark recorded before running the batch, so a replay sees the
   same ones) and syncs the remote topics those offsets name (``topics.sync_topics``);
2. writes the rows to the target with ``format("ads")``: same partition number, key, value,
   timestamp and headers, topic renamed by the policy, the provenance header
   ``ads.mirror.path`` extended, records whose path names the target dropped (no loops).
   The write runs inside the streaming query, so the sink derives its producer ids from
   (query id, batch id, task): a batch re-run after a failure re-sends the same produce
   batches and the target brokers drop those they hold -- exactly once in the target;
3. writes one checkpoint per source partition the batch advanced: source end offset ->
   target high watermark (the mirror is the only writer of a remote partition, so that is the
   target offset of the record after the batch; a lower HW on a new leader only makes a
   reader re-read more, never skip).

``run_mirror`` restarts the query from its checkpoint when it fails (a bounded number of
times), which is what lets it ride through broker failures on either side.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Callable

from ads_spark.errors import InvalidConfigError
from ads_spark.mirror.checkpoints import Checkpoint
from ads_spark.mirror.naming import PATH_DELIMITER, PATH_HEADER, MirrorPolicy
from ads_spark.mirror import topics as topic_sync

log = logging.getLogger("ads.mirror")

MAX_OFFSETS_PER_TRIGGER_DEFAULT = 20_000
TRIGGER_INTERVAL_MS_DEFAULT = 1000
SYNC_INTERVAL_S_DEFAULT = 30.0
RESTARTS_MAX_DEFAULT = 20
RESTART_BACKOFF_S = 2.0
CHECKPOINT_WAIT_S = 60.0


@dataclass(frozen=True)
class MirrorConfig:
    policy: MirrorPolicy
    source_bootstrap: str
    target_bootstrap: str
    checkpoint_location: str  # a local path (the offsets log is read from it)
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int = MAX_OFFSETS_PER_TRIGGER_DEFAULT
    trigger_interval_ms: int = TRIGGER_INTERVAL_MS_DEFAULT
    available_now: bool = False  # mirror what is there now, then stop
    replication_factor: int | None = None  # of created remote topics; default: the source's, capped
    sync_interval_s: float = SYNC_INTERVAL_S_DEFAULT
    source_options: dict[str, str] = field(default_factory=dict)  # extra ads.* options of the source
    target_options: dict[str, str] = field(default_factory=dict)  # extra ads.* options of the sink

    def __post_init__(self) -> None:
        for name in ("max_offsets_per_trigger", "trigger_interval_ms"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) <= 0:
                raise InvalidConfigError(f"mirror {name} must be a positive integer, got {getattr(self, name)!r}")
        if self.replication_factor is not None and self.replication_factor <= 0:
            raise InvalidConfigError(f"mirror replication_factor must be positive, got {self.replication_factor}")
        if not self.checkpoint_location.strip():
            raise InvalidConfigError("mirror checkpoint location is empty: give a local directory")
        from ads_spark.spark.source.options import parse_source_options

        # The reader's options (--starting-offsets, extra ads.* keys) are checked here, before the target's topics
        # are created and before run_mirror would retry a query that can never start.
        parse_source_options(source_read_options(self), streaming=True)


def source_read_options(config: MirrorConfig) -> dict[str, str]:
    """The options of the mirror's ``readStream.format("ads")`` on the source cluster."""
    return {"ads.bootstrap.servers": config.source_bootstrap, "subscribePattern": config.policy.subscribe_pattern(),
            "startingOffsets": config.starting_offsets, "includeHeaders": "true",
            "maxOffsetsPerTrigger": str(config.max_offsets_per_trigger),
            **{f"ads.{key}": value for key, value in config.source_options.items()}}


def mirror_rows_sql(policy: MirrorPolicy) -> tuple[str, list[str]]:
    """(filter condition, select expressions) turning source rows into sink rows.

    Aliases are checked to be ``[A-Za-z0-9_-]+`` by the policy, so quoting them in SQL is safe."""
    old_path = (f"CAST(try_element_at(filter(headers, h -> h.key = '{PATH_HEADER}'), 1).value AS STRING)")
    keep = f"NOT coalesce(array_contains(split({old_path}, '{PATH_DELIMITER}'), '{policy.target_alias}'), false)"
    new_path = (f"CASE WHEN {old_path} IS NULL OR {old_path} = '' THEN '{policy.source_alias}' "
                f"ELSE concat({old_path}, '{PATH_DELIMITER}{policy.source_alias}') END")
    path_entry = f"array(named_struct('key', '{PATH_HEADER}', 'value', CAST({new_path} AS BINARY)))"
    headers = (f"CASE WHEN headers IS NULL THEN {path_entry} "
               f"ELSE concat(filter(headers, h -> h.key != '{PATH_HEADER}'), {path_entry}) END AS headers")
    topic = "topic" if policy.naming == "identity" else f"concat('{policy.source_alias}.', topic)"
    return keep, [f"{topic} AS topic", "partition", "key", "value", "timestamp", headers]


def batch_end_offsets(checkpoint_location: str, batch_id: int) -> dict[tuple[str, int], int]:
    """The source end offsets Spark logged for micro-batch ``batch_id`` ({} when it has none)."""
    from pathlib import Path

    from ads_spark.spark.source.offsets import SourceOffset

    base = checkpoint_location[len("file:"):] if checkpoint_location.startswith("file:") else checkpoint_location
    path = Path(base) / "offsets" / str(batch_id)
    lines = path.read_text().splitlines()
    # Spark's offsets log: a version line, the batch metadata, then one line per source ("-" if none).
    source_line = lines[2] if len(lines) > 2 else "-"
    if source_line.strip() in ("", "-"):
        return {}
    return dict(SourceOffset.from_json_dict(json.loads(source_line)).offsets)


class MirrorBatch:
    """The ``foreachBatch`` function of the mirror (runs on the driver, once per micro-batch)."""

    def __init__(self, config: MirrorConfig):
        self.config = config
        self.synced_at: dict[str, float] = {}  # source topic -> monotonic time of its last sync
        self.target_partitions: dict[str, int] = {}  # source topic -> partitions its remote topic has
        self.emitted: dict[tuple[str, int], int] = {}  # last checkpointed source offset per partition
        self.batches = 0  # micro-batches completed by this object
        self.restarts = 0  # failures run_mirror restarted the query after
        self.started_batch_ids: list[int] = []  # every batch id started, replays included (a log for tests/ops)

    def _admins(self):
        from ads_spark.spark import clients

        source = clients.admin_for({**self.config.source_options, "bootstrap.servers": self.config.source_bootstrap})
        target = clients.admin_for({**self.config.target_options, "bootstrap.servers": self.config.target_bootstrap})
        return source, target

    def sync(self, ends: dict[tuple[str, int], int]) -> None:
        now = time.monotonic()
        needed = sorted({t for t, p in ends
                         if now - self.synced_at.get(t, -1e18) >= self.config.sync_interval_s
                         or p >= self.target_partitions.get(t, 0)})
        if not needed:
            return
        source_admin, target_admin = self._admins()
        topic_sync.sync_topics(source_admin, target_admin, self.config.policy, needed, self.config.replication_factor)
        for topic in needed:
            remote = self.config.policy.remote_topic(topic)
            self.target_partitions[topic] = len(target_admin.describe_topics([remote])[0].partitions)
            self.synced_at[topic] = now

    def __call__(self, batch_df, batch_id: int) -> None:
        self.started_batch_ids.append(batch_id)
        ends = batch_end_offsets(self.config.checkpoint_location, batch_id)
        self.sync(ends)
        keep, columns = mirror_rows_sql(self.config.policy)
        writer = (batch_df.where(keep).selectExpr(*columns).write.format("ads").mode("append")
                  .option("ads.bootstrap.servers", self.config.target_bootstrap))
        for key, value in self.config.target_options.items():
            writer = writer.option(f"ads.{key}", value)
        writer.save()
        self.emit_checkpoints(ends)
        self.batches += 1

    def emit_checkpoints(self, ends: dict[tuple[str, int], int]) -> None:
        from ads_spark.client import TopicPartition
        from ads_spark.spark import clients

        moved = {tp: offset for tp, offset in ends.items() if self.emitted.get(tp) != offset}
        if not moved:
            return
        _, target_admin = self._admins()
        remote = [TopicPartition(self.config.policy.remote_topic(t), p) for t, p in sorted(moved)]
        high_watermarks = target_admin.list_offsets(remote, "latest")
        producer = clients.producer_for({**self.config.target_options, "acks": "all",
                                         "bootstrap.servers": self.config.target_bootstrap})
        futures = []
        for (topic, partition), tp in zip(sorted(moved), remote):
            key, value = Checkpoint(topic, partition, moved[(topic, partition)], high_watermarks[tp]).to_record()
            futures.append(producer.produce(self.config.policy.checkpoint_topic, value=value, key=key, partition=0))
        producer.flush(CHECKPOINT_WAIT_S)
        for future in futures:
            future.result(timeout=CHECKPOINT_WAIT_S)
        self.emitted.update(moved)


def start_mirror(spark, config: MirrorConfig, batch: MirrorBatch | None = None):
    """Start the mirror's streaming query; returns (query, the MirrorBatch it runs)."""
    from ads_spark.spark import clients

    policy = config.policy
    source_admin = clients.admin_for({**config.source_options, "bootstrap.servers": config.source_bootstrap})
    target_admin = clients.admin_for({**config.target_options, "bootstrap.servers": config.target_bootstrap})
    topic_sync.ensure_checkpoint_topic(target_admin, policy, config.replication_factor)
    batch = batch or MirrorBatch(config)
    # Topics that exist now are created on the target before the first batch; new ones per batch.
    topic_sync.sync_topics(source_admin, target_admin, policy, policy.mirrored_topics(source_admin.list_topics()),
                           config.replication_factor)
    reader = spark.readStream.format("ads").options(**source_read_options(config))
    writer = (reader.load().writeStream.foreachBatch(batch).option("checkpointLocation", config.checkpoint_location)
              .queryName(f"mirror_{policy.source_alias}_to_{policy.target_alias}".replace("-", "_")))
    trigger = ({"availableNow": True} if config.available_now
               else {"processingTime": f"{config.trigger_interval_ms} milliseconds"})
    return writer.trigger(**trigger).start(), batch


def run_mirror(spark, config: MirrorConfig, should_stop: Callable[[], bool] = lambda: False,
               restarts_max: int = RESTARTS_MAX_DEFAULT, poll_s: float = 0.5,
               batch: MirrorBatch | None = None) -> MirrorBatch:
    """Run the mirror until ``should_stop()`` (or, with ``available_now``, until it has caught up),
    restarting it from its checkpoint after a failure, at most ``restarts_max`` times. ``batch`` carries
    the in-memory state (synced topics, last checkpoints) over from an earlier run."""
    batch = batch or MirrorBatch(config)
    for restarts in range(restarts_max + 1):
        error = _run_once(spark, config, batch, should_stop, poll_s)
        if error is None or should_stop():  # an error while being stopped is the stop's, not a failure
            return batch
        if restarts == restarts_max:
            break
        batch.restarts += 1
        log.warning("mirror: query failed (%s); restart %d of %d from its checkpoint", error, restarts + 1,
                    restarts_max)
        time.sleep(RESTART_BACKOFF_S)
    raise RuntimeError(f"the mirror failed {restarts_max + 1} times; last error: {error}")


def _run_once(spark, config: MirrorConfig, batch: MirrorBatch, should_stop: Callable[[], bool], poll_s: float):
    """Run the query once until it ends or ``should_stop()``; the error that ended it (None: stopped or done)."""
    from ads_spark.errors import AdsError

    try:
        query, _ = start_mirror(spark, config, batch)
    except AdsError as exc:  # e.g. a broker of either side down while syncing topics: retried like a failure
        return exc
    while query.isActive and not should_stop():
        query.awaitTermination(poll_s)
    if query.isActive:
        query.stop()
    return query.exception()
