"""Kafka's consumer protocol bytes: what a group member subscribes to and what its leader assigns it.

A group's coordinator never reads these bytes (the protocol is "consumer", the payload opaque); the members
do. Writing them in Kafka's own format (ConsumerProtocolSubscription v0-v3, ConsumerProtocolAssignment
v0-v3: big-endian, non-flexible) lets a Kafka client join the same group as an ADS consumer (issue #25).

Primitive types as Kafka's protocol defines them: INT16/INT32 big-endian; STRING = INT16 length then
UTF-8 (a nullable one: length -1 for null); BYTES = INT32 length then the bytes (nullable: -1);
ARRAY = INT32 count then the elements (-1: null, read as empty).

Subscription: version INT16, topics ARRAY[STRING], user_data nullable BYTES; v1+: owned partitions
ARRAY[{topic STRING, partitions ARRAY[INT32]}]; v2+: generation_id INT32; v3+: rack_id nullable STRING.
Assignment: version INT16, partitions ARRAY[{topic STRING, partitions ARRAY[INT32]}], user_data nullable
BYTES (the same layout in v0-v3).

Decoding refuses anything malformed (truncated, a negative length that is not a null, invalid UTF-8,
bytes left over, a negative version) with ``ConsumerProtocolFormatError`` naming what and where. A
version newer than the ones known is read as the newest known and the rest ignored: Kafka's rule, so
that a newer member's fields appended at the end do not break an older leader.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ads_spark.errors import InconsistentGroupProtocolError

SUBSCRIPTION_VERSION = 1  # the version this client writes (owned partitions, for cooperative rebalancing)
SUBSCRIPTION_VERSION_MAX = 3  # the newest version this module reads field by field
ASSIGNMENT_VERSION = 1
ASSIGNMENT_VERSION_MAX = 3
# Element counts above this are refused before anything is allocated: a count read from a damaged
# buffer must not make a list of two billion entries. Bounded further by the bytes actually present.
ELEMENTS_MAX = 1 << 20

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


class ConsumerProtocolFormatError(InconsistentGroupProtocolError):
    """Subscription or assignment bytes that are not Kafka's consumer protocol format."""


@dataclass(frozen=True)
class Subscription:
    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[tuple[str, int], ...] = ()  # v1+
    generation_id: int = -1  # v2+ (-1: not sent)
    rack_id: str | None = None  # v3+
    version: int = SUBSCRIPTION_VERSION


@dataclass(frozen=True)
class Assignment:
    partitions: tuple[tuple[str, int], ...] = ()
    user_data: bytes | None = None
    version: int = ASSIGNMENT_VERSION


# ---- writing ----------------------------------------------------------------------------


def _string(value: str) -> bytes:
    data = value.encode("utf-8")
    if len(data) > 0x7FFF:
        raise ConsumerProtocolFormatError(f"string of {len(data)} bytes is longer than a STRING can hold")
    return _INT16.pack(len(data)) + data


def _nullable_string(value: str | None) -> bytes:
    return _INT16.pack(-1) if value is None else _string(value)


def _nullable_bytes(value: bytes | None) -> bytes:
    return _INT32.pack(-1) if value is None else _INT32.pack(len(value)) + bytes(value)


def _topic_partitions(pairs) -> bytes:
    """ARRAY of {topic STRING, partitions ARRAY[INT32]}: topics in first-seen order, partitions as given."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in pairs:
        by_topic.setdefault(topic, []).append(int(partition))
    out = [_INT32.pack(len(by_topic))]
    for topic, partitions in by_topic.items():
        out.append(_string(topic))
        out.append(_INT32.pack(len(partitions)))
        out.extend(_INT32.pack(p) for p in partitions)
    return b"".join(out)


def encode_subscription(subscription: Subscription) -> bytes:
    version = subscription.version
    if not 0 <= version <= SUBSCRIPTION_VERSION_MAX:
        raise ConsumerProtocolFormatError(f"cannot write subscription version {version}")
    out = [_INT16.pack(version), _INT32.pack(len(subscription.topics))]
    out.extend(_string(t) for t in subscription.topics)
    out.append(_nullable_bytes(subscription.user_data))
    if version >= 1:
        out.append(_topic_partitions(subscription.owned_partitions))
    if version >= 2:
        out.append(_INT32.pack(subscription.generation_id))
    if version >= 3:
        out.append(_nullable_string(subscription.rack_id))
    return b"".join(out)


def encode_assignment(assignment: Assignment) -> bytes:
    version = assignment.version
    if not 0 <= version <= ASSIGNMENT_VERSION_MAX:
        raise ConsumerProtocolFormatError(f"cannot write assignment version {version}")
    return b"".join((_INT16.pack(version), _topic_partitions(assignment.partitions),
                     _nullable_bytes(assignment.user_data)))


# ---- reading ----------------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes, what: str):
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise ConsumerProtocolFormatError(f"{what}: expected bytes, got {type(data).__name__}")
        self.data, self.pos, self.what = bytes(data), 0, what

    def _take(self, size: int, field_name: str) -> bytes:
        if self.pos + size > len(self.data):
            raise ConsumerProtocolFormatError(
                f"{self.what}: {field_name} needs {size} bytes at byte {self.pos}, "
                f"only {len(self.data) - self.pos} left")
        chunk = self.data[self.pos:self.pos + size]
        self.pos += size
        return chunk

    def int16(self, field_name: str) -> int:
        return _INT16.unpack(self._take(2, field_name))[0]

    def int32(self, field_name: str) -> int:
        return _INT32.unpack(self._take(4, field_name))[0]

    def nullable_string(self, field_name: str) -> str | None:
        length = self.int16(field_name + " length")
        if length == -1:
            return None
        if length < 0:
            raise ConsumerProtocolFormatError(f"{self.what}: {field_name} has length {length}")
        raw = self._take(length, field_name)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ConsumerProtocolFormatError(f"{self.what}: {field_name} is not valid UTF-8") from None

    def string(self, field_name: str) -> str:
        value = self.nullable_string(field_name)
        if value is None:
            raise ConsumerProtocolFormatError(f"{self.what}: {field_name} is null")
        return value

    def nullable_bytes(self, field_name: str) -> bytes | None:
        length = self.int32(field_name + " length")
        if length == -1:
            return None
        if length < 0:
            raise ConsumerProtocolFormatError(f"{self.what}: {field_name} has length {length}")
        return self._take(length, field_name)

    def count(self, field_name: str, element_bytes_min: int) -> int:
        """An ARRAY's element count (null read as empty), checked against the bytes left."""
        count = self.int32(field_name + " count")
        if count == -1:
            return 0
        left = len(self.data) - self.pos
        if count < 0 or count > ELEMENTS_MAX or count * element_bytes_min > left:
            raise ConsumerProtocolFormatError(
                f"{self.what}: {field_name} count {count} does not fit the {left} bytes left")
        return count

    def topic_partitions(self, field_name: str) -> tuple[tuple[str, int], ...]:
        pairs = []
        for _ in range(self.count(field_name, 6)):  # a topic: >= 2 bytes of name length + 4 of count
            topic = self.string(field_name + " topic")
            for _ in range(self.count(field_name + " partitions", 4)):
                pairs.append((topic, self.int32(field_name + " partition")))
        return tuple(pairs)

    def version(self) -> int:
        version = self.int16("version")
        if version < 0:
            raise ConsumerProtocolFormatError(f"{self.what}: version {version}")
        return version

    def done(self, version: int, newest_known: int) -> None:
        """Bytes left after the last known field: malformed for a known version; a newer one's fields."""
        if version <= newest_known and self.pos != len(self.data):
            raise ConsumerProtocolFormatError(
                f"{self.what}: {len(self.data) - self.pos} bytes left after the last field of version {version}")


def decode_subscription(data: bytes) -> Subscription:
    reader = _Reader(data, "consumer protocol subscription")
    version = reader.version()
    fields_version = min(version, SUBSCRIPTION_VERSION_MAX)
    topics = tuple(reader.string("topic") for _ in range(reader.count("topics", 2)))
    user_data = reader.nullable_bytes("user_data")
    owned = reader.topic_partitions("owned_partitions") if fields_version >= 1 else ()
    generation_id = reader.int32("generation_id") if fields_version >= 2 else -1
    rack_id = reader.nullable_string("rack_id") if fields_version >= 3 else None
    reader.done(version, SUBSCRIPTION_VERSION_MAX)
    return Subscription(topics, user_data, owned, generation_id, rack_id, version)


def decode_assignment(data: bytes) -> Assignment:
    reader = _Reader(data, "consumer protocol assignment")
    version = reader.version()
    partitions = reader.topic_partitions("assigned_partitions")
    user_data = reader.nullable_bytes("user_data")
    reader.done(version, ASSIGNMENT_VERSION_MAX)
    return Assignment(partitions, user_data, version)
