"""The Kafka listener's wiring into a broker (no ZooKeeper) and its small parts: the broker registers the
listener's advertised endpoint as ``kafka.<NAME>`` and closes it on stop, a Kafka port that cannot bind
fails the start with no port left open, the request-byte budget waits a bounded time, PLAIN tokens, and
the identity read from a client certificate (ads_spark/kafka/server.py, sasl.py; broker/broker.py)."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from ads_spark.broker.broker import Broker
from ads_spark.broker.metrics import _StateCollector
from ads_spark.cluster import free_port
from ads_spark.config import BrokerConfig
from ads_spark.kafka.sasl import parse_plain_token
from ads_spark.kafka.server import ByteBudget, certificate_identity


def _config(tmp_path, **values) -> BrokerConfig:
    return BrokerConfig({"broker.id": "1", "log.dirs": str(tmp_path / "logs"), "zookeeper.connect": "127.0.0.1:1",
                         "metrics.port": "-1", **values})


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return False
    except ConnectionRefusedError:
        return True


def test_a_broker_registers_its_kafka_listener_as_kafka_name_and_closes_it_on_stop(tmp_path):
    broker = Broker(_config(tmp_path, **{"kafka.listeners": "PLAINTEXT://127.0.0.1:0",
                                         "kafka.advertised.listeners": "PLAINTEXT://kafka.example:0"}))
    broker.start()
    try:
        port = broker.kafka_servers["PLAINTEXT"].port
        assert broker.endpoints["kafka.PLAINTEXT"] == ("kafka.example", port, "PLAINTEXT")
        assert broker.endpoints["PLAINTEXT"][1] == broker.port  # the Flight listener is still there
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            # ApiVersions v0, correlation id 9, no client id: answered with header v0 and error 0
            body = struct.pack(">hhih", 18, 0, 9, -1)
            sock.sendall(struct.pack(">i", len(body)) + body)
            size, correlation_id, error_code = struct.unpack(">iih", sock.recv(10))
            assert (correlation_id, error_code) == (9, 0) and size > 6
            metrics = {family.name: family for family in _StateCollector(broker).collect()}
            assert metrics["ads_kafka_connections"].samples[0].value == 1
            assert [(sample.labels, sample.value) for sample in metrics["ads_kafka_requests"].samples
                    if sample.name.endswith("_total")] == [({"api": "ApiVersions"}, 1)]
    finally:
        broker.stop(controlled=False)
    assert _refused(port)


def test_a_kafka_port_that_cannot_bind_fails_the_start_and_leaves_no_port_open(tmp_path):
    flight_port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        kafka_port = taken.getsockname()[1]
        broker = Broker(_config(tmp_path, listeners=f"PLAINTEXT://127.0.0.1:{flight_port}",
                                **{"kafka.listeners": f"PLAINTEXT://127.0.0.1:{kafka_port}"}))
        with pytest.raises(OSError):
            broker.start()
    assert _refused(flight_port)  # the Flight listener opened first was closed again
    assert broker.kafka_servers == {}


def test_the_request_byte_budget_waits_a_bounded_time_and_frees_on_release():
    budget = ByteBudget(100)
    assert budget.acquire(60, 1) and budget.used == 60
    started = time.monotonic()
    assert not budget.acquire(50, 0.2)  # no room: refused after the bound, nothing taken
    assert 0.15 <= time.monotonic() - started < 2 and budget.used == 60
    releaser = threading.Timer(0.1, budget.release, args=(60,))
    releaser.start()
    assert budget.acquire(100, 5) and budget.used == 100  # room came while it waited
    releaser.join()


@pytest.mark.parametrize("token, expected", [
    (b"\x00alice\x00secret", ("alice", "secret")),
    (b"alice\x00alice\x00pass:with\x01bytes", ("alice", "pass:with\x01bytes")),
    (b"bob\x00alice\x00secret", None),            # authorizing as someone else: no impersonation
    (b"\x00alice", None), (b"\x00\x00secret", None), (b"\x00alice\x00", None),
    (b"\x00alice\x00se\x00cret", None), (b"\x00al\xffice\x00secret", None), (b"\x00a\x00" + b"x" * 5000, None),
])
def test_a_plain_token_is_authzid_user_password(token, expected):
    parsed = parse_plain_token(token)
    if expected is None:
        assert parsed is None
    else:
        assert (parsed[0], parsed[1].reveal()) == expected


def test_a_client_certificate_identity_is_its_first_san_else_its_cn():
    assert certificate_identity({"subject": ((("commonName", "cn-name"),),),
                                 "subjectAltName": (("DNS", "alice"), ("DNS", "other"))}) == "alice"
    assert certificate_identity({"subject": ((("organizationName", "o"),), (("commonName", "carol"),))}) == "carol"
    assert certificate_identity(None) == "" and certificate_identity({}) == ""


class _Security:
    def authenticate(self, username, password):
        from ads_spark.security.credentials import AuthenticationError

        if (username, password.reveal()) != ("alice", "right"):
            raise AuthenticationError("authentication failed")
        return {"principal": f"User:{username}"}


def _sasl_call(protocol: str, version: int, connection=None):
    from types import SimpleNamespace

    from ads_spark.broker.rpc.call_context import CallContext
    from ads_spark.kafka.api import ConnectionState, KafkaCall, RequestHeader

    connection = connection or ConnectionState(CallContext("User:ANONYMOUS", "127.0.0.1", "kafka.S", protocol),
                                               authenticated=protocol not in ("SASL_SSL", "SASL_PLAINTEXT"))
    return KafkaCall(SimpleNamespace(security=_Security()), RequestHeader(17, version, 1, None), connection)


def test_sasl_plain_logs_in_once_and_every_refusal_closes_the_connection_after_its_answer():
    from types import SimpleNamespace

    from ads_spark.kafka.sasl import handle_sasl_authenticate, handle_sasl_handshake

    plain = SimpleNamespace(mechanism="PLAIN")
    call = _sasl_call("SASL_SSL", 1)
    assert handle_sasl_handshake(call, plain) == {"error_code": 0, "mechanisms": ["PLAIN"]}
    answer = handle_sasl_authenticate(call, SimpleNamespace(auth_bytes=b"\x00alice\x00right"))
    assert answer["error_code"] == 0 and call.connection.authenticated
    assert call.context.principal == "User:alice" and not call.connection.sasl.close_after_response
    again = handle_sasl_authenticate(call, SimpleNamespace(auth_bytes=b"\x00alice\x00right"))  # no re-auth
    assert again["error_code"] == 34 and call.connection.sasl.close_after_response

    refusals = [  # (listener protocol, handshake version, mechanism, token) -> code of the failing step
        ("SASL_SSL", 1, "PLAIN", b"\x00alice\x00wrong", 58), ("SASL_SSL", 1, "PLAIN", b"\x00bob\x00right", 58),
        ("SASL_SSL", 1, "PLAIN", b"garbage", 58), ("SASL_SSL", 1, "SCRAM-SHA-512", None, 33),
        ("SASL_SSL", 0, "PLAIN", None, 34), ("SSL", 1, "PLAIN", None, 34),
    ]
    for protocol, version, mechanism, token, code in refusals:
        call = _sasl_call(protocol, version)
        shaken = handle_sasl_handshake(call, SimpleNamespace(mechanism=mechanism))
        answer = shaken if token is None else handle_sasl_authenticate(call, SimpleNamespace(auth_bytes=token))
        assert answer["error_code"] == code, (protocol, version, mechanism, token)
        assert call.connection.sasl.close_after_response
        assert call.context.principal == "User:ANONYMOUS"
        assert call.connection.authenticated == (protocol == "SSL")  # an SSL connection needs no login
        if code == 58:
            assert answer["error_message"] == "Authentication failed: Invalid username or password"
    skipped = _sasl_call("SASL_SSL", 1)  # SaslAuthenticate without a handshake first
    assert handle_sasl_authenticate(skipped, SimpleNamespace(auth_bytes=b"\x00alice\x00right"))["error_code"] == 34
    assert not skipped.connection.authenticated


def test_gathered_send_delivers_every_buffer_in_order_across_short_sends():
    from ads_spark.kafka.server import SENDMSG_BUFFERS_MAX, _send_gathered

    # more buffers than one sendmsg takes, and more bytes than a socket buffer holds: short sends happen
    parts = [bytearray(bytes([i % 251]) * (1 + i * 97 % 9000)) for i in range(SENDMSG_BUFFERS_MAX * 2 + 3)]
    expected = b"".join(parts)
    sender, receiver = socket.socketpair()
    received = bytearray()

    def drain():
        while len(received) < len(expected):
            chunk = receiver.recv(65536)
            if not chunk:
                return
            received.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        _send_gathered(sender, parts, time.monotonic() + 30)
        reader.join(30)
    finally:
        sender.close()
        receiver.close()
    assert bytes(received) == expected
