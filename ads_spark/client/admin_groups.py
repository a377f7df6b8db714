"""Consumer-group administration for ``Admin``: Kafka's AdminClient group calls over the group actions.

Owns finding a group's coordinator and talking to it: ``list_groups`` goes to every live broker (each
answers for the groups it coordinates) and the answers are merged; every other call goes to the group's
coordinator, found with ``find_coordinator`` and found again when the answer says it moved
(NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, or the broker is unreachable),
all within the admin's ``default.api.timeout.ms``. Offsets are committed standalone (generation -1, empty
member id), as Kafka's ``alterConsumerGroupOffsets``: the coordinator accepts that only while the group has
no members. Member assignments of ``protocol_type`` "consumer" are decoded with Kafka's ConsumerProtocol
(``consumer_protocol.py``); anything else is kept as bytes.

Kept apart from ``admin.py`` so that module stays about topics and ACLs; ``Admin`` delegates here.
"""

from __future__ import annotations

import base64
import logging
import time
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ads_spark.client.chunks import TopicPartition
from ads_spark.errors import AdsError, ErrorCode, RequestTimedOutError, error_for
from ads_spark.protocol import wire
from ads_spark.protocol.connection import Connections, backoff_sleep

log = logging.getLogger("ads.client.admin")


# The coordinator moved, is being elected or is still loading its partition of __consumer_offsets: ask
# find_coordinator again (Kafka's admin client does the same).
COORDINATOR_MOVED = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                               ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})
UNREACHABLE = frozenset({ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.BROKER_NOT_AVAILABLE})
STANDALONE_GENERATION_ID = -1  # with an empty member id: a commit from outside the group


@dataclass(frozen=True)
class OffsetAndMetadata:
    """A committed offset: the next offset the group reads, the leader epoch it was read in, free text."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    coordinator_id: int


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: tuple[TopicPartition, ...]  # decoded (protocol type "consumer"), else ()
    assignment_bytes: bytes = b""


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol_name: str
    coordinator_id: int
    members: tuple[MemberDescription, ...]

    @property
    def is_active(self) -> bool:
        """Members present: offsets may then be committed only by them (Kafka's rule for resets)."""
        return bool(self.members)


def _b64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def decode_assignment(protocol_type: str, data: bytes) -> tuple[TopicPartition, ...]:
    """The partitions a member's assignment bytes name (Kafka's ConsumerProtocolAssignment); () when the
    group is not a consumer group or the bytes are not that format (shown as unknown, never an error)."""
    if protocol_type != "consumer" or not data:
        return ()
    from ads_spark.client import consumer_protocol

    try:
        decoded = consumer_protocol.decode_assignment(data)
    except AdsError:  # a foreign client's bytes (ConsumerProtocolFormatError): describe must still answer
        log.debug("undecodable consumer assignment (%d bytes)", len(data), exc_info=True)
        return ()
    return tuple(sorted(TopicPartition(topic, partition) for topic, partition in decoded.partitions))


class GroupAdmin:
    def __init__(self, connections: Connections, api_timeout_ms: int):
        self._connections = connections
        self.api_timeout_ms = api_timeout_ms

    # ---- coordinator routing ------------------------------------------------------------------------

    def find_coordinator(self, group_id: str) -> tuple[int, str, int]:
        """(node id, host, port) of the group's coordinator (created on first use of __consumer_offsets)."""
        answer = self._connections.call_any(wire.ACTION_FIND_COORDINATOR, {"key": group_id, "key_type": "group"})
        _raise_for(answer, f"finding the coordinator of group '{group_id}'")
        return int(answer["node_id"]), str(answer["host"]), int(answer["port"])

    def call_coordinator(self, group_id: str, action: str, body: dict[str, Any],
                         item_codes=lambda answer: ()) -> tuple[int, dict[str, Any]]:
        """(coordinator id, answer) of ``action`` on the group's coordinator, asked again wherever it moved,
        bounded by default.api.timeout.ms. ``item_codes(answer)``: per-item error codes that also mean
        "ask the new coordinator". Other errors in the answer are left to the caller."""
        deadline, attempt = time.monotonic() + self.api_timeout_ms / 1000, 0
        while True:
            try:
                node_id, host, port = self.find_coordinator(group_id)
                answer = self._connections.call_action(host, port, action, body)
                codes = [int(answer.get("error_code", 0) or 0), *map(int, item_codes(answer))]
                moved = next((c for c in codes if c in COORDINATOR_MOVED), None)
                if moved is None:
                    return node_id, answer
                last: AdsError = error_for(moved, answer.get("message") or (
                    f"group '{group_id}': coordinator {node_id} answered {ErrorCode(moved).name}"))
            except AdsError as exc:
                if exc.code not in COORDINATOR_MOVED | UNREACHABLE:
                    raise
                last = exc
            if time.monotonic() >= deadline:
                raise RequestTimedOutError(f"group '{group_id}': no coordinator answered {action} within "
                                           f"{self.api_timeout_ms} ms (last error: {last})")
            self._connections.mark_stale()
            backoff_sleep(attempt, self._connections.retry_backoff_ms)
            attempt += 1

    # ---- Kafka's AdminClient group calls --------------------------------------------------------------

    def list_consumer_groups(self, states: Iterable[str] | None = None) -> list[GroupListing]:
        """Every group some live broker coordinates (each answers for its own); a broker that cannot be
        reached is skipped with a warning: a dead broker leads no partition of __consumer_offsets for long."""
        body: dict[str, Any] = {} if states is None else {"states": list(states)}
        found: dict[str, GroupListing] = {}
        for broker_id, address in sorted(self._connections.refresh().brokers.items()):
            try:
                answer = self._connections.call_action(address.host, address.port, wire.ACTION_LIST_GROUPS, body)
            except AdsError as exc:
                if exc.code not in UNREACHABLE:
                    raise
                log.warning("list_groups: broker %d did not answer (%s); its groups are not listed", broker_id, exc)
                continue
            _raise_for(answer, f"listing the groups of broker {broker_id}")
            for item in answer.get("groups", []):
                found.setdefault(item["group_id"], GroupListing(item["group_id"], item.get("protocol_type", ""),
                                                                item.get("state", ""), broker_id))
        return [found[g] for g in sorted(found)]

    def describe_consumer_groups(self, group_ids: Iterable[str]) -> dict[str, GroupDescription]:
        result = {}
        for group_id in group_ids:
            node_id, answer = self.call_coordinator(group_id, wire.ACTION_DESCRIBE_GROUPS, {"groups": [group_id]},
                                                    _group_codes)
            _raise_for(answer, f"describing group '{group_id}'")
            item = next((g for g in answer.get("groups", []) if g.get("group_id") == group_id), None)
            if item is None:
                raise error_for(ErrorCode.UNKNOWN_SERVER_ERROR, f"group '{group_id}': the coordinator's answer "
                                                                f"does not describe it")
            _raise_for(item, f"group '{group_id}'")
            protocol_type = item.get("protocol_type", "")
            members = tuple(MemberDescription(m["member_id"], m.get("group_instance_id") or None,
                                              m.get("client_id", ""), m.get("client_host", ""),
                                              decode_assignment(protocol_type, _b64(m.get("assignment_b64"))),
                                              _b64(m.get("assignment_b64")))
                            for m in item.get("members", []))
            result[group_id] = GroupDescription(group_id, item.get("state", ""), protocol_type,
                                                item.get("protocol_name", ""), node_id, members)
        return result

    def list_consumer_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition] | None = None
                                    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets (all it has, or those of ``partitions``; one without: left out)."""
        body: dict[str, Any] = {"group_id": group_id}
        if partitions is not None:
            body["partitions"] = [{"topic": tp.topic, "partition": tp.partition} for tp in partitions]
        _, answer = self.call_coordinator(group_id, wire.ACTION_OFFSET_FETCH, body)
        _raise_for(answer, f"fetching the offsets of group '{group_id}'")
        result = {}
        for item in answer.get("partitions", []):
            _raise_for(item, f"group '{group_id}', {item.get('topic')}-{item.get('partition')}")
            if int(item.get("offset", -1)) >= 0:
                result[TopicPartition(item["topic"], int(item["partition"]))] = OffsetAndMetadata(
                    int(item["offset"]), item.get("metadata") or "", int(item.get("leader_epoch", -1)))
        return result

    def alter_consumer_group_offsets(self, group_id: str,
                                     offsets: Mapping[TopicPartition, int | OffsetAndMetadata]) -> None:
        """Commit ``offsets`` for the group from outside it (generation -1, no member id): refused by the
        coordinator while the group has members. Raises the first partition's error, naming it."""
        entries = []
        for tp, value in sorted(offsets.items()):
            committed = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(int(value))
            entries.append({"topic": tp.topic, "partition": tp.partition, "offset": committed.offset,
                            "leader_epoch": committed.leader_epoch, "metadata": committed.metadata})
        body = {"group_id": group_id, "generation_id": STANDALONE_GENERATION_ID, "member_id": "",
                "partitions": entries}
        _, answer = self.call_coordinator(group_id, wire.ACTION_OFFSET_COMMIT, body, _partition_codes)
        _raise_for(answer, f"committing offsets for group '{group_id}'")
        for item in answer.get("partitions", []):
            _raise_for(item, f"group '{group_id}', {item.get('topic')}-{item.get('partition')}")

    def delete_consumer_groups(self, group_ids: Iterable[str]) -> None:
        """Delete each group (refused while it has members: NON_EMPTY_GROUP); every group is tried, then the
        first failure is raised naming its group."""
        failures: list[AdsError] = []
        for group_id in group_ids:
            try:
                _, answer = self.call_coordinator(group_id, wire.ACTION_DELETE_GROUPS, {"groups": [group_id]},
                                                  _group_codes)
                _raise_for(answer, f"deleting group '{group_id}'")
                for item in answer.get("groups", []):
                    _raise_for(item, f"group '{group_id}'")
            except AdsError as exc:
                failures.append(exc)
        if failures:
            raise failures[0]

    def delete_consumer_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition]) -> None:
        """Remove the group's committed offsets of ``partitions`` (refused for topics its members subscribe
        to: GROUP_SUBSCRIBED_TO_TOPIC); raises the first partition's error, naming it."""
        body = {"group_id": group_id, "partitions": [{"topic": tp.topic, "partition": tp.partition}
                                                     for tp in partitions]}
        _, answer = self.call_coordinator(group_id, wire.ACTION_OFFSET_DELETE, body, _partition_codes)
        _raise_for(answer, f"deleting offsets of group '{group_id}'")
        for item in answer.get("partitions", []):
            _raise_for(item, f"group '{group_id}', {item.get('topic')}-{item.get('partition')}")


def _group_codes(answer: dict[str, Any]) -> list[int]:
    return [int(g.get("error_code", 0) or 0) for g in answer.get("groups", []) or []]


def _partition_codes(answer: dict[str, Any]) -> list[int]:
    return [int(p.get("error_code", 0) or 0) for p in answer.get("partitions", []) or []]


def _raise_for(answer: dict[str, Any], where: str) -> None:
    """The answer's error as an exception whose message names ``where`` (the broker's message kept)."""
    code = int(answer.get("error_code", 0) or 0)
    if not code:
        return
    message = answer.get("message") or ""
    try:
        name = ErrorCode(code).name
    except ValueError:
        name = str(code)
    raise error_for(code, f"{where}: {message or name}" if where not in message else message)
