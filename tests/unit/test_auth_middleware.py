"""The ``authorization`` header and the principal of a call (broker/rpc/auth_middleware.py).

First the parser alone, over every malformed header of SECURITY.md's attack list; then a real Flight
server (``BrokerFlightServer`` on a SASL_PLAINTEXT listener, a stand-in broker) called over loopback:
each refusal is SASL_AUTHENTICATION_FAILED with a fixed message (no traceback, nothing of the header
echoed), a stream without a token is refused before it holds a stream slot, and a handler sees the
principal of the token, or the Basic credentials on ``authenticate`` only.
"""

from __future__ import annotations

import base64
import threading

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from ads_spark.broker.rpc import auth_middleware, call_context
from ads_spark.broker.rpc.auth_middleware import CallAuthenticator, host_of, parse_authorization
from ads_spark.broker.rpc.server import BrokerFlightServer
from ads_spark.errors import ErrorCode, SaslAuthenticationFailedError
from ads_spark.protocol import wire
from ads_spark.protocol.records import PRODUCE_SCHEMA
from ads_spark.security.credentials import Secret, TokenExpiredError, TokenSignatureError

FIXED_MESSAGES = {auth_middleware.MALFORMED, auth_middleware.TOKEN_INVALID, auth_middleware.TOKEN_EXPIRED,
                  auth_middleware.TOKEN_REQUIRED, auth_middleware.BASIC_ONLY_AUTHENTICATE}
CALL_TIMEOUT_S = 10


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


MALFORMED_HEADERS = {
    "no scheme": ["c2VjcmV0"],
    "unknown scheme": ["Digest c2VjcmV0"],
    "scheme only": ["Basic"],
    "scheme and space only": ["Basic "],
    "two spaces": ["Basic  " + b64(b"alice:pw")],
    "trailing space": ["Bearer tok "],
    "bad base64 characters": ["Basic !!!!"],
    "base64 without padding": ["Basic " + b64(b"alice:pw").rstrip("=")],
    "no colon": ["Basic " + b64(b"alicepw")],
    "empty user": ["Basic " + b64(b":pw")],
    "non-UTF-8": ["Basic " + b64(b"\xff\xfe:pw")],
    "1 MiB": ["Basic " + "A" * (1 << 20)],
    "just over the bound": ["Bearer " + "a" * auth_middleware.HEADER_CHARS_MAX],
    "two headers": ["Bearer a", "Bearer b"],
    "empty value": [""],
}


@pytest.mark.parametrize("case", sorted(MALFORMED_HEADERS))
def test_a_malformed_header_is_refused_with_a_fixed_message_naming_nothing_it_sent(case):
    values = MALFORMED_HEADERS[case]
    with pytest.raises(flight.FlightUnauthenticatedError) as refused:
        parse_authorization(values)
    message = str(refused.value)
    assert auth_middleware.MALFORMED in message
    for value in values:
        if len(value) > 8:
            assert value[6:] not in message
    assert wire.to_ads_error(refused.value).code is ErrorCode.SASL_AUTHENTICATION_FAILED


def test_well_formed_headers_parse():
    assert parse_authorization(None) is None
    basic = parse_authorization(["Basic " + b64("alice:pa:ss wörd".encode())]).basic
    assert basic[0] == "alice" and basic[1] == Secret("pa:ss wörd")  # RFC 7617: the user ends at the first colon
    assert parse_authorization(["bearer ads1.abc"]).token == "ads1.abc"  # the scheme is case-insensitive
    assert "pa:ss" not in repr(parse_authorization(["Basic " + b64(b"alice:pa:ss")]))


@pytest.mark.parametrize("peer, host", [("ipv4:127.0.0.1:5555", "127.0.0.1"), ("ipv6:%5B::1%5D:5000", "::1"),
                                        ("unix:/tmp/s", "/tmp/s")])
def test_host_of_a_peer(peer, host):
    assert host_of(peer) == host


class FakeContext:
    def __init__(self, middleware=None, identity=b""):
        self._middleware = middleware

    def peer(self):
        return "ipv4:10.0.0.7:4000"

    def get_middleware(self, key):
        return self._middleware

    def peer_identity(self):
        return b""


def test_a_call_without_the_middleware_instance_is_anonymous_or_refused_never_trusted():
    plain = CallAuthenticator("INTERNAL", "PLAINTEXT").context_for(FakeContext(), "metadata")
    assert (plain.principal, plain.host, plain.listener_name) == ("User:ANONYMOUS", "10.0.0.7", "INTERNAL")
    sasl = CallAuthenticator("EXTERNAL", "SASL_PLAINTEXT")
    with pytest.raises(SaslAuthenticationFailedError):
        sasl.context_for(FakeContext(), "metadata")
    with pytest.raises(SaslAuthenticationFailedError):
        sasl.context_for(FakeContext())  # a stream or DoGet
    assert sasl.context_for(FakeContext(), "authenticate").principal == "User:ANONYMOUS"


# ---- over the wire ------------------------------------------------------------------------------------


class FakeSecurity:
    authorizer_enabled = False

    def principal_for_token(self, token: str) -> str:
        if token == "good":
            return "User:alice"
        if token == "old":
            raise TokenExpiredError("expired at 123")
        if token == "boom":
            raise RuntimeError("a bug in the verifier")
        raise TokenSignatureError("no secret signed it")


class StandIn:
    config: dict = {}

    def __init__(self):
        self.security = FakeSecurity()
        self.seen: list = []
        self.produced = 0

    def action_handlers(self):
        def record(body):
            ctx = call_context.current()
            basic = ctx.basic_credentials
            self.seen.append((ctx.principal, basic[0] if basic else None, ctx.listener_name))
            return {"error_code": 0}
        return {"init_producer_id": record, "authenticate": record}

    def handle_produce_chunk(self, data, app_metadata, respond):
        self.produced += 1
        respond({"correlation_id": 1, "error_code": 0})


@pytest.fixture()
def sasl_server():
    broker = StandIn()
    server = BrokerFlightServer(broker, "127.0.0.1", 0, listener_name="EXTERNAL", security_protocol="SASL_PLAINTEXT")
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    client = flight.FlightClient(f"grpc+tcp://127.0.0.1:{server.port}")
    try:
        yield broker, server, client
    finally:
        client.close()
        server.shutdown()
        thread.join(CALL_TIMEOUT_S)


def options(*values: str) -> flight.FlightCallOptions:
    return flight.FlightCallOptions(timeout=CALL_TIMEOUT_S,
                                    headers=[(b"authorization", value.encode("ascii")) for value in values])


def call(client, name: str, *values: str):
    return list(client.do_action(flight.Action(name, b"{}"), options(*values)))


def assert_refused(excinfo, expected: str) -> None:
    text = str(excinfo.value)
    assert "Traceback" not in text and "File \"" not in text, text
    assert expected in text
    error = wire.to_ads_error(excinfo.value)
    assert error.code is ErrorCode.SASL_AUTHENTICATION_FAILED and error.message in FIXED_MESSAGES


WIRE_CASES = {
    "no scheme": (["c2VjcmV0"], auth_middleware.MALFORMED),
    "bad base64": (["Basic !!!!"], auth_middleware.MALFORMED),
    "no colon": (["Basic " + b64(b"alicepw")], auth_middleware.MALFORMED),
    "non-UTF-8": (["Basic " + b64(b"\xff:pw")], auth_middleware.MALFORMED),
    "two headers": (["Bearer good", "Bearer good"], auth_middleware.MALFORMED),
    "tampered token": (["Bearer forged"], auth_middleware.TOKEN_INVALID),
    "expired token": (["Bearer old"], auth_middleware.TOKEN_EXPIRED),
    "verifier bug": (["Bearer boom"], auth_middleware.TOKEN_INVALID),
    "no header": ([], auth_middleware.TOKEN_REQUIRED),
    "basic on another action": (["Basic " + b64(b"alice:pw")], auth_middleware.BASIC_ONLY_AUTHENTICATE),
}


@pytest.mark.parametrize("case", sorted(WIRE_CASES))
def test_over_the_wire_every_refusal_is_sasl_authentication_failed_without_a_traceback(sasl_server, case):
    broker, _server, client = sasl_server
    values, expected = WIRE_CASES[case]
    with pytest.raises(flight.FlightError) as refused:
        call(client, "init_producer_id", *values)
    assert_refused(refused, expected)
    assert broker.seen == []  # the handler never ran
    assert call(client, "init_producer_id", "Bearer good")  # still serving


def test_a_one_mebibyte_header_is_refused_without_a_traceback(sasl_server):
    broker, _server, client = sasl_server
    # gRPC refuses metadata over 16 KiB itself (RESOURCE_EXHAUSTED, which pyarrow raises as ArrowInvalid)
    # before the middleware; between 8 and 16 KiB the middleware does (the parser case "just over the bound").
    with pytest.raises(pa.ArrowException) as refused:
        call(client, "init_producer_id", "Bearer " + "a" * (1 << 20))
    assert "Traceback" not in str(refused.value)
    assert broker.seen == []
    assert call(client, "init_producer_id", "Bearer good")


def test_the_handler_sees_the_token_principal_and_basic_credentials_only_on_authenticate(sasl_server):
    broker, _server, client = sasl_server
    call(client, "init_producer_id", "Bearer good")
    call(client, "authenticate", "Basic " + b64(b"bob:secret"))
    call(client, "authenticate")
    assert broker.seen == [("User:alice", None, "EXTERNAL"), ("User:ANONYMOUS", "bob", "EXTERNAL"),
                           ("User:ANONYMOUS", None, "EXTERNAL")]


def test_a_stream_without_a_valid_token_is_refused_before_it_holds_a_stream_slot(sasl_server):
    broker, server, client = sasl_server
    descriptor = flight.FlightDescriptor.for_command(wire.dumps({"type": wire.PRODUCE}))
    batch = pa.RecordBatch.from_pylist([{"value": b"x"}], schema=PRODUCE_SCHEMA)
    for values, expected in (([], auth_middleware.TOKEN_REQUIRED), (["Bearer forged"], auth_middleware.TOKEN_INVALID),
                             (["Basic " + b64(b"a:b")], auth_middleware.BASIC_ONLY_AUTHENTICATE)):
        with pytest.raises(flight.FlightError) as refused:
            writer, reader = client.do_exchange(descriptor, options(*values))
            writer.begin(PRODUCE_SCHEMA)
            writer.write_with_metadata(batch, pa.py_buffer(wire.dumps({"topic": "t", "partition": 0})))
            writer.done_writing()
            reader.read_chunk()
        assert_refused(refused, expected)
        with pytest.raises(flight.FlightError) as refused:
            client.do_get(flight.Ticket(b"{}"), options(*values)).read_all()
        assert_refused(refused, expected)
    assert broker.produced == 0
    assert server.streams.open_count() == 0
