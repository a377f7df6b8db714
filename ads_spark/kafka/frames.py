"""Kafka framing without I/O: the size prefix, the request header, the outcome of one frame, responses.

A Kafka request is ``int32 size`` then ``size`` bytes: a request header (v1: api key, version,
correlation id, client id; v2, used by flexible versions: the same plus tagged fields) and the body.
server.py reads the 4 bytes, asks ``frame_size`` whether to read on (a size <= 0 or over
``socket.request.max.bytes`` closes the connection before a byte is allocated), reads the frame and
asks ``decode_request`` what it is: a ``Request`` to dispatch, a ``Reply`` to send without a handler
(an ApiVersions version this broker does not serve is answered in v0 with UNSUPPORTED_VERSION and the
table, as Kafka does, so that a client that tries v4 first learns which to use), or ``Close`` with the
reason to log (an unknown API key or version, a header or body kio cannot decode). Bytes after a
decoded body are left unread, as Kafka leaves them.
``encode_response_parts`` frames a handler's answer: size, response header (v0, or v1 for flexible
versions; ApiVersions' is v0 at every version: kio's ``__header_schema__`` of the response says which) and
body, as a list of buffers to send in order (``encode_response``: the same joined). A handler's ``entities.Chunks``
(a fetch answer's encoded record batches) enter that list by reference, never copied: megabytes per answer.
Kept apart from the sockets so that every outcome is unit-tested with bytes.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass
from typing import Any, Mapping

from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError

from ads_spark.kafka import entities, wire_bounds
from ads_spark.kafka.api import ApiHandler, RequestHeader

log = logging.getLogger("ads.kafka.frames")

SIZE_PREFIX_BYTES = 4
API_VERSIONS_KEY = 18
UNSUPPORTED_VERSION = 35
_SIZE = struct.Struct(">i")
_HEADER_PREFIX = struct.Struct(">hhi")  # api key, api version, correlation id
_STRING_LENGTH = struct.Struct(">h")
CLIENT_ID_CHARS_SHOWN = 64


class FrameSizeError(Exception):
    """A size prefix this broker will not read: the connection closes (nothing was allocated)."""


@dataclass(frozen=True, slots=True)
class Request:
    """A decoded request to dispatch to ``entry``'s handler."""

    header: RequestHeader
    entry: ApiHandler
    request: Any  # the kio request entity


@dataclass(frozen=True, slots=True)
class Reply:
    """A complete response frame to send without calling a handler; the connection stays open."""

    header: RequestHeader
    frame: bytes


@dataclass(frozen=True, slots=True)
class Close:
    """Log ``reason`` and close the connection (Kafka's clients reconnect). ``header`` when one was read."""

    reason: str
    header: RequestHeader | None = None


def frame_size(prefix: bytes, max_bytes: int) -> int:
    """The size a 4-byte prefix announces, if this broker reads frames that large; ``FrameSizeError`` else."""
    if len(prefix) != SIZE_PREFIX_BYTES:
        raise FrameSizeError(f"a size prefix is {SIZE_PREFIX_BYTES} bytes, got {len(prefix)}")
    (size,) = _SIZE.unpack(prefix)
    if size <= 0:
        raise FrameSizeError(f"frame size {size} is not positive")
    if size > max_bytes:
        raise FrameSizeError(f"frame size {size} is over socket.request.max.bytes ({max_bytes})")
    return size


def _client_id(body: memoryview, offset: int) -> str | None:
    """The header's client id (nullable int16-length string), None when absent or unreadable: it is only
    shown in logs here, the decoded header below is what dispatch uses."""
    if len(body) < offset + 2:
        return None
    (length,) = _STRING_LENGTH.unpack_from(body, offset)
    if length < 0 or len(body) < offset + 2 + length:
        return None
    return bytes(body[offset + 2:offset + 2 + min(length, CLIENT_ID_CHARS_SHOWN)]).decode("utf-8", "replace")


def peek_header(body) -> RequestHeader | None:
    """The fixed part of any request header (every version starts alike), None when too short."""
    view = memoryview(body)
    if len(view) < _HEADER_PREFIX.size:
        return None
    api_key, api_version, correlation_id = _HEADER_PREFIX.unpack_from(view, 0)
    return RequestHeader(api_key, api_version, correlation_id, _client_id(view, _HEADER_PREFIX.size))


def decode_request(body, table: Mapping[int, ApiHandler]) -> Request | Reply | Close:
    """What one frame (without its size prefix) is, given the served ``table`` (``api.registry()``)."""
    view = memoryview(body).toreadonly()  # kio's native readers refuse a writable buffer
    peeked = peek_header(view)
    if peeked is None:
        return Close(f"a request of {len(view)} bytes is shorter than a request header")
    entry = table.get(peeked.api_key)
    if entry is None:
        return Close(f"API key {peeked.api_key} is not served", peeked)
    if not entry.serves(peeked.api_version):
        if peeked.api_key == API_VERSIONS_KEY:
            return Reply(peeked, api_versions_fallback(peeked.correlation_id, table))
        return Close(f"{entry.name} v{peeked.api_version} is not served (versions {entry.min_version}-"
                     f"{entry.max_version})", peeked)
    try:
        request_cls = entities.request_class(peeked.api_key, peeked.api_version)
        # kio reserves an array's room from its length field: check every length first (wire_bounds.py)
        impossible = wire_bounds.impossible_request_length(request_cls, view)
        if impossible is not None:
            return Close(f"{entry.name} v{peeked.api_version} cannot be decoded: {impossible}", peeked)
        # kio's readers return (entity, bytes consumed from the offset given)
        client_id, offset = _read_header(view, request_cls.__header_schema__.__version__)
        request, body_bytes = entity_reader(request_cls)(view, offset)
        end = offset + body_bytes
    except (SerialError, ValueError, OverflowError, KeyError) as exc:  # kio's decode errors, bad UTF-8, bad enums,
        # an unknown tagged field (kio raises KeyError where Kafka would skip the tag)
        return Close(f"{entry.name} v{peeked.api_version} cannot be decoded: {type(exc).__name__}: "
                     f"{str(exc)[:200]}", peeked)
    if end != len(view):
        # Bytes after a decoded body are left unread, as Kafka's own broker leaves them: librdkafka 2.16's
        # all-topics Metadata v11 carries 3 (seen on the SASL_SSL test cluster), and refusing it closed
        # every confluent-kafka connection.
        log.debug("%s v%s: %s bytes after the body left unread", entry.name, peeked.api_version, len(view) - end)
    header = RequestHeader(peeked.api_key, peeked.api_version, peeked.correlation_id, client_id)
    return Request(header, entry, request)


def _read_header(view: memoryview, header_version: int) -> tuple[str | None, int]:
    """(client id, offset of the body) of a request header v1 or v2. Read here, not by kio: a v2 header's
    tagged fields are skipped whatever their tags (Kafka's rule for tags a reader does not know; kio raises)."""
    offset = _HEADER_PREFIX.size
    if header_version < 1:
        return None, offset
    if len(view) < offset + 2:
        raise ValueError("the header ends before its client id")
    (length,) = _STRING_LENGTH.unpack_from(view, offset)
    offset += 2
    client_id = None
    if length >= 0:
        if len(view) < offset + length:
            raise ValueError("the header ends inside its client id")
        client_id = bytes(view[offset:offset + length]).decode("utf-8")
        offset += length
    if header_version >= 2:
        count, offset = _uvarint(view, offset)
        for _ in range(count):
            _tag, offset = _uvarint(view, offset)
            size, offset = _uvarint(view, offset)
            offset += size
            if offset > len(view):
                raise ValueError("the header ends inside a tagged field")
    return client_id, offset


def _uvarint(view: memoryview, offset: int) -> tuple[int, int]:
    """An unsigned varint (at most 5 bytes: Kafka's are int32-sized) and the offset after it."""
    value = 0
    for shift in range(0, 35, 7):
        if offset >= len(view):
            raise ValueError("the header ends inside a varint")
        byte = view[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, offset
    raise ValueError("a varint longer than 5 bytes")


def api_versions_fallback(correlation_id: int, table: Mapping[int, ApiHandler]) -> bytes:
    """ApiVersions v0 with UNSUPPORTED_VERSION and the table: Kafka's answer to a version it does not serve."""
    keys = [{"api_key": e.api_key, "min_version": e.min_version, "max_version": e.max_version}
            for e in sorted(table.values(), key=lambda e: e.api_key)]
    return encode_response(correlation_id, API_VERSIONS_KEY, 0,
                           {"error_code": UNSUPPORTED_VERSION, "api_keys": keys})


def encode_response_parts(correlation_id: int, api_key: int, version: int, value: Mapping[str, Any]) -> list:
    """The response frame of a handler's plain answer (``entities.build`` makes the entity) as buffers to
    send in order: the first holds the size prefix (patched in last) and the header."""
    response_cls = entities.response_class(api_key, version)
    entity = entities.build(response_cls, dict(value))
    parts = entities.Parts()
    parts.write(_header(0, correlation_id, response_cls.__header_schema__.__version__))
    entity_writer(response_cls)(parts, entity)
    buffers = parts.finish()
    total = sum(memoryview(buffer).nbytes for buffer in buffers)
    _SIZE.pack_into(buffers[0], 0, total - SIZE_PREFIX_BYTES)
    return buffers


def encode_response(correlation_id: int, api_key: int, version: int, value: Mapping[str, Any]) -> bytes:
    """``encode_response_parts`` joined into one frame."""
    parts = encode_response_parts(correlation_id, api_key, version, value)
    return bytes(parts[0]) if len(parts) == 1 else b"".join(parts)


def frame(correlation_id: int, header_version: int, body: bytes) -> bytes:
    """Size prefix + response header (v0: the correlation id; v1: and an empty tagged-field section) + body."""
    return _header(len(body), correlation_id, header_version) + body


def _header(body_bytes: int, correlation_id: int, header_version: int) -> bytes:
    header = struct.pack(">i", correlation_id) + (b"\x00" if header_version >= 1 else b"")
    return _SIZE.pack(len(header) + body_bytes) + header
