"""Offsets retention (KIP-211) on a one-broker cluster: an empty group's offsets expire, a stable one's stay.

Its own module because it needs a retention of seconds (``offsets.retention.ms``, ADS's finer form of
``offsets.retention.minutes``), which the failover tests of test_group_coordinator.py must not have. One
broker also shows ``__consumer_offsets`` created with min(offsets.topic.replication.factor, live brokers).
"""

from __future__ import annotations

import time
import uuid

from ads_spark.errors import ErrorCode
from ads_spark.protocol import wire
from tests.fixtures.group_calls import GroupCaller, commit, fetched, form_group
from tests.fixtures.waiting import wait_until

RETENTION_MS = 3000


def test_offsets_retention_expires_an_empty_groups_offsets(fresh_cluster):
    one_broker = fresh_cluster(1, overrides=[
        f"offsets.retention.ms={RETENTION_MS}", "offsets.retention.check.interval.ms=200",
        "offsets.topic.num.partitions=1", "group.min.session.timeout.ms=500", "group.initial.rebalance.delay.ms=0"])
    caller = GroupCaller(one_broker.bootstrap_servers)
    try:
        emptied, standalone, stable = (f"g-{name}-{uuid.uuid4().hex[:6]}" for name in ("emptied", "standalone", "stable"))
        member = form_group(caller, emptied, 1)[0]
        assert commit(caller, emptied, {("t", 0): (5, 1, "e")}, member["generation_id"],
                      member["member_id"])["error_code"] == 0
        left = caller.call(emptied, wire.ACTION_LEAVE_GROUP, {"group_id": emptied,
                                                              "members": [{"member_id": member["member_id"]}]})
        assert left["error_code"] == 0
        assert commit(caller, standalone, {("t", 1): (9, -1, "s")})["error_code"] == 0
        # A stable group subscribed to "t" (session long enough to need no heartbeat here) keeps its offsets.
        keeper = form_group(caller, stable, 1, session_ms=60_000)[0]
        assert commit(caller, stable, {("t", 2): (7, 2, "k")}, keeper["generation_id"],
                      keeper["member_id"])["error_code"] == 0
        committed_at = time.monotonic()
        assert fetched(caller, emptied) == {("t", 0): (5, 1, "e")}
        assert fetched(caller, standalone) == {("t", 1): (9, -1, "s")}
        wait_until(lambda: fetched(caller, emptied) == {} and fetched(caller, standalone) == {}, 30,
                   what="the empty group's and the standalone offsets to expire")
        assert time.monotonic() - committed_at >= RETENTION_MS / 1000 - 0.5
        assert fetched(caller, stable) == {("t", 2): (7, 2, "k")}
        described = caller.call(emptied, wire.ACTION_DESCRIBE_GROUPS, {"groups": [emptied]})["groups"][0]
        assert described["state"] == "Dead"  # dropped with its offsets (a group tombstone was written)
        # The expiry was written (tombstones, acks=all): a restarted coordinator loads nothing back.
        one_broker.kill_broker(1)
        one_broker.start_broker(1)
        caller.coordinator.clear()
        assert fetched(caller, emptied) == {} and fetched(caller, standalone) == {}
        assert fetched(caller, stable) == {("t", 2): (7, 2, "k")}
        described = caller.call(stable, wire.ACTION_DESCRIBE_GROUPS, {"groups": [stable]})["groups"][0]
        assert described["state"] == "Stable" and described["error_code"] == ErrorCode.NONE
        offsets_topic = caller.connections.call_any(wire.ACTION_METADATA, {"topics": ["__consumer_offsets"]})
        assert [len(p["replicas"]) for p in offsets_topic["topics"][0]["partitions"]] == [1]  # min(3, 1 broker)
    finally:
        caller.close()
