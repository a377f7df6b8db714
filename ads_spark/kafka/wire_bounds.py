"""Length fields of a Kafka request checked against the bytes that follow them, before kio decodes it.

kio's native reader (0.6.5) reserves room for an array from the array's length field before it reads a
single element: a compact array whose length varint says 2^32 or more makes it ask for tens of GiB, the
allocation fails and Rust aborts the whole broker (``memory allocation of N bytes failed``); a 19-byte
frame did it (tests/unit/test_kafka_wire_bounds.py). A legacy array's int32 length reserves up to 16 GiB,
which aborts a machine with less memory. Every array element takes at least one byte on the wire, so a
count larger than the bytes left in the frame can never be valid: ``first_impossible_length`` walks the
message's schema (kio's own field metadata, the same rules its writer uses) reading only lengths and
skipping values, and names the first length that claims more than is there. Nothing is allocated
from a length it has not checked. String and bytes lengths are checked too (kio does check those, but the
walk must skip them anyway).

Cost: one pass over the message's fields in Python, values skipped (a Produce's records are one skip,
consecutive fixed-size fields one step); the per-class plan is built once. About what kio's decode costs:
3-4 us a Produce, 11 us a 30-partition Fetch (docs/perf/kafka-bad-input.md). kio's private introspection
(``kio.serial._introspect``) is what its own writer uses; kio is pinned, and the unit test checks the walk
ends where kio's reader ends on every request class kio has.
"""

from __future__ import annotations

import dataclasses
import functools
import struct
from typing import Any, Callable

from kio.serial._introspect import (
    EntityField, EntityTupleField, PrimitiveField, PrimitiveTupleField, classify_field, get_field_tag, is_optional,
)

_FIXED_BYTES = {
    "int8": 1, "uint8": 1, "bool": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "uint32": 4,
    "timedelta_i32": 4, "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8, "uuid": 16,
}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
MAX_DEPTH = 16  # Kafka's messages nest 4 deep; a schema deeper than this is not one of theirs


class ImpossibleLength(Exception):
    """A length field claims more than the frame holds (or the frame ends inside a field)."""


class _Cursor:
    __slots__ = ("view", "pos")

    def __init__(self, view: memoryview, pos: int):
        self.view = view
        self.pos = pos

    def take(self, count: int, what: str) -> None:
        if count < 0 or self.pos + count > len(self.view):
            raise ImpossibleLength(f"{what} needs {count} bytes at offset {self.pos}, "
                                   f"{len(self.view) - self.pos} left")
        self.pos += count

    def uvarint(self, what: str) -> int:
        value, shift = 0, 0
        for _ in range(5):
            if self.pos >= len(self.view):
                raise ImpossibleLength(f"{what}: the frame ends inside a varint")
            byte = self.view[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
        raise ImpossibleLength(f"{what}: a varint longer than 5 bytes")

    def int16(self, what: str) -> int:
        self.take(2, what)
        return _I16.unpack_from(self.view, self.pos - 2)[0]

    def int32(self, what: str) -> int:
        self.take(4, what)
        return _I32.unpack_from(self.view, self.pos - 4)[0]

    def left(self) -> int:
        return len(self.view) - self.pos


Skip = Callable[[_Cursor], None]


def _length_skipper(kafka_type: str, flexible: bool, name: str, header_client_id: bool) -> Skip:
    """How to skip one value of a primitive Kafka type (strings and bytes: their length checked)."""
    if kafka_type in _FIXED_BYTES:
        size = _FIXED_BYTES[kafka_type]
        return lambda cursor: cursor.take(size, name)
    if kafka_type not in ("string", "bytes", "records"):
        raise LookupError(f"no rule for Kafka type {kafka_type!r} ({name})")
    if flexible and not header_client_id:
        def skip_compact(cursor: _Cursor) -> None:
            length = cursor.uvarint(name) - 1  # 0 is null
            if length > 0:
                cursor.take(length, name)
        return skip_compact
    if kafka_type == "string":
        def skip_legacy_string(cursor: _Cursor) -> None:
            length = cursor.int16(name)
            if length > 0:
                cursor.take(length, name)
        return skip_legacy_string

    def skip_legacy_bytes(cursor: _Cursor) -> None:
        length = cursor.int32(name)
        if length > 0:
            cursor.take(length, name)
    return skip_legacy_bytes


def _array_skipper(item: Skip, flexible: bool, name: str) -> Skip:
    def skip_array(cursor: _Cursor) -> None:
        count = cursor.uvarint(name) - 1 if flexible else cursor.int32(name)  # -1: null
        if count > cursor.left():
            raise ImpossibleLength(f"array {name} claims {count} elements, {cursor.left()} bytes left")
        for _ in range(count):
            item(cursor)
    return skip_array


def _field_skipper(field: dataclasses.Field, flexible: bool, header: bool, depth: int) -> Skip:
    name = field.name
    kind = classify_field(field)
    if isinstance(kind, (PrimitiveField, PrimitiveTupleField)):
        item = _length_skipper(field.metadata["kafka_type"], flexible, name, header and name == "client_id")
    elif isinstance(kind, (EntityField, EntityTupleField)):
        item = _entity_skipper(kind.type_, depth + 1)
        if isinstance(kind, EntityField) and is_optional(field) and get_field_tag(field) is None:
            inner = item

            def item(cursor: _Cursor) -> None:  # KIP-893: an int8 marker, -1 null
                cursor.take(1, name)
                if cursor.view[cursor.pos - 1] != 0xFF:
                    inner(cursor)
    else:  # pragma: no cover - kio has no other field kinds
        raise LookupError(f"field {name}: unknown kind {kind!r}")
    return _array_skipper(item, flexible, name) if kind.is_array else item


@functools.lru_cache(maxsize=None)
def _entity_skipper(cls: type, depth: int = 0) -> Skip:
    if depth > MAX_DEPTH:
        raise LookupError(f"{cls.__name__}: nested deeper than {MAX_DEPTH}")
    flexible = bool(cls.__flexible__)
    header = cls.__name__ == "RequestHeader"
    plain: list[Skip] = []
    tagged: dict[int, Skip] = {}
    fixed_run = 0  # consecutive fixed-size fields are skipped as one (a Fetch partition: 6 fields, one step)
    for field in dataclasses.fields(cls):
        tag = get_field_tag(field)
        if tag is not None:
            tagged[int(tag)] = _field_skipper(field, flexible, header, depth)
        elif _fixed_bytes(field):
            fixed_run += _fixed_bytes(field)
        else:
            if fixed_run:
                plain.append(_fixed_skipper(fixed_run, cls.__name__))
                fixed_run = 0
            plain.append(_field_skipper(field, flexible, header, depth))
    if fixed_run:
        plain.append(_fixed_skipper(fixed_run, cls.__name__))
    name = cls.__name__

    def skip_entity(cursor: _Cursor) -> None:
        for skip in plain:
            skip(cursor)
        if flexible:
            if cursor.pos < len(cursor.view) and cursor.view[cursor.pos] == 0:  # no tagged fields: the usual case
                cursor.pos += 1
            else:
                _skip_tagged_fields(cursor, tagged, name)
    return skip_entity


def _fixed_bytes(field: dataclasses.Field) -> int:
    """The wire size of a fixed-size, non-array primitive field; 0 for any other."""
    if isinstance(classify_field(field), PrimitiveField):
        return _FIXED_BYTES.get(field.metadata.get("kafka_type"), 0)
    return 0


def _fixed_skipper(size: int, where: str) -> Skip:
    return lambda cursor: cursor.take(size, f"{where} fields")


def _skip_tagged_fields(cursor: _Cursor, known: dict[int, Skip], where: str) -> None:
    count = cursor.uvarint(f"{where} tagged fields")
    if count > cursor.left():
        raise ImpossibleLength(f"{where} claims {count} tagged fields, {cursor.left()} bytes left")
    for _ in range(count):
        tag = cursor.uvarint(f"{where} tag")
        size = cursor.uvarint(f"{where} tag {tag} size")
        start = cursor.pos
        cursor.take(size, f"{where} tag {tag}")
        if tag in known:  # a known tag's value is decoded by kio: its own lengths must fit inside it
            inner = _Cursor(cursor.view[:start + size], start)
            known[tag](inner)


def first_impossible_length(cls: Any, view, offset: int = 0) -> str | None:
    """None when every length in the ``cls`` message at ``offset`` fits the bytes after it; else what does not.
    (Bytes left over after the message are not this check's business: frames.py refuses those.)"""
    try:
        _entity_skipper(cls)(_Cursor(memoryview(view), offset))
    except ImpossibleLength as exc:
        return str(exc)
    return None


def impossible_request_length(request_cls: Any, view) -> str | None:
    """``first_impossible_length`` over a whole request frame (without its size prefix): its header (kio's
    ``__header_schema__`` of the request class) and then its body."""
    cursor = _Cursor(memoryview(view), 0)
    try:
        _entity_skipper(request_cls.__header_schema__)(cursor)
        _entity_skipper(request_cls)(cursor)
    except ImpossibleLength as exc:
        return str(exc)
    return None
