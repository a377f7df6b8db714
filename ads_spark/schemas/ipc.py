"""A typed topic's schema as it travels and is stored: ``pyarrow.Schema.serialize()`` (Arrow IPC, field ids
and comments in the field metadata) in base64 text, the one form used by the admin actions' JSON bodies and
by the schema version znodes (``broker/zk/schemas.py``), so the client, the broker and ZooKeeper share it.

Decoding is strict: text that is not base64 or not an IPC schema message is refused with
InvalidRequestError naming the field, before anything reads the schema.
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
        return pa.ipc.read_schema(pa.py_buffer(raw))
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OSError) as exc:
        raise InvalidRequestError(f"{what}: not an Arrow IPC schema ({exc})") from None
