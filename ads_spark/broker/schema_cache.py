"""A broker's view of typed topics' registered schema versions, read from ZooKeeper and kept.

Versions are immutable once registered, so a version is read once per topic incarnation (keyed by the
topic id: a topic deleted and created again under its name starts at version 1 with another schema)
and kept, bounded by ``VERSIONS_MAX``. Only "which version is the latest" changes: it is re-read when
older than ``LATEST_REFRESH_MS``, or at once when a producer names a version this broker has not seen
(a producer that registered a version sends it next). The leader resolves every produced batch to the
latest it knows; a batch produced within ``LATEST_REFRESH_MS`` of a registration may be stored under
the version before, which readers resolve like any older version.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

import pyarrow as pa

from ads_spark.protocol.typed_records import typed_record_schema

VERSIONS_MAX = 1024
LATEST_REFRESH_MS = 1000


class SchemaCache:
    """``zk_client()`` gives the broker's ZkClient (``latest_schema``, ``schema_version``)."""

    def __init__(self, zk_client: Callable[[], object], clock_ms: Callable[[], float] | None = None):
        self._zk_client = zk_client
        self._clock_ms = clock_ms or (lambda: time.monotonic() * 1000)
        self._lock = threading.Lock()
        self._versions: dict[tuple[str, int], pa.Schema] = {}  # (topic id, version) -> user schema
        self._stored: dict[tuple[str, int], pa.Schema] = {}  # (topic id, version) -> typed record schema
        self._latest: dict[str, tuple[int, float]] = {}  # topic id -> (latest version, when read in ms)

    def user_schema(self, topic: str, topic_id: str, version: int) -> pa.Schema:
        """The user columns of ``version`` as registered (UnknownTopicOrPartitionError when it is not)."""
        key = (topic_id, version)
        with self._lock:
            found = self._versions.get(key)
        if found is None:
            _, found = self._zk_client().schema_version(topic, version)
            self._keep(key, found)
        return found

    def stored_schema(self, topic: str, topic_id: str, version: int) -> pa.Schema:
        """What a segment of ``version`` holds (``typed_record_schema``), built once per version: followers ask
        for it for every fetched message."""
        key = (topic_id, version)
        with self._lock:
            found = self._stored.get(key)
        if found is None:
            found = typed_record_schema(self.user_schema(topic, topic_id, version), version)
            with self._lock:
                if len(self._stored) >= VERSIONS_MAX:
                    self._stored.clear()
                self._stored[key] = found
        return found

    def latest(self, topic: str, topic_id: str, at_least: int = 0) -> tuple[int, pa.Schema]:
        """(latest version, its user schema), re-read when stale or older than ``at_least``."""
        now = self._clock_ms()
        with self._lock:
            known = self._latest.get(topic_id)
        if known is None or known[0] < at_least or now - known[1] >= LATEST_REFRESH_MS:
            version, schema = self._zk_client().latest_schema(topic)
            self._keep((topic_id, version), schema)
            with self._lock:
                if len(self._latest) >= VERSIONS_MAX:
                    self._latest.clear()
                self._latest[topic_id] = (version, now)
            return version, schema
        return known[0], self.user_schema(topic, topic_id, known[0])

    def _keep(self, key: tuple[str, int], schema: pa.Schema) -> None:
        with self._lock:
            if len(self._versions) >= VERSIONS_MAX:
                self._versions.clear()
            self._versions[key] = schema
