"""Committed offsets of a group: commit checks, fetch, retention expiry (KIP-211), deletes.

Kafka's rules (GroupCoordinator / GroupMetadata), pure: a commit is first
*checked* here (``check_commit``: which partitions may be written), the shell
appends one ``__consumer_offsets`` record per partition with acks=all
(``group_records``), and only once that append succeeded is the commit applied
(``apply_commit``), so a fetch never returns an offset that a new coordinator
would not load. Expiry and deletes likewise return what to tombstone; the shell
writes the tombstones, then applies them (``apply_delete``).

Subscriptions are opaque bytes here: the shell passes ``subscribed_topics``, its
decoder of one member's metadata for protocol type "consumer" (the client's
ConsumerProtocol); None from it means "cannot tell", read as "subscribed to
every topic" (Kafka does the same when a subscription does not parse).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from ads_spark.errors import ErrorCode, InvalidRequestError
from ads_spark.replication.group_membership import new_group, validate_member
from ads_spark.replication.group_rebalance import evolve, set_member
from ads_spark.replication.group_values import (
    CONSUMER_PROTOCOL_TYPE,
    NO_GENERATION,
    Group,
    GroupState,
)

E = ErrorCode
TopicPartition = tuple[str, int]
SubscribedTopics = Callable[[bytes], "frozenset[str] | None"]
NO_OFFSET = -1
NO_LEADER_EPOCH = -1


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int = NO_LEADER_EPOCH  # the epoch of the record at offset - 1, -1 unknown
    metadata: str = ""
    commit_timestamp_ms: int = 0
    expire_timestamp_ms: int | None = None  # only from Kafka's old explicit retention; None: the group's rule


Offsets = Mapping[TopicPartition, OffsetAndMetadata]


@dataclass(frozen=True, slots=True)
class CommitPartition:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str = ""


@dataclass(frozen=True, slots=True)
class CommitRequest:
    group_id: str
    generation_id: int  # -1 with member_id "": a standalone commit
    member_id: str
    group_instance_id: str | None
    partitions: tuple[CommitPartition, ...]


@dataclass(frozen=True, slots=True)
class CommitDecision:
    error: ErrorCode  # for the whole request: then every partition carries it and nothing is written
    partition_errors: Mapping[TopicPartition, ErrorCode] = field(default_factory=dict)  # every partition asked
    to_write: Mapping[TopicPartition, OffsetAndMetadata] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ExpireDecision:
    expired: tuple[TopicPartition, ...] = ()
    group_dead: bool = False  # EMPTY with no offsets left: tombstone the group record too and drop it


@dataclass(frozen=True, slots=True)
class DeleteOffsetsDecision:
    error: ErrorCode
    partition_errors: Mapping[TopicPartition, ErrorCode] = field(default_factory=dict)
    to_delete: tuple[TopicPartition, ...] = ()
    group_dead: bool = False


@dataclass(frozen=True, slots=True)
class DeleteGroupDecision:
    error: ErrorCode
    tombstones: tuple[TopicPartition, ...] = ()  # every committed partition; plus the group record


# --------------------------------------------------------------------- commit


def check_commit(group: Group | None, req: CommitRequest, *, metadata_max_bytes: int,
                 now_ms: int) -> tuple[Group | None, CommitDecision]:
    """Which partitions of an OffsetCommit to write; a member's commit also counts as its heartbeat."""
    _check_commit_request(req)
    keys = [(p.topic, p.partition) for p in req.partitions]

    original = group

    def refuse(error: ErrorCode):
        return original, CommitDecision(error, {tp: error for tp in keys})

    standalone = req.generation_id < 0 and not req.member_id and req.group_instance_id is None
    if group is None:
        if req.generation_id >= 0:
            return refuse(E.ILLEGAL_GENERATION)  # Kafka: a generation of a group it does not have
        group = new_group(req.group_id, now_ms)  # Kafka creates it; kept only if the commit is accepted
    if standalone:
        if group.state is not GroupState.EMPTY:
            return refuse(E.UNKNOWN_MEMBER_ID)  # only members commit while the group has any
    else:
        error = validate_member(group, req.member_id, req.group_instance_id)
        if error is E.NONE and req.generation_id != group.generation_id:
            error = E.ILLEGAL_GENERATION
        if error is E.NONE and group.state is GroupState.COMPLETING_REBALANCE:
            error = E.REBALANCE_IN_PROGRESS  # the member has its generation but not its assignment yet
        if error is not E.NONE:
            return refuse(error)
        group = set_member(group, evolve(group.members[req.member_id], last_heartbeat_ms=now_ms))
    errors: dict[TopicPartition, ErrorCode] = {}
    to_write: dict[TopicPartition, OffsetAndMetadata] = {}
    for tp, part in zip(keys, req.partitions):
        if len(part.metadata.encode("utf-8")) > metadata_max_bytes:
            errors[tp] = E.OFFSET_METADATA_TOO_LARGE
            continue
        errors[tp] = E.NONE
        to_write[tp] = OffsetAndMetadata(part.offset, part.leader_epoch, part.metadata, now_ms)
    return group, CommitDecision(E.NONE, errors, to_write)


def _check_commit_request(req: CommitRequest) -> None:
    seen: set[TopicPartition] = set()
    for part in req.partitions:
        tp = (part.topic, part.partition)
        if tp in seen:
            raise InvalidRequestError(f"offset_commit: partition {part.topic}-{part.partition} is named twice")
        seen.add(tp)
        if not isinstance(part.offset, int) or part.offset < NO_OFFSET:
            raise InvalidRequestError(f"offset_commit: offset of {part.topic}-{part.partition} must be >= -1, "
                                      f"not {part.offset!r}")
        if not isinstance(part.metadata, str):
            raise InvalidRequestError(f"offset_commit: metadata of {part.topic}-{part.partition} must be a string")
    if req.generation_id < NO_GENERATION:
        raise InvalidRequestError(f"offset_commit: generation_id must be >= -1, not {req.generation_id}")


def apply_commit(offsets: Offsets, to_write: Mapping[TopicPartition, OffsetAndMetadata]) -> Offsets:
    """The offsets after the commit's records were appended (acks=all)."""
    return {**offsets, **to_write}


def fetch_offsets(offsets: Offsets, partitions: Iterable[TopicPartition] | None
                  ) -> list[tuple[TopicPartition, OffsetAndMetadata | None]]:
    """OffsetFetch: the asked partitions (None for one without a commit), or every committed one."""
    if partitions is None:
        return sorted(offsets.items())
    return [(tp, offsets.get(tp)) for tp in partitions]


def apply_delete(offsets: Offsets, partitions: Iterable[TopicPartition]) -> Offsets:
    gone = set(partitions)
    return {tp: om for tp, om in offsets.items() if tp not in gone}


# -------------------------------------------------------------------- expiry


def subscribed_topics_of(group: Group, subscribed_topics: SubscribedTopics) -> frozenset[str] | None:
    """The topics some member of a consumer group subscribes to; None: unknown (or not a consumer group)."""
    if group.protocol_type != CONSUMER_PROTOCOL_TYPE or group.protocol_name is None:
        return None
    topics: set[str] = set()
    for member in group.members.values():
        if not member.supports(group.protocol_name):
            return None  # joined during a rebalance with other protocols: Kafka knows topics per generation
        decoded = subscribed_topics(member.metadata_for(group.protocol_name))
        if decoded is None:
            return None
        topics |= decoded
    return frozenset(topics)


def expire_offsets(group: Group, offsets: Offsets, *, now_ms: int, retention_ms: int,
                   subscribed_topics: SubscribedTopics) -> ExpireDecision:
    """KIP-211: what ``offsets.retention.minutes`` removes now.

    * EMPTY group that had members: every offset, ``retention_ms`` after the group
      became empty (after the commit if that time is unknown);
    * group that never had members (standalone commits): each offset ``retention_ms``
      after its commit;
    * STABLE consumer group: offsets of topics no member subscribes to any more,
      ``retention_ms`` after their commit;
    * otherwise (a rebalance under way, or not a consumer group): nothing.
    An offset with an explicit expire timestamp expires at it instead.
    """

    def expired_by(base_ms, keep_topics: frozenset[str] = frozenset()) -> tuple[TopicPartition, ...]:
        out = []
        for tp, om in sorted(offsets.items()):
            if tp[0] in keep_topics:
                continue
            due = om.expire_timestamp_ms if om.expire_timestamp_ms is not None else base_ms(om) + retention_ms
            if now_ms >= due:
                out.append(tp)
        return tuple(out)

    if group.protocol_type is None:
        expired = expired_by(lambda om: om.commit_timestamp_ms)
    elif group.state is GroupState.EMPTY:
        became_empty = group.state_timestamp_ms
        expired = expired_by(lambda om: became_empty if became_empty >= 0 else om.commit_timestamp_ms)
    elif group.state is GroupState.STABLE and group.protocol_type == CONSUMER_PROTOCOL_TYPE:
        topics = subscribed_topics_of(group, subscribed_topics)
        expired = () if topics is None else expired_by(lambda om: om.commit_timestamp_ms, topics)
    else:
        expired = ()
    return ExpireDecision(expired, _dead_after(group, offsets, expired))


def _dead_after(group: Group, offsets: Offsets, removed: Iterable[TopicPartition]) -> bool:
    """Kafka's cleanupGroupMetadata: an EMPTY group left without offsets (or waiting ids) is dead."""
    left = set(offsets) - set(removed)
    return group.state is GroupState.EMPTY and not left and not group.pending_members


# ------------------------------------------------------------------- deletes


def delete_offsets(group: Group | None, offsets: Offsets, partitions: Iterable[TopicPartition], *,
                   subscribed_topics: SubscribedTopics) -> DeleteOffsetsDecision:
    """OffsetDelete (KIP-496): refused per partition while a member subscribes to its topic."""
    asked = list(dict.fromkeys(partitions))
    if group is None:
        return DeleteOffsetsDecision(E.GROUP_ID_NOT_FOUND, {tp: E.GROUP_ID_NOT_FOUND for tp in asked})
    if group.state is GroupState.EMPTY:
        subscribed: frozenset[str] | None = frozenset()
    elif group.protocol_type == CONSUMER_PROTOCOL_TYPE:
        subscribed = subscribed_topics_of(group, subscribed_topics) if group.protocol_name else None
    else:
        return DeleteOffsetsDecision(E.NON_EMPTY_GROUP, {tp: E.NON_EMPTY_GROUP for tp in asked})
    errors: dict[TopicPartition, ErrorCode] = {}
    to_delete = []
    for tp in asked:
        if subscribed is None or tp[0] in subscribed:
            errors[tp] = E.GROUP_SUBSCRIBED_TO_TOPIC
        else:
            errors[tp] = E.NONE
            if tp in offsets:
                to_delete.append(tp)
    return DeleteOffsetsDecision(E.NONE, errors, tuple(to_delete), _dead_after(group, offsets, to_delete))


def delete_group(group: Group | None, offsets: Offsets) -> DeleteGroupDecision:
    """DeleteGroups: only an EMPTY group; tombstone its offsets and its record, then drop it."""
    if group is None:
        return DeleteGroupDecision(E.GROUP_ID_NOT_FOUND)
    if group.state is not GroupState.EMPTY:
        return DeleteGroupDecision(E.NON_EMPTY_GROUP)
    return DeleteGroupDecision(E.NONE, tuple(sorted(offsets)))
