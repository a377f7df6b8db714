"""The ACL authorizer (ads_spark/security/authorizer.py) against Kafka's documented ACL semantics.

Examples from Kafka's rules (PREFIXED matching, DENY over ALLOW, the implied operations, hosts,
super users, allow.everyone.if.no.acl.found), validation at the boundary, the ``ads acls`` filters,
two hypothesis properties against brute-force models written here from the rules as stated (not from
the module), and the table of which request needs which permission (every wire action has an entry).
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ads_spark.errors import InvalidConfigError, InvalidRequestError
from ads_spark.protocol import request_schemas, wire
from ads_spark.security.authorizer import (
    AclBinding,
    AclBindingFilter,
    Acls,
    Operation,
    Permission,
    RequestContext,
    Resource,
    ResourceType,
    VALID_OPERATIONS,
    authorize,
    parse_super_users,
)
from ads_spark.security.request_acls import (
    ALTERNATIVES,
    FOLLOWER_FETCH,
    NO_ACL_NEEDED,
    REQUIRED,
    fetch_requirement_name,
)

ALICE, BOB = "User:alice", "User:bob"


def acl(name, op="Read", perm="Allow", pattern="LITERAL", principal=ALICE, host="*", kind="Topic"):
    return AclBinding(kind, name, pattern, principal, host, op, perm)


def cluster_acl(op, perm="Allow", principal=ALICE, host="*"):
    return AclBinding("Cluster", "kafka-cluster", "LITERAL", principal, host, op, perm)


def allowed(acls, op, topic=None, principal=ALICE, host="10.0.0.1", supers=frozenset(), allow_if_no_acl=False):
    resource = Resource.topic(topic) if topic is not None else Resource.cluster()
    return authorize(Acls(acls), RequestContext(principal, host), Operation.parse(op), resource, supers,
                     allow_if_no_acl).allowed


# ---- examples from Kafka's semantics --------------------------------------------------------------

def test_prefixed_pattern_matches_by_case_sensitive_prefix():
    pay = [acl("pay", pattern="PREFIXED")]
    assert allowed(pay, "Read", "payments")
    assert allowed(pay, "Read", "pay")
    assert not allowed(pay, "Read", "PAYMENTS")
    assert not allowed(pay, "Read", "pa")
    assert allowed([acl("p", pattern="PREFIXED")], "Read", "p")


def test_overlapping_prefixes_each_match_only_what_they_prefix():
    acls = Acls([acl("f", pattern="PREFIXED", op="Read"), acl("fooa", pattern="PREFIXED", op="Write"),
                 acl("foobar", pattern="PREFIXED", op="Delete")])
    found = {binding.resource_name for binding in acls.on_resource(Resource.topic("foobar"))}
    assert found == {"f", "foobar"}
    assert not allowed(list(acls), "Write", "foobar")
    assert allowed(list(acls), "Write", "fooab") and allowed(list(acls), "Delete", "foobarbaz")


def test_literal_pattern_is_exact_and_star_is_every_topic():
    assert not allowed([acl("pay")], "Read", "payments")
    assert allowed([acl("*")], "Read", "anything")
    assert not allowed([acl("*")], "Read", None)  # a Topic wildcard is not the Cluster


def test_deny_beats_allow_across_pattern_types_and_wildcard_principal():
    grants = [acl("payments", op="All")]
    assert allowed(grants, "Write", "payments")
    assert not allowed(grants + [acl("pay", op="Write", perm="Deny", pattern="PREFIXED", principal="User:*")],
                       "Write", "payments")
    assert not allowed(grants + [acl("*", op="All", perm="Deny")], "Read", "payments")
    decision = authorize(Acls(grants + [acl("*", op="Write", perm="Deny", principal="User:*")]),
                         RequestContext(ALICE, "h"), Operation.WRITE, Resource.topic("payments"))
    assert not decision.allowed and "DENY User:* Write" in decision.reason and decision.acl.resource_name == "*"


def test_implied_operations_apply_to_allow_only():
    for op in ("Read", "Write", "Delete", "Alter", "Describe", "All"):
        assert allowed([acl("t", op=op)], "Describe", "t"), op
    for op in ("Create", "DescribeConfigs", "AlterConfigs"):
        assert not allowed([acl("t", op=op)], "Describe", "t"), op
    assert allowed([acl("t", op="AlterConfigs")], "DescribeConfigs", "t")
    assert not allowed([acl("t", op="DescribeConfigs")], "AlterConfigs", "t")
    assert not allowed([acl("t", op="Describe")], "Read", "t")
    assert not allowed([acl("t", op="Read")], "Write", "t")
    # Kafka: a DENY Read does not deny Describe (implications are for ALLOW only)
    assert allowed([acl("t", op="Describe"), acl("t", op="Read", perm="Deny")], "Describe", "t")
    for op in Operation:
        if op in VALID_OPERATIONS[ResourceType.TOPIC]:
            assert allowed([acl("t", op="All")], op.value, "t")
            assert not allowed([acl("t", op="All"), acl("t", op="All", perm="Deny")], op.value, "t")


def test_hosts_and_principals_must_match_or_be_wildcards():
    from_h1 = [acl("t", host="10.0.0.1")]
    assert allowed(from_h1, "Read", "t", host="10.0.0.1")
    assert not allowed(from_h1, "Read", "t", host="10.0.0.2")
    assert not allowed([acl("t")], "Read", "t", principal=BOB)
    assert allowed([acl("t", principal="User:*")], "Read", "t", principal=BOB)
    assert not allowed([acl("t")], "Read", "t", principal="User:ALICE")  # principals are case-sensitive


def test_super_users_pass_even_a_deny():
    deny = [acl("t", op="All", perm="Deny", principal="User:*")]
    assert allowed(deny, "Write", "t", supers=frozenset({ALICE}))
    assert not allowed(deny, "Write", "t", principal=BOB, supers=frozenset({ALICE}))
    assert allowed([], "ClusterAction", None, principal="User:broker", supers=parse_super_users("User:broker"))


def test_allow_everyone_applies_only_when_no_acl_is_on_the_resource():
    assert allowed([], "Write", "t", allow_if_no_acl=True)
    assert not allowed([], "Write", "t", allow_if_no_acl=False)
    # an ACL on the resource for someone else (or another operation) ends "no ACL found"
    assert not allowed([acl("t", principal=BOB)], "Write", "t", allow_if_no_acl=True)
    assert not allowed([acl("t", op="Read")], "Write", "t", allow_if_no_acl=True)
    assert not allowed([acl("t", pattern="PREFIXED")], "Write", "tx", allow_if_no_acl=True)
    assert allowed([acl("other")], "Write", "t", allow_if_no_acl=True)


def test_cluster_operations_and_follower_fetch():
    assert allowed([cluster_acl("ClusterAction")], "ClusterAction", None)
    assert not allowed([acl("t", op="All")], "ClusterAction", None)
    assert allowed([cluster_acl("Alter")], "Describe", None)
    assert allowed([cluster_acl("IdempotentWrite")], "IdempotentWrite", None)


def test_reason_names_the_deciding_acl_or_why():
    context = RequestContext(ALICE, "h")
    grant = acl("pay", op="Write", pattern="PREFIXED")
    decision = authorize(Acls([grant]), context, Operation.DESCRIBE, Resource.topic("payments"))
    assert decision.allowed and decision.acl == grant and "Topic:PREFIXED:pay" in decision.reason
    assert "super user" in authorize(Acls(), context, Operation.READ, Resource.topic("t"), frozenset({ALICE})).reason
    assert "allow.everyone.if.no.acl.found=false" in authorize(Acls(), context, "Read", Resource.topic("t")).reason
    assert "no ALLOW ACL" in authorize(Acls([grant]), context, Operation.READ, Resource.topic("pay")).reason


# ---- validation at the boundary --------------------------------------------------------------------

@pytest.mark.parametrize("fields, error, field_named", [
    ({"operation": "Fly"}, InvalidRequestError, "operation"),
    ({"operation": "Any"}, InvalidRequestError, "operation"),
    ({"pattern_type": "MATCH"}, InvalidRequestError, "pattern_type"),
    ({"pattern_type": "regex"}, InvalidRequestError, "pattern_type"),
    ({"resource_type": "TransactionalId"}, InvalidRequestError, "resource_type"),
    # Group (issue #24): Read, Describe, Delete; its name becomes a znode name (no '/')
    ({"resource_type": "Group", "operation": "Write"}, InvalidRequestError, "operation"),
    ({"resource_type": "Group", "resource_name": "a/b"}, InvalidRequestError, "resource_name"),
    ({"resource_type": "Group", "resource_name": "g" * 256}, InvalidRequestError, "resource_name"),
    ({"principal": "alice"}, InvalidRequestError, "principal"),
    ({"principal": "Group:alice"}, InvalidRequestError, "principal"),
    ({"principal": "User:"}, InvalidRequestError, "principal"),
    ({"principal": "User:a*"}, InvalidRequestError, "principal"),
    ({"principal": "User:a;User:b"}, InvalidRequestError, "principal"),
    ({"pattern_type": "PREFIXED", "resource_name": "*"}, InvalidRequestError, "pattern_type"),
    ({"resource_name": ""}, InvalidRequestError, "resource_name"),
    ({"resource_name": "a/b"}, InvalidRequestError, "resource_name"),
    ({"operation": "ClusterAction"}, InvalidRequestError, "operation"),
    ({"permission": "Maybe"}, InvalidRequestError, "permission"),
    ({"host": ""}, InvalidRequestError, "host"),
    ({"host": "h1,h2"}, InvalidRequestError, "host"),
    ({"resource_type": "Cluster", "resource_name": "other", "operation": "Alter"}, InvalidRequestError,
     "resource_name"),
    ({"resource_type": "Cluster", "resource_name": "kafka-cluster", "operation": "Read"}, InvalidRequestError,
     "operation"),
])
def test_bad_acl_fields_are_refused_naming_the_field(fields, error, field_named):
    good = {"resource_type": "Topic", "resource_name": "t", "pattern_type": "LITERAL", "principal": ALICE,
            "host": "*", "operation": "Read", "permission": "Allow"}
    with pytest.raises(error) as raised:
        AclBinding(**{**good, **fields})
    assert str(raised.value).split(":")[1].strip() == field_named, str(raised.value)


def test_names_parse_in_kafka_spellings_and_round_trip_as_json():
    binding = AclBinding("topic", "pay", "prefixed", ALICE, "*", "read", "ALLOW")
    assert binding.operation is Operation.READ and binding.permission is Permission.ALLOW
    assert Operation.parse("IdempotentWrite") is Operation.parse("idempotent_write") is Operation.IDEMPOTENT_WRITE
    assert AclBinding.from_dict(binding.to_dict()) == binding
    with pytest.raises(InvalidRequestError, match="missing fields"):
        AclBinding.from_dict({k: v for k, v in binding.to_dict().items() if k != "host"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        binding.host = "h"


def test_super_users_config_is_checked():
    assert parse_super_users("User:a; User:CN=b,O=c") == frozenset({"User:a", "User:CN=b,O=c"})
    for bad in ("alice", "User:*", "User:a;bob"):
        with pytest.raises(InvalidConfigError, match="super.users"):
            parse_super_users(bad)


# ---- the set and its filters (ads acls list / remove) -----------------------------------------------

def test_acls_are_immutable_and_filters_follow_kafka():
    lit, pre, star = acl("payments"), acl("pay", pattern="PREFIXED", op="Write"), acl("*", principal=BOB)
    base = Acls([lit])
    grown = base.add(pre, star)
    assert len(base) == 1 and len(grown) == 3 and pre in grown
    by = lambda **kw: set(grown.matching(AclBindingFilter(**kw)))  # noqa: E731
    assert by() == {lit, pre, star}
    assert by(resource_name="pay") == {pre}  # ANY: the name exactly, any pattern type
    assert by(resource_name="pay", pattern_filter="LITERAL") == set()
    assert by(resource_name="payments", pattern_filter="MATCH") == {lit, pre, star}
    assert by(resource_name="pays", pattern_filter="MATCH") == {pre, star}
    assert by(pattern_filter="PREFIXED") == {pre}
    assert by(principal=BOB) == {star} and by(operation="Write") == {pre} and by(permission="Deny") == set()
    assert by(resource_type="Cluster") == set()
    shrunk = grown.remove(AclBindingFilter(resource_name="payments", pattern_filter="MATCH", principal=ALICE))
    assert set(shrunk) == {star} and len(grown) == 3
    assert grown.remove(AclBindingFilter.exact(pre)) == Acls([lit, star])
    with pytest.raises(InvalidRequestError, match="principal"):
        AclBindingFilter(principal="bob")


# ---- properties against brute-force models --------------------------------------------------------

TOPIC_OPS = ["Read", "Write", "Create", "Delete", "Alter", "Describe", "DescribeConfigs", "AlterConfigs", "All"]
CLUSTER_OPS = ["Create", "Alter", "Describe", "ClusterAction", "DescribeConfigs", "AlterConfigs",
               "IdempotentWrite", "All"]
ALL_OPS = sorted(set(TOPIC_OPS) | set(CLUSTER_OPS))
# Which ACL operations an ALLOW must have to grant the asked one, spelled out from Kafka's documentation.
GRANTED_BY = {op: {op, "All"} for op in ALL_OPS}
GRANTED_BY["Describe"] |= {"Read", "Write", "Delete", "Alter"}
GRANTED_BY["DescribeConfigs"] |= {"AlterConfigs"}
PRINCIPALS = ["User:alice", "User:bob", "User:*"]
HOSTS = ["*", "h1", "h2"]
NAMES = st.text("ab", min_size=1, max_size=3)

# Biased towards few principals, hosts and the operations that imply others, so that ACLs collide on
# one request often: that is where DENY-over-ALLOW and the implications decide.
BIASED_PRINCIPALS = st.one_of(st.just("User:alice"), st.sampled_from(PRINCIPALS))
BIASED_HOSTS = st.one_of(st.just("*"), st.sampled_from(HOSTS))
BIASED_TOPIC_OPS = st.one_of(st.sampled_from(["Read", "Describe", "All", "AlterConfigs"]), st.sampled_from(TOPIC_OPS))
topic_acls = st.tuples(st.just("Topic"), st.one_of(NAMES, st.just("*")), st.sampled_from(["LITERAL", "PREFIXED"]),
                       BIASED_PRINCIPALS, BIASED_HOSTS,
                       BIASED_TOPIC_OPS,
                       st.sampled_from(["Allow", "Deny"])).filter(lambda t: not (t[1] == "*" and t[2] == "PREFIXED"))
cluster_acls = st.tuples(st.just("Cluster"), st.just("kafka-cluster"), st.just("LITERAL"), BIASED_PRINCIPALS,
                         BIASED_HOSTS, st.sampled_from(CLUSTER_OPS), st.sampled_from(["Allow", "Deny"]))
acl_lists = st.lists(st.one_of(topic_acls, cluster_acls), max_size=8)
resources = st.one_of(st.tuples(st.just("Topic"), NAMES), st.just(("Cluster", "kafka-cluster")))


def model_authorize(acl_rows, principal, host, op, kind, name, supers, allow_if_none):
    """The rules read literally, over every ACL, with no index."""
    if principal in supers:
        return True
    on_resource = [row for row in acl_rows if row[0] == kind and (
        (row[2] == "LITERAL" and row[1] in (name, "*")) or (row[2] == "PREFIXED" and name[:len(row[1])] == row[1]))]
    if not on_resource:
        return allow_if_none
    mine = [row for row in on_resource if row[3] in (principal, "User:*") and row[4] in (host, "*")]
    if any(row[6] == "Deny" and row[5] in (op, "All") for row in mine):
        return False
    return any(row[6] == "Allow" and row[5] in GRANTED_BY[op] for row in mine)


def draw_request(data, acl_rows):
    """A request: half the time aimed at one of the ACLs (its resource, principal, host and an operation it
    concerns), so the rare shapes -- an implication, a wildcard, a prefix -- are actually exercised."""
    if not acl_rows or data.draw(st.booleans()):
        kind, name = data.draw(resources)
        return (data.draw(st.sampled_from(["User:alice", "User:bob", "User:carol"])),
                data.draw(st.sampled_from(["h1", "h2"])), data.draw(st.sampled_from(ALL_OPS)), kind, name)
    kind, name, pattern, principal, host, op, _ = data.draw(st.sampled_from(acl_rows))
    name = data.draw(NAMES) if name == "*" else name
    if pattern == "PREFIXED":
        name += data.draw(st.text("ab", max_size=2))
    principal = data.draw(st.sampled_from(["User:alice", "User:bob"])) if principal == "User:*" else principal
    host = data.draw(st.sampled_from(["h1", "h2"])) if host == "*" else host
    concerned = [asked for asked in ALL_OPS if op in GRANTED_BY[asked]]
    return principal, host, data.draw(st.sampled_from(concerned)), kind, name


@settings(max_examples=600, deadline=None)
@given(acl_lists, st.data(), st.sets(st.sampled_from(["User:alice", "User:carol"]), max_size=1), st.booleans())
def test_authorize_agrees_with_brute_force_model(acl_rows, data, supers, allow_if_none):
    principal, host, op, kind, name = draw_request(data, acl_rows)
    acls = Acls(AclBinding(*row) for row in acl_rows)
    decision = authorize(acls, RequestContext(principal, host), Operation.parse(op), Resource(
        ResourceType.parse(kind), name), frozenset(supers), allow_if_none)
    assert decision.allowed == model_authorize(acl_rows, principal, host, op, kind, name, supers, allow_if_none)
    assert decision.reason
    assert decision.acl is None or decision.acl in acls


def model_filter(f, row):
    """Kafka's ResourcePatternFilter.matches and AccessControlEntryFilter.matches, transcribed."""
    kind, name, pattern, principal, host, op, perm = row
    f_kind, f_name, f_pattern, f_principal, f_host, f_op, f_perm = f
    if f_kind is not None and f_kind != kind:
        return False
    if f_pattern not in ("ANY", "MATCH") and f_pattern != pattern:
        return False
    if f_name is not None:
        if f_pattern in ("ANY", pattern):
            if f_name != name:
                return False
        elif pattern == "LITERAL" and not (f_name == name or name == "*"):
            return False
        elif pattern == "PREFIXED" and not f_name.startswith(name):
            return False
    return all(want is None or want == have for want, have in ((f_principal, principal), (f_host, host),
                                                                (f_op, op), (f_perm, perm)))


def maybe(values):
    return st.one_of(st.none(), st.sampled_from(values))


filters = st.tuples(maybe(["Topic", "Cluster"]), st.one_of(st.none(), NAMES, st.just("*"), st.just("kafka-cluster")),
                    st.sampled_from(["ANY", "MATCH", "LITERAL", "PREFIXED"]), maybe(PRINCIPALS), maybe(HOSTS),
                    maybe(ALL_OPS), maybe(["Allow", "Deny"]))


@settings(max_examples=600, deadline=None)
@given(acl_lists, filters)
def test_filters_agree_with_kafka_filter_model(acl_rows, f):
    acls = Acls(AclBinding(*row) for row in acl_rows)
    chosen = acls.matching(AclBindingFilter(*f))
    assert set(chosen) == {AclBinding(*row) for row in acl_rows if model_filter(f, row)}
    assert list(chosen) == sorted(chosen, key=AclBinding.sort_key)
    remaining = acls.remove(AclBindingFilter(*f))
    assert set(remaining) | set(chosen) == set(acls) and not set(remaining) & set(chosen)


# ---- which request needs what ----------------------------------------------------------------------

def wire_request_names():
    actions = {value for name, value in vars(wire).items() if name.startswith("ACTION_")}
    return actions | {wire.FETCH, wire.FETCH_SESSION, wire.PRODUCE}


def test_every_wire_request_has_a_required_permission():
    names = wire_request_names() | set(request_schemas.ACTION_SCHEMAS)
    assert len(names) >= 20
    missing = sorted(names - set(REQUIRED) - NO_ACL_NEEDED)  # authenticate: what makes a principal
    assert not missing, f"requests without an entry in REQUIRED (no default allow): {missing}"
    assert not NO_ACL_NEEDED & set(REQUIRED)


def test_required_entries_are_operations_of_their_resource_type():
    for name, (operation, resource_type) in {**REQUIRED, **ALTERNATIVES}.items():
        assert operation in VALID_OPERATIONS[resource_type] and operation is not Operation.ALL, name


def test_control_plane_and_follower_fetches_need_cluster_action():
    for name in ("leader_and_isr", "update_metadata", "stop_replica", "replica_log_ends", "controlled_shutdown",
                 FOLLOWER_FETCH):
        assert REQUIRED[name] == (Operation.CLUSTER_ACTION, ResourceType.CLUSTER), name
    assert fetch_requirement_name(replica_id=1, replica_messages=False) == FOLLOWER_FETCH
    assert fetch_requirement_name(replica_id=-1, replica_messages=True) == FOLLOWER_FETCH
    assert REQUIRED[fetch_requirement_name(replica_id=-1, replica_messages=False)] == (Operation.READ,
                                                                                      ResourceType.TOPIC)
    assert REQUIRED["produce"] == (Operation.WRITE, ResourceType.TOPIC)
    assert REQUIRED["locate"] == (Operation.READ, ResourceType.TOPIC)


def test_authorizer_modules_do_no_io():
    import ast
    import pathlib

    import ads_spark.security.authorizer as authorizer_module
    allowed_imports = {"__future__", "re", "dataclasses", "enum", "typing", "ads_spark.errors",
                       "ads_spark.protocol.names", "ads_spark.security.authorizer"}
    root = pathlib.Path(authorizer_module.__file__).parent
    for path in (root / "authorizer.py", root / "request_acls.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module]
            else:
                continue
            assert set(names) <= allowed_imports, f"{path.name} imports {names}: the authorizer is pure"
