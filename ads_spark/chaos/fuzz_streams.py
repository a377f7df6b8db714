"""The fuzzer's streams: DoPut/DoExchange descriptors, produce streams with bad metadata or bad Arrow data.

Apart from ``fuzz_inputs`` (the JSON templates and their variants) because these are built from
Arrow batches, and one of them is the input that crashed a broker (issue #20, finding 1): a valid
batch whose body the raw proxy (``fuzz_raw``) replaces in transit. ``garbage_batch`` is the nearest
pyarrow itself will send: random buffers whose offsets pass a cheap check and fail a full one.
"""

from __future__ import annotations

import random
from typing import Callable

import numpy as np
import pyarrow as pa

from ads_spark.chaos.fuzz_inputs import (
    OVERSIZED_BYTES, OVERSIZED_TIMEOUT_S, PRODUCE_META_TEMPLATE, SINK_TOPIC, UNKNOWN_FIELD, FuzzInput, choose,
    deep_list, deep_object, dumps, variants,
)
from ads_spark.protocol.records import PRODUCE_SCHEMA


def _commands(kinds: tuple[str, ...]) -> list[tuple[str, Callable[[], bytes]]]:
    """(label, build) of each bad command: a known type with an unknown field, then bodies wrong as a whole."""
    known = [(f"cmd {{'type': {k!r}, {UNKNOWN_FIELD!r}: 1}}", lambda k=k: dumps({"type": k, UNKNOWN_FIELD: 1}))
             for k in kinds]
    return known + [
        ("cmd b''", lambda: b""), ("cmd b'not json'", lambda: b"not json"), ("cmd [1]", lambda: b"[1]"),
        ("cmd null", lambda: b"null"), ("cmd {'type': 'zzz'}", lambda: dumps({"type": "zzz"})),
        ("cmd {'type': 5}", lambda: dumps({"type": 5})), ("cmd {'type': '\\ud800'}", lambda: dumps({"type": "\ud800"})),
        ("cmd invalid UTF-8", lambda: b'{"type": "\xff\xfe"}'), ("cmd [[[...]]]", deep_list),
        ("cmd {'a': {...}}", deep_object),
        (f"cmd of {OVERSIZED_BYTES >> 20} MiB", lambda: dumps({"type": kinds[0], "pad": "a" * OVERSIZED_BYTES})),
    ]


def descriptor_inputs() -> list[FuzzInput]:
    """DoPut and DoExchange descriptors: paths, commands that are not JSON, unknown types, wrong field types."""
    found = []
    for call, kinds in (("put", ("produce",)), ("exchange", ("produce", "fetch_session"))):
        # Not a path that is not UTF-8: protobuf refuses it before any broker code sees it.
        for parts in (("a",), ("..", "x"), ("a" * 4096,)):
            shown = [part if len(part) <= 16 else f"{part[:8]}...({len(part)} chars)" for part in parts]
            found.append(FuzzInput("descriptors", "path_descriptor", f"{call} path {shown}", call,
                                   descriptor=("path", parts)))
        for label, build in _commands(kinds):
            found.append(FuzzInput("descriptors", "command", f"{call} {label}", call, descriptor=("cmd", build),
                                   timeout_s=OVERSIZED_TIMEOUT_S if "MiB" in label else None))
    for value in ("false", 2, [], {}):
        body = {"type": "fetch_session", "replica_messages": value}
        found.append(FuzzInput("descriptors", "wrong_type", f"exchange {body!r}", "exchange",
                               descriptor=("cmd", lambda b=body: dumps(b))))
    return found


def produce_meta_inputs(rng: random.Random, per_group: int | None) -> list[FuzzInput]:
    """One-record produce streams to a partition the broker leads, each chunk's metadata with one thing wrong."""
    return [FuzzInput("produce_metadata", v.kind, v.label, "produce", build=v.build, schema=PRODUCE_SCHEMA,
                      batch=one_record_batch, led_topic=SINK_TOPIC,
                      timeout_s=OVERSIZED_TIMEOUT_S if v.kind == "oversized" else None)
            for v in choose(variants(PRODUCE_META_TEMPLATE), rng, per_group)]


def produce_meta() -> bytes:
    return dumps(PRODUCE_META_TEMPLATE.body)


def one_record_batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{"timestamp": 0, "key": None, "value": b"fuzz", "headers": None}],
                                      schema=PRODUCE_SCHEMA)


def full_batch(rows: int = 1000, value_bytes: int = 1000) -> pa.RecordBatch:
    """A valid ~1 MiB batch of the producer's schema; the proxy replaces its body in transit."""
    return pa.RecordBatch.from_pylist([{"timestamp": 1, "key": b"k", "value": b"v" * value_bytes,
                                        "headers": [{"key": "h", "value": b"v"}]}] * rows, schema=PRODUCE_SCHEMA)


def garbage_batch(seed: int, rows: int = 1000, body_bytes: int = 1 << 20) -> pa.RecordBatch:
    """PRODUCE_SCHEMA over random buffers: random timestamps, and offsets that are random int32s between a
    first of 0 and a last that fits the data (what ``Array.from_buffers`` checks; pyarrow refuses any other
    batch on the client). Valid to a cheap check, nonsense to a full one."""
    rng = random.Random(seed)

    def offsets(count: int, data_bytes: int) -> pa.Buffer:
        values = np.frombuffer(rng.randbytes(4 * (count + 1)), dtype=np.int32).copy()
        values[0], values[-1] = 0, data_bytes
        return pa.py_buffer(values)

    def binary(kind: pa.DataType, count: int, data_bytes: int) -> pa.Array:
        data = pa.py_buffer(rng.randbytes(data_bytes))
        return pa.Array.from_buffers(kind, count, [None, offsets(count, data_bytes), data])

    header_type = PRODUCE_SCHEMA.field("headers").type
    header_rows = rows // 2
    headers = pa.StructArray.from_arrays(
        [binary(pa.string(), header_rows, 4096), binary(pa.binary(), header_rows, 4096)],
        fields=list(header_type.value_type))
    columns = [pa.Array.from_buffers(pa.timestamp("ms"), rows, [None, pa.py_buffer(rng.randbytes(8 * rows))]),
               binary(pa.binary(), rows, 8192), binary(pa.binary(), rows, body_bytes),
               pa.Array.from_buffers(header_type, rows, [None, offsets(rows, header_rows)], children=[headers])]
    return pa.RecordBatch.from_arrays(columns, schema=PRODUCE_SCHEMA)


def _wrong_schema_batches() -> list[tuple[str, Callable[[], pa.RecordBatch]]]:
    one = {"value": [b"v"]}
    return [
        ("schema {x: int32}", lambda: pa.RecordBatch.from_pydict({"x": pa.array([1], pa.int32())})),
        ("schema without value", lambda: pa.RecordBatch.from_pydict({"key": pa.array([b"k"])})),
        ("value as int64", lambda: pa.RecordBatch.from_pydict({"value": pa.array([1], pa.int64())})),
        ("timestamp as string", lambda: pa.RecordBatch.from_pydict({**one, "timestamp": pa.array(["x"])})),
        ("unknown column", lambda: pa.RecordBatch.from_pydict({**one, UNKNOWN_FIELD: pa.array([1])})),
        ("headers as int64", lambda: pa.RecordBatch.from_pydict({**one, "headers": pa.array([1])})),
        ("value as list<binary>", lambda: pa.RecordBatch.from_pydict({"value": pa.array([[b"v"]])})),
        ("null timestamp", lambda: pa.RecordBatch.from_arrays(
            [pa.nulls(1, pa.timestamp("ms")), pa.array([None], pa.binary()), pa.array([b"v"]),
             pa.nulls(1, PRODUCE_SCHEMA.field("headers").type)], schema=PRODUCE_SCHEMA)),
    ]


def produce_arrow_inputs(rng: random.Random) -> list[FuzzInput]:
    """Produce streams with a valid chunk metadata and bad Arrow data."""
    found = [FuzzInput("produce_arrow", "wrong_schema", label, "produce", build=produce_meta, schema=None,
                       batch=make, led_topic=SINK_TOPIC) for label, make in _wrong_schema_batches()]
    found.append(FuzzInput("produce_arrow", "empty_batch", "0 rows", "produce", build=produce_meta,
                           schema=PRODUCE_SCHEMA, batch=lambda: one_record_batch().slice(0, 0), led_topic=SINK_TOPIC))
    found.append(FuzzInput("produce_arrow", "no_batch", "metadata only", "produce", build=produce_meta,
                           schema=PRODUCE_SCHEMA, batch=lambda: None, led_topic=SINK_TOPIC))
    seed = rng.randrange(2 ** 32)
    found.append(FuzzInput("produce_arrow", "garbage_buffers", f"random buffers, offsets random int32s (seed {seed})",
                           "produce", build=produce_meta, schema=PRODUCE_SCHEMA,
                           batch=lambda: garbage_batch(seed), led_topic=SINK_TOPIC))
    return found


def produce_raw_inputs(rng: random.Random) -> list[FuzzInput]:
    """A valid ~1 MiB produce whose message body the proxy replaces in transit (fuzz_raw.py)."""
    return [FuzzInput("produce_raw", f"body_{mode}", f"valid header, body {mode} (seed {seed})", "raw_produce",
                      build=produce_meta, schema=PRODUCE_SCHEMA, batch=full_batch, scramble=f"{mode}:{seed}",
                      led_topic=SINK_TOPIC)
            for mode, seed in (("random", rng.randrange(2 ** 32)), ("ones", 0), ("flip", rng.randrange(2 ** 32)))]
