"""Typed topics in the storage engine and the leader's produce check: one schema per segment, segments that
stay plain Arrow IPC streams, the schema id under the CRC, followers rolling alike, recovery, and the
refusals of ``broker/typed_produce.py`` (everything named, nothing stored)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from ads_spark.broker.log.fetched import check_fetched_messages
from ads_spark.broker.typed_produce import conform_typed_batch
from ads_spark.errors import CorruptMessageError, InvalidRecordError
from ads_spark.protocol.records import NO_SCHEMA_ID, verify
from ads_spark.protocol.typed_records import (
    check_stored_schema, projected_schema, typed_produce_schema, typed_record_schema, user_columns,
)
from ads_spark.schemas import ddl, types
from tests.fixtures.logs import open_log, produce_batch, values_for
from tests.fixtures.typed import V1, V2, VERSIONS, segment_files, typed_batch

pytestmark = pytest.mark.timeout(30)

def test_a_new_version_rolls_the_segment_and_every_segment_opens_as_a_plain_stream(tmp_path):
    log = open_log(tmp_path / "t-0")
    first = log.append_as_leader(typed_batch(1, [1, 2, 3]), leader_epoch=0, now_ms=1)
    log.append_as_leader(typed_batch(1, [4]), leader_epoch=0, now_ms=1)
    second = log.append_as_leader(typed_batch(2, [5, 6]), leader_epoch=0, now_ms=1)
    assert (first.schema_id, second.schema_id) == (1, 2)
    files = segment_files(log.directory)
    assert len(files) == 2  # the empty Kafka-shaped segment was replaced, then version 2 rolled
    log.flush()
    opened = [ipc.open_stream(pa.memory_map(str(path))).read_all() for path in files]
    assert [check_stored_schema(table.schema) for table in opened] == [1, 2]
    assert opened[0].column("order_id").to_pylist() == [1, 2, 3, 4]
    assert opened[1].column("amount").to_pylist() == [7.5, 9.0]
    assert user_columns(opened[1].schema).equals(V2, check_metadata=True)  # field ids kept in the file
    for batch, header in log.read(0, max_bytes=1 << 20):
        verify(batch, header)
        assert check_stored_schema(batch.schema) == header.schema_id


def test_the_schema_id_is_under_the_crc(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(typed_batch(1, [1]), leader_epoch=0, now_ms=1)
    batch, header = log.read(0, max_bytes=1 << 20)[0]
    from dataclasses import replace
    with pytest.raises(CorruptMessageError, match="CRC mismatch"):
        verify(batch, replace(header, schema_id=2))


def test_recovery_keeps_each_segment_schema_and_appends_go_on(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(typed_batch(1, [1, 2]), leader_epoch=0, now_ms=1)
    log.append_as_leader(typed_batch(2, [3]), leader_epoch=0, now_ms=1)
    log.close()
    reopened = open_log(tmp_path / "t-0", recovery_point=0, clean_shutdown=False)
    assert [h.schema_id for _, h in reopened.read(0, max_bytes=1 << 20)] == [1, 2]
    reopened.append_as_leader(typed_batch(2, [4]), leader_epoch=1, now_ms=2)
    assert len(segment_files(reopened.directory)) == 2 and reopened.log_end_offset == 4


def test_a_follower_copies_the_messages_and_rolls_where_the_leader_did(tmp_path):
    leader = open_log(tmp_path / "leader" / "t-0")
    for version, ids in ((1, [1, 2]), (1, [3]), (2, [4, 5]), (2, [6])):
        leader.append_as_leader(typed_batch(version, ids), leader_epoch=0, now_ms=1)
    messages = leader.read(0, max_bytes=1 << 20, as_messages=True)
    follower = open_log(tmp_path / "follower" / "t-0")
    stored = {v: typed_record_schema(s, v) for v, s in VERSIONS.items()}
    checked = check_fetched_messages(messages, 0, stored.__getitem__)
    for version, schema in stored.items():
        follower.note_schema(version, schema)
    follower.append_encoded(checked, now_ms=1)
    leader.flush()
    follower.flush()
    assert [p.read_bytes() for p in segment_files(leader.directory)] == \
        [p.read_bytes() for p in segment_files(follower.directory)]


def test_a_follower_refuses_a_message_it_cannot_place(tmp_path):
    leader = open_log(tmp_path / "leader" / "t-0")
    leader.append_as_leader(typed_batch(1, [1]), leader_epoch=0, now_ms=1)
    messages = leader.read(0, max_bytes=1 << 20, as_messages=True)
    with pytest.raises(CorruptMessageError, match="knows no typed schema"):
        check_fetched_messages(messages, 0)
    wrong = typed_record_schema(V2, 2)
    with pytest.raises(CorruptMessageError, match="names another id"):
        check_fetched_messages(messages, 0, lambda _version: wrong)


def test_kafka_shaped_and_typed_batches_alternate_by_segment(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(produce_batch(values_for(0, 2)), leader_epoch=0, now_ms=1)
    log.append_as_leader(typed_batch(1, [1]), leader_epoch=0, now_ms=1)
    assert [h.schema_id for _, h in log.read(0, max_bytes=1 << 20)] == [NO_SCHEMA_ID, 1]
    assert len(segment_files(log.directory)) == 2


def test_projection_keeps_the_prefix_and_the_columns_asked_for():
    stored = typed_record_schema(V2, 2)
    assert projected_schema(stored, ["amount"]).names == ["timestamp", "key", "headers", "amount"]
    assert projected_schema(stored, ["amount", "order_id"], ["key"]).names == ["key", "amount", "order_id"]
    assert projected_schema(stored, None, []).names == ["order_id", "region", "amount"]
    with pytest.raises(Exception, match=r"\['nope'\] are not in schema version 2"):
        projected_schema(stored, ["nope"])


# ---- the leader's check ------------------------------------------------------------------------------------


class RegisteredVersions:
    """The broker's SchemaCache over a fixed set of versions (this layer's unit tests only)."""

    def __init__(self, versions):
        self.versions = versions

    def latest(self, topic, topic_id, at_least=0):
        version = max(self.versions)
        return version, self.versions[version]

    def user_schema(self, topic, topic_id, version):
        return self.versions[version]


def test_an_older_version_is_resolved_to_the_latest():
    conformed = conform_typed_batch(typed_batch(1, [1, 2]), "orders", "id", RegisteredVersions(VERSIONS))
    assert conformed.schema.equals(typed_produce_schema(V2, 2), check_metadata=True)
    assert conformed.column("amount").to_pylist() == [None, None]
    assert conformed.column("order_id").to_pylist() == [1, 2]


def test_every_offending_column_is_named_at_once():
    good = typed_batch(2, [1, 2])
    bad = pa.RecordBatch.from_arrays(
        [*good.columns[:3], pa.array([1, None], pa.int64()), good.column("region"), pa.array(["x", "y"]),
         pa.array([1, 2])],
        schema=pa.schema([*list(good.schema)[:5], pa.field("amount", pa.string()), pa.field("surprise", pa.int64())],
                         metadata=good.schema.metadata))
    with pytest.raises(InvalidRecordError) as refused:
        conform_typed_batch(bad, "orders", "id", RegisteredVersions(VERSIONS))
    text = str(refused.value)
    assert "topic 'orders' schema version 2" in text and "nothing was stored" in text
    for named in ("['surprise'] are not in the schema", "NOT NULL column 'order_id' holds 1 null(s)",
                  "column 'amount' is string, the schema says double"):
        assert named in text


def test_a_batch_without_a_version_or_with_an_unknown_one_is_refused():
    plain = produce_batch(values_for(0, 1))
    with pytest.raises(InvalidRecordError, match="must name its schema version"):
        conform_typed_batch(plain, "orders", "id", RegisteredVersions(VERSIONS))
    future = typed_batch(2, [1]).replace_schema_metadata({b"ads.schema_id": b"9"})
    with pytest.raises(InvalidRecordError, match="has no schema version 9"):
        conform_typed_batch(future, "orders", "id", RegisteredVersions(VERSIONS))


def test_a_version_the_latest_cannot_read_is_refused():
    v2_incompatible = types.with_field_ids(types.normalise(ddl.parse("order_id INT NOT NULL, region STRING")), V1)
    with pytest.raises(InvalidRecordError, match="latest schema version 2 cannot read version 1"):
        conform_typed_batch(typed_batch(1, [1]), "orders", "id", RegisteredVersions({1: V1, 2: v2_incompatible}))
