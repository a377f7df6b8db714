"""A follower fetcher does not spin on a partition its leader refuses, and resumes at once on a LeaderAndIsr.

The leader answers a refused partition (a stale leader epoch, say) at once instead of parking the fetch, so
a fetcher that asked again at once would keep both brokers busy until the follower heard of the new epoch.
A stand-in fetch session plays the leader here (a unit test of the fetcher thread alone): it refuses every
fetch and counts them.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from ads_spark.broker.replica.fetcher import FetcherThread, LeaderEndpoint
from ads_spark.errors import ErrorCode
from ads_spark.replication.partition import FetchRequest

LEADER_ID = 1
REFUSING_FOR_S = 1.0
FETCHES_WHILE_REFUSED_MAX = 12  # the backoff doubles from 10 ms: ~8 fetches in the first second


class RefusingLeader:
    """Refuses partition 0 with FENCED_LEADER_EPOCH; a fetch naming only other partitions is parked for
    its ``max_wait_ms`` (nothing to send) as a real leader parks it."""

    def __init__(self):
        self.fetch_times: list[float] = []  # of the fetches that named partition 0
        self.lock = threading.Lock()

    def fetch(self, request, timeout_s):
        names_refused = any(p["partition"] == 0 for p in request["partitions"])
        if names_refused:
            with self.lock:
                self.fetch_times.append(time.monotonic())
        else:
            time.sleep(request["max_wait_ms"] / 1000)
        return [({"partitions": [{"topic": p["topic"], "partition": p["partition"], "high_watermark": 0,
                                  "error_code": int(ErrorCode.FENCED_LEADER_EPOCH) if p["partition"] == 0 else 0}
                                 for p in request["partitions"]]}, None)]

    def fetches_since(self, since: float) -> int:
        with self.lock:
            return sum(1 for at in self.fetch_times if at >= since)

    def cancel(self):
        pass

    def close(self):
        pass


def _follower_partition(number: int = 0):
    return SimpleNamespace(key=("t", number), topic="t", partition=number,
                           fetch_request=lambda: FetchRequest(LEADER_ID, 3, 0, -1),
                           on_fetch_response=lambda *args: None)


def _fetcher(leader: RefusingLeader, wait_max_ms: int) -> FetcherThread:
    manager = SimpleNamespace(
        config={"replica.fetch.wait.max.ms": wait_max_ms, "replica.fetch.max.bytes": 1 << 20,
                "replica.fetch.response.max.bytes": 1 << 20, "replica.fetch.backoff.ms": 1000},
        broker_id=2, broker_epoch=lambda: 7, on_fatal=lambda reason: None)
    thread = FetcherThread(manager, LeaderEndpoint(LEADER_ID, "127.0.0.1", 1), 0)
    thread._session = leader
    return thread


def test_a_refused_partition_backs_off_and_a_leader_and_isr_ends_the_backoff():
    leader = RefusingLeader()
    thread = _fetcher(leader, wait_max_ms=50)
    partition = _follower_partition()
    thread.add(partition)
    started = time.monotonic()
    thread.start()
    try:
        time.sleep(REFUSING_FOR_S)
        refused = leader.fetches_since(started)
        assert 2 <= refused <= FETCHES_WHILE_REFUSED_MAX, f"{refused} fetches in {REFUSING_FOR_S}s of refusals"

        # Now ~640 ms into its backoff: the LeaderAndIsr that brings the new epoch ends it.
        leader_and_isr_at = time.monotonic()
        thread.add(partition)
        deadline = leader_and_isr_at + 2.0
        while not leader.fetches_since(leader_and_isr_at) and time.monotonic() < deadline:
            time.sleep(0.005)
        waited_s = min(leader.fetch_times[-1] - leader_and_isr_at, 9.9)
        assert leader.fetches_since(leader_and_isr_at) and waited_s < 0.15, f"fetched {waited_s:.3f}s after it"
    finally:
        thread.stopping.set()
        thread.join(5)
    assert not thread.is_alive()


def test_a_backoff_ends_on_time_while_the_other_partitions_fetch_is_parked():
    """The fetch for the partitions not backing off is parked only until the next backoff ends: parked for the
    whole poll, a refused new topic's partition would wait out every other partition's long-poll."""
    leader = RefusingLeader()
    thread = _fetcher(leader, wait_max_ms=5_000)
    thread.add(_follower_partition(0))
    thread.add(_follower_partition(1))
    started = time.monotonic()
    thread.start()
    try:
        time.sleep(REFUSING_FOR_S)
        refused = leader.fetches_since(started)
        assert refused >= 4, f"partition 0 was fetched {refused} times in {REFUSING_FOR_S}s of a 5 s poll"
        assert refused <= FETCHES_WHILE_REFUSED_MAX
    finally:
        thread.stopping.set()
        thread.join(8)
    assert not thread.is_alive()
