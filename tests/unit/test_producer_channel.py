"""The produce channel never makes its caller wait for the network, and gives up on a broker that does not answer.

A stand-in Flight client whose ``do_put`` blocks plays a broker behind a link that drops packets (connecting
hangs until gRPC's connect timeout): the jepsen-2013 runs showed a producer's every partition stopping because
its sender thread opened that stream itself.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pyarrow as pa

from ads_spark.client.producer_channel import BrokerChannel
from ads_spark.errors import NetworkExceptionError
from ads_spark.records import PRODUCE_SCHEMA


class HangingClient:
    """do_put blocks until released (a connect to a host whose packets are dropped)."""

    def __init__(self):
        self.release = threading.Event()

    def do_put(self, descriptor, schema, options):
        self.release.wait(10)
        raise OSError("connect timed out")


def _item():
    return SimpleNamespace(batch=pa.RecordBatch.from_pylist([], schema=PRODUCE_SCHEMA))


def test_send_returns_at_once_and_overdue_batches_fail_retriably():
    client = HangingClient()
    channel = BrokerChannel(client, broker_id=7, answer_deadline_ms=200)
    answers = []
    try:
        items = [_item() for _ in range(3)]
        started = time.monotonic()
        for item in items:
            channel.send(item, {"topic": "t", "partition": 0}, lambda item, offset, error: answers.append(error))
        assert time.monotonic() - started < 2.0  # the stream's connect hangs for 10 s meanwhile
        assert not channel.fail_overdue(started)  # nothing has waited past the deadline yet
        time.sleep(0.3)
        assert channel.fail_overdue()
        assert len(answers) == 3 and all(isinstance(e, NetworkExceptionError) for e in answers)
        assert "within" in str(answers[0])
        assert channel.broken
    finally:
        client.release.set()
        channel.close()


def test_a_stream_that_cannot_open_fails_its_batches():
    client = HangingClient()
    client.release.set()  # do_put fails at once
    channel = BrokerChannel(client, broker_id=3, answer_deadline_ms=10_000)
    answers = []
    try:
        channel.send(_item(), {"topic": "t", "partition": 0}, lambda item, offset, error: answers.append(error))
    except NetworkExceptionError:
        answers.append("refused")  # the stream failed before the send: refused outright, also fine
    deadline = time.monotonic() + 5
    while not answers and time.monotonic() < deadline:
        time.sleep(0.01)
    assert answers and channel.broken
    channel.close()
