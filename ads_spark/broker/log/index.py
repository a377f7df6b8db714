"""The two sidecar indexes of a segment: ``.index`` (offset -> file position) and ``.timeindex``.

``.index`` holds one fixed-width little-endian entry per stored batch
(base_offset, record_count, position, size, max_timestamp_ms; 5 x int64), in
offset order, so finding the batch holding an offset is a bisection. The
``.timeindex`` holds (timestamp_ms, base_offset) pairs appended only when a
batch raises the segment's largest timestamp, so its timestamps are increasing
and "first record at or after T" is a bisection too.

Both are derived data: the segment file is the truth, and a missing or
inconsistent index is rebuilt from it (see ``segment.py``). Opening a segment
reads only the sizes and the first and last entries, so start-up cost does not
grow with the log; the arrays are loaded on first use.
"""

from __future__ import annotations

import os
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ads_spark.broker.log import file_modes

ENTRY_DTYPE = np.dtype([("base_offset", "<i8"), ("record_count", "<i8"), ("position", "<i8"),
                        ("size", "<i8"), ("max_timestamp_ms", "<i8")])
TIME_DTYPE = np.dtype([("timestamp_ms", "<i8"), ("base_offset", "<i8")])
ENTRY_BYTES = ENTRY_DTYPE.itemsize
TIME_ENTRY_BYTES = TIME_DTYPE.itemsize
NO_TIMESTAMP = -1


class IndexEntry(NamedTuple):
    base_offset: int
    record_count: int
    position: int  # byte position of the batch's IPC message in the segment file
    size: int  # bytes of that message
    max_timestamp_ms: int

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.record_count

    @property
    def end_position(self) -> int:
        return self.position + self.size


class IndexInconsistent(Exception):
    """A sidecar does not match its segment; the caller rebuilds it from the segment."""


def _read_entry(path: Path, i: int) -> IndexEntry:
    with open(path, "rb") as handle:
        handle.seek(i * ENTRY_BYTES)
        raw = np.frombuffer(handle.read(ENTRY_BYTES), dtype=ENTRY_DTYPE)
    return IndexEntry(*(int(v) for v in raw[0]))


class SegmentIndex:
    """In-memory columns of both sidecars plus append handles; one per segment.

    Invariants: ``_bases`` is strictly increasing and each batch starts at or after the previous
    one's next offset (``bases[i+1] >= bases[i] + counts[i]``; equal unless the log cleaner
    left a gap); ``_time_ts`` is strictly increasing;
    the files hold exactly the entries in memory once ``flush`` returns.
    """

    def __init__(self, index_path: Path, timeindex_path: Path):
        self.index_path = index_path
        self.timeindex_path = timeindex_path
        self._cols = [array("q") for _ in ENTRY_DTYPE.names]
        self._time_ts = array("q")
        self._time_offsets = array("q")
        self._loaded = True
        self._count = 0
        self._last: IndexEntry | None = None
        self._max_timestamp_ms = NO_TIMESTAMP
        self._handles: tuple | None = None

    # ---- opening ------------------------------------------------------------------

    @classmethod
    def create_empty(cls, index_path: Path, timeindex_path: Path) -> "SegmentIndex":
        index = cls(index_path, timeindex_path)
        index.rewrite([])
        return index

    @classmethod
    def open_lazily(cls, index_path: Path, timeindex_path: Path, *, base_offset: int,
                    first_position: int, segment_size: int) -> "SegmentIndex":
        """Check the sidecars against the segment in O(1); raise IndexInconsistent if they disagree."""
        try:
            index_size = index_path.stat().st_size
            time_size = timeindex_path.stat().st_size
        except FileNotFoundError as exc:
            raise IndexInconsistent(f"missing {exc.filename}") from exc
        if index_size % ENTRY_BYTES or time_size % TIME_ENTRY_BYTES:
            raise IndexInconsistent(f"torn index entry in {index_path} or {timeindex_path}")
        index = cls(index_path, timeindex_path)
        index._count = index_size // ENTRY_BYTES
        if index._count == 0:
            if segment_size != first_position or time_size:
                raise IndexInconsistent(f"{index_path} is empty but the segment is not")
            return index
        first, last = _read_entry(index_path, 0), _read_entry(index_path, index._count - 1)
        if (first.base_offset < base_offset or first.position != first_position
                or last.end_position != segment_size or last.base_offset < first.base_offset or not time_size):
            raise IndexInconsistent(f"{index_path} does not match its segment ({segment_size} bytes)")
        with open(timeindex_path, "rb") as handle:
            handle.seek(time_size - TIME_ENTRY_BYTES)
            ts, offset = np.frombuffer(handle.read(TIME_ENTRY_BYTES), dtype="<i8")
        if not first.base_offset <= offset <= last.base_offset:
            raise IndexInconsistent(f"{timeindex_path} points outside its segment")
        index._last, index._max_timestamp_ms, index._loaded = last, int(ts), False
        return index

    def _ensure_loaded(self) -> None:
        if self._loaded:
            return
        entries = np.fromfile(self.index_path, dtype=ENTRY_DTYPE)
        times = np.fromfile(self.timeindex_path, dtype=TIME_DTYPE)
        for col, name in zip(self._cols, ENTRY_DTYPE.names):
            col.frombytes(np.ascontiguousarray(entries[name]).tobytes())
        self._time_ts.frombytes(np.ascontiguousarray(times["timestamp_ms"]).tobytes())
        self._time_offsets.frombytes(np.ascontiguousarray(times["base_offset"]).tobytes())
        self._loaded = True

    # ---- queries ------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._count

    @property
    def max_timestamp_ms(self) -> int:
        return self._max_timestamp_ms

    def last(self) -> IndexEntry | None:
        return self._last

    def entry(self, i: int) -> IndexEntry:
        self._ensure_loaded()
        return IndexEntry(*(col[i] for col in self._cols))

    def batch_containing(self, offset: int) -> int:
        """Position of the last batch whose base offset is <= ``offset`` (-1 if none)."""
        self._ensure_loaded()
        return bisect_right(self._cols[0], offset) - 1

    def first_batch_reaching(self, timestamp_ms: int) -> int | None:
        """Position of the first batch whose running max timestamp is >= ``timestamp_ms``."""
        self._ensure_loaded()
        i = bisect_left(self._time_ts, timestamp_ms)
        if i == len(self._time_ts):
            return None
        return self.batch_containing(self._time_offsets[i])

    # ---- changes -------------------------------------------------------------------------

    def append(self, entry: IndexEntry) -> None:
        self._ensure_loaded()
        for col, value in zip(self._cols, entry):
            col.append(value)
        index_file, time_file = self._open_handles()
        index_file.write(np.array([tuple(entry)], dtype=ENTRY_DTYPE).tobytes())
        if entry.max_timestamp_ms > self._max_timestamp_ms or not self._time_ts:
            self._max_timestamp_ms = max(entry.max_timestamp_ms, self._max_timestamp_ms)
            self._time_ts.append(entry.max_timestamp_ms)
            self._time_offsets.append(entry.base_offset)
            time_file.write(np.array([(entry.max_timestamp_ms, entry.base_offset)], dtype=TIME_DTYPE).tobytes())
        self._count += 1
        self._last = entry

    def truncate(self, keep_batches: int) -> None:
        """Keep the first ``keep_batches`` entries; both files shrink in place (they are prefixes)."""
        self._ensure_loaded()
        self.close()
        for col in self._cols:
            del col[keep_batches:]
        end_offset = self._cols[0][-1] + self._cols[1][-1] if keep_batches else None
        keep_times = bisect_left(self._time_offsets, end_offset) if keep_batches else 0
        del self._time_ts[keep_times:]
        del self._time_offsets[keep_times:]
        os.truncate(self.index_path, keep_batches * ENTRY_BYTES)
        os.truncate(self.timeindex_path, keep_times * TIME_ENTRY_BYTES)
        self._count = keep_batches
        self._last = self.entry(keep_batches - 1) if keep_batches else None
        self._max_timestamp_ms = self._time_ts[-1] if keep_times else NO_TIMESTAMP

    def rewrite(self, entries: list[IndexEntry]) -> None:
        """Replace both files with ``entries`` (an index rebuilt from the segment)."""
        self.close()
        self.__init__(self.index_path, self.timeindex_path)
        for path in (self.index_path, self.timeindex_path):
            path.write_bytes(b"")
            file_modes.new_file(path)
        for entry in entries:
            self.append(entry)
        self.flush()

    def flush(self) -> None:
        if self._handles is None:
            return
        for handle in self._handles:
            handle.flush()
            os.fsync(handle.fileno())

    def close(self) -> None:
        if self._handles is not None:
            for handle in self._handles:
                handle.close()
            self._handles = None

    def _open_handles(self) -> tuple:
        if self._handles is None:
            self._handles = (open(self.index_path, "ab"), open(self.timeindex_path, "ab"))
            for path in (self.index_path, self.timeindex_path):
                file_modes.new_file(path)
        return self._handles
