"""The consumer's leader lookups (list_offsets, offsets for leader epochs) ride out a partition with no leader
for a while (mid election) like any retriable error: metadata refreshed, backed off, bounded by
default.api.timeout.ms, then the typed error naming the partition. A fake Connections; no broker."""

import time
from types import SimpleNamespace

import pytest

from ads_spark.client.chunks import TopicPartition
from ads_spark.client.consumer import Consumer
from ads_spark.errors import LeaderNotAvailableError


class LeaderAppearsLate:
    """Metadata that shows no leader for ``topic-partition`` until lookup number ``leader_on_lookup``."""

    retry_backoff_ms = 1

    def __init__(self, leader_on_lookup: int | None):
        self.leader_on_lookup = leader_on_lookup
        self.lookups = 0
        self.stale_marks = 0
        self.calls: list[tuple[int, str, dict]] = []

    def leader_of(self, topic, partition):
        self.lookups += 1
        if self.leader_on_lookup is None or self.lookups < self.leader_on_lookup:
            self.mark_stale()  # as the real one does before raising
            raise LeaderNotAvailableError(f"{topic}-{partition} has no leader right now")
        return SimpleNamespace(leader=1, leader_epoch=4), ("localhost", 1)

    def mark_stale(self):
        self.stale_marks += 1

    def call_broker(self, broker_id, action, body):
        self.calls.append((broker_id, action, body))
        return {"partitions": [{"topic": e["topic"], "partition": e["partition"], "error_code": 0,
                                "offset": 42, "leader_epoch": 4} for e in body["partitions"]]}

    def close(self):
        pass


def consumer_over(connections, api_timeout_ms=5_000):
    return Consumer({"default.api.timeout.ms": api_timeout_ms}, connections=connections)


def test_list_offsets_waits_for_a_leader_that_appears_on_the_third_lookup():
    connections = LeaderAppearsLate(leader_on_lookup=3)
    offsets = consumer_over(connections).list_offsets([TopicPartition("orders", 2)], "latest")
    assert offsets == {TopicPartition("orders", 2): 42}
    assert connections.lookups == 3 and connections.stale_marks == 2
    assert [(broker, action) for broker, action, _ in connections.calls] == [(1, "list_offsets")]


def test_offsets_for_leader_epochs_waits_for_a_leader_too():
    connections = LeaderAppearsLate(leader_on_lookup=3)
    answer = consumer_over(connections).offsets_for_leader_epochs({("orders", 2): 3})
    assert answer[("orders", 2)]["current_leader_epoch"] == 4


def test_a_partition_that_never_gets_a_leader_raises_the_typed_error_within_the_bound():
    connections = LeaderAppearsLate(leader_on_lookup=None)
    started = time.monotonic()
    with pytest.raises(LeaderNotAvailableError, match="orders-2"):
        consumer_over(connections, api_timeout_ms=300).list_offsets([TopicPartition("orders", 2)], "earliest")
    elapsed_s = time.monotonic() - started
    assert connections.lookups > 1  # retried, not raised at once
    assert 0.3 <= elapsed_s < 1.0  # default.api.timeout.ms; no back-off outlasts it
    assert connections.calls == []
