"""One pipelined produce stream to one broker.

Batches go out on a long-lived Flight ``do_put`` stream, each with a correlation
id in its app metadata; a reader thread matches the broker's responses (which
may come back out of order, since acks=all completes when replication allows)
to the batches that are waiting. If the stream breaks, every batch on it fails
with a retriable network error and the producer resends it on a new stream.
"""

from __future__ import annotations

import itertools
import logging
import threading
from typing import Any, Callable

import pyarrow as pa
import pyarrow.flight as flight

from ads_spark.client import wire
from ads_spark.errors import AdsError, NetworkExceptionError, error_for
from ads_spark.records import PRODUCE_SCHEMA

log = logging.getLogger("ads.client.channel")

Callback = Callable[[Any, int | None, AdsError | None], None]


class BrokerChannel:
    def __init__(self, client: flight.FlightClient, broker_id: int, stream_timeout_ms: int):
        self.broker_id = broker_id
        self.broken = False
        self._ids = itertools.count(1)
        self._waiting: dict[int, tuple[Any, Callback]] = {}
        self._lock = threading.Lock()
        descriptor = flight.FlightDescriptor.for_command(wire.dumps({"type": wire.PRODUCE}))
        # The stream lives as long as the producer uses it; the timeout only bounds a dead peer.
        options = flight.FlightCallOptions(timeout=max(stream_timeout_ms, 60_000) / 1000 * 100)
        self._writer, self._reader = client.do_put(descriptor, PRODUCE_SCHEMA, options)
        self._reader_thread = threading.Thread(target=self._read_responses, name=f"ads-produce-{broker_id}",
                                               daemon=True)
        self._reader_thread.start()

    def send(self, item: Any, meta: dict[str, Any], callback: Callback) -> None:
        correlation_id = next(self._ids)
        meta = dict(meta, correlation_id=correlation_id)
        with self._lock:
            if self.broken:
                raise NetworkExceptionError(f"produce stream to broker {self.broker_id} is closed")
            self._waiting[correlation_id] = (item, callback)
            try:
                self._writer.write_with_metadata(item.batch, pa.py_buffer(wire.dumps(meta)))
            except Exception as exc:
                self._waiting.pop(correlation_id, None)
                self._break_locked()
                raise wire.to_ads_error(exc) from None

    def _read_responses(self) -> None:
        try:
            while True:
                buf = self._reader.read()
                if buf is None:
                    break
                response = wire.loads(buf, "produce response")
                with self._lock:
                    waiting = self._waiting.pop(response.get("correlation_id"), None)
                if waiting is None:
                    continue
                item, callback = waiting
                code = int(response.get("error_code", 0))
                if code:
                    callback(item, None, error_for(code, response.get("message", "")))
                else:
                    callback(item, int(response["base_offset"]), None)
        except Exception as exc:
            log.debug("produce stream to broker %s failed: %s", self.broker_id, exc)
        finally:
            with self._lock:
                self._break_locked()
                stranded, self._waiting = list(self._waiting.values()), {}
            for item, callback in stranded:
                callback(item, None, NetworkExceptionError(f"lost the produce stream to broker {self.broker_id}"))

    def _break_locked(self) -> None:
        if self.broken:
            return
        self.broken = True
        try:
            self._writer.done_writing()
        except Exception:
            pass

    def close(self) -> None:
        with self._lock:
            self._break_locked()
        self._reader_thread.join(5)
        try:
            self._writer.close()
        except Exception:
            pass
