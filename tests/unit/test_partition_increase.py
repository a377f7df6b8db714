"""Partition increase (``ads topics alter --partitions``): the pure placement and the controller core's step.

The controller core must pick up the partitions added to a topic it already
knows (ZooKeeper announces them with ``TopicsChanged.grown``): read the topic
again, take only the new partitions' views (the existing ones may be ahead of
what was read), elect and send those, and push metadata listing every partition.
"""

from __future__ import annotations

import pytest

from ads_spark.broker.controller.zk_reads import topic_settings
from ads_spark.config import BrokerConfig
from ads_spark.errors import InvalidPartitionsError
from ads_spark.replication.assignment import assign_added_partitions, assign_replicas
from ads_spark.replication.controller import step
from ads_spark.replication.controller_events import (
    REQUESTS, Elected, PartitionStatesWritten, ReadTopics, SendLeaderAndIsr, SendUpdateMetadata, Snapshot,
    TopicsChanged, TopicsRead, WritePartitionStates,
)
from ads_spark.replication.controller_state import BrokerRegistration, TopicInfo, initial_state
from ads_spark.replication.state import LeaderAndIsr

DEFAULTS = BrokerConfig({"broker.id": 1, "listeners": "127.0.0.1:9092", "zookeeper.connect": "zk:2181",
                         "log.dirs": "/nonexistent"}).topic_defaults()
RACKS = {1: "a", 2: "b", 3: "c", 4: "a", 5: "b", 6: "c"}


# ---- placement ----------------------------------------------------------------------------------------------


def test_added_partitions_continue_the_rack_aware_walk_and_leave_the_existing_ones():
    existing = assign_replicas(4, 3, RACKS, start_index=2, replica_shift=1)
    added = assign_added_partitions(existing, 10, RACKS)
    assert sorted(added) == list(range(4, 10))  # only the new partitions: the caller never rewrites the old
    for replicas in added.values():
        assert len(replicas) == 3 and len({RACKS[b] for b in replicas}) == 3  # one replica per rack
    # The preferred leaders carry on from partition 0's: over all 10 partitions they spread as a new topic's.
    leaders = [existing[p][0] for p in range(4)] + [added[p][0] for p in range(4, 10)]
    assert sorted(leaders.count(b) for b in RACKS) == [1, 1, 2, 2, 2, 2]
    assert [added[p][0] for p in range(4, 10)] == [assign_replicas(10, 3, RACKS, start_index=2,
                                                                   replica_shift=2)[p][0] for p in range(4, 10)]


@pytest.mark.parametrize("total", [3, 2, 1])
def test_same_or_fewer_partitions_are_refused(total):
    with pytest.raises(InvalidPartitionsError, match="can only grow"):
        assign_added_partitions({0: [1, 2], 1: [2, 3], 2: [3, 1]}, total, [1, 2, 3])


# ---- the controller core ------------------------------------------------------------------------------------


def _topic(assignment):
    return TopicInfo("id-t", {p: tuple(r) for p, r in assignment.items()}, {}, {},
                     settings=topic_settings(DEFAULTS, {}))


def _lai(leader, isr, leader_epoch=0, partition_epoch=0):
    return LeaderAndIsr(leader, leader_epoch, tuple(isr), (), partition_epoch, 1, ())


def _run(state, event, answer):
    """Step ``event`` and every answer ``answer(effect)`` gives its requests; all effects in order."""
    effects, queue = [], [event]
    while queue:
        state, out = step(state, queue.pop())
        effects += out
        queue += [answer(e) for e in out if isinstance(e, REQUESTS)]
    assert state.awaiting is None and not state.pending
    return state, effects


def _written(effect):
    assert isinstance(effect, WritePartitionStates), effect
    return PartitionStatesWritten(tuple(d.expected_partition_epoch + 1 for d in effect.decisions))


def test_partitions_added_to_a_known_topic_are_read_led_and_sent_and_the_others_left_alone():
    live = {b: BrokerRegistration(f"h{b}", 9000 + b, None, 10 + b, None, True, f"inc-{b}") for b in (1, 2, 3)}
    before = {0: (1, 2), 1: (2, 3)}
    states = {("t", 0): _lai(1, (1, 2)), ("t", 1): _lai(2, (2, 3))}
    state, _ = _run(initial_state(1), Elected(5, 7, Snapshot(live, {"t": _topic(before)}, states, {}, None)),
                    _written)
    # The controller's view of t-0 is ahead of what the read below returns (its own write landed since).
    ahead = state.views[("t", 0)].state
    grown = _topic({**before, 2: (3, 1), 3: (4, 2)})  # broker 4 is not alive: partition 3 fails over to 2
    read = TopicsRead({"t": grown}, {("t", 0): _lai(2, (2,), leader_epoch=9), ("t", 1): states[("t", 1)],
                                     ("t", 2): _lai(3, (3, 1)), ("t", 3): _lai(4, (4, 2))})

    state, effects = step(state, TopicsChanged(("t",)))  # no partition change announced: nothing is read
    assert not any(isinstance(e, ReadTopics) for e in effects)

    state, effects = step(state, TopicsChanged(("t",), grown=("t",)))
    assert effects == [ReadTopics(("t",))]
    state, effects = _run(state, read, _written)
    assert state.views[("t", 0)].state == ahead and state.topics["t"].assignment[0] == (1, 2)
    assert state.topics["t"].assignment[2] == (3, 1) and state.views[("t", 3)].state.leader == 2
    writes = [(d.topic, d.partition) for e in effects if isinstance(e, WritePartitionStates) for d in e.decisions]
    assert writes == [("t", 3)]  # only the new partition without a live leader is elected
    sent = {(p["topic"], p["partition"]) for e in effects if isinstance(e, SendLeaderAndIsr)
            for p in e.body["partitions"]}
    assert sent == {("t", 2), ("t", 3)}
    metadata = [e.body for e in effects if isinstance(e, SendUpdateMetadata)][-1]
    assert [p["partition"] for p in metadata["partitions"]] == [0, 1, 2, 3]
