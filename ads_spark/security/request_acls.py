"""Which permission each ADS request needs: the table the broker checks every call against.

Pure data (``../shared/SECURITY.md``, "Which call needs what", after Kafka's KafkaApis). Keyed by
the names on the wire (``ads_spark/protocol/wire.py``: the DoAction names, ``fetch``,
``fetch_session``, ``produce``) plus ``FOLLOWER_FETCH`` for a fetch a replica makes. A unit test
fails when a wire action has no entry: there is no default allow. A TOPIC requirement is checked
on every topic the request names (each request inside an open stream too); a CLUSTER one on
``Resource.cluster()``.
"""

from __future__ import annotations

from typing import NamedTuple

from ads_spark.security.authorizer import Operation, ResourceType


class Requirement(NamedTuple):
    operation: Operation
    resource_type: ResourceType


_TOPIC, _CLUSTER, _GROUP = ResourceType.TOPIC, ResourceType.CLUSTER, ResourceType.GROUP
# A fetch with replica_id >= 0 or replica messages (a follower's): Kafka's ClusterAction, which
# closed CVE-2018-1288 (a consumer posing as a follower moved the ISR and high watermark).
FOLLOWER_FETCH = "follower_fetch"
# Authentication is what makes a principal, so it cannot need an ACL; the only name without one.
NO_ACL_NEEDED = frozenset({"authenticate"})

REQUIRED: dict[str, Requirement] = {
    # data path
    "produce": Requirement(Operation.WRITE, _TOPIC),
    "fetch": Requirement(Operation.READ, _TOPIC),
    "fetch_session": Requirement(Operation.READ, _TOPIC),
    FOLLOWER_FETCH: Requirement(Operation.CLUSTER_ACTION, _CLUSTER),
    "locate": Requirement(Operation.READ, _TOPIC),  # local reads reveal segment paths: Read, as a fetch
    "metadata": Requirement(Operation.DESCRIBE, _TOPIC),  # all-topics: leave out what is not Describe-able
    "list_offsets": Requirement(Operation.DESCRIBE, _TOPIC),
    "offset_for_leader_epoch": Requirement(Operation.DESCRIBE, _TOPIC),  # a consumer's; Kafka: Describe
    # Kafka: IdempotentWrite on the Cluster, or Write on any topic (KIP-679); the wiring adds the latter.
    "init_producer_id": Requirement(Operation.IDEMPOTENT_WRITE, _CLUSTER),
    # topic administration (create: Topic Create, or Create on the Cluster -- see ALTERNATIVES)
    "create_topics": Requirement(Operation.CREATE, _TOPIC),
    "delete_topics": Requirement(Operation.DELETE, _TOPIC),
    "create_partitions": Requirement(Operation.ALTER, _TOPIC),
    "delete_records": Requirement(Operation.DELETE, _TOPIC),  # Kafka's DeleteRecords: Topic Delete
    "describe_configs": Requirement(Operation.DESCRIBE_CONFIGS, _TOPIC),
    "alter_configs": Requirement(Operation.ALTER_CONFIGS, _TOPIC),
    # typed topics' schemas (issue #26): a new version changes what producers may write, as Kafka's
    # CreatePartitions changes the topic (Alter); reading the versions is Describe, as metadata
    "register_schema": Requirement(Operation.ALTER, _TOPIC),
    "describe_schema": Requirement(Operation.DESCRIBE, _TOPIC),
    # cluster administration
    "elect_leaders": Requirement(Operation.ALTER, _CLUSTER),
    "alter_partition_reassignments": Requirement(Operation.ALTER, _CLUSTER),
    "replica_status": Requirement(Operation.DESCRIBE, _CLUSTER),  # replica verification
    # controller -> broker and broker -> controller
    "leader_and_isr": Requirement(Operation.CLUSTER_ACTION, _CLUSTER),
    "update_metadata": Requirement(Operation.CLUSTER_ACTION, _CLUSTER),
    "stop_replica": Requirement(Operation.CLUSTER_ACTION, _CLUSTER),
    "replica_log_ends": Requirement(Operation.CLUSTER_ACTION, _CLUSTER),
    "controlled_shutdown": Requirement(Operation.CLUSTER_ACTION, _CLUSTER),
    # ACL administration (names proposed for the actions `ads acls` will send)
    "create_acls": Requirement(Operation.ALTER, _CLUSTER),
    "delete_acls": Requirement(Operation.ALTER, _CLUSTER),
    "describe_acls": Requirement(Operation.DESCRIBE, _CLUSTER),
    # user administration (`ads users`): credentials are cluster-wide, as Kafka's AlterUserScramCredentials
    "alter_user_credentials": Requirement(Operation.ALTER, _CLUSTER),
    "describe_users": Requirement(Operation.DESCRIBE, _CLUSTER),
    # consumer groups (Kafka's table): the Group requirement here; the topic checks of offset_commit,
    # offset_fetch and offset_delete are GROUP_TOPIC_REQUIRED, and list_groups is answered per group
    "find_coordinator": Requirement(Operation.DESCRIBE, _GROUP),
    "join_group": Requirement(Operation.READ, _GROUP),
    "sync_group": Requirement(Operation.READ, _GROUP),
    "heartbeat": Requirement(Operation.READ, _GROUP),
    "leave_group": Requirement(Operation.READ, _GROUP),
    "offset_commit": Requirement(Operation.READ, _GROUP),
    "offset_fetch": Requirement(Operation.DESCRIBE, _GROUP),
    "list_groups": Requirement(Operation.DESCRIBE, _GROUP),  # leaves out the groups it may not Describe
    "describe_groups": Requirement(Operation.DESCRIBE, _GROUP),
    "delete_groups": Requirement(Operation.DELETE, _GROUP),
    "offset_delete": Requirement(Operation.DELETE, _GROUP),
}

# Group calls that also need an operation on each topic they name (Kafka: OffsetCommit needs Topic Read,
# OffsetDelete Topic Read; OffsetFetch's topics the caller may not Describe are refused per partition).
GROUP_TOPIC_REQUIRED: dict[str, Operation] = {
    "offset_commit": Operation.READ,
    "offset_delete": Operation.READ,
}

# A second grant that also suffices (Kafka: CreateTopics is allowed by Create on the Cluster).
ALTERNATIVES: dict[str, Requirement] = {
    "create_topics": Requirement(Operation.CREATE, _CLUSTER),
}


def fetch_requirement_name(replica_id: int, replica_messages: bool) -> str:
    """The ``REQUIRED`` key for a fetch: a replica's (``replica_id >= 0`` or replica messages) needs
    ClusterAction; anything else is a consumer's and needs Read on each topic."""
    return FOLLOWER_FETCH if replica_id >= 0 or replica_messages else "fetch"
