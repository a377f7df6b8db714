"""Authorization of every call on a real secured cluster (issue #23, items 4 and 6).

A module's secured 3-broker cluster (``secured_cluster``: mutual TLS, the ACL authorizer, brokers and
``admin`` super users). The attacker is ``mallory``: a certificate of the cluster's own CA (so TLS
lets it in) whose principal ``User:mallory`` holds Read and Describe on one topic and nothing else. It
speaks raw Flight, as an attacker would, and tries what SECURITY.md lists:

* posing as a follower (Kafka's CVE-2018-1288): a fetch session with ``replica_id`` of a real
  follower asking from the log end, and a replica-message session -> CLUSTER_AUTHORIZATION_FAILED,
  and the partition's ISR, high watermark and each follower's log end unchanged;
* posing as the controller with its epoch + 1000: leader_and_isr making mallory's pick leader, and
  stop_replica with ``delete`` -> refused, the data still on every replica, and the epoch the brokers
  obey unchanged (the real controller's next request is still obeyed: a new topic comes up);
* probing for topic names: every topic call for a topic that does not exist and for one that exists
  but is forbidden gets the same answer; an all-topics metadata lists only what mallory may Describe;
* escalating: unclean election, reassignment, granting itself ACLs, altering configs or users,
  deleting or growing a topic it may only read -> refused, nothing changed;
* keeping a produce stream open across a revocation of its Write: the next chunk is refused and only
  the records sent before the revocation are in the log.

After each, the brokers still serve (admin round trip).
"""

from __future__ import annotations

import stat
import time
import uuid

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from ads_spark.client.admin import Admin
from ads_spark.client.chunks import TopicPartition
from ads_spark.client.consumer import Consumer
from ads_spark.client.producer import Producer
from ads_spark.cluster_security import ClusterSecurity
from ads_spark.errors import ErrorCode
from ads_spark.protocol import wire
from ads_spark.protocol.transport import ClientTransport
from ads_spark.security import certs
from ads_spark.protocol.records import PRODUCE_SCHEMA
from ads_spark.security.authorizer import AclBinding, AclBindingFilter
from tests.fixtures.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

CALL_TIMEOUT_S = 20
RECORDS = 50
ATTACKER = "mallory"


@pytest.fixture(scope="module")
def setup(secured_cluster, tmp_path_factory):
    """The admin, mallory's client config, a topic with data mallory may read, one it may not."""
    security = ClusterSecurity(secured_cluster.dir)
    directory = tmp_path_factory.mktemp("mallory")
    issued = certs.issue_certificate(certs.load_ca(security.dir), directory, ATTACKER,
                                     [ATTACKER, "localhost", "127.0.0.1"], server=False)
    mallory = {"bootstrap.servers": secured_cluster.bootstrap_servers, "security.protocol": "SSL",
               "ssl.truststore.location": str(security.truststore),
               "ssl.keystore.location": str(issued.keystore_path)}
    admin_config = secured_cluster.client_config()
    admin = Admin(admin_config)
    suffix = uuid.uuid4().hex[:6]
    readable, forbidden = f"authz-data-{suffix}", f"authz-forbidden-{suffix}"
    for topic in (readable, forbidden):
        admin.create_topic(topic, partitions=1, replication_factor=3)
    producer = Producer({**admin_config, "acks": "all"})
    try:
        for i in range(RECORDS):
            producer.produce(readable, value=b"record-%d" % i, partition=0)
        producer.flush()
    finally:
        producer.close()
    for operation in ("Read", "Describe"):
        admin.create_acls([AclBinding("Topic", readable, "LITERAL", f"User:{ATTACKER}", "*", operation, "Allow")])
    try:
        yield {"admin": admin, "admin_config": admin_config, "mallory": mallory, "readable": readable,
               "forbidden": forbidden, "missing": f"authz-missing-{suffix}"}
    finally:
        admin.close()


def broker_addresses(admin: Admin) -> dict[int, tuple[str, int]]:
    return {int(b["id"]): (b["host"], int(b["port"])) for b in admin.cluster()["brokers"]}


def leader_of(admin: Admin, topic: str):
    partition = admin.describe_topics([topic])[0].partitions[0]
    return partition


def raw_client(config, address):
    return ClientTransport.from_config(config).connect(*address)


def action(client, name: str, body: dict) -> dict:
    """A DoAction's answer, or {"error_code": N, "message": ...} for a refusal."""
    options = flight.FlightCallOptions(timeout=CALL_TIMEOUT_S)
    try:
        results = list(client.do_action(flight.Action(name, wire.dumps(body)), options))
    except flight.FlightError as exc:
        error = wire.to_ads_error(exc)
        return {"error_code": int(error.code), "message": error.message}
    return wire.loads(results[0].body, name)


def replica_states(admin_config, admin, topic: str) -> dict[int, dict]:
    """Each broker's view of ``topic``-0 (ISR, HW, log end, followers' log ends, batches), as its super user."""
    states = {}
    for broker_id, address in broker_addresses(admin).items():
        client = raw_client(admin_config, address)
        try:
            answer = action(client, "replica_status", {"topic": topic})
        finally:
            client.close()
        assert answer.get("error_code", 0) == 0, answer
        for partition in answer["partitions"]:
            followers = {r: p["log_end_offset"] for r, p in partition["followers"].items()}
            states[broker_id] = {key: partition[key] for key in ("isr", "high_watermark", "log_end_offset",
                                                                 "batches", "leader_epoch", "role")}
            states[broker_id]["followers"] = followers
    return states


def session_answer(writer, reader, request: dict) -> dict:
    writer.write_metadata(wire.dumps(request))
    while True:
        meta = wire.loads(reader.read_chunk().app_metadata, "answer")
        if meta.get("end"):
            return meta


def assert_still_serving(setup) -> None:
    """Every broker answers its super user, and the data mallory may read is all there."""
    admin = setup["admin"]
    for address in broker_addresses(admin).values():
        client = raw_client(setup["admin_config"], address)
        try:
            assert action(client, "metadata", {"topics": [setup["readable"]]})["topics"][0]["error_code"] == 0
        finally:
            client.close()
    consumer = Consumer(setup["admin_config"])
    try:
        table = consumer.fetch_arrow(TopicPartition(setup["readable"], 0), 0, RECORDS)
        assert sorted(table.column("value").to_pylist()) == sorted(b"record-%d" % i for i in range(RECORDS))
    finally:
        consumer.close()


def wait_quiet(setup) -> dict:
    """The replica states once every replica has the data and the followers' progress is settled."""
    admin, topic = setup["admin"], setup["readable"]
    wait_until(lambda: all(s["log_end_offset"] == RECORDS and s["high_watermark"] == RECORDS
                           for s in replica_states(setup["admin_config"], admin, topic).values()),
               timeout_s=60, what="every replica at the log end")
    return replica_states(setup["admin_config"], admin, topic)


def test_a_consumer_posing_as_a_follower_is_refused_and_moves_nothing(setup):
    admin, topic = setup["admin"], setup["readable"]
    partition = leader_of(admin, topic)
    follower = next(r for r in partition.replicas if r != partition.leader)
    before = wait_quiet(setup)
    client = raw_client(setup["mallory"], broker_addresses(admin)[partition.leader])
    try:
        # Mallory may Read the topic: a consumer fetch works, so the refusals below are about posing.
        consumer_session = client.do_exchange(flight.FlightDescriptor.for_command(
            wire.dumps({"type": wire.FETCH_SESSION})))
        writer, reader = consumer_session
        fetch = {"type": "fetch", "max_wait_ms": 0,
                 "partitions": [{"topic": topic, "partition": 0, "fetch_offset": 0}]}
        assert session_answer(writer, reader, fetch).get("error_code", 0) == 0
        # A follower's fetch from the log end would move its log end, the ISR and the HW.
        posing = {**fetch, "replica_id": follower, "broker_epoch": -1,
                  "partitions": [{"topic": topic, "partition": 0, "fetch_offset": RECORDS + 1000}]}
        answer = session_answer(writer, reader, posing)
        assert answer["error_code"] == int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), answer
        assert session_answer(writer, reader, fetch).get("error_code", 0) == 0  # the session goes on
        writer.done_writing()
        writer.close()
        # A replica-message session is refused as it opens.
        writer, reader = client.do_exchange(flight.FlightDescriptor.for_command(
            wire.dumps({"type": wire.FETCH_SESSION, "replica_messages": True})))
        with pytest.raises(flight.FlightError) as refused:
            writer.write_metadata(wire.dumps(posing))
            reader.read_chunk()
        assert wire.to_ads_error(refused.value).code is ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        # And a one-shot DoGet posing as the follower.
        with pytest.raises(flight.FlightError) as refused:
            client.do_get(flight.Ticket(wire.dumps(posing))).read_all()
        assert wire.to_ads_error(refused.value).code is ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    finally:
        client.close()
    time.sleep(1.0)  # anything the posing fetch could have moved would show by now
    after = replica_states(setup["admin_config"], admin, topic)
    assert after == before
    assert_still_serving(setup)


@pytest.mark.parametrize("call", ["leader_and_isr", "stop_replica"])
def test_a_client_posing_as_the_controller_is_refused_and_changes_nothing(setup, call):
    admin, topic = setup["admin"], setup["readable"]
    partition = leader_of(admin, topic)
    before = wait_quiet(setup)
    epoch = partition.leader_epoch + 1000
    bodies = {
        "leader_and_isr": {"controller_id": 0, "controller_epoch": epoch + 1000, "partitions": [
            {"topic": topic, "partition": 0, "leader": partition.replicas[-1], "leader_epoch": epoch,
             "isr": [partition.replicas[-1]], "replicas": list(partition.replicas), "partition_epoch": epoch}]},
        "stop_replica": {"controller_epoch": epoch + 1000,
                         "partitions": [{"topic": topic, "partition": 0, "delete": True}]},
    }
    for broker_id, address in broker_addresses(admin).items():
        client = raw_client(setup["mallory"], address)
        try:
            answer = action(client, call, bodies[call])
        finally:
            client.close()
        assert answer["error_code"] == int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), (broker_id, answer)
        assert "kafka-cluster" in answer["message"] and ATTACKER in answer["message"]
    assert replica_states(setup["admin_config"], admin, topic) == before
    # Had a broker recorded the made-up epoch, it would refuse the real controller from now on: a new
    # topic on every broker coming up and taking records shows each still obeys the real epoch.
    probe = f"{topic}-probe-{call}"
    admin.create_topic(probe, partitions=3, replication_factor=3)
    producer = Producer({**setup["admin_config"], "acks": "all"})
    try:
        for p in range(3):
            producer.produce(probe, value=b"x", partition=p)
        producer.flush()
    finally:
        producer.close()
    assert_still_serving(setup)


def test_a_forbidden_topic_and_a_missing_one_get_the_same_answer(setup):
    admin = setup["admin"]
    client = raw_client(setup["mallory"], broker_addresses(admin)[leader_of(admin, setup["readable"]).leader])
    calls = {
        "metadata": lambda t: {"topics": [t]},
        "list_offsets": lambda t: {"partitions": [{"topic": t, "partition": 0, "timestamp": -1}]},
        "offset_for_leader_epoch": lambda t: {"partitions": [{"topic": t, "partition": 0, "leader_epoch": 0}]},
        "locate": lambda t: {"topic": t, "partition": 0, "fetch_offset": 0},
        "describe_configs": lambda t: {"topic": t},
        "alter_configs": lambda t: {"topic": t, "set": {"retention.ms": "1000"}},
        "create_partitions": lambda t: {"topic": t, "partitions": 5},
        "delete_topics": lambda t: {"topics": [t]},
        "create_topics": lambda t: {"topics": [{"topic": t, "partitions": 1, "replication_factor": 1}]},
    }
    forbidden, missing = setup["forbidden"], setup["missing"]
    try:
        for name, body in calls.items():
            answers = []
            for topic in (forbidden, missing):
                answer = action(client, name, body(topic))
                if name == "metadata":
                    answer = answer["topics"][0]
                answers.append({key: str(value).replace(topic, "T") for key, value in answer.items()})
            assert answers[0] == answers[1], name
            assert answers[0]["error_code"] == str(int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)), (name, answers[0])
        listed = [t["topic"] for t in action(client, "metadata", {"topics": None})["topics"]]
        assert listed == [setup["readable"]]
    finally:
        client.close()
    assert forbidden in admin.list_topics() and missing not in admin.list_topics()
    assert admin.describe_configs(forbidden)["configs"]  # nothing was altered or deleted
    assert_still_serving(setup)


def test_escalation_through_admin_calls_is_refused_and_changes_nothing(setup):
    admin, topic = setup["admin"], setup["readable"]
    partition = leader_of(admin, topic)
    acls_before = sorted(str(acl) for acl in admin.describe_acls())
    configs_before = admin.describe_configs(topic)["overrides"]
    attempts = {  # mallory holds Read and Describe on the topic, nothing on the cluster
        "elect_leaders": ({"election_type": "unclean", "partitions": [{"topic": topic, "partition": 0}]}, 31),
        "alter_partition_reassignments": ({"partitions": [{"topic": topic, "partition": 0,
                                                            "replicas": [partition.replicas[0]]}]}, 31),
        "create_acls": ({"acls": [AclBinding("Cluster", "kafka-cluster", "LITERAL", f"User:{ATTACKER}", "*", "All",
                                             "Allow").to_dict()]}, 31),
        "describe_acls": ({"filter": None}, 31),
        "alter_user_credentials": ({"upsert": [{"username": ATTACKER, "password": "x" * 12}]}, 31),
        "alter_configs": ({"topic": topic, "set": {"retention.ms": "1"}}, 29),
        "delete_topics": ({"topics": [topic]}, 29),
        "create_partitions": ({"topic": topic, "partitions": 4}, 29),
    }
    client = raw_client(setup["mallory"], broker_addresses(admin)[partition.leader])
    try:
        for name, (body, code) in attempts.items():
            assert action(client, name, body)["error_code"] == code, name
    finally:
        client.close()
    assert sorted(str(acl) for acl in admin.describe_acls()) == acls_before
    assert admin.describe_configs(topic)["overrides"] == configs_before
    after = leader_of(admin, topic)
    assert (after.replicas, len(admin.describe_topics([topic])[0].partitions)) == (partition.replicas, 1)
    assert_still_serving(setup)


def produce_chunk(writer, reader, topic: str, correlation_id: int) -> dict:
    batch = pa.RecordBatch.from_pylist([{"timestamp": 1_700_000_000_000, "value": b"stream-%d" % correlation_id}],
                                       schema=PRODUCE_SCHEMA)
    writer.write_with_metadata(batch, pa.py_buffer(wire.dumps(
        {"topic": topic, "partition": 0, "correlation_id": correlation_id, "acks": "all"})))
    return wire.loads(reader.read_chunk().app_metadata, "produce answer")


def test_an_acl_revoked_while_a_produce_stream_runs_refuses_its_next_chunk(setup):
    admin = setup["admin"]
    topic = f"{setup['readable']}-writes"
    admin.create_topic(topic, partitions=1, replication_factor=3)
    write = AclBinding("Topic", topic, "LITERAL", f"User:{ATTACKER}", "*", "Write", "Allow")
    admin.create_acls([write])
    wait_until(lambda: leader_of(admin, topic).leader >= 0, timeout_s=30, what="a leader")
    leader = leader_of(admin, topic).leader
    client = raw_client(setup["mallory"], broker_addresses(admin)[leader])
    try:
        writer, reader = client.do_exchange(flight.FlightDescriptor.for_command(wire.dumps({"type": wire.PRODUCE})))
        writer.begin(PRODUCE_SCHEMA)
        first = produce_chunk(writer, reader, topic, 1)
        assert first["error_code"] == 0, first
        admin.delete_acls([AclBindingFilter.exact(write)])  # returns once every broker applied it
        refused = produce_chunk(writer, reader, topic, 2)
        assert refused["error_code"] == int(ErrorCode.TOPIC_AUTHORIZATION_FAILED), refused
        writer.done_writing()
        writer.close()
    finally:
        client.close()
    consumer = Consumer(setup["admin_config"])
    try:
        values = consumer.fetch_arrow(TopicPartition(topic, 0), 0, 10).column("value").to_pylist()
    finally:
        consumer.close()
    assert values == [b"stream-1"]


def test_with_security_on_the_logs_are_private_to_the_broker_user(setup, secured_cluster):
    """0700 directories and 0600 files, so another Unix user cannot read segments around the ACLs."""
    wrong = []
    for broker_id in secured_cluster.broker_ids():
        data = secured_cluster.dir / f"broker-{broker_id}" / "data"
        assert data.is_dir() and any(data.rglob("*.arrows"))
        for path in [data, *data.rglob("*")]:
            if path.is_symlink():
                continue
            mode = stat.S_IMODE(path.stat().st_mode)
            if mode != (0o700 if path.is_dir() else 0o600):
                wrong.append(f"{path}: {oct(mode)}")
    assert wrong == []


def _commit_body(group: str, topic: str) -> dict:
    return {"group_id": group, "generation_id": -1, "member_id": "",  # a standalone commit (no members)
            "partitions": [{"topic": topic, "partition": 0, "offset": 7, "leader_epoch": -1, "metadata": "m"}]}


def _code(answer: dict) -> int:
    """A refusal of the whole call, else the first partition's code."""
    if answer.get("error_code", 0) != 0 or not answer.get("partitions"):
        return answer.get("error_code", 0)
    return answer["partitions"][0]["error_code"]


def test_consumer_groups_are_guarded_by_group_acls_and_commits_by_topic_acls(setup):
    """Issue #24: a group call needs its Group ACL (Kafka's GROUP_AUTHORIZATION_FAILED, 30) whatever the group
    holds, a commit also Read on each topic it names (29), and listing shows only the groups one may Describe."""
    admin, readable, forbidden = setup["admin"], setup["readable"], setup["forbidden"]
    suffix = uuid.uuid4().hex[:6]
    group, hidden = f"authz-group-{suffix}", f"authz-hidden-{suffix}"
    any_broker = next(iter(broker_addresses(admin).values()))
    as_admin = raw_client(setup["admin_config"], any_broker)
    try:
        found = wait_until(lambda: (lambda a: a if a["error_code"] == 0 else None)(
            action(as_admin, "find_coordinator", {"key": group, "key_type": "group"})),
            timeout_s=60, what="the group's coordinator")
        hidden_at = wait_until(lambda: (lambda a: a if a["error_code"] == 0 else None)(
            action(as_admin, "find_coordinator", {"key": hidden, "key_type": "group"})),
            timeout_s=60, what="the other group's coordinator")
        admin_at_hidden = raw_client(setup["admin_config"], (hidden_at["host"], hidden_at["port"]))
        try:
            # The coordinator may answer before it has loaded its __consumer_offsets partition (15, 14:
            # retriable, as clients treat them); seen under a loaded parallel run.
            wait_until(lambda: _code(action(admin_at_hidden, "offset_commit", _commit_body(hidden, readable)))
                       not in (14, 15), timeout_s=60, what="the hidden group's coordinator to load")
            assert _code(action(admin_at_hidden, "offset_commit", _commit_body(hidden, readable))) == 0
        finally:
            admin_at_hidden.close()
    finally:
        as_admin.close()
    mallory = raw_client(setup["mallory"], (found["host"], found["port"]))
    try:
        refused = {"find_coordinator": {"key": group, "key_type": "group"},
                   "offset_commit": _commit_body(group, readable),
                   "offset_fetch": {"group_id": group},
                   "describe_groups": {"groups": [group]},
                   "delete_groups": {"groups": [group]}}
        for name, body in refused.items():
            answer = action(mallory, name, body)
            codes = {answer.get("error_code")} | {g.get("error_code") for g in answer.get("groups", ())}
            assert int(ErrorCode.GROUP_AUTHORIZATION_FAILED) in codes, (name, answer)
        admin.create_acls([AclBinding("Group", group, "LITERAL", f"User:{ATTACKER}", "*", "Read", "Allow")])
        wait_until(lambda: action(mallory, "offset_fetch", {"group_id": group}).get("error_code") == 0,
                   timeout_s=30, what="mallory's Group Read to reach the coordinator")
        assert _code(action(mallory, "offset_commit", _commit_body(group, readable))) == 0
        assert _code(action(mallory, "offset_commit", _commit_body(group, forbidden))) == int(
            ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        fetched = action(mallory, "offset_fetch", {"group_id": group})
        committed = {(p["topic"], p["offset"], p["metadata"]) for p in fetched["partitions"] if p["offset"] >= 0}
        assert committed == {(readable, 7, "m")}, fetched  # the refused commit changed nothing
        names = set()
        for address in broker_addresses(admin).values():  # each broker lists the groups it coordinates
            client = raw_client(setup["mallory"], address)
            try:
                names |= {g["group_id"] for g in action(client, "list_groups", {}).get("groups", ())}
            finally:
                client.close()
        assert group in names and hidden not in names, names  # one it may not Describe is not even named
        assert action(mallory, "delete_groups", {"groups": [group]})["groups"][0]["error_code"] == int(
            ErrorCode.GROUP_AUTHORIZATION_FAILED)  # Read is not Delete
    finally:
        mallory.close()
    assert_still_serving(setup)
