"""The producer's sender thread sleeps until something is due: the end of an open batch's linger.ms, a retry
backoff, or an answer. A stand-in for the network records what would be sent; nothing here opens a socket."""

from __future__ import annotations

import threading
import time

from ads_spark.client.producer import OVERDUE_CHECK_INTERVAL_S, Producer
from tests.fixtures.producers import OnePartitionConnections

WAIT_S_MAX = 5.0  # bound on every wait below; the assertions are about what happens far sooner


class RecordingProducer(Producer):
    """Counts the sender's passes and hands sent batches to a list instead of a broker."""

    def __init__(self, config, connections=None):
        self.passes = 0
        self.sent_at_s: list[float] = []
        self.sent_event = threading.Event()
        super().__init__(config, connections=connections or OnePartitionConnections())

    def _take_sendable_locked(self, now):
        self.passes += 1
        return super()._take_sendable_locked(now)

    def _send(self, item):
        self.sent_at_s.append(time.monotonic())
        self.sent_event.set()


def _producer(linger_ms: int) -> RecordingProducer:
    return RecordingProducer({"acks": "1", "linger.ms": linger_ms})


def _stop(producer: Producer) -> None:
    """Ends the sender thread without close(): nothing answers what the stand-in "sent", so a flush would wait."""
    with producer._lock:
        producer._closed = True
        producer._lock.notify_all()
    producer._sender.join(WAIT_S_MAX)


def test_an_idle_producer_sleeps_instead_of_polling_every_linger():
    producer = _producer(linger_ms=1)
    try:
        time.sleep(0.1)
        before = producer.passes
        time.sleep(0.5)
        # Polling every linger.ms made ~500 passes here; asleep it wakes for the overdue-answer check only.
        assert producer.passes - before <= 0.5 / OVERDUE_CHECK_INTERVAL_S + 2
    finally:
        _stop(producer)


def test_a_record_opening_a_batch_leaves_when_its_linger_ends():
    producer = _producer(linger_ms=300)
    try:
        time.sleep(0.05)
        produced_at_s = time.monotonic()
        producer.produce("t", value=b"v", partition=0)
        assert producer.sent_event.wait(WAIT_S_MAX)
        waited_s = producer.sent_at_s[0] - produced_at_s
        assert 0.29 <= waited_s < 0.29 + 1.0  # the linger, then at most the machine's scheduling delay
    finally:
        _stop(producer)


PARTITIONS = 200


class ManyPartitionConnections(OnePartitionConnections):
    def partitions_for(self, topic):
        return {number: None for number in range(PARTITIONS)}


def test_records_opening_batches_on_many_partitions_wake_the_sender_about_once():
    """Records paced (keyed traffic over many partitions at a moderate rate): each opens a batch, and each
    opened batch is due no sooner than the one before it, so the sleeping sender needs no wake for it."""
    producer = RecordingProducer({"acks": "1", "linger.ms": 1000}, connections=ManyPartitionConnections())
    try:
        time.sleep(0.05)
        before, started_s = producer.passes, time.monotonic()
        for number in range(PARTITIONS):
            producer.produce("t", value=b"v", partition=number)
            time.sleep(0.0005)  # the caller lets go of the GIL, as a paced producer does
        elapsed_s = time.monotonic() - started_s
        # A wake per opened batch was ~200 passes here, each over every open batch; asleep, the sender wakes
        # for the overdue-answer check (and, on a machine slow enough to pass the linger, to send).
        assert producer.passes - before <= elapsed_s / OVERDUE_CHECK_INTERVAL_S + 4
        deadline = time.monotonic() + WAIT_S_MAX
        while len(producer.sent_at_s) < PARTITIONS and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(producer.sent_at_s) == PARTITIONS  # and every linger still ends
    finally:
        _stop(producer)
