"""The broker's security state without ZooKeeper: ACL cache versions, tokens and their revocation, the cost
of an unknown user, the security actions' input checks, and the `ads acls` flags."""

from __future__ import annotations

import argparse

import pytest

from ads_spark.broker.rpc import call_context
from ads_spark.broker.rpc.call_context import CallContext
from ads_spark.broker.rpc.security_handlers import SecurityHandlers
from ads_spark.broker.security_state import AUTHENTICATION_FAILED, BrokerSecurity
from ads_spark.broker.zk.security_store import (
    acl_resource_path, change_sequence, decode_resource_name, encode_resource_name,
)
from ads_spark.cli import acls_cmd
from ads_spark.errors import AdsError, InvalidRequestError, SecurityDisabledError
from ads_spark.protocol import request_schemas
from ads_spark.security import credentials
from ads_spark.security.authorizer import Acls, AclBinding, Operation, PatternType, Resource, ResourceType
from ads_spark.security.credentials import (
    MIN_ITERATIONS, AuthenticationError, Secret, StoredCredential, TokenExpiredError, TokenRevokedError,
)

SECRET = b"s" * 32
ITERATIONS = MIN_ITERATIONS


def settings(**overrides):
    values = {"authorizer.class.name": "ads.security.AclAuthorizer", "super.users": "User:admin",
              "allow.everyone.if.no.acl.found": False, "authentication.token.lifetime.ms": 60_000,
              "credential.hash.iterations": ITERATIONS}
    values.update(overrides)
    return values


class Clock:
    def __init__(self, now_ms: int = 1_000_000):
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def credential(password: str, version: int) -> StoredCredential:
    return StoredCredential.create(password, b"salt" * 4, version, ITERATIONS)


def security_with_user(clock=None, **overrides) -> BrokerSecurity:
    security = BrokerSecurity(settings(**overrides), clock_ms=clock or Clock())
    security.apply_secrets([SECRET])
    security.apply_credentials({"alice": credential("right", 5)})
    return security


def ctx(principal: str, host: str = "10.0.0.1", protocol: str = "PLAINTEXT", basic=None) -> CallContext:
    return CallContext(principal, host, "L", protocol, basic)


def read_acl(principal: str, topic: str = "payments") -> AclBinding:
    return AclBinding(ResourceType.TOPIC, topic, PatternType.LITERAL, principal, "*", Operation.READ, "Allow")


# ---- ACL cache -----------------------------------------------------------------------------------------

def test_before_the_acls_load_only_super_users_are_allowed():
    security = BrokerSecurity(settings())
    assert not security.acls_loaded and security.acl_cache_version == -1
    topic = Resource.topic("payments")
    refused = security.authorize(ctx("User:alice"), Operation.READ, topic)
    assert not refused.allowed and "not loaded" in refused.reason
    assert security.authorize(ctx("User:admin"), Operation.READ, topic).allowed


def test_the_cache_swaps_whole_versions_and_ignores_an_older_one():
    security = BrokerSecurity(settings())
    topic = Resource.topic("payments")
    assert security.apply_acls(Acls(), 0)
    assert not security.authorize(ctx("User:alice"), Operation.READ, topic).allowed
    assert security.apply_acls(Acls([read_acl("User:alice")]), 3)
    assert security.authorize(ctx("User:alice"), Operation.READ, topic).allowed
    assert security.authorize(ctx("User:alice"), Operation.DESCRIBE, topic).allowed  # Read implies Describe
    assert not security.authorize(ctx("User:bob"), Operation.READ, topic).allowed
    assert not security.apply_acls(Acls(), 2)  # a reload that read an older change sequence arrives late
    assert security.acl_cache_version == 3 and len(security.acls) == 1
    assert security.apply_acls(Acls(), 4)
    assert not security.authorize(ctx("User:alice"), Operation.READ, topic).allowed


def test_without_an_authorizer_everything_is_allowed_and_allow_everyone_applies_when_set():
    off = BrokerSecurity(settings(**{"authorizer.class.name": ""}))
    assert not off.authorizer_enabled
    assert off.authorize(ctx("User:x"), Operation.ALTER, Resource.cluster()).allowed
    open_when_no_acl = BrokerSecurity(settings(**{"allow.everyone.if.no.acl.found": True}))
    open_when_no_acl.apply_acls(Acls([read_acl("User:alice", "other")]), 1)
    assert open_when_no_acl.authorize(ctx("User:x"), Operation.WRITE, Resource.topic("payments")).allowed
    assert not open_when_no_acl.authorize(ctx("User:x"), Operation.WRITE, Resource.topic("other")).allowed


# ---- tokens ----------------------------------------------------------------------------------------------

def test_authenticate_issues_a_token_every_call_then_maps_to_the_principal():
    clock = Clock()
    security = security_with_user(clock)
    answer = security.authenticate("alice", Secret("right"))
    assert answer["principal"] == "User:alice" and answer["expiry_ms"] == clock.now_ms + 60_000
    assert "right" not in repr(answer)
    assert security.principal_for_token(answer["token"]) == "User:alice"
    clock.now_ms += 60_000
    with pytest.raises(TokenExpiredError):
        security.principal_for_token(answer["token"])


def test_a_changed_password_or_a_deleted_user_revokes_the_tokens():
    security = security_with_user()
    token = security.authenticate("alice", Secret("right"))["token"]
    security.apply_credentials({"alice": credential("new", 6)})  # what a reload after the change holds
    with pytest.raises(TokenRevokedError, match="password changed"):
        security.principal_for_token(token)
    token = security.authenticate("alice", Secret("new"))["token"]
    security.apply_credentials({})
    with pytest.raises(TokenRevokedError, match="deleted"):
        security.principal_for_token(token)


def test_wrong_password_unknown_user_and_bad_names_get_the_same_answer_after_one_hash(monkeypatch):
    security = security_with_user()
    hashed = []
    real = credentials.hash_password

    def counting(password, salt, iterations=credentials.DEFAULT_ITERATIONS):
        hashed.append(iterations)
        return real(password, salt, iterations)

    monkeypatch.setattr(credentials, "hash_password", counting)
    for username, password in (("alice", "wrong"), ("nobody", "right"), ("bad:name*", "x"), ("alice", "")):
        hashed.clear()
        with pytest.raises(AuthenticationError) as refused:
            security.authenticate(username, Secret(password))
        assert str(refused.value).endswith(AUTHENTICATION_FAILED) and not refused.value.retriable
        if password:  # an empty password is refused before hashing: it cannot be anybody's
            assert hashed == [ITERATIONS], (username, hashed)  # the configured cost, known user or not


def test_a_known_and_an_unknown_user_cost_the_same_zookeeper_read():
    """A cache hit for known users only made an unknown name ~1-2 ms slower (a ZooKeeper read): an oracle."""
    security = security_with_user()
    security.store = FakeStore(security._credentials)
    for username in ("alice", "nobody"):
        with pytest.raises(AuthenticationError):
            security.authenticate(username, Secret("wrong"))
    assert security.store.credential_reads == ["alice", "nobody"]


# ---- handlers --------------------------------------------------------------------------------------------

class FakeStore:
    def __init__(self, credentials=None):
        self.created: list[list[AclBinding]] = []
        self.credentials = dict(credentials or {})
        self.credential_reads: list[str] = []

    def read_credential(self, username):
        self.credential_reads.append(username)
        return self.credentials.get(username)

    def create_acls(self, bindings):
        self.created.append(bindings)
        return 7

    def latest_acl_change(self):
        return 7


class FakeBroker:
    def __init__(self):
        self.security = security_with_user()
        self.security.store = FakeStore(self.security._credentials)


def test_authenticate_is_refused_off_sasl_listeners_and_reads_the_basic_header_on_them():
    handlers = SecurityHandlers(FakeBroker())
    with call_context.using(ctx("User:ANONYMOUS", basic=("alice", Secret("right")))):
        with pytest.raises(SecurityDisabledError):
            handlers.handle_authenticate({})
    with call_context.using(ctx("User:ANONYMOUS", protocol="SASL_PLAINTEXT")):
        with pytest.raises(AuthenticationError):
            handlers.handle_authenticate({})
    with call_context.using(ctx("User:ANONYMOUS", protocol="SASL_SSL", basic=("alice", Secret("right")))):
        assert handlers.handle_authenticate({})["principal"] == "User:alice"


def test_create_acls_checks_every_binding_before_writing_any():
    broker = FakeBroker()
    handlers = SecurityHandlers(broker)
    good = read_acl("User:alice").to_dict()
    bad = {**good, "operation": "ClusterAction"}  # not an operation on a topic
    with pytest.raises(InvalidRequestError, match=r"acls\[1\]"):
        handlers.handle_create_acls({"acls": [good, bad]})
    assert broker.security.store.created == []
    assert handlers.handle_create_acls({"acls": [good]})["version"] == 8  # sequence 7 -> version 8


def test_a_refused_password_field_never_shows_the_password():
    check = request_schemas.checker("alter_user_credentials")
    for password in ("hunter2\x00", "hunter2" + "x" * 2000, "hunter2\ud800"):
        with pytest.raises(InvalidRequestError) as refused:
            check({"upsert": [{"username": "alice", "password": password}]})
        assert "hunter2" not in str(refused.value)


# ---- ZooKeeper names ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["payments", "*", ".", "..", "a.b", "kafka-cluster", "x%y", "%2E"])
def test_resource_names_encode_to_one_znode_name_and_back(name):
    encoded = encode_resource_name(name)
    assert "/" not in encoded and encoded not in (".", "..") and decode_resource_name(encoded) == name
    assert acl_resource_path(PatternType.PREFIXED, ResourceType.TOPIC, name).startswith("/acls/PREFIXED/Topic/")


def test_change_sequence_reads_only_change_znodes():
    assert change_sequence("acl_change_0000000042") == 42
    assert change_sequence("other_0001") is None and change_sequence("acl_change_x") is None


# ---- `ads acls` flags -----------------------------------------------------------------------------------

def acl_args(**given) -> argparse.Namespace:
    values = {"topic": [], "cluster": False, "group": [], "pattern_type": "literal", "allow_principals": [],
              "deny_principals": [], "allow_hosts": [], "deny_hosts": [], "operations": [], "producer": False,
              "consumer": False}
    values.update(given)
    return argparse.Namespace(**values)


def test_producer_and_consumer_flags_expand_to_kafkas_operations():
    produced = acls_cmd._bindings(acl_args(topic=["t"], allow_principals=["User:p"], producer=True))
    assert {(b["resource_type"], b["operation"]) for b in produced} == {
        ("Topic", "Write"), ("Topic", "Describe"), ("Topic", "Create"), ("Cluster", "IdempotentWrite")}
    consumed = acls_cmd._bindings(acl_args(topic=["t"], allow_principals=["User:c"], consumer=True,
                                           pattern_type="prefixed"))
    assert {(b["operation"], b["pattern_type"], b["host"]) for b in consumed} == {
        ("Read", "PREFIXED", "*"), ("Describe", "PREFIXED", "*")}
    # --consumer --group: Read on each group too (Kafka's kafka-acls --consumer --group)
    grouped = acls_cmd._bindings(acl_args(topic=["t"], group=["g1", "g2"], allow_principals=["User:c"], consumer=True))
    assert {(b["resource_type"], b["resource_name"], b["operation"]) for b in grouped} == {
        ("Topic", "t", "Read"), ("Topic", "t", "Describe"), ("Group", "g1", "Read"), ("Group", "g2", "Read")}
    explicit = acls_cmd._bindings(acl_args(group=["g"], allow_principals=["User:c"], operations=["Describe"]))
    assert [(b["resource_type"], b["operation"]) for b in explicit] == [("Group", "Describe")]
    for binding in produced + consumed + grouped + explicit:
        AclBinding.from_dict(binding)


def test_acl_flags_refuse_what_cannot_mean_anything():
    for args, problem in ((acl_args(topic=["t"], allow_principals=["User:c"], producer=True, group=["g"]), "--group"),
                          (acl_args(topic=["t"]), "principal"),
                          (acl_args(allow_principals=["User:a"]), "resource"),
                          (acl_args(topic=["t"], allow_hosts=["1.2.3.4"]), "--allow-principal"),
                          (acl_args(topic=["t"], allow_principals=["User:a"], pattern_type="match"), "filters")):
        with pytest.raises(AdsError, match=problem):
            acls_cmd._bindings(args)
    built = acls_cmd._bindings(acl_args(cluster=True, deny_principals=["User:a"], deny_hosts=["1.2.3.4"],
                                        operations=["Alter"]))
    assert built == [{"resource_type": "Cluster", "resource_name": "kafka-cluster", "pattern_type": "LITERAL",
                      "principal": "User:a", "host": "1.2.3.4", "operation": "Alter", "permission": "Deny"}]


def test_a_reload_reads_the_change_sequence_before_the_acls_it_reports_at():
    from ads_spark.broker.security_state import _ZkSync

    binding = read_acl("User:alice")

    class OrderedStore:
        def __init__(self):
            self.calls = []

        def latest_acl_change(self):
            self.calls.append("sequence")
            return 41

        def read_acls(self):
            self.calls.append("acls")
            return [binding]

    security, store = BrokerSecurity(settings()), OrderedStore()
    _ZkSync(security, session=None, store=store)._reload("acls")
    assert store.calls == ["sequence", "acls"]
    assert security.acl_cache_version == 42 and list(security.acls) == [binding]
