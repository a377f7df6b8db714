"""The broker's Arrow Flight endpoint: decoding, dispatch, and the one error boundary.

Every call enters through here. Bodies are decoded with ``client.wire`` (so a
malformed request is INVALID_REQUEST before any state is touched), the caller is
authenticated (``auth_middleware``: its ``CallContext``) and the request
authorized (``authorization``; also each request inside a stream) before it is
handed to the broker's handlers, and every failure leaves as a typed Flight error: an
``AdsError`` keeps its code, anything unexpected becomes UNKNOWN_SERVER_ERROR
and is logged, and the server keeps serving. An ``InvariantViolation`` is a bug:
it is logged and the process exits, because continuing could lose data.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from typing import Any, Callable

import pyarrow as pa
import pyarrow.flight as flight

from ads_spark.broker.rpc import auth_middleware, authorization, call_context, connections
from ads_spark.protocol import request_schemas, schema_kinds, wire
from ads_spark.errors import AdsError, ErrorCode, InvalidRequestError, InvariantViolation, error_for
from ads_spark.protocol.records import RECORD_SCHEMA, REPLICA_MESSAGE_SCHEMA
from ads_spark.broker.typed_fetch import TypedRead
from ads_spark.security.request_acls import FOLLOWER_FETCH, fetch_requirement_name

log = logging.getLogger("ads.broker.server")


def _boundary(name: str, func: Callable[[], Any]) -> Any:
    try:
        return func()
    except flight.FlightError:
        raise
    except AdsError as exc:
        raise wire.flight_error(exc) from None
    except InvariantViolation:
        log.critical("invariant violated in %s; stopping the broker", name, exc_info=True)
        logging.shutdown()
        os._exit(70)
    except Exception:  # the boundary: report, keep serving
        raise wire.flight_error(internal_error(name)) from None


def internal_error(where: str) -> AdsError:
    """An unexpected exception, logged with its traceback under a reference the client is given instead.

    A client never sees a Python exception's name or text: they say nothing it can act on, and they tell
    a stranger about the broker's insides. Every input a client controls is refused by the request
    schemas (protocol/request_schemas.py) with a typed error first, so this is a bug of ours."""
    reference = uuid.uuid4().hex[:12]
    log.exception("unexpected error in %s (reference %s)", where, reference)
    return error_for(ErrorCode.UNKNOWN_SERVER_ERROR,
                     f"internal error in {where}; the broker logged it under reference {reference}")


def listener_location(host: str, port: int, tls: bool) -> str:
    """The gRPC location a listener binds: ``grpc+tls`` for a TLS listener, an IPv6 host in brackets."""
    shown_host = f"[{host}]" if ":" in host else host
    return f"grpc+{'tls' if tls else 'tcp'}://{shown_host}:{port}"


class BrokerFlightServer(flight.FlightServerBase):
    """Routes Flight calls to a broker object exposing ``handle_*`` methods."""

    def __init__(self, broker, host: str, port: int, listener_name: str = "PLAINTEXT",
                 security_protocol: str = "PLAINTEXT", tls=None):
        """One listener's server. ``tls``: None (plain gRPC), or an ``ads_spark.security.tls.ServerTls``
        (certificate chain and key, whether a client certificate is required, and the CAs verifying it)."""
        # Counts every stream from its first moment, before Arrow reads from it (broker/rpc/connections.py).
        streams = connections.StreamRegistry(connections.StreamLimits.from_config(getattr(broker, "config", {})))
        # Authentication first (broker/rpc/auth_middleware.py): a call it refuses never holds a stream slot.
        self.calls = auth_middleware.authenticator_for(broker, listener_name, security_protocol,
                                                       tls is not None and tls.verify_client)
        middleware = {**self.calls.middleware(auth_middleware.token_verifier(broker)), **streams.middleware()}
        location = listener_location(host, port, tls is not None)
        if tls is None:
            super().__init__(location=location, middleware=middleware)
        else:
            super().__init__(location=location, middleware=middleware, tls_certificates=tls.cert_pairs,
                             verify_client=tls.verify_client, root_certificates=tls.root_certificates)
        self.broker = broker
        self.streams = streams
        self.listener_name = listener_name
        self.security_protocol = security_protocol
        streams.local_port = self.port

    # ---- actions ---------------------------------------------------------------

    def list_actions(self, context):
        return [(name, "") for name in sorted(self.broker.action_handlers())]

    def do_action(self, context, action):
        def run():
            name = _action_name(action)
            ctx = self.calls.context_for(context, name)  # SASL_*: no valid token, no call but authenticate
            check = request_schemas.checker(name)
            handler = self.broker.action_handlers().get(name)
            if handler is None:
                raise InvalidRequestError(f"action '{name}' is not served by this broker")
            body = check(wire.loads(action.body, name) if action.body.size else {})
            # Before the handler: a refused request changes nothing (not even a recorded controller epoch).
            authorization.authorize_call(self._security(), ctx, name, body, self._topic_names)
            with call_context.using(ctx):
                return handler(body)

        result = _boundary("an action", run)
        return [flight.Result(pa.py_buffer(wire.dumps(result)))]

    # ---- fetch -------------------------------------------------------------------

    def do_get(self, context, ticket):
        def run():
            ctx = self.calls.context_for(context)
            request = request_schemas.check(request_schemas.FETCH, wire.loads(ticket.ticket, "fetch"), "fetch")
            authorization.authorize_call(self._security(), ctx, _fetch_name(request, False), request)
            with call_context.using(ctx):
                typed = TypedRead.from_request(request["typed"], self.broker) if request.get("typed") else None
                return typed, self.broker.handle_fetch(request, False, typed)

        typed, responses = _boundary("fetch", run)
        if typed is None:
            return flight.GeneratorStream(RECORD_SCHEMA, _fetch_stream(responses))
        return flight.GeneratorStream(typed.schema, _fetch_stream(responses, typed.empty_batch()))

    def do_exchange(self, context, descriptor, reader, writer):
        """A fetch session or a produce stream, as the command says.

        Fetch session: fetch requests one after another on one stream, each answered in full. A
        DoGet per fetch costs ~0.25 ms of server CPU in call set-up alone (~3x a message on an open
        stream); followers and polling consumers fetch once per append they wait for, so they keep
        one stream per broker instead. An answer's last message says ``"end": true``; a request
        that failed is answered by a metadata-only one carrying the error; the stream goes on either way.

        Produce stream: as ``do_put``, answers as metadata-only messages. Clients produce over an
        exchange because its client side can be cancelled: a stream to a broker that stopped
        answering is cut at once instead of holding two client threads until its deadline.
        """
        def run():
            ctx = self.calls.context_for(context)
            stream = self.streams.attach_call(context)  # refused over flight.streams.per.connection.max
            if descriptor.descriptor_type != flight.DescriptorType.CMD:
                raise InvalidRequestError("an exchange needs a command descriptor")
            request = request_schemas.check(request_schemas.EXCHANGE_COMMAND,
                                            wire.loads(descriptor.command, "exchange"), "exchange")
            # Each request inside the stream is authorized too (a produce chunk in data_handlers); the
            # context stays this thread's for the stream's life.
            with call_context.using(ctx):
                if request["type"] == wire.PRODUCE:
                    _serve_produce_stream(self.broker, reader, _MetadataAnswers(writer), stream)
                    return
                replica_messages = bool(request.get("replica_messages", False))
                if replica_messages:  # a follower's session: refused at once for a caller without ClusterAction
                    authorization.authorize_call(self._security(), ctx, FOLLOWER_FETCH, {})
                # A typed read's session answers in its read's schema (each request is authorized as it comes).
                typed = TypedRead.from_request(request["typed"], self.broker) if request.get("typed") else None
                writer.begin(typed.schema if typed is not None
                             else REPLICA_MESSAGE_SCHEMA if replica_messages else RECORD_SCHEMA)
                _serve_fetch_session(self.broker, reader, writer, replica_messages, stream, typed)

        _boundary("exchange", run)

    # ---- produce ----------------------------------------------------------------

    def do_put(self, context, descriptor, reader, writer):
        def run():
            ctx = self.calls.context_for(context)
            stream = self.streams.attach_call(context)  # refused over flight.streams.per.connection.max
            if descriptor.descriptor_type != flight.DescriptorType.CMD:
                raise InvalidRequestError("produce needs a command descriptor")
            request_schemas.check(request_schemas.PRODUCE_COMMAND, wire.loads(descriptor.command, "produce"), "produce")
            with call_context.using(ctx):  # each chunk is authorized in data_handlers.handle_produce_chunk
                _serve_produce_stream(self.broker, reader, writer, stream)

        _boundary("produce", run)

    # ---- authorization -------------------------------------------------------------

    def _security(self):
        """The broker's security state (``broker.security``); None for a stand-in broker: nothing enforced."""
        return getattr(self.broker, "security", None)

    def _topic_names(self) -> list[str]:
        """Every topic this broker knows, for init_producer_id's KIP-679 alternative (Write on any topic)."""
        return list(self.broker.metadata.topics)


def _fetch_name(request: dict, replica_messages: bool) -> str:
    """``fetch`` or ``follower_fetch``: what a fetch request needs (request_acls.fetch_requirement_name)."""
    replica_id = request.get("replica_id")
    return fetch_requirement_name(-1 if replica_id is None else replica_id, replica_messages)


# Carries the metadata of a partition with nothing to send. Built once: building it per response
# (RecordBatch.from_pylist against the nested schema) cost ~2-3 ms, more than the rest of a fetch.
# From pa.nulls, not pa.array over a list: that imports pandas, 0.2-0.3 s of every broker's start.
_EMPTY_BATCH = pa.RecordBatch.from_arrays([pa.nulls(0, field.type) for field in RECORD_SCHEMA], schema=RECORD_SCHEMA)


_EMPTY_MESSAGE_BATCH = pa.RecordBatch.from_arrays([pa.nulls(0, pa.binary())], schema=REPLICA_MESSAGE_SCHEMA)


def _fetch_stream(responses, empty_batch=_EMPTY_BATCH, end_marked: bool = False):
    """Yield (batch, metadata) pairs: one per stored batch, then one empty batch whose metadata lists every
    partition with no batch to send (``{"partitions": [...]}``), so a fetch of many partitions of which few
    have data is a few messages, not one per partition (each Flight message costs both sides thread
    hand-offs: 30 idle partitions took a one-record RF=3 produce from ~4 to ~11 ms of broker CPU).
    ``end_marked``: the last message's metadata also says ``"end": true``, so a fetch session's answer
    needs no message of its own to end it."""
    held = None
    for chunk in _fetch_chunks(responses, empty_batch):
        if held is not None:
            yield held[0], pa.py_buffer(wire.dumps(held[1]))
        held = chunk
    if held is not None:
        yield held[0], pa.py_buffer(wire.dumps({**held[1], "end": True} if end_marked else held[1]))


def _fetch_chunks(responses, empty_batch):
    without_batches = []
    for partition_meta, batches in responses:
        if not batches:
            without_batches.append(partition_meta)
            continue
        for index, (batch, header) in enumerate(batches):
            meta = dict(partition_meta) if index == 0 else {"topic": partition_meta["topic"],
                                                            "partition": partition_meta["partition"]}
            meta["header"] = wire.header_to_json(header)
            yield batch, meta
    if without_batches:
        yield empty_batch, {"partitions": without_batches}


_END_OF_ANSWER = pa.py_buffer(wire.dumps({"end": True}))


# A replica fetch session names every partition again at least this often, whatever it sent before: a
# bound on how stale a follower's view of an idle partition can get should an omission ever be wrong.
SESSION_FULL_ANSWER_INTERVAL_S = 5.0


class _SentPartitions:
    """What a replica fetch session last told its follower about each partition, so that a partition with
    nothing new is left out of the next answer (as Kafka's incremental fetch sessions, KIP-227, do).

    A follower fetches every partition it follows from this leader each time; answering each with its
    unchanged metadata made every idle partition cost both brokers JSON and a replication step per
    produce. A partition is left out only when the follower asked for it exactly as last time (fetch
    offset, leader epoch: a follower that dropped an answer, because it truncated or had not yet heard
    of the epoch, asks differently) and the answer would carry no batch, no error and the same HW, log
    start, log end and epoch. A follower acts only on the partitions an answer names; the leader still
    steps every requested partition (ISR progress). A new stream starts with everything named."""

    def __init__(self, now_s: float):
        self._last: dict[tuple[str, int], tuple] = {}
        self._full_answer_at_s = now_s + SESSION_FULL_ANSWER_INTERVAL_S

    def changed_only(self, request: dict, responses: list, now_s: float) -> list:
        if now_s >= self._full_answer_at_s:
            self._last.clear()
            self._full_answer_at_s = now_s + SESSION_FULL_ANSWER_INTERVAL_S
        asked = {(entry["topic"], entry["partition"]): (entry["fetch_offset"], entry.get("current_leader_epoch"))
                 for entry in request["partitions"]}
        kept = []
        for meta, batches in responses:
            key = (meta["topic"], meta["partition"])
            seen = (asked.get(key), meta.get("high_watermark"), meta.get("log_start_offset"),
                    meta.get("log_end_offset"), meta.get("leader_epoch"))
            quiet = not batches and not meta.get("error_code") and "diverging_epoch" not in meta
            if quiet and self._last.get(key) == seen:
                continue
            self._last[key] = seen if quiet else None  # after data or an error, the next answer names it
            kept.append((meta, batches))
        return kept


def _serve_fetch_session(broker, reader, writer, replica_messages: bool,
                         stream: connections.Stream = connections.UNTRACKED, typed=None) -> None:
    empty = typed.empty_batch() if typed is not None else _EMPTY_MESSAGE_BATCH if replica_messages else _EMPTY_BATCH
    security = getattr(broker, "security", None)
    sent = _SentPartitions(time.monotonic()) if replica_messages else None
    while True:
        try:
            chunk = reader.read_chunk()
        except StopIteration:
            return
        stream.set_busy(1)  # a long poll in progress: its connection is not idle
        try:
            request = request_schemas.check(request_schemas.FETCH, wire.loads(chunk.app_metadata, "fetch"), "fetch")
            if request.get("typed") is not None:  # it would be ignored: the session reads as its command said
                raise InvalidRequestError("a fetch session's typed read is named by its command; a request inside "
                                          "the session may not carry 'typed'")
            # Every request of the session, on the session's context: refused ones are answered in-stream.
            authorization.authorize_call(security, call_context.current(), _fetch_name(request, replica_messages),
                                         request)
            responses = broker.handle_fetch(request, replica_messages, typed)
            if sent is not None:
                responses = sent.changed_only(request, responses, time.monotonic())
            chunks = 0
            for batch, metadata in _fetch_stream(responses, empty, end_marked=True):
                writer.write_with_metadata(batch, metadata)
                chunks += 1
            end = None if chunks else _END_OF_ANSWER  # the last chunk said "end" itself
        except InvariantViolation:
            raise  # the boundary stops the broker
        except flight.FlightError:
            return  # the client is gone
        except Exception as exc:  # one request failed: answered with its error, the session goes on
            end = pa.py_buffer(wire.dumps({**error_response(None, exc, "a fetch session"), "end": True}))
        if end is not None:
            try:
                writer.write_metadata(end)
            except Exception:  # the client went away mid-answer
                return
        stream.set_busy(0)


# In-flight acks=all produces per stream; the reader pauses past this (back-pressure).
PRODUCE_INFLIGHT_PER_STREAM_MAX = 1024
# After the client finishes sending, the stream waits for its outstanding answers up to the longest a produce
# may wait (request.timeout.ms.max: every request is answered by then) plus this margin (the tick that expires it).
PRODUCE_DRAIN_MARGIN_S = 30.0


class _MetadataAnswers:
    """An exchange's writer seen as a do_put's metadata writer: ``write`` sends a metadata-only message."""

    def __init__(self, writer):
        self._writer = writer

    def write(self, buf: pa.Buffer) -> None:
        self._writer.write_metadata(buf)


def _serve_produce_stream(broker, reader, writer, stream: connections.Stream = connections.UNTRACKED) -> None:
    """Read batches until the client closes its side; answer each one as it completes.

    Answers come from other threads (acks=all completes when followers fetch). When the stream ends
    (the client is done with it, cancelled it or died: the read ends alike) the handler waits for
    the pending answers, up to ``request.timeout.ms.max`` and a margin: every answer comes by then.
    The call's writer is freed when the handler returns, and writing to a freed Flight writer is a
    segfault (reproduced), so the handler closes ``answering`` on every way out and an answer that
    still comes later is dropped: its records are appended all the same, and the client retries what
    it has no answer for.
    """
    drain_s = broker.config["request.timeout.ms.max"] / 1000 + PRODUCE_DRAIN_MARGIN_S
    write_lock = threading.Lock()
    answering = [True]  # guarded by write_lock; False once this handler returns, for good
    outstanding = threading.Semaphore(PRODUCE_INFLIGHT_PER_STREAM_MAX)
    pending = [0]
    drained = threading.Condition()

    def respond(response: dict | None) -> None:
        with write_lock:
            if answering[0] and response is not None:  # None: nothing to send (an appended acks=0 batch)
                try:
                    writer.write(pa.py_buffer(wire.dumps(response)))
                except Exception:  # the client went away; its requests are still appended and safe
                    log.debug("produce response not delivered", exc_info=True)
        with drained:
            pending[0] -= 1
            stream.set_busy(pending[0])  # a produce awaiting its answer keeps the connection from idling
            drained.notify_all()
        outstanding.release()

    try:
        while True:
            try:
                chunk = reader.read_chunk()
            except StopIteration:
                break
            outstanding.acquire()
            with drained:
                pending[0] += 1
                stream.set_busy(pending[0])
            broker.handle_produce_chunk(chunk.data, chunk.app_metadata, respond)
        with drained:
            drained.wait_for(lambda: pending[0] == 0, timeout=drain_s)
    finally:
        with write_lock:
            answering[0] = False


def error_response(correlation_id: Any, exc: Exception, where: str = "produce") -> dict:
    """The answer to one failed request of a stream: an AdsError keeps its code, anything else is logged."""
    if not isinstance(exc, AdsError):
        exc = internal_error(where)
    return {"correlation_id": correlation_id, "error_code": int(exc.code), "message": exc.message or str(exc)}


def _action_name(action) -> str:
    """A DoAction's type, which arrives as bytes on the wire: invalid UTF-8 or NUL is refused, not decoded
    half-way."""
    try:
        name = action.type
    except UnicodeDecodeError:
        raise InvalidRequestError("the action type is not valid UTF-8") from None
    return schema_kinds.check_text(name, "action type", 64)
