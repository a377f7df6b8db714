"""Length fields of Kafka requests checked before kio decodes them (ads_spark/kafka/wire_bounds.py, frames.py).

kio 0.6.5's native reader reserves an array's room from the array's length field: a compact array length of
2^32 or more asks for tens of GiB and Rust aborts the process. The frames below killed a broker before the
check; the decode runs in a fresh interpreter so that an abort fails one test instead of the whole run.
The walk must also agree with kio on every valid request (the same end offset), or valid requests would be
refused: checked for every request class and version kio has, empty and with every array filled.
"""

from __future__ import annotations

import dataclasses
import io
import random
import struct
import uuid

import pytest
from kio.schema.index import api_key_map
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveTupleField, classify_field

from ads_spark.kafka import entities, frames, wire_bounds
from ads_spark.kafka.api import ApiHandler
from tests.fixtures.fresh_interpreter import run_python

SAMPLE_VALUES = {"string": "ab", "bytes": b"xy", "records": b"xyz", "uuid": uuid.UUID(int=5), "bool": True,
                 "float64": 1.5, "error_code": 0, "timedelta_i32": 1, "timedelta_i64": 1, "datetime_i64": 1}
# The PLAN's version table (issue #25); the frames.decode_request tests serve it with no-op handlers.
TABLE = {0: (3, 9), 1: (4, 12), 2: (1, 6), 3: (0, 11), 8: (2, 8), 9: (1, 7), 10: (0, 3), 11: (0, 7), 12: (0, 4),
         13: (0, 4), 14: (0, 5), 15: (0, 5), 16: (0, 4), 17: (0, 1), 18: (0, 3), 19: (2, 7), 20: (1, 6), 21: (0, 2),
         22: (0, 4), 23: (2, 4), 32: (1, 4), 33: (0, 2), 36: (0, 2), 37: (0, 3), 42: (0, 2), 44: (0, 1), 47: (0, 0),
         60: (0, 1)}
SERVED = {key: ApiHandler(key, f"api{key}", low, high, lambda call, request: {}) for key, (low, high) in TABLE.items()}


def _sample(cls: type) -> dict:
    """Every field set, every array holding two elements (nested ones too), every tagged field off its default."""
    value = {}
    for field in dataclasses.fields(cls):
        kind = classify_field(field)
        if isinstance(kind, EntityTupleField):
            value[field.name] = (_sample(kind.type_),) * 2
        elif isinstance(kind, EntityField):
            value[field.name] = _sample(kind.type_)
        elif isinstance(kind, PrimitiveTupleField):
            value[field.name] = (SAMPLE_VALUES.get(field.metadata["kafka_type"], 1),) * 2
        else:
            value[field.name] = SAMPLE_VALUES.get(field.metadata["kafka_type"], 1)
    return value


def _request_classes():
    for key in sorted(api_key_map):
        for version in range(0, 20):
            try:
                yield entities.request_class(key, version)
            except Exception:  # no such version in kio
                continue


def _frame(api_key: int, version: int, fields: dict | None = None) -> bytes:
    """A valid request frame without its size prefix: header + body, as a client writes them."""
    cls = entities.request_class(api_key, version)
    header_cls = cls.__header_schema__
    buffer = io.BytesIO()
    entity_writer(header_cls)(buffer, header_cls(request_api_key=api_key, request_api_version=version,
                                                 correlation_id=7, client_id="k6"))
    entity_writer(cls)(buffer, entities.build(cls, fields or {}))
    return buffer.getvalue()


def test_the_walk_ends_where_kio_ends_on_every_valid_request():
    checked = 0
    for cls in _request_classes():
        for fields in ({}, _sample(cls)):
            buffer = io.BytesIO()
            entity_writer(cls)(buffer, entities.build(cls, fields))
            data = buffer.getvalue()
            _, consumed = entity_reader(cls)(data, 0)
            cursor = wire_bounds._Cursor(memoryview(data), 0)
            wire_bounds._entity_skipper(cls)(cursor)
            assert (cursor.pos, consumed) == (len(data), len(data)), (cls.__module__, fields)
            checked += 1
    assert checked > 500  # every API kio knows, every version, empty and filled


# (api key, version, body after the header): each aborted the process in kio's reader before the check
ABORTING_BODIES = [
    (19, 5, "ffffffff600000"),  # CreateTopics v5: topics, a compact array of ~2^35 (208 GB asked for)
    (3, 9, "ffffffff600000"),   # Metadata v9: topics
    (3, 9, "ffffffff0f0000"),   # Metadata v9: 2^32 - 2 topics (34 GB)
    (0, 9, "00ffff000003e8ffffffff7f00"),  # Produce v9: topic_data
]


@pytest.mark.parametrize("api_key, version, body_hex", ABORTING_BODIES)
def test_an_array_longer_than_the_frame_is_refused_before_kio_reads_it(api_key, version, body_hex):
    header = _frame(api_key, version)[:len(_frame(api_key, version)) - len(_frame_body(api_key, version))]
    data = header + bytes.fromhex(body_hex)
    script = ("import sys\nfrom ads_spark.kafka import frames\nfrom ads_spark.kafka.api import ApiHandler\n"
              f"table = {{{api_key}: ApiHandler({api_key}, 'x', 0, 20, None)}}\n"
              f"out = frames.decode_request(bytes.fromhex({data.hex()!r}), table)\n"
              "print(type(out).__name__, getattr(out, 'reason', ''))\n")
    result = run_python(["-c", script], cwd=".")
    assert result.returncode == 0, f"the decode killed the interpreter: {result.stderr[-400:]}"
    assert result.stdout.startswith("Close") and "claims" in result.stdout, result.stdout


def _frame_body(api_key: int, version: int) -> bytes:
    cls = entities.request_class(api_key, version)
    buffer = io.BytesIO()
    entity_writer(cls)(buffer, entities.build(cls, {}))
    return buffer.getvalue()


def test_a_legacy_array_longer_than_the_frame_is_refused():
    # Metadata v8: topics claims 2^31 - 1 elements (kio would reserve 16 GiB: an abort on a smaller machine)
    data = _frame(3, 8)[:-len(_frame_body(3, 8))] + struct.pack(">i", 0x7FFFFFFF)
    outcome = frames.decode_request(data, SERVED)
    assert isinstance(outcome, frames.Close) and "claims 2147483647 elements" in outcome.reason


def test_an_unknown_tagged_field_closes_the_connection_instead_of_escaping():
    # Metadata v9 with one tagged field of tag 5 (kio raises KeyError for tags its schema lacks)
    data = _frame(3, 9)[:-1] + bytes([1, 5, 1, 0])
    outcome = frames.decode_request(data, SERVED)
    assert isinstance(outcome, frames.Close) and "KeyError" in outcome.reason


def test_mutated_requests_only_ever_decode_or_close():
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    bases = [_frame(key, version, fields) for key, (low, high) in TABLE.items() for version in range(low, high + 1)
             for fields in ({}, _sample(entities.request_class(key, version)))]
    for _ in range(20_000):
        data = bytearray(rng.choice(bases))
        at = rng.randrange(len(data))
        if rng.random() < 0.5:
            data[at] ^= 1 << rng.randrange(8)
        else:
            data[at:at + 5] = rng.choice([b"\xff\xff\xff\xff\x7f", b"\xff\xff\xff\xff\x0f", b"\x7f\xff\xff\xff",
                                          rng.randbytes(5)])
        outcome = frames.decode_request(bytes(data), SERVED)
        assert isinstance(outcome, (frames.Request, frames.Reply, frames.Close)), f"seed {seed}: {bytes(data).hex()}"
