"""The values stored in ZooKeeper and the paths they live at (docs/DESIGN.md, section ZooKeeper).

Everything the ZooKeeper adapter (``client.py``, ``topics.py``) reads or writes
is named and encoded here, so the layout is defined in one place and the
adapter modules hold only I/O. All paths are relative to the chroot (``/ads``
by default). Values are JSON, except ``/controller_epoch`` (a plain integer).

Nothing a client sends may reach kazoo unchecked: kazoo encodes paths on its
connection thread, and a string it cannot encode (a lone surrogate) killed that
thread and left the broker cut off from ZooKeeper for good (issue #20). So every
path built from a topic name checks the name first (``ads_spark.protocol.names``), and
every value is encoded here, in the caller's thread, into bounded UTF-8 JSON;
both fail with typed errors (INVALID_TOPIC_EXCEPTION, INVALID_REQUEST).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

from ads_spark.errors import InvalidRequestError
from ads_spark.protocol.names import shown, validate_topic_name
from ads_spark.replication.state import LeaderAndIsr

CLUSTER_ID_PATH = "/cluster/id"
CONTROLLER_PATH = "/controller"
CONTROLLER_EPOCH_PATH = "/controller_epoch"
BROKER_IDS_PATH = "/brokers/ids"
# Per broker id, the process incarnation whose unclean start a controller has applied (KIP-966: out of
# every ISR and ELR). A later registration of that same process (its session expired) lost nothing.
UNCLEAN_APPLIED_PATH = "/brokers/unclean_applied"
TOPICS_PATH = "/brokers/topics"
CONFIG_TOPICS_PATH = "/config/topics"
CONFIG_CHANGES_PATH = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
DELETE_TOPICS_PATH = "/admin/delete_topics"
REASSIGN_PARTITIONS_PATH = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION_PATH = "/admin/preferred_replica_election"
ISR_CHANGE_PATH = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"
# Partitions added to a known topic (``kafka-topics --alter --partitions``): the controller's cue to read it again.
PARTITION_CHANGE_PATH = "/admin/partition_changes"
PARTITION_CHANGE_PREFIX = "partition_change_"
PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"
# Security (issue #23; broker/zk/security_store.py): credentials and token secrets are never world-readable.
CONFIG_USERS_PATH = "/config/users"  # /config/users/<username>: a StoredCredential (JSON)
SECURITY_PATH = "/security"
TOKEN_SECRETS_PATH = "/security/token_secrets"  # JSON list of base64url secrets, newest first
ACLS_PATH = "/acls"  # /acls/<LITERAL|PREFIXED>/<Topic|Group|Cluster>/<encoded name>: JSON list of ACL dicts
ACL_CHANGES_PATH = "/acl_changes"
SCHEMAS_PATH = "/schemas"  # /schemas/<topic>: {"latest": n}; /schemas/<topic>/<n>: a typed topic's version n
ACL_CHANGE_PREFIX = "acl_change_"

# Created (empty, or with the initial value) when a client first connects.
BASE_PATHS = (
    "/cluster", BROKER_IDS_PATH, UNCLEAN_APPLIED_PATH, TOPICS_PATH, CONFIG_TOPICS_PATH, CONFIG_CHANGES_PATH,
    DELETE_TOPICS_PATH, ISR_CHANGE_PATH, PARTITION_CHANGE_PATH,
)

# ZooKeeper refuses a request above jute.maxbuffer (1 MiB by default) by dropping the connection, which
# costs the broker its session; a value this size still leaves room for the path and the packet header.
ZNODE_VALUE_BYTES_MAX = 1_000_000


class ZooKeeperUnavailable(Exception):
    """Operational: the ZooKeeper session is lost or the ensemble does not answer in time.

    Not an ``AdsError``: the I/O shell handles it (re-register, resign, retry
    later); it never travels on the wire as such.
    """


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS_PATH}/{int(broker_id)}"


def unclean_applied_path(broker_id: int) -> str:
    return f"{UNCLEAN_APPLIED_PATH}/{int(broker_id)}"


# Every path holding a topic name is built by one of these, and each checks the name: a valid name is one
# path component, with nothing kazoo cannot encode and no '.' or '..' (which kazoo refuses with a bare ValueError).

def topic_path(topic: str) -> str:
    return f"{TOPICS_PATH}/{validate_topic_name(topic)}"


def partitions_path(topic: str) -> str:
    return f"{topic_path(topic)}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{partitions_path(topic)}/{int(partition)}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{partition_path(topic, partition)}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS_PATH}/{validate_topic_name(topic)}"


def schemas_path(topic: str) -> str:
    return f"{SCHEMAS_PATH}/{validate_topic_name(topic)}"


def schema_version_path(topic: str, version: int) -> str:
    return f"{schemas_path(topic)}/{int(version):010d}"


def delete_topic_marker_path(topic: str) -> str:
    return f"{DELETE_TOPICS_PATH}/{validate_topic_name(topic)}"


def encode_json(value: Any) -> bytes:
    """``value`` as the UTF-8 JSON stored in a znode; InvalidRequestError if it cannot be one.

    Strict on purpose, so that what ZooKeeper holds is clean for every reader:
    a lone surrogate (not encodable as UTF-8), NaN or infinity (not JSON), an
    object that is not JSON data, nesting too deep to encode, or a value above
    ZNODE_VALUE_BYTES_MAX are refused here, in the caller's thread.
    """
    try:
        data = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidRequestError(f"a value for ZooKeeper holds text that is not valid Unicode: the lone "
                                  f"surrogate {shown(exc.object[exc.start:exc.end])}") from None
    except RecursionError:
        raise InvalidRequestError("a value for ZooKeeper is nested too deeply to encode") from None
    except (TypeError, ValueError) as exc:
        raise InvalidRequestError(f"a value for ZooKeeper is not JSON data: {shown(str(exc))}") from None
    if len(data) > ZNODE_VALUE_BYTES_MAX:
        raise InvalidRequestError(f"a value for ZooKeeper of {len(data)} bytes exceeds the "
                                  f"{ZNODE_VALUE_BYTES_MAX}-byte bound (ZooKeeper's jute.maxbuffer)")
    return data


def decode_json(data: bytes | None) -> Any:
    if not data:
        return None
    return json.loads(data.decode())


@dataclass(frozen=True, slots=True)
class PartitionStateZnode:
    """The value of ``/brokers/topics/<t>/partitions/<p>/state``.

    ``partition_epoch`` is the znode version the state was written at (the
    adapter stamps it), so it grows with every change, like Kafka's.
    ``controller_epoch`` is the epoch of the controller (or of the controller
    whose leader the ISR update came from) that wrote it. ``leader`` is -1 when
    the partition is offline.
    """

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()
    controller_epoch: int = 0
    partition_epoch: int = 0
    # (member, broker epoch) pairs, as LeaderAndIsr.isr_broker_epochs; JSON {"<member>": epoch}.
    isr_broker_epochs: tuple[tuple[int, int], ...] = ()

    def to_json(self) -> bytes:
        value = asdict(self)
        for key in ("isr", "elr", "last_known_elr"):
            value[key] = list(value[key])
        value["isr_broker_epochs"] = {str(member): epoch for member, epoch in self.isr_broker_epochs}
        return encode_json(value)

    @classmethod
    def from_dict(cls, value: dict[str, Any]) -> "PartitionStateZnode":
        """The state from its JSON object; InvalidRequestError naming the field if a member list is not a
        list of broker ids (a hand-edited or foreign znode must not turn into a state nobody can elect from)."""
        return cls(
            leader=int(value["leader"]),
            leader_epoch=int(value["leader_epoch"]),
            isr=_broker_ids(value, "isr"),
            elr=_broker_ids(value, "elr"),
            last_known_elr=_broker_ids(value, "last_known_elr"),
            controller_epoch=int(value.get("controller_epoch", 0)),
            partition_epoch=int(value.get("partition_epoch", 0)),
            isr_broker_epochs=tuple(sorted((int(member), int(epoch))
                                           for member, epoch in (value.get("isr_broker_epochs") or {}).items())),
        )

    @classmethod
    def from_json(cls, data: bytes) -> "PartitionStateZnode":
        return cls.from_dict(decode_json(data))

    @classmethod
    def from_leader_and_isr(cls, state: LeaderAndIsr) -> "PartitionStateZnode":
        """The znode value of the core's ``state`` (its partition epoch is the version, stamped on write)."""
        return cls(state.leader, state.leader_epoch, tuple(state.isr), tuple(state.elr),
                   last_known_elr=tuple(state.last_known_elr), controller_epoch=state.controller_epoch,
                   isr_broker_epochs=tuple(state.isr_broker_epochs))

    def to_leader_and_isr(self, zk_version: int) -> LeaderAndIsr:
        """The core's value of this znode, read at ``zk_version`` (its partition epoch)."""
        return LeaderAndIsr(self.leader, self.leader_epoch, tuple(self.isr), tuple(self.elr), zk_version,
                            self.controller_epoch, self.isr_broker_epochs, tuple(self.last_known_elr))

    def same_decision(self, other: "PartitionStateZnode") -> bool:
        """Equal in everything but the bookkeeping epochs the adapter stamps."""
        return (self.leader, self.leader_epoch, self.isr, self.elr, self.last_known_elr,
                self.isr_broker_epochs) == (other.leader, other.leader_epoch, other.isr, other.elr,
                                            other.last_known_elr, other.isr_broker_epochs)


def _broker_ids(value: dict[str, Any], name: str) -> tuple[int, ...]:
    """The partition state's member list ``name`` (absent or null: empty), checked: a list of distinct
    non-negative integer broker ids."""
    ids = value.get(name) or []
    if not isinstance(ids, (list, tuple)) or any(type(b) is not int or b < 0 for b in ids) \
            or len(set(ids)) != len(ids):
        raise InvalidRequestError(f"partition state field {name!r} must be a list of distinct broker ids, "
                                  f"not {shown(ids)}")
    return tuple(ids)


class VersionedPartitionState(NamedTuple):
    """A partition state as read, with the znode version a conditional write must name."""

    state: PartitionStateZnode
    zk_version: int


class ControllerEpoch(NamedTuple):
    """The controller epoch and the version of ``/controller_epoch`` that fences its writes."""

    epoch: int
    zk_version: int


@dataclass(frozen=True, slots=True)
class StaleVersion:
    """A conditional partition-state write lost: the znode changed since ``expected_zk_version``.

    ``current`` is the state now in ZooKeeper (None if the partition is gone);
    the writer re-reads its view from it rather than retrying blindly.
    """

    topic: str
    partition: int
    expected_zk_version: int
    current: VersionedPartitionState | None


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    """Producer ids ``block_start`` .. ``block_end_inclusive`` belong to ``broker_id`` alone."""

    broker_id: int
    block_start: int
    block_end_inclusive: int

    @property
    def size(self) -> int:
        return self.block_end_inclusive - self.block_start + 1

    def to_json(self) -> bytes:
        return encode_json({"version": 1, "broker": self.broker_id, "block_start": self.block_start,
                            "block_end": self.block_end_inclusive})

    @classmethod
    def from_json(cls, data: bytes) -> "ProducerIdBlock | None":
        value = decode_json(data)
        if not value:
            return None
        return cls(int(value["broker"]), int(value["block_start"]), int(value["block_end"]))


@dataclass(frozen=True, slots=True)
class TopicAssignmentZnode:
    """The value of ``/brokers/topics/<t>``: the topic's incarnation id and replica lists."""

    topic_id: str
    partitions: dict[int, tuple[int, ...]]
    observers: dict[int, tuple[int, ...]] = field(default_factory=dict)
    adding_replicas: dict[int, tuple[int, ...]] = field(default_factory=dict)
    removing_replicas: dict[int, tuple[int, ...]] = field(default_factory=dict)

    def to_json(self) -> bytes:
        def plain(mapping: dict[int, tuple[int, ...]]) -> dict[str, list[int]]:
            return {str(p): list(r) for p, r in sorted(mapping.items())}

        return encode_json({"version": 3, "topic_id": self.topic_id, "partitions": plain(self.partitions),
                            "observers": plain(self.observers), "adding_replicas": plain(self.adding_replicas),
                            "removing_replicas": plain(self.removing_replicas)})

    @classmethod
    def from_json(cls, data: bytes) -> "TopicAssignmentZnode":
        value = decode_json(data) or {}

        def typed(mapping: dict[str, list[int]] | None) -> dict[int, tuple[int, ...]]:
            return {int(p): tuple(int(b) for b in r) for p, r in (mapping or {}).items()}

        return cls(str(value.get("topic_id", "")), typed(value.get("partitions")), typed(value.get("observers")),
                   typed(value.get("adding_replicas")), typed(value.get("removing_replicas")))
