"""Options and input columns of the Spark sink "ads": validation and conversion, pure.

Owns what a DataFrame written with ``format("ads")`` must look like and how one
of its Arrow batches becomes ``PRODUCE_SCHEMA`` columns. Columns follow Spark's
Kafka sink: ``value`` (required, binary or string), ``key`` (binary or string),
``topic`` (string; the ``topic`` option overrides it), ``partition`` (int) and
``headers`` (array<struct<key string, value binary>>). Beyond Kafka, a
``timestamp`` column (timestamp type) is kept as the record's create time, so a
job that copies one topic into another keeps the original times; without it the
records get the write time. Other columns are ignored, as in Kafka's sink.

Checked twice: the options and the Spark schema on the driver when the write
starts (clear errors before any task runs), and each Arrow batch on executors.
The client pass-through (``ads.*``) and booleans are read as the source reads them
(``ads_spark.spark.options``); an ``ads.<key>`` the producer does not read
(``config.PRODUCER_KEYS``, plus the security keys) is refused then, not only when a task builds it.
The SASL login is kept apart from ``client_config`` (``login``): the writer is built on the driver,
which authenticates and gives the writer a token instead (``writer._validated``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from ads_spark.config import PRODUCER_KEYS
from ads_spark.errors import InvalidConfigError, InvalidRequestError
from ads_spark.protocol.records import HEADER_TYPE, PRODUCE_SCHEMA, now_ms
from ads_spark.security.client_security import ClientSecurity
from ads_spark.spark.options import SECURITY_KEYS, lower_keys, option_bool, parse_client_config, split_login

ACKS_CHOICES = ("0", "1", "all", "-1")
DELIVERY_WAIT_S_DEFAULT = 300.0  # bound on flush() at the end of a task
BATCH_MODE_HINT = ("the ads sink appends to a log: write batches with df.write.format('ads').mode('append'); "
                   "Spark allows only append (or overwrite, which a log cannot do) for Python data sources")

_BYTES_TYPES = (BinaryType, StringType)
_INT_TYPES = (ByteType, ShortType, IntegerType, LongType)


@dataclass(frozen=True)
class SinkOptions:
    client_config: dict[str, str]  # producer config: bootstrap.servers, acks, enable.idempotence, ads.* extras
    topic: str | None  # overrides the topic column
    delivery_wait_s: float = DELIVERY_WAIT_S_DEFAULT
    # Streaming writes replay without duplicates (derived producer ids); needs acks=all and idempotence.
    exactly_once: bool = True
    login: ClientSecurity | None = None  # SASL: replaced by sasl.token in client_config before shipping
    typed: Any = None  # a typed topic's write (sink/typed.py TypedSink), decided on the driver; None: Kafka-shaped


def parse_sink_options(options: Mapping[str, Any]) -> SinkOptions:
    opts = lower_keys(options)
    config = parse_client_config(opts)
    unknown = sorted(key for key in config if key not in PRODUCER_KEYS and key not in SECURITY_KEYS)
    if unknown:  # on the driver: the Producer would refuse it only in a task
        raise InvalidConfigError(f"option 'ads.{unknown[0]}' is not a producer setting the ads sink can pass on "
                                 f"(known: {', '.join('ads.' + k for k in sorted(PRODUCER_KEYS))})")
    acks = config.get("acks", "all").strip().lower()
    if acks not in ACKS_CHOICES:
        raise InvalidConfigError(f"option 'ads.acks' must be 0, 1 or all, got {config['acks']!r}")
    config["acks"] = "all" if acks == "-1" else acks
    config.setdefault("enable.idempotence", "true" if config["acks"] == "all" else "false")
    idempotent = option_bool(config, "enable.idempotence", "ads.enable.idempotence", False)
    if idempotent and config["acks"] != "all":
        raise InvalidConfigError("option 'ads.enable.idempotence=true' needs 'ads.acks=all' (the default)")
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise InvalidConfigError("option 'topic' is empty: give a topic name or drop the option")
    config, login = split_login(config)
    return SinkOptions(config, topic.strip() if topic else None, exactly_once=idempotent, login=login)


def check_input_schema(schema: StructType, options: SinkOptions) -> None:
    """Reject a DataFrame the sink cannot write, naming the column and what it must be."""
    fields = {f.name.lower(): f for f in schema.fields}
    if "value" not in fields:
        raise InvalidConfigError(f"the ads sink needs a 'value' column (binary or string); the DataFrame has "
                                 f"{[f.name for f in schema.fields]}. Try df.selectExpr('CAST(x AS STRING) AS value')")
    _expect(fields, "value", _BYTES_TYPES, "binary or string")
    _expect(fields, "key", _BYTES_TYPES, "binary or string")
    _expect(fields, "topic", (StringType,), "string")
    _expect(fields, "partition", _INT_TYPES, "int")
    _expect(fields, "timestamp", (TimestampType, TimestampNTZType), "timestamp")
    if "headers" in fields:
        header_type = fields["headers"].dataType
        element = header_type.elementType if isinstance(header_type, ArrayType) else None
        names = {f.name: f.dataType for f in element.fields} if isinstance(element, StructType) else {}
        if set(names) != {"key", "value"} or not isinstance(names["key"], StringType) \
                or not isinstance(names["value"], _BYTES_TYPES):
            raise InvalidConfigError(f"column 'headers' must be array<struct<key: string, value: binary>>, "
                                     f"got {header_type.simpleString()}")
    if options.topic is None and "topic" not in fields:
        raise InvalidConfigError("no topic to write to: set .option('topic', 'name') or add a string 'topic' "
                                 "column")


def _expect(fields: Mapping[str, Any], name: str, types: tuple, described: str) -> None:
    if name in fields and not isinstance(fields[name].dataType, types):
        raise InvalidConfigError(f"column '{name}' must be {described}, got {fields[name].dataType.simpleString()}")


# ---- executor side: one Arrow batch -> PRODUCE_SCHEMA + routing columns --------------


@dataclass(frozen=True)
class ProduceRows:
    records: pa.RecordBatch  # PRODUCE_SCHEMA
    topics: pa.Array | None  # per-row topic when it comes from the column, else None
    partitions: pa.Array | None  # per-row requested partition (nulls: let the partitioner choose)


def to_produce_rows(batch: pa.RecordBatch, options: SinkOptions) -> ProduceRows:
    if options.typed is not None:
        return _typed_produce_rows(batch, options.typed)
    columns = {name.lower(): batch.column(i) for i, name in enumerate(batch.schema.names)}
    if "value" not in columns:
        raise InvalidRequestError("the ads sink got a batch without a 'value' column")
    rows = batch.num_rows
    value = columns["value"].cast(pa.binary())
    key = columns["key"].cast(pa.binary()) if "key" in columns else pa.nulls(rows, pa.binary())
    headers = _headers(columns["headers"]) if "headers" in columns else pa.nulls(rows, HEADER_TYPE)
    timestamp = _timestamps(columns.get("timestamp"), rows)
    records = pa.RecordBatch.from_arrays([timestamp, key, value, headers], schema=PRODUCE_SCHEMA)
    topics = None
    if options.topic is None:
        topics = columns["topic"].cast(pa.string()) if "topic" in columns else None
        if topics is None or topics.null_count:
            raise InvalidRequestError("a record has no topic (null 'topic' column): fill the column or set "
                                      ".option('topic', 'name')")
    partitions = columns["partition"].cast(pa.int32()) if "partition" in columns else None
    return ProduceRows(records, topics, partitions)


def _headers(column: pa.Array) -> pa.Array:
    element = column.type.value_type
    if element.field("value").type != pa.binary():
        element = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
        column = column.cast(pa.list_(element))
    try:
        return column.cast(HEADER_TYPE)
    except pa.ArrowInvalid:
        raise InvalidRequestError("a header has a null key; header keys must be strings") from None


def _timestamps(column: pa.Array | None, rows: int) -> pa.Array:
    now = pa.scalar(now_ms(), pa.timestamp("ms"))
    if column is None:
        return pa.repeat(now, rows)
    as_ms = pc.cast(column, pa.timestamp("ms"), safe=False)
    return as_ms.fill_null(now) if as_ms.null_count else as_ms


def _typed_produce_rows(batch: pa.RecordBatch, typed) -> ProduceRows:
    """A typed topic's rows: the version's produce columns by name (``client/typed.fit_to_version``), the
    record time from ``timestamp`` (else now), and routing from ``key`` / ``partition`` as for Kafka's."""
    from ads_spark.client.typed import fit_to_version

    names = batch.schema.names
    kept = [name for name in names if name not in ("partition", "timestamp", "headers", "key", "topic")]
    columns = [batch.column(name) for name in kept]
    fields = [batch.schema.field(name) for name in kept]
    rows = batch.num_rows
    extras = {"timestamp": _timestamps(batch.column("timestamp") if "timestamp" in names else None, rows),
              "key": batch.column("key").cast(pa.binary()) if "key" in names else pa.nulls(rows, pa.binary()),
              "headers": _headers(batch.column("headers")) if "headers" in names else pa.nulls(rows, HEADER_TYPE)}
    for name, column in extras.items():
        columns.append(column)
        fields.append(pa.field(name, column.type))
    records = fit_to_version(pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields)), typed.topic,
                             typed.version, typed.user_schema)
    partitions = batch.column("partition").cast(pa.int32()) if "partition" in names else None
    return ProduceRows(records, None, partitions)
