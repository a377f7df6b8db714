"""Typed topics' schema versions in ZooKeeper (issue #26): registered through the admin actions
``register_schema`` / ``describe_schema`` (``broker/rpc/schema_handlers.py``), version 1 written with the topic
itself (``ZkTopics.create_topic``: ``add_first_version``) and removed with it (``delete_topic_znodes``).

``/schemas/<topic>`` holds ``{"latest": n}``; ``/schemas/<topic>/<n>`` (ten digits) holds version n: the
Arrow schema (IPC-serialised, base64; field ids and comments in its field metadata), its DDL and when it
was registered. A registration is one transaction: the parent's ``latest`` set conditionally on the
version read, and the new child created; two registrations racing cannot both take version n+1, and the
loser retries against what won (at most ``REGISTER_ATTEMPTS_MAX`` times). The rules are the pure ones of
``ads_spark.schemas``: the new schema is normalised, keeps its columns' field ids, must pass the topic's
compatibility mode against the registered versions, and registering a schema equal to a registered
version (columns, types, nullability and field ids) returns that version instead of a new one.

Reading a version costs two reads whatever the history's length (``latest_schema``, ``schema_version``):
the data plane resolves a batch's schema id with them.
"""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa
from kazoo.exceptions import BadVersionError, NodeExistsError

from ads_spark.broker.zk.model import (
    SCHEMAS_PATH, decode_json, encode_json, schema_version_path, schemas_path,
)
from ads_spark.broker.zk.session import MultiOpFailed
from ads_spark.errors import PolicyViolationError, RequestTimedOutError, UnknownTopicOrPartitionError
from ads_spark.schemas import compatibility, ddl, ipc, types

REGISTER_ATTEMPTS_MAX = 5


def _same_version(a: pa.Schema, b: pa.Schema) -> bool:
    return types.same_columns(a, b) and [types.field_id(f) for f in a] == [types.field_id(f) for f in b]


def version_value(version: int, schema: pa.Schema, now_ms: int) -> bytes:
    """The znode value of version ``version``: the schema (ipc.to_base64), its DDL, when it was registered."""
    return encode_json({"version": version, "schema": ipc.to_base64(schema), "ddl": ddl.to_ddl(schema),
                        "registered_ms": now_ms})


def decode_version(value: bytes) -> dict[str, Any]:
    """A version znode's value: {"version", "schema" (a pa.Schema), "ddl", "registered_ms"}."""
    record = dict(decode_json(value))
    record["schema"] = ipc.from_base64(record["schema"], "stored schema")
    return record


def _decode(value: bytes) -> pa.Schema:
    return decode_version(value)["schema"]


def add_first_version(tx, topic: str, schema: pa.Schema, now_ms: int) -> None:
    """Add to transaction ``tx`` the creation of ``topic``'s schemas with ``schema`` as version 1 (the topic's
    creation: ``ZkTopics.create_topic``, after ``stale_schema_paths`` were deleted in the same transaction)."""
    tx.create(schemas_path(topic), encode_json({"latest": 1}))
    tx.create(schema_version_path(topic, 1), version_value(1, schema, now_ms))


class ZkSchemas:
    """A mixin of ``ZkClient`` over the ``ZkSession`` helpers (``_read``, ``_children``, ``_commit``)."""

    def schema_history(self, topic: str) -> list[pa.Schema]:
        """Every registered version of ``topic``'s schema, version 1 first (empty: none registered)."""
        names = [name for name in self._children(schemas_path(topic)) if name.isdigit()]
        found = self._read_many([f"{schemas_path(topic)}/{name}" for name in names])
        return [_decode(value[0]) for value in found if value is not None]

    def schema_records(self, topic: str) -> list[dict[str, Any]]:
        """Every version of ``topic``'s schema as ``decode_version`` gives it, version 1 first."""
        names = [name for name in self._children(schemas_path(topic)) if name.isdigit()]
        found = self._read_many([f"{schemas_path(topic)}/{name}" for name in names])
        return [decode_version(value[0]) for value in found if value is not None]

    def latest_schema_number(self, topic: str) -> int:
        """The number of ``topic``'s latest version (0: none registered), from the parent alone."""
        parent = self._read(schemas_path(topic))
        return int(decode_json(parent[0])["latest"]) if parent is not None else 0

    def latest_schema(self, topic: str) -> tuple[int, pa.Schema]:
        """(version, schema) of ``topic``'s latest version: two reads (the parent's ``latest``, that child)."""
        return self.schema_version(topic, None)

    def schema_version(self, topic: str, version: int | None = None) -> tuple[int, pa.Schema]:
        """(version, schema) of ``version``, or of the latest; UnknownTopicOrPartitionError naming what is missing.
        Reads the parent (``{"latest": n}``) and the one child, whatever the history's length."""
        if version is None:
            latest = self.latest_schema_number(topic)
            chosen, child = latest, self._read(schema_version_path(topic, latest)) if latest >= 1 else None
        else:
            chosen = int(version)
            parent, child = self._read_many([schemas_path(topic), schema_version_path(topic, max(chosen, 1))])
            latest = int(decode_json(parent[0])["latest"]) if parent is not None else 0
        if not 1 <= chosen <= latest or child is None:
            raise UnknownTopicOrPartitionError(
                f"topic '{topic}' has no schema version {chosen} ({latest} registered)" if latest
                else f"topic '{topic}' has no registered schema")
        return chosen, _decode(child[0])

    def stale_schema_paths(self, topic: str) -> list[str]:
        """The znodes of ``topic``'s schemas, children first (empty: none), for a transaction to delete: a topic
        deleted before its schemas were removed must not lend them to a new topic of the same name."""
        parent = schemas_path(topic)
        children = self._children(parent)
        if not children and self._read(parent) is None:
            return []
        return [f"{parent}/{name}" for name in children] + [parent]

    def register_schema(self, topic: str, schema: pa.Schema, mode: str = compatibility.DEFAULT_MODE,
                        dry_run: bool = False) -> tuple[int, bool]:
        """(version, created) after registering ``schema`` for ``topic`` under ``mode``; an equal registered
        version is returned with created False. PolicyViolationError lists every rule the schema breaks;
        ``dry_run`` checks and returns the version it would get without writing."""
        mode = compatibility.check_mode(mode)
        self._create_if_absent(SCHEMAS_PATH, b"")
        for _ in range(REGISTER_ATTEMPTS_MAX):
            parent = self._read(schemas_path(topic))
            history = self.schema_history(topic)
            new = types.with_field_ids(schema, history[-1] if history else None, types.highest_field_id(history))
            for version, registered in enumerate(history, start=1):
                if _same_version(new, registered):
                    return version, False
            problems = compatibility.check(mode, new, history)
            if problems:
                raise PolicyViolationError(f"schema for topic '{topic}' is not {mode}-compatible: "
                                           + "; ".join(problems))
            version = len(history) + 1
            if dry_run:
                return version, False
            if self._commit_version(topic, parent, version, new):
                return version, True
        raise RequestTimedOutError(f"schema for topic '{topic}' not registered: {REGISTER_ATTEMPTS_MAX} "
                                   f"concurrent registrations won the race first")

    def _commit_version(self, topic: str, parent, version: int, schema: pa.Schema) -> bool:
        """Write version ``version``: True, or False when another registration changed the topic's schemas."""
        latest = encode_json({"latest": version})

        def build(tx) -> None:
            if parent is None:
                tx.create(schemas_path(topic), latest)
            else:
                tx.set_data(schemas_path(topic), latest, version=parent[1].version)
            tx.create(schema_version_path(topic, version), version_value(version, schema, int(time.time() * 1000)))

        try:
            self._commit(build, f"registering schema version {version} of topic '{topic}'")
        except MultiOpFailed as failed:
            if isinstance(failed.error, (BadVersionError, NodeExistsError)):
                return False
            raise
        return True

    def delete_schemas(self, topic: str) -> None:
        """Remove every version of ``topic``'s schema (the topic's deletion)."""
        names = self._children(schemas_path(topic))
        self._delete_many([f"{schemas_path(topic)}/{name}" for name in names] + [schemas_path(topic)])
