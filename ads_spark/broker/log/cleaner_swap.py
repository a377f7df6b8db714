"""Writing cleaned segments and swapping them in so that a crash at any point leaves the old or the new.

The log cleaner (``cleaner.py``) writes each cleaned segment beside the ones it replaces, under
temporary names (``<base>.arrows.cleaned``, ``<base>.index.cleaned``, ``<base>.timeindex.cleaned``),
fsyncs them and the directory, and then swaps:

1. commit: the manifest ``cleaner-swap.json`` (which cleaned bases replace which old bases) is written
   to a temporary file, fsynced and renamed into place (atomic), the directory fsynced. Before this
   point the old segments are the log; from it on the new ones are;
2. each ``*.cleaned`` file is renamed over its final name (the first segment a cleaned one replaces
   has the same base, so the rename is what replaces it); the other old segments' files are deleted;
   the directory fsynced;
3. the manifest is deleted (and the directory fsynced).

``complete_or_roll_back`` runs in ``PartitionLog.open`` before anything else reads the directory:
with a manifest it does steps 2-3 again (each is idempotent: a rename whose source is gone is done,
a delete of a missing file is done); without one it deletes every ``*.cleaned`` file. So after a
crash at any step the log holds either every old segment or every new one, never neither and never
both. ``step_hook`` (tests only) is called with a label after every file operation of the swap, so
a test can kill the process at each one.

The running log's readers are never disturbed: the renames and deletes replace directory entries,
and a batch already handed out keeps its memory-mapped old inode (``segment.py``).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Callable, Sequence

import pyarrow as pa

from ads_spark.broker.log import file_modes
from ads_spark.broker.log.checkpoints import fsync_directory, write_atomically
from ads_spark.broker.log.index import IndexEntry, SegmentIndex
from ads_spark.broker.log.segment import OFFSET_DIGITS, SCHEMA_MESSAGE, SEGMENT_SUFFIX
from ads_spark.errors import StorageError
from ads_spark.protocol.records import BatchHeader

log = logging.getLogger("ads.log.cleaner")

MANIFEST_NAME = "cleaner-swap.json"
CLEANED_SUFFIX = ".cleaned"
_FILE_SUFFIXES = (SEGMENT_SUFFIX, ".index", ".timeindex")

# Tests set this to a callable taking the label of the swap step just done (e.g. to SIGKILL there).
step_hook: Callable[[str], None] | None = None


def _step(label: str) -> None:
    if step_hook is not None:
        step_hook(label)


def _final_path(directory: Path, base_offset: int, suffix: str) -> Path:
    return directory / f"{base_offset:0{OFFSET_DIGITS}d}{suffix}"


def _cleaned_path(directory: Path, base_offset: int, suffix: str) -> Path:
    return directory / f"{base_offset:0{OFFSET_DIGITS}d}{suffix}{CLEANED_SUFFIX}"


class CleanedSegmentWriter:
    """One cleaned segment being written under its temporary names; ``finish`` makes it durable."""

    def __init__(self, directory: Path, base_offset: int):
        self.directory = directory
        self.base_offset = base_offset
        self.path = _cleaned_path(directory, base_offset, SEGMENT_SUFFIX)
        self._file = open(self.path, "wb")
        file_modes.new_file(self.path)
        self._file.write(SCHEMA_MESSAGE)
        self.size_bytes = len(SCHEMA_MESSAGE)
        self.entries: list[IndexEntry] = []

    def append(self, message: pa.Buffer, header: BatchHeader) -> int:
        """Write one batch message; returns its size in bytes."""
        self._file.write(memoryview(message))
        self.entries.append(IndexEntry(header.base_offset, header.record_count, self.size_bytes, message.size,
                                       header.max_timestamp_ms))
        self.size_bytes += message.size
        return message.size

    def finish(self) -> None:
        """fsync the segment and write (and fsync) its two indexes under their temporary names."""
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        index = SegmentIndex(_cleaned_path(self.directory, self.base_offset, ".index"),
                             _cleaned_path(self.directory, self.base_offset, ".timeindex"))
        index.rewrite(self.entries)
        index.close()
        _step(f"written {self.path.name}")

    def discard(self) -> None:
        if not self._file.closed:
            self._file.close()
        for suffix in _FILE_SUFFIXES:
            _cleaned_path(self.directory, self.base_offset, suffix).unlink(missing_ok=True)


def swap_in(directory: Path, groups: Sequence[tuple[int, Sequence[int]]]) -> None:
    """Replace old segments by cleaned ones: ``groups`` = [(cleaned base, old bases it replaces)].

    Every cleaned segment must be finished (fsynced) and the directory fsynced before the call.
    The caller holds the log's lock, so nothing else changes the directory meanwhile.
    """
    for base, replaced in groups:
        if not replaced or replaced[0] != base:
            raise StorageError(f"cleaned segment {base} must replace a run of segments starting at its own base")
    manifest = {"groups": [{"base": base, "replaces": list(replaced)} for base, replaced in groups]}
    write_atomically(directory / MANIFEST_NAME, json.dumps(manifest))
    _step("manifest-written")
    _roll_forward(directory, manifest)


def _roll_forward(directory: Path, manifest: dict) -> None:
    for group in manifest["groups"]:
        base = int(group["base"])
        for suffix in _FILE_SUFFIXES:
            cleaned = _cleaned_path(directory, base, suffix)
            if cleaned.exists():
                os.replace(cleaned, _final_path(directory, base, suffix))
                _step(f"renamed {cleaned.name}")
        for old in group["replaces"]:
            if int(old) == base:
                continue
            for suffix in _FILE_SUFFIXES:
                path = _final_path(directory, int(old), suffix)
                if path.exists():
                    path.unlink()
                    _step(f"deleted {path.name}")
    fsync_directory(directory)
    _step("replaced")
    (directory / MANIFEST_NAME).unlink(missing_ok=True)
    fsync_directory(directory)
    _step("manifest-deleted")


def complete_or_roll_back(directory: Path) -> str | None:
    """Finish a committed swap or drop an uncommitted one; says which (None: nothing to do)."""
    manifest_path = directory / MANIFEST_NAME
    outcome = None
    if manifest_path.exists():
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:  # written by an atomic rename: unreadable means the disk lies
            raise StorageError(f"{manifest_path} is unreadable ({exc}); the cleaner's swap cannot be finished"
                               ) from exc
        _roll_forward(directory, manifest)
        outcome = "completed"
    leftovers = [p for p in directory.iterdir() if p.name.endswith(CLEANED_SUFFIX)]
    for path in leftovers:
        path.unlink()
    if leftovers:
        fsync_directory(directory)
        outcome = outcome or "rolled back"
    if outcome is not None:
        log.warning("%s: an interrupted log cleaner swap was %s", directory, outcome)
    return outcome
