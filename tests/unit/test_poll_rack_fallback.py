"""KIP-392 in ``Consumer.poll``: a partition is fetched from the in-sync replica on the consumer's rack; any
error that replica answers for it (behind, fenced, not a replica) sends it to the leader for
RACK_REPLICA_FALLBACK_S, after which the replica is tried again. In ``fetch_chunk`` (the Spark source's
path), a replica's out-of-range answer is asked again of the leader. No broker: the choice is checked on
metadata the test gives, and answers come from a fake Flight client."""

from __future__ import annotations

import time

import pytest

from ads_spark.client.consumer import Consumer
from ads_spark.client.poll_fetcher import RACK_REPLICA_FALLBACK_S, PollFetcher
from ads_spark.errors import ErrorCode, OffsetOutOfRangeError
from ads_spark.client.chunks import TopicPartition
from ads_spark.protocol import wire
from ads_spark.protocol.connection import BrokerAddress, ClusterView, PartitionMetadata

KEY = ("t", 0)
LEADER = BrokerAddress(1, "127.0.0.1", 1, "a")
FOLLOWER = BrokerAddress(2, "127.0.0.1", 2, "b")
OBSERVER = BrokerAddress(4, "127.0.0.1", 4, "remote")
META = PartitionMetadata("t", 0, leader=1, leader_epoch=3, replicas=(1, 2, 3), isr=(1, 2), observers=(4,))


@pytest.fixture
def fetcher_for():
    made = []

    def make(rack: str | None, fetcher: bool = True):
        consumer = Consumer({"bootstrap.servers": "127.0.0.1:1", "local.reads": "false",
                             **({"client.rack": rack} if rack else {})})
        view = ClusterView(brokers={1: LEADER, 2: FOLLOWER, 4: OBSERVER}, topics={"t": {0: META}},
                           fetched_at_ms=time.time() * 1000)
        consumer._connections._view, consumer._connections._stale = view, False
        consumer._connections.mark_stale = lambda: None  # a refresh would dial; the metadata here stays as given
        made.append(consumer)
        return PollFetcher(consumer) if fetcher else consumer

    yield make
    for consumer in made:
        consumer.close()


def test_a_partition_is_fetched_from_the_in_sync_replica_or_observer_on_the_consumers_rack(fetcher_for):
    now = time.monotonic()
    assert fetcher_for("b")._source_for(KEY, META, LEADER, now) == (2, FOLLOWER)
    assert fetcher_for("remote")._source_for(KEY, META, LEADER, now) == (4, OBSERVER)
    assert fetcher_for("c")._source_for(KEY, META, LEADER, now) == (1, LEADER)  # broker 3: not in the ISR
    assert fetcher_for(None)._source_for(KEY, META, LEADER, now) == (1, LEADER)


@pytest.mark.parametrize("code", [ErrorCode.OFFSET_OUT_OF_RANGE, ErrorCode.OFFSET_NOT_AVAILABLE,
                                  ErrorCode.NOT_LEADER_OR_FOLLOWER])
def test_an_error_from_the_replica_sends_the_partition_to_the_leader_for_a_while(fetcher_for, code):
    fetcher = fetcher_for("b")
    answer = fetcher._answer_from(KEY, 10, {"error_code": int(code), "message": "behind"}, [], from_replica=True)
    assert answer.chunk is None and answer.error is None  # not the caller's error: the leader is asked
    now = time.monotonic()
    assert fetcher._source_for(KEY, META, LEADER, now) == (1, LEADER)
    assert fetcher._source_for(KEY, META, LEADER, now + RACK_REPLICA_FALLBACK_S + 0.1) == (2, FOLLOWER)
    # The leader's word is final: out of range there (no epoch to check, KIP-320) reaches the caller.
    answer = fetcher._answer_from(KEY, 10, {"error_code": int(ErrorCode.OFFSET_OUT_OF_RANGE), "message": ""}, [],
                                  from_replica=False)
    assert isinstance(answer.error, OffsetOutOfRangeError)


class _Chunk:
    def __init__(self, meta: dict):
        self.app_metadata, self.data = wire.dumps(meta), None


class _FakeFlight:
    """Answers a fetch with no records: out of range on broker 4 (an observer behind), a HW of 120 elsewhere."""

    def __init__(self, port: int, asked: list):
        self.port, self.asked = port, asked

    def do_get(self, ticket, options):
        self.asked.append(self.port)
        code = int(ErrorCode.OFFSET_OUT_OF_RANGE) if self.port == OBSERVER.port else 0
        return [_Chunk({"partitions": [{"topic": "t", "partition": 0, "error_code": code, "message": "behind",
                                        "high_watermark": 120, "log_start_offset": 0, "leader_epoch": 3}]})]


def test_fetch_chunk_asks_the_leader_when_the_rack_replica_is_behind_the_position(fetcher_for):
    consumer = fetcher_for("remote", fetcher=False)
    asked: list[int] = []
    consumer._connections.client_for = lambda host, port: _FakeFlight(port, asked)
    chunk = consumer.fetch_chunk(TopicPartition("t", 0), 110)
    assert asked == [OBSERVER.port, LEADER.port]  # the observer first, then the leader, whose answer stands
    assert chunk.high_watermark == 120 and chunk.table.num_rows == 0
