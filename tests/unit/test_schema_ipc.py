"""The base64 IPC form of a typed topic's schema (schemas/ipc.py): a round trip keeps field ids and comments;
text that is not base64, not an IPC schema, or names that are not UTF-8 are INVALID_REQUEST naming the field,
never an untyped error later (a seeded mutation of valid schemas checks that)."""

from __future__ import annotations

import base64
import random

import pyarrow as pa
import pytest

from ads_spark.errors import AdsError, InvalidRequestError
from ads_spark.schemas import ddl, ipc, types

V1 = "order_id BIGINT NOT NULL COMMENT 'the key', amount DECIMAL(10,2), region STRING, ts TIMESTAMP"


def test_a_round_trip_keeps_field_ids_and_comments():
    schema = types.with_field_ids(ddl.parse(V1), None)
    back = ipc.from_base64(ipc.to_base64(schema))
    assert back.equals(schema, check_metadata=True) and ddl.to_ddl(back) == ddl.to_ddl(schema)


@pytest.mark.parametrize("text, problem", [
    ("not base64!", "not base64 text"), ("", "not an Arrow IPC schema"), ("AAAA", "not an Arrow IPC schema"),
    (base64.b64encode(pa.schema([("abc", pa.int8())]).serialize().to_pybytes().replace(b"abc", b"\xff\xfe\xfd"))
     .decode(), "a name, time zone or ADS comment is not valid UTF-8"),
])
def test_what_is_not_a_schema_is_refused_naming_the_field(text, problem):
    with pytest.raises(InvalidRequestError, match=f"register_schema: schema: {problem}"):
        ipc.from_base64(text, "register_schema: schema")


def test_mutated_schemas_are_accepted_or_refused_with_a_typed_error():
    valid = ddl.parse(V1).serialize().to_pybytes()
    nested = pa.schema([("s", pa.struct([("inner", pa.int32())])), ("t", pa.timestamp("ms", tz="Europe/Paris"))]
                       ).serialize().to_pybytes()
    rng = random.Random(26)
    for attempt in range(3000):
        raw = bytearray(valid if attempt % 2 else nested)
        for _ in range(rng.randint(1, 6)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        try:
            stored = types.with_field_ids(ipc.from_base64(base64.b64encode(bytes(raw)).decode()), None)
            ddl.to_ddl(stored)
        except AdsError:
            pass
