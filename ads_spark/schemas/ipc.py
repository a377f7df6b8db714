"""A typed topic's schema as it travels and is stored: ``pyarrow.Schema.serialize()`` (Arrow IPC, field ids
and comments in the field metadata) in base64 text, the one form used by the admin actions' JSON bodies and
by the schema version znodes (``broker/zk/schemas.py``), so the client, the broker and ZooKeeper share it.

Decoding is strict: text that is not base64, not an IPC schema message, or a schema with names that are not
UTF-8 is refused with InvalidRequestError naming the field, before anything reads the schema.
"""

from __future__ import annotations

import base64
import binascii

import pyarrow as pa

from ads_spark.errors import InvalidRequestError


def to_base64(schema: pa.Schema) -> str:
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def from_base64(text: str, what: str = "schema") -> pa.Schema:
    """The schema ``text`` holds; InvalidRequestError naming ``what`` when it is not one."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, AttributeError):
        raise InvalidRequestError(f"{what}: not base64 text of an Arrow IPC schema") from None
    try:
        schema = pa.ipc.read_schema(pa.py_buffer(raw))
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OSError) as exc:
        raise InvalidRequestError(f"{what}: not an Arrow IPC schema ({exc})") from None
    try:
        for field in schema:
            _read_texts(field)
    except UnicodeDecodeError:
        raise InvalidRequestError(f"{what}: a name, time zone or ADS comment is not valid UTF-8") from None
    return schema


def _read_texts(field: pa.Field) -> None:
    """Decode every text of ``field`` pyarrow decodes lazily (names, nested ones too, a timestamp's time zone)
    and the ADS comment ``ddl.to_ddl`` prints: IPC does not check that they are UTF-8, so a bad one would
    otherwise surface later, wherever it is first read, as an untyped UnicodeDecodeError."""
    _ = field.name
    if pa.types.is_timestamp(field.type):
        _ = field.type.tz
    for key, value in (field.metadata or {}).items():
        if key.startswith(b"ads."):
            value.decode("utf-8")
    for index in range(field.type.num_fields):
        _read_texts(field.type.field(index))
