"""The controller core stepped through its duties against a dict-based fake ZooKeeper.

``run`` is a tiny shell: it steps an event, answers each request effect from
``FakeZk`` (in the core's own terms: LeaderAndIsr, TopicInfo) and steps the
answer, and applies the fire-and-forget ZooKeeper effects to the fake. Topic
settings come from the broker shell's ``topic_settings`` (over a real broker
config's topic defaults), as the broker passes them.
"""

import copy
from dataclasses import replace

import pytest

from ads_spark.broker.controller.zk_reads import topic_settings
from ads_spark.config import BrokerConfig
from ads_spark.errors import ErrorCode, InvariantViolation
from ads_spark.replication.controller import step
from ads_spark.replication.controller_events import (
    REQUESTS, AskLogEnds, AssignmentWritten, BrokersChanged, ChannelOverflowed, ClearReassignment, CloseChannels,
    ControlledShutdownRequested, ControllerFailed, DeleteTopicZnodes, Elected, ElectLeadersRequested, IsrChanged, Log,
    LogEndsAnswered, LostLeadership, PartitionStatesWritten, ReadTopics, RebalanceTick, ReassignmentRequested,
    RecoveryTick,
    RecordUncleanApplied, ReplyToRequest, Resign, SendLeaderAndIsr, SendStopReplica, SendUpdateMetadata, Snapshot,
    TopicConfigsChanged, TopicDeletionsRequested, TopicsChanged, TopicsRead, WriteAssignment, WritePartitionStates,
    WriteRejected, log_ends_found,
)
from ads_spark.replication.controller_state import (
    PASS_RETRIES_MAX, BrokerRegistration, ControllerConfig, TopicInfo, TopicSettings, initial_state, live_from_dicts,
)
from ads_spark.replication.state import NO_LEADER, LeaderAndIsr


BROKER_CONFIG = {"broker.id": 1, "listeners": "127.0.0.1:9092", "zookeeper.connect": "zk:2181",
                 "log.dirs": "/nonexistent"}
DEFAULTS = BrokerConfig(BROKER_CONFIG).topic_defaults()


def topic(topic_id, assign, observers=None, config=None):
    config = dict(config or {})
    return TopicInfo(topic_id, {p: tuple(r) for p, r in assign.items()}, dict(observers or {}), config,
                     settings=topic_settings(DEFAULTS, config))


def configs_changed(configs):
    return TopicConfigsChanged(configs, {name: topic_settings(DEFAULTS, config) for name, config in configs.items()})


def reg(b, epoch, clean=True, incarnation=None):
    return BrokerRegistration(f"h{b}", 9000 + b, None, epoch, None, clean, incarnation or f"inc-{b}")


def lai(leader, isr, leader_epoch=0, version=0, elr=(), epochs=()):
    return LeaderAndIsr(leader, leader_epoch, tuple(isr), tuple(elr), version, 1, tuple(epochs))


class FakeZk:
    """ZooKeeper as dicts. ``races``: key -> the state another writer lands just before our next write."""

    def __init__(self, assign, brokers=(1, 2, 3), configs=None, states=None):
        self.live = {b: reg(b, 10 + b) for b in brokers}
        self.topics = {name: topic(f"id-{name}", parts, config=(configs or {}).get(name))
                       for name, parts in assign.items()}
        self.states = {(name, p): lai(r[0], r) for name, parts in assign.items() for p, r in parts.items()}
        self.states.update(states or {})
        self.unclean_applied, self.reassignment, self.log_ends, self.races = {}, None, {}, {}
        self.assignments = []

    def snapshot(self):
        applied = {b: self.unclean_applied.get(b) for b, r in self.live.items() if not r.clean_shutdown}
        return Snapshot(dict(self.live), dict(self.topics), dict(self.states), applied, self.reassignment)

    def changed_brokers(self):
        applied = {b: self.unclean_applied.get(b) for b, r in self.live.items() if not r.clean_shutdown}
        return BrokersChanged(dict(self.live), applied)

    def answer(self, effect):
        if isinstance(effect, WritePartitionStates):
            return PartitionStatesWritten(tuple(self.write(d) for d in effect.decisions))
        if isinstance(effect, AskLogEnds):
            return LogEndsAnswered(log_ends_found({b: [
                {"topic": p["topic"], "partition": p["partition"], "last_epoch": end[0], "log_end_offset": end[1]}
                for p in body["partitions"] for end in [self.log_ends.get((p["topic"], p["partition"]), {}).get(b)]
                if end is not None] for b, body in effect.asks}))
        if isinstance(effect, ReadTopics):
            return TopicsRead({n: self.topics.get(n) for n in effect.names},
                              {k: v for k, v in self.states.items() if k[0] in effect.names})
        assert isinstance(effect, WriteAssignment)
        self.assignments.append(effect)
        return AssignmentWritten()

    def write(self, decision):
        key = (decision.topic, decision.partition)
        if key in self.races:
            self.states[key] = self.races.pop(key)
        current = self.states.get(key)
        if current is None or current.partition_epoch != decision.expected_partition_epoch:
            return WriteRejected(current)
        self.states[key] = replace(decision.new_state, partition_epoch=decision.expected_partition_epoch + 1)
        return decision.expected_partition_epoch + 1

    def apply(self, effect):
        if isinstance(effect, RecordUncleanApplied):
            self.unclean_applied[effect.broker_id] = effect.incarnation
        elif isinstance(effect, ClearReassignment):
            self.reassignment = None
        elif isinstance(effect, DeleteTopicZnodes):
            self.topics.pop(effect.name, None)
            self.states = {k: v for k, v in self.states.items() if k[0] != effect.name}


def run(state, event, zk):
    """Step ``event`` and every answer its requests need; all effects in order."""
    effects, queue = [], [event]
    while queue:
        state, out = step(state, queue.pop())
        effects += out
        for effect in out:
            if isinstance(effect, REQUESTS):
                queue.append(zk.answer(effect))
            else:
                zk.apply(effect)
    assert state.awaiting is None and not state.pending
    return state, effects


def elected(zk, config=ControllerConfig()):
    return run(initial_state(1, config), Elected(5, 7, zk.snapshot()), zk)


def of(effects, kind):
    return [e for e in effects if isinstance(e, kind)]


def lais(effects):
    """broker -> the partitions (key -> body entry) of its first leader-and-isr."""
    out = {}
    for e in of(effects, SendLeaderAndIsr):
        out.setdefault(e.broker_id, {(p["topic"], p["partition"]): p for p in e.body["partitions"]})
    return out


def reply(effects):
    (only,) = of(effects, ReplyToRequest)
    return only.response


def test_election_reloads_reelects_an_offline_leader_and_writes_restarted_members_out():
    zk = FakeZk({"t": {0: (4, 1, 2), 1: (1, 2, 3)}},
                states={("t", 1): lai(1, (1, 2, 3), epochs=((2, 5), (3, 13)))})  # broker 2 re-registered since
    state, effects = elected(zk)
    assert effects[0] == CloseChannels(None) and state.active and (state.epoch, state.epoch_version) == (5, 7)
    (write,) = of(effects, WritePartitionStates)
    assert (write.controller_epoch, write.controller_epoch_version) == (5, 7)
    assert zk.states[("t", 0)].leader == 1 and zk.states[("t", 0)].leader_epoch == 1
    assert zk.states[("t", 0)].isr == (1, 2)
    assert zk.states[("t", 1)].isr == (1, 3) and zk.states[("t", 1)].isr_broker_epochs == ((3, 13),)
    assert state.views[("t", 1)].state == zk.states[("t", 1)] and state.elections == 2
    first = lais(effects)
    assert set(first[3]) == {("t", 1)} and set(first[1]) == set(first[2]) == {("t", 0), ("t", 1)}
    assert [e.broker_id for e in of(effects, SendUpdateMetadata)] == [1, 2, 3]
    body = of(effects, SendLeaderAndIsr)[0].body
    assert {"controller_id", "controller_epoch", "partitions", "brokers", "broker_epoch"} <= set(body)
    assert body["brokers"][0] == {"id": 1, "broker_epoch": 11, "host": "h1", "metrics_port": None, "port": 9001,
                                  "rack": None}


def test_broker_loss_moves_leadership_shrinks_isrs_and_tells_the_live_brokers():
    zk = FakeZk({"t": {0: (1, 2, 3), 1: (2, 3, 1)}})
    state, _ = elected(zk)
    del zk.live[1]
    state, effects = run(state, zk.changed_brokers(), zk)
    assert effects[1] == CloseChannels(frozenset({1}))
    assert zk.states[("t", 0)].leader == 2 and zk.states[("t", 0)].isr == (2, 3)
    assert zk.states[("t", 1)].leader == 2 and zk.states[("t", 1)].isr == (2, 3)
    assert zk.states[("t", 1)].leader_epoch == 0  # only the ISR shrank
    sent = of(effects, SendLeaderAndIsr)
    assert {(e.broker_id, e.body["broker_epoch"]) for e in sent} == {(2, 12), (3, 13)}
    assert sent[0].body["partitions"][0]["offline_replicas"] == [1]
    assert [e.broker_id for e in of(effects, SendUpdateMetadata)] == [2, 3]


def test_a_returning_broker_gets_its_partitions_and_leads_what_waited_for_it():
    zk = FakeZk({"t": {0: (2,), 1: (1, 2)}})
    state, _ = elected(zk)
    gone = zk.live.pop(2)
    state, _ = run(state, zk.changed_brokers(), zk)
    assert zk.states[("t", 0)].leader == NO_LEADER and zk.states[("t", 0)].elr == (2,)
    zk.live[2] = replace(gone, broker_epoch=99)
    state, effects = run(state, zk.changed_brokers(), zk)
    assert zk.states[("t", 0)].leader == 2 and "from ELR" in of(effects, WritePartitionStates)[0].decisions[0].reason
    arrivals = [e for e in of(effects, SendLeaderAndIsr) if {p["partition"] for p in e.body["partitions"]} == {0, 1}]
    assert [(e.broker_id, e.body["broker_epoch"]) for e in arrivals] == [(2, 99)]  # only to the arrived broker
    assert state.live[2].broker_epoch == 99


def test_an_isr_change_naming_an_old_incarnation_is_written_out_and_that_member_never_elected():
    zk = FakeZk({"t": {0: (1, 2, 3), 1: (2, 1, 3)}}, states={("t", 1): lai(1, (1, 2, 3))})
    state, _ = elected(zk)
    late = {("t", 0): lai(1, (1, 2, 3), version=1, epochs=((2, 5), (3, 13))),  # broker 2 is registered at 12
            ("t", 1): lai(1, (1, 2, 3), version=1, epochs=((2, 5),))}
    zk.states.update(late)
    zk.races[("t", 1)] = lai(1, (1, 2, 3), version=2, epochs=((2, 5),))
    state, effects = run(state, IsrChanged(tuple(late), late), zk)
    assert zk.states[("t", 0)].isr == (1, 3) and zk.states[("t", 0)].isr_broker_epochs == ((3, 13),)
    # Its write-out lost a race: decided again at once from the state that won (as Kafka retries).
    assert state.views[("t", 1)].state.isr == (1, 3) and zk.states[("t", 1)].isr == (1, 3)
    state, effects = run(state, ElectLeadersRequested("r", "preferred", (("t", 1),)), zk)
    assert reply(effects)["partitions"][0]["error_code"] == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE


def test_a_rejected_conditional_write_takes_the_current_state_and_sends_nothing_for_it():
    zk = FakeZk({"t": {0: (1, 2, 3), 1: (1, 2, 3)}})
    state, _ = elected(zk)
    raced = lai(1, (1, 2), version=1)  # the leader's own ISR write landed first
    zk.races[("t", 0)] = raced
    del zk.live[3]
    state, effects = run(state, zk.changed_brokers(), zk)
    assert state.views[("t", 0)].state == raced and zk.states[("t", 0)] == raced
    assert state.views[("t", 1)].state.isr == (1, 2) and state.elections == 1
    for e in of(effects, SendLeaderAndIsr)[:2]:
        assert [p["partition"] for p in e.body["partitions"]] == [1]


def test_unclean_recovery_asks_the_live_replicas_then_elects_the_most_complete():
    zk = FakeZk({"t": {0: (1, 2, 3, 4)}}, brokers=(1, 2, 3, 4), states={("t", 0): lai(1, (1,))},
                configs={"t": {"unclean.leader.election.enable": "true"}})
    state, _ = elected(zk)
    zk.log_ends[("t", 0)] = {2: (3, 50), 3: (3, 80)}  # broker 4 does not answer
    del zk.live[1]
    state, effects = run(state, zk.changed_brokers(), zk)
    (ask,) = of(effects, AskLogEnds)
    assert [b for b, _ in ask.asks] == [2, 3, 4]
    assert ask.asks[0][1] == {"controller_epoch": 5, "partitions": [
        {"topic": "t", "partition": 0, "topic_id": "id-t", "config": {"unclean.leader.election.enable": "true"}}]}
    assert zk.states[("t", 0)].leader == 3 and zk.states[("t", 0)].isr == (3,)
    assert state.unclean_elections == 1
    assert any("UNCLEAN" in e.message and e.level == "warning" for e in effects if hasattr(e, "message"))


@pytest.mark.parametrize("race", [False, True])
def test_an_unclean_start_is_recorded_only_when_all_its_decisions_were_written(race):
    """A decision that lost a race to a leader's ISR write is decided again at once, from the state that won;
    the unclean start is recorded after that one is written too (simulation seed 1030387: left for later,
    the broker stayed in an ELR, electable with a log short of the HW, until the next controller)."""
    zk = FakeZk({"t": {0: (1, 2, 3), 1: (1, 2, 3)}})
    state, _ = elected(zk)
    zk.live[2] = reg(2, 50, clean=False, incarnation="new")
    if race:
        zk.races[("t", 1)] = lai(1, (1, 2, 3), version=1)
    state, effects = run(state, zk.changed_brokers(), zk)
    writes = of(effects, WritePartitionStates)
    assert [len(w.decisions) for w in writes] == ([2, 1] if race else [2])
    assert of(effects, RecordUncleanApplied) == [RecordUncleanApplied(2, "new")]
    assert effects.index(of(effects, RecordUncleanApplied)[0]) > effects.index(writes[-1])  # after the retry
    assert zk.states[("t", 0)].isr == (1, 3) and zk.states[("t", 1)].isr == (1, 3)
    # The next registration of the same process (an expired session) is not unclean again once recorded.
    zk.live[2] = reg(2, 60, clean=False, incarnation="new")
    _, again = run(state, zk.changed_brokers(), zk)
    assert of(again, RecordUncleanApplied) == []


class AlwaysRacedZk(FakeZk):
    """Every write to ``raced`` loses to a leader's ISR write landing just before it."""

    def __init__(self, assign, raced):
        super().__init__(assign)
        self.raced = raced

    def write(self, decision):
        key = (decision.topic, decision.partition)
        if key == self.raced:
            current = self.states[key]
            self.states[key] = replace(current, partition_epoch=current.partition_epoch + 1)
        return super().write(decision)


def test_a_pass_that_keeps_losing_races_is_rerun_a_bounded_number_of_times():
    zk = AlwaysRacedZk({"t": {0: (1, 2, 3)}}, raced=("t", 0))
    state, _ = elected(zk)
    del zk.live[2]
    state, effects = run(state, zk.changed_brokers(), zk)
    assert len(of(effects, WritePartitionStates)) == PASS_RETRIES_MAX + 1
    assert any(e.level == "warning" and "lost" in e.message for e in of(effects, Log))
    assert state.awaiting is None and not state.pending


def test_controlled_shutdown_moves_leadership_or_refuses_below_min_isr():
    zk = FakeZk({"t": {0: (1, 2, 3), 1: (2, 1)}}, configs={"t": {"min.insync.replicas": "2"}})
    state, _ = elected(zk)
    state, effects = run(state, ControlledShutdownRequested("r1", 1, 11), zk)
    assert reply(effects) == {"error_code": 0, "partitions_remaining": [], "refused": [{"topic": "t", "partition": 1}]}
    assert zk.states[("t", 0)].leader == 2 and zk.states[("t", 0)].isr == (2, 3)
    assert of(effects, ReplyToRequest)[0] is effects[-1]  # after the writes and the pushes
    state, effects = run(state, ControlledShutdownRequested("r2", 2, 11), zk)
    assert reply(effects)["error_code"] == ErrorCode.STALE_BROKER_EPOCH and not of(effects, WritePartitionStates)
    state, effects = run(state, ControlledShutdownRequested("r3", 2, 12, force=True), zk)
    assert reply(effects)["partitions_remaining"] == [] and zk.states[("t", 1)].leader == 1


def test_elect_leaders_preferred_results():
    zk = FakeZk({"t": {0: (1, 2), 1: (2, 1), 2: (3, 1)}}, states={("t", 0): lai(2, (1, 2)), ("t", 2): lai(1, (1,))})
    state, _ = elected(zk)
    keys = (("t", 0), ("t", 1), ("t", 2), ("nope", 0))
    state, effects = run(state, ElectLeadersRequested("r", "preferred", keys), zk)
    codes = [(p["partition"], p["error_code"]) for p in reply(effects)["partitions"]]
    assert codes == [(0, 0), (1, ErrorCode.ELECTION_NOT_NEEDED), (2, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE),
                     (0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    assert zk.states[("t", 0)].leader == 1 and of(effects, SendUpdateMetadata)


def test_elect_leaders_unclean_results_and_not_controller():
    zk = FakeZk({"t": {0: (1, 2), 1: (2, 3), 2: (1, 4)}}, states={("t", 0): lai(1, (1,)), ("t", 2): lai(1, (1,))})
    state, _ = elected(zk)
    del zk.live[1]
    state, _ = run(state, zk.changed_brokers(), zk)
    assert zk.states[("t", 0)].leader == NO_LEADER  # unclean election is off by default
    zk.log_ends[("t", 0)] = {2: (0, 7)}
    state, effects = run(state, ElectLeadersRequested("r", "unclean", None), zk)
    codes = [(p["partition"], p["error_code"]) for p in reply(effects)["partitions"]]
    assert codes == [(0, 0), (1, ErrorCode.ELECTION_NOT_NEEDED), (2, ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE)]
    assert of(effects, AskLogEnds) and zk.states[("t", 0)].leader == 2 and state.unclean_elections == 1
    idle = initial_state(1)
    _, effects = step(idle, ElectLeadersRequested("r", "preferred", None))
    assert reply(effects) == {"error_code": ErrorCode.NOT_CONTROLLER, "message": "broker 1 is not the controller"}


def test_a_new_topic_is_read_then_led_and_announced():
    zk = FakeZk({"t": {0: (1, 2)}})
    state, _ = elected(zk)
    zk.topics["u"] = topic("id-u", {0: (2, 3), 1: (4, 1)}, {1: (3,)})
    zk.states.update({("u", 0): lai(2, (2, 3)), ("u", 1): lai(4, (4, 1))})  # broker 4 is not alive
    state, effects = step(state, TopicsChanged(("t", "u")))
    assert effects == [ReadTopics(("u",))] and state.awaiting is not None
    state, effects = run(state, zk.answer(effects[0]), zk)
    assert zk.states[("u", 1)].leader == 1 and state.views[("u", 1)].observers == (3,)
    to_3 = {(p["topic"], p["partition"]) for e in of(effects, SendLeaderAndIsr) if e.broker_id == 3
            for p in e.body["partitions"]}
    assert to_3 == {("u", 0), ("u", 1)}  # an observer is sent the partitions it observes too
    metadata = of(effects, SendUpdateMetadata)[0].body
    assert [(p["topic"], p["partition"]) for p in metadata["partitions"]] == [("t", 0), ("u", 0), ("u", 1)]


def test_observers_are_sent_leader_and_isr_stopped_on_deletion_and_never_elected():
    """An observer opens the partition from the leader-and-isr it is sent (at election, at each leader change,
    when it comes back), which names it an observer; it never leads, even as the only live copy."""
    zk = FakeZk({"t": {0: (1, 2)}})
    zk.topics["t"] = topic("id-t", {0: (1, 2)}, {0: (3,)})
    state, effects = elected(zk)
    sent = lais(effects)[3][("t", 0)]
    assert (sent["leader"], sent["isr"], sent["replicas"], sent["observers"]) == (1, [1, 2], [1, 2], [3])
    del zk.live[1]
    state, effects = run(state, zk.changed_brokers(), zk)
    assert zk.states[("t", 0)].leader == 2 and lais(effects)[3][("t", 0)]["leader"] == 2
    del zk.live[2]
    state, _ = run(state, zk.changed_brokers(), zk)
    state, effects = run(state, ElectLeadersRequested("r", "unclean", None), zk)
    assert zk.states[("t", 0)].leader == NO_LEADER and 3 not in zk.states[("t", 0)].isr
    assert reply(effects)["partitions"][0]["error_code"] == ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
    del zk.live[3]
    state, _ = run(state, zk.changed_brokers(), zk)
    zk.live[3] = reg(3, 40)
    state, effects = run(state, zk.changed_brokers(), zk)
    assert set(lais(effects)[3]) == {("t", 0)}  # back: told again what it observes
    state, effects = run(state, TopicDeletionsRequested(("t",)), zk)
    assert [e.broker_id for e in of(effects, SendStopReplica)] == [3]  # the only live holder of a copy


def test_topic_deletion_stops_live_replicas_deletes_znodes_and_forgets_the_topic():
    zk = FakeZk({"t": {0: (1, 2), 1: (2, 4)}, "v": {0: (3,)}}, states={("t", 1): lai(2, (2,))})
    state, _ = elected(zk)
    state, effects = run(state, TopicDeletionsRequested(("t",)), zk)
    stops = of(effects, SendStopReplica)
    assert [(e.broker_id, len(e.body["partitions"])) for e in stops] == [(1, 1), (2, 2)]
    assert stops[0].body == {"controller_epoch": 5, "partitions": [{"topic": "t", "partition": 0, "delete": True}]}
    assert effects.index(DeleteTopicZnodes("t")) < effects.index(of(effects, SendUpdateMetadata)[0])
    assert of(effects, SendUpdateMetadata)[0].body["deleted_topics"] == ["t"]
    assert set(state.topics) == {"v"} and set(state.views) == {("v", 0)} and "t" not in zk.topics


def test_a_config_change_enabling_unclean_election_elects_an_offline_partition():
    zk = FakeZk({"t": {0: (1, 2)}}, states={("t", 0): lai(1, (1,))})
    state, _ = elected(zk)
    del zk.live[1]
    state, _ = run(state, zk.changed_brokers(), zk)
    assert zk.states[("t", 0)].leader == NO_LEADER
    state, effects = run(state, configs_changed({"t": {"unclean.leader.election.enable": "TRUE"}}), zk)
    assert state.views[("t", 0)].unclean_leader_election_enable and zk.states[("t", 0)].leader == 2
    assert of(effects, AskLogEnds) and effects[-1] == of(effects, SendUpdateMetadata)[-1]


def test_topic_settings_are_the_overrides_over_the_broker_topic_defaults_parsed_once():
    defaults = BrokerConfig({**BROKER_CONFIG, "min.insync.replicas": 2,
                             "unclean.leader.election.enable": "true"}).topic_defaults()
    assert topic_settings(defaults, {}) == TopicSettings(2, True)
    assert topic_settings(defaults, {"min.insync.replicas": "3", "unclean.leader.election.enable": " False "}) == \
        TopicSettings(3, False)
    assert topic_settings(DEFAULTS, {"unclean.leader.election.enable": "True"}) == TopicSettings(1, True)
    # Invalid in ZooKeeper (written around the brokers): left out, not a failing controller.
    assert topic_settings(defaults, {"unclean.leader.election.enable": "yes", "min.insync.replicas": "3",
                                     "no.such.key": "1"}) == TopicSettings(3, True)
    with pytest.raises(InvariantViolation):
        TopicSettings("2", True)  # the core takes parsed values only
    broker = BrokerConfig({**BROKER_CONFIG, "auto.leader.rebalance.enable": "false"})
    assert ControllerConfig.from_broker_config(broker) == ControllerConfig(10, False)
    info = {"host": "h", "port": 1, "rack": "a", "metrics_port": 2, "clean_shutdown": False, "incarnation": "x",
            "broker_epoch": 9}
    assert live_from_dicts({3: info}) == {3: BrokerRegistration("h", 1, "a", 9, 2, False, "x")}


def test_views_take_the_topic_settings_and_a_config_change_replaces_them():
    zk = FakeZk({"t": {0: (1, 2)}, "u": {0: (2, 1)}}, configs={"t": {"min.insync.replicas": "2"}})
    state, _ = elected(zk)
    assert state.views[("t", 0)].min_insync_replicas == 2 and state.views[("u", 0)].min_insync_replicas == 1
    state, effects = run(state, configs_changed({"t": {}, "u": {"unclean.leader.election.enable": "true"}}), zk)
    assert state.views[("t", 0)].min_insync_replicas == 1 and state.views[("u", 0)].unclean_leader_election_enable
    assert state.topics["u"].config == {"unclean.leader.election.enable": "true"}  # sent to brokers as it is
    assert of(effects, SendUpdateMetadata)[0].body["partitions"][1]["config"] == state.topics["u"].config
    with pytest.raises(InvariantViolation):
        step(state, TopicConfigsChanged({"t": {}}, {}))  # a config without its settings


def test_a_reassignment_begins_completes_stops_the_removed_replica_and_clears():
    zk = FakeZk({"t": {0: (1, 2)}})
    state, _ = elected(zk)
    zk.reassignment = {"version": 1, "throttle_bytes_per_s": 1000,
                       "partitions": [{"topic": "t", "partition": 0, "replicas": [2, 3]}]}
    state, effects = run(state, ReassignmentRequested(zk.reassignment), zk)
    begin = zk.assignments[0]
    assert (begin.replicas, begin.adding, begin.removing) == ((2, 3, 1), (3,), (1,))
    assert state.views[("t", 0)].replicas == (2, 3, 1) and state.reassignments == {("t", 0): (2, 3)}
    assert lais(effects)[3][("t", 0)]["throttle_bytes_per_s"] == 1000 and zk.states[("t", 0)].partition_epoch == 1
    assert not of(effects, ClearReassignment)
    zk.states[("t", 0)] = lai(1, (1, 2, 3), version=2)  # the leader admitted broker 3
    state, effects = run(state, IsrChanged((("t", 0),), {("t", 0): zk.states[("t", 0)]}), zk)
    done = zk.assignments[1]
    assert (done.replicas, done.adding, done.removing) == ((2, 3), (), ())
    assert zk.states[("t", 0)].leader == 2 and zk.states[("t", 0)].isr == (2, 3)
    kinds = [type(e) for e in effects if not hasattr(e, "message")]
    assert kinds.index(WritePartitionStates) < kinds.index(WriteAssignment) < kinds.index(SendStopReplica) \
        < kinds.index(ClearReassignment) < kinds.index(SendUpdateMetadata)
    assert [e.broker_id for e in of(effects, SendStopReplica)] == [1]
    assert state.reassignments == {} and state.throttles == {} and zk.reassignment is None


def test_a_new_term_takes_its_moves_from_zookeepers_request_not_the_last_terms():
    zk = FakeZk({"t": {0: (1, 2), 1: (1, 2)}})
    state, _ = elected(zk)
    zk.reassignment = {"version": 1, "throttle_bytes_per_s": 1000,
                       "partitions": [{"topic": "t", "partition": 0, "replicas": [2, 3]}]}
    state, _ = run(state, ReassignmentRequested(zk.reassignment), zk)
    state, _ = step(state, LostLeadership())
    assert state.reassignments == {("t", 0): (2, 3)}  # what the lost term knew; no longer true once another ran
    # The request is still there when this broker wins again: the move begins again (its assignment written).
    again, effects = run(state, Elected(6, 8, zk.snapshot()), zk)
    assert again.reassignments == {("t", 0): (2, 3)} and again.throttles == {("t", 0): 1000}
    assert [(w.replicas, w.adding) for w in of(effects, WriteAssignment)] == [((2, 3, 1), (3,))]
    # Another controller finished it and cleared the request meanwhile: nothing of the old term is kept.
    zk.reassignment = None
    zk.topics["t"] = topic("id-t", {0: (2, 3), 1: (1, 2)})
    zk.states[("t", 0)] = lai(2, (2, 3), leader_epoch=1, version=4)
    state, effects = run(state, Elected(7, 9, zk.snapshot()), zk)
    assert state.reassignments == {} and state.throttles == {}
    assert all(p["throttle_bytes_per_s"] is None for e in of(effects, SendLeaderAndIsr) for p in e.body["partitions"])
    state, effects = run(state, IsrChanged((("t", 0),), {("t", 0): zk.states[("t", 0)]}), zk)
    assert not of(effects, WriteAssignment) and not of(effects, WritePartitionStates)


def test_a_completion_whose_state_write_lost_a_race_keeps_the_move_open_and_retries():
    zk = FakeZk({"t": {0: (1, 2)}})
    state, _ = elected(zk)
    zk.reassignment = {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [2, 3]}]}
    state, _ = run(state, ReassignmentRequested(zk.reassignment), zk)
    zk.states[("t", 0)] = lai(1, (1, 2, 3), version=2)  # the leader admitted broker 3
    zk.races[("t", 0)] = lai(1, (1, 2, 3), version=3)  # and wrote again just before the completion
    state, effects = run(state, IsrChanged((("t", 0),), {("t", 0): zk.states[("t", 0)]}), zk)
    assert of(effects, WritePartitionStates) and not of(effects, WriteAssignment)
    assert len(zk.assignments) == 1 and not of(effects, ClearReassignment) and zk.reassignment is not None
    assert state.reassignments == {("t", 0): (2, 3)} and state.views[("t", 0)].state == zk.states[("t", 0)]
    assert state.views[("t", 0)].replicas == (2, 3, 1) and not of(effects, SendStopReplica)
    state, effects = run(state, IsrChanged((("t", 0),), {("t", 0): zk.states[("t", 0)]}), zk)
    assert zk.assignments[1].replicas == (2, 3) and zk.states[("t", 0)].leader == 2
    assert state.reassignments == {} and zk.reassignment is None and of(effects, SendStopReplica)


def test_losing_the_role_closes_every_channel_as_resigning_does():
    zk = FakeZk({"t": {0: (1, 2)}})
    state, _ = elected(zk)
    lost, effects = step(state, LostLeadership())
    assert effects[-1] == CloseChannels(None) and len(of(effects, CloseChannels)) == 1
    assert "lost the controller role" in effects[0].message and not lost.active
    _, effects = step(state, ControllerFailed("fenced"))
    assert effects == [CloseChannels(None), Resign()]


def test_only_the_awaited_answer_may_follow_a_request():
    zk = FakeZk({"t": {0: (1, 2)}})
    state, _ = elected(zk)
    del zk.live[1]
    waiting, effects = step(state, zk.changed_brokers())
    assert isinstance(effects[-1], WritePartitionStates) and waiting.pending
    for wrong in (RebalanceTick(), TopicsChanged(("t",)), LogEndsAnswered({})):
        with pytest.raises(InvariantViolation):
            step(waiting, wrong)
    with pytest.raises(InvariantViolation):
        step(state, AssignmentWritten())  # an answer with no request out
    with pytest.raises(InvariantViolation):
        step(waiting, PartitionStatesWritten(()))  # one result per write
    failed, effects = step(waiting, ControllerFailed("fenced"))
    assert effects == [CloseChannels(None), Resign()] and not failed.active and failed.awaiting is None
    lost, effects = step(waiting, LostLeadership())
    assert not lost.active and not lost.pending and effects[-1] == CloseChannels(None)


def test_an_inactive_controller_ignores_watches_and_refuses_requests():
    state = initial_state(1)
    for event in (BrokersChanged({}), TopicsChanged(("t",)), IsrChanged((), {}), TopicDeletionsRequested(("t",)),
                  TopicConfigsChanged({}, {}), ReassignmentRequested({"partitions": []}), RebalanceTick(),
                  ChannelOverflowed(1)):
        assert step(state, event) == (state, [])
    _, effects = step(state, ControlledShutdownRequested("r", 2, 3))
    assert reply(effects)["error_code"] == ErrorCode.NOT_CONTROLLER


def test_a_channel_overflow_resends_that_broker_its_full_state():
    zk = FakeZk({"t": {0: (1, 2), 1: (3, 1)}})
    state, _ = elected(zk)
    _, effects = run(state, ChannelOverflowed(2), zk)
    assert [e.broker_id for e in of(effects, SendUpdateMetadata)] == [1, 2, 3]
    assert [(e.broker_id, len(e.body["partitions"])) for e in of(effects, SendLeaderAndIsr)] == [(2, 1)]


def test_the_rebalance_moves_leadership_back_to_preferred_replicas():
    zk = FakeZk({"t": {0: (1, 2), 1: (1, 2)}}, states={("t", p): lai(2, (1, 2)) for p in (0, 1)})
    state, _ = elected(zk)
    state, effects = run(state, RebalanceTick(), zk)
    assert zk.states[("t", 0)].leader == zk.states[("t", 1)].leader == 1 and not of(effects, ReplyToRequest)
    off, _ = elected(FakeZk({"t": {0: (1, 2)}}, states={("t", 0): lai(2, (1, 2))}),
                     ControllerConfig(auto_leader_rebalance_enable=False))
    assert step(off, RebalanceTick()) == (off, [])


def test_step_never_mutates_its_input_state():
    zk = FakeZk({"t": {0: (1, 2, 3), 1: (2, 3)}}, configs={"t": {"unclean.leader.election.enable": "true"}})
    state = initial_state(1)
    events = [lambda: Elected(5, 7, zk.snapshot()), lambda: BrokersChanged({b: zk.live[b] for b in (1,)}),
              lambda: configs_changed({"t": {}}), lambda: ElectLeadersRequested("r", "unclean", None),
              lambda: ReassignmentRequested({"partitions": [{"topic": "t", "partition": 1, "replicas": [1]}]})]
    for make in events:
        queue = [make()]
        while queue:
            before = copy.deepcopy(state)
            new, effects = step(state, queue.pop())
            assert state == before  # deep equality: no dict held by the old state changed
            state = new
            queue += [zk.answer(e) for e in effects if isinstance(e, REQUESTS)]
    assert state.views[("t", 1)].replicas == (1, 2, 3) and state.reassignments == {("t", 1): (1,)}


# ---------------------------------------------------------------- unclean recovery (KIP-966, issue #22 item 4)


def _crashed_cluster(states, back):
    """Every broker crashed; ``back`` are registered again, each after an unclean shutdown."""
    zk = FakeZk({"t": {0: (1, 2, 3)}}, states=states)
    zk.live = {b: reg(b, 20 + b, clean=False, incarnation=f"new-{b}") for b in back}
    return zk


def _returns(state, zk, b, **kw):
    zk.live[b] = reg(b, 20 + b, clean=False, incarnation=f"new-{b}")
    return run(state, zk.changed_brokers(), zk)


def test_a_whole_cluster_crash_is_led_again_without_an_operator_once_every_replica_reported():
    zk = _crashed_cluster({("t", 0): lai(2, (1, 2, 3), leader_epoch=3, version=4)}, back=(1,))
    state, _ = elected(zk)
    assert (zk.states[("t", 0)].leader, zk.states[("t", 0)].elr, zk.states[("t", 0)].last_known_elr) == \
        (NO_LEADER, (2, 3), (1,))
    state, _ = _returns(state, zk, 2)
    assert (zk.states[("t", 0)].leader, zk.states[("t", 0)].elr, zk.states[("t", 0)].last_known_elr) == \
        (NO_LEADER, (3,), (1, 2))
    zk.log_ends = {("t", 0): {1: (3, 50), 2: (3, 70)}}  # 3 does not answer (yet)
    state, effects = _returns(state, zk, 3)
    assert of(effects, AskLogEnds) and zk.states[("t", 0)].leader == NO_LEADER
    assert zk.states[("t", 0)].last_known_elr == (1, 2, 3)
    # Nothing else would ask again: the recovery timer does.
    zk.log_ends[("t", 0)][3] = (3, 60)
    state, effects = run(state, RecoveryTick(1_000), zk)
    now = zk.states[("t", 0)]
    assert (now.leader, now.isr, now.elr, now.last_known_elr) == (2, (2,), (), ()) and now.leader_epoch > 3
    assert state.unclean_elections == 0 and state.elections > 0 and state.recovery_elections == 1
    assert any("unclean recovery of replica 2" in e.message for e in of(effects, Log))
    assert {e.broker_id for e in of(effects, SendLeaderAndIsr)} == {1, 2, 3}
    state, effects = run(state, RecoveryTick(2_000), zk)
    assert effects == [] and state.recovery_waiting_since_ms == {}


def test_past_the_timeout_the_last_known_elr_alone_recovers_reported_as_unclean():
    """unclean.recovery.timeout.ms: replica 3 (outside the ISR) never comes back. Until the timeout the
    partition waits for it (it may hold a committed record the ISR members lost); after, the last known ELR
    members lead, the longest log of the two, and the election is reported as unclean."""
    config = ControllerConfig.from_broker_config(BrokerConfig({**BROKER_CONFIG, "unclean.recovery.timeout.ms": "5000"}))
    assert config.unclean_recovery_timeout_ms == 5000
    zk = _crashed_cluster({("t", 0): lai(1, (1, 2), leader_epoch=3, version=4)}, back=(1, 2))
    zk.log_ends = {("t", 0): {1: (3, 40), 2: (3, 45)}}
    state, _ = elected(zk, config)
    assert zk.states[("t", 0)].leader == NO_LEADER and zk.states[("t", 0)].last_known_elr == (1, 2)
    for now_ms in (10_000, 14_999):
        state, effects = run(state, RecoveryTick(now_ms), zk)
        assert zk.states[("t", 0)].leader == NO_LEADER and not of(effects, WritePartitionStates)
    state, effects = run(state, RecoveryTick(15_000), zk)
    now = zk.states[("t", 0)]
    assert (now.leader, now.isr, now.last_known_elr) == (2, (2,), ())
    assert state.unclean_elections == 1 and state.recovery_elections == 1  # a lossy recovery: counted in both
    assert any("UNCLEAN" in e.message and "[3] did not report" in e.message for e in of(effects, Log))
