"""The client side of typed topics: their registered versions, and a table made to fit one before it is sent.

A producer of a typed topic sends each batch in the produce schema of the version it names
(``protocol/typed_records.py``); the leader checks it again on the data (``broker/typed_produce.py``), so
this side only saves a round trip and makes the common differences fit: columns matched by name and put
in the registered order, safe casts to the registered types (Spark's and pandas' int widths, time units
and zones), absent nullable columns as nulls. What cannot fit is refused here with every column named,
before anything is sent.

Versions are read with the ``describe_schema`` action and kept per topic for ``SCHEMAS_REFRESH_MS``; a
version is immutable, so only "which is the latest" goes stale.
"""

from __future__ import annotations

import threading
import weakref
import time
from typing import Any

import pyarrow as pa

from ads_spark.config_schemas import ARROW
from ads_spark.errors import CorruptMessageError, InvalidRecordError, InvalidRequestError
from ads_spark.protocol import wire
from ads_spark.protocol.records import ALL_ROWS, NO_SCHEMA_ID
from ads_spark.protocol.typed_records import (
    META_COLUMNS, TYPED_STORED_PREFIX, produce_columns, schema_id_of, typed_produce_schema, with_offsets,
)
from ads_spark.schemas import ipc

SCHEMAS_REFRESH_MS = 5000
TOPICS_KEPT_MAX = 1024


class TopicSchemas:
    """Registered versions of typed topics, read through ``connections`` (``protocol/connection.py``)."""

    def __init__(self, connections):
        self._connections = connections
        self._lock = threading.Lock()
        self._topics: dict[str, tuple[float, dict[str, Any]]] = {}

    def describe(self, topic: str, at_least_version: int = 0, fresh: bool = False) -> dict[str, Any]:
        """{"schema_type", "compatibility", "latest", "versions": {n: user schema}}, re-read when stale
        (or ``fresh``)."""
        with self._lock:
            kept = self._topics.get(topic)
        now = time.monotonic() * 1000
        if not fresh and kept is not None and now - kept[0] < SCHEMAS_REFRESH_MS \
                and kept[1]["latest"] >= at_least_version:
            return kept[1]
        answer = self._connections.call_any(wire.ACTION_DESCRIBE_SCHEMA, {"topic": topic})
        described = {"schema_type": answer["schema_type"], "compatibility": answer.get("compatibility"),
                     "latest": int(answer["latest"]),
                     "versions": {int(v["version"]): ipc.from_base64(v["schema"], f"version {v['version']}")
                                  for v in answer["versions"]}}
        with self._lock:
            if len(self._topics) >= TOPICS_KEPT_MAX:
                self._topics.clear()
            self._topics[topic] = (now, described)
        return described

    def version(self, topic: str, version: int | None = None, fresh: bool = False) -> tuple[int, pa.Schema]:
        """(version, user schema): the one asked for, or the latest; InvalidRequestError for a Kafka-shaped topic
        or a version that is not a registered one's number."""
        if version is not None and (type(version) is not int or version < 1):
            raise InvalidRequestError(f"schema version must be a version number (>= 1), got {version!r}")
        described = self.describe(topic, version or 0, fresh)
        if described["schema_type"] != ARROW:
            raise InvalidRequestError(f"topic '{topic}' is not typed (schema.type={described['schema_type']})")
        chosen = described["latest"] if version is None else version
        if chosen not in described["versions"]:
            raise InvalidRequestError(f"topic '{topic}' has no schema version {chosen} "
                                      f"(latest {described['latest']})")
        return chosen, described["versions"][chosen]


def fit_to_version(batch: pa.RecordBatch, topic: str, version: int, registered: pa.Schema) -> pa.RecordBatch:
    """``batch`` in the produce schema of ``version``, or InvalidRecordError naming every column that does not fit.
    A batch already in that schema (the Spark sink fits its rows before handing them to ``produce_arrow``) is
    returned as it is: the leader checks it on the data anyway."""
    target = typed_produce_schema(registered, version)
    if batch.schema.equals(target, check_metadata=True):
        return batch
    columns, problems = produce_columns(batch, registered, cast=True)
    if problems:
        raise InvalidRecordError(f"topic '{topic}' schema version {version}: " + "; ".join(problems)
                                 + "; nothing was sent")
    return pa.RecordBatch.from_arrays(columns, schema=target)


def fit_to_latest(schemas: TopicSchemas, batch: pa.RecordBatch, topic: str,
                  version: int | None = None) -> pa.RecordBatch:
    """``fit_to_version`` of ``version`` or the latest; a batch that does not fit the latest known is tried
    once more against a fresh read (another client may just have registered the version it needs)."""
    chosen, registered = schemas.version(topic, version)
    try:
        return fit_to_version(batch, topic, chosen, registered)
    except InvalidRecordError:
        if version is not None:
            raise
        fresh_version, fresh = schemas.version(topic, None, fresh=True)
        if fresh_version == chosen:
            raise
        return fit_to_version(batch, topic, fresh_version, fresh)


def is_typed_batch(batch: pa.RecordBatch) -> bool:
    """A batch meant for a typed topic: it names a version, or has no Kafka-shaped ``value`` column."""
    return schema_id_of(batch.schema) != NO_SCHEMA_ID or "value" not in batch.schema.names


def typed_read(topic: str, version: int, columns: list[str] | None = None,
               filters: list | None = None, meta: list[str] | None = None) -> dict[str, Any]:
    """The ``typed`` field of a fetch request (``request_schemas.TYPED_READ``); ``filters``: predicates
    (``schemas.statistics.Predicate``) the broker skips batches by, sent in ``predicate_to_wire``'s form;
    ``meta``: which of timestamp, key, headers to receive (None: all three)."""
    read: dict[str, Any] = {"topic": topic, "version": int(version)}
    if columns is not None:
        read["columns"] = list(columns)
    if meta is not None:
        read["meta"] = list(meta)
    if filters:
        from ads_spark.schemas.statistics import predicate_to_wire
        read["filters"] = [predicate_to_wire(p) for p in filters]
    return read


# A TopicSchemas per Connections (a process's consumers share their connections): versions are read once.
_SCHEMAS_BY_CONNECTIONS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def local_projection(connections, typed: dict | None):
    """The ``ProjectedRead`` a local read of the typed read ``typed`` applies to mapped segments (None: a
    Kafka-shaped read), its versions read through ``connections``."""
    if typed is None:
        return None
    from ads_spark.schemas.projection import ProjectedRead

    schemas = schemas_for(connections)
    topic = typed["topic"]
    return ProjectedRead(topic, typed["version"], typed.get("columns"),
                         lambda version: schemas.version(topic, version)[1], typed.get("filters"),
                         typed.get("meta", META_COLUMNS))


def schemas_for(connections) -> TopicSchemas:
    """The TopicSchemas kept for ``connections``."""
    schemas = _SCHEMAS_BY_CONNECTIONS.get(connections)
    if schemas is None:
        schemas = _SCHEMAS_BY_CONNECTIONS[connections] = TopicSchemas(connections)
    return schemas


class TypedReadMethods:
    """The consumer's typed reads (mixed into ``Consumer``, which has ``_connections``): a topic declared with
    ``read_typed`` comes back from ``poll_arrow`` (and ``fetch_range``'s callers) as Arrow tables of one schema
    version's columns, projected on the brokers or in the mapped files, on fetch sessions of their own."""

    @property
    def typed_reads(self) -> dict[str, dict[str, Any]]:
        """topic -> its typed read (``typed_read``), as declared by ``read_typed``."""
        return self.__dict__.setdefault("_typed_reads", {})

    def read_typed(self, topic: str, columns: list[str] | None = None, version: int | None = None) -> pa.Schema:
        """Read ``topic`` typed from now on: version ``version`` (None: the latest now), only ``columns`` (None:
        all); returns the schema of the tables ``poll_arrow`` will give for it. A batch of a later version is
        read as this one; one this version cannot read fails the poll naming both versions."""
        from ads_spark.schemas.projection import ProjectedRead

        schemas = schemas_for(self._connections)
        chosen, _ = schemas.version(topic, version)
        read = typed_read(topic, chosen, columns)
        projection = ProjectedRead(topic, chosen, read.get("columns"),
                                   lambda v: schemas.version(topic, v)[1])  # refuses unknown columns by name
        self.typed_reads[topic] = read
        return pa.schema([TYPED_STORED_PREFIX[0], *projection.schema])  # the offset, rebuilt from headers


def received_batches(pairs: list, typed: dict | None) -> list[pa.RecordBatch]:
    """The record batches of a fetch answer's (batch, chunk metadata) pairs; a typed read's get their ``offset``
    column back from their headers (``typed_records.with_offsets``), checked against the header's span."""
    if typed is None:
        return [batch for batch, _ in pairs]
    out = []
    for batch, meta in pairs:
        header = meta.get("header") or {}
        if "base_offset" not in header or header.get("record_count") != batch.num_rows \
                or header.get("row_count", ALL_ROWS) != ALL_ROWS:
            raise CorruptMessageError(f"typed fetch answer: a batch of {batch.num_rows} rows with header {header}")
        out.append(with_offsets(batch, int(header["base_offset"])))
    return out
