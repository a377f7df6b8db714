"""The admin actions of typed topics (issue #26): ``register_schema`` and ``describe_schema``, and the schema
given to ``create_topics`` (``first_version``).

A schema arrives as base64 of its Arrow IPC form (``schemas/ipc.py``) and is taken to its stored form with
field ids (``schemas/types.py``) before anything is written; a type that cannot be stored is refused naming
the column. Versions live in ZooKeeper (``broker/zk/schemas.py``): registration is the conditional
transaction there, under the topic's ``schema.compatibility`` (``config_schemas.py``), so any broker may
answer and two racing registrations cannot take the same version. A Kafka-shaped topic has no schema:
registering one for it is refused naming the topic, describing it answers ``schema_type`` kafka and no
versions. ACLs: register needs Alter on the topic, describe Describe (``security/request_acls.py``).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ads_spark.config_schemas import ARROW, SCHEMA_COMPATIBILITY, SCHEMA_TYPE, schema_type
from ads_spark.errors import InvalidConfigError, InvalidRequestError
from ads_spark.protocol import wire
from ads_spark.schemas import compatibility, ipc, types


def first_version(text: str | None) -> pa.Schema | None:
    """A new topic's schema (create_topics' ``schema`` field) in its stored form with field ids 1..n, or None."""
    if text is None:
        return None
    return types.with_field_ids(ipc.from_base64(text, "create_topics: schema"), None)


class SchemaHandlers:
    def __init__(self, broker):
        self.broker = broker

    def handlers(self) -> dict:
        return {
            wire.ACTION_REGISTER_SCHEMA: self.handle_register_schema,
            wire.ACTION_DESCRIBE_SCHEMA: self.handle_describe_schema,
        }

    def _membership(self):
        if self.broker.zk is None:
            raise InvalidRequestError("this broker runs without ZooKeeper; typed topics' schemas are unavailable")
        return self.broker.zk

    def _typed_config(self, topic: str) -> dict[str, str]:
        """The topic's overrides; UnknownTopicOrPartitionError, or InvalidConfigError for a Kafka-shaped topic."""
        config = self._membership().topic_config(topic)
        if schema_type(config) != ARROW:
            raise InvalidConfigError(f"topic '{topic}' is Kafka-shaped ({SCHEMA_TYPE}={schema_type(config)}) and has "
                                     f"no schema: a typed topic is created with one (ads topics create --schema)")
        return config

    def handle_register_schema(self, body: dict[str, Any]) -> dict[str, Any]:
        """A new version of a typed topic's schema: {"version", "created"}. An equal registered version answers
        its number with created false; ``dry_run`` writes nothing and ``created`` says whether it would
        create a version. An incompatible schema is POLICY_VIOLATION naming every broken rule."""
        topic = wire.require(body, "topic", str, "register_schema")
        schema = ipc.from_base64(wire.require(body, "schema", str, "register_schema"), "register_schema: schema")
        mode = self._typed_config(topic).get(SCHEMA_COMPATIBILITY, compatibility.DEFAULT_MODE)
        zk, dry_run = self._membership().zk, bool(body.get("dry_run"))
        latest_before = zk.latest_schema_number(topic) if dry_run else 0
        version, created = zk.register_schema(topic, schema, mode, dry_run=dry_run)
        if dry_run:
            created = version > latest_before  # a dry run's new version is always the next one
        return {"error_code": 0, "topic": topic, "version": version, "created": created}

    def handle_describe_schema(self, body: dict[str, Any]) -> dict[str, Any]:
        """{"topic", "schema_type", "compatibility" (None on a Kafka-shaped topic), "latest" (0: none),
        "versions": [{"version", "schema" (base64 IPC), "ddl", "registered_ms"}], oldest first}."""
        topic = wire.require(body, "topic", str, "describe_schema")
        membership = self._membership()
        config = membership.topic_config(topic)
        if schema_type(config) != ARROW:
            return {"error_code": 0, "topic": topic, "schema_type": schema_type(config), "compatibility": None,
                    "latest": 0, "versions": []}
        records = membership.zk.schema_records(topic)
        versions = [{"version": int(r["version"]), "schema": ipc.to_base64(r["schema"]), "ddl": r["ddl"],
                     "registered_ms": int(r["registered_ms"])} for r in records]
        return {"error_code": 0, "topic": topic, "schema_type": ARROW,
                "compatibility": config.get(SCHEMA_COMPATIBILITY, compatibility.DEFAULT_MODE),
                "latest": max((v["version"] for v in versions), default=0), "versions": versions}
