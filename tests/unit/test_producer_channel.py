"""The produce channel never makes its caller wait for the network, and gives up on a broker that does not answer.

A stand-in Flight client whose ``do_exchange`` blocks plays a broker behind a link that drops packets
(connecting hangs until gRPC's connect timeout): the jepsen-2013 runs showed a producer's every partition
stopping because its sender thread opened that stream itself. A real Flight server on 127.0.0.1 that never
answers (or reads nothing) plays a broker that stopped: the abandoned stream's threads must end at once.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from ads_spark.client.producer_channel import BrokerChannel
from ads_spark.errors import NetworkExceptionError
from ads_spark.protocol.records import PRODUCE_SCHEMA


class HangingClient:
    """do_exchange blocks until released (a connect to a host whose packets are dropped)."""

    def __init__(self):
        self.release = threading.Event()

    def do_exchange(self, descriptor, options):
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
    client.release.set()  # do_exchange fails at once
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


class SilentBroker(flight.FlightServerBase):
    """Accepts a produce stream and then, as a broker that stopped, never answers; ``reads`` says whether
    it even reads the batches (not reading fills the stream's flow-control window, so the client's
    writer thread blocks too)."""

    def __init__(self, reads: bool):
        super().__init__("grpc://127.0.0.1:0")
        self.reads = reads
        self.stop = threading.Event()

    def do_exchange(self, context, descriptor, reader, writer):
        while not self.stop.is_set() and not context.is_cancelled():
            if self.reads:
                try:
                    reader.read_chunk()
                except (StopIteration, flight.FlightError):
                    return
            else:
                self.stop.wait(0.05)


def _big_item(rows: int):
    value = b"x" * 1024
    batch = pa.RecordBatch.from_pylist([{"value": value}] * rows, schema=PRODUCE_SCHEMA)
    return SimpleNamespace(batch=batch)


@pytest.mark.parametrize("server_reads", [True, False], ids=["never-answers", "reads-nothing"])
def test_an_abandoned_stream_ends_both_its_threads_at_once(server_reads):
    server = SilentBroker(reads=server_reads)
    threading.Thread(target=server.serve, daemon=True).start()
    client = flight.FlightClient(f"grpc://127.0.0.1:{server.port}")
    channel = BrokerChannel(client, broker_id=1, answer_deadline_ms=300)
    answers = []
    try:
        for _ in range(16):  # 16 MiB: more than gRPC's flow-control window when nothing reads it
            channel.send(_big_item(1024), {"topic": "t", "partition": 0},
                         lambda item, offset, error: answers.append(error))
        deadline = time.monotonic() + 10
        while not channel.fail_overdue() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert channel.broken and len(answers) == 16
        assert all(isinstance(error, NetworkExceptionError) for error in answers)
        ended_by = time.monotonic() + 2
        while channel.threads_alive() and time.monotonic() < ended_by:
            time.sleep(0.01)
        assert not channel.threads_alive(), "the broken stream's threads still wait on the network"
    finally:
        server.stop.set()
        channel.close()
        client.close()
        server.shutdown()


class RefusingServer(flight.FlightServerBase):
    """A broker over its stream bound: every exchange is refused with a typed error."""

    def do_exchange(self, context, descriptor, reader, writer):
        from ads_spark.protocol import wire

        raise wire.flight_error(NetworkExceptionError("stream refused: flight.streams.max=1 streams are open"))


def test_a_refused_stream_fails_its_batches_with_the_brokers_reason():
    server = RefusingServer("grpc+tcp://127.0.0.1:0")
    client = flight.connect(f"grpc+tcp://127.0.0.1:{server.port}")
    channel = BrokerChannel(client, broker_id=3, answer_deadline_ms=5000)
    answers = []
    done = threading.Event()
    try:
        try:  # refused while the batch is queued (its callback says why) or before (send says why)
            channel.send(_item(), {"topic": "t", "partition": 0},
                         lambda item, offset, error: (answers.append(error), done.set()))
            assert done.wait(10)
        except NetworkExceptionError as refused:
            answers.append(refused)
        assert isinstance(answers[0], NetworkExceptionError)
        assert "flight.streams.max" in str(answers[0]), answers[0]
    finally:
        channel.close()
        client.close()
        server.shutdown()
