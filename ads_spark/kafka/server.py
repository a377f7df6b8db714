"""The Kafka listeners' sockets: accept, TLS, one thread per connection, answers in request order, limits.

One ``KafkaServer`` per Kafka listener (``kafka.listeners``, config_kafka.py); ``open_servers`` makes
them all for a broker, sharing one TLS context, one connection count (``kafka.connections.max``: one
more is accepted, logged and closed at once) and one budget of request bytes read and not yet answered
(``queued.max.request.bytes``; a request waits at most ``BUDGET_WAIT_S`` for room, then its connection
closes). A connection's thread reads a frame, serves it and sends its answer before it reads the next:
responses leave in request order, as Kafka keeps them by muting a channel while one request is served;
a client pipelining requests finds them waiting in its socket.

Bounds on a connection: the size prefix is checked before anything is allocated (frames.py); no byte
for ``connections.max.idle.ms`` between requests closes it; inside a frame, a stall of
``FRAME_STALL_S`` (or the idle bound, if shorter) or a frame not complete within ``FRAME_READ_MAX_S``
closes it; a TLS handshake has ``HANDSHAKE_TIMEOUT_S``; an answer the client does not take within
``SEND_TIMEOUT_S`` closes it.

Dispatch: frames.decode_request -> (SASL listener before a login: only ``before_auth`` APIs) ->
``handler(KafkaCall, request)`` under the connection's ``CallContext`` -> frames.encode_response.
One error boundary, as broker/rpc/server.py's: an exception escaping a handler is logged (an
unexpected one with its traceback under a reference) and closes that connection only; Kafka's clients
reconnect and retry. An ``InvariantViolation`` stops the process (exit 70): continuing could lose data.
"""

from __future__ import annotations

import ctypes
import logging
import os
import socket
import ssl
import sys
import threading
import time
from typing import Any

from ads_spark.broker.rpc import call_context
from ads_spark.broker.rpc.call_context import CallContext
from ads_spark.broker.rpc.server import internal_error
from ads_spark.config_kafka import (
    CONNECTIONS_MAX_KEY, QUEUED_MAX_KEY, REQUEST_MAX_KEY, endpoint_name,
)
from ads_spark.errors import AdsError, InvariantViolation
from ads_spark.kafka import api
from ads_spark.listener_config import SASL_PROTOCOLS, ListenerSpec
from ads_spark.security.authorizer import ANONYMOUS

log = logging.getLogger("ads.kafka.server")

ACCEPT_POLL_S = 0.25          # how often the accept loop looks at the stop flag
LISTEN_BACKLOG = 128
HANDSHAKE_TIMEOUT_S = 10.0
FRAME_STALL_S = 30.0          # no byte for this long inside a frame: the frame is abandoned
FRAME_READ_MAX_S = 300.0      # a whole frame, however slowly it trickles in
SEND_TIMEOUT_S = 120.0        # one answer, sent in full
BUDGET_WAIT_S = 30.0          # a request waiting for room in queued.max.request.bytes
READ_CHUNK_BYTES = 64 << 10   # one connection's read buffer: the most it holds beyond the budget
SHUTDOWN_WAIT_S = 2.0         # for every connection thread together
REFUSAL_LOG_INTERVAL_S = 10.0  # one log line per this long about connections refused over the bound


# ads_spark.kafka.frames, imported with a broker's first Kafka connection: it brings kio (~0.2 s), and most
# brokers (every test broker) never see a Kafka client.
frames: Any = None
_frames_lock = threading.Lock()


def _load_frames() -> None:
    global frames
    with _frames_lock:
        if frames is None:
            frames = _import_frames_without_hypothesis()


def _import_frames_without_hypothesis():
    """Import frames (and kio) with ``hypothesis`` hidden, unless this process already uses it. kio's
    typed primitives register Hypothesis strategies whenever Hypothesis is importable: ~3 s of CPU per
    broker on its first Kafka connection where the test extras are installed (profiled under the
    producer benchmark), for strategies a broker never draws."""
    hide = "hypothesis" not in sys.modules
    if hide:
        sys.modules["hypothesis"] = None  # type: ignore[assignment]  # import raises ImportError
    try:
        from ads_spark.kafka import frames as module
    finally:
        if hide and sys.modules.get("hypothesis", False) is None:
            del sys.modules["hypothesis"]
    return module


# The OS name of a connection's thread (/proc/<pid>/task/*/comm, top -H): at most 15 bytes.
CONNECTION_THREAD_NAME = "ads-kafka-conn"
_PR_SET_NAME = 15  # linux/prctl.h
_libc: Any = None


def name_os_thread(name: str) -> None:
    """Give the calling thread an OS-visible name (Linux prctl; Python 3.11 names only its own objects), so
    an operator or a test can tell a connection's thread from the broker's others; a no-op elsewhere."""
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None, use_errno=True)
        _libc.prctl(_PR_SET_NAME, name.encode()[:15], 0, 0, 0)
    except (OSError, AttributeError):
        pass


SENDMSG_BUFFERS_MAX = 512  # below IOV_MAX (1024 on Linux): one sendmsg takes at most this many buffers


def _remaining_s(deadline: float) -> float:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise socket.timeout(f"an answer not sent within {SEND_TIMEOUT_S}s")
    return remaining


def _send_gathered(sock: socket.socket, parts: list, deadline: float) -> None:
    """``parts`` in order through sendmsg (scatter/gather: no copy into one buffer), resuming after a short
    send, all before ``deadline``."""
    views = [memoryview(part).cast("B") for part in parts]
    first = 0
    while first < len(views):
        sock.settimeout(_remaining_s(deadline))
        sent = sock.sendmsg(views[first:first + SENDMSG_BUFFERS_MAX])
        while first < len(views) and sent >= views[first].nbytes:
            sent -= views[first].nbytes
            first += 1
        if sent:
            views[first] = views[first][sent:]


class _Closed(Exception):
    """End this connection; the text is the log line's reason (None: the client went away, say nothing)."""


class ByteBudget:
    """``queued.max.request.bytes``: bytes of requests read and not yet answered, all connections together."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._used = 0
        self._cond = threading.Condition()

    def acquire(self, size: int, timeout_s: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._used + size <= self.capacity, timeout_s) and self._take(size)

    def _take(self, size: int) -> bool:
        self._used += size
        return True

    def release(self, size: int) -> None:
        with self._cond:
            self._used -= size
            self._cond.notify_all()

    @property
    def used(self) -> int:
        with self._cond:
            return self._used


class _Shared:
    """What every Kafka listener of one broker shares: the connection count and the byte budget."""

    def __init__(self, config):
        self.request_max_bytes = config[REQUEST_MAX_KEY]
        self.connections_max = config[CONNECTIONS_MAX_KEY]
        idle_ms = config["connections.max.idle.ms"]
        self.idle_s = idle_ms / 1000 if idle_ms > 0 else None
        self.budget = ByteBudget(config[QUEUED_MAX_KEY])
        self._lock = threading.Lock()
        self.connections = 0
        # What broker/metrics.py reports: plain integers, read when scraped.
        self.refused_connections = 0
        self._request_counts: dict[str, int] = {}

    def admit(self) -> bool:
        with self._lock:
            if self.connections >= self.connections_max:
                self.refused_connections += 1
                return False
            self.connections += 1
            return True

    def count_request(self, api_name: str) -> None:
        with self._lock:
            self._request_counts[api_name] = self._request_counts.get(api_name, 0) + 1

    def request_counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._request_counts)

    def leave(self) -> None:
        with self._lock:
            self.connections -= 1


def server_ssl_context(config) -> ssl.SSLContext:
    """The Kafka listeners' TLS: the same ssl.* keys (and checks) as the Flight listeners' (security/tls.py)."""
    from ads_spark.security.tls import read_truststore, server_tls

    settings = server_tls(config.as_dict(), required=True)  # refuses what the Flight listeners refuse, naming keys
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # The keystore file holds the key and the chain (checked above); OpenSSL reads both from it.
    context.load_cert_chain(config["ssl.keystore.location"], password=config["ssl.key.password"] or None)
    if settings.verify_client:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cadata=read_truststore(config["ssl.truststore.location"]).decode())
    return context


def certificate_identity(certificate: dict | None) -> str:
    """What Flight reports as a client certificate's identity (its first subject alternative name, else its
    CN), so that ssl.principal.mapping.rules read alike on both ports (security/tls.py's NOTE)."""
    if not certificate:
        return ""
    for _kind, value in certificate.get("subjectAltName", ()):
        return str(value)
    for rdn in certificate.get("subject", ()):
        for name, value in rdn:
            if name == "commonName":
                return str(value)
    return ""


def open_servers(broker) -> dict[str, "KafkaServer"]:
    """A listening server per Kafka listener of ``broker.config`` (not yet accepting: ``start`` each). A
    listener that cannot bind closes the ones already open and raises."""
    specs = broker.config.kafka_listener_specs()
    if not specs:
        return {}
    shared = _Shared(broker.config)
    tls = server_ssl_context(broker.config) if any(spec.uses_tls for spec in specs) else None
    servers: dict[str, KafkaServer] = {}
    try:
        for spec in specs:
            servers[spec.name] = KafkaServer(broker, spec, shared, tls if spec.uses_tls else None)
    except BaseException:
        for server in servers.values():
            server.shutdown()
        raise
    return servers


_classes_loading = threading.Event()


def _start_loading_message_classes() -> None:
    """On the broker's first Kafka connection, import kio's classes of every served version in a thread, so
    later clients' first requests do not pay for them (a first ApiVersions took 25-69 ms loading them). Not at
    start: it costs ~0.5 s of CPU, and most brokers (every test broker) never see a Kafka client."""
    if not _classes_loading.is_set():
        _classes_loading.set()
        threading.Thread(target=_load_message_classes, name="kafka-classes", daemon=True).start()


def _load_message_classes() -> None:
    """Import kio's classes of every served version (the warm-up ``_start_loading_message_classes`` starts)."""
    _load_frames()
    try:
        for entry in api.registry().values():
            for version in range(entry.min_version, entry.max_version + 1):
                frames.entities.request_class(entry.api_key, version)
                frames.entities.response_class(entry.api_key, version)
    except Exception:  # only a warm-up: a request loads what it needs anyway
        log.debug("loading kio's classes ahead failed", exc_info=True)


class KafkaServer:
    """One Kafka listener: its socket listens from the constructor; ``start`` runs the accept thread."""

    def __init__(self, broker, spec: ListenerSpec, shared: _Shared, tls: ssl.SSLContext | None):
        self.broker = broker
        self.spec = spec
        self.shared = shared
        self.tls = tls
        self.endpoint_name = endpoint_name(spec.name)
        family = socket.AF_INET6 if ":" in spec.bind_host else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listener.bind((spec.bind_host, spec.port))
            self._listener.listen(LISTEN_BACKLOG)
            self._listener.settimeout(ACCEPT_POLL_S)
        except BaseException:
            self._listener.close()
            raise
        self.port = self._listener.getsockname()[1]
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._open: set[_Slot] = set()
        self._refused, self._refusal_logged_at = 0, float("-inf")  # accept thread only
        self._mapper = None
        if tls is not None and spec.protocol == "SSL" and tls.verify_mode == ssl.CERT_REQUIRED:
            from ads_spark.security.tls import PrincipalMapper

            self._mapper = PrincipalMapper(broker.config["ssl.principal.mapping.rules"])
        self._accepter = threading.Thread(target=self._accept_loop, name=f"kafka-accept-{spec.name}", daemon=True)

    def start(self) -> None:
        self._accepter.start()

    @property
    def connection_count(self) -> int:
        with self._lock:
            return len(self._open)

    # ---- accepting ---------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                sock, peer = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                if self._stopping.is_set():
                    return
                log.warning("Kafka listener %s: accept failed", self.spec.name, exc_info=True)
                time.sleep(ACCEPT_POLL_S)
                continue
            _start_loading_message_classes()
            if not self.shared.admit():
                self._log_refusal(peer[0])
                _close_quietly(sock)
                continue
            slot = _Slot(sock)
            slot.thread = threading.Thread(target=self._serve, args=(slot, peer[0]),
                                           name=f"kafka-{self.spec.name}-{peer[0]}:{peer[1]}", daemon=True)
            with self._lock:
                self._open.add(slot)
            slot.thread.start()

    def _log_refusal(self, host: str) -> None:
        """One line per ``REFUSAL_LOG_INTERVAL_S`` at most, with the count since the last: a flood of
        connections must not become a flood of log lines."""
        self._refused += 1
        now = time.monotonic()
        if now - self._refusal_logged_at < REFUSAL_LOG_INTERVAL_S:
            return
        log.warning("Kafka listener %s: connection from %s refused (%s refused since the last line): %s "
                    "connections open (%s)", self.spec.name, host, self._refused, self.shared.connections_max,
                    CONNECTIONS_MAX_KEY)
        self._refused, self._refusal_logged_at = 0, now

    def _serve(self, slot: "_Slot", host: str) -> None:
        name_os_thread(CONNECTION_THREAD_NAME)
        try:
            slot.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            principal = self._secure(slot)
            state = api.ConnectionState(
                CallContext(principal, host, self.endpoint_name, self.spec.protocol),
                authenticated=self.spec.protocol not in SASL_PROTOCOLS)
            _Connection(self, slot.sock, state).run()
        except _Closed as closed:
            if closed.args and closed.args[0]:
                log.info("Kafka connection from %s on %s closed: %s", host, self.spec.name, closed.args[0])
        except OSError as exc:
            log.debug("Kafka connection from %s on %s ended: %s", host, self.spec.name, exc)
        except Exception:
            internal_error(f"the Kafka connection from {host} on {self.spec.name}")
        finally:
            with self._lock:
                self._open.discard(slot)
            self.shared.leave()
            _close_quietly(slot.sock)

    def _secure(self, slot: "_Slot") -> str:
        """TLS on an SSL/SASL_SSL listener (``slot.sock`` becomes the TLS socket) and the connection's first
        principal: an SSL listener's verified client certificate, mapped by ssl.principal.mapping.rules;
        else ANONYMOUS (a SASL listener's comes with the login)."""
        if self.tls is None:
            return ANONYMOUS
        slot.sock.settimeout(HANDSHAKE_TIMEOUT_S)
        try:
            wrapped = self.tls.wrap_socket(slot.sock, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            raise _Closed(f"TLS handshake failed: {exc}") from None
        with self._lock:  # shutdown() must reach the TLS socket: it owns the file descriptor now
            slot.sock = wrapped
        if self._mapper is None:
            return ANONYMOUS
        try:
            return self._mapper.principal_of(certificate_identity(wrapped.getpeercert()))
        except AdsError as exc:
            raise _Closed(f"client certificate refused: {exc.message}") from None

    # ---- stopping ------------------------------------------------------------------------------

    def shutdown(self, wait_s: float = SHUTDOWN_WAIT_S) -> None:
        """Close the listening socket and every connection; wait at most ``wait_s`` for their threads."""
        self._stopping.set()
        _close_quietly(self._listener)
        if self._accepter.is_alive():
            self._accepter.join(ACCEPT_POLL_S * 4)
        with self._lock:
            open_now = [(slot.sock, slot.thread) for slot in self._open]
        for sock, _ in open_now:
            try:  # wakes a thread blocked reading it; the thread closes the socket itself
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
            except OSError:
                pass
        deadline = time.monotonic() + wait_s
        for _, thread in open_now:
            if thread is not None and thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))


class _Slot:
    """One open connection: its socket (the TLS one once wrapped) and its thread."""

    __slots__ = ("sock", "thread", "__weakref__")

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.thread: threading.Thread | None = None


def _close_quietly(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass


class _Connection:
    """One connection's loop: read a frame, serve it, answer, repeat (see the module docstring)."""

    def __init__(self, server: KafkaServer, sock: socket.socket, state: api.ConnectionState):
        self.server = server
        self.shared = server.shared
        self.sock = sock
        self.state = state
        _load_frames()
        self.table = api.registry()
        self._scratch = memoryview(bytearray(READ_CHUNK_BYTES))

    def run(self) -> None:
        while not self.server._stopping.is_set():
            prefix = bytearray(frames.SIZE_PREFIX_BYTES)
            if not self._read_prefix(memoryview(prefix)):
                return
            try:
                size = frames.frame_size(bytes(prefix), self.shared.request_max_bytes)
            except frames.FrameSizeError as exc:
                raise _Closed(str(exc)) from None
            body = bytearray()
            try:
                self._read_body(body, size)
                answer = self._serve_frame(body)
                if answer is not None:
                    self._send(answer)
            finally:
                self.shared.budget.release(len(body))
            if getattr(self.state.sasl, "close_after_response", False):
                raise _Closed(None)  # sasl.py logged why

    def _read_prefix(self, view: memoryview) -> bool:
        """A frame's size prefix. Before its first byte the connection is idle: closed after
        connections.max.idle.ms, and an orderly end is normal (False); from then on a frame is being read."""
        self.sock.settimeout(self.shared.idle_s)
        try:
            count = self.sock.recv_into(view)
        except socket.timeout:
            raise _Closed(f"idle for {self.shared.idle_s * 1000:.0f} ms (connections.max.idle.ms)") from None
        if count == 0:
            return False
        deadline = time.monotonic() + FRAME_READ_MAX_S
        while count < len(view):
            count += self._recv(view[count:], deadline, count, len(view))
        return True

    def _read_body(self, body: bytearray, size: int) -> None:
        """Read a frame's ``size`` bytes into ``body``, taking room in the byte budget for the bytes that did
        arrive, as they arrive. Taking the claimed size up front let a few connections that sent a size prefix
        and stalled hold the whole budget, and every other client's request waited behind them; now a stalled
        frame holds what it sent (each read goes through one ``READ_CHUNK_BYTES`` buffer per connection)."""
        deadline = time.monotonic() + FRAME_READ_MAX_S
        scratch = self._scratch
        while len(body) < size:
            count = self._recv(scratch[:min(len(scratch), size - len(body))], deadline, len(body), size)
            if not self.shared.budget.acquire(count, BUDGET_WAIT_S):
                raise _Closed(f"no room for {count} more bytes of a {size}-byte request within {BUDGET_WAIT_S}s "
                              f"({QUEUED_MAX_KEY})")
            body += scratch[:count]

    def _recv(self, view: memoryview, deadline: float, got: int, size: int) -> int:
        """Some bytes of a frame's body into ``view`` (at least one), within the stall and whole-frame bounds."""
        stall_s = FRAME_STALL_S if self.shared.idle_s is None else min(FRAME_STALL_S, self.shared.idle_s)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _Closed(f"a frame not complete within {FRAME_READ_MAX_S}s")
        self.sock.settimeout(min(stall_s, remaining))
        try:
            count = self.sock.recv_into(view)
        except socket.timeout:
            raise _Closed(f"no byte for {stall_s}s in the middle of a frame ({got} of {size} bytes read)") from None
        if count == 0:
            raise _Closed(f"the client closed the connection in the middle of a frame ({got} of {size} bytes)")
        return count

    def _send(self, answer: bytes | list) -> None:
        """One response frame: bytes, or the buffers of ``frames.encode_response_parts`` sent in order with
        as few system calls as the socket allows (a TLS socket has no sendmsg: one write per buffer), all
        within SEND_TIMEOUT_S."""
        deadline = time.monotonic() + SEND_TIMEOUT_S
        parts = answer if isinstance(answer, list) else [answer]
        if isinstance(self.sock, ssl.SSLSocket) or len(parts) == 1:
            for part in parts:
                self.sock.settimeout(_remaining_s(deadline))
                self.sock.sendall(part)
        else:
            _send_gathered(self.sock, parts, deadline)

    def _serve_frame(self, body: bytearray) -> bytes | list | None:
        outcome = frames.decode_request(body, self.table)
        if isinstance(outcome, frames.Close):
            raise _Closed(outcome.reason + _who(outcome.header))
        if isinstance(outcome, frames.Reply):
            log.info("Kafka %s: ApiVersions v%s answered UNSUPPORTED_VERSION with the table%s",
                     self.server.spec.name, outcome.header.api_version, _who(outcome.header))
            return outcome.frame
        self.shared.count_request(outcome.entry.name)
        if not self.state.authenticated and not outcome.entry.before_auth:
            raise _Closed(f"{outcome.entry.name} before SASL authentication" + _who(outcome.header))
        answer = self._call(outcome)
        if answer is None:
            return None
        header = outcome.header
        return frames.encode_response_parts(header.correlation_id, header.api_key, header.api_version, answer)

    def _call(self, request: frames.Request) -> Any:
        call = api.KafkaCall(self.server.broker, request.header, self.state)
        where = f"Kafka {request.entry.name} v{request.header.api_version}"
        try:
            with call_context.using(self.state.context):
                return request.entry.handler(call, request.request)
        except InvariantViolation:
            log.critical("invariant violated in %s; stopping the broker", where, exc_info=True)
            logging.shutdown()
            os._exit(70)
        except AdsError as exc:
            raise _Closed(f"{where} failed: {exc}") from None
        except Exception:
            raise _Closed(internal_error(where).message) from None


def _who(header) -> str:
    return f" (client id {header.client_id!r})" if header is not None and header.client_id else ""
