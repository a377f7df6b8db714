"""A fetch session: one Flight DoExchange stream to a broker that carries fetch requests in turn.

Followers and polling consumers fetch once per append they wait for; as a DoGet
each fetch paid gRPC call set-up on both sides (~0.47 ms of CPU per round trip
here, against ~0.16 ms for a request and answer on an open stream). A session
sends one request at a time and reads its answer up to the chunk whose metadata
says ``"end": true``: the last partition chunk, or a metadata-only message when
there is no chunk or the request failed (broker/rpc/server.py ``_serve_fetch_session``).

Bounds: an answer not complete by the request's deadline (its long-poll wait
plus the request timeout) is cancelled by the shared watchdog, which fails the
fetch as retriable and closes the stream; a stream is replaced after
``SESSION_ROTATE_S`` so it never meets its own gRPC deadline mid-request.

Call options (the SASL token) come from the ``transport`` the session is given; a broker's refusal
of the token goes through ``transport.refused``, which makes the first one retriable so that the
caller's next fetch opens a new stream with a new token.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any, Callable

import pyarrow as pa
import pyarrow.flight as flight

from ads_spark.protocol import wire
from ads_spark.errors import AdsError, ErrorCode, RequestTimedOutError, error_for
from ads_spark.protocol.records import RECORD_SCHEMA, REPLICA_MESSAGE_SCHEMA
from ads_spark.protocol.transport import PLAINTEXT, ClientTransport

SESSION_DEADLINE_S = 1800.0  # gRPC's own bound on a stream a vanished peer leaves open
SESSION_ROTATE_S = 600.0
WATCHDOG_PERIOD_S = 0.1
ANSWER_CHUNKS_MAX = 1_000_000  # a broker answers one chunk per batch: far below this


class FetchSession:
    """Not for concurrent use by several threads at once: one request is outstanding at a time."""

    def __init__(self, connect: Callable[[], flight.FlightClient], replica_messages: bool = False, *,
                 transport: ClientTransport = PLAINTEXT, address: tuple[str, int] | None = None,
                 typed: dict[str, Any] | None = None):
        self._connect = connect  # the broker's current client (a dropped one is replaced)
        self._transport = transport
        self._address = address  # the broker's (host, port): asked first for a token when one is needed
        self._stream_options: flight.FlightCallOptions | None = None  # what the open stream was opened with
        # A follower's session: batches arrive as the leader's stored IPC messages (REPLICA_MESSAGE_SCHEMA).
        self._replica_messages = replica_messages
        # A consumer's read of a typed topic (request_schemas.TYPED_READ): answers come in its schema.
        self._typed = typed
        self._lock = threading.Lock()
        self._writer = None
        self._reader = None
        self._opened_monotonic = 0.0
        # When the outstanding answer is overdue (monotonic seconds); None when nothing is outstanding.
        self.deadline_monotonic: float | None = None
        self._timed_out = False

    def fetch(self, request: dict[str, Any], timeout_s: float) -> list[tuple[dict, pa.RecordBatch | None]]:
        """The broker's answer to one fetch: (partition metadata, batch) per chunk, as DoGet would give."""
        with self._lock:
            try:
                self._ensure_open(timeout_s)
                self._timed_out = False
                self.deadline_monotonic = time.monotonic() + timeout_s
                self._writer.write_metadata(pa.py_buffer(wire.dumps(request)))
                return self._read_answer()
            except AdsError as error:
                options = self._stream_options
                if error.code == ErrorCode.SASL_AUTHENTICATION_FAILED:  # the stream's token: a new stream, new token
                    self._close_locked()
                raise self._transport.refused(error, options) from None
            except Exception as exc:
                options = self._stream_options
                self._close_locked()
                if self._timed_out:
                    raise RequestTimedOutError(f"fetch unanswered after {timeout_s:.1f}s") from None
                raise self._transport.refused(wire.to_ads_error(exc), options) from None
            finally:
                self.deadline_monotonic = None

    def _read_answer(self) -> list[tuple[dict, pa.RecordBatch | None]]:
        chunks = []
        for _ in range(ANSWER_CHUNKS_MAX):
            chunk = self._reader.read_chunk()
            meta = wire.loads(chunk.app_metadata, "fetch answer")
            if meta.get("end") and "topic" not in meta and "partitions" not in meta:
                if meta.get("error_code"):  # a message of its own: the request failed, or nothing to say
                    raise error_for(int(meta["error_code"]), str(meta.get("message", "")))
                return chunks
            chunks.append((meta, chunk.data))
            if meta.get("end"):  # the answer's last chunk (an error_code in it is a partition's)
                return chunks
        raise error_for(-1, f"fetch answer longer than {ANSWER_CHUNKS_MAX} chunks")

    def _ensure_open(self, timeout_s: float) -> None:
        if self._writer is not None and time.monotonic() - self._opened_monotonic < SESSION_ROTATE_S:
            return
        self._close_locked()
        client = self._connect()
        # Opening a stream waits for the connection under the stream's own (long) deadline; a broker
        # whose packets are dropped would hold it for gRPC's connect timeout. A bounded call first.
        try:
            client.list_actions(self._transport.call_options(timeout_s, self._address))
        except (flight.FlightUnavailableError, flight.FlightTimedOutError, flight.FlightCancelledError,
                flight.FlightUnauthenticatedError, AdsError):
            raise
        except Exception:  # any answer at all (even "not implemented") says the broker is reachable
            pass
        command = {"type": wire.FETCH_SESSION, "replica_messages": self._replica_messages}
        if self._typed is not None:
            command["typed"] = self._typed
        descriptor = flight.FlightDescriptor.for_command(wire.dumps(command))
        options = self._transport.call_options(SESSION_DEADLINE_S, self._address)
        self._writer, self._reader = client.do_exchange(descriptor, options)
        self._stream_options = options
        self._writer.begin(REPLICA_MESSAGE_SCHEMA if self._replica_messages else RECORD_SCHEMA)
        self._opened_monotonic = time.monotonic()
        _WATCHDOG.add(self)

    def cancel_if_overdue(self, now_monotonic: float) -> None:
        deadline = self.deadline_monotonic
        if deadline is not None and now_monotonic > deadline:
            self.cancel()

    def cancel(self) -> None:
        """Fail the outstanding fetch now (retriable); nothing happens when none is outstanding."""
        reader = self._reader
        if self.deadline_monotonic is not None and reader is not None:
            self._timed_out = True
            try:
                reader.cancel()
            except Exception:
                pass

    def _close_locked(self) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        self._stream_options = None
        if writer is not None:
            try:
                writer.done_writing()
            except Exception:  # the stream already failed (or was cancelled): close it all the same
                pass
            try:
                writer.close()  # left to Arrow's destructor, a failed stream's close logs "Close() failed"
            except Exception:
                pass

    def close(self) -> None:
        """Ends the stream; the next ``fetch`` opens a new one."""
        with self._lock:
            self._close_locked()


class _Watchdog:
    """One thread for every session in the process; it runs only while some session exists."""

    def __init__(self):
        self._sessions: weakref.WeakSet[FetchSession] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def add(self, session: FetchSession) -> None:
        with self._lock:
            self._sessions.add(session)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="ads-fetch-watchdog", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(WATCHDOG_PERIOD_S)
            with self._lock:
                sessions = list(self._sessions)
                if not sessions:
                    self._thread = None
                    return
            now = time.monotonic()
            for session in sessions:
                session.cancel_if_overdue(now)


_WATCHDOG = _Watchdog()
