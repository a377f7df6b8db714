"""Typed topics' control plane against a real broker and ZooKeeper (issue #26 item 1, DESIGN section 16):
creation with a schema (atomic with the topic), the config rules of ``schema.type`` / ``schema.compatibility``,
``register_schema`` / ``describe_schema`` through ``Admin``, deletion taking the schemas along, and the
``ads topics`` commands. Every refusal is checked to have written nothing."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
import pytest

from ads_spark.broker.zk.client import ZkClient
from ads_spark.client import Admin
from ads_spark.errors import (
    InvalidConfigError, PolicyViolationError, UnknownTopicOrPartitionError,
)
from ads_spark.schemas import ddl, types
from tests.fixtures.cluster import start_cluster, stop_cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

V1 = "order_id BIGINT NOT NULL, amount DECIMAL(10,2), region STRING, ts TIMESTAMP"
V2 = V1 + ", note STRING"


@pytest.fixture(scope="module")
def typed(tmp_path_factory):
    """(cluster, admin, zk) on one broker: the actions need no replication, only the broker and ZooKeeper."""
    cluster = start_cluster(tmp_path_factory, 1)
    admin = Admin({"bootstrap.servers": cluster.bootstrap_servers})
    zk = ZkClient(cluster.zookeeper_connect).connect()
    try:
        yield cluster, admin, zk
    finally:
        zk.close()
        admin.close()
        stop_cluster(cluster)


def test_create_with_a_ddl_schema_then_describe_it(typed, topic_name):
    _, admin, zk = typed
    admin.create_topic(topic_name, 1, 1, schema=V1)
    described = admin.describe_schema(topic_name)
    assert {k: described[k] for k in ("topic", "schema_type", "compatibility", "latest")} == {
        "topic": topic_name, "schema_type": "arrow", "compatibility": "BACKWARD", "latest": 1}
    [first] = described["versions"]
    assert first["version"] == 1 and first["ddl"] == ddl.to_ddl(ddl.parse(V1)) and first["registered_ms"] > 0
    assert [types.field_id(f) for f in first["schema"]] == [1, 2, 3, 4]
    assert types.same_columns(first["schema"], ddl.parse(V1))
    assert admin.get_schema(topic_name) == (1, first["schema"])
    # the config says so, and the data plane's cheap reads agree
    assert admin.describe_topics([topic_name])[0].config == {"schema.type": "arrow"}
    configs = {e["name"]: e["value"] for e in admin.describe_configs(topic_name)["configs"]}
    assert configs["schema.type"] == "arrow" and configs["schema.compatibility"] == "BACKWARD"
    assert zk.latest_schema(topic_name)[0] == 1 and zk.schema_version(topic_name, 1)[1].equals(first["schema"])


def test_create_with_a_pyarrow_schema_normalises_lossless_types(typed, topic_name):
    _, admin, _ = typed
    given = pa.schema([pa.field("id", pa.uint32(), False), ("name", pa.large_string()), ("at", pa.timestamp("ms"))])
    admin.create_topic(topic_name, 1, 1, schema=given)
    version, stored = admin.get_schema(topic_name)
    assert version == 1 and [f.type for f in stored] == [pa.int64(), pa.string(), pa.timestamp("us")]
    assert not stored.field("id").nullable


@pytest.mark.parametrize("config, schema, refusal", [
    ({"schema.type": "arrow"}, None, "a typed topic needs a schema"),
    ({}, pa.schema([("id", pa.int64()), ("tag", pa.dictionary(pa.int32(), pa.string()))]),
     "column 'tag'.*dictionary"),
    ({}, pa.schema([("id", pa.int64()), ("items", pa.list_(pa.int64()))]), "column 'items'.*nested"),
    ({"schema.type": "kafka"}, V1, "'schema.type'=kafka takes no schema"),
    ({"cleanup.policy": "compact"}, V1, "'cleanup.policy'=compact with schema.type=arrow: compaction of typed"),
    ({"schema.compatibility": "SIDEWAYS"}, V1, "'schema.compatibility': must be one of BACKWARD, BACKWARD_TRANS"),
    ({"schema.compatibility": "FULL"}, None, "'schema.compatibility' applies to typed topics only"),
], ids=["arrow-without-schema", "dictionary", "nested", "kafka-with-schema", "compact", "unknown-mode",
        "mode-on-kafka"])
def test_a_refused_creation_names_the_problem_and_creates_nothing(typed, topic_name, config, schema, refusal):
    _, admin, zk = typed
    with pytest.raises(InvalidConfigError, match=refusal):
        admin.create_topic(topic_name, 1, 1, config=config, schema=schema, timeout_s=5)
    assert topic_name not in admin.list_topics()
    assert zk.read_topic(topic_name) is None and zk.stale_schema_paths(topic_name) == []


def test_register_evolves_idempotently_dry_runs_write_nothing_and_incompatible_is_refused(typed, topic_name):
    _, admin, _ = typed
    admin.create_topic(topic_name, 1, 1, schema=V1)
    assert admin.check_schema(topic_name, V2) == 2
    assert admin.register_schema(topic_name, V2, dry_run=True) == (2, True)
    assert admin.describe_schema(topic_name)["latest"] == 1  # the dry runs wrote nothing
    assert admin.register_schema(topic_name, V2) == (2, True)
    assert admin.register_schema(topic_name, V2) == (2, False)
    assert admin.register_schema(topic_name, V1) == (1, False)  # equal to an older version: that one
    assert admin.register_schema(topic_name, V2, dry_run=True) == (2, False)
    with pytest.raises(PolicyViolationError, match="BACKWARD: the new schema cannot read version 2: column 'flag' "
                                                   "is NOT NULL"):
        admin.register_schema(topic_name, V2 + ", flag BOOLEAN NOT NULL")
    with pytest.raises(PolicyViolationError, match="column 'order_id' is string, written as int64: not a lossless"):
        admin.check_schema(topic_name, V2.replace("order_id BIGINT", "order_id STRING"))
    described = admin.describe_schema(topic_name)
    assert described["latest"] == 2 and [v["version"] for v in described["versions"]] == [1, 2]
    version, latest = admin.get_schema(topic_name)
    assert version == 2 and types.field_id(latest.field("note")) == 5
    assert types.same_columns(admin.get_schema(topic_name, 1)[1], ddl.parse(V1))
    with pytest.raises(UnknownTopicOrPartitionError, match="no schema version 3 \\(2 registered\\)"):
        admin.get_schema(topic_name, 3)


def test_schema_compatibility_is_the_rule_a_registration_passes(typed, topic_name):
    _, admin, _ = typed
    admin.create_topic(topic_name, 1, 1, config={"schema.compatibility": "forward"}, schema=V1)
    assert admin.describe_schema(topic_name)["compatibility"] == "FORWARD"
    dropped = "amount DECIMAL(10,2), region STRING, ts TIMESTAMP"  # order_id gone: BACKWARD reads it, FORWARD not
    with pytest.raises(PolicyViolationError, match="FORWARD: version 1 cannot read .*column 'order_id'"):
        admin.register_schema(topic_name, dropped)
    admin.alter_configs(topic_name, {"schema.compatibility": "NONE"})
    assert admin.register_schema(topic_name, dropped) == (2, True)


def test_schema_type_is_fixed_and_the_rules_hold_on_alter(typed, topic_name):
    _, admin, _ = typed
    admin.create_topic(topic_name, 1, 1, schema=V1)
    for to_set, to_delete in (({"schema.type": "kafka"}, []), ({}, ["schema.type"])):
        with pytest.raises(InvalidConfigError, match=f"'schema.type' of topic '{topic_name}' cannot change"):
            admin.alter_configs(topic_name, to_set, to_delete)
    with pytest.raises(InvalidConfigError, match="compaction of typed topics is not supported yet"):
        admin.alter_configs(topic_name, {"cleanup.policy": "compact,delete"})
    assert admin.describe_topics([topic_name])[0].config == {"schema.type": "arrow"}  # nothing changed
    kafka_shaped = topic_name + "-kafka"
    admin.create_topic(kafka_shaped, 1, 1)
    with pytest.raises(InvalidConfigError, match=f"'schema.type' of topic '{kafka_shaped}' cannot change"):
        admin.alter_configs(kafka_shaped, {"schema.type": "arrow"})
    with pytest.raises(InvalidConfigError, match="'schema.compatibility' applies to typed topics only"):
        admin.alter_configs(kafka_shaped, {"schema.compatibility": "FULL"})
    with pytest.raises(InvalidConfigError, match=f"topic '{kafka_shaped}' is Kafka-shaped"):
        admin.register_schema(kafka_shaped, V1)
    assert admin.describe_schema(kafka_shaped)["schema_type"] == "kafka"
    assert admin.describe_topics([kafka_shaped])[0].config == {}
    with pytest.raises(UnknownTopicOrPartitionError, match=f"topic '{topic_name}-absent' does not exist"):
        admin.register_schema(topic_name + "-absent", V1)


def test_deleting_a_topic_deletes_its_schemas_and_a_new_topic_of_that_name_starts_at_version_1(typed, topic_name):
    _, admin, zk = typed
    admin.create_topic(topic_name, 1, 1, schema=V1)
    admin.register_schema(topic_name, V2)
    admin.delete_topic(topic_name)
    assert zk.stale_schema_paths(topic_name) == []
    admin.create_topic(topic_name, 1, 1, schema="id INT NOT NULL")
    described = admin.describe_schema(topic_name)
    assert described["latest"] == 1 and described["versions"][0]["ddl"] == "id INT NOT NULL"
    # schemas left by an older incarnation (written after its deletion) do not leak into the next one
    admin.delete_topic(topic_name)
    zk.register_schema(topic_name, ddl.parse(V1))
    zk.register_schema(topic_name, ddl.parse(V2))
    admin.create_topic(topic_name, 1, 1, schema="name STRING")
    assert [v["ddl"] for v in admin.describe_schema(topic_name)["versions"]] == ["name STRING"]
    admin.delete_topic(topic_name)
    zk.register_schema(topic_name, ddl.parse(V1))
    admin.create_topic(topic_name, 1, 1)  # Kafka-shaped this time: no schemas at all
    assert zk.stale_schema_paths(topic_name) == []


def ads(cluster, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ads_spark.cli.main", *argv, "--bootstrap-server",
                           cluster.bootstrap_servers], capture_output=True, text=True, timeout=120)


def test_cli_create_alter_schema_and_describe(typed, topic_name, tmp_path):
    cluster, _, _ = typed
    created = ads(cluster, "topics", "create", "--topic", topic_name, "--partitions", "1", "--schema", V1)
    assert created.returncode == 0, created.stderr
    dry = ads(cluster, "topics", "alter-schema", "--topic", topic_name, "--schema", V2, "--dry-run")
    assert dry.returncode == 0 and f"would register version 2 of topic {topic_name}" in dry.stdout, dry.stderr
    schema_file = tmp_path / "v2.ddl"
    schema_file.write_text(V2 + "\n")
    for expected in ("Registered version 2", "Unchanged: equals version 2"):
        altered = ads(cluster, "topics", "alter-schema", "--topic", topic_name, "--schema-file", str(schema_file))
        assert altered.returncode == 0 and expected in altered.stdout, altered.stderr
    refused = ads(cluster, "topics", "alter-schema", "--topic", topic_name, "--schema", "region STRING NOT NULL")
    assert refused.returncode == 1 and "POLICY_VIOLATION" in refused.stderr and "column 'region'" in refused.stderr
    both = ads(cluster, "topics", "alter-schema", "--topic", topic_name, "--schema", V1, "--schema-file", "f")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
    described = ads(cluster, "topics", "describe", "--topic", topic_name)
    assert described.returncode == 0, described.stderr
    assert (f"Topic: {topic_name}\tSchemaType: arrow\tCompatibility: BACKWARD\tSchemaId: 2"
            in described.stdout.splitlines())
    assert f"\tSchema version 1: {ddl.to_ddl(ddl.parse(V1))}" in described.stdout.splitlines()
    assert f"\tSchema version 2: {ddl.to_ddl(ddl.parse(V2))}" in described.stdout.splitlines()
    as_json = json.loads(ads(cluster, "topics", "describe", "--topic", topic_name, "--json").stdout)["topics"][0]
    assert as_json["schema_type"] == "arrow" and as_json["schema"]["latest"] == 2
    assert [v["version"] for v in as_json["schema"]["versions"]] == [1, 2]
