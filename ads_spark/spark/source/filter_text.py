"""The ``filter`` option of typed reads: a conjunction of simple predicates, parsed without a JVM.

Streaming readers get no ``pushFilters`` from Spark, so a filter the brokers can use to skip batches has to
come as an option. The language is the part of SQL that batch statistics can answer, joined by ``AND``::

    order_id >= 1000 AND region IN ('eu', 'us') AND note IS NOT NULL AND sku LIKE 'A-%'

Comparisons ``= < <= > >=`` against a number or a quoted string (``''`` inside quotes is a quote), ``IN
(...)``, ``IS [NOT] NULL`` and ``LIKE 'prefix%'`` (a prefix only). Column names are the typed topic's user
columns, plain or back-quoted. Values are converted to the column's type (``'2026-11-26'`` for a date,
an ISO text for a timestamp, a number for a decimal). Anything else (OR, NOT, functions, other LIKE
patterns) is refused naming the text, rather than read as something else.
"""

from __future__ import annotations

import datetime
import decimal
import re

import pyarrow as pa

from ads_spark.errors import InvalidConfigError
from ads_spark.schemas.statistics import Predicate

FILTER_CHARS_MAX = 10_000
PREDICATES_MAX = 64
IN_VALUES_MAX = 1000

_TOKEN = re.compile(r"\s*(?:(?P<string>'(?:[^']|'')*')|(?P<number>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
                    r"|(?P<quoted>`(?:[^`]|``)+`)|(?P<op><=|>=|=|<|>|\(|\)|,)|(?P<word>[A-Za-z_][A-Za-z0-9_]*))")


def _tokens(text: str) -> list[tuple[str, str]]:
    out, position = [], 0
    while position < len(text):
        if text[position:].strip() == "":
            break
        match = _TOKEN.match(text, position)
        if match is None:
            raise InvalidConfigError(f"option 'filter': cannot read {text[position:position + 30]!r} "
                                     f"(at character {position})")
        kind = match.lastgroup
        value = match.group(kind)
        out.append((kind, value))
        position = match.end()
    return out


def parse_filter(text: str, user_schema: pa.Schema) -> tuple[Predicate, ...]:
    """The predicates ``text`` states, typed as ``user_schema``'s columns; InvalidConfigError naming what is wrong."""
    if len(text) > FILTER_CHARS_MAX:
        raise InvalidConfigError(f"option 'filter' is longer than {FILTER_CHARS_MAX} characters")
    tokens = _tokens(text)
    predicates, start = [], 0
    for end in [i for i, (kind, value) in enumerate(tokens) if kind == "word" and value.upper() == "AND"] \
            + [len(tokens)]:
        predicates.append(_predicate(tokens[start:end], user_schema, text))
        start = end + 1
    if len(predicates) > PREDICATES_MAX:
        raise InvalidConfigError(f"option 'filter' has more than {PREDICATES_MAX} predicates")
    return tuple(predicates)


def _predicate(tokens: list[tuple[str, str]], schema: pa.Schema, text: str) -> Predicate:
    if len(tokens) < 2 or tokens[0][0] not in ("word", "quoted"):
        raise InvalidConfigError(f"option 'filter': expected 'column op value' in {text!r}")
    column = tokens[0][1][1:-1].replace("``", "`") if tokens[0][0] == "quoted" else tokens[0][1]
    if column not in schema.names:
        raise InvalidConfigError(f"option 'filter': column '{column}' is not a column of the topic "
                                 f"({', '.join(schema.names)})")
    arrow_type = schema.field(column).type
    rest = [(kind, value.upper() if kind == "word" else value) for kind, value in tokens[1:]]
    shape = [value for _, value in rest]
    if shape == ["IS", "NULL"]:
        return Predicate("is_null", column)
    if shape == ["IS", "NOT", "NULL"]:
        return Predicate("is_not_null", column)
    if len(rest) == 2 and rest[0] == ("word", "LIKE") and rest[1][0] == "string":
        pattern = _string(tokens[2][1])
        if not pattern.endswith("%") or any(c in pattern[:-1] for c in "%_"):
            raise InvalidConfigError(f"option 'filter': LIKE takes a prefix pattern 'abc%' only, got {pattern!r}")
        return Predicate("starts_with", column, pattern[:-1])
    if rest and rest[0] == ("word", "IN"):
        inside = tokens[3:-1]  # after "column IN (", before ")": value, comma, value, ...
        values, commas = inside[0::2], [value for _, value in inside[1::2]]
        if len(rest) < 4 or rest[1][1] != "(" or rest[-1][1] != ")" or any(c != "," for c in commas) \
                or any(kind not in ("string", "number") for kind, _ in values) or len(values) > IN_VALUES_MAX:
            raise InvalidConfigError(f"option 'filter': expected '{column} IN (value, ...)' (at most "
                                     f"{IN_VALUES_MAX} values) in {text!r}")
        return Predicate("in", column, [_value(v, arrow_type, column) for v in values])
    if len(rest) == 2 and rest[0][0] == "op" and rest[0][1] in ("=", "<", "<=", ">", ">="):
        return Predicate(rest[0][1], column, _value(tokens[2], arrow_type, column))
    raise InvalidConfigError(f"option 'filter': cannot read the predicate on '{column}' in {text!r} (supported: "
                             f"= < <= > >= IN, IS [NOT] NULL, LIKE 'prefix%', joined by AND)")


def _string(literal: str) -> str:
    return literal[1:-1].replace("''", "'")


def _value(token: tuple[str, str], arrow_type: pa.DataType, column: str):
    """A literal as ``column``'s Python value type."""
    kind, raw = token
    try:
        if kind == "string":
            text = _string(raw)
            if pa.types.is_date(arrow_type):
                return datetime.date.fromisoformat(text)
            if pa.types.is_timestamp(arrow_type):
                moment = datetime.datetime.fromisoformat(text)
                return moment if arrow_type.tz is None or moment.tzinfo else moment.replace(tzinfo=datetime.timezone.utc)
            if pa.types.is_string(arrow_type):
                return text
            if pa.types.is_binary(arrow_type):
                return text.encode()
        elif kind == "number":
            if pa.types.is_integer(arrow_type):
                return int(raw)
            if pa.types.is_floating(arrow_type):
                return float(raw)
            if pa.types.is_decimal(arrow_type):
                return decimal.Decimal(raw)
    except ValueError as exc:
        raise InvalidConfigError(f"option 'filter': {raw} is not a value of column '{column}' ({arrow_type}): "
                                 f"{exc}") from None
    raise InvalidConfigError(f"option 'filter': {raw} cannot be compared with column '{column}' ({arrow_type})")
