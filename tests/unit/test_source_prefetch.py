"""The executor's read-ahead: order kept, bounded, errors raised in the task, early close stops the thread."""

import threading
import time

import pytest

from ads_spark.spark.source import prefetch
from ads_spark.spark.source.prefetch import read_ahead


def test_items_arrive_in_order():
    assert list(read_ahead(lambda: iter(range(50)), depth_batches_max=3)) == list(range(50))


def test_producer_runs_at_most_depth_ahead():
    produced = []

    def produce():
        for i in range(100):
            produced.append(i)
            yield i

    items = read_ahead(produce, depth_batches_max=2)
    assert next(items) == 0
    time.sleep(0.2)
    # One handed over, two waiting in the queue, one held by the producer while the queue is full.
    assert len(produced) <= 4
    items.close()


def test_a_producer_error_is_raised_after_the_items_before_it():
    def produce():
        yield 1
        yield 2
        raise ValueError("broker said no")

    items = read_ahead(produce)
    assert [next(items), next(items)] == [1, 2]
    with pytest.raises(ValueError, match="broker said no"):
        next(items)


def test_closing_early_stops_and_joins_the_thread(monkeypatch):
    monkeypatch.setattr(prefetch, "PUT_POLL_S", 0.01)
    closed = threading.Event()

    def produce():
        try:
            for i in range(10_000):
                yield i
        finally:
            closed.set()

    items = read_ahead(produce, depth_batches_max=1)
    assert next(items) == 0
    items.close()
    assert closed.wait(1.0)
    assert not [t for t in threading.enumerate() if t.name == "ads-source-read-ahead"]


def test_nothing_starts_until_the_first_item_is_asked_for():
    started = threading.Event()

    def produce():
        started.set()
        yield 1

    items = read_ahead(produce)
    time.sleep(0.05)
    assert not started.is_set()
    assert list(items) == [1]
