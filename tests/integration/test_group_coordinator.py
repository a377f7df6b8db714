"""The group coordinator against broker processes: one 3-broker cluster for the module, small timeouts.

The actions are driven by a raw client (tests/fixtures/group_calls.py: Flight actions through
``protocol.connection``), the way a group consumer drives them, so that what is checked is the broker's
side: find_coordinator creating ``__consumer_offsets``; join/sync/heartbeat generations; commit and fetch
round-tripping metadata and leader epoch exactly; a SIGKILL of the coordinator's broker mid-commit and
mid-rebalance, after which the new leader of that offsets partition serves every acknowledged commit and
the group re-forms; bad input answered with typed errors while the broker keeps serving. Retention has
its own module (test_group_coordinator_retention.py): it needs a short retention the tests here must not.
"""

from __future__ import annotations

import threading
import uuid

import pyarrow as pa
import pytest

from ads_spark.client import Producer
from ads_spark.cluster import LocalCluster
from ads_spark.errors import AdsError, ErrorCode, InvalidGroupIdError, InvalidRequestError
from ads_spark.protocol import wire
from tests.fixtures.cluster import start_cluster, stop_cluster
from tests.fixtures.group_calls import (
    GroupCaller, commit, fetched, form_group, join, join_body, sync_all,
)
from tests.fixtures.waiting import wait_until

OFFSETS_TOPIC = "__consumer_offsets"
# A 6 s ZooKeeper session as the other suites: with 4 s, a broker of a loaded make test run (load ~7) once lost
# its session mid-test, the coordinator moved and form_group saw two generations.
OVERRIDES = {"offsets.topic.num.partitions": "3", "offsets.topic.replication.factor": "3",
             "group.min.session.timeout.ms": "500", "group.initial.rebalance.delay.ms": "0",
             "offset.metadata.max.bytes": "64", "offsets.commit.timeout.ms": "3000",
             "zookeeper.session.timeout.ms": "6000", "replica.lag.time.max.ms": "3000",
             "controlled.shutdown.enable": "false"}


@pytest.fixture(scope="module")
def group_cluster(tmp_path_factory):
    cluster = start_cluster(tmp_path_factory, 3, [f"{key}={value}" for key, value in OVERRIDES.items()])
    yield cluster
    stop_cluster(cluster)


@pytest.fixture
def caller(group_cluster):
    client = GroupCaller(group_cluster.bootstrap_servers)
    yield client
    client.close()


# ---- tests ------------------------------------------------------------------------------------------------


def test_find_coordinator_creates_the_offsets_topic_that_clients_may_not_produce_to(group_cluster, caller):
    node, _, _ = caller.find(f"g-{uuid.uuid4().hex[:8]}")
    assert node in group_cluster.broker_ids()
    described = wait_until(lambda: next((t for t in caller.connections.call_any(
        wire.ACTION_METADATA, {"topics": [OFFSETS_TOPIC], "include_config": True})["topics"]
        if t.get("error_code") == 0), None), 30, what="the offsets topic in metadata")
    assert described["is_internal"] is True
    assert len(described["partitions"]) == 3
    assert all(len(p["replicas"]) == 3 for p in described["partitions"])
    assert described["config"] == {"cleanup.policy": "compact", "min.insync.replicas": "2", "segment.bytes": "104857600"}
    producer = Producer({"bootstrap.servers": group_cluster.bootstrap_servers, "retries": 0})
    try:
        batch = pa.RecordBatch.from_pylist([{"key": b"k", "value": b"v"}])
        with pytest.raises(AdsError, match=f"topic '{OFFSETS_TOPIC}' is internal") as refused:
            producer.produce_arrow(OFFSETS_TOPIC, batch, partition=0).result(timeout=30)
        assert refused.value.code == ErrorCode.INVALID_TOPIC_EXCEPTION
    finally:
        producer.close()


def test_join_sync_heartbeat_follow_generations(caller):
    group_id = f"g-{uuid.uuid4().hex[:8]}"
    members = form_group(caller, group_id, 2)
    generation = members[0]["generation_id"]
    for member in members:
        beat = caller.call(group_id, wire.ACTION_HEARTBEAT, {"group_id": group_id, "generation_id": generation,
                                                             "member_id": member["member_id"]})
        assert beat["error_code"] == 0, beat
    future = caller.call(group_id, wire.ACTION_HEARTBEAT, {"group_id": group_id, "generation_id": generation + 5,
                                                           "member_id": members[0]["member_id"]})
    assert future["error_code"] == ErrorCode.ILLEGAL_GENERATION
    unknown = caller.call(group_id, wire.ACTION_HEARTBEAT, {"group_id": group_id, "generation_id": generation,
                                                            "member_id": "nobody"})
    assert unknown["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    described = caller.call(group_id, wire.ACTION_DESCRIBE_GROUPS, {"groups": [group_id]})["groups"][0]
    assert described["state"] == "Stable" and described["protocol_name"] == "range"
    assert sorted(m["member_id"] for m in described["members"]) == sorted(m["member_id"] for m in members)
    left = caller.call(group_id, wire.ACTION_LEAVE_GROUP, {"group_id": group_id, "members": [
        {"member_id": members[1]["member_id"]}]})
    assert left["error_code"] == 0 and left["members"][0]["error_code"] == 0, left
    # The one left learns of the rebalance and forms the next generation alone.
    beat = caller.call(group_id, wire.ACTION_HEARTBEAT, {"group_id": group_id, "generation_id": generation,
                                                         "member_id": members[0]["member_id"]})
    assert beat["error_code"] == ErrorCode.REBALANCE_IN_PROGRESS
    again = sync_all(caller, group_id, [join(caller, group_id, members[0]["member_id"])])
    assert again[0]["generation_id"] > generation


def test_commit_and_fetch_round_trip_metadata_and_leader_epoch(caller):
    group_id = f"g-{uuid.uuid4().hex[:8]}"
    offsets = {("orders", 0): (42, 7, "ünïcode ✓ metadata"), ("orders", 3): (0, -1, ""),
               ("other", 1): (2**40, 123456, "x" * 64)}
    answer = commit(caller, group_id, offsets)
    assert answer["error_code"] == 0 and all(p["error_code"] == 0 for p in answer["partitions"]), answer
    assert fetched(caller, group_id) == offsets
    # offset.metadata.max.bytes=64 (UTF-8 bytes): that partition alone is refused, the other one is written.
    mixed = commit(caller, group_id, {("orders", 0): (43, 8, "é" * 33), ("orders", 3): (5, 1, "ok")})
    codes = {(p["topic"], p["partition"]): p["error_code"] for p in mixed["partitions"]}
    assert codes == {("orders", 0): ErrorCode.OFFSET_METADATA_TOO_LARGE, ("orders", 3): 0}
    assert fetched(caller, group_id) == {**offsets, ("orders", 3): (5, 1, "ok")}
    named = caller.call(group_id, wire.ACTION_OFFSET_FETCH, {"group_id": group_id, "partitions": [
        {"topic": "orders", "partition": 0}, {"topic": "orders", "partition": 9}]})
    assert [(p["partition"], p["offset"], p["leader_epoch"], p["metadata"]) for p in named["partitions"]] == [
        (0, 42, 7, "ünïcode ✓ metadata"), (9, -1, -1, "")]


def test_bad_input_gets_typed_errors_and_the_broker_keeps_serving(caller):
    group_id = f"g-{uuid.uuid4().hex[:8]}"
    with pytest.raises(InvalidRequestError, match="unknown field 'surprise'"):
        caller.once(group_id, wire.ACTION_HEARTBEAT, {"group_id": group_id, "generation_id": 1, "member_id": "m",
                                                      "surprise": True})
    with pytest.raises(InvalidGroupIdError, match="at most 255 characters"):
        caller.once(group_id, wire.ACTION_JOIN_GROUP, join_body("g" * 300, ""))
    with pytest.raises(InvalidGroupIdError):
        caller.once(group_id, wire.ACTION_FIND_COORDINATOR, {"key": ""})
    with pytest.raises(InvalidRequestError, match="base64"):
        caller.once(group_id, wire.ACTION_JOIN_GROUP, {**join_body(group_id, ""), "protocols": [
            {"name": "range", "metadata_b64": "not base64!"}]})
    # A generation from the future: ILLEGAL_GENERATION, for a commit and a heartbeat, nothing written.
    future = commit(caller, group_id, {("t", 0): (10, 1, "")}, generation_id=99, member_id="m")
    assert future["error_code"] == ErrorCode.ILLEGAL_GENERATION, future
    assert fetched(caller, group_id) == {}
    members = form_group(caller, group_id, 1)
    ahead = commit(caller, group_id, {("t", 0): (10, 1, "")}, generation_id=members[0]["generation_id"] + 1,
                   member_id=members[0]["member_id"])
    assert ahead["error_code"] == ErrorCode.ILLEGAL_GENERATION, ahead
    standalone = commit(caller, group_id, {("t", 0): (10, 1, "")})  # a group with members: not standalone
    assert standalone["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID, standalone
    ok = commit(caller, group_id, {("t", 0): (11, 1, "m")}, members[0]["generation_id"], members[0]["member_id"])
    assert ok["error_code"] == 0 and fetched(caller, group_id) == {("t", 0): (11, 1, "m")}


def _restart(cluster: LocalCluster, broker_id: int) -> None:
    cluster.start_broker(broker_id)


def test_coordinator_killed_mid_commit_loses_no_acknowledged_commit(group_cluster, caller):
    group_id = f"g-{uuid.uuid4().hex[:8]}"
    coordinator, _, _ = caller.find(group_id)
    acknowledged: list[int] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def committer() -> None:
        offset = 0
        try:
            while not stop.is_set():
                offset += 1
                answer = commit(caller, group_id, {("t", 0): (offset, 3, f"m{offset}"), ("t", 1): (offset, 3, "")})
                if all(p["error_code"] == 0 for p in answer["partitions"]):
                    acknowledged.append(offset)
        except BaseException as exc:  # the assertion below shows it
            errors.append(exc)

    thread = threading.Thread(target=committer)
    thread.start()
    try:
        wait_until(lambda: len(acknowledged) >= 20, 60, what="commits before the kill")
        group_cluster.kill_broker(coordinator)
        before_kill = len(acknowledged)
        wait_until(lambda: len(acknowledged) >= before_kill + 20, 90, what="commits on the new coordinator")
    finally:
        stop.set()
        thread.join(120)
    assert not errors, errors
    try:
        wait_until(lambda: caller.find(group_id)[0] != coordinator, 60, what="the offsets partition's new leader")
        last = acknowledged[-1]
        committed = fetched(caller, group_id)
        # The last acknowledged commit, or one attempted after it (appended, its answer lost in the failover).
        assert committed[("t", 0)][0] >= last and committed[("t", 0)] == (committed[("t", 0)][0], 3,
                                                                           f"m{committed[('t', 0)][0]}")
        assert committed[("t", 1)][0] == committed[("t", 0)][0]
    finally:
        _restart(group_cluster, coordinator)


def test_coordinator_killed_mid_rebalance_the_group_reforms_on_the_new_one(group_cluster, caller):
    group_id = f"g-{uuid.uuid4().hex[:8]}"
    members = form_group(caller, group_id, 2)
    generation = members[0]["generation_id"]
    leader = next(m for m in members if m["member_id"] == m["leader_id"])
    assert commit(caller, group_id, {("t", 0): (77, 2, "kept")}, generation, leader["member_id"])["error_code"] == 0
    coordinator, _, _ = caller.find(group_id)
    # A third member starts a rebalance; the first two have not rejoined when the coordinator dies.
    newcomer = caller.call(group_id, wire.ACTION_JOIN_GROUP, join_body(group_id, ""))
    assert newcomer["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
    pending = threading.Thread(target=lambda: _join_quietly(caller, group_id, newcomer["member_id"]))
    pending.start()
    try:
        wait_until(lambda: caller.once(group_id, wire.ACTION_HEARTBEAT, {
            "group_id": group_id, "generation_id": generation, "member_id": members[0]["member_id"]}
        )["error_code"] == ErrorCode.REBALANCE_IN_PROGRESS, 30, what="the rebalance to start")
        group_cluster.kill_broker(coordinator)
        pending.join(60)
        # The new coordinator loaded the last stored generation: its members rejoin with their ids.
        wait_until(lambda: caller.find(group_id)[0] != coordinator, 60, what="the offsets partition's new leader")
        assert fetched(caller, group_id)[("t", 0)] == (77, 2, "kept")
        # The leader rejoins first, which starts a rebalance of the loaded generation; the follower learns of
        # it by its heartbeat, then rejoins. (A follower rejoining first into the loaded STABLE generation
        # gets that generation back, as from Kafka's coordinator; a client would then learn of the leader's
        # rebalance by a heartbeat, as here. Rejoining both at once made that order a coin toss.)
        follower = next(m for m in members if m["member_id"] != leader["member_id"])
        rejoined: dict[str, dict] = {}
        leader_join = threading.Thread(target=lambda: rejoined.__setitem__(
            "leader", join(caller, group_id, leader["member_id"])))
        leader_join.start()
        wait_until(lambda: caller.call(group_id, wire.ACTION_HEARTBEAT, {
            "group_id": group_id, "generation_id": generation, "member_id": follower["member_id"]}
        )["error_code"] == ErrorCode.REBALANCE_IN_PROGRESS, 30, what="the loaded generation's rebalance")
        rejoined["follower"] = join(caller, group_id, follower["member_id"])
        leader_join.join(60)
        reformed = sync_all(caller, group_id, [rejoined["leader"], rejoined["follower"]])
        assert reformed[0]["generation_id"] > generation
        assert {m["member_id"] for m in reformed} == {m["member_id"] for m in members}
    finally:
        _restart(group_cluster, coordinator)


def _join_quietly(caller: GroupCaller, group_id: str, member_id: str) -> None:
    try:
        caller.once(group_id, wire.ACTION_JOIN_GROUP, join_body(group_id, member_id))
    except AdsError:
        pass  # its coordinator died under it: what the test is about
