"""Typed topics' schema versions in the real embedded ZooKeeper (broker/zk/schemas.py): registration by
version with field ids, idempotence, the compatibility mode's refusal naming the rule, dry runs, and two
sessions racing for the same next version."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from ads_spark.broker.zk.client import ZkClient
from ads_spark.errors import InvalidConfigError, PolicyViolationError, UnknownTopicOrPartitionError
from ads_spark.schemas import ddl, types

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

V1 = "order_id BIGINT NOT NULL, amount DECIMAL(10,2), region STRING, ts TIMESTAMP"


def test_versions_keep_field_ids_and_an_equal_schema_is_not_registered_twice(zk_client):
    assert zk_client.register_schema("orders", ddl.parse(V1)) == (1, True)
    assert zk_client.register_schema("orders", ddl.parse(V1)) == (1, False)
    assert zk_client.register_schema("orders", ddl.parse(V1 + ", note STRING")) == (2, True)
    version, latest = zk_client.schema_version("orders")
    assert version == 2 and [types.field_id(f) for f in latest] == [1, 2, 3, 4, 5]
    assert zk_client.schema_version("orders", 1)[1].equals(zk_client.schema_history("orders")[0], check_metadata=True)
    assert [len(s) for s in zk_client.schema_history("orders")] == [4, 5]
    # an Arrow schema as a client would give it (large strings, ms timestamps) is the same version 2
    arrow_v2 = pa.schema([pa.field("order_id", pa.int64(), False), ("amount", pa.decimal128(10, 2)),
                          ("region", pa.large_string()), ("ts", pa.timestamp("ms", tz="UTC")), ("note", pa.string())])
    assert zk_client.register_schema("orders", arrow_v2) == (2, False)


def test_an_incompatible_schema_is_refused_naming_the_rule_and_nothing_is_written(zk_client):
    zk_client.register_schema("orders", ddl.parse(V1))
    with pytest.raises(PolicyViolationError, match="not BACKWARD-compatible: .*column 'note' is NOT NULL"):
        zk_client.register_schema("orders", ddl.parse(V1 + ", note STRING NOT NULL"))
    with pytest.raises(PolicyViolationError, match="FULL: version 1 cannot read.*column 'order_id' is NOT NULL"):
        zk_client.register_schema("orders", ddl.parse("amount DECIMAL(10,2), region STRING, ts TIMESTAMP"), "full")
    assert len(zk_client.schema_history("orders")) == 1
    assert zk_client.register_schema("orders", ddl.parse(V1 + ", note STRING NOT NULL"), "NONE") == (2, True)
    with pytest.raises(InvalidConfigError, match="'SOMETIMES' is not one of"):
        zk_client.register_schema("orders", ddl.parse(V1), "SOMETIMES")


def test_a_dry_run_says_the_version_it_would_get_and_writes_nothing(zk_client):
    assert zk_client.register_schema("orders", ddl.parse(V1), dry_run=True) == (1, False)
    with pytest.raises(UnknownTopicOrPartitionError, match="topic 'orders' has no registered schema"):
        zk_client.schema_version("orders")
    zk_client.register_schema("orders", ddl.parse(V1))
    assert zk_client.register_schema("orders", ddl.parse(V1 + ", note STRING"), dry_run=True) == (2, False)
    with pytest.raises(UnknownTopicOrPartitionError, match="no schema version 2 \\(1 registered\\)"):
        zk_client.schema_version("orders", 2)


def test_a_registration_that_loses_the_race_retries_on_the_winners_version(zookeeper_server, zk_chroot, zk_client):
    """Session A reads version 1 and is held before its commit; B registers version 2; A's conditional
    commit fails and A registers version 3 over B's, with a new field id for its column."""
    slow, fast = (ZkClient(zookeeper_server.connect_string, chroot=zk_chroot).connect() for _ in range(2))
    try:
        zk_client.register_schema("orders", ddl.parse(V1))
        held, commits = threading.Event(), []
        commit_version = slow._commit_version

        def held_commit(*args):
            if not commits:
                held.wait(10)
            commits.append(commit_version(*args))
            return commits[-1]

        slow._commit_version = held_commit
        result: list = []
        racer = threading.Thread(target=lambda: result.append(slow.register_schema("orders", ddl.parse(V1 + ", a STRING"))))
        racer.start()
        assert fast.register_schema("orders", ddl.parse(V1 + ", b STRING")) == (2, True)
        held.set()
        racer.join(30)
        assert commits == [False, True] and result == [(3, True)]
        history = zk_client.schema_history("orders")
        assert [s.names[-1] for s in history] == ["ts", "b", "a"]
        assert [types.field_id(s.field(s.names[-1])) for s in history] == [4, 5, 6]
    finally:
        slow.close()
        fast.close()
    zk_client.delete_schemas("orders")
    assert zk_client.schema_history("orders") == []


def test_a_column_the_last_version_dropped_comes_back_as_a_new_column(zk_client):
    zk_client.register_schema("events", ddl.parse("a INT, b STRING"))
    zk_client.register_schema("events", ddl.parse("a INT"), "NONE")
    assert zk_client.register_schema("events", ddl.parse("a INT, b STRING"), "NONE") == (3, True)
    _, latest = zk_client.schema_version("events", 3)
    assert [types.field_id(f) for f in latest] == [1, 3]
