"""Attacks on authorization (../shared/SECURITY.md, "Attack cases", Authorization), on a real secured cluster.

The module's cluster (``attack_cluster``: 2 brokers, mutual TLS, the ACL authorizer). Attackers are
principals with certificates of the cluster's own CA (TLS lets them in; only ACLs stand in their way),
speaking raw Flight. Each attack is refused with TOPIC/CLUSTER_AUTHORIZATION_FAILED (29/31), changes
nothing (read back as the admin, a super user) and the brokers serve a legitimate call afterwards.

Attack -> test (node ids; what tests/integration/test_authorization.py already does is listed, not repeated):

* follower impersonation with Read on the topic (ISR, follower LEO, HW unchanged)
  -> tests/integration/test_authorization.py::test_a_consumer_posing_as_a_follower_is_refused_and_moves_nothing
* controller impersonation with epoch + 1000: leader_and_isr, stop_replica delete (data, state unchanged)
  -> tests/integration/test_authorization.py::test_a_client_posing_as_the_controller_is_refused_and_changes_nothing
  update_metadata, replica_log_ends, controlled_shutdown, and the accepted controller epoch read back
  -> ``test_attack_controller_impersonation_leaves_the_accepted_controller_epoch_and_metadata_alone``
* existence oracle (same answer for a missing topic and a forbidden one)
  -> tests/integration/test_authorization.py::test_a_forbidden_topic_and_a_missing_one_get_the_same_answer
* every call: no ACL refused, exactly the ACL allowed, every other operation refused (one call per
  family here; every call in-process: tests/unit/test_request_authorization.py::
  test_every_call_is_refused_without_its_acl_allowed_with_it_and_refused_with_any_other)
  -> ``test_attack_each_call_family_needs_exactly_its_acl``
* privilege escalation through configs, deletes, unclean elections, reassignment, granting oneself ACLs
  -> tests/integration/test_authorization.py::test_escalation_through_admin_calls_is_refused_and_changes_nothing
  and, with the Alter/AlterConfigs/Delete neighbours held, ``test_attack_each_call_family_needs_exactly_its_acl``
* PREFIXED semantics, DENY beats ALLOW across pattern types and ``User:*``, host ACLs (end to end; the
  authorizer's property test is tests/unit/test_authorizer.py)
  -> ``test_attack_prefixed_deny_and_host_acls_hold_end_to_end``
* an ACL revoked while a produce stream runs: no record acknowledged after the brokers applied it
  -> ``test_attack_a_produce_stream_outliving_its_acl_gets_no_record_acknowledged_after_the_revocation``
  (one chunk each side: tests/integration/test_authorization.py::test_an_acl_revoked_while_a_produce_stream_runs_refuses_its_next_chunk)
"""

from __future__ import annotations

import threading
from collections import Counter
import time
import uuid

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from ads_spark.client import Consumer, Producer, TopicPartition
from ads_spark.errors import ErrorCode
from ads_spark.protocol import wire
from ads_spark.protocol.records import PRODUCE_SCHEMA
from ads_spark.security.authorizer import (AclBinding, AclBindingFilter, Operation, ResourceType, VALID_OPERATIONS,
                                           granting_operations)
from tests.fixtures.secure_cluster import action, wait_for_leaders

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TOPIC_REFUSED = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
CLUSTER_REFUSED = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
REFUSALS = (TOPIC_REFUSED, CLUSTER_REFUSED)
RECORDS = 20
TIMESTAMP_MS = 1_700_000_000_000
FIRST_ANSWERS: dict = {}  # the first answer of each code, for a failure's message


def _flight_code(exc: flight.FlightError) -> int:
    return int(wire.to_ads_error(exc).code)


def _produce_chunk(writer, reader, topic: str, correlation_id: int, value: bytes) -> int:
    batch = pa.RecordBatch.from_pylist([{"timestamp": TIMESTAMP_MS, "value": value}], schema=PRODUCE_SCHEMA)
    writer.write_with_metadata(batch, pa.py_buffer(wire.dumps(
        {"topic": topic, "partition": 0, "correlation_id": correlation_id, "acks": "all"})))
    answer = wire.loads(reader.read_chunk().app_metadata, "produce answer")
    FIRST_ANSWERS.setdefault(int(answer.get("error_code", 0)), answer)
    return int(answer.get("error_code", 0))


def _produce(client, topics) -> int:
    try:
        writer, reader = client.do_exchange(flight.FlightDescriptor.for_command(wire.dumps({"type": wire.PRODUCE})))
        writer.begin(PRODUCE_SCHEMA)
        code = _produce_chunk(writer, reader, topics["data"], 1, b"table-produce")
        writer.done_writing()
        writer.close()
        return code
    except flight.FlightError as exc:
        return _flight_code(exc)


def _fetch(client, topics) -> int:
    ticket = {"type": "fetch", "replica_id": -1, "max_wait_ms": 0,
              "partitions": [{"topic": topics["data"], "partition": 0, "fetch_offset": 0}]}
    try:
        client.do_get(flight.Ticket(wire.dumps(ticket))).read_all()
        return 0
    except flight.FlightError as exc:
        return _flight_code(exc)


def _action_code(name, body_of, answer_of=lambda answer: answer.get("error_code", 0)):
    def call(client, topics):
        return int(answer_of(action(client, name, body_of(topics))))
    return call


# family -> (resource type, operation, the call). Topic families act on topics["data"] (or the topic the
# family names); "allowed" is any answer but 29/31 (an allowed call may still fail for its own reasons).
FAMILIES = {
    "produce": (ResourceType.TOPIC, Operation.WRITE, _produce),
    "consumer fetch": (ResourceType.TOPIC, Operation.READ, _fetch),
    "metadata": (ResourceType.TOPIC, Operation.DESCRIBE, _action_code(
        wire.ACTION_METADATA, lambda t: {"topics": [t["data"]]}, lambda a: a["topics"][0].get("error_code", 0))),
    "list offsets": (ResourceType.TOPIC, Operation.DESCRIBE, _action_code(
        wire.ACTION_LIST_OFFSETS, lambda t: {"partitions": [{"topic": t["data"], "partition": 0, "timestamp": -1}]},
        lambda a: a.get("error_code") or a["partitions"][0].get("error_code", 0))),
    "describe configs": (ResourceType.TOPIC, Operation.DESCRIBE_CONFIGS, _action_code(
        wire.ACTION_DESCRIBE_CONFIGS, lambda t: {"topic": t["data"]})),
    "alter configs": (ResourceType.TOPIC, Operation.ALTER_CONFIGS, _action_code(
        wire.ACTION_ALTER_CONFIGS, lambda t: {"topic": t["data"], "set": {"retention.ms": "86400000"}})),
    "create partitions": (ResourceType.TOPIC, Operation.ALTER, _action_code(
        wire.ACTION_CREATE_PARTITIONS, lambda t: {"topic": t["data"], "partitions": 2})),
    "create topics": (ResourceType.TOPIC, Operation.CREATE, _action_code(
        wire.ACTION_CREATE_TOPICS, lambda t: {"topics": [{"topic": t["new"], "partitions": 1,
                                                          "replication_factor": 1}]})),
    "delete topics": (ResourceType.TOPIC, Operation.DELETE, _action_code(
        wire.ACTION_DELETE_TOPICS, lambda t: {"topics": [t["doomed"]]})),
    "leader election": (ResourceType.CLUSTER, Operation.ALTER, _action_code(
        wire.ACTION_ELECT_LEADERS, lambda t: {"election_type": "preferred",
                                              "partitions": [{"topic": t["data"], "partition": 0}]})),
    "replica verification": (ResourceType.CLUSTER, Operation.DESCRIBE, _action_code(
        wire.ACTION_REPLICA_STATUS, lambda t: {"topic": t["data"]})),
    "describe acls": (ResourceType.CLUSTER, Operation.DESCRIBE, _action_code(
        wire.ACTION_DESCRIBE_ACLS, lambda t: {"filter": None})),
    "idempotent producer id": (ResourceType.CLUSTER, Operation.IDEMPOTENT_WRITE, _action_code(
        wire.ACTION_INIT_PRODUCER_ID, lambda t: {})),
}
# the topic a family's ACL names (default: the data topic)
FAMILY_TOPIC = {"create topics": "new", "delete topics": "doomed"}


def _principal(family: str, kind: str) -> str:
    return f"tbl-{family.replace(' ', '-')}-{kind}"


def _bindings(family: str, topics: dict) -> list[AclBinding]:
    resource_type, operation, _call = FAMILIES[family]
    name = topics[FAMILY_TOPIC.get(family, "data")] if resource_type is ResourceType.TOPIC else "kafka-cluster"
    others = sorted(VALID_OPERATIONS[resource_type] - granting_operations(operation), key=lambda o: o.value)

    def acl(kind, op):
        return AclBinding(resource_type.value, name, "LITERAL", f"User:{_principal(family, kind)}", "*", op.value,
                          "Allow")
    return [acl("exact", operation)] + [acl("other", op) for op in others]


def _state(target, topics) -> tuple:
    admin = target.admin
    return (sorted(admin.list_topics()), target.acls(), admin.describe_configs(topics["data"])["overrides"],
            len(admin.describe_topics([topics["data"]])[0].partitions), target.replica_states(topics["data"]))


# families whose allowed call changes what _state reads, through metadata that reaches the brokers a moment later
MUTATING = ("produce", "alter configs", "create partitions", "create topics", "delete topics", "leader election")
SETTLE_GAP_S = 0.3


def _settle(target, topics, timeout_s: float = 15.0) -> None:
    """Until two reads of the state SETTLE_GAP_S apart agree (what an allowed call changed has propagated)."""
    deadline = time.monotonic() + timeout_s
    last = _state(target, topics)
    while time.monotonic() < deadline:
        time.sleep(SETTLE_GAP_S)
        current = _state(target, topics)
        if current == last:
            return
        last = current
    raise AssertionError(f"the cluster's state did not settle within {timeout_s}s")


def test_attack_each_call_family_needs_exactly_its_acl(attack_cluster):
    target = attack_cluster
    suffix = uuid.uuid4().hex[:6]
    topics = {"data": f"tbl-data-{suffix}", "doomed": f"tbl-doomed-{suffix}", "new": f"tbl-new-{suffix}"}
    for key in ("data", "doomed"):
        target.admin.create_topic(topics[key], partitions=1, replication_factor=2)
    wait_for_leaders(target, topics["data"])
    target.admin.create_acls([b for family in FAMILIES for b in _bindings(family, topics)])
    leader = target.admin.describe_topics([topics["data"]])[0].partitions[0].leader
    address = target.ssl_address(leader)
    for family, (_type, operation, call) in FAMILIES.items():
        before = _state(target, topics)
        codes = {}
        for kind in ("none", "other", "exact"):
            client = target.raw(target.mtls_config(_principal(family, kind)), address)
            try:
                codes[kind] = call(client, topics)
            finally:
                client.close()
            if kind == "other":  # the refusals changed nothing; the allowed call may
                assert _state(target, topics) == before, family
        if family in MUTATING:
            _settle(target, topics)
        assert codes["none"] in REFUSALS and codes["other"] in REFUSALS, (family, operation, codes)
        # exactly the ACL: served (a preferred election of a leader already preferred may say so instead)
        assert codes["exact"] == 0 or family == "leader election" and codes["exact"] not in REFUSALS, \
            (family, operation, codes, FIRST_ANSWERS)
    assert topics["new"] in target.admin.list_topics() and topics["doomed"] not in target.admin.list_topics()
    target.assert_serving()


def _describe_code(target, principal: str, topic: str) -> int:
    client = target.raw(target.mtls_config(principal), target.ssl_address(target.cluster.broker_ids()[0]))
    try:
        return int(action(client, wire.ACTION_METADATA, {"topics": [topic]})["topics"][0].get("error_code", 0))
    finally:
        client.close()


def test_attack_prefixed_deny_and_host_acls_hold_end_to_end(attack_cluster):
    target = attack_cluster

    def acl(principal, name, pattern="LITERAL", permission="Allow", host="*", operation="Describe"):
        return AclBinding("Topic", name, pattern, principal, host, operation, permission)
    target.admin.create_acls([
        acl("User:prefix", "pay", "PREFIXED"),
        acl("User:onechar", "f", "PREFIXED"),
        acl("User:overlap", "f", "PREFIXED"), acl("User:overlap", "fooa", "PREFIXED", "Deny"),
        acl("User:overlap", "foobar"),
        acl("User:denied", "deny-target", operation="All"), acl("User:*", "deny-", "PREFIXED", "Deny"),
        acl("User:denied2", "dlit-", "PREFIXED"), acl("User:denied2", "dlit-x", permission="Deny"),
        acl("User:hosty", "host-elsewhere", host="10.9.9.9"), acl("User:hosty", "host-here", host="127.0.0.1"),
    ])
    allowed, refused = 0, TOPIC_REFUSED
    expectations = {  # (principal, topic) -> refused or not (an allowed missing topic answers UNKNOWN_TOPIC)
        ("prefix", "payments"): allowed, ("prefix", "pay"): allowed, ("prefix", "PAYMENTS"): refused,
        ("prefix", "pa"): refused, ("prefix", "xpayments"): refused,
        ("onechar", "f"): allowed, ("onechar", "foo"): allowed, ("onechar", "g"): refused,
        ("overlap", "fo"): allowed, ("overlap", "fooa"): refused, ("overlap", "fooab"): refused,
        ("overlap", "foobar"): allowed,
        ("denied", "deny-target"): refused, ("admin-less", "deny-target"): refused,
        ("denied2", "dlit-y"): allowed, ("denied2", "dlit-x"): refused,
        ("hosty", "host-elsewhere"): refused, ("hosty", "host-here"): allowed,
    }
    acls_before = target.acls()
    answers = {case: _describe_code(target, *case) for case in expectations}
    wrong = {case: code for case, code in answers.items()
             if (code == TOPIC_REFUSED) != (expectations[case] == TOPIC_REFUSED)}
    assert not wrong, wrong
    assert target.acls() == acls_before
    target.assert_serving()


def _metadata_of(target, broker_id: int) -> dict:
    client = target.raw(target.admin_config, target.ssl_address(broker_id))
    try:
        answer = action(client, wire.ACTION_METADATA, {"topics": None})
    finally:
        client.close()
    return {"controller": (answer.get("controller_id"), answer.get("controller_epoch")),
            "brokers": sorted((b["id"], b["port"]) for b in answer["brokers"]),
            "topics": sorted((t["topic"], tuple((p["partition"], p["leader"], tuple(p.get("isr", ())))
                                                for p in t["partitions"])) for t in answer["topics"])}


def test_attack_controller_impersonation_leaves_the_accepted_controller_epoch_and_metadata_alone(attack_cluster):
    target = attack_cluster
    topic = f"ctl-{uuid.uuid4().hex[:6]}"
    target.admin.create_topic(topic, partitions=1, replication_factor=2)
    wait_for_leaders(target, topic)
    ids = target.cluster.broker_ids()
    target.admin.create_acls([AclBinding("Topic", topic, "LITERAL", "User:fake-controller", "*", "All", "Allow")])
    before = {b: _metadata_of(target, b) for b in ids}
    states_before = target.replica_states(topic)
    controller_id, epoch = before[ids[0]]["controller"]
    partition = target.admin.describe_topics([topic])[0].partitions[0]
    forged = {
        "update_metadata": {"controller_id": controller_id, "controller_epoch": epoch + 1000, "full": True,
                            "brokers": [], "deleted_topics": [topic],
                            "partitions": [{"topic": topic, "partition": 0, "leader": ids[-1],
                                            "leader_epoch": partition.leader_epoch + 1000, "isr": [ids[-1]],
                                            "replicas": list(partition.replicas),
                                            "partition_epoch": partition.leader_epoch + 1000}]},
        "replica_log_ends": {"controller_epoch": epoch + 1000, "partitions": [{"topic": topic, "partition": 0}]},
        "controlled_shutdown": {"broker_id": ids[-1], "broker_epoch": 0, "force": True},
    }
    for broker_id in ids:
        client = target.raw(target.mtls_config("fake-controller"), target.ssl_address(broker_id))
        try:
            for name, body in forged.items():
                answer = action(client, name, body)
                assert answer.get("error_code") == CLUSTER_REFUSED, (broker_id, name, answer)
        finally:
            client.close()
    time.sleep(0.5)  # anything a forged request set going would show by now
    assert {b: _metadata_of(target, b) for b in ids} == before
    assert target.replica_states(topic) == states_before
    # the real controller is still obeyed: a new topic comes up on every broker and takes records
    probe = f"{topic}-after"
    target.admin.create_topic(probe, partitions=2, replication_factor=2)
    producer = Producer({**target.admin_config, "acks": "all"})
    try:
        for p in range(2):
            producer.produce(probe, value=b"x", partition=p)
        assert producer.flush(30) == 0
    finally:
        producer.close()
    target.assert_serving()


def test_attack_a_produce_stream_outliving_its_acl_gets_no_record_acknowledged_after_the_revocation(attack_cluster):
    target = attack_cluster
    topic = f"revoke-{uuid.uuid4().hex[:6]}"
    target.admin.create_topic(topic, partitions=1, replication_factor=2)
    wait_for_leaders(target, topic)
    write = AclBinding("Topic", topic, "LITERAL", "User:streamer", "*", "Write", "Allow")
    target.admin.create_acls([write])
    leader = target.admin.describe_topics([topic])[0].partitions[0].leader
    client = target.raw(target.mtls_config("streamer"), target.ssl_address(leader))
    sent: list[tuple[float, float, int, bytes]] = []  # (sent at, answered at, error code, value)
    stop = threading.Event()

    def stream():
        writer, reader = client.do_exchange(flight.FlightDescriptor.for_command(wire.dumps({"type": wire.PRODUCE})))
        writer.begin(PRODUCE_SCHEMA)
        n = 0
        while not stop.is_set() and n < 100_000:
            n += 1
            value = b"r-%d" % n
            started = time.monotonic()
            code = _produce_chunk(writer, reader, topic, n, value)
            sent.append((started, time.monotonic(), code, value))
        writer.done_writing()
        writer.close()

    thread = threading.Thread(target=stream, daemon=True)
    try:
        thread.start()
        time.sleep(1.0)
        target.admin.delete_acls([AclBindingFilter.exact(write)])  # returns once every broker applied it
        applied_at = time.monotonic()
        time.sleep(1.0)
        stop.set()
        thread.join(30)
    finally:
        stop.set()
        client.close()
    assert not thread.is_alive()
    acknowledged = [value for _s, _a, code, value in sent if code == 0]
    after = [(code, value) for started, _a, code, value in sent if started >= applied_at]
    late_acks = [value for started, answered, code, value in sent if code == 0 and answered >= applied_at]
    print(f"{len(acknowledged)} records acknowledged before the revocation, {len(after)} sent after it, "
          f"{len(late_acks)} acknowledged after it (in flight when it was applied)")
    assert acknowledged and after, (Counter(code for _s, _a, code, _v in sent), FIRST_ANSWERS)
    assert all(code == TOPIC_REFUSED for code, _v in after), after[:5]
    assert len(late_acks) <= 1  # one synchronous stream: at most the chunk in flight at that moment
    consumer = Consumer(target.admin_config)
    try:
        tp = TopicPartition(topic, 0)
        start, end = consumer.get_watermark_offsets(tp)
        logged = consumer.fetch_arrow(tp, start, end).column("value").to_pylist() if end > start else []
    finally:
        consumer.close()
    assert logged == acknowledged  # nothing refused was written, nothing acknowledged was lost
    target.assert_serving()
