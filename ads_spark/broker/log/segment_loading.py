"""Reading a partition's segments back: which to trust at start-up, and the leader epochs they hold.

``load_segments`` is ``PartitionLog.open``'s pass over the segment files (in offset order): a segment wholly
below the recovery point whose indexes agree with it is trusted in O(1), the others are scanned batch by
batch, and the first damaged one ends the log (what follows it is deleted). ``find_epoch_starts`` rebuilds
a damaged ``leader-epoch-checkpoint`` from the batch headers by bisection, reading O(log n) headers per
segment instead of all of them.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ads_spark.broker.log.checkpoints import fsync_directory
from ads_spark.broker.log.index import IndexInconsistent
from ads_spark.broker.log.segment import LogSegment
from ads_spark.protocol.records import BatchHeader

log = logging.getLogger("ads.log")


def _delete_segment_files(directory: Path, base_offset: int) -> None:
    stem = f"{base_offset:020d}"
    for suffix in (".arrows", ".index", ".timeindex"):
        (directory / f"{stem}{suffix}").unlink(missing_ok=True)


def load_segments(directory: Path, bases: list[int], recovery_point: int, clean_shutdown: bool,
                   now_ms: int) -> list[LogSegment]:
    """Open segments in order; validate those at/after the recovery point; stop at the first damage."""
    segments: list[LogSegment] = []
    for i, base in enumerate(bases):
        if segments and base < segments[-1].next_offset:  # later is a gap the cleaner left: allowed
            log.warning("%s: segment %d overlaps %d (ends at %d); dropping it and later ones",
                        directory, base, segments[-1].base_offset, segments[-1].next_offset)
            break
        next_base = bases[i + 1] if i + 1 < len(bases) else None
        trusted = clean_shutdown or (next_base is not None and next_base <= recovery_point)
        segment = None
        if trusted:
            try:
                segment = LogSegment.open_trusted(directory, base, now_ms)
            except IndexInconsistent as exc:
                log.warning("%s: rebuilding indexes of segment %d: %s", directory, base, exc)
        if segment is None:
            segment, problem = LogSegment.recover(directory, base, now_ms)
            if problem is not None:
                segments.append(segment)
                break
        segments.append(segment)
    for base in bases[len(segments):]:
        _delete_segment_files(directory, base)
    if len(segments) < len(bases):
        fsync_directory(directory)
    return segments


def note_epoch_start(starts: list[tuple[int, int]], header: BatchHeader) -> None:
    # Only a newer epoch starts an entry: a damaged log with an epoch going down must not break the cache's order.
    if not starts or header.leader_epoch > starts[-1][0]:
        starts.append((header.leader_epoch, header.base_offset))


def find_epoch_starts(segment: LogSegment, low: int, low_header: BatchHeader, high: int,
                       high_header: BatchHeader, starts: list[tuple[int, int]]) -> None:
    """Append, in order, the epoch starts among batches ``low`` < i <= ``high`` of ``segment`` (bisection)."""
    if low_header.leader_epoch == high_header.leader_epoch:
        return
    if high == low + 1:
        note_epoch_start(starts, high_header)
        return
    middle = (low + high) // 2  # depth is log2(batches): at most ~40 levels
    middle_header = segment.read_batch(middle)[1]
    find_epoch_starts(segment, low, low_header, middle, middle_header, starts)
    find_epoch_starts(segment, middle, middle_header, high, high_header, starts)
