"""The Kafka group and admin handlers' mapping (``ads_spark/kafka/handlers_groups.py``, ``handlers_admin.py``):
Kafka request fields -> the ADS action's body, the action's answer -> every version's response fields, with
errors where each version puts them. The ADS actions are stood in for by a script (``bridge.call_action``
replaced), so this is the translation alone; tests/integration/test_kafka_groups_admin.py runs the real
coordinator and admin actions with Kafka's clients."""

from __future__ import annotations

import base64
import datetime

import pytest
from kio.serial import entity_reader

from ads_spark.broker.rpc.call_context import CallContext
from ads_spark.errors import ErrorCode, GroupAuthorizationFailedError, InvalidGroupIdError
from ads_spark.kafka import api, entities, handlers_groups as hg

MS = datetime.timedelta(milliseconds=1)
CTX = CallContext("User:ANONYMOUS", "127.0.0.1", "kafka.PLAINTEXT", "PLAINTEXT")


class Metadata:
    def __init__(self, partitions):
        self.partitions = set(partitions)

    def partition(self, topic, number):
        return {"leader": 1} if (topic, number) in self.partitions else None


class Broker:
    def __init__(self, partitions=()):
        self.metadata = Metadata(partitions)
        self.security = None


class Script:
    """Stands in for bridge.call_action: records (name, body), answers from a per-action queue or function."""

    def __init__(self, **answers):
        self.answers = answers
        self.calls: list[tuple[str, dict]] = []

    def __call__(self, call, name, body):
        self.calls.append((name, body))
        answer = self.answers[name]
        if isinstance(answer, list):
            answer = answer.pop(0)
        if callable(answer):
            answer = answer(body)
        if isinstance(answer, Exception):
            raise answer
        return answer


@pytest.fixture
def script(monkeypatch):
    holder = Script()
    monkeypatch.setattr(hg.bridge, "call_action", holder)
    return holder


def make_call(api_key, version, broker=None, client_id="cid"):
    return api.KafkaCall(broker or Broker(), api.RequestHeader(api_key, version, 7, client_id),
                         api.ConnectionState(CTX, True))


def request(api_key, version, **fields):
    """A kio request entity of ``version`` from plain fields (nested dicts become entities)."""
    return entities.build(entities.request_class(api_key, version), fields)


def encoded(api_key, version, answer):
    """The answer as the version's response, encoded and decoded again (every field valid for kio)."""
    cls = entities.response_class(api_key, version)
    decoded, _ = entity_reader(cls)(entities.encode(cls, entities.build(cls, answer)), 0)
    return decoded


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# ---- FindCoordinator ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("version", range(0, 4))
def test_find_coordinator_answers_the_actions_address(script, version):
    script.answers["find_coordinator"] = {"error_code": 0, "node_id": 2, "host": "127.0.0.1", "port": 19092}
    answer = hg.find_coordinator(make_call(10, version), request(10, version, key="g", key_type=0))
    assert script.calls == [("find_coordinator", {"key": "g"})]
    decoded = encoded(10, version, answer)
    assert (decoded.node_id, decoded.host, decoded.port, int(decoded.error_code)) == (2, "127.0.0.1", 19092, 0)


def test_find_coordinator_refuses_a_transactional_key_without_asking(script):
    answer = hg.find_coordinator(make_call(10, 3), request(10, 3, key="tx", key_type=1))
    assert script.calls == []
    # TRANSACTIONAL_ID_AUTHORIZATION_FAILED: the answer clients take as final (init_transactions fails at once)
    assert answer["error_code"] == 53 and "ADS has no transactions" in answer["error_message"]
    assert (answer["node_id"], answer["port"]) == (-1, -1)
    other = hg.find_coordinator(make_call(10, 3), request(10, 3, key="x", key_type=2))
    assert other["error_code"] == ErrorCode.INVALID_REQUEST and "key type 2" in other["error_message"]


def test_find_coordinator_answers_a_refused_call_with_its_code(script):
    script.answers["find_coordinator"] = InvalidGroupIdError("find_coordinator.key: must not be empty")
    answer = hg.find_coordinator(make_call(10, 2), request(10, 2, key=""))
    assert answer["error_code"] == ErrorCode.INVALID_GROUP_ID and answer["node_id"] == -1


# ---- JoinGroup / SyncGroup / Heartbeat / LeaveGroup ---------------------------------------------------------

SUBSCRIPTION = b"\x00\x01\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff"


def join_request(version, member_id=""):
    return request(11, version, group_id="g", session_timeout=10_000 * MS, rebalance_timeout=30_000 * MS,
                   member_id=member_id, group_instance_id=None, protocol_type="consumer",
                   protocols=[{"name": "range", "metadata": SUBSCRIPTION}])


def joined(body):
    return {"error_code": 0, "generation_id": 3, "protocol_type": "consumer", "protocol_name": "range",
            "leader_id": body["member_id"], "member_id": body["member_id"],
            "members": [{"member_id": body["member_id"], "group_instance_id": None,
                         "metadata_b64": b64(SUBSCRIPTION)}]}


@pytest.mark.parametrize("version", range(4, 8))
def test_join_v4_plus_passes_member_id_required_to_the_client(script, version):
    script.answers["join_group"] = {"error_code": int(ErrorCode.MEMBER_ID_REQUIRED), "member_id": "cid-1",
                                    "message": "MEMBER_ID_REQUIRED"}
    answer = hg.join_group(make_call(11, version), join_request(version))
    name, body = script.calls[0]
    assert len(script.calls) == 1 and name == "join_group"
    assert body["protocols"] == [{"name": "range", "metadata_b64": b64(SUBSCRIPTION)}]
    assert (body["session_timeout_ms"], body["rebalance_timeout_ms"], body["client_id"]) == (10_000, 30_000, "cid")
    decoded = encoded(11, version, answer)
    assert decoded.error_code.value == 79 and decoded.member_id == "cid-1" and decoded.generation_id == -1


@pytest.mark.parametrize("version", range(0, 4))
def test_join_before_v4_takes_the_new_member_id_itself(script, version):
    script.answers["join_group"] = [{"error_code": int(ErrorCode.MEMBER_ID_REQUIRED), "member_id": "cid-1"}, joined]
    decoded = encoded(11, version, hg.join_group(make_call(11, version), join_request(version)))
    assert [body["member_id"] for _, body in script.calls] == ["", "cid-1"]
    if version == 0:
        assert script.calls[0][1]["rebalance_timeout_ms"] == -1  # v0 has none: the session timeout applies
    assert (int(decoded.error_code), decoded.member_id, decoded.leader, decoded.generation_id) == (
        0, "cid-1", "cid-1", 3)
    assert decoded.protocol_name == "range" and decoded.members[0].metadata == SUBSCRIPTION


def test_join_v7_answers_the_protocol_type(script):
    script.answers["join_group"] = joined
    decoded = encoded(11, 7, hg.join_group(make_call(11, 7), join_request(7, member_id="m")))
    assert decoded.protocol_type == "consumer" and decoded.members[0].metadata == SUBSCRIPTION


ASSIGNMENT = b"\x00\x01\x00\x00\x00\x01\x00\x01t\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x01\xff\xff\xff\xff"


@pytest.mark.parametrize("version", range(0, 6))
def test_sync_sends_assignments_as_base64_and_delivers_the_members_bytes(script, version):
    script.answers["sync_group"] = {"error_code": 0, "assignment_b64": b64(ASSIGNMENT),
                                    "protocol_type": "consumer", "protocol_name": "range"}
    fields = dict(group_id="g", generation_id=3, member_id="m", group_instance_id=None,
                  assignments=[{"member_id": "m", "assignment": ASSIGNMENT}])
    if version >= 5:
        fields.update(protocol_type="consumer", protocol_name="range")
    decoded = encoded(14, version, hg.sync_group(make_call(14, version), request(14, version, **fields)))
    body = script.calls[0][1]
    assert body["assignments"] == [{"member_id": "m", "assignment_b64": b64(ASSIGNMENT)}]
    assert ("protocol_name" in body) == (version >= 5) and "group_instance_id" not in body
    assert decoded.assignment == ASSIGNMENT
    if version >= 5:
        assert (decoded.protocol_type, decoded.protocol_name) == ("consumer", "range")


def test_sync_error_answers_empty_assignment(script):
    script.answers["sync_group"] = {"error_code": int(ErrorCode.REBALANCE_IN_PROGRESS), "message": "x"}
    decoded = encoded(14, 3, hg.sync_group(make_call(14, 3), request(14, 3, group_id="g", generation_id=1,
                                                                      member_id="m", assignments=[])))
    assert decoded.error_code.value == 27 and decoded.assignment == b""


@pytest.mark.parametrize("version", range(0, 5))
def test_heartbeat(script, version):
    script.answers["heartbeat"] = {"error_code": int(ErrorCode.REBALANCE_IN_PROGRESS)}
    answer = hg.heartbeat(make_call(12, version), request(12, version, group_id="g", generation_id=2, member_id="m"))
    assert script.calls == [("heartbeat", {"group_id": "g", "generation_id": 2, "member_id": "m"})]
    assert encoded(12, version, answer).error_code.value == 27


@pytest.mark.parametrize("version", range(0, 3))
def test_leave_before_v3_is_one_member_whose_error_is_the_answers(script, version):
    script.answers["leave_group"] = {"error_code": 0, "members": [
        {"member_id": "m", "group_instance_id": None, "error_code": int(ErrorCode.UNKNOWN_MEMBER_ID)}]}
    answer = hg.leave_group(make_call(13, version), request(13, version, group_id="g", member_id="m"))
    assert script.calls[0][1] == {"group_id": "g", "members": [{"member_id": "m"}]}
    assert encoded(13, version, answer).error_code.value == 25


@pytest.mark.parametrize("version", (3, 4))
def test_leave_v3_plus_answers_each_member(script, version):
    script.answers["leave_group"] = {"error_code": 0, "members": [
        {"member_id": "a", "group_instance_id": "i", "error_code": 0},
        {"member_id": "b", "group_instance_id": None, "error_code": int(ErrorCode.UNKNOWN_MEMBER_ID)}]}
    answer = hg.leave_group(make_call(13, version), request(13, version, group_id="g", members=[
        {"member_id": "a", "group_instance_id": "i"}, {"member_id": "b", "group_instance_id": None}]))
    assert script.calls[0][1]["members"] == [{"member_id": "a", "group_instance_id": "i"}, {"member_id": "b"}]
    decoded = encoded(13, version, answer)
    assert int(decoded.error_code) == 0
    assert [(m.member_id, m.group_instance_id, m.error_code.value) for m in decoded.members] == [
        ("a", "i", 0), ("b", None, 25)]


# ---- OffsetCommit / OffsetFetch / OffsetDelete ---------------------------------------------------------------

def commit_request(version, partitions):
    topics: dict[str, list] = {}
    for topic, number, offset, epoch, metadata in partitions:
        topics.setdefault(topic, []).append({"partition_index": number, "committed_offset": offset,
                                             "committed_leader_epoch": epoch, "committed_metadata": metadata})
    return request(8, version, group_id="g", generation_id_or_member_epoch=4, member_id="m",
                   group_instance_id=None, topics=[{"name": t, "partitions": ps} for t, ps in topics.items()])


def committed(body):
    return {"error_code": 0, "partitions": [{"topic": p["topic"], "partition": p["partition"], "error_code": 0}
                                            for p in body["partitions"]]}


@pytest.mark.parametrize("version", range(2, 9))
def test_commit_unknown_partitions_are_refused_alone_and_epochs_and_metadata_pass_through(script, version):
    script.answers["offset_commit"] = committed
    call = make_call(8, version, Broker({("t", 0), ("t", 1)}))
    answer = hg.offset_commit(call, commit_request(version, [("t", 0, 10, 5, "meta"), ("t", 1, 11, 5, None),
                                                             ("t", 7, 12, 5, ""), ("gone", 0, 1, -1, "")]))
    body = script.calls[0][1]
    assert (body["generation_id"], body["member_id"]) == (4, "m")
    epoch = 5 if version >= 6 else -1  # committed_leader_epoch exists from v6
    assert body["partitions"] == [
        {"topic": "t", "partition": 0, "offset": 10, "leader_epoch": epoch, "metadata": "meta"},
        {"topic": "t", "partition": 1, "offset": 11, "leader_epoch": epoch, "metadata": ""}]  # null -> ""
    decoded = encoded(8, version, answer)
    assert [(t.name, [(p.partition_index, p.error_code.value) for p in t.partitions]) for t in decoded.topics] == [
        ("t", [(0, 0), (1, 0), (7, 3)]), ("gone", [(0, 3)])]


def test_commit_group_error_goes_on_every_partition(script):
    script.answers["offset_commit"] = GroupAuthorizationFailedError("no")
    call = make_call(8, 7, Broker({("t", 0)}))
    answer = hg.offset_commit(call, commit_request(7, [("t", 0, 1, -1, ""), ("u", 0, 1, -1, "")]))
    assert answer["topics"] == [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 30}]},
                                {"name": "u", "partitions": [{"partition_index": 0, "error_code": 3}]}]


def test_commit_of_only_unknown_partitions_asks_nothing(script):
    answer = hg.offset_commit(make_call(8, 8), commit_request(8, [("t", 0, 1, -1, "")]))
    assert script.calls == [] and answer["topics"][0]["partitions"][0]["error_code"] == 3


FETCHED = {"error_code": 0, "partitions": [
    {"topic": "t", "partition": 0, "offset": 10, "leader_epoch": 5, "metadata": "meta", "error_code": 0},
    {"topic": "t", "partition": 1, "offset": -1, "leader_epoch": -1, "metadata": "", "error_code": 0}]}


@pytest.mark.parametrize("version", range(1, 8))
def test_fetch_round_trips_offsets_epochs_and_metadata(script, version):
    script.answers["offset_fetch"] = FETCHED
    fields = {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0, 1]}]}
    if version >= 7:
        fields["require_stable"] = True
    decoded = encoded(9, version, hg.offset_fetch(make_call(9, version), request(9, version, **fields)))
    body = script.calls[0][1]
    assert body["partitions"] == [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 1}]
    assert body.get("require_stable", False) == (version >= 7)
    first, second = decoded.topics[0].partitions
    assert (first.committed_offset, first.metadata, second.committed_offset, second.metadata) == (10, "meta", -1, "")
    if version >= 5:
        assert (first.committed_leader_epoch, second.committed_leader_epoch) == (5, -1)


@pytest.mark.parametrize("version", range(2, 8))
def test_fetch_null_topics_is_every_partition_and_a_group_error_is_top_level(script, version):
    script.answers["offset_fetch"] = [FETCHED, {"error_code": int(ErrorCode.NOT_COORDINATOR), "message": "x"}]
    all_topics = request(9, version, group_id="g", topics=None)
    decoded = encoded(9, version, hg.offset_fetch(make_call(9, version), all_topics))
    assert "partitions" not in script.calls[0][1] and len(decoded.topics[0].partitions) == 2
    decoded = encoded(9, version, hg.offset_fetch(make_call(9, version), all_topics))
    assert decoded.error_code.value == 16 and decoded.topics == ()


def test_fetch_v1_puts_a_group_error_on_every_partition_asked(script):
    script.answers["offset_fetch"] = {"error_code": int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), "message": "x"}
    decoded = encoded(9, 1, hg.offset_fetch(make_call(9, 1), request(
        9, 1, group_id="g", topics=[{"name": "t", "partition_indexes": [0, 1]}])))
    assert [(p.partition_index, p.error_code.value, p.committed_offset, p.metadata)
            for p in decoded.topics[0].partitions] == [(0, 14, -1, ""), (1, 14, -1, "")]


def test_offset_delete_per_partition_and_group_errors_top_level(script):
    script.answers["offset_delete"] = [
        {"error_code": 0, "partitions": [{"topic": "t", "partition": 0,
                                          "error_code": int(ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC)}]},
        {"error_code": int(ErrorCode.GROUP_ID_NOT_FOUND), "message": "x", "partitions": []}]
    call = make_call(47, 0, Broker({("t", 0)}))
    req = request(47, 0, group_id="g", topics=[{"name": "t", "partitions": [{"partition_index": 0},
                                                                              {"partition_index": 9}]}])
    decoded = encoded(47, 0, hg.offset_delete(call, req))
    assert script.calls[0][1] == {"group_id": "g", "partitions": [{"topic": "t", "partition": 0}]}
    assert [(p.partition_index, p.error_code.value) for p in decoded.topics[0].partitions] == [(0, 86), (9, 3)]
    decoded = encoded(47, 0, hg.offset_delete(call, req))
    assert decoded.error_code.value == 69 and decoded.topics == ()


# ---- ListGroups / DescribeGroups / DeleteGroups --------------------------------------------------------------

@pytest.mark.parametrize("version", range(0, 5))
def test_list_groups_with_states(script, version):
    script.answers["list_groups"] = {"error_code": 0, "groups": [
        {"group_id": "g", "protocol_type": "consumer", "state": "Stable"}]}
    fields = {"states_filter": ["stable", "EMPTY", "nonsense"]} if version >= 4 else {}
    decoded = encoded(16, version, hg.list_groups(make_call(16, version), request(16, version, **fields)))
    assert script.calls[0][1] == ({"states": ["Stable", "Empty"]} if version >= 4 else {})
    assert [(g.group_id, g.protocol_type) for g in decoded.groups] == [("g", "consumer")]
    if version >= 4:
        assert decoded.groups[0].group_state == "Stable"


def test_list_groups_with_only_unknown_states_is_empty(script):
    assert hg.list_groups(make_call(16, 4), request(16, 4, states_filter=["nonsense"])) == {
        "error_code": 0, "groups": []}
    assert script.calls == []


@pytest.mark.parametrize("version", range(0, 6))
def test_describe_groups_bytes_and_per_group_errors(script, version):
    script.answers["describe_groups"] = {"error_code": 0, "groups": [
        {"group_id": "g", "error_code": 0, "state": "Stable", "protocol_type": "consumer", "protocol_name": "range",
         "members": [{"member_id": "m", "group_instance_id": None, "client_id": "c", "client_host": "127.0.0.1",
                      "metadata_b64": b64(SUBSCRIPTION), "assignment_b64": b64(ASSIGNMENT)}]},
        {"group_id": "locked", "error_code": 30, "message": "no"}]}
    fields = {"groups": ["g", "", "locked"]}
    if version >= 3:
        fields["include_authorized_operations"] = True
    decoded = encoded(15, version, hg.describe_groups(make_call(15, version), request(15, version, **fields)))
    assert script.calls[0][1] == {"groups": ["g", "locked"]}  # the invalid id is answered alone
    g, empty, locked = decoded.groups
    assert (g.group_state, g.protocol_data, g.members[0].member_metadata, g.members[0].member_assignment) == (
        "Stable", "range", SUBSCRIPTION, ASSIGNMENT)
    assert (empty.error_code.value, locked.error_code.value) == (24, 30)
    if version >= 3:
        assert g.authorized_operations == (1 << 3) | (1 << 6) | (1 << 8)  # no authorizer: all of a group's


@pytest.mark.parametrize("version", range(0, 3))
def test_delete_groups(script, version):
    script.answers["delete_groups"] = {"error_code": 0, "groups": [
        {"group_id": "a", "error_code": 0}, {"group_id": "b", "error_code": int(ErrorCode.NON_EMPTY_GROUP)}]}
    decoded = encoded(42, version, hg.delete_groups(make_call(42, version), request(
        42, version, groups_names=["a", "b", "a"])))
    assert script.calls[0][1] == {"groups": ["a", "b"]}
    assert [(r.group_id, r.error_code.value) for r in decoded.results] == [("a", 0), ("b", 68)]


def test_every_group_api_version_has_kio_classes():
    for entry in hg.API_HANDLERS:
        for version in range(entry.min_version, entry.max_version + 1):
            assert entities.request_class(entry.api_key, version) and entities.response_class(entry.api_key, version)


# ---- admin: CreateTopics / DeleteTopics / CreatePartitions ---------------------------------------------------

from ads_spark.config import BrokerConfig, TOPIC_KEYS  # noqa: E402
from ads_spark.kafka import handlers_admin as ha  # noqa: E402

TOPIC_ID = "6f1c7d2e-0000-4000-8000-000000000001"


class AdminMetadata(Metadata):
    def __init__(self, partitions):
        super().__init__(partitions)
        self.topics = {topic: {"topic_id": TOPIC_ID} for topic, _ in partitions}


class AdminBroker(Broker):
    broker_id = 1

    def __init__(self, partitions=(), **config):
        super().__init__()
        self.metadata = AdminMetadata(partitions)
        self.config = BrokerConfig({"broker.id": "1", "log.dirs": "/tmp/ads-unused", "zookeeper.connect": "z:1",
                                    "num.partitions": "3", "default.replication.factor": "2", **config})


def creatable(name, partitions=-1, replication_factor=-1, assignments=(), configs=()):
    return {"name": name, "num_partitions": partitions, "replication_factor": replication_factor,
            "assignments": [{"partition_index": p, "broker_ids": b} for p, b in assignments],
            "configs": [{"name": k, "value": v} for k, v in configs]}


def test_create_entry_minus_one_is_the_brokers_default_and_assignments_become_replica_lists():
    config = AdminBroker().config
    entry, partitions, rf = ha.create_entry(request(19, 7, topics=[creatable("t")], timeout=0).topics[0], config)
    assert (entry, partitions, rf) == ({"topic": "t"}, 3, 2)
    topic = request(19, 7, topics=[creatable("t", assignments=[(1, [2, 3]), (0, [1, 2])],
                                             configs=[("retention.ms", "5")])]).topics[0]
    entry, partitions, rf = ha.create_entry(topic, config)
    assert entry == {"topic": "t", "replica_assignment": [[1, 2], [2, 3]], "config": {"retention.ms": "5"}}
    assert (partitions, rf) == (2, 2)
    for bad, code in ((creatable("t", partitions=2, assignments=[(0, [1])]), ErrorCode.INVALID_REQUEST),
                      (creatable("t", assignments=[(1, [1])]), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
                      (creatable("t", configs=[("retention.ms", None)]), ErrorCode.INVALID_REQUEST),
                      (creatable("t", configs=[("retention.ms", "1"), ("retention.ms", "2")]),
                       ErrorCode.INVALID_REQUEST)):
        with pytest.raises(Exception) as caught:
            ha.create_entry(request(19, 7, topics=[bad]).topics[0], config)
        assert caught.value.code == code


@pytest.mark.parametrize("version", range(2, 8))
def test_create_topics_answers_per_topic_and_v5_plus_the_configs(script, version):
    def create(body):
        if body["topics"][0]["topic"] == "taken":
            from ads_spark.errors import TopicAlreadyExistsError
            raise TopicAlreadyExistsError("topic 'taken' already exists")
        return {"error_code": 0, "topics": [{"topic": body["topics"][0]["topic"], "error_code": 0}]}
    script.answers["create_topics"] = create
    script.answers["describe_configs"] = {"error_code": 0, "overrides": {"retention.ms": "5"}, "configs": []}
    call = make_call(19, version, AdminBroker({("new", 0), ("new", 1), ("new", 2)}))
    req = request(19, version, topics=[creatable("new", configs=[("retention.ms", "5")]), creatable("taken")],
                  timeout=5_000 * MS, validate_only=False)
    decoded = encoded(19, version, ha.create_topics(call, req))
    assert [body for name, body in script.calls if name == "create_topics"] == [
        {"topics": [{"topic": "new", "config": {"retention.ms": "5"}}], "validate_only": False},
        {"topics": [{"topic": "taken"}], "validate_only": False}]
    new, taken = decoded.topics
    assert (new.error_code.value, taken.error_code.value) == (0, 36) and "already exists" in taken.error_message
    if version >= 5:
        assert (new.num_partitions, new.replication_factor) == (3, 2)
        configs = {c.name: (c.value, c.config_source) for c in new.configs}
        assert set(configs) == set(TOPIC_KEYS) and configs["retention.ms"] == ("5", 1)
    if version >= 7:
        assert str(new.topic_id) == TOPIC_ID


def test_create_topics_timeout_zero_answers_request_timed_out_though_created(script):
    script.answers["create_topics"] = {"error_code": 0, "topics": [{"topic": "t", "error_code": 0}]}
    answer = ha.create_topics(make_call(19, 4, AdminBroker({("t", 0)})),
                              request(19, 4, topics=[creatable("t", partitions=1)], timeout=0, validate_only=False))
    assert answer["topics"][0]["error_code"] == ErrorCode.REQUEST_TIMED_OUT and len(script.calls) == 1


def test_create_topics_validate_only_answers_configs_from_the_checked_overrides(script):
    script.answers["create_topics"] = {"error_code": 0, "topics": [
        {"topic": "t", "error_code": 0, "partitions": 1, "config": {"cleanup.policy": "compact"}}]}
    answer = ha.create_topics(make_call(19, 5, AdminBroker()), request(
        19, 5, topics=[creatable("t", partitions=1, configs=[("cleanup.policy", "compact")])], timeout=0,
        validate_only=True))
    result = answer["topics"][0]
    assert result["error_code"] == 0 and script.calls[0][1]["validate_only"] is True
    assert {c["name"]: c["value"] for c in result["configs"]}["cleanup.policy"] == "compact"


@pytest.mark.parametrize("version", range(1, 7))
def test_delete_topics_by_name_and_topic_ids_refused(script, version):
    script.answers["delete_topics"] = {"error_code": 0}
    if version >= 6:
        req = request(20, version, topics=[{"name": "t", "topic_id": None},
                                           {"name": None, "topic_id": uuid_of(TOPIC_ID)}], timeout=1_000 * MS)
    else:
        req = request(20, version, topic_names=["t"], timeout=1_000 * MS)
    decoded = encoded(20, version, ha.delete_topics(make_call(20, version, AdminBroker()), req))
    assert script.calls == [("delete_topics", {"topics": ["t"]})]
    assert decoded.responses[0].error_code.value == 0  # gone from metadata: answered at once
    if version >= 6:
        assert decoded.responses[1].error_code.value == ha.UNKNOWN_TOPIC_ID


def uuid_of(text):
    import uuid
    return uuid.UUID(text)


@pytest.mark.parametrize("version", range(0, 4))
def test_create_partitions(script, version):
    script.answers["create_partitions"] = {"error_code": 0}
    call = make_call(37, version, AdminBroker({("t", 0), ("t", 1)}))
    req = request(37, version, topics=[{"name": "t", "count": 2, "assignments": None},
                                       {"name": "u", "count": 2, "assignments": [{"broker_ids": [1]}]}],
                  timeout=1_000 * MS, validate_only=True)
    decoded = encoded(37, version, ha.create_partitions(call, req))
    assert script.calls == [("create_partitions", {"topic": "t", "partitions": 2, "validate_only": True})]
    assert [(r.name, r.error_code.value) for r in decoded.results] == [("t", 0), ("u", 39)]


# ---- admin: configs ---------------------------------------------------------------------------------------

def test_topic_config_entries_list_every_key_with_its_source_and_synonyms():
    config = AdminBroker(**{"log.retention.ms": "1000"}).config
    entries = {e["name"]: e for e in ha.topic_config_entries({"segment.bytes": "2048"}, config, synonyms=True,
                                                             documentation=True)}
    assert set(entries) == set(TOPIC_KEYS)
    assert (entries["segment.bytes"]["value"], entries["segment.bytes"]["config_source"]) == ("2048", 1)
    assert [s["name"] for s in entries["segment.bytes"]["synonyms"]] == ["segment.bytes", "log.segment.bytes"]
    assert (entries["retention.ms"]["value"], entries["retention.ms"]["config_source"]) == ("1000", 4)
    assert entries["message.timestamp.type"]["config_source"] == 5
    assert entries["retention.ms"]["documentation"] and entries["retention.ms"]["config_type"] == 5
    only = ha.topic_config_entries({}, config, keys=["retention.ms", "nonsense"])
    assert [e["name"] for e in only] == ["retention.ms"] and only[0]["synonyms"] == []


@pytest.mark.parametrize("version", range(1, 5))
def test_describe_configs_topic_broker_and_other_resources(script, version):
    script.answers["describe_configs"] = [{"error_code": 0, "overrides": {}, "configs": []},
                                          __import__("ads_spark.errors").errors.UnknownTopicOrPartitionError("gone")]
    call = make_call(32, version, AdminBroker(**{"ssl.key.password": "hunter2"}))
    fields = {"resources": [{"resource_type": 2, "resource_name": "t", "configuration_keys": None},
                            {"resource_type": 2, "resource_name": "gone", "configuration_keys": None},
                            {"resource_type": 4, "resource_name": "1", "configuration_keys": None},
                            {"resource_type": 4, "resource_name": "9", "configuration_keys": None},
                            {"resource_type": 8, "resource_name": "1", "configuration_keys": None}],
              "include_synonyms": True}
    decoded = encoded(32, version, ha.describe_configs(call, request(32, version, **fields)))
    topic, gone, broker, other, logger = decoded.results
    assert topic.error_code.value == 0 and {c.name for c in topic.configs} == set(TOPIC_KEYS)
    assert all(c.synonyms for c in topic.configs)
    assert gone.error_code.value == 3
    secrets = {c.name: (c.value, c.is_sensitive) for c in broker.configs if c.is_sensitive}
    assert secrets["ssl.key.password"] == (None, True)
    assert {c.name: c.value for c in broker.configs}["num.partitions"] == "3"
    assert (other.error_code.value, logger.error_code.value) == (42, 42)


def alter_resource(configs, resource_type=2, incremental=False):
    entries = [{"name": n, "value": v, **({"config_operation": op} if incremental else {})}
               for n, v, op in configs]
    return {"resource_type": resource_type, "resource_name": "t", "configs": entries}


@pytest.mark.parametrize("version", range(0, 3))
def test_alter_configs_replaces_every_override(script, version):
    script.answers["alter_configs"] = {"error_code": 0}
    req = request(33, version, resources=[alter_resource([("retention.ms", "5", 0)]),
                                          alter_resource([("x", "1", 0)], resource_type=4)], validate_only=False)
    decoded = encoded(33, version, ha.alter_configs(make_call(33, version, AdminBroker()), req))
    body = script.calls[0][1]
    assert body["set"] == {"retention.ms": "5"} and set(body["delete"]) == set(TOPIC_KEYS) - {"retention.ms"}
    assert [r.error_code.value for r in decoded.responses] == [0, 42]


@pytest.mark.parametrize("version", range(0, 2))
def test_incremental_alter_set_delete_append_subtract(script, version):
    script.answers["describe_configs"] = {"error_code": 0, "overrides": {}, "configs": [
        {"name": "cleanup.policy", "value": "delete", "is_default": True}]}
    script.answers["alter_configs"] = {"error_code": 0}
    req = request(44, version, validate_only=True, resources=[
        alter_resource([("retention.ms", "7", 0), ("segment.ms", None, 1), ("cleanup.policy", "compact", 2)],
                       incremental=True),
        alter_resource([("retention.ms", "1", 2)], incremental=True)])
    decoded = encoded(44, version, ha.incremental_alter_configs(make_call(44, version, AdminBroker()), req))
    alters = [body for name, body in script.calls if name == "alter_configs"]
    assert alters == [{"topic": "t", "set": {"retention.ms": "7", "cleanup.policy": "delete,compact"},
                       "delete": ["segment.ms"], "validate_only": True}]
    ok, refused = decoded.responses
    assert ok.error_code.value == 0
    assert refused.error_code.value == 40 and "retention.ms" in refused.error_message


def test_list_change_subtract():
    assert ha._list_change("compact,delete", "delete", ha.OP_SUBTRACT) == "compact"
    assert ha._list_change("compact", "compact", ha.OP_APPEND) == "compact"


def test_every_admin_api_version_has_kio_classes():
    for entry in ha.API_HANDLERS:
        for version in range(entry.min_version, entry.max_version + 1):
            assert entities.request_class(entry.api_key, version) and entities.response_class(entry.api_key, version)


# ---- ACLs decided per topic / group before the action (as Kafka's broker does) ------------------------------

class Decision:
    def __init__(self, allowed):
        self.allowed, self.reason = allowed, "test"


class Security:
    """An authorizer allowing exactly the (operation value, resource name) pairs given."""

    authorizer_enabled = True

    def __init__(self, *allowed):
        self.allowed = set(allowed)

    def authorize(self, ctx, operation, resource):
        return Decision((operation.value, resource.name) in self.allowed)


def secured_broker(partitions, *allowed):
    broker = AdminBroker(partitions)
    broker.security = Security(*allowed)
    return broker


def test_commit_refuses_an_unreadable_topic_alone_and_an_unreadable_group_whole(script):
    script.answers["offset_commit"] = committed
    broker = secured_broker({("t", 0), ("secret", 0)}, ("Read", "g"), ("Read", "t"))
    answer = hg.offset_commit(make_call(8, 8, broker), commit_request(8, [("t", 0, 1, -1, ""),
                                                                          ("secret", 0, 1, -1, "")]))
    assert [p["topic"] for p in script.calls[0][1]["partitions"]] == ["t"]
    assert answer["topics"][1]["partitions"][0]["error_code"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    broker.security = Security(("Read", "t"))
    answer = hg.offset_commit(make_call(8, 8, broker), commit_request(8, [("t", 0, 1, -1, "")]))
    assert len(script.calls) == 1 and answer["topics"][0]["partitions"][0]["error_code"] == 30


def test_describe_groups_authorized_operations_follow_the_acls(script):
    script.answers["describe_groups"] = {"error_code": 0, "groups": [
        {"group_id": "g", "error_code": 0, "state": "Empty", "members": []}]}
    broker = secured_broker(set(), ("Describe", "g"), ("Read", "g"))
    decoded = encoded(15, 5, hg.describe_groups(make_call(15, 5, broker), request(
        15, 5, groups=["g"], include_authorized_operations=True)))
    assert decoded.groups[0].authorized_operations == (1 << 3) | (1 << 8)
    decoded = encoded(15, 2, hg.describe_groups(make_call(15, 2, broker), request(15, 2, groups=["g"])))
    assert decoded.groups[0].group_state == "Empty"


@pytest.mark.parametrize("version", range(0, 3))
def test_delete_records_per_partition_with_topic_acls(script, version):
    script.answers["delete_records"] = lambda body: {"error_code": 0, "partitions": [
        {"topic": p["topic"], "partition": p["partition"], "low_watermark": max(p["offset"], 0), "error_code": 0}
        for p in body["partitions"]]}
    broker = secured_broker({("t", 0), ("t", 1), ("secret", 0)}, ("Delete", "t"))
    req = request(21, version, timeout=1_000 * MS, topics=[
        {"name": "t", "partitions": [{"partition_index": 0, "offset": 4}, {"partition_index": 1, "offset": -1}]},
        {"name": "secret", "partitions": [{"partition_index": 0, "offset": 1}]}])
    decoded = encoded(21, version, ha.delete_records(make_call(21, version, broker), req))
    assert script.calls == [("delete_records", {"partitions": [{"topic": "t", "partition": 0, "offset": 4},
                                                               {"topic": "t", "partition": 1, "offset": -1}]})]
    assert [[(p.partition_index, p.low_watermark, p.error_code.value) for p in t.partitions]
            for t in decoded.topics] == [[(0, 4, 0), (1, 0, 0)], [(0, -1, 29)]]


def test_describe_configs_of_a_broker_needs_describe_configs_on_the_cluster(script):
    broker = secured_broker(set())
    fields = {"resources": [{"resource_type": 4, "resource_name": "1", "configuration_keys": None}],
              "include_synonyms": False}
    answer = ha.describe_configs(make_call(32, 4, broker), request(32, 4, **fields))
    assert answer["results"][0]["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    broker.security = Security(("DescribeConfigs", "kafka-cluster"))
    answer = ha.describe_configs(make_call(32, 4, broker), request(32, 4, **fields))
    assert answer["results"][0]["error_code"] == 0 and answer["results"][0]["configs"]
