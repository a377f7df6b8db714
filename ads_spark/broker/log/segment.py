"""One segment: an Arrow IPC stream file of stored batches plus its sidecar indexes.

A segment file ``<20-digit base offset>.arrows`` is a plain Arrow IPC stream:
its schema message once (``RECORD_SCHEMA``, or a typed topic's record schema of
one version, ``protocol/typed_records.py``: a batch of another version starts a
new segment), then one record-batch message per stored batch with the
``BatchHeader`` as the message's custom metadata. No
end-of-stream marker is ever written, so appending after a restart is a plain
append and ``pyarrow.ipc.open_stream`` reads the file up to its end.

Each batch message is serialised once (``encode_batch_message``) and written
with one ``os.write``, which gives its exact position and size for the index.
Reads memory-map the file and seek a stream reader to the indexed position, so a
fetched batch's buffers point into the page cache (zero copy). The last few
small messages appended are also kept in memory (``RECENT_*``): in-sync
followers and tailing consumers read what was just appended, and reading that
from the file meant mapping the grown file and re-reading its schema on every
append.

Why truncation copies instead of cutting in place: batches handed to readers
keep the old mapping alive, and shrinking a mapped file turns their next page
access into SIGBUS (and a later append would overwrite bytes they still
reference). So a runtime truncation writes the kept prefix to a new inode and
renames it over the old one; only recovery, before any reader exists, cuts in
place.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc

from ads_spark.broker.log import file_modes
from ads_spark.broker.log.checkpoints import fsync_directory
from ads_spark.broker.log.index import IndexEntry, IndexInconsistent, SegmentIndex
from ads_spark.errors import CorruptMessageError, StorageError
from ads_spark.protocol.records import NO_STATS, RECORD_SCHEMA, BatchHeader, check_sequence, message_crc, verify
from ads_spark.protocol.typed_records import check_stored_schema

log = logging.getLogger("ads.log")

SEGMENT_SUFFIX = ".arrows"
OFFSET_DIGITS = 20
_EOS_BYTES = 8  # continuation marker + zero length that closing a stream writer appends
# The recently appended messages a segment keeps (references to buffers the append already had, no
# copy). Bounds the memory held per segment; larger messages are read from the mapped file, where the
# per-read cost of re-mapping (~0.15 ms) is small beside moving their bytes.
RECENT_MESSAGES_MAX = 8
RECENT_BYTES_MAX = 1 << 20


def _schema_message(schema: pa.Schema) -> bytes:
    sink = pa.BufferOutputStream()
    ipc.new_stream(sink, schema).close()
    return sink.getvalue().to_pybytes()[:-_EOS_BYTES]


SCHEMA_MESSAGE = _schema_message(RECORD_SCHEMA)
# Typed topics' schema messages by their serialised schema (metadata included: the version is in it).
# Bounded: a broker holds few typed versions at once, and an evicted one is only recomputed.
_TYPED_SCHEMA_MESSAGES: dict[bytes, bytes] = {}
TYPED_SCHEMA_MESSAGES_MAX = 256


def schema_message(schema: pa.Schema) -> bytes:
    """The IPC schema message a segment of ``schema`` starts with (the bytes before its first batch)."""
    if not schema.metadata and schema.equals(RECORD_SCHEMA):
        return SCHEMA_MESSAGE
    key = schema.serialize().to_pybytes()
    found = _TYPED_SCHEMA_MESSAGES.get(key)
    if found is None:
        if len(_TYPED_SCHEMA_MESSAGES) >= TYPED_SCHEMA_MESSAGES_MAX:
            _TYPED_SCHEMA_MESSAGES.clear()
        found = _TYPED_SCHEMA_MESSAGES[key] = _schema_message(schema)
    return found


def segment_file_name(base_offset: int) -> str:
    return f"{base_offset:0{OFFSET_DIGITS}d}{SEGMENT_SUFFIX}"


def parse_segment_file_name(name: str) -> int | None:
    stem = name[: -len(SEGMENT_SUFFIX)]
    if name.endswith(SEGMENT_SUFFIX) and len(stem) == OFFSET_DIGITS and stem.isdigit():
        return int(stem)
    return None


def encode_batch_message(batch: pa.RecordBatch, header: BatchHeader) -> pa.Buffer:
    """The IPC record-batch message for ``batch`` (in its own stored schema) with ``header`` as custom metadata."""
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch, custom_metadata=header.to_metadata())
    stream = sink.getvalue()
    start = len(schema_message(batch.schema))
    return stream.slice(start, stream.size - start - _EOS_BYTES)


# Ten characters, the width of a 32-bit CRC written as zero-padded decimal: the metadata is encoded
# with this in the CRC's place, and the digits are written over it once the body's CRC is known.
_CRC_SLOT = b"#crc-slot#"


def encode_sealed_message(batch: pa.RecordBatch, header: BatchHeader) -> tuple[pa.Buffer, BatchHeader]:
    """The IPC message of a batch the leader has just stamped, and its header with the CRC filled in.

    One serialization: the CRC covers the message body, which does not depend on the
    metadata, so the message is encoded first and the CRC's digits are patched into its
    metadata in place (same width, so nothing moves). Sealing then encoding serialized
    every produced batch twice.
    """
    if _CRC_SLOT.decode() in header.stats:
        # A string statistic equal to the slot's text would take the CRC's digits: statistics are optional
        # (a batch without them is always read), so the batch is stored without them.
        header = replace(header, stats=NO_STATS)
    metadata = header.to_metadata()
    metadata["ads.crc"] = _CRC_SLOT.decode()
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch, custom_metadata=metadata)
    stream = sink.getvalue()  # a fresh, mutable buffer: the patch below writes into it
    start = len(schema_message(batch.schema))
    message = stream.slice(start, stream.size - start - _EOS_BYTES)
    crc = message_crc(message, header)
    metadata_end = start + message.size - ipc.read_message(message).body.size
    view = memoryview(stream).cast("B")
    slot = bytes(view[start:metadata_end]).find(_CRC_SLOT)
    if slot < 0:
        raise StorageError("encoded batch metadata has no CRC slot")
    view[start + slot:start + slot + len(_CRC_SLOT)] = f"{crc:010d}".encode()
    return message, replace(header, crc=crc)


def scan_segment(path: Path, base_offset: int) -> tuple[list[IndexEntry], pa.Schema, int, int, str | None]:
    """Validate ``path`` batch by batch: (entries, schema, schema_end, valid_end_position, problem).

    Stops at the first message that is torn, unparsable, out of sequence (a gap is
    allowed before the first batch and after a cleaned one, ``fetched.check_sequence``)
    or fails its CRC; ``valid_end_position`` is where the file must be cut (0 when even the
    schema is unusable). Every batch must name the segment's schema id (0 in a Kafka-shaped segment).
    """
    size = path.stat().st_size
    if size == 0:
        return [], RECORD_SCHEMA, 0, 0, "empty file"
    try:
        mapped = pa.memory_map(str(path))
        reader = ipc.open_stream(mapped)
        schema_id = check_stored_schema(reader.schema)
    except (pa.ArrowException, OSError, CorruptMessageError) as exc:
        return [], RECORD_SCHEMA, 0, 0, f"unreadable schema: {exc}"
    schema_end = position = mapped.tell()
    entries: list[IndexEntry] = []
    expected_offset, previous = base_offset, None
    while position < size:
        try:
            batch, metadata = reader.read_next_batch_with_custom_metadata()
            header = BatchHeader.from_metadata(metadata)
            check_sequence(header, expected_offset, previous)
            if header.schema_id != schema_id:
                raise CorruptMessageError(f"batch names schema {header.schema_id}, its segment holds {schema_id}")
            verify(batch, header)
        except StopIteration:
            return entries, reader.schema, schema_end, position, f"end-of-stream marker at byte {position} of {size}"
        except (pa.ArrowException, OSError, CorruptMessageError) as exc:
            return entries, reader.schema, schema_end, position, f"bad batch at byte {position}: {exc}"
        end = mapped.tell()
        entries.append(IndexEntry(header.base_offset, header.record_count, position, end - position,
                                  header.max_timestamp_ms))
        expected_offset, position, previous = header.next_offset, end, header
    return entries, reader.schema, schema_end, position, None


def _copy_prefix(source: Path, target: Path, length_bytes: int) -> None:
    with open(source, "rb") as src, open(target, "wb") as dst:
        file_modes.new_file(target)
        copied = 0
        try:
            while copied < length_bytes:
                n = os.copy_file_range(src.fileno(), dst.fileno(), length_bytes - copied)
                if n == 0:
                    break
                copied += n
        except (AttributeError, OSError):
            src.seek(copied)
            dst.seek(copied)
            remaining = length_bytes - copied
            while remaining > 0:
                chunk = src.read(min(remaining, 1 << 20))
                if not chunk:
                    break
                dst.write(chunk)
                remaining -= len(chunk)
        dst.flush()
        os.fsync(dst.fileno())


class LogSegment:
    """Invariants: ``size_bytes`` is the file size; the index covers exactly the file's batches;
    only the active (last) segment has an append descriptor."""

    def __init__(self, directory: Path, base_offset: int, index: SegmentIndex, schema_end: int,
                 size_bytes: int, created_ms: int, schema: pa.Schema = RECORD_SCHEMA):
        self.directory = directory
        # Every batch of the segment is in this schema and names its id (check_stored_schema).
        self.schema = schema
        self.schema_id = check_stored_schema(schema)
        self.base_offset = base_offset
        self.path = directory / segment_file_name(base_offset)
        self.index = index
        self.schema_end = schema_end  # byte position of the first batch message
        self.size_bytes = size_bytes
        self.created_ms = created_ms  # wall clock at creation or reopen; drives segment.ms
        self._fd: int | None = None
        self._dirty = False  # bytes written since the last fsync
        self._mapped: pa.MemoryMappedFile | None = None
        self._reader = None
        self._mapped_bytes = 0
        # Batch index -> (message, header) for the last appended messages, oldest first. Invariant: an
        # entry is exactly the bytes the file holds at that index (appends add, truncation drops).
        self._recent: dict[int, tuple[pa.Buffer, BatchHeader]] = {}
        self._recent_bytes = 0

    # ---- construction ------------------------------------------------------------------

    @staticmethod
    def _sidecars(directory: Path, base_offset: int) -> tuple[Path, Path]:
        stem = f"{base_offset:0{OFFSET_DIGITS}d}"
        return directory / f"{stem}.index", directory / f"{stem}.timeindex"

    @classmethod
    def create(cls, directory: Path, base_offset: int, now_ms: int, schema: pa.Schema = RECORD_SCHEMA) -> "LogSegment":
        path = directory / segment_file_name(base_offset)
        prefix = schema_message(schema)
        with open(path, "wb") as handle:
            file_modes.new_file(path)
            handle.write(prefix)
            handle.flush()
            os.fsync(handle.fileno())
        index = SegmentIndex.create_empty(*cls._sidecars(directory, base_offset))
        fsync_directory(directory)
        return cls(directory, base_offset, index, len(prefix), len(prefix), now_ms, schema)

    @classmethod
    def open_trusted(cls, directory: Path, base_offset: int, now_ms: int) -> "LogSegment":
        """Open a segment below the recovery point; IndexInconsistent if its sidecars disagree."""
        path = directory / segment_file_name(base_offset)
        size = path.stat().st_size
        try:
            with pa.memory_map(str(path)) as mapped:
                schema = ipc.open_stream(mapped).schema
                check_stored_schema(schema)
                schema_end = mapped.tell()
        except (pa.ArrowException, OSError, CorruptMessageError) as exc:
            raise IndexInconsistent(f"unreadable schema in {path}: {exc}") from exc
        index = SegmentIndex.open_lazily(*cls._sidecars(directory, base_offset), base_offset=base_offset,
                                         first_position=schema_end, segment_size=size)
        return cls(directory, base_offset, index, schema_end, size, now_ms, schema)

    @classmethod
    def recover(cls, directory: Path, base_offset: int, now_ms: int) -> tuple["LogSegment", str | None]:
        """Validate every batch, cut the file at the first bad one and rebuild the indexes."""
        path = directory / segment_file_name(base_offset)
        entries, schema, schema_end, valid_end, problem = scan_segment(path, base_offset)
        if problem is not None:
            log.warning("recovering %s: %s; cutting at byte %d", path, problem, valid_end)
            if valid_end == 0:  # no schema survived: an empty Kafka-shaped segment (a typed append replaces it)
                schema = RECORD_SCHEMA
                path.write_bytes(SCHEMA_MESSAGE)
                schema_end = valid_end = len(SCHEMA_MESSAGE)
            else:
                os.truncate(path, valid_end)
        with open(path, "rb+") as handle:
            os.fsync(handle.fileno())
        index = SegmentIndex(*cls._sidecars(directory, base_offset))
        index.rewrite(entries)
        return cls(directory, base_offset, index, schema_end, valid_end, now_ms, schema), problem

    # ---- state ----------------------------------------------------------------------------

    @property
    def batch_count(self) -> int:
        return len(self.index)

    @property
    def next_offset(self) -> int:
        last = self.index.last()
        return last.next_offset if last is not None else self.base_offset

    @property
    def max_timestamp_ms(self) -> int:
        return self.index.max_timestamp_ms

    # ---- writes -----------------------------------------------------------------------------

    def append(self, message: pa.Buffer, header: BatchHeader) -> None:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        position = self.size_bytes
        view = memoryview(message)
        try:
            written = 0
            while written < len(view):
                written += os.write(self._fd, view[written:])
        except OSError as exc:
            self._undo_partial_write(position)
            raise StorageError(f"append to {self.path} failed: {exc}") from exc
        self.size_bytes = position + len(view)
        self._dirty = True
        self.index.append(IndexEntry(header.base_offset, header.record_count, position, len(view),
                                     header.max_timestamp_ms))
        self._remember(len(self.index) - 1, message, header)

    def _remember(self, i: int, message: pa.Buffer, header: BatchHeader) -> None:
        self._forget_from(i)  # whatever was kept at i or later is no longer in the file
        if message.size > RECENT_BYTES_MAX:
            return
        self._recent[i] = (message, header)
        self._recent_bytes += message.size
        while len(self._recent) > RECENT_MESSAGES_MAX or self._recent_bytes > RECENT_BYTES_MAX:
            oldest = next(iter(self._recent))
            self._recent_bytes -= self._recent.pop(oldest)[0].size

    def _forget_from(self, i: int) -> None:
        for stale in [k for k in self._recent if k >= i]:
            self._recent_bytes -= self._recent.pop(stale)[0].size

    def _undo_partial_write(self, position: int) -> None:
        try:
            os.ftruncate(self._fd, position)
        except OSError:
            log.exception("could not cut %s back to %d after a failed append", self.path, position)

    def truncate_batches(self, keep_batches: int) -> None:
        """Keep the first ``keep_batches`` batches (copy-and-rename: see the module docstring)."""
        if keep_batches >= self.batch_count:
            return
        new_size = self.index.entry(keep_batches).position
        self._forget_from(keep_batches)
        self.close()
        tmp = self.path.with_name(self.path.name + ".truncating")
        _copy_prefix(self.path, tmp, new_size)
        os.replace(tmp, self.path)
        fsync_directory(self.directory)
        self.index.truncate(keep_batches)
        self.index.flush()
        self.size_bytes = new_size

    def flush(self) -> None:
        if self._dirty and self._fd is not None:
            os.fsync(self._fd)
        self._dirty = False
        self.index.flush()

    def close(self) -> None:
        """Drop the descriptors; mapped batches already handed out stay valid."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self.index.close()
        self._mapped = self._reader = None
        self._mapped_bytes = 0

    def delete(self) -> None:
        self._forget_from(0)
        self.close()
        for path in (self.path, self.index.index_path, self.index.timeindex_path):
            try:
                path.unlink()
            except FileNotFoundError:
                pass

    # ---- reads -----------------------------------------------------------------------------

    def read_batch(self, i: int) -> tuple[pa.RecordBatch, BatchHeader]:
        """The i-th stored batch, its buffers pointing into the memory-mapped file (or the recent message)."""
        recent = self._recent_message(i)
        if recent is not None:
            return ipc.read_record_batch(ipc.read_message(recent[0]), self.schema), recent[1]
        entry = self.index.entry(i)
        reader, mapped = self._reader_covering(entry.end_position)
        mapped.seek(entry.position)
        batch, metadata = reader.read_next_batch_with_custom_metadata()
        header = BatchHeader.from_metadata(metadata)
        if header.base_offset != entry.base_offset or header.record_count != entry.record_count:
            raise StorageError(f"{self.path}: index says batch {entry.base_offset} at byte {entry.position}, "
                               f"file has {header.base_offset}; the segment changed under the log")
        return batch, header

    def read_message(self, i: int) -> tuple[pa.Buffer, BatchHeader]:
        """The i-th stored batch as the IPC message bytes on disk (mapped, not copied), with its header."""
        recent = self._recent_message(i)
        if recent is not None:
            return recent
        _, header = self.read_batch(i)  # no copy: checks the index against the file and maps it far enough
        entry = self.index.entry(i)
        self._mapped.seek(entry.position)
        return self._mapped.read_buffer(entry.size), header

    def _recent_message(self, i: int) -> tuple[pa.Buffer, BatchHeader] | None:
        recent = self._recent.get(i)
        if recent is None:
            return None
        entry = self.index.entry(i)
        if (entry.base_offset, entry.size) != (recent[1].base_offset, recent[0].size):
            raise StorageError(f"{self.path}: the message kept for batch {i} is not the one the index "
                               f"holds ({recent[1].base_offset} vs {entry.base_offset}); the segment changed")
        return recent

    def _reader_covering(self, end_position: int):
        # A mapping covers the file as it was when mapped; appends need a fresh one.
        if self._reader is None or self._mapped_bytes < end_position:
            self._mapped = pa.memory_map(str(self.path))
            self._reader = ipc.open_stream(self._mapped)
            self._mapped_bytes = self._mapped.size()
        return self._reader, self._mapped


def remove_stray_files(directory: Path) -> None:
    """Temporary files of an interrupted truncation or checkpoint write are garbage."""
    for path in directory.iterdir():
        if path.name.endswith((".truncating", ".tmp")):
            path.unlink()
        elif path.is_dir() and path.name.endswith(".deleting"):
            shutil.rmtree(path, ignore_errors=True)
