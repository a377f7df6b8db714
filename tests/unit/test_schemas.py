"""Typed topics' schema rules (ads_spark/schemas): the DDL subset, the stored form of Arrow types, stable
field ids, the registries' compatibility modes and reading a batch under another version."""

from __future__ import annotations

import decimal

import pyarrow as pa
import pytest

from ads_spark.errors import InvalidConfigError
from ads_spark.schemas import compatibility, ddl, types

ISSUE_EXAMPLE = "order_id BIGINT NOT NULL, amount DECIMAL(10,2), region STRING, ts TIMESTAMP"


# ---- DDL ------------------------------------------------------------------------------------------------


def test_the_issue_example_parses_to_sparks_arrow_form():
    schema = ddl.parse(ISSUE_EXAMPLE)
    assert [(f.name, f.type, f.nullable) for f in schema] == [
        ("order_id", pa.int64(), False), ("amount", pa.decimal128(10, 2), True), ("region", pa.string(), True),
        ("ts", pa.timestamp("us", tz="UTC"), True)]


def test_every_spelling_of_the_subset_and_a_round_trip_through_to_ddl():
    text = ("a tinyint, b SMALLINT, c Int, d integer, e LONG, f real, g DOUBLE, h dec, i NUMERIC(5), "
            "j VARCHAR(3), k CHAR(1), l BINARY, m DATE, n TIMESTAMP_LTZ, o TIMESTAMP_NTZ, p BOOLEAN, "
            r"`we``ird name`: STRING NOT NULL COMMENT 'it\'s a comment'")
    schema = ddl.parse(text)
    assert [f.type for f in schema] == [
        pa.int8(), pa.int16(), pa.int32(), pa.int32(), pa.int64(), pa.float32(), pa.float64(),
        pa.decimal128(10, 0), pa.decimal128(5, 0), pa.string(), pa.string(), pa.binary(), pa.date32(),
        pa.timestamp("us", tz="UTC"), pa.timestamp("us"), pa.bool_(), pa.string()]
    assert schema.field(16).name == "we`ird name" and not schema.field(16).nullable
    assert schema.field(16).metadata[ddl.COMMENT_KEY] == b"it's a comment"
    assert ddl.parse(ddl.to_ddl(schema)).equals(schema, check_metadata=True)


@pytest.mark.parametrize("text, named", [
    ("a INT, b MAP<STRING, INT>", "unsupported type 'MAP'"),
    ("a INT b INT", "',' expected at character 6"),
    ("a DECIMAL(40, 2)", "DECIMAL(40, 2)"),
    ("a DECIMAL(5, 7)", "DECIMAL(5, 7)"),
    ("a INT, a STRING", "column 'a' appears twice"),
    ("a INT NOT", "NULL expected after NOT"),
    ("a", "the type of column 'a' expected"),
    ("", "at least one column"),
    ("a INT; DROP", "unexpected ';"),
])
def test_a_bad_ddl_is_refused_naming_the_problem(text, named):
    with pytest.raises(InvalidConfigError, match=named.replace("(", r"\(").replace(")", r"\)")):
        ddl.parse(text)


# ---- stored form ----------------------------------------------------------------------------------------


def test_lossless_differences_are_normalised():
    declared = pa.schema([("a", pa.uint8()), ("b", pa.uint32()), ("c", pa.large_string()), ("d", pa.large_binary()),
                          ("e", pa.float16()), ("f", pa.timestamp("ms")), ("g", pa.timestamp("s", tz="Europe/Paris")),
                          ("h", pa.decimal256(20, 2))])
    assert [f.type for f in types.normalise(declared)] == [
        pa.int16(), pa.int64(), pa.string(), pa.binary(), pa.float32(), pa.timestamp("us"),
        pa.timestamp("us", tz="UTC"), pa.decimal128(20, 2)]


@pytest.mark.parametrize("arrow_type, reason", [
    (pa.dictionary(pa.int32(), pa.string()), "dictionary-encoded"),
    (pa.list_(pa.int32()), "nested types"),
    (pa.struct([("x", pa.int32())]), "nested types"),
    (pa.uint64(), "uint64"),
    (pa.timestamp("ns"), "nanoseconds"),
    (pa.decimal256(50, 2), "precision above 38"),
    (pa.duration("s"), "no stored form"),
])
def test_other_types_are_refused_naming_column_and_type(arrow_type, reason):
    with pytest.raises(InvalidConfigError, match=f"column 'x': type .* is not accepted in a typed topic: .*{reason}"):
        types.normalise(pa.schema([("x", arrow_type)]))


def test_a_column_dropped_by_the_last_version_and_added_again_is_a_new_column():
    v1 = types.with_field_ids(ddl.parse("a INT, b STRING"), None)
    v2 = types.with_field_ids(ddl.parse("a INT"), v1, types.highest_field_id([v1]))  # b (id 2) dropped
    v3 = types.with_field_ids(ddl.parse("a INT, b STRING"), v2, types.highest_field_id([v1, v2]))
    assert [types.field_id(f) for f in v3] == [1, 3]


@pytest.mark.parametrize("name", types.RESERVED_COLUMNS)
def test_reserved_column_names_are_refused(name):
    with pytest.raises(InvalidConfigError, match=f"column '{name}' has a reserved name"):
        types.normalise(pa.schema([("amount", pa.int64()), (name, pa.string())]))


def test_field_ids_stay_with_their_column_and_new_columns_take_the_next():
    v1 = types.with_field_ids(ddl.parse("a INT, b STRING, c DOUBLE"), None)
    v2 = types.with_field_ids(ddl.parse("a INT, c DOUBLE, d DATE"), v1)  # b dropped, d added
    v3 = types.with_field_ids(ddl.parse("b STRING, a INT, c DOUBLE, d DATE"), v2)  # b back: a new column
    ids = lambda schema: {f.name: types.field_id(f) for f in schema}  # noqa: E731
    assert ids(v1) == {"a": 1, "b": 2, "c": 3}
    assert ids(v2) == {"a": 1, "c": 3, "d": 4}
    assert ids(v3) == {"b": 5, "a": 1, "c": 3, "d": 4}


# ---- compatibility -----------------------------------------------------------------------------------


def versions(*ddls: str) -> list[pa.Schema]:
    out: list[pa.Schema] = []
    for text in ddls:
        out.append(types.with_field_ids(ddl.parse(text), out[-1] if out else None))
    return out


V1 = "id BIGINT NOT NULL, name STRING, qty INT"


@pytest.mark.parametrize("new_ddl, compatible_under", [
    (V1 + ", note STRING", {"BACKWARD", "FORWARD", "FULL"}),                       # a nullable column added
    (V1 + ", note STRING NOT NULL", {"FORWARD"}),                                   # added NOT NULL: old data lacks it
    ("id BIGINT NOT NULL, qty INT", {"BACKWARD", "FORWARD", "FULL"}),              # a nullable column dropped
    ("name STRING, qty INT", {"BACKWARD"}),                                         # a NOT NULL column dropped
    ("id BIGINT NOT NULL, name STRING, qty BIGINT", {"BACKWARD"}),                  # widened: old readers cannot
    ("id BIGINT NOT NULL, name STRING, qty SMALLINT", {"FORWARD"}),                 # narrowed
    ("id BIGINT NOT NULL, name BINARY, qty INT", set()),                            # string -> binary
    ("id BIGINT, name STRING, qty INT", {"BACKWARD"}),                              # NOT NULL relaxed
])
def test_each_mode_against_the_latest_version(new_ddl, compatible_under):
    registered = versions(V1)
    new = types.with_field_ids(ddl.parse(new_ddl), registered[-1])
    for mode in ("BACKWARD", "FORWARD", "FULL"):
        problems = compatibility.check(mode, new, registered)
        assert (not problems) == (mode in compatible_under), (mode, problems)
    assert compatibility.check("NONE", new, registered) == []


def test_transitive_modes_check_every_version_and_name_it():
    # v2 widened qty (registered under NONE, say); v3 keeps v2's shape
    registered = versions("qty INT", "qty BIGINT")
    new = types.with_field_ids(ddl.parse("qty BIGINT"), registered[-1])
    assert compatibility.check("FORWARD", new, registered) == []
    problems = compatibility.check("FORWARD_TRANSITIVE", new, registered)
    assert problems == ["FORWARD_TRANSITIVE: version 1 cannot read the new schema's data: column 'qty' is int32, "
                        "written as int64: not a lossless widening"]


def test_an_unknown_mode_is_refused_with_the_modes_listed():
    with pytest.raises(InvalidConfigError, match="'sideways' is not one of BACKWARD, BACKWARD_TRANSITIVE"):
        compatibility.check_mode("sideways")
    assert compatibility.check_mode("full_transitive") == "FULL_TRANSITIVE"


@pytest.mark.parametrize("writer, reader, widens", [
    (pa.int8(), pa.int64(), True), (pa.int64(), pa.int32(), False), (pa.int32(), pa.float64(), True),
    (pa.int64(), pa.float64(), False), (pa.float32(), pa.float64(), True),
    (pa.decimal128(10, 2), pa.decimal128(12, 2), True), (pa.decimal128(10, 2), pa.decimal128(10, 3), False),
    (pa.decimal128(10, 2), pa.decimal128(11, 3), True), (pa.string(), pa.binary(), False),
])
def test_lossless_widenings(writer, reader, widens):
    assert compatibility.widens(writer, reader) is widens


# ---- reading under another version ----------------------------------------------------------------------


def test_a_batch_of_an_older_version_reads_under_the_newer_one_column_by_column():
    v1, v2 = versions("id BIGINT NOT NULL, qty INT, gone STRING, price DECIMAL(6,2)",
                      "id BIGINT NOT NULL, qty BIGINT, price DECIMAL(8,2), note STRING")
    batch = pa.RecordBatch.from_arrays(
        [pa.array([1, 2], pa.int64()), pa.array([3, None], pa.int32()), pa.array(["x", "y"]),
         pa.array([decimal.Decimal("1.50"), None], pa.decimal128(6, 2))], schema=v1)
    read = compatibility.resolve(batch, v1, v2)
    assert read.schema.equals(v2, check_metadata=True)
    assert read.to_pydict() == {"id": [1, 2], "qty": [3, None], "price": [decimal.Decimal("1.50"), None],
                                "note": [None, None]}
    # the unchanged column is the same buffer: no copy
    assert read.column(0).buffers()[1].address == batch.column(0).buffers()[1].address


def test_a_batch_the_reader_cannot_read_is_refused_naming_the_columns():
    v1, v2 = versions("id BIGINT", "id INT, extra STRING NOT NULL")
    batch = pa.RecordBatch.from_arrays([pa.array([1], pa.int64())], schema=v1)
    with pytest.raises(InvalidConfigError, match="column 'id' is int32, written as int64.*column 'extra' is NOT NULL"):
        compatibility.resolve(batch, v1, v2)
