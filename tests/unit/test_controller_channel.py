"""The controller's per-broker channel retries a request until it is delivered or the channel closes.

It once dropped a request after three failed attempts: a broker cut off from the controller but not from
ZooKeeper kept its registration, never got that leader-and-isr, and kept no role for good (simulation
seed 801, liveness phase).
"""

import threading
import time

from ads_spark.broker.controller import channel


class _Broker:
    """Fails the first ``failures`` calls, then answers; records every body it was sent."""

    def __init__(self, failures: int):
        self.failures, self.calls, self.lock = failures, [], threading.Lock()

    def call_action(self, host, port, action, body, timeout_ms):
        with self.lock:
            self.calls.append(body["n"])
            if self.failures > 0:
                self.failures -= 1
                raise ConnectionError("unreachable")
        return {"error_code": 0}


def _wait(condition, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.005)
    return condition()


def test_a_request_is_retried_until_delivered_in_order(monkeypatch):
    monkeypatch.setattr(channel, "RETRY_BACKOFF_S", 0.001)
    broker = _Broker(failures=7)  # more than the three attempts a request once got
    sender = channel.BrokerRequestChannel((1, 10), "h", 1, broker, 100, lambda broker_id: None)
    try:
        for n in range(3):
            sender.send("leader_and_isr", {"n": n})
        assert _wait(lambda: sender.pending() == 0)
        assert broker.calls == [0] * 8 + [1, 2]
    finally:
        sender.close()


def test_closing_stops_the_retries_at_once(monkeypatch):
    monkeypatch.setattr(channel, "RETRY_BACKOFF_S", 10.0)  # a long backoff that close() must cut short
    broker = _Broker(failures=10**9)
    sender = channel.BrokerRequestChannel((1, 10), "h", 1, broker, 100, lambda broker_id: None)
    sender.send("leader_and_isr", {"n": 0})
    assert _wait(lambda: broker.calls)
    started = time.monotonic()
    sender.close()
    assert time.monotonic() - started < channel.CLOSE_JOIN_S and sender.pending() == 0
    assert broker.calls == [0]
