"""Small text checkpoint files, in Kafka's formats, written atomically.

Owns ``leader-epoch-checkpoint`` (per partition) and the per-broker offset
checkpoints (``recovery-point-offset-checkpoint``, ``replication-offset-checkpoint``,
``log-start-offset-checkpoint``). They are tiny and rewritten whole: a write goes
to a temporary file which is fsynced and renamed over the old one, and the
directory is fsynced, so after a crash a reader sees either the old or the new
content, never a mix. Keeping Kafka's text layout lets an operator read them
with ``cat`` and compare them with a Kafka broker's.

No content may keep a broker from starting (issue #20: one phantom partition
with topic ``""`` wrote a line the reader refused, and the broker could not
restart). So the writer writes only lines that read back exactly, and the
reader of a damaged file says which file and line is wrong and why, and keeps
going: offset checkpoints keep their good entries (what they hold is
recoverable from the logs), a damaged leader-epoch cache is rebuilt from the
log's batch headers.
"""

from __future__ import annotations

import logging
import operator
import os
import re
import threading
from pathlib import Path
from typing import Callable, Iterable, Mapping

from ads_spark.broker.log import file_modes
from ads_spark.errors import InvariantViolation, StorageError
from ads_spark.protocol.names import is_valid_topic_name, shown

log = logging.getLogger("ads.log")

CHECKPOINT_VERSION = 0
INT32_MAX = 2**31 - 1  # partition ids and leader epochs are Kafka int32s
OFFSET_MAX = 2**63 - 1  # Kafka's int64
# Plain ASCII decimal only: int() would also take "+5", " 5", "5_000" and non-ASCII digits, none of which
# the writer produces, so accepting them would hide a damaged file.
_DECIMAL = re.compile(r"\A-?[0-9]{1,19}\Z")
# The same problem is reported once per checkpoint object: the high-watermark file is read once per partition
# while a broker starts, and one bad line must not become thousands of warnings.
_REPORTED_PROBLEMS_MAX = 1000


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
        file_modes.new_file(tmp)
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    fsync_directory(path.parent)


def _read_lines(path: Path) -> list[str] | None:
    """The file's lines, or None if it does not exist.

    Bytes that are not UTF-8 become U+FFFD, so a damaged line fails its own parse
    (and is reported with its number) instead of making the whole file unreadable.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StorageError(f"cannot read checkpoint {path}: {exc}") from exc
    return data.decode("utf-8", errors="replace").splitlines()


def _parse_int(text: str, what: str, low: int, high: int) -> int:
    """``text`` as an int in [low, high]; ValueError with a precise message otherwise."""
    if not _DECIMAL.match(text):
        raise ValueError(f"{what} {shown(text)} is not a decimal integer")
    value = int(text)
    if not low <= value <= high:
        raise ValueError(f"{what} {value} is outside [{low}, {high}]")
    return value


def _parse_offset_entry(line: str) -> tuple[str, int, int]:
    """One ``topic partition offset`` line; ValueError saying what is wrong with it."""
    fields = line.split()
    if len(fields) != 3:
        raise ValueError(f"expected 3 fields 'topic partition offset', found {len(fields)} in {shown(line)}")
    topic, partition, offset = fields
    if not is_valid_topic_name(topic):
        raise ValueError(f"topic {shown(topic)} is not a valid topic name")
    return topic, _parse_int(partition, "partition", 0, INT32_MAX), _parse_int(offset, "offset", 0, OFFSET_MAX)


def _parse_epoch_entry(line: str) -> tuple[int, int]:
    """One ``epoch start_offset`` line; ValueError saying what is wrong with it."""
    fields = line.split()
    if len(fields) != 2:
        raise ValueError(f"expected 2 fields 'epoch start_offset', found {len(fields)} in {shown(line)}")
    return (_parse_int(fields[0], "leader epoch", 0, INT32_MAX),
            _parse_int(fields[1], "start offset", 0, OFFSET_MAX))


def _parse_checkpoint(path: Path, lines: list[str], parse_entry) -> tuple[list[tuple[int, tuple]], list[str]]:
    """Kafka's layout: a version line, a count line, then ``count`` entry lines.

    Returns ([(line number, entry)] for the lines that parse, the problems
    found), each problem naming the file and the line. An unknown or unreadable
    version gives no entries at all (the lines may mean something else); a bad
    count only costs the cross-check, and a bad entry line only that entry.
    """
    problems: list[str] = []
    version_text = lines[0].strip() if lines else ""
    if version_text != str(CHECKPOINT_VERSION):
        problems.append(f"{path}: line 1: version {shown(version_text)}, expected {CHECKPOINT_VERSION}; "
                        "no entry of the file is used")
        return [], problems
    count: int | None = None
    try:
        count = _parse_int(lines[1].strip() if len(lines) > 1 else "", "entry count", 0, OFFSET_MAX)
    except ValueError as exc:
        problems.append(f"{path}: line 2: {exc}")
    entries = []
    entry_lines = 0
    for number, line in enumerate(lines[2:], start=3):
        if not line.strip():
            continue
        entry_lines += 1
        try:
            entries.append((number, parse_entry(line)))
        except ValueError as exc:
            problems.append(f"{path}: line {number}: {exc}; entry skipped")
    if count is not None and entry_lines != count:
        problems.append(f"{path}: line 2: the count says {count} entries, the file has {entry_lines} entry lines")
    return entries, problems


def _format_checkpoint(lines: list[str]) -> str:
    return "\n".join([str(CHECKPOINT_VERSION), str(len(lines)), *lines]) + "\n"


class OffsetCheckpointFile:
    """``topic partition offset`` lines: the recovery-point, high-watermark and log-start checkpoints.

    Nothing may make these files unreadable, because a broker that cannot read
    them cannot start: the writer leaves out (and logs) any entry whose line
    would not read back exactly, and the reader keeps every good line of a
    damaged file and reports the others. A partition whose entry is lost is
    safe: it recovers as if it had none (recovery point 0 validates its whole
    tail, high watermark 0 is re-established by its leader, the log start falls
    back to the first offset on disk).
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._reported: set[str] = set()

    def read(self) -> dict[tuple[str, int], int]:
        """The stored mapping (its good entries); empty if the file does not exist yet."""
        with self._lock:
            lines = _read_lines(self.path)
        if lines is None:
            return {}
        entries, problems = _parse_checkpoint(self.path, lines, _parse_offset_entry)
        result: dict[tuple[str, int], int] = {}
        for number, (topic, partition, offset) in entries:
            key = (topic, partition)
            if key in result and result[key] != offset:
                # Only damage repeats a key; the lower offset is the safe one for all three files.
                problems.append(f"{self.path}: line {number}: {topic}-{partition} appears again ({result[key]} "
                                f"before, {offset} here); using {min(result[key], offset)}")
                offset = min(result[key], offset)
            result[key] = offset
        self._report(problems, logging.WARNING, "the partitions of skipped entries recover as if they had none")
        return result

    def write(self, mapping: Mapping[tuple[str, int], int]) -> None:
        lines, refused = [], []
        for (topic, partition), offset in mapping.items():
            line = _checked_offset_line(topic, partition, offset)
            if line is None:
                refused.append(f"{self.path}: not writing the entry for topic {shown(topic)} partition "
                               f"{shown(partition)} offset {shown(offset)}: it would not read back")
            else:
                lines.append((topic, partition, line))
        self._report(refused, logging.ERROR, "a bug let an invalid partition reach the log manager")
        text = _format_checkpoint([line for _, _, line in sorted(lines)])
        with self._lock:
            write_atomically(self.path, text)

    def _report(self, problems: list[str], level: int, consequence: str) -> None:
        fresh = [p for p in problems if p not in self._reported]
        if not fresh:
            return
        if len(self._reported) > _REPORTED_PROBLEMS_MAX:
            self._reported.clear()
        self._reported.update(fresh)
        for problem in fresh:
            log.log(level, "checkpoint problem: %s (%s)", problem, consequence)


def _checked_offset_line(topic, partition, offset) -> str | None:
    """The line for one entry, or None when reading it back would not give exactly this entry."""
    try:
        partition_number, offset_number = operator.index(partition), operator.index(offset)
    except TypeError:
        return None
    if isinstance(partition, bool) or isinstance(offset, bool):
        return None
    line = f"{topic} {partition_number} {offset_number}"
    try:
        parsed = _parse_offset_entry(line)
    except ValueError:
        return None
    return line if parsed == (topic, partition_number, offset_number) else None


class LeaderEpochFile:
    """The leader-epoch cache of one replica: which epoch's leader wrote from which offset on.

    Invariant: both epochs and start offsets are strictly increasing along
    ``entries``. Every change is persisted before the method returns.
    """

    def __init__(self, path: Path, rebuild_from: Callable[[], Iterable[tuple[int, int]]] | None = None):
        """Load the cache from ``path`` (empty when the file does not exist).

        A damaged file (a bad line, a wrong count, epochs or offsets out of order)
        is rebuilt with ``rebuild_from()`` -- the log's own (epoch, first offset)
        pairs from its batch headers -- and rewritten; any good lines are not
        trusted on their own, since a missing entry would shift an epoch's end.
        Without ``rebuild_from`` the damage is a StorageError naming file and line.
        """
        self.path = Path(path)
        self._lock = threading.Lock()
        self._entries: list[tuple[int, int]] = []
        lines = _read_lines(self.path)
        if lines is None:
            return
        numbered, problems = _parse_checkpoint(self.path, lines, _parse_epoch_entry)
        problems += _order_problems(self.path, numbered)
        if not problems:
            self._entries = [entry for _, entry in numbered]
            return
        if rebuild_from is None:
            raise StorageError(f"damaged leader-epoch checkpoint: {'; '.join(problems)}")
        self._entries = [(int(e), int(s)) for e, s in rebuild_from()]
        log.warning("damaged leader-epoch checkpoint: %s; rebuilt it from the log's batch headers: %d epochs, "
                    "latest (epoch, start offset) %s", "; ".join(problems), len(self._entries),
                    self._entries[-1] if self._entries else None)
        self._persist()

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
        # The reader's ranges too: a line written here must read back.
        for epoch, start in self._entries:
            if not (0 <= epoch <= INT32_MAX and 0 <= start <= OFFSET_MAX):
                raise error(f"leader-epoch checkpoint {self.path}: entry ({epoch}, {start}) is out of range")
        for (e1, s1), (e2, s2) in zip(self._entries, self._entries[1:]):
            if not (e2 > e1 and s2 > s1):
                raise error(f"leader-epoch checkpoint {self.path} is not increasing: {self._entries}")

    def _persist(self) -> None:
        self._check(InvariantViolation)  # our own update broke the order: a bug
        write_atomically(self.path, _format_checkpoint([f"{e} {s}" for e, s in self._entries]))


def _order_problems(path: Path, numbered: list[tuple[int, tuple[int, int]]]) -> list[str]:
    """Where the loaded (epoch, start offset) lines fail to be strictly increasing in both."""
    return [f"{path}: line {n2}: entry {e2} {s2} does not follow line {n1}'s {e1} {s1} "
            "(epochs and start offsets must both increase)"
            for (n1, (e1, s1)), (n2, (e2, s2)) in zip(numbered, numbered[1:]) if not (e2 > e1 and s2 > s1)]
