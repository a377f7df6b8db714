"""The records of ``__consumer_offsets``: their bytes, and the state a new coordinator loads from them.

The byte format is Kafka's own (GroupMetadataManager's schemas, the
non-flexible versions), so a Kafka tool reading the topic understands it and
the Kafka protocol issue (#25) serves the same groups:

* key: int16 version first, then big-endian fields. Versions 0/1: an offset
  commit ``(group, topic, partition)``; version 2: a group's metadata
  ``(group)``. Other versions are another coordinator's records and are skipped
  by ``replay`` (Kafka's loader does the same).
* offset commit value: v3 ``offset, leader_epoch, metadata, commit_timestamp``;
  v1 (``..., expire_timestamp``, no leader epoch) only when an explicit expiry is
  set, as Kafka. Read: v0-v3.
* group metadata value: v3 ``protocol_type, generation, protocol, leader,
  current_state_timestamp, members[member_id, group_instance_id, client_id,
  client_host, rebalance_timeout, session_timeout, subscription, assignment]``.
  Read: v0-v3.
* a tombstone (value None) deletes its key.

Encoding is canonical (same input, same bytes): compaction keys on the key bytes.
Strings are int16-length UTF-8 (-1: null), bytes int32-length, arrays int32-count.
Malformed bytes raise ``CorruptMessageError`` naming what is wrong.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterable, NamedTuple

from ads_spark.errors import CorruptMessageError, InvalidRequestError
from ads_spark.replication.group_offsets import OffsetAndMetadata, Offsets
from ads_spark.replication.group_values import (
    UNKNOWN_TIMESTAMP,
    Group,
    GroupState,
    Member,
    check_invariants,
)

OFFSETS_TOPIC = "__consumer_offsets"
OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
OFFSET_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_VALUE_VERSION = 3
INT16_MAX = 32767
Record = tuple[bytes, "bytes | None"]


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class StoredMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes  # the member's metadata for the group's protocol
    assignment: bytes


@dataclass(frozen=True, slots=True)
class StoredGroup:
    """What a group metadata record says (and all a new coordinator knows of the members)."""

    group_id: str
    protocol_type: str | None
    generation_id: int
    protocol_name: str | None
    leader_id: str | None
    state_timestamp_ms: int
    members: tuple[StoredMember, ...]


class LoadedGroup(NamedTuple):
    group: Group
    offsets: Offsets


# ------------------------------------------------------------------ writing


class _Writer:
    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def int16(self, v: int) -> "_Writer":
        self.parts.append(struct.pack(">h", v))
        return self

    def int32(self, v: int) -> "_Writer":
        self.parts.append(struct.pack(">i", v))
        return self

    def int64(self, v: int) -> "_Writer":
        self.parts.append(struct.pack(">q", v))
        return self

    def string(self, v: str | None, what: str) -> "_Writer":
        if v is None:
            return self.int16(-1)
        data = v.encode("utf-8")
        if len(data) > INT16_MAX:
            raise InvalidRequestError(f"{what} is {len(data)} bytes in UTF-8, more than a record holds ({INT16_MAX})")
        self.int16(len(data))
        self.parts.append(data)
        return self

    def bytes_(self, v: bytes) -> "_Writer":
        self.int32(len(v))
        self.parts.append(bytes(v))
        return self

    def done(self) -> bytes:
        return b"".join(self.parts)


def offset_key(group_id: str, topic: str, partition: int) -> bytes:
    return (_Writer().int16(OFFSET_KEY_VERSION).string(group_id, "group id").string(topic, "topic")
            .int32(partition).done())


def group_key(group_id: str) -> bytes:
    return _Writer().int16(GROUP_KEY_VERSION).string(group_id, "group id").done()


def offset_commit_record(group_id: str, topic: str, partition: int, om: OffsetAndMetadata) -> Record:
    w = _Writer()
    if om.expire_timestamp_ms is None:
        w.int16(OFFSET_VALUE_VERSION).int64(om.offset).int32(om.leader_epoch).string(om.metadata, "offset metadata")
        w.int64(om.commit_timestamp_ms)
    else:
        w.int16(OFFSET_VALUE_VERSION_WITH_EXPIRY).int64(om.offset).string(om.metadata, "offset metadata")
        w.int64(om.commit_timestamp_ms).int64(om.expire_timestamp_ms)
    return offset_key(group_id, topic, partition), w.done()


def offset_tombstone(group_id: str, topic: str, partition: int) -> Record:
    return offset_key(group_id, topic, partition), None


def group_tombstone(group_id: str) -> Record:
    return group_key(group_id), None


def stored_group(group: Group) -> StoredGroup:
    """The record's view of a group: only a STABLE group's members (with assignments) are stored."""
    members: tuple[StoredMember, ...] = ()
    if group.state is GroupState.STABLE:
        members = tuple(StoredMember(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                     m.rebalance_timeout_ms, m.session_timeout_ms,
                                     m.metadata_for(group.protocol_name), m.assignment)
                        for m in group.members.values())
    elif group.state is not GroupState.EMPTY:
        raise InvalidRequestError(f"group {group.group_id}: a {group.state.value} group is not stored "
                                  "(only STABLE and EMPTY ones are)")
    return StoredGroup(group.group_id, group.protocol_type, group.generation_id,
                       group.protocol_name if members else None, group.leader_id if members else None,
                       group.state_timestamp_ms, members)


def group_metadata_record(group: Group) -> Record:
    """The record of a PersistGroup effect's group (STABLE or EMPTY)."""
    s = stored_group(group)
    w = _Writer().int16(GROUP_VALUE_VERSION).string(s.protocol_type or "", "protocol type")
    w.int32(s.generation_id).string(s.protocol_name, "protocol name").string(s.leader_id, "leader id")
    w.int64(s.state_timestamp_ms).int32(len(s.members))
    for m in s.members:
        w.string(m.member_id, "member id").string(m.group_instance_id, "group instance id")
        w.string(m.client_id, "client id").string(m.client_host, "client host")
        w.int32(m.rebalance_timeout_ms).int32(m.session_timeout_ms).bytes_(m.subscription).bytes_(m.assignment)
    return group_key(group.group_id), w.done()


# ------------------------------------------------------------------ reading


class _Reader:
    def __init__(self, data: bytes, what: str) -> None:
        self.data, self.pos, self.what = bytes(data), 0, what

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptMessageError(f"{self.what}: truncated at byte {self.pos} (needs {n} more of {len(self.data)})")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def int16(self) -> int:
        return struct.unpack(">h", self._take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self._take(4))[0]

    def int64(self) -> int:
        return struct.unpack(">q", self._take(8))[0]

    def nullable_string(self) -> str | None:
        n = self.int16()
        if n == -1:
            return None
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptMessageError(f"{self.what}: a string at byte {self.pos - n} is not UTF-8") from None

    def string(self) -> str:
        v = self.nullable_string()
        if v is None:
            raise CorruptMessageError(f"{self.what}: a null string where one is required (byte {self.pos - 2})")
        return v

    def bytes_(self) -> bytes:
        n = self.int32()
        return b"" if n == -1 else self._take(n)

    def end(self) -> None:
        if self.pos != len(self.data):
            raise CorruptMessageError(f"{self.what}: {len(self.data) - self.pos} bytes left over")


def decode_key(key: bytes) -> OffsetKey | GroupKey | None:
    """The key's meaning; None for a version this coordinator does not know (skipped)."""
    r = _Reader(key, "__consumer_offsets key")
    version = r.int16()
    if version in (0, 1):
        out: OffsetKey | GroupKey = OffsetKey(r.string(), r.string(), r.int32())
    elif version == 2:
        out = GroupKey(r.string())
    else:
        return None
    r.end()
    return out


def decode_offset_value(value: bytes) -> OffsetAndMetadata:
    r = _Reader(value, "offset commit value")
    version = r.int16()
    if version not in (0, 1, 2, 3):
        raise CorruptMessageError(f"offset commit value: unknown version {version}")
    offset = r.int64()
    leader_epoch = r.int32() if version == 3 else -1
    metadata = r.string()
    commit_ms = r.int64()
    expire_ms = r.int64() if version == 1 else None
    r.end()
    return OffsetAndMetadata(offset, leader_epoch, metadata, commit_ms, expire_ms)


def decode_group_value(group_id: str, value: bytes) -> StoredGroup:
    r = _Reader(value, f"group metadata value of {group_id!r}")
    version = r.int16()
    if version not in (0, 1, 2, 3):
        raise CorruptMessageError(f"group metadata value of {group_id!r}: unknown version {version}")
    protocol_type = r.string() or None
    generation = r.int32()
    protocol_name, leader_id = r.nullable_string(), r.nullable_string()
    state_ms = r.int64() if version >= 2 else UNKNOWN_TIMESTAMP
    count = r.int32()
    if count < 0 or count > len(value):
        raise CorruptMessageError(f"group metadata value of {group_id!r}: {count} members")
    members = []
    for _ in range(count):
        member_id = r.string()
        instance_id = r.nullable_string() if version >= 3 else None
        client_id, client_host = r.string(), r.string()
        rebalance_ms = r.int32() if version >= 1 else -1
        session_ms = r.int32()
        if rebalance_ms == -1:
            rebalance_ms = session_ms  # v0 had no rebalance timeout; Kafka used the session timeout
        members.append(StoredMember(member_id, instance_id, client_id, client_host, rebalance_ms, session_ms,
                                    r.bytes_(), r.bytes_()))
    r.end()
    return StoredGroup(group_id, protocol_type, generation, protocol_name, leader_id, state_ms, tuple(members))


def load(stored: StoredGroup, now_ms: int) -> Group:
    """The group a new coordinator starts from: STABLE with the stored members, or EMPTY."""
    where = f"group metadata value of {stored.group_id!r}"
    if not stored.members:
        return Group(group_id=stored.group_id, generation_id=stored.generation_id,
                     protocol_type=stored.protocol_type, state_timestamp_ms=stored.state_timestamp_ms)
    if stored.protocol_type is None or stored.protocol_name is None:
        raise CorruptMessageError(f"{where}: members without a protocol type and name")
    members = {}
    for m in stored.members:
        members[m.member_id] = Member(
            member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
            client_host=m.client_host, session_timeout_ms=m.session_timeout_ms,
            rebalance_timeout_ms=m.rebalance_timeout_ms, protocol_type=stored.protocol_type,
            protocols=((stored.protocol_name, m.subscription),), assignment=m.assignment,
            assignment_generation=stored.generation_id, last_heartbeat_ms=now_ms)
    static = {m.group_instance_id: m.member_id for m in stored.members if m.group_instance_id is not None}
    static_count = sum(m.group_instance_id is not None for m in stored.members)
    if len(members) != len(stored.members) or len(static) != static_count:
        raise CorruptMessageError(f"{where}: a member id or instance id appears twice")
    if stored.leader_id not in members:
        raise CorruptMessageError(f"{where}: leader {stored.leader_id!r} is not a member")
    group = Group(group_id=stored.group_id, state=GroupState.STABLE, generation_id=stored.generation_id,
                  protocol_type=stored.protocol_type, protocol_name=stored.protocol_name,
                  leader_id=stored.leader_id, members=members, static_members=static,
                  state_timestamp_ms=stored.state_timestamp_ms)
    check_invariants(group)
    return group


def replay(records: Iterable[Record], *, now_ms: int) -> dict[str, LoadedGroup]:
    """The groups of one ``__consumer_offsets`` partition: its records in log order, latest per key wins."""
    groups: dict[str, StoredGroup | None] = {}
    offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
    for index, (key, value) in enumerate(records):
        try:
            decoded = decode_key(key)
            if isinstance(decoded, OffsetKey):
                per_group = offsets.setdefault(decoded.group_id, {})
                tp = (decoded.topic, decoded.partition)
                if value is None:
                    per_group.pop(tp, None)
                else:
                    per_group[tp] = decode_offset_value(value)
            elif isinstance(decoded, GroupKey):
                groups[decoded.group_id] = None if value is None else decode_group_value(decoded.group_id, value)
        except CorruptMessageError as e:
            raise CorruptMessageError(f"record {index} of {OFFSETS_TOPIC}: {e}") from None
    out: dict[str, LoadedGroup] = {}
    for group_id in sorted(set(groups) | set(offsets)):
        stored, committed = groups.get(group_id), offsets.get(group_id, {})
        if stored is None and not committed:
            continue
        group = load(stored, now_ms) if stored is not None else Group(group_id=group_id)
        out[group_id] = LoadedGroup(group, committed)
    return out


def java_string_hash(text: str) -> int:
    """Java's String.hashCode: over UTF-16 code units, wrapping at 32 bits (signed)."""
    data = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition whose leader coordinates ``group_id`` (Kafka's partitionFor)."""
    if partitions < 1:
        raise InvalidRequestError(f"offsets topic partitions must be at least 1, not {partitions}")
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions
