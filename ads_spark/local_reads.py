"""The local read path: a reader on the broker's own host maps the segment files instead of fetching.

Why: when brokers run next to Spark executors, a fetch moves every byte through
gRPC twice over loopback (the broker's send, the reader's receive), and the
#5 profile put that transfer at about as much CPU as the rest of the read.
The segment files are Arrow IPC streams already; a reader that can open them
gets zero-copy batches from the page cache.

How it stays correct: the broker answers ``locate`` with the batches a fetch
would return (same bounds: from the fetch offset, below the high watermark,
within the byte budget) as (segment path, byte position, size, base offset,
record count: the batch's offset span), plus the file's device and inode and an identity of its host,
and where the next read starts (``next_offset``: past the last batch's span, or the HW when nothing
is stored below it: compaction leaves gaps, which a reader must not ask for again).
The reader uses them only if it runs on the same host (same identity), the
file it opens is the same file (device and inode: a truncation or retention
replaces or deletes the file, it never rewrites it in place; so does the log cleaner), and every batch's
own header names the base offset and span the broker said and holds the rows it says. Otherwise it
fetches as usual. Records below the HW are committed and never rewritten, so
what it maps cannot change under it.

Who may read: ``locate`` needs Read on the topic (as a fetch), but once a reader
holds a path, only file permissions stand between it and the segment. With
security on, log directories are 0700 and segments 0600 (broker/log/file_modes.py),
so a reader under another Unix user cannot open them (``SegmentsNotReadable``) and
reads over Flight, where the ACLs apply; a process running as the broker's own
user (or root) can read every segment of every topic, whatever its ACLs.
"""

from __future__ import annotations

import os
import socket
from functools import lru_cache
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc

from ads_spark.errors import CorruptMessageError
from ads_spark.protocol.records import NO_SCHEMA_ID, RECORD_SCHEMA, BatchHeader
from ads_spark.protocol.typed_records import with_offsets
from ads_spark.schemas.projection import ProjectedRead

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


@lru_cache(maxsize=1)
def host_identity() -> str:
    """This host (and boot): equal on both ends only when reader and broker share a machine."""
    try:
        with open(BOOT_ID_PATH) as handle:
            boot_id = handle.read().strip()
    except OSError:
        boot_id = "no-boot-id"
    return f"{socket.gethostname()}/{boot_id}"


def describe_segments(located: list[tuple[str, list[tuple[int, int, int, int]]]]) -> list[dict[str, Any]]:
    """The broker's answer for ``PartitionLog.locate``: each segment with its file identity."""
    out = []
    for path, batches in located:
        try:
            stat = os.stat(path)
        except OSError:  # rolled away (retention) between locate and here: the reader fetches instead
            return []
        out.append({"path": path, "device": stat.st_dev, "inode": stat.st_ino, "batches": batches})
    return out


class NotLocal(Exception):
    """The located batches cannot be read here; fetch them instead."""


class SegmentsNotReadable(NotLocal):
    """The broker's segment files are on this host but this process may not open them (another Unix user
    than the broker's, with security on): none of that broker's will be readable, so stop asking it."""


def read_located(answer: dict[str, Any], projection: ProjectedRead | None = None,
                 partition: int = -1) -> list[pa.RecordBatch]:
    """The batches the broker located, mapped from its segment files (raises NotLocal when that is not safe).
    ``projection``: a typed topic's read (``schemas/projection.py``), applied as the broker's typed fetch does:
    only the read's columns are touched; without it a typed segment is not read here."""
    if answer.get("host_id") != host_identity():
        raise NotLocal("the broker runs on another host")
    batches: list[pa.RecordBatch] = []
    for segment in answer.get("segments", []):
        batches.extend(_read_segment(segment, projection, partition))
    return batches


def _read_segment(segment: dict[str, Any], projection: ProjectedRead | None, partition: int) -> list[pa.RecordBatch]:
    try:
        mapped = pa.memory_map(segment["path"])
        stat = os.fstat(mapped.fileno())
    except PermissionError:  # the message would only repeat the path
        raise SegmentsNotReadable(f"permission denied on {segment['path']}") from None
    except (OSError, pa.ArrowException) as exc:
        raise NotLocal(f"cannot map {segment['path']}: {exc}") from None
    if (stat.st_dev, stat.st_ino) != (segment["device"], segment["inode"]):
        raise NotLocal(f"{segment['path']} was replaced since the broker located it")
    try:
        reader = ipc.open_stream(mapped)
        out = []
        for position, size, base_offset, record_count in segment["batches"]:
            if position + size > mapped.size():
                raise NotLocal(f"{segment['path']} is shorter than the broker said")
            mapped.seek(position)
            batch, metadata = reader.read_next_batch_with_custom_metadata()
            header = BatchHeader.from_metadata(metadata)
            # record_count is the batch's offset span; a cleaned batch holds fewer rows (header.rows) than that.
            if (header.base_offset, header.record_count, batch.num_rows) != (base_offset, record_count, header.rows):
                raise NotLocal(f"{segment['path']}: batch at byte {position} is not offset {base_offset}")
            if projection is not None:
                if header.schema_id == NO_SCHEMA_ID:
                    raise NotLocal(f"{segment['path']} holds Kafka-shaped batches, not typed ones")
                if not projection.may_match(header):  # the broker's next offset still passes it
                    continue
                batch = with_offsets(projection.convert(batch, header, partition), header.base_offset)
            out.append(batch)
        if out and projection is None and not out[0].schema.equals(RECORD_SCHEMA):
            raise NotLocal(f"{segment['path']} does not hold RECORD_SCHEMA batches")
        return out
    except (OSError, pa.ArrowException, StopIteration, ValueError, KeyError, CorruptMessageError) as exc:
        raise NotLocal(f"reading {segment['path']}: {exc}") from None
