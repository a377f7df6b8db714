"""Per-batch column statistics of typed topics and the batch-skipping rule, pure (issue #26).

A stored batch may carry, for chosen columns, its minimum, maximum and null count (``compute``: Arrow's
vectorised min/max, no Python per row). A reader's filters are conjunctive predicates of the kinds
Spark's Python data source pushes (``Predicate``: =, <, <=, >, >=, IN, IS NULL, IS NOT NULL, STARTS WITH);
``may_match`` says whether a batch can hold a row satisfying all of them. The rule is conservative: a
column without statistics, a value of another type, or a kind it does not know keeps the batch, so a
skipped batch never held a matching row and readers re-check the rows of the batches they get. Offsets
are never filtered: a reader that skips a batch still advances past it.

Where they are used: the leader computes them for ``schema.statistics.columns`` (``broker/log/partition_log.py``)
into each batch's header; a typed read's ``filters`` (``predicate_to_wire`` / ``predicates_from_wire``, the
one wire form, built by the Spark side) reach ``broker/typed_fetch.py``, and the broker does not send a batch
``may_match`` rules out (``broker/rpc/data_handlers.py``). On the wire, a value the column cannot be compared
with (text for a number, a boolean for a date, none for ``=``) is refused by name (``_check_comparable``).

Statistics are kept only where they are exact bounds: a float column holding NaN has none (NaN orders
after every number in Arrow and before none in Spark), and a string or binary column whose minimum or
maximum is longer than ``VALUE_BYTES_MAX`` keeps neither (a truncated maximum is not an upper bound).
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from ads_spark.errors import InvalidRequestError

VALUE_BYTES_MAX = 64
IN_VALUES_MAX = 1024  # values of one "in" predicate on the wire (request_schemas.TYPED_READ bounds it too)
METADATA_KEY = "ads.stats"
KINDS = ("=", "<", "<=", ">", ">=", "in", "is_null", "is_not_null", "starts_with")


@dataclass(frozen=True)
class ColumnStats:
    null_count: int
    row_count: int
    min: Any = None  # None: not kept (all null, NaN, too long) -- the column then skips on nulls only
    max: Any = None


@dataclass(frozen=True)
class Predicate:
    kind: str  # one of KINDS
    column: str
    value: Any = None  # a list for "in"


def compute(batch: pa.RecordBatch, columns: Sequence[str]) -> dict[str, ColumnStats]:
    """Statistics of ``columns`` of ``batch`` (columns it does not have are left out)."""
    out = {}
    for name in columns:
        index = batch.schema.get_field_index(name)
        if index < 0:
            continue
        array = batch.column(index)
        low, high = _bounds(array)
        out[name] = ColumnStats(array.null_count, len(array), low, high)
    return out


def _bounds(array: pa.Array) -> tuple[Any, Any]:
    if array.null_count == len(array) or not _orderable(array.type):
        return None, None
    if pa.types.is_floating(array.type) and pc.any(pc.is_nan(array)).as_py():
        return None, None
    extremes = pc.min_max(array)
    low, high = extremes["min"].as_py(), extremes["max"].as_py()
    if isinstance(low, (str, bytes)) and max(_size(low), _size(high)) > VALUE_BYTES_MAX:
        return None, None
    return low, high


def _orderable(arrow_type: pa.DataType) -> bool:
    return (pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type) or pa.types.is_decimal(arrow_type)
            or pa.types.is_string(arrow_type) or pa.types.is_binary(arrow_type) or pa.types.is_date(arrow_type)
            or pa.types.is_timestamp(arrow_type) or pa.types.is_boolean(arrow_type))


def _size(value: str | bytes) -> int:
    return len(value.encode() if isinstance(value, str) else value)


# ---- batch skipping -------------------------------------------------------------------------------------


def may_match(stats: Mapping[str, ColumnStats], predicates: Sequence[Predicate]) -> bool:
    """False only when no row of the batch can satisfy every predicate (see the module)."""
    return all(_may_match_one(stats.get(p.column), p) for p in predicates)


def _may_match_one(column: ColumnStats | None, p: Predicate) -> bool:
    if column is None:
        return True
    if p.kind == "is_null":
        return column.null_count > 0
    if p.kind == "is_not_null":
        return column.null_count < column.row_count
    if column.null_count == column.row_count:
        return False  # every value null: no comparison, IN or prefix holds (SQL's three-valued logic)
    if column.min is None or column.max is None:
        return True
    try:
        return _compare(column.min, column.max, p)
    except TypeError:  # a value of another type than the column's: keep the batch, the rows decide
        return True


def _compare(low: Any, high: Any, p: Predicate) -> bool:
    value = p.value
    if p.kind == "=":
        return low <= value <= high
    if p.kind == "<":
        return low < value
    if p.kind == "<=":
        return low <= value
    if p.kind == ">":
        return high > value
    if p.kind == ">=":
        return high >= value
    if p.kind == "in":
        return any(v is not None and low <= v <= high for v in value)
    if p.kind == "starts_with" and isinstance(low, str):
        # every string with this prefix lies in [prefix, prefix + the largest code point)
        return high >= value and low[:len(value)] <= value
    return True


# ---- stored form ------------------------------------------------------------------------------------------


def to_metadata(stats: Mapping[str, ColumnStats]) -> dict[str, str]:
    """The statistics as batch metadata (one JSON value under ``METADATA_KEY``)."""
    plain = {name: [s.null_count, s.row_count, _plain(s.min), _plain(s.max)] for name, s in sorted(stats.items())}
    return {METADATA_KEY: json.dumps(plain, separators=(",", ":"))}


def from_metadata(metadata: Mapping[str, str], schema: pa.Schema) -> dict[str, ColumnStats]:
    """``to_metadata``'s inverse, values read back as ``schema``'s columns' Python types; columns the schema
    does not have are dropped (a later version's reader)."""
    raw = metadata.get(METADATA_KEY)
    if raw is None:
        return {}
    out = {}
    for name, (nulls, rows, low, high) in json.loads(raw).items():
        index = schema.get_field_index(name)
        if index < 0:
            continue
        arrow_type = schema.field(index).type
        out[name] = ColumnStats(int(nulls), int(rows), _typed(low, arrow_type), _typed(high, arrow_type))
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"b64": base64.b64encode(value).decode()}
    if isinstance(value, (decimal.Decimal, datetime.date, datetime.datetime)):
        return {"text": value.isoformat() if not isinstance(value, decimal.Decimal) else str(value)}
    return value


def _typed(value: Any, arrow_type: pa.DataType) -> Any:
    if isinstance(value, dict) and "b64" in value:
        return base64.b64decode(value["b64"])
    if isinstance(value, dict) and "text" in value:
        text = value["text"]
        if pa.types.is_decimal(arrow_type):
            return decimal.Decimal(text)
        if pa.types.is_timestamp(arrow_type):
            return datetime.datetime.fromisoformat(text)
        if pa.types.is_date(arrow_type):
            return datetime.date.fromisoformat(text)
    return value


# ---- wire form of a read's filters ------------------------------------------------------------------------


def predicate_to_wire(p: Predicate) -> dict[str, Any]:
    """``{"kind", "column", "value"}`` (JSON; ``value`` absent for IS [NOT] NULL, a list for IN): what a typed
    read's ``filters`` carry. Values take the stored statistics' form (bytes, decimals, dates, timestamps as
    ``{"b64"}`` / ``{"text"}``), so ``predicates_from_wire`` reads them back as the column's Python type."""
    if p.kind not in KINDS:
        raise InvalidRequestError(f"filter on column '{p.column}': unknown kind {p.kind!r} (kinds: {', '.join(KINDS)})")
    wire: dict[str, Any] = {"kind": p.kind, "column": p.column}
    if p.kind == "in":
        wire["value"] = [_plain(v) for v in p.value]
    elif p.kind not in ("is_null", "is_not_null"):
        wire["value"] = _plain(p.value)
    return wire


def predicates_from_wire(items: list, schema: pa.Schema) -> list[Predicate]:
    """``predicate_to_wire``'s inverse against ``schema`` (the read's user columns): InvalidRequestError naming
    a column ``schema`` does not have, a kind not in ``KINDS``, or a value that is not of the wire form."""
    if not isinstance(items, list):
        raise InvalidRequestError(f"filters must be a list, got {type(items).__name__}")
    return [_predicate_from_wire(item, schema) for item in items]


def _predicate_from_wire(item: Any, schema: pa.Schema) -> Predicate:
    if not isinstance(item, dict) or not isinstance(item.get("column"), str):
        raise InvalidRequestError(f"a filter must be an object naming its column, got {item!r:.200}")
    kind, column = item.get("kind"), item["column"]
    if kind not in KINDS:
        raise InvalidRequestError(f"filter on column '{column}': unknown kind {kind!r} (kinds: {', '.join(KINDS)})")
    index = schema.get_field_index(column)
    if index < 0:
        raise InvalidRequestError(f"filter {kind!r} names column '{column}', which the read's schema does not have "
                                  f"(columns: {schema.names})")
    arrow_type, value = schema.field(index).type, item.get("value")
    try:
        if kind in ("is_null", "is_not_null"):
            if value is not None:
                raise ValueError(f"'{kind}' takes no value")
            return Predicate(kind, column)
        if kind == "in":
            if not isinstance(value, list) or len(value) > IN_VALUES_MAX:
                raise ValueError(f"'in' takes a list of at most {IN_VALUES_MAX} values")
            values = [_wire_value(v, arrow_type) for v in value]
            for one in values:
                if one is not None:  # a null in IN matches nothing; it is skipped, as SQL does
                    _check_comparable(one, arrow_type, kind)
            return Predicate(kind, column, values)
        return Predicate(kind, column, _check_comparable(_wire_value(value, arrow_type), arrow_type, kind))
    except (ValueError, TypeError, ArithmeticError) as exc:  # binascii.Error is a ValueError
        raise InvalidRequestError(f"filter {kind!r} on column '{column}' ({arrow_type}): bad value "
                                  f"{value!r:.200}: {exc}") from None


def _check_comparable(value: Any, arrow_type: pa.DataType, kind: str) -> Any:
    """``value`` if a filter of ``kind`` can compare it with a column of ``arrow_type``; ValueError otherwise.

    On the wire a value of another type is a client's mistake, refused by name, rather than a filter that
    silently skips nothing (``may_match`` keeps such a batch). A prefix is text or bytes; numbers of any kind
    compare with numeric columns (not booleans); a date column takes a date, a timestamp column a timestamp."""
    if value is None:
        raise ValueError(f"'{kind}' needs a value")
    if kind == "starts_with":
        fits = isinstance(value, (str, bytes))
    elif isinstance(value, bool) or pa.types.is_boolean(arrow_type):
        fits = isinstance(value, bool) and pa.types.is_boolean(arrow_type)
    elif pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type) or pa.types.is_decimal(arrow_type):
        fits = isinstance(value, (int, float, decimal.Decimal))
    elif pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        fits = isinstance(value, str)
    elif pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        fits = isinstance(value, bytes)
    elif pa.types.is_timestamp(arrow_type):
        fits = isinstance(value, datetime.datetime)
    elif pa.types.is_date(arrow_type):
        fits = isinstance(value, datetime.date) and not isinstance(value, datetime.datetime)
    else:
        fits = True
    if not fits:
        raise ValueError(f"a {type(value).__name__} value cannot be compared with a {arrow_type} column")
    return value


def _wire_value(value: Any, arrow_type: pa.DataType) -> Any:
    """One wire value as the column's Python type: JSON scalars as they are, the tagged forms decoded."""
    if isinstance(value, dict):
        if len(value) != 1 or not isinstance(next(iter(value.values())), str) or not value.keys() <= {"b64", "text"}:
            raise ValueError('a tagged value is {"b64": text} or {"text": text}')
        if "b64" in value:
            return base64.b64decode(value["b64"], validate=True)
        if not (pa.types.is_decimal(arrow_type) or pa.types.is_timestamp(arrow_type) or pa.types.is_date(arrow_type)):
            raise ValueError('{"text": ...} is for decimal, date and timestamp columns')
        return _typed(value, arrow_type)
    if value is not None and not isinstance(value, (bool, int, float, str)):
        raise ValueError("a value is a JSON scalar or a tagged value")
    return value
