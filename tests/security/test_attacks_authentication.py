"""Attacks on authentication (../shared/SECURITY.md, "Attack cases", Authentication), on a real cluster.

The module's cluster (``attack_cluster``): each broker's password-only ``SASL_PLAINTEXT`` listener is the
target; the admin (a super user, over mutual TLS) sets users up and reads the state back. Every attack is
refused with SASL_AUTHENTICATION_FAILED (58), changes nothing, and the broker serves a legitimate call
afterwards.

Attack -> test (node ids; what another module already covers is listed, not repeated):

* wrong password and unknown user: same answer, similar time, non-retriable, < 2 s
  -> ``test_attack_wrong_password_and_unknown_user_look_the_same_and_fail_fast``
  (in-process: tests/unit/test_security_state.py::test_wrong_password_unknown_user_and_bad_names_get_the_same_answer_after_one_hash,
  tests/integration/test_acls_users_cli.py::test_authenticate_on_a_sasl_listener)
* malformed ``authorization`` headers (no scheme, bad base64, no colon, non-UTF-8, 1 MiB, two headers),
  no traceback in any answer -> ``test_attack_malformed_authorization_headers_get_no_traceback_and_change_nothing``
  (every case in-process: tests/unit/test_auth_middleware.py::test_over_the_wire_every_refusal_is_sasl_authentication_failed_without_a_traceback)
* tampered, foreign-secret and expired tokens (the expired one signed with the cluster's real secret)
  -> ``test_attack_tampered_foreign_and_expired_tokens_are_refused``
* a token issued before its user was deleted or its password changed
  -> ``test_attack_a_token_dies_with_its_users_password_change_or_deletion_on_every_broker``
  (two security states on one ZooKeeper: tests/integration/test_acls_users_cli.py::test_a_user_added_on_one_broker_logs_in_on_the_other_until_deleted_or_changed)
* every call but ``authenticate`` without credentials on a SASL listener
  -> ``test_attack_every_call_without_credentials_on_the_sasl_listener_is_refused``
* user names with ``*``, ``:``, ``;``, ``,``
  -> ``test_attack_user_names_with_wildcards_or_separators_are_refused_and_log_nobody_in``
"""

from __future__ import annotations

import base64
import json
import os
import statistics
import time

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from ads_spark.broker.zk.security_store import SecurityStore
from ads_spark.broker.zk.session import ZkSession
from ads_spark.client import Admin
from ads_spark.config import load_broker_config
from ads_spark.errors import ErrorCode, InvalidRequestError, SaslAuthenticationFailedError
from ads_spark.protocol import wire
from ads_spark.protocol.records import PRODUCE_SCHEMA, now_ms
from ads_spark.security.credentials import issue_token
from ads_spark.security.request_acls import REQUIRED
from tests.fixtures.secure_cluster import action, basic, bearer
from tests.fixtures.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

FAIL_FAST_S = 2.0
SASL_FAILED = int(ErrorCode.SASL_AUTHENTICATION_FAILED)
TIMING_SAMPLES = 15
PROBE_TOPIC = "authn-attack-must-not-exist"
CREATE_PROBE = {"topics": [{"topic": PROBE_TOPIC, "partitions": 1, "replication_factor": 1}]}


def _no_traceback(answer: dict) -> None:
    for text in (answer.get("raw", ""), answer.get("message", "")):
        assert "Traceback" not in text and 'File "' not in text, text


def _user(target, name: str, password: str) -> None:
    target.add_user(name, password)


def _sasl_call(target, broker_id: int, name: str, body, headers=None) -> dict:
    client = target.raw(None, target.sasl_address(broker_id))
    try:
        return action(client, name, body, headers)
    finally:
        client.close()


def _timed_authenticate(target, broker_id: int, username: str, password: str) -> tuple[dict, float]:
    client = target.raw(None, target.sasl_address(broker_id))
    try:
        action(client, wire.ACTION_METADATA, {"topics": []})  # connect first: time the check, not the dial
        started = time.perf_counter()
        answer = action(client, wire.ACTION_AUTHENTICATE, {}, basic(username, password))
        return answer, time.perf_counter() - started
    finally:
        client.close()


def test_attack_wrong_password_and_unknown_user_look_the_same_and_fail_fast(attack_cluster, record_property):
    target = attack_cluster
    _user(target, "victim", "victim-password-1")
    broker_id = target.cluster.broker_ids()[0]
    users_before = target.admin.list_users()
    timings: dict[str, list[float]] = {"wrong password": [], "unknown user": []}
    answers = {}
    for _ in range(TIMING_SAMPLES):  # interleaved, so load on the machine falls on both alike
        for case, (username, password) in {"wrong password": ("victim", "not-the-password"),
                                           "unknown user": ("nobody-by-this-name", "not-the-password")}.items():
            answer, seconds = _timed_authenticate(target, broker_id, username, password)
            timings[case].append(seconds)
            answers[case] = {k: answer.get(k) for k in ("error_code", "message")}
    assert answers["wrong password"] == answers["unknown user"], answers
    assert answers["wrong password"]["error_code"] == SASL_FAILED
    medians_ms = {case: statistics.median(values) * 1000 for case, values in timings.items()}
    record_property("authenticate_median_ms", medians_ms)
    print(f"authenticate refusal, median of {TIMING_SAMPLES}: {medians_ms}")
    # one PBKDF2 hash each (~2 ms at 4096 iterations): a skipped hash for unknown users would halve it
    low, high = sorted(medians_ms.values())
    assert high - low < max(5.0, 0.5 * high), medians_ms
    messages = set()
    for username in ("victim", "nobody-by-this-name"):  # a real client: non-retriable and at once
        admin = Admin(target.sasl_config(username, "not-the-password"))
        try:
            started = time.monotonic()
            with pytest.raises(SaslAuthenticationFailedError) as refused:
                admin.list_topics()
            assert time.monotonic() - started < FAIL_FAST_S and not refused.value.retriable
            messages.add(refused.value.message)
        finally:
            admin.close()
    assert len(messages) == 1 and "not-the-password" not in messages.pop()
    assert target.admin.list_users() == users_before
    assert "token" in _timed_authenticate(target, broker_id, "victim", "victim-password-1")[0]


MALFORMED = {
    "no scheme": [(b"authorization", base64.b64encode(b"victim:victim-password-1"))],
    "bad base64": [(b"authorization", b"Basic !!!!")],
    "no colon": [(b"authorization", b"Basic " + base64.b64encode(b"victimvictim-password-1"))],
    "non-UTF-8": [(b"authorization", b"Basic " + base64.b64encode(b"\xff\xfe:pw"))],
    "two headers": [(b"authorization", b"Bearer a"), (b"authorization", b"Bearer b")],
    "unknown scheme": [(b"authorization", b"Digest dmljdGlt")],
    "garbage bearer": [(b"authorization", b"Bearer ads1.e30.AAAA")],
    "1 MiB": [(b"authorization", b"Basic " + b"A" * (1 << 20))],
}


@pytest.mark.parametrize("call", [wire.ACTION_CREATE_TOPICS, wire.ACTION_AUTHENTICATE])
def test_attack_malformed_authorization_headers_get_no_traceback_and_change_nothing(attack_cluster, call):
    target = attack_cluster
    broker_id = target.cluster.broker_ids()[0]
    body = CREATE_PROBE if call == wire.ACTION_CREATE_TOPICS else {}
    for case, headers in MALFORMED.items():
        client = target.raw(None, target.sasl_address(broker_id))
        try:
            answer = action(client, call, body, headers)
        except pa.ArrowException as exc:  # gRPC itself refuses metadata over 16 KiB (RESOURCE_EXHAUSTED)
            assert case == "1 MiB", (case, exc)
            answer = {"error_code": SASL_FAILED, "raw": str(exc), "message": str(exc)}
        finally:
            client.close()
        assert answer.get("error_code") == SASL_FAILED, (case, answer)
        _no_traceback(answer)
        assert "victim-password-1" not in answer["raw"]
    assert PROBE_TOPIC not in target.admin.list_topics()
    target.assert_serving()


def _zookeeper_security(target) -> tuple[list[bytes], int]:
    """(the token secrets, victim's credential version) read as a broker would: its ZooKeeper certificate."""
    config = load_broker_config(target.cluster.broker_config_path(target.cluster.broker_ids()[0]))
    session = ZkSession.from_broker_config(config).connect()
    try:
        store = SecurityStore(session)
        return store.token_secrets(), store.read_credential("victim").credential_version
    finally:
        session.close()


def _tampered(token: str, **claims) -> str:
    prefix, payload, mac = token.split(".")
    fields = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    fields.update(claims)
    forged = base64.urlsafe_b64encode(json.dumps(fields, separators=(",", ":")).encode()).decode().rstrip("=")
    return f"{prefix}.{forged}.{mac}"


def test_attack_tampered_foreign_and_expired_tokens_are_refused(attack_cluster):
    target = attack_cluster
    _user(target, "victim", "victim-password-1")
    secrets, version = _zookeeper_security(target)
    genuine = target.token("victim", "victim-password-1")
    now = now_ms()
    forged = {
        "tampered user": _tampered(genuine, u="admin"),
        "tampered expiry": _tampered(genuine, exp=now + 10**9),
        "truncated mac": genuine[:-4],
        "foreign secret": issue_token(os.urandom(32), "admin", 1, now, 60_000),
        "expired": issue_token(secrets[0], "victim", version, now - 7_200_000, 3_600_000),
    }
    control = issue_token(secrets[0], "victim", version, now, 60_000)  # forged the same way, not expired
    for broker_id in target.cluster.broker_ids():
        assert _sasl_call(target, broker_id, wire.ACTION_METADATA, {"topics": []},
                          bearer(control)).get("error_code", 0) == 0
        for case, token in forged.items():
            answer = _sasl_call(target, broker_id, wire.ACTION_CREATE_TOPICS, CREATE_PROBE, bearer(token))
            assert answer.get("error_code") == SASL_FAILED, (case, answer)
            expected = "expired" if case == "expired" else "invalid token"
            assert expected in answer["message"], (case, answer)
            _no_traceback(answer)
    assert PROBE_TOPIC not in target.admin.list_topics()
    target.assert_serving()


def _refused_everywhere(target, token: str) -> bool:
    return all(_sasl_call(target, b, wire.ACTION_METADATA, {"topics": []}, bearer(token)).get("error_code") ==
               SASL_FAILED for b in target.cluster.broker_ids())


def test_attack_a_token_dies_with_its_users_password_change_or_deletion_on_every_broker(attack_cluster):
    target = attack_cluster
    _user(target, "short-lived", "first-password-1")
    old = target.token("short-lived", "first-password-1")
    target.admin.upsert_user("short-lived", "second-password-2")
    started = time.monotonic()
    wait_until(lambda: _refused_everywhere(target, old), timeout_s=10, what="the old token refused on every broker")
    changed_s = time.monotonic() - started
    for broker_id in target.cluster.broker_ids():  # and it stays refused: no stale cache brings it back
        answer = _sasl_call(target, broker_id, wire.ACTION_CREATE_TOPICS, CREATE_PROBE, bearer(old))
        assert answer["error_code"] == SASL_FAILED and "invalid token" in answer["message"], answer
    refused = _sasl_call(target, target.cluster.broker_ids()[-1], wire.ACTION_AUTHENTICATE, {},
                         basic("short-lived", "first-password-1"))
    assert refused["error_code"] == SASL_FAILED
    current = target.token("short-lived", "second-password-2")
    target.admin.delete_user("short-lived")
    started = time.monotonic()
    wait_until(lambda: _refused_everywhere(target, current), timeout_s=10, what="the token refused after deletion")
    deleted_s = time.monotonic() - started
    print(f"token revoked on every broker {changed_s:.2f}s after the password change, {deleted_s:.2f}s after deletion")
    assert PROBE_TOPIC not in target.admin.list_topics()
    target.assert_serving()


def _stream_refusal(callable_) -> dict:
    try:
        callable_()
    except flight.FlightError as exc:
        error = wire.to_ads_error(exc)
        return {"error_code": int(error.code), "message": error.message, "raw": str(exc)}
    return {"error_code": 0}


def test_attack_every_call_without_credentials_on_the_sasl_listener_is_refused(attack_cluster):
    target = attack_cluster
    topic = "authn-existing"
    if topic not in target.admin.list_topics():
        target.admin.create_topic(topic, partitions=1, replication_factor=2)
    before = (sorted(target.admin.list_topics()), target.acls(), target.admin.list_users(),
              target.replica_states(topic))
    names = sorted(name for name in REQUIRED if name not in ("fetch", "fetch_session", "produce", "follower_fetch"))
    broker_id = target.cluster.broker_ids()[0]
    for name in names:  # the bodies do not matter: nothing may look at them
        answer = _sasl_call(target, broker_id, name, {"topics": [topic], "topic": topic, "controller_epoch": 10**6,
                                                      "partitions": [{"topic": topic, "partition": 0, "delete": True}]})
        assert answer.get("error_code") == SASL_FAILED, (name, answer)
        _no_traceback(answer)
    client = target.raw(None, target.sasl_address(broker_id))
    fetch = {"type": "fetch", "replica_id": -1, "max_wait_ms": 0,
             "partitions": [{"topic": topic, "partition": 0, "fetch_offset": 0}]}
    try:
        def get():
            client.do_get(flight.Ticket(wire.dumps(fetch))).read_all()

        def session():
            writer, reader = client.do_exchange(flight.FlightDescriptor.for_command(
                wire.dumps({"type": wire.FETCH_SESSION})))
            writer.write_metadata(wire.dumps(fetch))
            reader.read_chunk()

        def produce():
            writer, reader = client.do_exchange(flight.FlightDescriptor.for_command(wire.dumps({"type": wire.PRODUCE})))
            writer.begin(PRODUCE_SCHEMA)
            batch = pa.RecordBatch.from_pylist([{"timestamp": 1_700_000_000_000, "value": b"x"}], schema=PRODUCE_SCHEMA)
            writer.write_with_metadata(batch,
                                       pa.py_buffer(wire.dumps({"topic": topic, "partition": 0, "acks": "all",
                                                                "correlation_id": 1})))
            reader.read_chunk()

        for case, attempt in {"do_get fetch": get, "fetch session": session, "produce stream": produce}.items():
            answer = _stream_refusal(attempt)
            assert answer["error_code"] == SASL_FAILED, (case, answer)
            _no_traceback(answer)
    finally:
        client.close()
    after = (sorted(target.admin.list_topics()), target.acls(), target.admin.list_users(),
             target.replica_states(topic))
    assert after == before
    target.assert_serving()


def test_attack_user_names_with_wildcards_or_separators_are_refused_and_log_nobody_in(attack_cluster):
    target = attack_cluster
    users_before = target.admin.list_users()
    unknown = _sasl_call(target, target.cluster.broker_ids()[0], wire.ACTION_AUTHENTICATE, {},
                         basic("nobody-by-this-name", "any-password-1"))
    for name in ("*", "a*", "User:admin", "a:b", "admin;x", "a,b", "admin,broker-1"):
        with pytest.raises(InvalidRequestError):
            target.admin.upsert_user(name, "some-password-1")
        # Basic splits at the first colon: "User:admin" logs in as user "User" with password "admin:..."
        answer = _sasl_call(target, target.cluster.broker_ids()[0], wire.ACTION_AUTHENTICATE, {},
                            basic(name, "some-password-1"))
        assert {k: answer.get(k) for k in ("error_code", "message")} == \
            {k: unknown.get(k) for k in ("error_code", "message")}, (name, answer)
    assert target.admin.list_users() == users_before
    target.assert_serving()
