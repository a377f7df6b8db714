"""The fuzzer's typed-topic inputs (issue #26): typed produce batches and typed reads, and the typed topic they
aim at, whose acknowledged rows must stay readable.

Typed topics opened input surfaces the Kafka-shaped categories never reach: the ``ads.schema_id`` a produce
stream's Arrow schema names and the columns its batches carry (checked by ``broker/typed_produce.py``), and
the ``typed`` field of a fetch ticket and of a fetch-session command (``request_schemas.TYPED_READ``, bound by
``broker/typed_fetch.py``: version, columns, filters matched to batch statistics). Owned here, apart from
``fuzz_inputs`` and ``fuzz_streams``, because every input needs the typed topic and its schema.

The run creates ``TYPED_TOPIC`` (``id BIGINT NOT NULL, name STRING``, statistics on ``id``) and produces a few
typed batches with acks=all: reads have data, and ``typed_rows_check`` reads every acknowledged row back with
a typed read after each typed category and at the end. Every input is one valid request with one thing wrong
(a version that is not a number, is 0 or does not exist; a column of another type, missing, extra, twice, or
holding a null where the schema says NOT NULL; a Kafka-shaped batch to the typed topic and a typed batch to the
Kafka-shaped sink; garbage buffers under a typed schema; a typed read of an unknown or Kafka-shaped topic,
unknown or repeated columns, filters of unknown kinds or values of another type, lists past their bounds, a
typed read naming another topic's partitions), so a correct broker refuses each with a typed error and
stores nothing. Inputs come in (kind) groups, the first of each group always sent and a seeded sample of
the rest (``per_group``), as in ``fuzz_inputs``.
"""

from __future__ import annotations

import copy
import random
from typing import Any, Callable

import pyarrow as pa

from ads_spark.chaos.fuzz_inputs import (
    ABSENT_TOPIC, KEEP_TOPIC, LED_PARTITION, SINK_TOPIC, TRAVERSAL_TOPIC, UNKNOWN_FIELD, FuzzInput, dumps,
)
from ads_spark.chaos.fuzz_report import CategoryStats
from ads_spark.chaos.fuzz_streams import garbage_batch
from ads_spark.protocol.records import PRODUCE_SCHEMA
from ads_spark.protocol.request_schemas import TYPED_READ_COLUMNS_MAX, TYPED_READ_FILTERS_MAX
from ads_spark.protocol.typed_records import SCHEMA_ID_KEY, TYPED_PRODUCE_PREFIX
from ads_spark.schemas.statistics import IN_VALUES_MAX

TYPED_TOPIC = "fuzztyped"
TYPED_DDL = "id BIGINT NOT NULL, name STRING"
TYPED_CONFIG = {"schema.statistics.columns": "id"}
TYPED_BATCHES_PER_PARTITION = 4
TYPED_ROWS_PER_BATCH = 25
PRODUCE_TIMEOUT_S = 30.0
READ_TIMEOUT_MS = 20000
USERS = (pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string()))
HEADERS = TYPED_PRODUCE_PREFIX[2].type
ROWS = 2
WIDE_COLUMNS = 2000
MISSING = object()  # a field left out of a typed read


# ---- the typed topic and its acknowledged rows ------------------------------------------------------------


def setup_typed_topic(fuzzer) -> None:
    """Create the typed topic (or reuse one an earlier run left) and produce typed batches to every partition
    with acks=all; ``fuzzer.typed_acked`` maps (partition, offset) -> (id, name) of every acknowledged row."""
    from ads_spark.client import Producer
    from ads_spark.errors import TopicAlreadyExistsError

    brokers = len(fuzzer.layout.brokers)
    config = {**TYPED_CONFIG, "min.insync.replicas": str(min(2, brokers))}
    try:
        fuzzer.admin.create_topic(TYPED_TOPIC, 3, min(3, brokers), config=config, schema=TYPED_DDL)
    except TopicAlreadyExistsError:
        pass
    producer = Producer({"bootstrap.servers": fuzzer.cluster.bootstrap_servers, "acks": "all",
                         "enable.idempotence": False, "delivery.timeout.ms": int(PRODUCE_TIMEOUT_S * 1000)})
    try:
        sent = []
        for partition in range(3):
            for number in range(TYPED_BATCHES_PER_PARTITION):
                first = (partition * TYPED_BATCHES_PER_PARTITION + number) * TYPED_ROWS_PER_BATCH
                rows = [(i, f"typed-{fuzzer.settings.seed}-{i:06d}")
                        for i in range(first, first + TYPED_ROWS_PER_BATCH)]
                table = pa.table({"id": [r[0] for r in rows], "name": [r[1] for r in rows]})
                sent.append((partition, rows, producer.produce_arrow(TYPED_TOPIC, table, partition=partition)))
        producer.flush(PRODUCE_TIMEOUT_S)
        for partition, rows, future in sent:
            if future.exception(timeout=5) is None:
                base = future.result()
                fuzzer.typed_acked.update({(partition, base + i): row for i, row in enumerate(rows)})
    finally:
        producer.close(10)


def read_typed_rows(bootstrap: str, acked: dict[tuple[int, int], tuple]) -> dict[tuple[int, int], tuple]:
    """(partition, offset) -> (id, name) of what a typed read of version 1 gives up to the highest acked offset."""
    from ads_spark.client import Consumer, TopicPartition
    from ads_spark.client.typed import typed_read

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fuzz-typed-check", "local.reads": "false",
                         "request.timeout.ms": 10000, "default.api.timeout.ms": READ_TIMEOUT_MS})
    found: dict[tuple[int, int], tuple] = {}
    try:
        for partition in sorted({p for p, _ in acked}):
            end = max(offset for p, offset in acked if p == partition) + 1
            table = consumer.fetch_range(TopicPartition(TYPED_TOPIC, partition), 0, end,
                                         typed=typed_read(TYPED_TOPIC, 1)).table
            for offset, ident, name in zip(*(table.column(c).to_pylist() for c in ("offset", "id", "name"))):
                found[(partition, offset)] = (ident, name)
    finally:
        consumer.close()
    return found


def typed_rows_check(fuzzer) -> dict[str, Any]:
    """Every acknowledged typed row reads back as produced: ``{"ok", "detail"}``."""
    acked = fuzzer.typed_acked
    if not acked:
        return {"ok": False, "detail": f"no typed row was acknowledged in '{TYPED_TOPIC}' at setup"}
    try:
        found = read_typed_rows(fuzzer.cluster.bootstrap_servers, acked)
    except Exception as exc:  # noqa: BLE001 - a read that cannot finish has failed the check
        return {"ok": False, "detail": f"typed read of '{TYPED_TOPIC}' raised {type(exc).__name__}: {str(exc)[:300]}"}
    missing = sorted(key for key in acked if key not in found)
    different = sorted(key for key, row in acked.items() if key in found and found[key] != tuple(row))
    return {"ok": not missing and not different,
            "detail": f"'{TYPED_TOPIC}': {len(acked)} acknowledged rows, {len(missing)} missing (first {missing[:5]}), "
                      f"{len(different)} with other values (first {different[:5]})"}


def typed_category(inputs: list[FuzzInput]) -> Callable:
    """A category runner: ``inputs`` to every broker, then the typed topic's acknowledged rows read back (a
    loss is recorded in ``fuzzer.typed_losses`` with the category that caused it)."""
    def run(fuzzer, stats: CategoryStats) -> None:
        stats.inputs += len(inputs)
        fuzzer.send_all(stats, inputs)
        result = typed_rows_check(fuzzer)
        stats.extra["typed_rows"] = result["detail"]
        if not result["ok"]:
            fuzzer.typed_losses.append({"category": stats.name, "detail": result["detail"]})
    return run


def choose_groups(groups: dict[str, list[FuzzInput]], rng: random.Random, per_group: int | None) -> list[FuzzInput]:
    """Each group's first input and a seeded sample of the rest (all of them when ``per_group`` is None)."""
    chosen = []
    for group in groups.values():
        if per_group is None or len(group) <= per_group:
            chosen += group
        elif group:
            chosen += [group[0], *rng.sample(group[1:], per_group - 1)]
    return chosen


# ---- typed produce batches ------------------------------------------------------------------------------------


def _columns(rows: int = ROWS) -> list[tuple[pa.Field, pa.Array]]:
    """The produce columns of version 1, valid: timestamp, key, headers, id, name."""
    return [(TYPED_PRODUCE_PREFIX[0], pa.array([1_000 + i for i in range(rows)], pa.timestamp("ms"))),
            (TYPED_PRODUCE_PREFIX[1], pa.nulls(rows, pa.binary())), (TYPED_PRODUCE_PREFIX[2], pa.nulls(rows, HEADERS)),
            (USERS[0], pa.array([-1 - i for i in range(rows)], pa.int64())),
            (USERS[1], pa.array([f"fuzz-{i}" for i in range(rows)]))]


def _batch(columns: list[tuple[pa.Field, pa.Array]], schema_id: bytes | None = b"1") -> pa.RecordBatch:
    metadata = None if schema_id is None else {SCHEMA_ID_KEY: schema_id}
    return pa.RecordBatch.from_arrays([a for _, a in columns], schema=pa.schema([f for f, _ in columns], metadata))


def _with(name: str, field: pa.Field | None, array: pa.Array | None = None, schema_id: bytes | None = b"1",
          extra: list | None = None) -> Callable[[], pa.RecordBatch]:
    """A builder of the valid batch with column ``name`` replaced (``field`` None: dropped) and ``extra`` appended."""
    def build() -> pa.RecordBatch:
        columns = [(f, a) if f.name != name else (field, array) for f, a in _columns()]
        return _batch([c for c in columns if c[0] is not None] + list(extra or []), schema_id)
    return build


def valid_typed_batch() -> pa.RecordBatch:
    return _batch(_columns())


def _produce_cases() -> dict[str, list[tuple[str, Callable[[], pa.RecordBatch], str]]]:
    """kind -> (label, batch builder, topic) of the typed produce inputs."""
    f = pa.field
    ids, names = pa.array([1, 2], pa.int64()), pa.array(["a", "b"])
    schema_ids = [b"x", b"", b"0", b"-1", b"2", b"99999", str(2 ** 63).encode(), b"9" * 5000, b"1e3", b"1.0",
                  b"\xff\xfe", b" 1", b"+1", b"1_0", b"0x1"]
    wide = [(f(f"zz{i}", pa.int8()), pa.array([0, 0], pa.int8())) for i in range(WIDE_COLUMNS)]
    return {
        "schema_id": [(f"ads.schema_id={raw[:12]!r}{'...' if len(raw) > 12 else ''}", _with("", None, schema_id=raw),
                       TYPED_TOPIC) for raw in schema_ids],
        "column_type": [(f"id as {t}", _with("id", f("id", t, nullable=False), ids.cast(t)), TYPED_TOPIC)
                        for t in (pa.int32(), pa.float64(), pa.uint64())]
        + [("id as string", _with("id", f("id", pa.string(), nullable=False), pa.array(["1", "2"])), TYPED_TOPIC),
           ("id as dictionary", _with("id", f("id", pa.dictionary(pa.int32(), pa.int64()), nullable=False),
                                      ids.dictionary_encode()), TYPED_TOPIC),
           ("name as binary", _with("name", f("name", pa.binary()), pa.array([b"a", b"b"])), TYPED_TOPIC),
           ("name as large_string", _with("name", f("name", pa.large_string()), names.cast(pa.large_string())),
            TYPED_TOPIC),
           ("name as list<string>", _with("name", f("name", pa.list_(pa.string())), pa.array([["a"], ["b"]])),
            TYPED_TOPIC)],
        "missing_column": [("no id (NOT NULL)", _with("id", None), TYPED_TOPIC),
                           ("no user columns", lambda: _batch(_columns()[:3]), TYPED_TOPIC)],
        "extra_column": [(f"extra {UNKNOWN_FIELD}", _with("", None, extra=[(f(UNKNOWN_FIELD, pa.int64()), ids)]),
                          TYPED_TOPIC),
                         ("extra offset", _with("", None, extra=[(f("offset", pa.int64()), ids)]), TYPED_TOPIC),
                         ("extra value (Kafka-shaped)", _with("", None, extra=[(f("value", pa.binary()),
                                                                                pa.array([b"v", b"v"]))]), TYPED_TOPIC),
                         (f"{WIDE_COLUMNS} extra columns", _with("", None, extra=wide), TYPED_TOPIC)],
        "null_in_not_null": [("id [null, 2]", _with("id", USERS[0], pa.array([None, 2], pa.int64())), TYPED_TOPIC),
                             ("id all null", _with("id", f("id", pa.int64()), pa.nulls(2, pa.int64())), TYPED_TOPIC)],
        "prefix_type": [
            ("timestamp as string", _with("timestamp", f("timestamp", pa.string()), pa.array(["x", "y"])), TYPED_TOPIC),
            ("timestamp as int64", _with("timestamp", f("timestamp", pa.int64()), ids), TYPED_TOPIC),
            ("timestamp as timestamp[us]", _with("timestamp", f("timestamp", pa.timestamp("us")),
                                                 ids.cast(pa.timestamp("us"))), TYPED_TOPIC),
            ("timestamp with a null", _with("timestamp", f("timestamp", pa.timestamp("ms")),
                                            pa.array([None, 1], pa.timestamp("ms"))), TYPED_TOPIC),
            ("key as string", _with("key", f("key", pa.string()), names), TYPED_TOPIC),
            ("headers as int64", _with("headers", f("headers", pa.int64()), ids), TYPED_TOPIC)],
        "duplicate_column": [(f"{name} twice", _with("", None, extra=[c for c in _columns() if c[0].name == name]),
                              TYPED_TOPIC) for name in ("id", "timestamp", "name")],
        "empty_batch": [("0 rows of version 1", lambda: valid_typed_batch().slice(0, 0), TYPED_TOPIC)],
        "shape": [("Kafka-shaped batch to the typed topic", _kafka_batch(None), TYPED_TOPIC),
                  ("Kafka-shaped batch naming version 1 to the typed topic", _kafka_batch(b"1"), TYPED_TOPIC),
                  ("typed batch to the Kafka-shaped sink", valid_typed_batch, SINK_TOPIC),
                  ("Kafka-shaped batch naming version 1 to the Kafka-shaped sink", _kafka_batch(b"1"), SINK_TOPIC)],
        "garbage_buffers": [("random buffers under the typed schema", lambda: garbage_typed_batch(7), TYPED_TOPIC)],
    }


def _kafka_batch(schema_id: bytes | None) -> Callable[[], pa.RecordBatch]:
    def build() -> pa.RecordBatch:
        schema = PRODUCE_SCHEMA if schema_id is None else PRODUCE_SCHEMA.with_metadata({SCHEMA_ID_KEY: schema_id})
        return pa.RecordBatch.from_pylist([{"timestamp": 0, "key": None, "value": b"fuzz", "headers": None}],
                                          schema=schema)
    return build


def garbage_typed_batch(seed: int, rows: int = 1000) -> pa.RecordBatch:
    """Version 1's produce schema over random buffers (``fuzz_streams.garbage_batch``'s, the value column's bytes
    as the name column, random ids): valid to a cheap check, nonsense to a full one."""
    garbage = garbage_batch(seed, rows, body_bytes=1 << 18)
    value = garbage.column("value")
    name = pa.Array.from_buffers(pa.string(), rows, value.buffers())
    ids = pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(random.Random(seed).randbytes(8 * rows))])
    columns = [garbage.column("timestamp"), garbage.column("key"), garbage.column("headers"), ids, name]
    return pa.RecordBatch.from_arrays(columns, schema=pa.schema([*TYPED_PRODUCE_PREFIX, *USERS],
                                                                {SCHEMA_ID_KEY: b"1"}))


def full_typed_batch(rows: int = 1000, name_chars: int = 1000) -> pa.RecordBatch:
    """A valid ~1 MiB batch of version 1; the raw proxy replaces its body in transit."""
    return pa.RecordBatch.from_arrays(
        [pa.array([1] * rows, pa.timestamp("ms")), pa.array([b"k"] * rows),
         pa.array([[{"key": "h", "value": b"v"}]] * rows, HEADERS), pa.array(range(rows), pa.int64()),
         pa.array(["n" * name_chars] * rows)], schema=pa.schema([*TYPED_PRODUCE_PREFIX, *USERS], {SCHEMA_ID_KEY: b"1"}))


def _produce_meta(topic: str) -> Callable[[], bytes]:
    return lambda: dumps({"correlation_id": 1, "topic": topic, "partition": LED_PARTITION, "acks": "all",
                          "timeout_ms": 1000, "producer_id": -1, "producer_epoch": -1, "base_sequence": -1})


def typed_produce_inputs(rng: random.Random, per_group: int | None) -> list[FuzzInput]:
    """One-batch typed produce streams to a partition the broker leads, each batch with one thing wrong, and a
    valid ~1 MiB typed batch whose body the proxy replaces in transit (``fuzz_raw``)."""
    groups = {kind: [FuzzInput("typed_produce", kind, label, "produce", build=_produce_meta(topic), schema=None,
                               batch=make, led_topic=topic) for label, make, topic in cases]
              for kind, cases in _produce_cases().items()}
    raw = [FuzzInput("typed_produce", f"body_{mode}", f"valid typed header, body {mode} (seed {seed})", "raw_produce",
                     build=_produce_meta(TYPED_TOPIC), schema=None, batch=full_typed_batch, scramble=f"{mode}:{seed}",
                     led_topic=TYPED_TOPIC)
           for mode, seed in (("random", rng.randrange(2 ** 32)), ("ones", 0), ("flip", rng.randrange(2 ** 32)))]
    return choose_groups(groups, rng, per_group) + raw


# ---- typed reads ------------------------------------------------------------------------------------------------


def valid_typed_read() -> dict[str, Any]:
    return {"topic": TYPED_TOPIC, "version": 1, "columns": ["id", "name"],
            "filters": [{"kind": ">=", "column": "id", "value": 0}]}


def _read_with(field: str, value: Any) -> dict[str, Any]:
    read = valid_typed_read()
    if value is MISSING:
        del read[field]
    else:
        read[field] = value
    return read


def _filter(**changes) -> dict[str, Any]:
    """The valid read with its one filter changed (a value MISSING: that key left out)."""
    item = {**valid_typed_read()["filters"][0], **changes}
    return _read_with("filters", [{k: v for k, v in item.items() if v is not MISSING}])


def _typed_read_cases() -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """kind -> (label, the typed read) with one thing wrong."""
    topics = [ABSENT_TOPIC, KEEP_TOPIC, "", "..", TRAVERSAL_TOPIC, "a/b", "\ud800", "a\u0000b", "a" * 300, 5, None]
    columns = [["zz_unknown"], ["offset"], ["timestamp"], ["id", "id"], ["ID"], [""], [1], "id", {}, ["\ud800"],
               ["a\u0000b"], ["x" * 2000], [f"c{i}" for i in range(TYPED_READ_COLUMNS_MAX + 1)],
               [f"c{i}" for i in range(TYPED_READ_COLUMNS_MAX)]]
    filters = [_filter(kind="zz"), _filter(kind="LIKE"), _filter(kind=5), _filter(kind=MISSING),
               _filter(column=MISSING), _filter(column="zz_unknown"), _filter(column="offset"), _filter(column=None),
               _read_with("filters", "x"), _read_with("filters", [5]), _read_with("filters", [{}]),
               _read_with("filters", [valid_typed_read()["filters"][0]] * (TYPED_READ_FILTERS_MAX + 1)),
               _filter(**{UNKNOWN_FIELD: 1})]
    values = [_filter(value="abc"), _filter(value=True), _filter(value=MISSING), _filter(value=None),
              _filter(value=[1]),
              _filter(value={"b64": "!!"}), _filter(value={"text": "x"}), _filter(value={"b64": "eA==", "text": "x"}),
              _filter(value={"zz": "x"}), _filter(kind="in", value=5), _filter(kind="in", value=["a", "b"]),
              _filter(kind="in", value=list(range(IN_VALUES_MAX + 1))), _filter(kind="starts_with", value=1),
              _filter(column="name", value=1), _filter(column="name", value={"b64": "eA=="}),
              _filter(kind="is_null", value=5), _filter(value="\ud800"), _filter(value="x" * 5000)]
    return {
        "typed_topic": [(f"topic={t if not isinstance(t, str) else t[:20]!r}", _read_with("topic", t)) for t in topics],
        "typed_version": [(f"version={v!r}", _read_with("version", v))
                          for v in (2, 2 ** 31 - 1, 0, -1, 2 ** 31, 2 ** 63, "1", 1.5, True, None, MISSING)],
        "typed_columns": [(f"columns={str(c)[:40]}", _read_with("columns", c)) for c in columns],
        "typed_filters": [(f"filters={str(f.get('filters'))[:60]}", f) for f in filters],
        "typed_filter_values": [(f"filters={str(f.get('filters'))[:60]}", f) for f in values],
        "typed_unknown_field": [(f"typed.{UNKNOWN_FIELD}", {**valid_typed_read(), UNKNOWN_FIELD: 1})],
        "typed_wrong_json_type": [(f"typed={v!r}", v) for v in ("x", 1, [], [valid_typed_read()], True)],
    }


def _fetch(topic: str = TYPED_TOPIC, typed: Any = MISSING, partitions: int = 1) -> dict[str, Any]:
    body = {"type": "fetch", "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
            "partitions": [{"topic": topic, "partition": LED_PARTITION, "fetch_offset": 0, "current_leader_epoch": -1,
                            "partition_max_bytes": 1 << 16}] * partitions}
    if typed is not MISSING:
        body["typed"] = typed
    return body


def typed_ticket_inputs(rng: random.Random, per_group: int | None) -> list[FuzzInput]:
    """DoGet tickets of the typed topic whose ``typed`` field has one thing wrong, a Kafka-shaped read of the typed
    topic, and a valid typed read naming another topic's partitions."""
    groups = {kind: [FuzzInput("typed_tickets", kind, label, "get", build=lambda r=read: dumps(_fetch(typed=r)),
                               led_topic=TYPED_TOPIC) for label, read in cases]
              for kind, cases in _typed_read_cases().items()}
    groups["typed_shape"] = [
        FuzzInput("typed_tickets", "typed_shape", "Kafka-shaped fetch of the typed topic", "get",
                  build=lambda: dumps(_fetch()), led_topic=TYPED_TOPIC),
        FuzzInput("typed_tickets", "typed_shape", f"typed read of '{TYPED_TOPIC}' naming {KEEP_TOPIC}'s partition",
                  "get", build=lambda: dumps(_fetch(KEEP_TOPIC, valid_typed_read())), led_topic=KEEP_TOPIC),
        FuzzInput("typed_tickets", "typed_shape", f"typed read of '{TYPED_TOPIC}' naming {SINK_TOPIC}'s partition",
                  "get", build=lambda: dumps(_fetch(SINK_TOPIC, valid_typed_read())), led_topic=SINK_TOPIC)]
    return choose_groups(groups, rng, per_group)


def _session_command(typed: Any) -> Callable[[], bytes]:
    return lambda: dumps({"type": "fetch_session", "typed": typed})


def typed_session_inputs(rng: random.Random, per_group: int | None) -> list[FuzzInput]:
    """Fetch sessions whose command's ``typed`` field has one thing wrong (the request inside: a valid fetch of
    the typed topic), and valid typed sessions whose request is wrong for them: another topic's partitions, or
    a ``typed`` field of its own (a session's typed read is its command's)."""
    groups = {kind: [FuzzInput("typed_fetch_session", kind, label, "session", build=lambda: dumps(_fetch()),
                               descriptor=("cmd", _session_command(read)), led_topic=TYPED_TOPIC)
                     for label, read in cases]
              for kind, cases in _typed_read_cases().items()}
    other = copy.deepcopy(valid_typed_read())
    other["topic"] = KEEP_TOPIC
    groups["typed_shape"] = [
        FuzzInput("typed_fetch_session", "typed_shape", f"typed session, request naming {KEEP_TOPIC}'s partition",
                  "session", build=lambda: dumps(_fetch(KEEP_TOPIC)), descriptor=("cmd", _session_command(
                      valid_typed_read())), led_topic=KEEP_TOPIC),
        FuzzInput("typed_fetch_session", "typed_shape", "typed session, request with a typed read of its own",
                  "session", build=lambda: dumps(_fetch(typed=other)),
                  descriptor=("cmd", _session_command(valid_typed_read())), led_topic=TYPED_TOPIC),
        FuzzInput("typed_fetch_session", "typed_shape", "Kafka-shaped session, request with a typed read",
                  "session", build=lambda: dumps(_fetch(typed=valid_typed_read())),
                  descriptor=("cmd", lambda: dumps({"type": "fetch_session"})), led_topic=TYPED_TOPIC),
        FuzzInput("typed_fetch_session", "typed_shape", "Kafka-shaped session of the typed topic", "session",
                  build=lambda: dumps(_fetch()), descriptor=("cmd", lambda: dumps({"type": "fetch_session"})),
                  led_topic=TYPED_TOPIC)]
    return choose_groups(groups, rng, per_group)

