"""Typed topics' schemas for ``Admin`` (issue #26): register, check, get and describe a topic's schema versions
over the ``register_schema`` / ``describe_schema`` actions, and the schema given to ``create_topic``.

A schema is given as a ``pyarrow.Schema`` or as Spark DDL text (``schemas/ddl.py``, parsed here so a typo is
refused with its position before any request), and travels as base64 of its Arrow IPC form
(``schemas/ipc.py``). The broker takes it to its stored form and gives field ids; what it answers is
decoded back to ``pyarrow.Schema``. Kept apart from ``admin.py`` so that module stays about topics and ACLs.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ads_spark.errors import InvalidConfigError, UnknownTopicOrPartitionError
from ads_spark.protocol import wire
from ads_spark.schemas import ddl, ipc


def schema_text(schema: pa.Schema | str) -> str:
    """``schema`` (a pyarrow.Schema or DDL text) as the actions carry it."""
    if isinstance(schema, str):
        schema = ddl.parse(schema)
    if not isinstance(schema, pa.Schema):
        raise InvalidConfigError(f"schema: expected a pyarrow.Schema or Spark DDL text, got {type(schema).__name__}")
    return ipc.to_base64(schema)


class SchemaAdmin:
    """The schema calls of ``Admin``: writes sent once (a registration that timed out may have happened; sending
    it again returns the same version), reads retried as ``Admin._read`` does."""

    def __init__(self, admin):
        self._admin = admin

    def register_schema(self, topic: str, schema: pa.Schema | str, dry_run: bool = False) -> tuple[int, bool]:
        """(version, created): a new version under the topic's schema.compatibility, or the number of an equal
        registered version with created False. ``dry_run``: nothing is written, created says whether a version
        would be. PolicyViolationError names every broken rule; InvalidConfigError a Kafka-shaped topic."""
        body = {"topic": topic, "schema": schema_text(schema), "dry_run": bool(dry_run)}
        response = self._admin._connections.call_any(wire.ACTION_REGISTER_SCHEMA, body)
        self._admin._check(response)
        return int(response["version"]), bool(response["created"])

    def check_schema(self, topic: str, schema: pa.Schema | str) -> int:
        """The version ``schema`` would get (an equal registered one's number); PolicyViolationError if incompatible."""
        return self.register_schema(topic, schema, dry_run=True)[0]

    def describe_schema(self, topic: str, once_timeout_ms: int | None = None) -> dict[str, Any]:
        """{"topic", "schema_type", "compatibility", "latest", "versions": [{"version", "schema" (pa.Schema),
        "ddl", "registered_ms"}]} (a Kafka-shaped topic: schema_type "kafka", no versions). ``once_timeout_ms``:
        one pass over the brokers within it, no retries."""
        body = {"topic": topic}
        response = (self._admin._read(wire.ACTION_DESCRIBE_SCHEMA, body) if once_timeout_ms is None
                    else self._admin._connections.call_any(wire.ACTION_DESCRIBE_SCHEMA, body, once_timeout_ms))
        self._admin._check(response)
        versions = [{**v, "schema": ipc.from_base64(v["schema"], f"topic '{topic}' schema version {v['version']}")}
                    for v in response.get("versions", [])]
        return {key: response.get(key) for key in ("topic", "schema_type", "compatibility", "latest")} | {
            "versions": versions}

    def get_schema(self, topic: str, version: int | None = None) -> tuple[int, pa.Schema]:
        """(version, schema) of ``version``, or of the latest."""
        described = self.describe_schema(topic)
        if described["schema_type"] != "arrow":
            raise InvalidConfigError(f"topic '{topic}' is Kafka-shaped (schema.type={described['schema_type']}) "
                                     f"and has no schema")
        wanted = described["latest"] if version is None else int(version)
        found = next((v for v in described["versions"] if v["version"] == wanted), None)
        if found is None:
            raise UnknownTopicOrPartitionError(f"topic '{topic}' has no schema version {wanted} "
                                               f"({described['latest']} registered)")
        return wanted, found["schema"]
