"""Several ``log.dirs``: which directory holds each partition, found again on restart.

Kafka spreads a broker's partitions over its log directories: a new partition
goes to the directory holding the fewest partitions, and each directory keeps
its own checkpoints and clean-shutdown marker, so a restart finds every
partition where it was left by scanning every directory. ``LogDirs`` does that
over one ``LogManager`` per directory and offers the broker the same calls as a
single ``LogManager`` (one directory is the common case: a ``LogDirs`` of one).

A partition found in two directories at start-up (a copy left behind by hand)
is refused: serving either could present a stale replica as the current one.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Mapping, Sequence

from ads_spark.broker.log.config import LogConfig
from ads_spark.broker.log.manager import LogManager, TopicPartition
from ads_spark.broker.log.partition_log import PartitionLog
from ads_spark.errors import InvalidConfigError


class LogDirs:
    """Invariant: ``_home`` maps every open partition to the one manager whose directory holds it."""

    def __init__(self, managers: Sequence[LogManager]):
        self.managers = list(managers)
        self._lock = threading.RLock()
        self._home: dict[TopicPartition, LogManager] = {}
        for manager in self.managers:
            for key in manager.logs():
                other = self._home.get(key)
                if other is not None:
                    raise InvalidConfigError(
                        f"'log.dirs': partition {key[0]}-{key[1]} is in both {other.log_dir} and "
                        f"{manager.log_dir}; remove the stale copy before starting the broker")
                self._home[key] = manager
        # KIP-966: clean only if every directory was shut down cleanly.
        self.recovered_from_clean_shutdown = all(m.recovered_from_clean_shutdown for m in self.managers)

    @classmethod
    def open(cls, log_dirs: Sequence[Path], default_config: LogConfig, now_ms: int,
             private: bool = False) -> "LogDirs":
        """Recover every partition of every directory (each with its own checkpoints); ``private``: owner-only
        directories and files (``file_modes``)."""
        managers: list[LogManager] = []
        try:
            for log_dir in log_dirs:
                managers.append(LogManager.open(Path(log_dir), default_config, now_ms, private=private))
            return cls(managers)
        except Exception:
            for manager in managers:
                manager.close()
            raise

    @property
    def log_dirs(self) -> list[Path]:
        return [manager.log_dir for manager in self.managers]

    # ---- partitions --------------------------------------------------------------------

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        with self._lock:
            home = self._home.get((topic, partition))
        return None if home is None else home.get(topic, partition)

    def logs(self) -> dict[TopicPartition, PartitionLog]:
        merged: dict[TopicPartition, PartitionLog] = {}
        for manager in self.managers:
            merged.update(manager.logs())
        return merged

    def get_or_create(self, topic: str, partition: int, config: LogConfig, topic_id: str | None,
                      *, now_ms: int | None = None) -> PartitionLog:
        """The partition's log where it already is, else created in the directory holding fewest
        partitions (the first such in ``log.dirs`` order on a tie), as Kafka places a new log."""
        key = (topic, partition)
        with self._lock:
            home = self._home.get(key) or self._least_loaded()
            partition_log = home.get_or_create(topic, partition, config, topic_id, now_ms=now_ms)
            self._home[key] = home
            return partition_log

    def _least_loaded(self) -> LogManager:
        counts = {id(m): 0 for m in self.managers}
        for home in self._home.values():
            counts[id(home)] += 1
        return min(self.managers, key=lambda m: counts[id(m)])

    def partition_directory(self, topic: str, partition: int) -> Path:
        with self._lock:
            home = self._home.get((topic, partition)) or self._least_loaded()
        return home.partition_directory(topic, partition)

    def remove(self, topic: str, partition: int) -> None:
        with self._lock:
            home = self._home.pop((topic, partition), None)
        if home is None:
            self.managers[0].partition_directory(topic, partition)  # the same refusal of a bad name
            return
        home.remove(topic, partition)

    # ---- checkpoints: each directory keeps those of the partitions it holds ----------------

    def checkpoint_recovery_points(self) -> None:
        for manager in self.managers:
            manager.checkpoint_recovery_points()

    def checkpoint_high_watermarks(self, mapping: Mapping[TopicPartition, int]) -> None:
        with self._lock:
            homes = dict(self._home)
        for manager in self.managers:
            manager.checkpoint_high_watermarks({k: v for k, v in mapping.items()
                                                if homes.get(k, self.managers[0]) is manager})

    def read_high_watermarks(self) -> dict[TopicPartition, int]:
        """Every directory's entries; for a partition held here, its own directory's entry wins."""
        with self._lock:
            homes = dict(self._home)
        merged: dict[TopicPartition, int] = {}
        for manager in self.managers:
            for key, offset in manager.read_high_watermarks().items():
                if homes.get(key, manager) is manager or key not in merged:
                    merged[key] = offset
        return merged

    def read_recovery_points(self) -> dict[TopicPartition, int]:
        merged: dict[TopicPartition, int] = {}
        for manager in self.managers:
            merged.update(manager.read_recovery_points())
        return merged

    def close(self) -> None:
        for manager in self.managers:
            manager.close()
