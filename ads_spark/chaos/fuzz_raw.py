"""Raw Arrow bodies on the wire: a local proxy that rewrites the body of every Flight message in transit.

pyarrow cannot send a record batch whose buffers contradict its own header: ``Array.from_buffers``
validates the first and last offsets, and the IPC writer rebases every offsets buffer to start at 0
and slices the data to fit. A broker decodes what arrives without such checks, and the batch that
crashed one (issue #20, SIGSEGV inside libarrow) had a valid schema and batch header over a random
body. So the fuzzer sends a normal batch through this proxy, which forwards every byte unchanged
except the ``data_body`` of each FlightData message (protobuf field 1000), which it replaces with
bytes of the same length: random, all 0xFF, or the original with 1% of its bytes flipped. Lengths do
not change, so HTTP/2 framing, flow control and the header stay valid; the answers come back
untouched and pyarrow decodes them as usual.

The proxy listens on 127.0.0.1 and connects only to the broker's 127.0.0.1 port.
"""

from __future__ import annotations

import random
import socket
import threading

import numpy as np

SCRAMBLE_MODES = ("random", "ones", "flip")
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
FRAME_HEADER_BYTES = 9
DATA_FRAME, PADDED_FLAG = 0x0, 0x8
GRPC_PREFIX_BYTES = 5
FLIGHT_DATA_BODY_FIELD = 1000
SOCKET_TIMEOUT_S = 30.0  # a pump blocked this long on a silent peer gives up; the call has its own deadline
ACCEPT_TIMEOUT_S = 0.2  # how often the accept loop looks at the stop flag


def body_rewrite(length: int, mode: str, rng: random.Random) -> tuple[bytes, bool]:
    """(bytes, is_mask) for a body of ``length``: a replacement, or for ``flip`` a XOR mask (1% of bytes)."""
    if mode == "random":
        return rng.randbytes(length), False
    if mode == "ones":
        return b"\xff" * length, False
    if mode == "flip":
        mask = bytearray(length)
        for _ in range(max(1, length // 100) if length else 0):
            mask[rng.randrange(length)] = rng.randrange(1, 256)
        return bytes(mask), True
    raise ValueError(f"unknown scramble mode {mode!r}; known: {', '.join(SCRAMBLE_MODES)}")


def apply_rewrite(original: bytes, rewrite: bytes, is_mask: bool) -> bytes:
    if not is_mask:
        return rewrite
    return (np.frombuffer(original, dtype=np.uint8) ^ np.frombuffer(rewrite, dtype=np.uint8)).tobytes()


class _MessageRewriter:
    """The gRPC messages of one HTTP/2 stream, fed as its DATA payloads arrive; rewrites field 1000.

    A streaming parser, because a message spans many frames and the sender waits for window updates
    that only come once the broker has read the earlier frames: nothing can be held back.
    """

    def __init__(self, mode: str, rng: random.Random):
        self.mode, self.rng = mode, rng
        self.bodies_rewritten = 0
        self._pending = bytearray()  # bytes of a prefix, tag or length not yet complete
        self._state = "prefix"
        self._message_left = 0  # bytes of the current message not yet seen
        self._region_left = 0  # bytes of the current skipped field or body not yet seen
        self._body = b""  # the replacement (or XOR mask) of the current body, cut as its bytes pass
        self._body_is_mask = False
        self._body_at = 0
        self._field = 0

    def feed(self, data: bytes) -> bytes:
        out = bytearray()
        view = memoryview(data)
        while view:
            if self._state in ("skip", "body"):
                step = min(len(view), self._region_left)
                chunk = bytes(view[:step])
                if self._state == "body":
                    chunk = apply_rewrite(chunk, self._body[self._body_at:self._body_at + step], self._body_is_mask)
                    self._body_at += step
                out += chunk
                view = view[step:]
                self._region_left -= step
                self._message_left -= step
                if not self._region_left:
                    self._state = "field" if self._message_left else "prefix"
                continue
            byte = view[0]
            view = view[1:]
            out.append(byte)
            self._header_byte(byte)
        return bytes(out)

    def _header_byte(self, byte: int) -> None:
        self._pending.append(byte)
        if self._state == "prefix":
            if len(self._pending) == GRPC_PREFIX_BYTES:
                self._message_left = int.from_bytes(self._pending[1:5], "big")
                self._pending.clear()
                self._state = "field" if self._message_left else "prefix"
            return
        self._message_left -= 1
        if byte & 0x80:
            return  # the varint goes on
        value = _varint(self._pending)
        self._pending.clear()
        if self._state == "field":
            self._field, wire_type = value >> 3, value & 7
            if wire_type == 2:
                self._state = "length"
            elif wire_type == 0:
                self._state = "varint"
            else:  # not a FlightData message as Arrow writes them: pass the rest through
                self._state, self._region_left = "skip", self._message_left
        elif self._state == "varint":
            self._state = "field" if self._message_left else "prefix"
        elif self._state == "length":
            self._region_left = value
            if not value:
                self._state = "field" if self._message_left else "prefix"
            elif self._field == FLIGHT_DATA_BODY_FIELD:
                self._state, self._body_at = "body", 0
                self._body, self._body_is_mask = body_rewrite(value, self.mode, self.rng)
                self.bodies_rewritten += 1
            else:
                self._state = "skip"


def _varint(raw: bytes | bytearray) -> int:
    value = 0
    for shift, byte in enumerate(raw):
        value |= (byte & 0x7F) << (7 * shift)
    return value


class BodyScramblingProxy:
    """127.0.0.1:<port> -> 127.0.0.1:<broker port>, rewriting message bodies client -> broker."""

    def __init__(self, broker_port: int, mode: str, seed: int):
        self.broker_port, self.mode = broker_port, mode
        self._rng = random.Random(seed)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(ACCEPT_TIMEOUT_S)
        self.port = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._sockets: list[socket.socket] = []
        self._rewriters: list[_MessageRewriter] = []
        self._threads = [threading.Thread(target=self._accept, name="fuzz-proxy-accept", daemon=True)]
        self._threads[0].start()

    @property
    def bodies_rewritten(self) -> int:
        return sum(r.bodies_rewritten for r in self._rewriters)

    def close(self, wait_s: float = 5.0) -> None:
        self._stop.set()
        for sock in [self._listener, *self._sockets]:
            try:
                sock.close()
            except OSError:
                pass
        for thread in self._threads:
            thread.join(wait_s)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.broker_port), timeout=SOCKET_TIMEOUT_S)
            except OSError:
                client.close()
                continue
            for sock in (client, upstream):
                sock.settimeout(SOCKET_TIMEOUT_S)
                self._sockets.append(sock)
            for target, args in ((self._pump_requests, (client, upstream)), (_pump, (upstream, client))):
                thread = threading.Thread(target=target, args=args, name="fuzz-proxy-pump", daemon=True)
                self._threads.append(thread)
                thread.start()

    def _pump_requests(self, source: socket.socket, sink: socket.socket) -> None:
        """Client -> broker: the preface, then frame by frame, DATA payloads through a rewriter per stream."""
        rewriters: dict[int, _MessageRewriter] = {}
        buffer = bytearray()
        preface_left = len(HTTP2_PREFACE)
        try:
            while True:
                data = source.recv(1 << 16)
                if not data:
                    break
                buffer += data
                if preface_left:
                    step = min(preface_left, len(buffer))
                    sink.sendall(bytes(buffer[:step]))
                    del buffer[:step]
                    preface_left -= step
                while len(buffer) >= FRAME_HEADER_BYTES:
                    length = int.from_bytes(buffer[:3], "big")
                    if len(buffer) < FRAME_HEADER_BYTES + length:
                        break
                    header = bytes(buffer[:FRAME_HEADER_BYTES])
                    payload = bytes(buffer[FRAME_HEADER_BYTES:FRAME_HEADER_BYTES + length])
                    del buffer[:FRAME_HEADER_BYTES + length]
                    if header[3] == DATA_FRAME:
                        payload = self._rewrite(header, payload, rewriters)
                    sink.sendall(header + payload)
        except OSError:
            pass
        finally:
            _shut(sink)

    def _rewrite(self, header: bytes, payload: bytes, rewriters: dict[int, _MessageRewriter]) -> bytes:
        stream_id = int.from_bytes(header[5:9], "big") & 0x7FFFFFFF
        rewriter = rewriters.get(stream_id)
        if rewriter is None:
            rewriter = rewriters[stream_id] = _MessageRewriter(self.mode, self._rng)
            self._rewriters.append(rewriter)
        if header[4] & PADDED_FLAG and payload:
            pad = payload[0]
            data_end = len(payload) - pad
            return payload[:1] + rewriter.feed(payload[1:data_end]) + payload[data_end:]
        return rewriter.feed(payload)


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while True:
            data = source.recv(1 << 16)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        _shut(sink)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass
