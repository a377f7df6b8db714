"""One pipelined produce stream to one broker.

Batches go out on a long-lived Flight ``do_exchange`` stream, each with a correlation
id in its app metadata; a reader thread matches the broker's responses (which
may come back out of order, since acks=all completes when replication allows)
to the batches that are waiting. If the stream breaks, every batch on it fails
with a retriable network error and the producer resends it on a new stream.

Two things keep one unreachable broker from stalling a producer (the
jepsen-2013 runs showed every partition stopping while one leader was cut off):

* ``send`` never blocks on the network. A writer thread of the channel's own
  writes the queued batches, so a stream whose flow-control window is full
  (the broker reads nothing) holds up only that broker's batches.
* A broker answers every produce within its request timeout (acks=all answers
  REQUEST_TIMED_OUT when replication does not complete), so a batch waiting
  longer than ``answer_deadline_ms`` means the broker or the path to it is gone.
  ``fail_overdue`` then breaks the channel: every waiting batch fails with a
  retriable network error, the stream is cancelled (which ends both of its
  threads at once, wherever they were blocked) and the producer opens a new
  stream.

acks=0 is fire-and-forget, as in Kafka: the broker sends no answer to an acks=0 batch that it
appends (an answer only when it refuses one, so that the producer refreshes its metadata, where
Kafka closes the connection), and the channel completes the batch with offset -1 as soon as it
is written to the stream, without waiting for the broker. Records may then be lost unseen.

The stream is opened with the ``transport``'s call options (the SASL token); a refusal of the
token or a TLS failure reaches the batches as that error, not as a lost stream, so that a client
without permission fails instead of resending until its delivery timeout.

The stream is an exchange rather than a ``do_put`` because only an exchange's
client side can be cancelled in pyarrow: an abandoned ``do_put`` held its two
threads until the stream's deadline, one pair per reconnect.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from typing import Any, Callable

import pyarrow as pa
import pyarrow.flight as flight

from ads_spark.protocol import wire
from ads_spark.errors import AdsError, ErrorCode, NetworkExceptionError, error_for
from ads_spark.protocol.records import PRODUCE_SCHEMA
from ads_spark.protocol.transport import PLAINTEXT, ClientTransport

log = logging.getLogger("ads.client.channel")

Callback = Callable[[Any, int | None, AdsError | None], None]
_AUTHENTICATION_CODES = (ErrorCode.SASL_AUTHENTICATION_FAILED, ErrorCode.SSL_AUTHENTICATION_FAILED)
STREAM_DEADLINE_S = 30 * 60.0  # bounds a stream's life should cancelling it ever fail to end it
CLOSE_WAIT_S = 5.0  # a closing channel's wait for its threads before it cancels the stream
THREAD_NAME_PREFIX = "ads-produce-"
STREAMS_ENDED_WAIT_S = 2.0  # how long live_stream_threads waits for ending streams before it counts


def live_stream_threads(wait_s: float = STREAMS_ENDED_WAIT_S) -> int:
    """The produce-stream threads still alive in this process, after up to ``wait_s`` for ending ones.

    With every producer closed this must reach 0: a thread left over is a stream some channel
    gave up on without ending it (the chaos runner reports the count)."""
    deadline = time.monotonic() + wait_s
    while True:
        alive = sum(1 for thread in threading.enumerate() if thread.name.startswith(THREAD_NAME_PREFIX))
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.05)


class BrokerChannel:
    def __init__(self, client: flight.FlightClient, broker_id: int, answer_deadline_ms: int,
                 on_unsolicited_error: Callable[[AdsError], None] | None = None, *,
                 transport: ClientTransport = PLAINTEXT, address: tuple[str, int] | None = None,
                 schema: pa.Schema = PRODUCE_SCHEMA):
        self.broker_id = broker_id
        self.schema = schema  # every batch of the stream is in it (a typed topic's version has a stream of its own)
        self._transport = transport
        self._address = address  # the broker's (host, port): asked first for a token when one is needed
        self._options: flight.FlightCallOptions | None = None  # the stream's, once opened
        # An error answer to an acks=0 batch already completed: the producer refreshes its metadata.
        self._on_unsolicited_error = on_unsolicited_error
        self.broken = False
        self._broken_by: AdsError | None = None  # why, once broken: the broker's refusal travels to the caller
        self.answer_deadline_s = answer_deadline_ms / 1000
        self._ids = itertools.count(1)
        # correlation id -> (item, callback, sent at); bounded by the producer's in-flight caps
        self._waiting: dict[int, tuple[Any, Callback, float]] = {}
        # (batch, metadata, correlation id of an acks=0 batch, completed once written, else None)
        self._outbox: deque[tuple[pa.RecordBatch, pa.Buffer, int | None]] = deque()  # bounded like _waiting
        self._lock = threading.Condition()
        self._client = client
        self._writer = self._reader = None  # opened by the writer thread: connecting may take long
        self._threads_running = 1  # the writer thread, and the reader once the stream is open
        self._stream_close = threading.Lock()  # done_writing and close never run at once
        self._reader_thread = threading.Thread(target=self._read_responses, name=f"{THREAD_NAME_PREFIX}{broker_id}",
                                               daemon=True)
        self._writer_thread = threading.Thread(target=self._write_batches, name=f"{THREAD_NAME_PREFIX}w{broker_id}",
                                               daemon=True)
        self._writer_thread.start()

    def send(self, item: Any, meta: dict[str, Any], callback: Callback) -> None:
        """Queue ``item.batch`` for the broker; ``callback`` gets its answer. Never waits for the network."""
        correlation_id = next(self._ids)
        meta = dict(meta, correlation_id=correlation_id)
        with self._lock:
            if self.broken:
                cause = self._broken_by
                if cause is not None and cause.code in _AUTHENTICATION_CODES and not cause.retriable:
                    raise error_for(cause.code, cause.message)  # a new stream would be refused the same way
                reason = cause.message if cause is not None else "closed by the producer"
                raise NetworkExceptionError(f"produce stream to broker {self.broker_id} is closed ({reason})")
            self._waiting[correlation_id] = (item, callback, time.monotonic())
            fire_and_forget = correlation_id if meta.get("acks") == 0 else None
            self._outbox.append((item.batch, pa.py_buffer(wire.dumps(meta)), fire_and_forget))
            self._lock.notify_all()

    def fail_overdue(self, now_s: float | None = None) -> bool:
        """Break the channel if a batch has waited past the answer deadline; True if it did."""
        now_s = time.monotonic() if now_s is None else now_s
        with self._lock:
            if self.broken or not self._waiting:
                return False
            oldest = min(sent for _, _, sent in self._waiting.values())
            if now_s - oldest <= self.answer_deadline_s:
                return False
        self._fail_all(NetworkExceptionError(
            f"no answer from broker {self.broker_id} within {self.answer_deadline_s:.0f}s; reconnecting"))
        return True

    def _open_stream(self) -> bool:
        """The stream, opened here and not by the producer's sender: towards a host that drops
        packets, connecting blocks until gRPC's connect timeout, and only this broker's batches may wait."""
        descriptor = flight.FlightDescriptor.for_command(wire.dumps({"type": wire.PRODUCE}))
        try:
            self._options = self._transport.call_options(STREAM_DEADLINE_S, self._address)
            writer, reader = self._client.do_exchange(descriptor, self._options)
        except Exception as exc:
            self._fail_all(self._error_of(exc))
            return False
        with self._lock:
            self._writer, self._reader = writer, reader  # from here on, _fail_all cancels it
        try:
            writer.begin(self.schema)
        except Exception as exc:
            self._fail_all(self._error_of(exc))
            return False
        with self._lock:
            broken = self.broken
            if not broken:
                self._threads_running += 1
        if broken:  # broken while connecting: nobody else will cancel this stream
            self._cancel_stream()
            return False
        self._reader_thread.start()
        return True

    def _write_batches(self) -> None:
        try:
            if self._open_stream():
                self._write_until_broken()
        finally:
            self._thread_ended()

    def _write_until_broken(self) -> None:
        while True:
            with self._lock:
                while not self._outbox and not self.broken:
                    self._lock.wait()
                if self.broken:
                    return
                batch, meta, fire_and_forget = self._outbox.popleft()
            try:
                self._writer.write_with_metadata(batch, meta)
            except Exception as exc:
                log.debug("produce stream to broker %s: write failed: %s", self.broker_id, exc)
                self._fail_all(self._error_of(exc))
                return
            if fire_and_forget is not None:  # acks=0: sent is done; the offset is unknown (-1)
                with self._lock:
                    waiting = self._waiting.pop(fire_and_forget, None)
                if waiting is not None:
                    waiting[1](waiting[0], -1, None)

    def _read_responses(self) -> None:
        try:
            while True:
                try:
                    buf = self._reader.read_chunk().app_metadata
                except StopIteration:
                    break
                if buf is None:
                    continue
                response = wire.loads(buf, "produce response")
                with self._lock:
                    waiting = self._waiting.pop(response.get("correlation_id"), None)
                code = int(response.get("error_code", 0))
                if waiting is None:
                    if code and self._on_unsolicited_error is not None:  # an acks=0 batch was refused
                        self._on_unsolicited_error(error_for(code, response.get("message", "")))
                    continue
                item, callback, _ = waiting
                if code:
                    callback(item, None, error_for(code, response.get("message", "")))
                else:
                    # A topic with message.timestamp.type=LogAppendTime: the broker's time replaced the
                    # records' timestamps, and their metadata reports it (as Kafka's RecordMetadata does).
                    item.log_append_time_ms = int(response.get("log_append_time_ms", -1) or -1)
                    callback(item, int(response["base_offset"]), None)
        except Exception as exc:
            log.debug("produce stream to broker %s failed: %s", self.broker_id, exc)
            # The broker's reason travels on: a stream refused over flight.streams.max must say so, not
            # surface later as a bare delivery timeout.
            reason = self._error_of(exc)
            if reason.code in _AUTHENTICATION_CODES:  # retrying on a new stream cannot help (or, once, re-authenticates)
                self._fail_all(reason)
                return
            self._fail_all(NetworkExceptionError(f"lost the produce stream to broker {self.broker_id}: "
                                                 f"{reason.message or reason}"))
            return
        self._fail_all(NetworkExceptionError(f"lost the produce stream to broker {self.broker_id}"))
        self._thread_ended()

    def _error_of(self, exc: Exception) -> AdsError:
        """``exc`` as the batches' error; a refused token goes through the transport (retriable once)."""
        return self._transport.refused(wire.to_ads_error(exc), self._options)

    def _thread_ended(self) -> None:
        """The last of the two threads out closes the stream, collecting its status: a stream left to
        Arrow's destructor logs "Close() failed" on stderr when the broker was gone or it was cancelled."""
        with self._lock:
            self._threads_running -= 1
            last, writer = self._threads_running == 0, self._writer
        if last and writer is not None:
            with self._stream_close:
                try:
                    writer.close()
                except Exception:
                    pass

    def _fail_all(self, error: AdsError, cancel_stream: bool = True) -> None:
        """Mark broken and fail every waiting batch (retriable: the producer resends on a new stream).

        ``cancel_stream`` also cuts the stream, so that threads blocked on it end now; a clean close
        passes False and lets the broker end the stream once the client says it is done."""
        with self._lock:
            self.broken = True
            self._broken_by = self._broken_by or error
            stranded, self._waiting = list(self._waiting.values()), {}
            self._outbox.clear()
            self._lock.notify_all()
        if cancel_stream:
            self._cancel_stream()
        for item, callback, _ in stranded:
            callback(item, None, error)

    def _cancel_stream(self) -> None:
        with self._lock:
            reader = self._reader
        if reader is not None:
            try:
                reader.cancel()  # gRPC's TryCancel: safe from any thread, a no-op on an ended call
            except Exception:
                log.debug("cancelling the produce stream to broker %s failed", self.broker_id, exc_info=True)

    def close(self) -> None:
        self._fail_all(NetworkExceptionError(f"produce stream to broker {self.broker_id} closed"),
                       cancel_stream=False)
        self._writer_thread.join(1)
        if self._writer_thread.is_alive() or self._writer is None:
            self._cancel_stream()  # blocked writing to a broker that reads nothing
            return
        with self._stream_close:
            try:
                self._writer.done_writing()  # the broker answers what it has, then ends the stream
            except Exception:
                pass
        if self._reader_thread.is_alive():
            self._reader_thread.join(CLOSE_WAIT_S)
        if self._reader_thread.is_alive():
            self._cancel_stream()  # the reader, last out, then closes the stream

    def threads_alive(self) -> bool:
        """Whether either of the stream's threads still runs (tests: an abandoned stream must not linger)."""
        return self._writer_thread.is_alive() or self._reader_thread.is_alive()
