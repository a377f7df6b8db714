"""Per-batch statistics of typed topics, wired (issue #26): the header field under the CRC and in the JSON
header, old headers byte for byte unchanged, the leader's log computing them from its config, followers
copying them, a read's filters on the wire (round trip and refusals), ``TypedRead.may_match`` across
versions by field id, and the ``schema.statistics.columns`` rules."""

from __future__ import annotations

import datetime
import decimal
from dataclasses import replace

import pyarrow as pa
import pytest

from ads_spark.broker.log.config import LogConfig
from ads_spark.broker.log.fetched import check_fetched_messages
from ads_spark.broker.typed_fetch import TypedRead
from ads_spark.config import validate_topic_config
from ads_spark.config_schemas import STATISTICS_COLUMNS_MAX, check_statistics_columns
from ads_spark.errors import CorruptMessageError, InvalidConfigError, InvalidRequestError
from ads_spark.protocol import wire
from ads_spark.protocol.records import NO_STATS, BatchHeader, verify
from ads_spark.protocol.typed_records import typed_record_schema
from ads_spark.schemas import ddl, statistics, types
from ads_spark.schemas.statistics import Predicate, predicate_to_wire, predicates_from_wire
from tests.fixtures.logs import open_log, produce_batch
from tests.fixtures.typed import V1, V2, VERSIONS, segment_files, typed_batch

pytestmark = pytest.mark.timeout(30)

STATS_CONFIG = LogConfig(statistics_columns=("order_id", "region"))


def test_a_header_with_statistics_round_trips_and_they_are_under_the_crc(tmp_path):
    log = open_log(tmp_path / "t-0", STATS_CONFIG)
    log.append_as_leader(typed_batch(1, [5, 3, 9]), leader_epoch=0, now_ms=1)
    batch, header = log.read(0, max_bytes=1 << 20)[0]
    found = statistics.from_metadata(header.to_metadata(), V1)
    assert found["order_id"] == statistics.ColumnStats(0, 3, 3, 9)
    assert (found["region"].min, found["region"].max) == ("r3", "r9")
    assert BatchHeader.from_metadata(header.to_metadata()) == header
    assert wire.header_from_json(wire.header_to_json(header)) == header
    verify(batch, header)
    with pytest.raises(CorruptMessageError, match="CRC mismatch"):
        verify(batch, replace(header, stats=header.stats.replace("9", "8")))


def test_a_header_without_statistics_keeps_its_bytes_and_crc():
    header = BatchHeader(10, 3, 2, 1234, schema_id=1, crc=77)
    assert "ads.stats" not in header.to_metadata() and "stats" not in wire.header_to_json(header)
    # The CRC's fields as they were before statistics existed.
    assert header._fields_without_crc() == b"10,3,2,1234,0,-1,-1,-1,s1"
    assert BatchHeader.from_metadata(header.to_metadata()).stats == NO_STATS


def test_the_leader_keeps_statistics_only_of_typed_batches_and_configured_columns(tmp_path):
    log = open_log(tmp_path / "t-0", STATS_CONFIG)
    kafka_header = log.append_as_leader(produce_batch([b"a"]), leader_epoch=0, now_ms=1)
    assert kafka_header.stats == NO_STATS
    typed_log = open_log(tmp_path / "u-0", LogConfig(statistics_columns=("amount",)))
    assert typed_log.append_as_leader(typed_batch(1, [1]), leader_epoch=0, now_ms=1).stats == NO_STATS  # v1 lacks it
    with_amount = typed_log.append_as_leader(typed_batch(2, [2, 4]), leader_epoch=0, now_ms=1)
    assert statistics.from_metadata(with_amount.to_metadata(), V2)["amount"].max == 6.0
    assert open_log(tmp_path / "w-0").append_as_leader(typed_batch(1, [1]), leader_epoch=0, now_ms=1).stats == NO_STATS


def test_a_statistic_equal_to_the_crc_slot_is_left_out_and_the_batch_is_whole(tmp_path):
    log = open_log(tmp_path / "t-0", STATS_CONFIG)
    header = log.append_as_leader(typed_batch(1, [1], region=pa.array(["#crc-slot#"])), leader_epoch=0, now_ms=1)
    assert header.stats == NO_STATS
    batch, stored = log.read(0, max_bytes=1 << 20)[0]
    verify(batch, stored)


def test_followers_copy_statistics_and_recovery_reads_them_back(tmp_path):
    leader = open_log(tmp_path / "leader" / "t-0", STATS_CONFIG)
    for version, ids in ((1, [1, 2]), (2, [3, 4])):
        leader.append_as_leader(typed_batch(version, ids), leader_epoch=0, now_ms=1)
    messages = leader.read(0, max_bytes=1 << 20, as_messages=True)
    follower = open_log(tmp_path / "follower" / "t-0")  # no statistics config: it copies, never computes
    stored = {v: typed_record_schema(s, v) for v, s in VERSIONS.items()}
    for version, schema in stored.items():
        follower.note_schema(version, schema)
    follower.append_encoded(check_fetched_messages(messages, 0, stored.__getitem__), now_ms=1)
    leader.flush()
    follower.flush()
    assert [p.read_bytes() for p in segment_files(leader.directory)] == \
        [p.read_bytes() for p in segment_files(follower.directory)]
    follower.close()
    reopened = open_log(tmp_path / "follower" / "t-0", recovery_point=0, clean_shutdown=False)
    assert [h.stats for _, h in reopened.read(0, max_bytes=1 << 20)] == [h.stats for _, h in messages]
    assert all(h.stats for _, h in messages)


# ---- filters on the wire ---------------------------------------------------------------------------------

WIRE_SCHEMA = pa.schema([("i", pa.int64()), ("s", pa.string()), ("b", pa.binary()), ("d", pa.decimal128(10, 2)),
                         ("day", pa.date32()), ("ts", pa.timestamp("us", "UTC")), ("f", pa.float64())])


@pytest.mark.parametrize("predicate", [
    Predicate(">=", "i", 80), Predicate("=", "s", "x"), Predicate("<", "b", b"\x00\xff"),
    Predicate("<=", "d", decimal.Decimal("12.50")), Predicate(">", "day", datetime.date(2024, 2, 29)),
    Predicate("=", "ts", datetime.datetime(2024, 1, 1, 12, tzinfo=datetime.timezone.utc)),
    Predicate("in", "i", [1, 2, 3]), Predicate("in", "d", [decimal.Decimal("1.00"), None]),
    Predicate("is_null", "f"), Predicate("is_not_null", "s"), Predicate("starts_with", "s", "ab"),
    Predicate("<", "f", 1.5)])
def test_a_predicate_round_trips_through_its_wire_form(predicate):
    sent = wire.loads(wire.dumps({"filters": [predicate_to_wire(predicate)]}), "test")["filters"]
    assert predicates_from_wire(sent, WIRE_SCHEMA) == [predicate]


@pytest.mark.parametrize("item, problem", [
    ({"kind": "=", "column": "nope", "value": 1}, "names column 'nope', which the read's schema does not have"),
    ({"kind": "like", "column": "s", "value": "a%"}, "unknown kind 'like'"),
    ({"kind": "in", "column": "i", "value": 3}, "'in' takes a list"),
    ({"kind": "in", "column": "i", "value": list(range(statistics.IN_VALUES_MAX + 1))}, "'in' takes a list"),
    ({"kind": "=", "column": "d", "value": {"text": "twelve"}}, "bad value"),
    ({"kind": "=", "column": "b", "value": {"b64": "***"}}, "bad value"),
    ({"kind": "=", "column": "i", "value": {"text": "1"}}, "is for decimal, date and timestamp columns"),
    ({"kind": "=", "column": "i", "value": [1]}, "a JSON scalar or a tagged value"),
    ({"column": "i"}, "unknown kind None"),
    ("i >= 3", "must be an object"),
])
def test_a_bad_filter_is_refused_naming_the_problem(item, problem):
    with pytest.raises(InvalidRequestError, match=problem):
        predicates_from_wire([item], WIRE_SCHEMA)


def test_a_typed_read_request_bounds_its_filters():
    from ads_spark.protocol import request_schemas as rs
    ok = {"topic": "t", "version": 1, "filters": [predicate_to_wire(Predicate("in", "i", [1, 2]))]}
    assert rs.check(rs.TYPED_READ, ok, "fetch.typed")
    too_many = {"topic": "t", "version": 1, "filters": [{"kind": "is_null", "column": "i"}] * 65}
    with pytest.raises(InvalidRequestError, match="filters: must have 0 to 64 items"):
        rs.check(rs.TYPED_READ, too_many, "fetch.typed")
    with pytest.raises(InvalidRequestError, match="kind: must be one of"):
        rs.check(rs.TYPED_READ, {"topic": "t", "version": 1, "filters": [{"kind": "~", "column": "i"}]}, "fetch")


# ---- skipping in a typed read ----------------------------------------------------------------------------

class _Schemas:
    """The SchemaCache calls TypedRead makes, over fixed versions."""

    def __init__(self, versions: dict[int, pa.Schema]):
        self.versions = versions

    def user_schema(self, topic: str, topic_id: str, version: int) -> pa.Schema:
        return self.versions[version]


def _header(version: int, stats: dict) -> BatchHeader:
    return BatchHeader(0, 1, 0, 0, schema_id=version, stats=statistics.to_metadata(stats)[statistics.METADATA_KEY])


def test_a_read_skips_by_statistics_matching_columns_of_other_versions_by_field_id():
    v1 = types.with_field_ids(types.normalise(ddl.parse("order_id BIGINT NOT NULL, note STRING, x INT")), None)
    v2 = types.with_field_ids(types.normalise(ddl.parse("order_id BIGINT NOT NULL, x INT")), v1)  # note dropped
    v3 = types.with_field_ids(types.normalise(ddl.parse("order_id BIGINT NOT NULL, x INT, note STRING")), v2)
    assert types.field_id(v3.field("note")) != types.field_id(v1.field("note"))  # a new note
    schemas = _Schemas({1: v1, 2: v2, 3: v3})
    read = TypedRead("t", "id", 3, ["order_id"], schemas, [predicate_to_wire(Predicate(">=", "order_id", 100))])
    low, high = statistics.ColumnStats(0, 10, 0, 9), statistics.ColumnStats(0, 10, 95, 104)
    assert not read.may_match(_header(3, {"order_id": low})) and read.may_match(_header(3, {"order_id": high}))
    assert not read.may_match(_header(1, {"order_id": low}))  # same field id: its statistics apply
    assert read.may_match(BatchHeader(0, 1, 0, 0, schema_id=3))  # no statistics: always sent
    assert read.may_match(replace(_header(3, {}), stats="{not json"))
    # v1's note is not v3's note (another field id): its statistics say nothing of the rows v3 reads as null
    nulls = TypedRead("t", "id", 3, None, schemas, [predicate_to_wire(Predicate("is_null", "note"))])
    assert nulls.may_match(_header(1, {"note": statistics.ColumnStats(0, 10, "a", "b")}))
    assert not nulls.may_match(_header(3, {"note": statistics.ColumnStats(0, 10, "a", "b")}))
    with pytest.raises(InvalidRequestError, match="names column 'missing'"):
        TypedRead("t", "id", 3, None, schemas, [{"kind": "is_null", "column": "missing"}])


# ---- schema.statistics.columns -----------------------------------------------------------------------------

def test_statistics_columns_are_checked_against_the_topic_and_its_schema():
    assert validate_topic_config({"schema.type": "arrow", "schema.statistics.columns": "order_id, region"}, 1) == {
        "schema.type": "arrow", "schema.statistics.columns": "order_id,region"}
    with pytest.raises(InvalidConfigError, match="'schema.statistics.columns' applies to typed topics only"):
        validate_topic_config({"schema.statistics.columns": "value"}, 1)
    with pytest.raises(InvalidConfigError, match="names a column twice"):
        validate_topic_config({"schema.type": "arrow", "schema.statistics.columns": "a,a"}, 1)
    many = ",".join(f"c{i}" for i in range(STATISTICS_COLUMNS_MAX + 1))
    with pytest.raises(InvalidConfigError, match=f"at most {STATISTICS_COLUMNS_MAX}"):
        validate_topic_config({"schema.type": "arrow", "schema.statistics.columns": many}, 1)
    check_statistics_columns("t", {"schema.statistics.columns": "order_id"}, V1)
    check_statistics_columns("t", {}, V1)
    with pytest.raises(InvalidConfigError, match=r"topic 't' names column\(s\) \['amount', 'x'\]"):
        check_statistics_columns("t", {"schema.statistics.columns": "order_id,amount,x"}, V1)
