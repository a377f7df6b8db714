"""The broker's ``log.dirs`` directory: every partition log in it and the per-broker files.

Owns start-up recovery of all partitions (the clean-shutdown marker decides
whether tails are validated; the recovery-point checkpoint says where they
start), the per-broker checkpoints (recovery points, high watermarks, log start
offsets), ``meta.properties`` (which broker and cluster the directory belongs
to) and each partition's ``partition.metadata`` (the topic id, so a log left
over from a deleted topic is not mistaken for a new topic of the same name).

Every path it builds from a topic name stays a direct child of ``log_dir``: the
name must be a valid Kafka topic name (``ads_spark.protocol.names``) and the resolved
path must sit right under the resolved log directory, checked before anything
is created or deleted. Requests are validated at the boundary too; this is the
check that holds even if a bad name gets past it (issue #20: a topic
``../../../x/victim`` once wrote, then deleted, a directory outside log.dirs).
"""

from __future__ import annotations

import logging
import re
import shutil
import threading
from pathlib import Path
from typing import Mapping

from ads_spark.broker.log import file_modes
from ads_spark.broker.log.checkpoints import OffsetCheckpointFile, fsync_directory, write_atomically
from ads_spark.broker.log.config import LogConfig
from ads_spark.broker.log.partition_log import PartitionLog
from ads_spark.errors import (
    InconsistentTopicIdError, InvalidConfigError, InvalidRequestError, InvalidTopicError, StorageError,
)
from ads_spark.protocol.names import is_valid_topic_name, shown, validate_topic_name
from ads_spark.protocol.records import now_ms as wall_clock_ms

log = logging.getLogger("ads.log")

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
CLEAN_SHUTDOWN_MARKER = ".clean-shutdown"
META_PROPERTIES = "meta.properties"
PARTITION_METADATA = "partition.metadata"
DELETE_SUFFIX = "-delete"

TopicPartition = tuple[str, int]
PARTITION_ID_MAX = 2**31 - 1  # Kafka's int32
# Topic ids are ours (uuid4 strings); the rule keeps ``partition.metadata`` a file that reads back as written.
_TOPIC_ID = re.compile(r"\A[a-zA-Z0-9._-]{1,64}\Z")


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_partition_dir_name(name: str) -> TopicPartition | None:
    topic, sep, number = name.rpartition("-")
    if not sep or not topic or not number.isdigit():
        return None
    return topic, int(number)


def _read_properties(path: Path) -> dict[str, str]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return {}
    pairs = (line.split("=", 1) for line in lines if "=" in line and not line.lstrip().startswith("#"))
    return {k.strip(): v.strip() for k, v in pairs}


def read_topic_id(directory: Path) -> str | None:
    """The topic id in ``partition.metadata`` (Kafka's ``topic_id: <id>`` line), if any."""
    try:
        lines = (directory / PARTITION_METADATA).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return None
    for line in lines:
        key, _, value = line.partition(":")
        if key.strip() == "topic_id":
            return value.strip()
    return None


class LogManager:
    """Invariant: ``_logs`` holds exactly the partition directories that are open in ``log_dir``."""

    def __init__(self, log_dir: Path, default_config: LogConfig, logs: dict[TopicPartition, PartitionLog]):
        self.log_dir = log_dir
        self.default_config = default_config
        self._logs = logs
        self._lock = threading.RLock()
        self._recovery_points = OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT)
        self._high_watermarks = OffsetCheckpointFile(log_dir / HIGH_WATERMARK_CHECKPOINT)
        self._log_starts = OffsetCheckpointFile(log_dir / LOG_START_CHECKPOINT)
        self._closed = False

    @classmethod
    def open(cls, log_dir: Path, default_config: LogConfig, now_ms: int, *, broker_id: int | None = None,
             cluster_id: str | None = None, private: bool = False) -> "LogManager":
        """Recover every partition directory under ``log_dir`` and return the manager. ``private``: make
        the directory and all in it owner-only first (``file_modes``; the broker's security is on)."""
        log_dir = Path(log_dir)
        log_dir.mkdir(parents=True, exist_ok=True)
        if private:
            file_modes.make_private(log_dir)
        if broker_id is not None or cluster_id is not None:
            ensure_meta_properties(log_dir, broker_id, cluster_id)
        marker = log_dir / CLEAN_SHUTDOWN_MARKER
        clean_shutdown = marker.exists()
        recovery_points = OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT).read()
        log_starts = OffsetCheckpointFile(log_dir / LOG_START_CHECKPOINT).read()
        logs: dict[TopicPartition, PartitionLog] = {}
        for child in sorted(log_dir.iterdir()):
            if child.is_dir() and child.name.endswith(DELETE_SUFFIX):
                shutil.rmtree(child, ignore_errors=True)  # a removal interrupted by a crash
                continue
            key = parse_partition_dir_name(child.name) if child.is_dir() else None
            if key is None:
                continue
            problem = _partition_directory_problem(log_dir, key, child)
            if problem is not None:
                log.error("%s: not loading %s as a partition log: %s; left as it is", log_dir, shown(child.name),
                          problem)
                continue
            logs[key] = PartitionLog.open(child, default_config, recovery_point=recovery_points.get(key, 0),
                                          clean_shutdown=clean_shutdown, now_ms=now_ms,
                                          log_start_offset=log_starts.get(key))
        if not clean_shutdown:
            log.info("%s: no clean-shutdown marker; validated the tails of %d logs", log_dir, len(logs))
        manager = cls(log_dir, default_config, logs)
        # KIP-966: a broker back from an unclean shutdown may have lost its unflushed tail; the
        # controller must not elect it from the ELR until it has caught up again.
        manager.recovered_from_clean_shutdown = clean_shutdown
        manager.checkpoint_recovery_points()
        # From here on a crash must be detected as unclean.
        marker.unlink(missing_ok=True)
        fsync_directory(log_dir)
        return manager

    # ---- partitions --------------------------------------------------------------------

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        with self._lock:
            return self._logs.get((topic, partition))

    def logs(self) -> dict[TopicPartition, PartitionLog]:
        """A snapshot of the open logs by (topic, partition)."""
        with self._lock:
            return dict(self._logs)

    def get_or_create(self, topic: str, partition: int, config: LogConfig, topic_id: str | None,
                      *, now_ms: int | None = None) -> PartitionLog:
        """The log of (topic, partition), created empty if absent; ``config`` replaces its config.

        Raises InconsistentTopicIdError when the directory belongs to another
        incarnation of the topic (deleted and recreated while this broker was away).
        """
        key = (topic, partition)
        directory = self.partition_directory(topic, partition)
        if topic_id and not _TOPIC_ID.match(topic_id):
            raise InvalidRequestError(f"topic id {shown(topic_id)} of {topic}-{partition} is not 1-64 characters "
                                      "from [a-zA-Z0-9._-]")
        with self._lock:
            self._ensure_open()
            existing = self._logs.get(key)
            if existing is not None:
                self._check_topic_id(directory, topic_id)
                existing.update_config(config)
                return existing
            partition_log = PartitionLog.open(directory, config, recovery_point=0, clean_shutdown=False,
                                              now_ms=wall_clock_ms() if now_ms is None else now_ms)
            self._check_topic_id(directory, topic_id)
            self._logs[key] = partition_log
            return partition_log

    def _check_topic_id(self, directory: Path, topic_id: str | None) -> None:
        if not topic_id:
            return
        stored = read_topic_id(directory)
        if stored is None:
            write_atomically(directory / PARTITION_METADATA, f"version: 0\ntopic_id: {topic_id}\n")
        elif stored != topic_id:
            raise InconsistentTopicIdError(
                f"{directory} holds topic id {stored}, but the topic is now {topic_id}: it is a stale "
                f"replica of a deleted topic; remove the partition before re-creating it")

    def partition_directory(self, topic: str, partition: int) -> Path:
        """``log_dir/<topic>-<partition>``; InvalidTopicError / InvalidRequestError unless it is a valid
        partition of a valid topic whose directory resolves to a direct child of ``log_dir``."""
        validate_topic_name(topic)
        if isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition <= PARTITION_ID_MAX:
            raise InvalidRequestError(f"partition {shown(partition)} of topic {topic!r} is not an integer "
                                      f"in [0, {PARTITION_ID_MAX}]")
        directory = self.log_dir / partition_dir_name(topic, partition)
        problem = _partition_directory_problem(self.log_dir, (topic, partition), directory)
        if problem is not None:
            raise InvalidTopicError(f"refusing {topic}-{partition}: {problem}")
        return directory

    def remove(self, topic: str, partition: int) -> None:
        """Close and delete a partition's log (a no-op when it is not hosted here)."""
        self.partition_directory(topic, partition)  # refuses a name that could point outside log_dir
        with self._lock:
            partition_log = self._logs.pop((topic, partition), None)
        if partition_log is not None:
            partition_log.delete()

    # ---- checkpoints ---------------------------------------------------------------------

    def checkpoint_recovery_points(self) -> None:
        """Persist every log's recovery point and log start offset."""
        with self._lock:
            logs = dict(self._logs)
            self._recovery_points.write({k: v.recovery_point for k, v in logs.items()})
            self._log_starts.write({k: v.log_start_offset for k, v in logs.items()})

    def checkpoint_high_watermarks(self, mapping: Mapping[TopicPartition, int]) -> None:
        with self._lock:
            self._high_watermarks.write(mapping)

    def read_high_watermarks(self) -> dict[TopicPartition, int]:
        return self._high_watermarks.read()

    def read_recovery_points(self) -> dict[TopicPartition, int]:
        return self._recovery_points.read()

    # ---- lifecycle -------------------------------------------------------------------------

    def _ensure_open(self) -> None:
        if self._closed:
            raise StorageError(f"log manager for {self.log_dir} is closed")

    def close(self) -> None:
        """Flush and close every log, write the checkpoints, then the clean-shutdown marker."""
        with self._lock:
            if self._closed:
                return
            for partition_log in self._logs.values():
                partition_log.close()
            self.checkpoint_recovery_points()
            marker = self.log_dir / CLEAN_SHUTDOWN_MARKER
            write_atomically(marker, "")
            self._closed = True


def _partition_directory_problem(log_dir: Path, key: TopicPartition, directory: Path) -> str | None:
    """Why ``directory`` cannot hold the log of ``key`` under ``log_dir``, or None if it can.

    Resolving catches what the name rule alone would not: a symlink (or a
    ``..`` that slipped through) taking the path out of ``log_dir``.
    """
    if not is_valid_topic_name(key[0]):
        return f"topic {shown(key[0])} is not a valid topic name"
    try:
        resolved, root = directory.resolve(), Path(log_dir).resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop
        return f"cannot resolve {directory}: {exc}"
    if resolved.parent != root:
        return f"{directory} resolves to {resolved}, which is not directly under the log directory {root}"
    return None


def ensure_meta_properties(log_dir: Path, broker_id: int | None, cluster_id: str | None) -> dict[str, str]:
    """Check ``meta.properties`` against this broker (writing what is missing) and return it.

    A log directory written by another broker or another cluster is refused:
    serving it would present someone else's replicas as ours.
    """
    path = Path(log_dir) / META_PROPERTIES
    props = _read_properties(path)
    if broker_id is not None and "broker.id" in props and int(props["broker.id"]) != broker_id:
        raise InvalidConfigError(f"{log_dir} belongs to broker.id={props['broker.id']} (see {path}), "
                                 f"but this broker has broker.id={broker_id}; fix broker.id or log.dirs")
    if cluster_id is not None and props.get("cluster.id") not in (None, cluster_id):
        raise InvalidConfigError(f"{log_dir} belongs to cluster {props['cluster.id']} (see {path}), "
                                 f"but this broker joined cluster {cluster_id}")
    updated = dict(props)
    updated.setdefault("version", "0")
    if broker_id is not None:
        updated["broker.id"] = str(broker_id)
    if cluster_id is not None:
        updated["cluster.id"] = cluster_id
    if updated != props:
        write_atomically(path, "".join(f"{k}={v}\n" for k, v in updated.items()))
    return updated
