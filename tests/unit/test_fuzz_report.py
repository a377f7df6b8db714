"""The fuzzer's pieces that need no cluster: the exception scanner, the accounting, the inputs, the raw proxy's
rewriting, the state diff. The run itself is tests/chaos/test_fuzz.py."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from ads_spark.chaos import fuzz_inputs as inputs
from ads_spark.chaos.fuzz_raw import FLIGHT_DATA_BODY_FIELD, _MessageRewriter
from ads_spark.chaos.fuzz_report import Answer, CategoryStats, exception_names_in, failed_checks, from_json_answers, \
    render_table, totals
from ads_spark.chaos.fuzz_send import Targets, broker_text, failure
from ads_spark.chaos.fuzz_state import checkpoint_keys, diff
from ads_spark.chaos.fuzz_streams import garbage_batch


@pytest.mark.parametrize("text, names", [
    ("UNKNOWN_SERVER_ERROR: TypeError: 'int' object is not subscriptable", ["TypeError"]),
    ("RecursionError: maximum recursion depth exceeded; then KeyError: 'topic'", ["RecursionError", "KeyError"]),
    ("Traceback (most recent call last):\n  File \"/x/server.py\", line 64, in run",
     ["Traceback (most recent call last)", 'File "/x/server.py", line 64']),
    ("[Errno 36] File name too long: '/data/aaaa-0'", ["[Errno 36]"]),
    ("Detail: Python exception: UnicodeEncodeError", ["UnicodeEncodeError"]),
    ("INVALID_TOPIC_EXCEPTION: invalid topic name '..': use 1-249 characters", []),
    ("INVALID_REQUEST: create_topics.topics[0].partitions: must be an integer, got a string '1'", []),
    ("NotEnoughReplicasError or ValueErrors are not names", []),
])
def test_the_scanner_finds_python_exception_text_and_nothing_else(text, names):
    assert exception_names_in(text) == names


def test_answers_are_typed_by_code_in_the_error_or_in_the_body():
    in_band = from_json_answers(['{"error_code": 0, "partitions": [{"error_code": 3}]}'])
    assert (in_band.outcome, in_band.code, in_band.in_band) == ("typed", "UNKNOWN_TOPIC_OR_PARTITION", True)
    assert from_json_answers(['{"error_code": 0}', "not json"]).outcome == "success"
    error = flight.FlightServerError("INVALID_REQUEST: bad", extra_info=b'{"error_code": 42, "message": "bad"}')
    assert (failure(error, lambda: True).outcome, failure(error, lambda: True).code) == ("typed", "INVALID_REQUEST")
    assert failure(flight.FlightServerError("TypeError: x"), lambda: True).outcome == "untyped"
    assert failure(flight.FlightServerError("x", extra_info=b'{"error_code": "42"}'), lambda: True).outcome == "untyped"
    assert failure(flight.FlightTimedOutError("deadline"), lambda: True).outcome == "hang"
    assert failure(flight.FlightUnavailableError("socket closed"), lambda: False).outcome == "unreachable"
    assert broker_text(Exception("INVALID_REQUEST: x. Detail: Failed. gRPC client debug context: "
                                 "Client context: IOError: y")) == "INVALID_REQUEST: x. Detail: Failed"


def test_accounting_counts_each_input_and_broker_once_and_keeps_examples():
    stats = CategoryStats("action:metadata")
    stats.inputs = 2
    stats.record("not_json", "body b'{'", 1, Answer("typed", "INVALID_REQUEST", ("INVALID_REQUEST: not JSON",)))
    stats.record("not_json", "body b'{'", 2, Answer("untyped", None, ("TypeError: boom",)))
    stats.record("deep_nesting", "[[[...]]]", 1, Answer("typed", "UNKNOWN_SERVER_ERROR", ("RecursionError: deep",)))
    stats.record("deep_nesting", "[[[...]]]", 2, Answer("skipped", None, ("not sent: the broker is dead",)))
    counts = stats.to_json()
    assert (counts["sent"], counts["typed"], counts["untyped"], counts["skipped"]) == (3, 2, 1, 1)
    assert counts["typed_by_code"] == {"INVALID_REQUEST": 1, "UNKNOWN_SERVER_ERROR": 1}
    assert counts["exception_answers"] == 2
    assert counts["by_kind"]["deep_nesting: UNKNOWN_SERVER_ERROR"] == 1
    assert counts["examples"]["untyped"][0]["input"] == "body b'{'"
    report = {"categories": {"action:metadata": counts}, "totals": totals({"action:metadata": counts}),
              "checks": {"no_crash": {"ok": True, "detail": "no broker died"},
                         "no_untyped_error": {"ok": False, "detail": "1 errors without a typed code"}}}
    assert report["totals"]["untyped"] == 1 and report["totals"]["typed_by_code"]["INVALID_REQUEST"] == 1
    table = render_table(report)
    assert "action:metadata" in table and "FAIL no_untyped_error" in table and "ok   no_crash" in table
    assert failed_checks(report) == {"no_untyped_error": "1 errors without a typed code"}


def test_inputs_are_deterministic_and_cover_every_kind_once_per_group():
    template = inputs.ACTION_TEMPLATES["leader_and_isr"]
    first = [v.label for v in inputs.choose(inputs.variants(template), random.Random(7), 1)]
    again = [v.label for v in inputs.choose(inputs.variants(template), random.Random(7), 1)]
    assert first == again and len(first) == len(inputs.variants(template))
    chosen = {v.kind: v for v in inputs.choose(inputs.variants(template), random.Random(7), 1)}
    assert set(chosen) == set(inputs.KINDS)
    assert chosen["out_of_range"].label == "controller_epoch=9223372036854775808"  # finding 5 always in the short run
    assert chosen["lone_surrogate"].label.startswith("partitions.*.topic=")
    assert b"\\ud800" in chosen["lone_surrogate"].build()
    assert len(chosen["deep_nesting"].build()) == 2 * inputs.DEPTH
    assert len(chosen["oversized"].build()) > inputs.OVERSIZED_BYTES
    assert b"\xff\xfe" in chosen["invalid_utf8"].build()
    assert "topic" not in json.loads(chosen["missing_field"].build())["partitions"][0]
    assert json.loads(chosen["bad_topic_name"].build())["partitions"][0]["topic"] == ""  # finding 3's name first


def test_placeholders_are_filled_per_broker():
    targets = Targets(controller_id=2, controller_epoch=7, led={inputs.KEEP_TOPIC: {3: 1}})
    body = inputs.dumps({"controller_id": inputs.CONTROLLER_ID, "controller_epoch": inputs.CONTROLLER_EPOCH,
                         "partition": inputs.LED_PARTITION, "leader": inputs.SELF_ID})
    assert json.loads(targets.fill(body, 3, inputs.KEEP_TOPIC)) == {"controller_id": 2, "controller_epoch": 7,
                                                                     "partition": 1, "leader": 3}


def test_the_garbage_batch_passes_a_cheap_check_and_fails_a_full_one():
    batch = garbage_batch(seed=3, rows=200, body_bytes=4096)
    batch.validate()
    with pytest.raises(pa.ArrowInvalid):
        batch.validate(full=True)
    assert batch.serialize().size > 4096


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        out.append((value & 0x7F) | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


def _flight_data(header: bytes, metadata: bytes, body: bytes) -> bytes:
    message = (b"\x12" + _varint(len(header)) + header + b"\x1a" + _varint(len(metadata)) + metadata
               + _varint(FLIGHT_DATA_BODY_FIELD << 3 | 2) + _varint(len(body)) + body)
    return b"\x00" + len(message).to_bytes(4, "big") + message


@pytest.mark.parametrize("mode", ["random", "ones", "flip"])
def test_the_proxy_rewrites_only_message_bodies_whatever_the_framing(mode):
    schema_message = _flight_data(b"H" * 40, b"", b"")
    batch_message = _flight_data(b"h" * 300, b'{"topic": "x"}', bytes(range(256)) * 64)
    stream = schema_message + batch_message
    rewriter = _MessageRewriter(mode, random.Random(1))
    cuts = sorted(random.Random(2).sample(range(1, len(stream)), 40))
    out = b"".join(rewriter.feed(stream[a:b]) for a, b in zip([0, *cuts], [*cuts, len(stream)]))
    assert len(out) == len(stream) and rewriter.bodies_rewritten == 1
    body_at = len(stream) - 256 * 64
    assert out[:body_at] == stream[:body_at]  # prefixes, headers and metadata untouched
    assert out[body_at:] != stream[body_at:]


def test_checkpoints_and_diffs_name_what_changed(tmp_path):
    good = tmp_path / "replication-offset-checkpoint"
    good.write_text("0\n2\nkeep 0 10\nsink 1 5\n")
    assert checkpoint_keys(good) == "partitions sink 1"  # the keep topic's entries move legitimately
    poisoned = tmp_path / "recovery-point-offset-checkpoint"
    poisoned.write_text("0\n2\n 0 0\nsink 1 5\n")
    assert checkpoint_keys(poisoned).startswith("malformed")
    before = {"znodes": {"/brokers/ids/1": "a", "/brokers/topics/keep/partitions/0/state": "isr 1,2,3"}, "files": {},
              "views": {"1": "epoch 1"}}
    after = {"znodes": {"/brokers/topics/keep/partitions/0/state": "isr 1,2"}, "files": {"broker-1/data/-0": "dir"},
             "views": {"1": "epoch 9223372036854775807"}}
    changes, moved = diff(before, after)
    assert changes == ["znodes /brokers/ids/1: removed (was a)", "files broker-1/data/-0: added (dir)",
                       "views 1: epoch 1 -> epoch 9223372036854775807"]
    assert moved == ["znodes /brokers/topics/keep/partitions/0/state: isr 1,2,3 -> isr 1,2"]


def test_create_partitions_inputs_reach_the_count_checks_and_none_is_a_valid_grow():
    from ads_spark.errors import AdsError
    from ads_spark.protocol.request_schemas import PARTITION_ID_MAX, checker

    check = checker("create_partitions")
    found = inputs.partition_increase_inputs(3)
    bodies = [(i.kind, json.loads(i.build())) for i in found]
    assert {i.name for i in found} == {"create_partitions"}
    assert {"decrease", "same_count", "huge_count", "wrong_type", "unknown_topic"} <= {k for k, _ in bodies}
    counts = {b.get("partitions") for k, b in bodies if b.get("topic") == inputs.KEEP_TOPIC and k != "wrong_type"}
    assert {2, 3, 0, PARTITION_ID_MAX + 2} <= counts
    for kind, body in bodies:
        grows_keep = (body.get("topic") == inputs.KEEP_TOPIC and type(body.get("partitions")) is int
                      and 3 < body["partitions"] <= PARTITION_ID_MAX + 1 and set(body) == {"topic", "partitions"})
        assert not grows_keep, body
        if kind in ("decrease", "same_count", "unknown_topic"):
            check(body)  # well-formed: refused only by the count or topic checks behind the schema
        else:
            with pytest.raises(AdsError):
                check(body)
    template = inputs.action_inputs(["create_partitions"], random.Random(1), 1)["action:create_partitions"]
    assert template and inputs.ACTION_TEMPLATES["create_partitions"].body["topic"] == inputs.ABSENT_TOPIC


def _assignment(partitions: int, first: list[int] | None = None) -> str:
    replicas = {str(p): ([1, 2, 3] if p or first is None else first) for p in range(partitions)}
    return json.dumps({"version": 3, "topic_id": "t", "partitions": replicas, "observers": {},
                       "adding_replicas": {}, "removing_replicas": {}})


def test_the_diff_lets_keep_grow_to_the_runs_own_count_and_no_further():
    before = {"znodes": {"/brokers/topics/keep": _assignment(3), "/brokers/topics/fuzzsink": _assignment(3)},
              "files": {"broker-1/data/keep-0": "dir"}, "views": {}}
    grown = {"znodes": {"/brokers/topics/keep": _assignment(4), "/brokers/topics/fuzzsink": _assignment(3)},
             "files": {"broker-1/data/keep-0": "dir", "broker-1/data/keep-3": "dir"}, "views": {}}
    changes, moved = diff(before, grown, {inputs.KEEP_TOPIC: 4})
    assert changes == [] and len(moved) == 2
    assert len(diff(before, grown)[0]) == 2  # without the run's count, growth is a change
    assert len(diff(before, grown, {inputs.KEEP_TOPIC: 5})[0]) == 1  # the assignment is not at that count
    too_far = {**grown, "files": {**grown["files"], "broker-1/data/keep-4": "dir"}}
    assert diff(before, too_far, {inputs.KEEP_TOPIC: 4})[0] == ["files broker-1/data/keep-4: added (dir)"]
    moved_replicas = {**grown, "znodes": {**grown["znodes"], "/brokers/topics/keep": _assignment(4, [3, 2, 1])}}
    assert [c.split(":")[0] for c in diff(before, moved_replicas, {inputs.KEEP_TOPIC: 4})[0]] == \
        ["znodes /brokers/topics/keep"]  # an existing partition's replicas changed
    sink = {**grown, "znodes": {**grown["znodes"], "/brokers/topics/fuzzsink": _assignment(4)}}
    assert [c.split(":")[0] for c in diff(before, sink, {inputs.KEEP_TOPIC: 4})[0]] == \
        ["znodes /brokers/topics/fuzzsink"]
