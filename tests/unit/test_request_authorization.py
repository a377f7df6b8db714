"""What every call needs (broker/rpc/authorization.py over security/request_acls.py).

The table test: for every call in ``REQUIRED``, with no ACL it is refused; with exactly the ACL it
needs it is allowed; with any other single ALLOW (every operation of both resource types, except the
ones Kafka lets imply it) it is still refused. Then the completeness check (no DoAction the server
can dispatch lacks an entry: there is no default allow), the all-topics metadata filter, and through
a real ``BrokerFlightServer`` (stand-in broker): a refused controller request never reaches its
handler, a refused request inside a fetch session is answered in-stream and the session goes on.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pyarrow.flight as flight
import pytest

from ads_spark.broker.rpc import authorization, call_context
from ads_spark.broker.rpc.admin_handlers import AdminHandlers
from ads_spark.broker.rpc.call_context import CallContext
from ads_spark.broker.rpc.server import BrokerFlightServer
from ads_spark.errors import (
    ClusterAuthorizationFailedError, ErrorCode, GroupAuthorizationFailedError, TopicAuthorizationFailedError,
)
from ads_spark.protocol import request_schemas, wire
from ads_spark.security import authorizer
from ads_spark.security.authorizer import AclBinding, Acls, Operation, ResourceType
from ads_spark.security.request_acls import (
    ALTERNATIVES, FOLLOWER_FETCH, GROUP_TOPIC_REQUIRED, NO_ACL_NEEDED, REQUIRED, fetch_requirement_name,
)

BOB = CallContext("User:bob", "10.1.2.3", "EXTERNAL", "SASL_PLAINTEXT")
TOPIC = "payments"
GROUP = "billing"
REFUSALS = (TopicAuthorizationFailedError, ClusterAuthorizationFailedError, GroupAuthorizationFailedError)
CALL_TIMEOUT_S = 10


class FakeSecurity:
    """The broker's security state reduced to what authorization reads: the real authorizer over ``acls``."""

    def __init__(self, *bindings: AclBinding, enabled: bool = True):
        self.acls = Acls(bindings)
        self.authorizer_enabled = enabled

    def authorize(self, ctx, operation, resource):
        return authorizer.authorize(self.acls, authorizer.RequestContext(ctx.principal, ctx.host), operation, resource)


def allow(operation: Operation, resource_type: ResourceType, name: str = TOPIC, principal: str = "User:bob",
          permission: str = "Allow") -> AclBinding:
    if resource_type is ResourceType.CLUSTER:
        name = authorizer.CLUSTER_NAME
    elif resource_type is ResourceType.GROUP:
        name = GROUP
    return AclBinding(resource_type, name, "LITERAL", principal, "*", operation, permission)


def body_for(name: str, topics=(TOPIC,)) -> dict:
    """A body naming ``topics`` the way request ``name`` names them (authorization.TOPICS_OF), and GROUP the way
    a group request names its group (authorization.GROUPS_OF)."""
    if name in authorization.GROUPS_OF:
        return {"key": GROUP, "group_id": GROUP, "partitions": [{"topic": topic, "partition": 0} for topic in topics]}
    extractor = authorization.TOPICS_OF.get(name)
    if extractor is authorization._partition_topics:
        return {"partitions": [{"topic": topic, "partition": 0} for topic in topics]}
    if extractor is authorization._created_topics:
        return {"topics": [{"topic": topic} for topic in topics]}
    if extractor is authorization._listed_topics:
        return {"topics": list(topics)}
    if extractor is authorization._one_topic:
        return {"topic": topics[0]}
    return {}


def granted_by_other_acl(name: str, operation: Operation, resource_type: ResourceType) -> bool:
    """Whether an ALLOW of ``operation`` on ``resource_type`` legitimately grants call ``name``."""
    needed = REQUIRED[name]
    if resource_type is needed.resource_type and operation in authorizer.granting_operations(needed.operation):
        return True
    alternative = ALTERNATIVES.get(name)
    if alternative is not None and resource_type is alternative.resource_type and (
            operation in authorizer.granting_operations(alternative.operation)):
        return True
    # KIP-679: Write on a topic also lets a producer get an idempotent producer id.
    return name == "init_producer_id" and resource_type is ResourceType.TOPIC and (
        operation in authorizer.granting_operations(Operation.WRITE))


CHECKED_BEFORE_THE_HANDLER = sorted(name for name in REQUIRED
                                    if name != "metadata" and name not in authorization.PER_GROUP_ANSWERED)


@pytest.mark.parametrize("name", CHECKED_BEFORE_THE_HANDLER)
def test_every_call_is_refused_without_its_acl_allowed_with_it_and_refused_with_any_other(name):
    needed = REQUIRED[name]
    refusal = {ResourceType.TOPIC: TopicAuthorizationFailedError, ResourceType.GROUP: GroupAuthorizationFailedError
               }.get(needed.resource_type, ClusterAuthorizationFailedError)
    topics = lambda: [TOPIC]  # noqa: E731
    with pytest.raises(refusal):
        authorization.authorize_call(FakeSecurity(), BOB, name, body_for(name), topics)
    # offset_commit / offset_delete also need an operation on each topic (Kafka's table).
    also = [allow(GROUP_TOPIC_REQUIRED[name], ResourceType.TOPIC)] if name in GROUP_TOPIC_REQUIRED else []
    authorization.authorize_call(FakeSecurity(allow(needed.operation, needed.resource_type), *also), BOB, name,
                                 body_for(name), topics)
    if also:
        with pytest.raises(TopicAuthorizationFailedError):
            authorization.authorize_call(FakeSecurity(allow(needed.operation, needed.resource_type)), BOB, name,
                                         body_for(name), topics)
    for resource_type, operations in authorizer.VALID_OPERATIONS.items():
        for operation in operations:
            security = FakeSecurity(allow(operation, resource_type))
            if granted_by_other_acl(name, operation, resource_type) and not also:
                authorization.authorize_call(security, BOB, name, body_for(name), topics)
                continue
            with pytest.raises(REFUSALS):
                authorization.authorize_call(security, BOB, name, body_for(name), topics)


@pytest.mark.parametrize("name", sorted(authorization.TOPICS_OF.keys() - {"metadata"}))
def test_a_topic_call_needs_its_permission_on_every_topic_it_names(name):
    security = FakeSecurity(allow(REQUIRED[name].operation, ResourceType.TOPIC))
    with pytest.raises(TopicAuthorizationFailedError) as refused:
        names = ("other",) if authorization.TOPICS_OF[name] is authorization._one_topic else (TOPIC, "other")
        authorization.authorize_call(security, BOB, name, body_for(name, names))
    # The refusal names the operation and the resource, nothing of the ACLs, and says the same for a
    # topic that does not exist: the check never looks.
    assert refused.value.message == f"User:bob is not authorized to {REQUIRED[name].operation.value} Topic:other"


def test_a_grant_to_someone_else_or_a_deny_does_not_help():
    read = allow(Operation.READ, ResourceType.TOPIC)
    for security in (FakeSecurity(allow(Operation.READ, ResourceType.TOPIC, principal="User:alice")),
                     FakeSecurity(read, allow(Operation.READ, ResourceType.TOPIC, principal="User:*",
                                              permission="Deny"))):
        with pytest.raises(TopicAuthorizationFailedError):
            authorization.authorize_call(security, BOB, "fetch", body_for("fetch"))


def test_a_follower_fetch_needs_cluster_action_and_read_on_the_topic_is_not_enough():
    request = {**body_for("fetch"), "replica_id": 1}
    name = fetch_requirement_name(request["replica_id"], False)
    assert name == FOLLOWER_FETCH and fetch_requirement_name(-1, True) == FOLLOWER_FETCH
    with pytest.raises(ClusterAuthorizationFailedError):
        authorization.authorize_call(FakeSecurity(allow(Operation.READ, ResourceType.TOPIC)), BOB, name, request)
    authorization.authorize_call(FakeSecurity(allow(Operation.CLUSTER_ACTION, ResourceType.CLUSTER)), BOB, name,
                                 request)


def test_no_authorizer_or_no_security_allows_everything_and_an_unknown_name_is_refused():
    for name in REQUIRED:
        authorization.authorize_call(FakeSecurity(enabled=False), BOB, name, body_for(name))
        authorization.authorize_call(None, BOB, name, body_for(name))
    with pytest.raises(ClusterAuthorizationFailedError):
        authorization.authorize_call(FakeSecurity(), BOB, "a_call_nobody_listed", {})


def test_a_stream_reuses_its_decisions_until_the_acl_version_moves_then_a_revocation_applies_at_once():
    security = FakeSecurity(allow(Operation.WRITE, ResourceType.TOPIC))
    security.acl_cache_version = 1
    asked = []
    decide = security.authorize
    security.authorize = lambda *args: asked.append(args[1:]) or decide(*args)
    stream = CallContext("User:bob", "10.1.2.3", "EXTERNAL", "SASL_PLAINTEXT")  # one context per stream
    for _ in range(3):
        authorization.authorize_call(security, stream, "produce", {"topic": TOPIC})
    assert len(asked) == 1
    security.acls, security.acl_cache_version = Acls(), 2  # the broker applied a revocation
    with pytest.raises(TopicAuthorizationFailedError):
        authorization.authorize_call(security, stream, "produce", {"topic": TOPIC})
    # Another call (another context object) never sees this stream's decisions.
    security.acls, security.acl_cache_version = Acls([allow(Operation.WRITE, ResourceType.TOPIC)]), 3
    authorization.authorize_call(security, stream, "produce", {"topic": TOPIC})
    with pytest.raises(TopicAuthorizationFailedError):
        other = CallContext("User:eve", "10.1.2.3", "EXTERNAL", "SASL_PLAINTEXT")
        authorization.authorize_call(security, other, "produce", {"topic": TOPIC})


class AnyHandlers:
    """Stands in for a handler object: every attribute is a handler, every ``handlers()`` an empty table."""

    def __getattr__(self, name):
        return (lambda: {}) if name == "handlers" else (lambda body: body)


def test_every_call_the_server_can_dispatch_has_an_entry_there_is_no_default_allow():
    from ads_spark.broker.broker import Broker
    stand_in = SimpleNamespace(data=AnyHandlers(), control=AnyHandlers(), verify=AnyHandlers(),
                               security_handlers=AnyHandlers(), admin=AdminHandlers(None), groups=AnyHandlers())
    dispatched = set(Broker.action_handlers(stand_in)) | set(request_schemas.ACTION_SCHEMAS)
    dispatched |= {wire.FETCH, wire.FETCH_SESSION, wire.PRODUCE, FOLLOWER_FETCH}
    missing = sorted(dispatched - set(REQUIRED) - NO_ACL_NEEDED)
    assert missing == [], f"calls without a permission in security/request_acls.REQUIRED: {missing}"
    topic_calls = {name for name, needed in REQUIRED.items() if needed.resource_type is ResourceType.TOPIC}
    assert topic_calls <= set(authorization.TOPICS_OF), "a TOPIC call whose topics authorization cannot read"
    group_calls = {name for name, needed in REQUIRED.items() if needed.resource_type is ResourceType.GROUP}
    assert group_calls == set(authorization.GROUPS_OF) | authorization.PER_GROUP_ANSWERED


def test_all_topics_metadata_leaves_out_what_the_caller_may_not_describe():
    topics = [{"topic": name, "error_code": 0, "partitions": [{"partition": 0}], "config": {"a": "b"}}
              for name in ("payments", "secret", "public")]
    security = FakeSecurity(allow(Operation.READ, ResourceType.TOPIC, "payments"),
                            allow(Operation.ALTER_CONFIGS, ResourceType.TOPIC, "public"),
                            allow(Operation.DESCRIBE, ResourceType.TOPIC, "public"))
    shown = authorization.visible_metadata(security, BOB, None, topics, include_config=True)
    assert [t["topic"] for t in shown] == ["payments", "public"]
    assert "config" not in shown[0] and shown[1]["config"] == {"a": "b"}  # configs need DescribeConfigs
    missing = [{"topic": "nosuch", "error_code": 3, "partitions": []}]
    named = authorization.visible_metadata(security, BOB, ["secret", "nosuch"], [topics[1]] + missing, False)
    # A forbidden topic and a missing one the caller may not see are answered alike.
    assert [(t["topic"], t["error_code"]) for t in named] == [("secret", 29), ("nosuch", 29)]
    assert named[0]["message"].replace("secret", "X") == named[1]["message"].replace("nosuch", "X")


# ---- through the server ---------------------------------------------------------------------------


class StandIn:
    """A broker reduced to call recording; its security says who may do what."""

    config: dict = {}

    def __init__(self, security):
        self.security = security
        self.metadata = SimpleNamespace(topics={TOPIC: {}})
        self.calls: list[str] = []
        self.principals: list[str] = []

    def action_handlers(self):
        def record(name):
            def handler(body):
                self.calls.append(name)
                self.principals.append(call_context.current().principal)
                return {"error_code": 0}
            return handler
        return {name: record(name) for name in ("leader_and_isr", "stop_replica", "init_producer_id")}

    def handle_fetch(self, request, replica_messages=False, typed=None):
        self.calls.append("fetch")
        return [({"topic": entry["topic"], "partition": entry["partition"], "error_code": 0, "high_watermark": 0},
                 []) for entry in request["partitions"]]


@pytest.fixture()
def served():
    made = []

    def serve(security):
        broker = StandIn(security)
        server = BrokerFlightServer(broker, "127.0.0.1", 0)
        thread = threading.Thread(target=server.serve, daemon=True)
        thread.start()
        client = flight.FlightClient(f"grpc+tcp://127.0.0.1:{server.port}")
        made.append((server, thread, client))
        return broker, client
    yield serve
    for server, thread, client in made:
        client.close()
        server.shutdown()
        thread.join(CALL_TIMEOUT_S)


CONTROLLER_BODIES = {
    "leader_and_isr": {"controller_epoch": 1000, "partitions": []},
    "stop_replica": {"controller_epoch": 1000, "partitions": [{"topic": TOPIC, "partition": 0, "delete": True}]},
}


@pytest.mark.parametrize("name", sorted(CONTROLLER_BODIES))
def test_a_refused_controller_request_never_reaches_its_handler(served, name):
    # Plaintext callers are User:ANONYMOUS; Read on the topic is not ClusterAction.
    broker, client = served(FakeSecurity(allow(Operation.READ, ResourceType.TOPIC, principal="User:ANONYMOUS")))
    with pytest.raises(flight.FlightError) as refused:
        list(client.do_action(flight.Action(name, wire.dumps(CONTROLLER_BODIES[name]))))
    assert wire.to_ads_error(refused.value).code is ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert broker.calls == []


def test_with_the_acl_the_handler_runs_with_the_callers_context(served):
    broker, client = served(FakeSecurity(allow(Operation.CLUSTER_ACTION, ResourceType.CLUSTER,
                                               principal="User:ANONYMOUS")))
    list(client.do_action(flight.Action("stop_replica", wire.dumps(CONTROLLER_BODIES["stop_replica"]))))
    assert broker.calls == ["stop_replica"] and broker.principals == ["User:ANONYMOUS"]
    assert call_context.current() is call_context.DEFAULT  # nothing leaks into the test's thread


def _session_request(client, writer, reader, request: dict) -> dict:
    writer.write_metadata(wire.dumps(request))
    while True:
        chunk = reader.read_chunk()
        meta = wire.loads(chunk.app_metadata, "answer")
        if meta.get("end"):
            return meta


def test_a_refused_request_inside_a_fetch_session_is_answered_in_stream_and_the_session_goes_on(served):
    broker, client = served(FakeSecurity(allow(Operation.READ, ResourceType.TOPIC, principal="User:ANONYMOUS")))
    descriptor = flight.FlightDescriptor.for_command(wire.dumps({"type": wire.FETCH_SESSION}))
    writer, reader = client.do_exchange(descriptor)
    base = {"type": "fetch", "max_wait_ms": 0}
    try:
        posing = {**base, "replica_id": 1, "partitions": [{"topic": TOPIC, "partition": 0, "fetch_offset": 0}]}
        answer = _session_request(client, writer, reader, posing)
        assert answer["error_code"] == int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        forbidden = {**base, "partitions": [{"topic": "other", "partition": 0, "fetch_offset": 0}]}
        assert _session_request(client, writer, reader, forbidden)["error_code"] == 29
        allowed = {**base, "partitions": [{"topic": TOPIC, "partition": 0, "fetch_offset": 0}]}
        answer = _session_request(client, writer, reader, allowed)
        assert answer.get("error_code", 0) == 0
        assert broker.calls == ["fetch"]  # only the allowed request reached the broker
    finally:
        writer.done_writing()
        writer.close()
