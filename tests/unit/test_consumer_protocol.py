"""Kafka's ConsumerProtocolSubscription / ConsumerProtocolAssignment bytes (client/consumer_protocol.py),
checked against byte strings built by hand from the format (big-endian INT16 version, ARRAY = INT32 count,
STRING = INT16 length + UTF-8, BYTES = INT32 length, -1 for null), and malformed bytes refused by type."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ads_spark.client.consumer_protocol import (
    Assignment, ConsumerProtocolFormatError, Subscription, decode_assignment, decode_subscription,
    encode_assignment, encode_subscription,
)
from ads_spark.errors import InconsistentGroupProtocolError


def i16(v):
    return struct.pack(">h", v)


def i32(v):
    return struct.pack(">i", v)


def s(text):
    data = text.encode()
    return i16(len(data)) + data


# v1: topics ["orders", "payments"], user data b"\x00\x00\x00\x07", owned orders-0, orders-2, payments-1.
SUBSCRIPTION_V1 = (i16(1) + i32(2) + s("orders") + s("payments") + i32(4) + b"\x00\x00\x00\x07"
                   + i32(2) + s("orders") + i32(2) + i32(0) + i32(2) + s("payments") + i32(1) + i32(1))
ASSIGNMENT_V1 = i16(1) + i32(1) + s("orders") + i32(3) + i32(0) + i32(1) + i32(5) + i32(-1)


def test_a_v1_subscription_is_written_byte_for_byte_as_kafka_lays_it_out():
    subscription = Subscription(("orders", "payments"), b"\x00\x00\x00\x07",
                                (("orders", 0), ("orders", 2), ("payments", 1)))
    assert encode_subscription(subscription) == SUBSCRIPTION_V1
    assert decode_subscription(SUBSCRIPTION_V1) == subscription


def test_v0_has_no_owned_partitions_and_null_user_data_is_minus_one():
    data = i16(0) + i32(1) + s("t") + i32(-1)
    decoded = decode_subscription(data)
    assert decoded == Subscription(("t",), None, (), version=0)
    assert encode_subscription(decoded) == data


def test_v2_and_v3_carry_generation_and_rack():
    v3 = i16(3) + i32(1) + s("t") + i32(0) + i32(1) + s("t") + i32(1) + i32(4) + i32(9) + s("rack-a")
    decoded = decode_subscription(v3)
    assert decoded.user_data == b"" and decoded.owned_partitions == (("t", 4),)
    assert decoded.generation_id == 9 and decoded.rack_id == "rack-a"
    assert encode_subscription(decoded) == v3
    v2_null_rack = i16(2) + i32(0) + i32(-1) + i32(0) + i32(-1)
    assert decode_subscription(v2_null_rack).generation_id == -1


def test_a_newer_version_is_read_as_the_newest_known_and_its_extra_fields_ignored():
    v4 = i16(4) + i32(1) + s("t") + i32(-1) + i32(0) + i32(3) + i16(-1) + b"future field"
    decoded = decode_subscription(v4)
    assert decoded.topics == ("t",) and decoded.generation_id == 3 and decoded.version == 4


def test_an_assignment_round_trips_byte_for_byte():
    assignment = Assignment((("orders", 0), ("orders", 1), ("orders", 5)), None)
    assert encode_assignment(assignment) == ASSIGNMENT_V1
    assert decode_assignment(ASSIGNMENT_V1) == assignment
    empty_v0 = i16(0) + i32(0) + i32(0)
    assert decode_assignment(empty_v0) == Assignment((), b"", version=0)


@pytest.mark.parametrize("data, problem", [
    (b"", "version needs 2 bytes"),
    (i16(-1), "version -1"),
    (SUBSCRIPTION_V1[:-1], "partitions count 1 does not fit the 3 bytes left"),
    (SUBSCRIPTION_V1 + b"\x00", "1 bytes left"),
    (i16(1) + i32(2_000_000_000), "topics count 2000000000"),
    (i16(1) + i32(-7), "topics count -7"),
    (i16(1) + i32(1) + i16(-2), "topic has length -2"),
    (i16(1) + i32(1) + i16(-1), "topic is null"),
    (i16(1) + i32(1) + i16(2) + b"\xff\xfe" + i32(-1) + i32(0), "not valid UTF-8"),
    (i16(1) + i32(0) + i32(-5), "user_data has length -5"),
    (i16(1) + i32(0) + i32(10) + b"abc", "user_data needs 10 bytes"),
], ids=lambda value: value if isinstance(value, str) else None)
def test_malformed_subscriptions_are_refused_naming_the_field(data, problem):
    with pytest.raises(ConsumerProtocolFormatError, match=problem) as caught:
        decode_subscription(data)
    assert isinstance(caught.value, InconsistentGroupProtocolError)


@pytest.mark.parametrize("data, problem", [
    (ASSIGNMENT_V1[:5], "count needs 4 bytes"),
    (i16(1) + i32(1) + s("t") + i32(100) + i32(1), "partitions count 100"),
    (ASSIGNMENT_V1 + b"xy", "2 bytes left"),
    ("not bytes", "expected bytes"),
], ids=["truncated count", "count beyond the bytes", "bytes left over", "not bytes"])
def test_malformed_assignments_are_refused(data, problem):
    with pytest.raises(ConsumerProtocolFormatError, match=problem):
        decode_assignment(data)


TOPICS = st.text(min_size=1, max_size=12)
PAIRS = st.lists(st.tuples(TOPICS, st.integers(0, 2**31 - 1)), max_size=20)


@settings(max_examples=200, deadline=None)
@given(st.lists(TOPICS, max_size=8), st.none() | st.binary(max_size=40), PAIRS, st.integers(-1, 2**31 - 1),
       st.none() | TOPICS, st.integers(0, 3))
def test_every_subscription_round_trips(topics, user_data, owned, generation, rack, version):
    # Owned partitions are written grouped by topic (Kafka's layout): compare in that order.
    grouped = tuple(tp for topic in dict.fromkeys(t for t, _ in owned) for tp in owned if tp[0] == topic)
    subscription = Subscription(tuple(topics), user_data, grouped if version >= 1 else (),
                                generation if version >= 2 else -1, rack if version >= 3 else None, version)
    assert decode_subscription(encode_subscription(subscription)) == subscription


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_random_bytes_decode_or_are_refused_never_anything_else(data):
    for decode in (decode_subscription, decode_assignment):
        try:
            decode(data)
        except ConsumerProtocolFormatError:
            pass
