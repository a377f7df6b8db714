"""Bounds on the Flight streams a broker holds open, and the closing of idle client connections.

A broker serves every Flight call on a thread of its own, and a produce stream or fetch session
(DoExchange, DoPut) keeps its thread for as long as the client keeps the stream open, sending
nothing or not: 350 half-open streams took a broker from 30 to 145 threads, without bound. This
module owns the two limits Kafka puts on what a client can make a broker hold, in Flight terms:

* **Open streams**, per broker (``flight.streams.max``) and per client connection
  (``flight.streams.per.connection.max``; a connection is what ``ServerCallContext.peer()`` names,
  one TCP connection). A stream over either bound is refused at once with NETWORK_EXCEPTION
  (retriable, as Kafka's client sees a connection its broker refused over ``max.connections``), so
  its thread returns at once. The broker-wide count is kept by a server middleware, whose
  ``start_call`` runs on the call's thread before Arrow reads the stream's first message: a raw
  gRPC stream that never sends one holds a thread in Arrow's C++ and never reaches a Python handler
  (measured: 50 such streams, +50 threads), so counting in the handlers would miss it. The
  per-connection count needs the peer, which only the handler sees.
* **Idle connections** (Kafka's ``connections.max.idle.ms``): a connection whose streams have
  carried nothing for that long is closed. pyarrow gives a handler no way to cancel its call, and a
  handler blocked in ``reader.read_chunk()`` cannot be interrupted from Python, so the broker closes
  the connection itself: it finds that peer's socket among its own file descriptors (socket inodes
  in /proc/self/fd against /proc/net/tcp{,6}) and shuts it down on a dup of the fd (gRPC's own fd is
  never closed here). gRPC then ends every call of the connection, the blocked reads return and the
  handlers return on their own: nothing else ever touches a call's reader or writer, whose use after
  its handler returned is a segfault. Before it shuts a socket down, the sweep asks the kernel
  (TCP_INFO) when the socket last carried data either way: a connection that also serves unary
  calls (an admin client sharing it with an idle producer) is not idle, as in Kafka.

The sweep runs on one thread, only while some stream is open, every ``idle_ms / 10`` (50 ms to
10 s); it reads the registry only, and scans /proc only when a connection is over its idle time or
a stream that never reached its handler is (then any silent socket on the broker's port may be its
own, and every one silent for ``idle_ms`` is closed). Connections without any stream hold no thread
and are left alone.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import pyarrow.flight as flight

from ads_spark.protocol import wire
from ads_spark.config import BROKER_KEYS
from ads_spark.errors import AdsError, NetworkExceptionError

log = logging.getLogger("ads.broker.connections")

MIDDLEWARE_KEY = "ads-streams"
# The calls that hold their thread while the client holds the stream. A unary or server-streaming
# call (DoAction, DoGet) reads its whole request before a thread takes it.
STREAM_METHODS = frozenset({flight.FlightMethod.DO_EXCHANGE, flight.FlightMethod.DO_PUT})
SWEEP_PERIOD_S_MIN = 0.05
SWEEP_PERIOD_S_MAX = 10.0
TCP_ESTABLISHED = "01"
LOGGED_ADDRESSES_MAX = 10
SWEEP_FAILURE_LOG_INTERVAL_S = 60.0
PROC_NET_TCP = ("/proc/net/tcp", "/proc/net/tcp6")

Address = tuple[str, int]  # a connection's peer: (IP as ipaddress prints it, port)


@dataclass(frozen=True, slots=True)
class StreamLimits:
    streams_max: int
    per_connection_max: int
    idle_ms: int  # <= 0: connections are never closed for being idle

    @classmethod
    def from_config(cls, config: Any) -> "StreamLimits":
        return cls(_config_value(config, "flight.streams.max"),
                   _config_value(config, "flight.streams.per.connection.max"),
                   _config_value(config, "connections.max.idle.ms"))

    @property
    def sweep_period_s(self) -> float:
        return min(SWEEP_PERIOD_S_MAX, max(SWEEP_PERIOD_S_MIN, self.idle_ms / 10_000))


def _config_value(config: Any, name: str) -> int:
    """A broker config's value; a stand-in broker's plain dict may lack it (tests): the default then."""
    try:
        return int(config[name])
    except (KeyError, TypeError, AdsError):
        return int(BROKER_KEYS[name].default)


class Stream:
    """One open stream call. ``active_at_s`` and ``busy`` are written by the call's own threads without a
    lock (one attribute store each; the sweep only reads them, and a stale read only delays a close)."""

    __slots__ = ("peer", "address", "opened_at_s", "active_at_s", "busy")

    def __init__(self, now_s: float):
        self.peer: str | None = None  # set once by attach(); None: the call has not reached its handler
        self.address: Address | None = None
        self.opened_at_s = now_s
        self.active_at_s = now_s  # monotonic seconds of the last message either way
        self.busy = 0  # requests read and not yet answered: a busy stream is never idle

    def set_busy(self, unanswered: int) -> None:
        self.busy = unanswered
        self.active_at_s = time.monotonic()


UNTRACKED = Stream(0.0)  # for a call served without the middleware (a server built without it)


@dataclass(slots=True)
class SweepPlan:
    idle: dict[Address, str] = field(default_factory=dict)  # connections over their idle time -> peer
    anonymous: bool = False  # a stream that never reached its handler is over the idle time
    active: set[Address] = field(default_factory=set)  # connections with a stream in use: never closed


@dataclass(slots=True)
class SweepResult:
    closed: list[Address] = field(default_factory=list)
    busy_ms: dict[Address, int] = field(default_factory=dict)  # silent for less than idle_ms on the wire


class StreamRegistry:
    """Every open stream of one Flight server, by connection; the bounds; the idle sweep."""

    def __init__(self, limits: StreamLimits, local_port: int = 0):
        self.limits = limits
        self.local_port = local_port  # the server's listening port, known once it listens
        self._lock = threading.Lock()
        # Invariant: len(_open) <= limits.streams_max (open() refuses past it).
        self._open: set[Stream] = set()
        # Invariant: every set is non-empty and holds at most limits.per_connection_max streams, each in _open
        # with that peer; a peer leaves when its last stream is released.
        self._by_peer: dict[str, set[Stream]] = {}
        # Both keyed by peers of _by_peer only (dropped with the peer's last stream):
        self._reaped: set[str] = set()  # connections shut down (or not found): never scanned for again
        self._wire_active_at_s: dict[str, float] = {}  # last data on the socket, as the last sweep saw it
        self._anonymous_swept_at_s = float("-inf")
        self.refused_by_limit = {"broker": 0, "connection": 0}
        self.closed_idle = 0
        self._sweeper: threading.Thread | None = None
        self._proc_unusable = False
        self._failure_logged_at_s = float("-inf")  # the sweeper's own; failures are logged once a minute at most

    # ---- counting (every call) ------------------------------------------------------

    def open(self, now_s: float) -> Stream:
        """A new stream call, before Flight reads anything of it; refused (retriable) over the broker's bound."""
        with self._lock:
            if len(self._open) >= self.limits.streams_max:
                self.refused_by_limit["broker"] += 1
                raise NetworkExceptionError(
                    f"this broker already holds {len(self._open)} streams (flight.streams.max="
                    f"{self.limits.streams_max}); retry later")
            stream = Stream(now_s)
            self._open.add(stream)
            self._start_sweeper_locked()
        return stream

    def attach(self, stream: Stream, peer: str, now_s: float) -> Stream:
        """Name the stream's connection (its handler knows it); refused over the connection's bound."""
        with self._lock:
            if stream not in self._open or stream.peer is not None:
                return stream  # released already, or attached: nothing to count
            held = self._by_peer.get(peer)
            if held is not None and len(held) >= self.limits.per_connection_max:
                self.refused_by_limit["connection"] += 1
                raise NetworkExceptionError(
                    f"connection {peer} already holds {len(held)} streams on this broker "
                    f"(flight.streams.per.connection.max={self.limits.per_connection_max}); retry later")
            stream.peer, stream.address = peer, parse_peer(peer)
            stream.active_at_s = now_s
            self._by_peer.setdefault(peer, set()).add(stream)
        return stream

    def release(self, stream: Stream) -> None:
        with self._lock:
            self._open.discard(stream)
            held = self._by_peer.get(stream.peer) if stream.peer is not None else None
            if held is None:
                return
            held.discard(stream)
            if not held:
                del self._by_peer[stream.peer]
                self._reaped.discard(stream.peer)
                self._wire_active_at_s.pop(stream.peer, None)

    def open_count(self) -> int:
        return len(self._open)

    def connection_count(self) -> int:
        return len(self._by_peer)

    # ---- the Flight side ------------------------------------------------------------------

    def middleware(self) -> dict[str, flight.ServerMiddlewareFactory]:
        return {MIDDLEWARE_KEY: _StreamsMiddlewareFactory(self)}

    def attach_call(self, context) -> Stream:
        """The handler's stream, attached to its connection; raises NetworkExceptionError over the bound."""
        call = context.get_middleware(MIDDLEWARE_KEY)
        if call is None:
            return UNTRACKED
        return self.attach(call.stream, context.peer(), time.monotonic())

    # ---- idle selection (time is an argument) --------------------------------------------------

    def plan_sweep(self, now_s: float) -> SweepPlan:
        """Which connections are over their idle time; cost: one pass over the open streams."""
        plan = SweepPlan()
        idle_s = self.limits.idle_ms / 1000
        if self.limits.idle_ms <= 0:
            return plan
        with self._lock:
            for peer, streams in self._by_peer.items():
                address = next(iter(streams)).address
                if address is None or peer in self._reaped:
                    continue
                last_s = max(max(s.active_at_s for s in streams), self._wire_active_at_s.get(peer, float("-inf")))
                if any(s.busy for s in streams) or now_s - last_s < idle_s:
                    plan.active.add(address)
                else:
                    plan.idle[address] = peer
            # At most one such sweep per idle time: a stream left waiting by a busy connection waits again.
            if self._anonymous_swept_at_s <= now_s - idle_s:
                plan.anonymous = any(s.peer is None and s.opened_at_s <= now_s - idle_s for s in self._open)
        return plan

    def record_sweep(self, plan: SweepPlan, result: SweepResult, now_s: float) -> None:
        """What the sweep found: closed connections are not looked for again; busy ones are idle no sooner
        than their wire activity says; a connection not found is given up on (its streams are ending)."""
        with self._lock:
            self.closed_idle += len(result.closed)
            for address, peer in plan.idle.items():
                if peer not in self._by_peer:
                    continue
                if address in result.busy_ms:
                    self._wire_active_at_s[peer] = now_s - result.busy_ms[address] / 1000
                else:
                    self._reaped.add(peer)
            if plan.anonymous:
                self._anonymous_swept_at_s = now_s

    # ---- the sweeper thread -----------------------------------------------------------------

    def _start_sweeper_locked(self) -> None:
        if self._sweeper is not None or self.limits.idle_ms <= 0 or not self.local_port or self._proc_unusable:
            return
        self._sweeper = threading.Thread(target=self._run_sweeper, name="ads-stream-sweeper", daemon=True)
        self._sweeper.start()

    def _run_sweeper(self) -> None:
        """Sweeps while some stream is open; the next open() starts a new thread after this one ends."""
        while True:
            time.sleep(self.limits.sweep_period_s)
            with self._lock:
                if not self._open or self._proc_unusable:
                    self._sweeper = None
                    return
            try:
                self.sweep(time.monotonic())
            except (FileNotFoundError, PermissionError) as exc:  # no /proc here: the stream bounds still hold
                log.warning("cannot close idle connections (connections.max.idle.ms): %s", exc)
                with self._lock:
                    self._proc_unusable = True
            except Exception:  # out of fds, say, or a bug: the next sweep tries again
                now_s = time.monotonic()
                if now_s - self._failure_logged_at_s >= SWEEP_FAILURE_LOG_INTERVAL_S:
                    self._failure_logged_at_s = now_s
                    log.exception("idle connection sweep failed")

    def sweep(self, now_s: float) -> SweepResult:
        plan = self.plan_sweep(now_s)
        if not plan.idle and not plan.anonymous:
            return SweepResult()
        result = close_idle_sockets(self.local_port, plan, self.limits.idle_ms)
        self.record_sweep(plan, result, now_s)
        if result.closed:  # one line per sweep, however many: a flood of idle connections is no flood of lines
            shown = ", ".join(f"{ip}:{port}" for ip, port in result.closed[:LOGGED_ADDRESSES_MAX])
            log.info("closed %d connections without data for connections.max.idle.ms=%s: %s%s", len(result.closed),
                     self.limits.idle_ms, shown, ", ..." if len(result.closed) > LOGGED_ADDRESSES_MAX else "")
        return result


class _StreamsMiddlewareFactory(flight.ServerMiddlewareFactory):
    """Counts each stream call from its first moment; refuses one over the broker's bound."""

    def __init__(self, registry: StreamRegistry):
        super().__init__()
        self._registry = registry

    def start_call(self, info, headers):
        if info.method not in STREAM_METHODS:
            return None
        try:
            return _StreamMiddleware(self._registry, self._registry.open(time.monotonic()))
        except AdsError as exc:
            raise wire.flight_error(exc) from None


class _StreamMiddleware(flight.ServerMiddleware):
    def __init__(self, registry: StreamRegistry, stream: Stream):
        super().__init__()
        self._registry = registry
        self.stream = stream

    def call_completed(self, exception):
        self._registry.release(self.stream)


# ---- the broker's own sockets (Linux /proc) ---------------------------------------------------


def parse_peer(peer: str) -> Address | None:
    """gRPC's peer string ('ipv4:127.0.0.1:5000', 'ipv6:%5B::1%5D:5000') as an address; None for others."""
    kind, _, rest = peer.partition(":")
    if kind not in ("ipv4", "ipv6"):
        return None
    host, sep, port = unquote(rest).rpartition(":")
    if not sep or not port.isdigit():
        return None
    return _normal_ip(host.strip("[]")), int(port)


def _normal_ip(text: str) -> str:
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return text
    mapped = getattr(ip, "ipv4_mapped", None)
    return str(mapped or ip)


def parse_proc_net_tcp(text: str, local_port: int) -> dict[int, Address]:
    """Established sockets of /proc/net/tcp or tcp6 text whose local port is ``local_port``: inode -> peer."""
    found = {}
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != TCP_ESTABLISHED:
            continue
        local_hex, remote_hex = fields[1], fields[2]
        if int(local_hex.rpartition(":")[2], 16) != local_port:
            continue
        ip_hex, _, port_hex = remote_hex.rpartition(":")
        found[int(fields[9])] = (_proc_ip(ip_hex), int(port_hex, 16))
    return found


def _proc_ip(ip_hex: str) -> str:
    """/proc/net/tcp prints an address as 32-bit words in host (little-endian) order."""
    raw = b"".join(bytes.fromhex(ip_hex[i:i + 8])[::-1] for i in range(0, len(ip_hex), 8))
    return _normal_ip(socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, raw))


def _established_sockets(local_port: int) -> dict[int, Address]:
    found = {}
    for path in PROC_NET_TCP:
        try:
            with open(path) as proc:
                found.update(parse_proc_net_tcp(proc.read(), local_port))
        except FileNotFoundError:  # no IPv6 in this kernel
            if path == PROC_NET_TCP[0]:
                raise
    return found


def _fds_of(inodes: set[int]) -> dict[int, int]:
    """This process's fds that are sockets with one of these inodes: inode -> fd."""
    fds = {}
    for entry in os.scandir("/proc/self/fd"):
        try:
            target = os.readlink(entry.path)
        except OSError:  # closed since the listing
            continue
        if target.startswith("socket:[") and int(target[8:-1]) in inodes:
            fds[int(target[8:-1])] = int(entry.name)
    return fds


def tcp_silent_ms(sock: socket.socket) -> int:
    """How long the socket has carried no data either way (TCP_INFO's last_data_sent/last_data_recv)."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    fields = struct.unpack_from("=8B13I", info)  # 8 one-byte fields, then rto, ato, ... last_ack_recv
    last_data_sent_ms, last_data_recv_ms = fields[17], fields[19]
    return min(last_data_sent_ms, last_data_recv_ms)


def close_idle_sockets(local_port: int, plan: SweepPlan, idle_ms: int) -> SweepResult:
    """Shut down the planned connections' sockets that carried no data for ``idle_ms``.

    Cost: one read of /proc/net/tcp{,6} and one readlink per open fd. The fd is dup'ed and checked (same
    inode, same ports) before anything is done to it: the fd number could have been reused since the
    listing. gRPC's fd is left to gRPC, which closes it once it sees the shutdown."""
    result = SweepResult()
    wanted = {inode: address for inode, address in _established_sockets(local_port).items()
              if address in plan.idle or (plan.anonymous and address not in plan.active)}
    for inode, fd in _fds_of(set(wanted)).items():
        address = wanted[inode]
        try:
            dup = os.dup(fd)
        except OSError:  # closed since the listing
            continue
        with socket.socket(fileno=dup) as sock:  # closes the dup only
            try:
                if os.fstat(dup).st_ino != inode or sock.getsockname()[1] != local_port \
                        or sock.getpeername()[1] != address[1]:
                    continue
                silent_ms = tcp_silent_ms(sock)
                if silent_ms < idle_ms:
                    result.busy_ms[address] = silent_ms
                    continue
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:  # the connection ended meanwhile
                continue
            result.closed.append(address)
    return result
