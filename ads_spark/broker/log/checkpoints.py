"""Small text checkpoint files, in Kafka's formats, written atomically.

Owns ``leader-epoch-checkpoint`` (per partition) and the per-broker offset
checkpoints (``recovery-point-offset-checkpoint``, ``replication-offset-checkpoint``,
``log-start-offset-checkpoint``). They are tiny and rewritten whole: a write goes
to a temporary file which is fsynced and renamed over the old one, and the
directory is fsynced, so after a crash a reader sees either the old or the new
content, never a mix. Keeping Kafka's text layout lets an operator read them
with ``cat`` and compare them with a Kafka broker's.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Mapping

from ads_spark.errors import InvariantViolation, StorageError

CHECKPOINT_VERSION = 0


def fsync_directory(directory: Path) -> None:
    """Make a create, rename or unlink in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so that a crash leaves either the old or the new file."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    fsync_directory(path.parent)


def _read_lines(path: Path) -> list[str] | None:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return None


def _parse_checkpoint(path: Path, lines: list[str], fields_per_line: int) -> list[list[str]]:
    """Kafka's layout: a version line, a count line, then ``count`` entry lines."""
    try:
        version = int(lines[0])
        count = int(lines[1])
    except (IndexError, ValueError) as exc:
        raise StorageError(f"malformed checkpoint {path}: bad version/count header") from exc
    if version != CHECKPOINT_VERSION:
        raise StorageError(f"checkpoint {path} has version {version}, expected {CHECKPOINT_VERSION}")
    entries = [line.split() for line in lines[2:] if line.strip()]
    if len(entries) != count or any(len(e) != fields_per_line for e in entries):
        raise StorageError(f"malformed checkpoint {path}: count says {count}, found {len(entries)} entries")
    return entries


def _format_checkpoint(lines: list[str]) -> str:
    return "\n".join([str(CHECKPOINT_VERSION), str(len(lines)), *lines]) + "\n"


class OffsetCheckpointFile:
    """``topic partition offset`` lines: the recovery-point, high-watermark and log-start checkpoints."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.Lock()

    def read(self) -> dict[tuple[str, int], int]:
        """The stored mapping; empty if the file does not exist yet."""
        with self._lock:
            lines = _read_lines(self.path)
        if lines is None:
            return {}
        result: dict[tuple[str, int], int] = {}
        for topic, partition, offset in _parse_checkpoint(self.path, lines, 3):
            try:
                result[(topic, int(partition))] = int(offset)
            except ValueError as exc:
                raise StorageError(f"malformed checkpoint {self.path}: {exc}") from exc
        return result

    def write(self, mapping: Mapping[tuple[str, int], int]) -> None:
        lines = [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(mapping.items())]
        with self._lock:
            write_atomically(self.path, _format_checkpoint(lines))


class LeaderEpochFile:
    """The leader-epoch cache of one replica: which epoch's leader wrote from which offset on.

    Invariant: both epochs and start offsets are strictly increasing along
    ``entries``. Every change is persisted before the method returns.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        lines = _read_lines(self.path)
        self._entries: list[tuple[int, int]] = []
        if lines is not None:
            for epoch, start in _parse_checkpoint(self.path, lines, 2):
                self._entries.append((int(epoch), int(start)))
        self._check(StorageError)

    @property
    def entries(self) -> list[tuple[int, int]]:
        """A copy of the (epoch, start_offset) pairs, oldest first."""
        with self._lock:
            return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        """The newest epoch, or -1 when no epoch is known."""
        with self._lock:
            return self._entries[-1][0] if self._entries else -1

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset``; ignored unless ``epoch`` is newer.

        Entries of older epochs that start at or after ``start_offset`` wrote nothing
        that survived (Kafka drops them too), so they are removed to keep start
        offsets strictly increasing.
        """
        with self._lock:
            if self._entries and epoch <= self._entries[-1][0]:
                return
            kept = [(e, s) for e, s in self._entries if s < start_offset]
            self._entries = kept + [(epoch, start_offset)]
            self._persist()

    def truncate_from_end(self, end_offset_exclusive: int) -> None:
        """Forget epochs that start at or after ``end_offset_exclusive`` (the log was truncated there)."""
        with self._lock:
            kept = [(e, s) for e, s in self._entries if s < end_offset_exclusive]
            if kept != self._entries:
                self._entries = kept
                self._persist()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: drop epochs that ended before it.

        The last epoch starting before ``start_offset`` is kept, moved to start there,
        because it still covers the first offsets of the log.
        """
        with self._lock:
            before = [(e, s) for e, s in self._entries if s < start_offset]
            after = [(e, s) for e, s in self._entries if s >= start_offset]
            kept = ([(before[-1][0], start_offset)] if before and (not after or after[0][1] > start_offset)
                    else []) + after
            if kept != self._entries:
                self._entries = kept
                self._persist()

    def replace_all(self, pairs) -> None:
        """Make the cache exactly ``pairs`` (the replication core's cache after a step); persist if it changed."""
        entries = [(int(e), int(s)) for e, s in pairs]
        with self._lock:
            if entries != self._entries:
                self._entries = entries
                self._persist()

    def clear(self) -> None:
        with self._lock:
            self._entries = []
            self._persist()

    def _check(self, error: type[Exception]) -> None:
        for (e1, s1), (e2, s2) in zip(self._entries, self._entries[1:]):
            if not (e2 > e1 and s2 > s1):
                raise error(f"leader-epoch checkpoint {self.path} is not increasing: {self._entries}")

    def _persist(self) -> None:
        self._check(InvariantViolation)  # our own update broke the order: a bug
        write_atomically(self.path, _format_checkpoint([f"{e} {s}" for e, s in self._entries]))
