"""The controller's requests to each broker, sent by one thread per broker.

Why: the controller decides on one event thread. When it called brokers itself,
one broker that did not answer (cut off by a partition, paused, overloaded)
held that thread for the request timeout per request, so the controller saw
another broker's session expire many seconds late and a partition stayed
without a leader that long (the jepsen-2013 run showed 10 s). As in Kafka's
ControllerChannelManager, the event thread only queues; each broker's sender
delivers its queue in order.

Delivery: a failed request is retried (the queue waits behind it, keeping the
order), with a growing backoff, until it is delivered or the channel closes, as
Kafka's RequestSendThread does. A channel serves one registration of a broker in
one controller term, so it closes when the broker registers again or goes (the
controller sends every arriving broker its full state) or the controller loses
its role. It once dropped a request after three failed attempts, believing a
broker that missed one would register again: one cut off from the controller
but not from ZooKeeper keeps its registration, and a leader-and-isr dropped so
left it without its role for good (the simulation's liveness phase, seed 801).
The queue is bounded; on overflow it is emptied and the controller is asked to
send that broker its full state again (``on_overflow``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any, Callable

log = logging.getLogger("ads.controller")

QUEUE_MAX = 1_000
RETRY_BACKOFF_S = 0.5  # after failed attempt n the sender waits n times this, at most RETRY_BACKOFF_MAX_S
RETRY_BACKOFF_MAX_S = 5.0
CLOSE_JOIN_S = 1.0


class BrokerRequestChannel:
    """Requests to one registration of one broker (``key`` = broker id and broker epoch), in order."""

    def __init__(self, key: tuple[int, int], host: str, port: int, connections, timeout_ms: int,
                 on_overflow: Callable[[int], None]):
        self.key, self.host, self.port = key, host, port
        self._connections, self._timeout_ms, self._on_overflow = connections, timeout_ms, on_overflow
        self._queue: deque[tuple[str, dict[str, Any]]] = deque()  # bounded by QUEUE_MAX in send()
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=f"controller-to-{key[0]}", daemon=True)
        self._thread.start()

    def send(self, action: str, body: dict[str, Any]) -> None:
        """Queue a request; never blocks on the broker."""
        overflow = False
        with self._cond:
            if self._closed:
                return
            if len(self._queue) >= QUEUE_MAX:
                self._queue.clear()
                overflow = True
            self._queue.append((action, body))
            self._cond.notify()
        if overflow:
            log.error("controller: %s requests queued for broker %s; dropped them, resending its full state",
                      QUEUE_MAX, self.key[0])
            self._on_overflow(self.key[0])

    def pending(self) -> int:
        with self._cond:
            return len(self._queue)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._queue.clear()
            self._cond.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(CLOSE_JOIN_S)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                action, body = self._queue[0]
            self._deliver(action, body)
            with self._cond:
                if self._queue and self._queue[0][1] is body:
                    self._queue.popleft()

    def _deliver(self, action: str, body: dict[str, Any]) -> None:
        """Until delivered, or until ``body`` is no longer queued (the channel closed, or overflowed: the
        controller sends that broker its full state again)."""
        attempt = 0
        while True:
            with self._cond:
                if not self._is_head(body):
                    return
            attempt += 1
            try:
                self._connections.call_action(self.host, self.port, action, body, self._timeout_ms)
                return
            except Exception as exc:
                log.warning("controller: %s to broker %s failed (attempt %s): %s", action, self.key[0], attempt, exc)
            deadline = time.monotonic() + min(RETRY_BACKOFF_S * attempt, RETRY_BACKOFF_MAX_S)
            with self._cond:  # close() and send() notify: a closed channel stops waiting at once
                while self._is_head(body) and (left := deadline - time.monotonic()) > 0:
                    self._cond.wait(left)

    def _is_head(self, body: dict[str, Any]) -> bool:
        """Whether ``body`` is still the request to deliver (called holding ``_cond``)."""
        return not self._closed and bool(self._queue) and self._queue[0][1] is body
