"""Typed topics in the "ads" source: the schema from the topic, projection, and row filters.

A read of exactly one topic whose ``schema.type`` is ``arrow`` returns the topic's columns as they are
stored (their Arrow form is Spark's, so no cast), then ``key, topic, partition, offset, timestamp,
timestampType``. The version is the latest when the query is planned (``DataSource.schema()`` asks the
brokers once) and stays the query's for its life: a version registered later is read as the planned one
(added columns dropped) until the query restarts; a batch the planned version cannot read fails the
query with the brokers' error naming both versions and the offset.

Projection: a user ``.schema(...)`` that names a subset of the topic's columns (with any of the meta
columns), or the ``columns`` option; only those columns leave the broker (``broker/typed_fetch.py``).

Filters: conjunctions of simple predicates (``schemas/statistics.Predicate`` kinds) from the ``filter``
option (``filter_text.py``: streaming and batch) or from Spark's ``pushFilters`` (batch, when the user
sets both ``spark.sql.python.filterPushdown.enabled`` and the ``pushFilters`` option). The broker skips
whole batches whose statistics exclude every row; this reader then keeps exactly the matching rows
(vectorised), so what Spark gets is what the unpushed query would keep. Offsets are never filtered: a
replay reads the same rows.

A Kafka-shaped topic, a pattern or several topics read as before (Kafka's schema). When no broker
answers at ``load()`` the topic is taken as Kafka-shaped and a warning says so; reading a typed topic that
way then fails with the brokers' error naming it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import from_arrow_type, to_arrow_schema
from pyspark.sql.types import StructField, StructType

from ads_spark.config_schemas import ARROW, KAFKA
from ads_spark.errors import AdsError, InvalidConfigError
from ads_spark.schemas.statistics import Predicate
from ads_spark.spark import clients
from ads_spark.spark.source.schema import BASE_FIELDS, SPARK_ARROW_TIMEZONE

# The Kafka source's columns a typed read returns after the topic's own (not typed_records.META_COLUMNS: those
# are the stored record columns a fetch may send).
SPARK_META_COLUMNS = ("key", "topic", "partition", "offset", "timestamp", "timestampType")
_META_FIELDS = tuple(f for f in BASE_FIELDS if f.name in SPARK_META_COLUMNS)


@dataclass(frozen=True)
class TypedSource:
    """What a typed read reads: one topic at one version, these user columns, these predicates."""

    topic: str
    version: int
    user_schema: pa.Schema  # the version's user columns, as registered
    columns: tuple[str, ...]  # the user columns read, in output order
    meta_columns: tuple[str, ...] = SPARK_META_COLUMNS  # the meta columns returned, in output order
    predicates: tuple[Predicate, ...] = ()

    def spark_schema(self) -> StructType:
        users = [StructField(name, from_arrow_type(self.user_schema.field(name).type),
                             self.user_schema.field(name).nullable) for name in self.columns]
        return StructType(users + [f for f in _META_FIELDS if f.name in self.meta_columns])

    def arrow_schema(self) -> pa.Schema:
        return to_arrow_schema(self.spark_schema(), timezone=SPARK_ARROW_TIMEZONE)

    def read_request(self) -> dict[str, Any]:
        """The fetch's ``typed`` field: the version, the columns (and the predicates, for batch skipping)."""
        from ads_spark.schemas.statistics import predicate_to_wire

        # The predicates' columns are fetched too (the rows are checked here), but not returned.
        fetched = list(dict.fromkeys([*self.columns, *(p.column for p in self.predicates)]))
        # Only the meta columns the DataFrame has (offset always comes, rebuilt from the headers; headers never).
        read: dict[str, Any] = {"topic": self.topic, "version": self.version, "columns": fetched,
                                "meta": [name for name in ("timestamp", "key") if name in self.meta_columns]}
        if self.predicates:
            read["filters"] = [predicate_to_wire(p) for p in self.predicates]
        return read


def lookup(admin, topics: list[str], columns_option: str | None) -> TypedSource | None:
    """The typed read of ``topics`` (one typed topic), or None for a Kafka-shaped read."""
    if len(topics) != 1:
        if columns_option is not None:
            raise InvalidConfigError("option 'columns' needs a read of exactly one typed topic")
        return None
    topic = topics[0]
    try:
        answer = clients.describe_schema_once(admin, topic, "at load()") or {"schema_type": KAFKA}
    except AdsError as exc:
        if columns_option is not None:
            raise InvalidConfigError(f"option 'columns': the schema of topic '{topic}' is unknown ({exc})") from None
        return None  # an unknown topic reads as Kafka's source reads it (created later, or an error then)
    if answer.get("schema_type") != ARROW or not answer.get("versions"):
        if columns_option is not None:
            raise InvalidConfigError(f"option 'columns' is for typed topics; '{topic}' is Kafka-shaped")
        return None
    latest = max(answer["versions"], key=lambda v: int(v["version"]))
    user_schema = latest["schema"]
    typed = TypedSource(topic, int(latest["version"]), user_schema, tuple(user_schema.names))
    return typed if columns_option is None else replace(typed, columns=_columns_option(columns_option, typed))


def _columns_option(raw: str, typed: TypedSource) -> tuple[str, ...]:
    names = [name.strip() for name in raw.split(",") if name.strip()]
    unknown = [name for name in names if name not in typed.user_schema.names]
    if not names or unknown or len(set(names)) != len(names):
        raise InvalidConfigError(f"option 'columns' must list distinct columns of topic '{typed.topic}' version "
                                 f"{typed.version} ({', '.join(typed.user_schema.names)}); got {raw!r}")
    return tuple(names)


def narrowed(typed: TypedSource, user_given: StructType | None) -> TypedSource:
    """``typed`` read as a user ``.schema(...)`` asks: a subset of its columns, each with the topic's type."""
    if user_given is None or user_given == typed.spark_schema():
        return typed
    offered = {f.name: f for f in typed.spark_schema().fields}
    wrong = [f.name for f in user_given.fields
             if f.name not in offered or f.dataType != offered[f.name].dataType]
    if wrong:
        raise InvalidConfigError(f"the schema given to the ads source must be a subset of topic '{typed.topic}' "
                                 f"version {typed.version}: {typed.spark_schema().simpleString()}; columns "
                                 f"{wrong} are not in it (or have another type)")
    names = [f.name for f in user_given.fields]
    return replace(typed, columns=tuple(n for n in names if n not in SPARK_META_COLUMNS),
                   meta_columns=tuple(n for n in names if n in SPARK_META_COLUMNS))


def to_spark_batches(table: pa.Table, typed: TypedSource, partition: int) -> list[pa.RecordBatch]:
    """A typed fetch's rows (prefix + user columns) as batches of exactly ``typed.arrow_schema()``,
    keeping only the rows every predicate holds for."""
    if typed.predicates and table.num_rows:
        table = table.filter(matching_rows(table, typed.predicates, typed.user_schema))
    rows = table.num_rows
    if not rows:
        return []
    target = typed.arrow_schema()
    meta = {"topic": pa.repeat(pa.scalar(typed.topic, pa.string()), rows),
            "partition": pa.repeat(pa.scalar(partition, pa.int32()), rows),
            "timestampType": pa.repeat(pa.scalar(0, pa.int32()), rows)}
    arrays = []
    for field in target:
        column = meta.get(field.name)
        if column is None:
            column = table.column(field.name)
        arrays.append(column if column.type == field.type else column.cast(field.type))
    return pa.Table.from_arrays(arrays, schema=target).combine_chunks().to_batches()


def matching_rows(table: pa.Table, predicates: tuple[Predicate, ...], user_schema: pa.Schema) -> pa.ChunkedArray:
    """The rows of ``table`` every predicate holds for, as a boolean mask (a null never matches a comparison, as
    in SQL). Compute kernels column by column, not an Acero expression: those warn about every Flight buffer
    that is not 64-byte aligned."""
    mask = None
    for p in predicates:
        column, arrow_type = table.column(p.column), user_schema.field(p.column).type
        if p.kind == "is_null":
            term = pc.is_null(column)
        elif p.kind == "is_not_null":
            term = pc.is_valid(column)
        elif p.kind == "in":
            term = pc.is_in(column, value_set=pa.array(list(p.value), arrow_type))
        elif p.kind == "starts_with":
            term = pc.starts_with(column, pattern=p.value)
        else:
            compare = {"=": pc.equal, "<": pc.less, "<=": pc.less_equal, ">": pc.greater,
                       ">=": pc.greater_equal}[p.kind]
            term = compare(column, pa.scalar(p.value, arrow_type))
        mask = term if mask is None else pc.and_kleene(mask, term)
    return mask


def typed_source(options, raw_options: dict) -> TypedSource | None:
    """The typed read the options and the topic ask for (None: a Kafka-shaped read), with the ``filter``
    option's predicates. Asks the brokers once (on the driver, as the options' user)."""
    from ads_spark.spark.options import lower_keys
    from ads_spark.spark.source.filter_text import parse_filter

    opts = lower_keys(raw_options)
    columns_option, filter_option = opts.get("columns"), opts.get("filter")
    subscription = options.subscription
    topics = list(subscription.topics) if subscription.kind == "subscribe" else \
        sorted({t for t, _ in subscription.assigned}) if subscription.kind == "assign" else []
    handle = clients.register_login(options.client_config, options.login) if options.login is not None else ""
    typed = lookup(clients.admin_for(clients.driver_config(options.client_config, handle)), topics, columns_option)
    if typed is None:
        given = [name for name, key in (("filter", "filter"), ("pushFilters", "pushfilters")) if key in opts]
        if given:
            raise InvalidConfigError(f"option '{given[0]}' is for reads of one typed topic (schema.type=arrow)")
        return None
    if options.include_headers:
        raise InvalidConfigError(f"option 'includeHeaders' is not supported on typed topic '{typed.topic}' yet")
    if filter_option is not None:
        typed = replace(typed, predicates=parse_filter(filter_option, typed.user_schema))
    return typed


_SPARK_FILTER_KINDS = {"EqualTo": "=", "GreaterThan": ">", "GreaterThanOrEqual": ">=", "LessThan": "<",
                       "LessThanOrEqual": "<=", "In": "in", "IsNull": "is_null", "IsNotNull": "is_not_null",
                       "StringStartsWith": "starts_with"}


def predicate_of(spark_filter, user_schema: pa.Schema) -> Predicate | None:
    """A Spark pushed filter on one user column as a Predicate, or None when this source cannot apply it."""
    kind = _SPARK_FILTER_KINDS.get(type(spark_filter).__name__)
    attribute = getattr(spark_filter, "attribute", ())
    if kind is None or len(attribute) != 1 or attribute[0] not in user_schema.names:
        return None
    value = getattr(spark_filter, "value", None)
    if kind == "in":
        value = list(value)
    return Predicate(kind, attribute[0], value)
