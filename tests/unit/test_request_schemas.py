"""The request validation layer (protocol/request_schemas.py, wire.loads): rules, then properties.

Properties (hypothesis): any JSON value is either accepted or refused with a typed
AdsError, never another exception; every body built from a schema is accepted; a
body with one leaf replaced by a value of another JSON type is refused, and the
message names that leaf's path.
"""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ads_spark.protocol import group_schemas
from ads_spark.protocol import request_schemas as rs
from ads_spark.protocol import schema_kinds as sk
from ads_spark.protocol import wire
from ads_spark.errors import (
    AdsError,
    ErrorCode,
    InvalidPartitionsError,
    InvalidRequestError,
    InvalidTopicError,
)


def _fetch(**changes):
    body = wire.consumer_fetch_request([("orders", 0, 5, 3)], max_wait_ms=100, max_bytes=1 << 20,
                                       partition_max_bytes=1 << 20, client_rack=None)
    body.update(changes)
    return body


def test_what_our_clients_send_is_accepted():
    rs.check(rs.FETCH, _fetch(), "fetch")
    rs.checker("create_topics")({"topics": [{"topic": "t", "partitions": 3, "replication_factor": 3,
                                             "config": {"min.insync.replicas": "2"}, "replica_assignment": None,
                                             "observers": None}]})
    rs.checker("alter_configs")({"topic": "t", "set": {"retention.ms": "10"}, "delete": ["segment.ms"]})
    rs.checker("elect_leaders")({"election_type": "preferred", "partitions": None})
    rs.checker("init_producer_id")({})
    rs.check(rs.PRODUCE_BATCH_METADATA, {"topic": "t", "partition": 0, "acks": -1, "timeout_ms": 30000,
                                         "producer_id": 7, "producer_epoch": 0, "base_sequence": 0,
                                         "correlation_id": 1}, "produce")
    rs.checker("leader_and_isr")({
        "controller_id": 1, "controller_epoch": 4, "brokers": [{"id": 1, "host": "127.0.0.1", "port": 9092,
                                                               "rack": None, "broker_epoch": 12, "metrics_port": 0}],
        "partitions": [{"topic": "t", "partition": 0, "topic_id": "abc", "leader": 1, "leader_epoch": 2,
                        "isr": [1, 2], "elr": [], "replicas": [1, 2, 3], "observers": [], "partition_epoch": 5,
                        "offline_replicas": [3], "throttle_bytes_per_s": None, "config": {}}]})


@pytest.mark.parametrize("changes, field", [
    ({"max_wait_ms": True}, "fetch.max_wait_ms"),  # bool is not an int
    ({"max_wait_ms": 1.0}, "fetch.max_wait_ms"),
    ({"max_wait_ms": "100"}, "fetch.max_wait_ms"),
    ({"max_bytes": 2**63}, "fetch.max_bytes"),
    ({"max_bytes": -1}, "fetch.max_bytes"),
    ({"client_rack": "a\x00b"}, "fetch.client_rack"),
    ({"client_rack": "\ud800"}, "fetch.client_rack"),
    ({"client_rack": "r" * 10_000}, "fetch.client_rack"),
    ({"surprise": 1}, "unknown field 'surprise'"),
    ({"type": "produce"}, "fetch.type"),
    ({"partitions": None}, "fetch.partitions"),
    ({"partitions": [{"topic": "t", "partition": -1, "fetch_offset": 0}]}, "fetch.partitions[0].partition"),
    ({"partitions": [{"topic": "t", "partition": 0}]}, "missing field 'fetch_offset'"),
])
def test_a_field_that_does_not_fit_is_refused_by_name(changes, field):
    with pytest.raises(InvalidRequestError) as refused:
        rs.check(rs.FETCH, _fetch(**changes), "fetch")
    assert field in refused.value.message


@pytest.mark.parametrize("name", ["", ".", "..", "../../../x/victim", "a/b", "a b", "\ud800", "x" * (1 << 20),
                                  "orders\n", "ü"])
def test_topic_names_are_kafkas(name):
    with pytest.raises(InvalidTopicError) as refused:
        rs.checker("describe_configs")({"topic": name})
    assert len(refused.value.message) < 400  # a 1 MiB name is not echoed whole
    assert refused.value.code == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_a_string_false_is_not_a_bool():
    body = {"controller_epoch": 1, "partitions": [{"topic": "t", "partition": 0, "delete": "false"}]}
    with pytest.raises(InvalidRequestError, match=r"partitions\[0\]\.delete"):
        rs.checker("stop_replica")(body)


def test_a_partition_is_named_once_per_request():
    body = _fetch(partitions=[{"topic": "t", "partition": 0, "fetch_offset": 0}] * 2000)
    with pytest.raises(InvalidRequestError, match=r"partitions\[1\]: names topic 't', partition 0 a second time"):
        rs.check(rs.FETCH, body, "fetch")


def test_a_topic_is_created_once_per_request_and_a_broker_listed_once():
    topic = {"topic": "t", "partitions": 1, "replication_factor": 1}
    with pytest.raises(InvalidRequestError, match=r"topics\[1\]: names topic 't' a second time"):
        rs.checker("create_topics")({"topics": [topic, topic]})
    broker = {"id": 1, "host": "127.0.0.1", "port": 9092}
    with pytest.raises(InvalidRequestError, match=r"brokers\[1\]: names id 1 a second time"):
        rs.checker("update_metadata")({"controller_epoch": 1, "brokers": [broker, broker]})


def test_partition_counts_keep_kafkas_error_codes():
    with pytest.raises(InvalidPartitionsError):
        rs.checker("create_topics")({"topics": [{"topic": "t", "partitions": 0, "replication_factor": 1}]})


def test_an_unknown_action_names_the_known_ones():
    with pytest.raises(InvalidRequestError, match="known: .*leader_and_isr"):
        rs.checker("drop_everything")


@pytest.mark.parametrize("raw", [b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
                                 b"\xff\xfe", b"1" * 5000, b"", b'{"a": NaN'])
def test_wire_loads_refuses_what_it_cannot_parse_safely(raw):
    with pytest.raises(InvalidRequestError):
        wire.loads(raw, "test")


def test_nesting_inside_strings_does_not_count():
    raw = json.dumps({"topic": "[" * 100}).encode()
    assert wire.loads(raw, "test") == {"topic": "[" * 100}


# ---- properties -------------------------------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=30)

_SCHEMAS = sorted(rs.ACTION_SCHEMAS.items()) + [("fetch", rs.FETCH), ("produce", rs.PRODUCE_BATCH_METADATA)]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(_SCHEMAS), _json)
def test_any_json_is_accepted_or_refused_with_a_typed_error(named, value):
    name, schema = named
    try:
        rs.check(schema, value, name)
    except AdsError as exc:
        assert exc.code in (ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_TOPIC_EXCEPTION,
                            ErrorCode.INVALID_PARTITIONS, ErrorCode.INVALID_REPLICATION_FACTOR)
        assert exc.message.startswith(name)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_parse_or_are_refused_as_invalid_request(raw):
    try:
        wire.loads(raw, "body")
    except InvalidRequestError:
        pass


def _valid(kind: sk.Kind) -> st.SearchStrategy:
    """Values that ``kind`` accepts, built from the schema itself (so every action is covered)."""
    if isinstance(kind, sk.Int):
        return st.integers(kind.min_value, kind.max_value)
    if isinstance(kind, sk.Bool):
        return st.booleans()
    if isinstance(kind, sk.TopicName):
        return st.from_regex(r"\A[a-z0-9._-]{1,12}\Z").filter(lambda name: name not in (".", ".."))
    if isinstance(kind, group_schemas.GroupId):
        return st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=12)
    if isinstance(kind, group_schemas.Base64Text):
        return st.binary(max_size=12).map(lambda data: base64.b64encode(data).decode())
    if isinstance(kind, sk.Text):
        if kind.choices is not None:
            return st.sampled_from(kind.choices)
        return st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                       max_size=min(kind.max_chars, 12))
    if isinstance(kind, sk.Scalar):
        return st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1),
                         st.floats(allow_nan=False, allow_infinity=False), _valid(kind.text))
    if isinstance(kind, sk.OneOf):
        return st.one_of(*[_valid(k) for k in kind.kinds])
    if isinstance(kind, sk.MapOf):
        return st.dictionaries(_valid(kind.key), _valid(kind.value), max_size=3)
    if isinstance(kind, sk.Distinct):
        return st.lists(_valid(kind.item), min_size=kind.min_items, max_size=max(kind.min_items, 3),
                        unique_by=lambda e: tuple(e[f] for f in kind.key_fields))
    if isinstance(kind, sk.ListOf):
        return st.lists(_valid(kind.item), min_size=kind.min_items, max_size=max(kind.min_items, 3),
                        unique=kind.distinct)
    if isinstance(kind, sk.Obj):
        required = {n: _valid(f.kind) for n, f in kind.fields.items() if f.required}
        optional = {n: st.none() | _valid(f.kind) for n, f in kind.fields.items() if not f.required}
        return st.fixed_dictionaries(required, optional=optional)
    raise AssertionError(f"no strategy for {kind!r}")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(_SCHEMAS).flatmap(lambda named: st.tuples(st.just(named), _valid(named[1]))))
def test_every_body_built_from_a_schema_is_accepted(drawn):
    (name, schema), body = drawn
    assert rs.check(schema, json.loads(wire.dumps(body)), name) is not None


def _leaves(value, kind, path: str, parts: tuple):
    """(path as the error names it, the keys leading there, its kind) of every leaf, walking the schema alongside."""
    if isinstance(kind, sk.Obj) and isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, kind.fields[key].kind, f"{path}.{key}", parts + (key,))
    elif isinstance(kind, sk.MapOf) and isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, kind.value, f"{path}[{key!r}]", parts + (key,))
    elif isinstance(kind, sk.ListOf) and isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, kind.item, f"{path}[{index}]", parts + (index,))
    elif value is not None:
        yield path, parts, kind


def _fits(kind, value) -> bool:
    try:
        kind.fit(value)
        return True
    except sk.Misfit:
        return False


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(_SCHEMAS).flatmap(lambda named: st.tuples(st.just(named), _valid(named[1]))), st.data())
def test_a_leaf_of_another_type_is_refused_naming_its_path(drawn, data):
    (name, schema), body = drawn
    leaves = list(_leaves(body, schema, name, ()))
    if not leaves:
        return
    path, parts, kind = data.draw(st.sampled_from(leaves))
    parent = body
    for part in parts[:-1]:
        parent = parent[part]
    wrong = {bool: [1.5, "x", [1]], int: [True, "1", 1.5, [1]], str: [1, True, ["a"]]}[type(parent[parts[-1]])]
    # Of another type than every alternative the leaf accepts (acks is "all" or an int).
    parent[parts[-1]] = data.draw(st.sampled_from([value for value in wrong if not _fits(kind, value)]))
    with pytest.raises(AdsError) as refused:
        rs.check(schema, body, name)
    assert refused.value.message.startswith(f"{path}: "), (path, refused.value.message)
