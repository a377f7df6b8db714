"""The log cleaner of one broker: which compacted log to clean next, how far, at what pace, and where it got to.

Kafka's ``LogCleanerManager`` and cleaner thread for ADS (issue #24). One thread per broker
(``log.cleaner.threads`` is 1), started and stopped with the broker. Each pass it looks at every replica
this broker holds whose ``cleanup.policy`` includes ``compact`` (leaders and followers alike: each replica
cleans on its own, as in Kafka), picks the filthiest, and calls ``cleaner.clean_log`` on it (the rewrite and
the crash-safe swap live there); with nothing to clean it sleeps ``log.cleaner.backoff.ms``.

The choices are pure functions of plain values, tested on their own (tests/unit/test_log_cleaner_manager.py):

* ``clean_end_offset``: the first offset not cleaned: min(high watermark, active segment's base, base of the
  first segment holding a record younger than ``min.compaction.lag.ms``). Nothing uncommitted, nothing in
  the segment still written, nothing a consumer may not have seen yet is compacted.
* ``dirty_ratio``: bytes of segments not yet cleaned (from the first dirty offset up to the clean end) over
  those plus the bytes already cleaned; whole segments, as Kafka counts them.
* ``choose_log_to_clean``: the highest dirty ratio above the log's ``min.cleanable.dirty.ratio``, or any
  log whose oldest dirty segment is past ``max.compaction.lag.ms``.
* ``throttle_sleep_s``: how long the cleaner must pause to keep ``log.cleaner.io.max.bytes.per.second``.

Where each log's cleaning got to (the first dirty offset) is kept in ``cleaner-offset-checkpoint`` in each log
directory (Kafka's file and format), written after every clean and lowered (in memory and in the file) to the
point a truncation left when the log is next looked at (``PartitionLog.take_truncation_point``), so that
records written again above it are dirty. A lost or stale entry only costs work: the
log is cleaned again from its start; records are removed only when a later record with the same key is seen,
so a wrong first dirty offset can leave duplicates but never lose a latest value.

Bounds: the key map (``log.cleaner.dedupe.buffer.size`` / ``KEY_MAP_BYTES_PER_ENTRY`` keys), the I/O rate
(throttle), every wait (the stop event: a stop interrupts a throttle pause or the backoff within
``THROTTLE_SLEEP_MAX_S``; a clean in progress is abandoned, which the swap protocol makes safe).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from ads_spark.broker.log.checkpoints import OffsetCheckpointFile
from ads_spark.config_compaction import LONG_MAX, UNLIMITED_BYTES_PER_SECOND

log = logging.getLogger("ads.cleaner")

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
# A key map entry (cleaner.KeyMap holds the full key bytes, so that no two keys share one): the key in an
# Arrow large_binary array (its bytes + an 8-byte offset), its 8-byte record offset, and the hash table
# ``dictionary_encode`` builds while adding (about as much again). 128 bytes covers keys up to ~50 bytes;
# longer keys make the map larger than log.cleaner.dedupe.buffer.size says. Kafka counts 24 bytes per entry
# (a 16-byte MD5 of the key + the offset, at a load factor of 0.9).
KEY_MAP_BYTES_PER_ENTRY = 128
THROTTLE_SLEEP_MAX_S = 0.5  # one pause of the throttle: a stop is seen within this
STOP_WAIT_S = 5.0  # how long ``stop`` waits for the thread (a clean between two throttle calls)


class CleanerStopped(Exception):
    """Raised from the throttle when the broker stops: the clean in progress is abandoned."""


@dataclass(frozen=True, slots=True)
class CleanerSettings:
    """The broker keys of the cleaner, parsed."""

    enabled: bool = True
    io_max_bytes_per_second: float = UNLIMITED_BYTES_PER_SECOND
    key_map_entries_max: int = 134_217_728 // KEY_MAP_BYTES_PER_ENTRY
    backoff_ms: int = 15_000

    @classmethod
    def from_config(cls, config) -> "CleanerSettings":
        return cls(
            enabled=bool(config["log.cleaner.enable"]),
            io_max_bytes_per_second=float(config["log.cleaner.io.max.bytes.per.second"]),
            key_map_entries_max=max(1, config["log.cleaner.dedupe.buffer.size"] // KEY_MAP_BYTES_PER_ENTRY),
            backoff_ms=config["log.cleaner.backoff.ms"],
        )


def retention_deletes(cleanup_policy: str) -> bool:
    """Time and size retention apply to ``delete`` and ``compact,delete``; ``compact`` alone keeps every key."""
    return "delete" in cleanup_policy.split(",")


def compacted(cleanup_policy: str) -> bool:
    return "compact" in cleanup_policy.split(",")


# ---- pure choices ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SegmentSummary:
    base_offset: int
    next_offset: int
    size_bytes: int
    max_timestamp_ms: int


@dataclass(frozen=True, slots=True)
class LogToClean:
    """What the choice needs to know of one compacted log (plain values, read under the log's lock)."""

    key: tuple[str, int]
    segments: tuple[SegmentSummary, ...]  # oldest first; the last is the active segment
    first_dirty_offset: int  # the cleaner checkpoint, within [log start, log end]
    high_watermark: int
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX


@dataclass(frozen=True, slots=True)
class Choice:
    log: LogToClean
    clean_end_offset: int
    dirty_ratio: float


def clean_end_offset(log: LogToClean, now_ms: int) -> int:
    """The first offset the cleaner must not touch (see the module docstring)."""
    end = min(log.high_watermark, log.segments[-1].base_offset)
    if log.min_compaction_lag_ms > 0:
        for segment in log.segments[:-1]:
            if segment.base_offset >= end:
                break
            if now_ms - segment.max_timestamp_ms < log.min_compaction_lag_ms:
                return min(end, segment.base_offset)
    return end


def _dirty_segments(log: LogToClean, end_offset: int) -> list[SegmentSummary]:
    return [s for s in log.segments[:-1] if s.next_offset > log.first_dirty_offset and s.base_offset < end_offset]


def dirty_ratio(log: LogToClean, end_offset: int) -> float:
    """Dirty bytes below ``end_offset`` over clean plus dirty bytes (0 when there is nothing cleanable)."""
    clean_bytes = sum(s.size_bytes for s in log.segments[:-1] if s.next_offset <= log.first_dirty_offset)
    dirty_bytes = sum(s.size_bytes for s in _dirty_segments(log, end_offset))
    total = clean_bytes + dirty_bytes
    return dirty_bytes / total if total and dirty_bytes else 0.0


def compaction_overdue(log: LogToClean, end_offset: int, now_ms: int) -> bool:
    """The oldest dirty segment is older than ``max.compaction.lag.ms``: clean whatever the ratio.

    A segment's age is its newest record's (Kafka reads the first batch's), so a record may wait up to
    ``segment.ms`` more than the lag."""
    if log.max_compaction_lag_ms >= LONG_MAX:
        return False
    dirty = _dirty_segments(log, end_offset)
    return bool(dirty) and now_ms - dirty[0].max_timestamp_ms > log.max_compaction_lag_ms


def choose_log_to_clean(logs: Iterable[LogToClean], now_ms: int) -> tuple[Choice | None, float]:
    """(the log to clean now or None, the highest dirty ratio seen: the metric)."""
    best: Choice | None = None
    highest = 0.0
    for candidate in logs:
        end = clean_end_offset(candidate, now_ms)
        ratio = dirty_ratio(candidate, end)
        highest = max(highest, ratio)
        if ratio <= 0.0:
            continue
        if ratio > candidate.min_cleanable_dirty_ratio or compaction_overdue(candidate, end, now_ms):
            if best is None or ratio > best.dirty_ratio:
                best = Choice(candidate, end, ratio)
    return best, highest


def throttle_sleep_s(bytes_done: int, elapsed_s: float, bytes_per_second: float) -> float:
    """Seconds to pause so that ``bytes_done`` over the run's time stays within the rate (0: go on)."""
    if bytes_per_second >= UNLIMITED_BYTES_PER_SECOND:
        return 0.0
    return max(0.0, bytes_done / bytes_per_second - elapsed_s)


def first_dirty_offset(checkpointed: int | None, log_start_offset: int, log_end_offset: int) -> int:
    """The checkpoint when it lies within the log; the log start otherwise (never cleaned, or the log was
    truncated or recreated below it: cleaning again from the start is only work)."""
    if checkpointed is None or not log_start_offset <= checkpointed <= log_end_offset:
        return log_start_offset
    return checkpointed


class Throttle:
    """``throttle(n_bytes)``, called by ``clean_log`` as it reads and writes: pauses to keep the rate."""

    def __init__(self, bytes_per_second: float, stop: threading.Event, clock: Callable[[], float] = time.monotonic):
        self.bytes_per_second = bytes_per_second
        self._stop = stop
        self._clock = clock
        self._started = clock()
        self.bytes_done = 0
        self.paused_s = 0.0

    def __call__(self, n_bytes: int) -> None:
        self.bytes_done += n_bytes
        while True:
            if self._stop.is_set():
                raise CleanerStopped("the broker is stopping")
            pause = throttle_sleep_s(self.bytes_done, self._clock() - self._started, self.bytes_per_second)
            if pause <= 0:
                return
            pause = min(pause, THROTTLE_SLEEP_MAX_S)
            self.paused_s += pause
            self._stop.wait(pause)


# ---- the thread ---------------------------------------------------------------------------------------


class LogCleanerManager:
    """The broker's cleaner thread and its checkpoint files.

    ``partitions`` returns the replicas to consider (objects with ``key``, ``log``, ``high_watermark``);
    ``clean`` is ``cleaner.clean_log`` (a parameter so that tests can watch the calls). Counters are plain
    attributes read by the metrics scrape.
    """

    def __init__(self, settings: CleanerSettings, log_dirs: Sequence[Path], partitions: Callable[[], Iterable[Any]],
                 clean: Callable[..., Any] | None = None, now_ms: Callable[[], int] | None = None):
        self.settings = settings
        self._partitions = partitions
        self._clean = clean
        self._now_ms = now_ms or (lambda: int(time.time() * 1000))
        self._files = {Path(d): OffsetCheckpointFile(Path(d) / CLEANER_CHECKPOINT) for d in log_dirs}
        self._checkpointed: dict[tuple[str, int], int] = {}
        for checkpoint in self._files.values():
            self._checkpointed.update(checkpoint.read())
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Metrics (ads_log_cleaner_*).
        self.runs = 0
        self.failures = 0
        self.bytes_read = 0
        self.bytes_written = 0
        self.last_run_duration_s = 0.0
        self.max_dirty_ratio = 0.0

    def start(self) -> None:
        if not self.settings.enabled or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="log-cleaner", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(STOP_WAIT_S)
            if self._thread.is_alive():
                log.warning("the log cleaner did not stop within %ss; leaving it (its swap is crash-safe)",
                            STOP_WAIT_S)

    def checkpointed_offset(self, key: tuple[str, int]) -> int | None:
        """Where cleaning of ``key`` got to (its first dirty offset), or None if never cleaned here."""
        return self._checkpointed.get(key)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                cleaned = self.clean_once()
            except CleanerStopped:
                return
            except Exception:
                self.failures += 1
                log.exception("log cleaner pass failed; retrying after log.cleaner.backoff.ms")
                cleaned = False
            if not cleaned:
                self._stop.wait(self.settings.backoff_ms / 1000)

    def clean_once(self) -> bool:
        """One pass: clean the filthiest log if one needs it. True if a log was cleaned."""
        now = self._now_ms()
        targets = {p.key: p for p in self._partitions() if compacted(p.log.config.cleanup_policy)}
        views = [view for view in (self._view(p) for p in targets.values()) if view is not None]
        choice, self.max_dirty_ratio = choose_log_to_clean(views, now)
        if choice is None:
            return False
        return self._clean_one(targets[choice.log.key], choice, now)

    def _view(self, partition) -> LogToClean | None:
        partition_log = partition.log
        self._follow_truncation(partition)
        segments = tuple(SegmentSummary(*s) for s in partition_log.segment_summaries())
        if len(segments) < 2:
            return None  # only the active segment: nothing is cleanable
        first_dirty = first_dirty_offset(self._checkpointed.get(partition.key), partition_log.log_start_offset,
                                         partition_log.log_end_offset)
        config = partition_log.config
        return LogToClean(partition.key, segments, first_dirty, partition.high_watermark,
                          config.min_cleanable_dirty_ratio, config.min_compaction_lag_ms,
                          config.max_compaction_lag_ms)

    def _follow_truncation(self, partition) -> None:
        """Lower the checkpoint to where the log was truncated since the last look, if below it.

        A truncation racing this look or a pass is taken at the next round, before any pass uses the
        checkpoint; a crash before then keeps the old one (duplicates may stay, never a latest value lost)."""
        point = partition.log.take_truncation_point()
        checkpointed = self._checkpointed.get(partition.key)
        if point is not None and checkpointed is not None and point < checkpointed:
            log.info("%s-%s was truncated to %d: its cleaner checkpoint goes down from %d", partition.key[0],
                     partition.key[1], point, checkpointed)
            self._write_checkpoint(partition, point)

    def _clean_one(self, partition, choice: Choice, now: int) -> bool:
        """Clean one log; True if it moved its cleaned point (False: the log changed under the cleaner and
        the pass was abandoned, so the thread backs off rather than retry at once)."""
        clean = self._clean
        if clean is None:
            from ads_spark.broker.log.cleaner import clean_log as clean  # H1's module; imported on first use
        config = partition.log.config
        throttle = Throttle(self.settings.io_max_bytes_per_second, self._stop)
        started = time.monotonic()
        stats = clean(partition.log, clean_end_offset_exclusive=choice.clean_end_offset, now_ms=now,
                      delete_retention_ms=config.delete_retention_ms,
                      min_compaction_lag_ms=config.min_compaction_lag_ms,
                      key_map_entries_max=self.settings.key_map_entries_max, throttle=throttle,
                      first_dirty_offset=choice.log.first_dirty_offset)
        self.last_run_duration_s = time.monotonic() - started
        self.runs += 1
        self.bytes_read += stats.bytes_read
        self.bytes_written += stats.bytes_written
        self._write_checkpoint(partition, stats.cleaned_up_to)
        log.info("cleaned %s-%s up to %d (dirty ratio %.2f): %d bytes read, %d written, %d records removed in "
                 "%.3fs (%.3fs throttled)", partition.key[0], partition.key[1], stats.cleaned_up_to,
                 choice.dirty_ratio, stats.bytes_read, stats.bytes_written, stats.records_removed,
                 self.last_run_duration_s, throttle.paused_s)
        return stats.cleaned_up_to > choice.log.first_dirty_offset

    def _write_checkpoint(self, partition, cleaned_up_to: int) -> None:
        self._checkpointed[partition.key] = cleaned_up_to
        directory = Path(partition.log.directory).parent
        checkpoint = self._files.get(directory)
        if checkpoint is None:
            return  # a log outside log.dirs (tests): kept in memory only
        held = {p.key for p in self._partitions() if Path(p.log.directory).parent == directory}
        checkpoint.write({key: offset for key, offset in self._checkpointed.items() if key in held})
