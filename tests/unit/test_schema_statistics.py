"""Per-batch statistics and batch skipping (ads_spark/schemas/statistics.py): a skipped batch never holds a
matching row (checked against the rows themselves for every predicate kind), and the stored form reads
back as the column's Python values."""

from __future__ import annotations

import datetime
import decimal
import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from ads_spark.schemas import statistics
from ads_spark.schemas.statistics import ColumnStats, Predicate

UTC = datetime.timezone.utc


def batch_of(**columns) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(columns)


def test_bounds_and_null_counts_per_column():
    batch = pa.RecordBatch.from_arrays(
        [pa.array([5, None, 2]), pa.array(["b", "a", None]), pa.array([None, None, None], pa.int32()),
         pa.array([decimal.Decimal("1.50"), decimal.Decimal("0.25"), None], pa.decimal128(6, 2)),
         pa.array([datetime.datetime(2026, 1, 2, tzinfo=UTC), None, datetime.datetime(2026, 1, 1, tzinfo=UTC)],
                  pa.timestamp("us", tz="UTC"))],
        names=["n", "s", "empty", "price", "ts"])
    stats = statistics.compute(batch, ["n", "s", "empty", "price", "ts", "absent"])
    assert stats["n"] == ColumnStats(1, 3, 2, 5)
    assert stats["s"] == ColumnStats(1, 3, "a", "b")
    assert stats["empty"] == ColumnStats(3, 3, None, None)
    assert stats["price"] == ColumnStats(1, 3, decimal.Decimal("0.25"), decimal.Decimal("1.50"))
    assert stats["ts"].min == datetime.datetime(2026, 1, 1, tzinfo=UTC)
    assert "absent" not in stats
    assert statistics.from_metadata(statistics.to_metadata(stats), batch.schema) == stats


def test_no_bounds_where_they_would_not_be_exact():
    batch = batch_of(f=[1.0, float("nan")], long=["x" * (statistics.VALUE_BYTES_MAX + 1), "a"], short=["a", "b"])
    stats = statistics.compute(batch, ["f", "long", "short"])
    assert (stats["f"].min, stats["long"].max) == (None, None) and stats["short"].max == "b"
    # without bounds only null checks can skip
    assert statistics.may_match(stats, [Predicate(">", "f", 100.0)])
    assert not statistics.may_match(stats, [Predicate("is_null", "long")])


PREDICATES = [Predicate("=", "n", 7), Predicate("<", "n", 3), Predicate("<=", "n", 3), Predicate(">", "n", 90),
              Predicate(">=", "n", 90), Predicate("in", "n", [1, 50, None]), Predicate("is_null", "n"),
              Predicate("is_not_null", "n"), Predicate("starts_with", "s", "k1"), Predicate("=", "s", "k42"),
              Predicate(">", "s", "k9"), Predicate("=", "n", "not a number")]


def rows_match(batch: pa.RecordBatch, p: Predicate) -> bool:
    """The predicate evaluated on the rows (Arrow's kernels): the ground truth a skip must respect."""
    column = batch.column(batch.schema.get_field_index(p.column))
    if p.kind == "is_null":
        return column.null_count > 0
    if p.kind == "is_not_null":
        return column.null_count < len(column)
    if p.kind == "starts_with":
        return bool(pc.any(pc.starts_with(column, p.value)).as_py())
    if p.kind == "in":
        return bool(pc.any(pc.is_in(column, pa.array([v for v in p.value if v is not None]))).as_py())
    try:
        scalar = pa.scalar(p.value, column.type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return False
    compare = {"=": pc.equal, "<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal}[p.kind]
    return bool(pc.any(compare(column, scalar)).as_py())


@pytest.mark.parametrize("seed", range(40))
def test_a_skipped_batch_never_holds_a_matching_row(seed):
    rng = random.Random(seed)
    size = rng.randint(1, 20)
    low = rng.randint(0, 95)
    numbers = [rng.choice([None, rng.randint(low, low + rng.randint(0, 10))]) for _ in range(size)]
    strings = [rng.choice([None, f"k{rng.randint(low, low + 15)}"]) for _ in range(size)]
    batch = pa.RecordBatch.from_arrays([pa.array(numbers, pa.int64()), pa.array(strings, pa.string())],
                                       names=["n", "s"])
    stats = statistics.from_metadata(statistics.to_metadata(statistics.compute(batch, ["n", "s"])), batch.schema)
    skipped = 0
    for predicate in PREDICATES:
        if not statistics.may_match(stats, [predicate]):
            skipped += 1
            assert not rows_match(batch, predicate), (seed, predicate, numbers, strings)
    assert skipped < len(PREDICATES)


def test_predicates_are_conjunctive_and_unknowns_keep_the_batch():
    stats = statistics.compute(batch_of(n=[10, 20], ts=[1, 2]), ["n"])
    assert statistics.may_match(stats, [Predicate(">=", "n", 15), Predicate("<=", "n", 25)])
    assert not statistics.may_match(stats, [Predicate(">=", "n", 15), Predicate(">", "n", 20)])
    assert statistics.may_match(stats, [Predicate("=", "ts", 99)])  # no statistics for ts
    assert statistics.may_match(stats, [Predicate("not", "n", 10)])  # a kind it does not know
    assert statistics.may_match({}, [Predicate("=", "n", 99)])
    assert not statistics.may_match(statistics.compute(batch_of(n=pa.array([None, None], pa.int64())), ["n"]),
                                    [Predicate("=", "n", 1)])


def test_a_reader_of_another_version_reads_only_the_columns_it_has():
    stats = statistics.compute(batch_of(a=[1, 2], gone=["x", "y"]), ["a", "gone"])
    reader = pa.schema([("a", pa.int64()), ("added", pa.string())])
    assert set(statistics.from_metadata(statistics.to_metadata(stats), reader)) == {"a"}
    assert statistics.from_metadata({}, reader) == {}
