"""The client transport (protocol/transport.py): TLS options, bearer tokens and fast TLS failures.

Single-layer tests: token refresh with a fake clock and a fake ``authenticate``; option building; error
mapping of gRPC's TLS texts; and real TLS handshakes against a plain pyarrow Flight server in this process
(certificates from security/certs.py), which a broker listener is built the same way as.
"""

from __future__ import annotations

import base64
import json
import pickle
import threading
import time

import pyarrow.flight as flight
import pytest

from ads_spark.client.admin import admin_config
from ads_spark.config import ADMIN_KEYS, CONSUMER_KEYS, PRODUCER_KEYS, check_client_keys
from ads_spark.errors import (ErrorCode, InvalidConfigError, NetworkExceptionError, SaslAuthenticationFailedError,
                              SslAuthenticationFailedError)
from ads_spark.protocol import wire
from ads_spark.protocol.connection import Connections
from ads_spark.protocol.transport import (REAUTH_WINDOW_S, REFRESH_RETRY_S, ClientTransport, TokenSource,
                                          token_expiry_ms)
from ads_spark.security import certs, tls
from ads_spark.security.client_security import CLIENT_SECURITY_KEYS, SecurityConfigError, parse_client_security

PASSWORD = "hunter2-pw"
LIFETIME_MS = 100_000


class FakeClock:
    def __init__(self):
        self.s = 1000.0

    def monotonic(self) -> float:
        return self.s

    def wall_ms(self) -> int:
        return int(self.s * 1000)


class FakeAuthenticate:
    """A broker's ``authenticate``: a new token per call, LIFETIME_MS from the clock; can fail."""

    def __init__(self, clock: FakeClock):
        self.clock, self.calls, self.fail_with = clock, 0, None

    def __call__(self):
        self.calls += 1
        if self.fail_with is not None:
            raise self.fail_with
        return {"token": f"tok-{self.calls}", "expiry_ms": self.clock.wall_ms() + LIFETIME_MS, "principal": "User:a"}


def _source():
    clock = FakeClock()
    auth = FakeAuthenticate(clock)
    return TokenSource(auth, monotonic_s=clock.monotonic, wall_ms=clock.wall_ms), auth, clock


# --- tokens -------------------------------------------------------------------------------------------

def test_a_token_is_obtained_lazily_cached_and_refreshed_at_80_percent_of_its_lifetime():
    source, auth, clock = _source()
    assert auth.calls == 0  # nothing until a call needs it
    assert source.token() == "tok-1" and source.token() == "tok-1" and auth.calls == 1
    clock.s += 0.79 * LIFETIME_MS / 1000
    assert source.token() == "tok-1" and auth.calls == 1
    clock.s += 0.02 * LIFETIME_MS / 1000
    assert source.token() == "tok-2" and auth.calls == 2
    assert "tok-" not in repr(source)


def test_a_failed_refresh_keeps_the_valid_token_for_a_while_and_a_wrong_password_is_final():
    source, auth, clock = _source()
    source.token()
    clock.s += 0.9 * LIFETIME_MS / 1000
    auth.fail_with = NetworkExceptionError("broker down")
    assert source.token() == "tok-1" and auth.calls == 2
    assert source.token() == "tok-1" and auth.calls == 2  # not asked again within REFRESH_RETRY_S
    clock.s += REFRESH_RETRY_S + 0.1
    assert source.token() == "tok-1" and auth.calls == 3
    clock.s += LIFETIME_MS / 1000  # past expiry: no old token to fall back on
    with pytest.raises(NetworkExceptionError):
        source.token()
    auth.fail_with = SaslAuthenticationFailedError("authentication failed: invalid username or password")
    with pytest.raises(SaslAuthenticationFailedError) as info:
        source.token()
    assert not info.value.retriable


def test_a_refused_token_is_retriable_once_then_the_refusal_is_final():
    source, auth, clock = _source()
    first = source.token()
    error = source.refused(first, SaslAuthenticationFailedError("token expired"))
    assert error.retriable  # the caller's retry authenticates again
    second = source.token()
    assert second == "tok-2" and auth.calls == 2
    clock.s += REAUTH_WINDOW_S / 2
    error = source.refused(second, SaslAuthenticationFailedError("token revoked"))
    assert not error.retriable and error.code == ErrorCode.SASL_AUTHENTICATION_FAILED
    # much later, a new refusal of a token in good standing is again worth one retry
    third = source.token()
    clock.s += 2 * REAUTH_WINDOW_S
    assert source.refused(third, SaslAuthenticationFailedError("token revoked")).retriable


def test_a_refusal_of_an_already_replaced_token_keeps_the_new_one():
    source, auth, _ = _source()
    old = source.token()
    assert source.refused(old, SaslAuthenticationFailedError("expired")).retriable
    new = source.token()
    # a second call that used the old token reports its refusal late: the new token stays
    assert source.refused(old, SaslAuthenticationFailedError("expired")).retriable
    assert source.token() == new and auth.calls == 2


def test_threads_share_one_authentication():
    clock = FakeClock()
    entered = threading.Event()
    release = threading.Event()
    calls = []

    def slow_authenticate():
        calls.append(1)
        entered.set()
        release.wait(5)
        return {"token": "shared", "expiry_ms": clock.wall_ms() + LIFETIME_MS}

    source = TokenSource(slow_authenticate, monotonic_s=clock.monotonic, wall_ms=clock.wall_ms)
    got = []
    threads = [threading.Thread(target=lambda: got.append(source.token())) for _ in range(8)]
    for thread in threads:
        thread.start()
    assert entered.wait(5)
    time.sleep(0.05)
    release.set()
    for thread in threads:
        thread.join(5)
    assert got == ["shared"] * 8 and len(calls) == 1


def _token_with_expiry(expiry_ms: int) -> str:
    payload = base64.urlsafe_b64encode(json.dumps({"u": "a", "v": 1, "exp": expiry_ms}).encode()).decode().rstrip("=")
    return f"ads1.{payload}.c2lnbmF0dXJl"


def test_a_static_sasl_token_is_used_as_is_and_its_expiry_or_refusal_says_it_cannot_be_refreshed():
    clock = FakeClock()
    token = _token_with_expiry(clock.wall_ms() + 5000)
    assert token_expiry_ms(token) == clock.wall_ms() + 5000 and token_expiry_ms("garbage") is None
    source = TokenSource(None, token, monotonic_s=clock.monotonic, wall_ms=clock.wall_ms)
    assert source.token() == token
    refused = source.refused(token, SaslAuthenticationFailedError("revoked"))
    assert not refused.retriable and "sasl.token" in str(refused) and "cannot be refreshed" in str(refused)
    clock.s += 6
    with pytest.raises(SaslAuthenticationFailedError, match="sasl.token was expired.*cannot be refreshed") as info:
        source.token()
    assert token not in str(info.value)


# --- options and keys ---------------------------------------------------------------------------------

def test_sasl_token_config_builds_bearer_options_and_no_secret_shows():
    token = _token_with_expiry(2**62)
    transport = ClientTransport.from_config({"bootstrap.servers": "127.0.0.1:1", "security.protocol": "SASL_PLAINTEXT",
                                             "sasl.token": token})
    options = transport.call_options(2.5)
    assert f"authorization', b'Bearer {token}'" in repr(options)  # pyarrow shows headers: never log options
    assert token not in repr(transport) and token not in repr(transport.security) and token not in repr(transport.tokens)
    pickle.dumps(transport.security)  # a token (unlike a password) may travel to Spark executors
    plain = ClientTransport.from_config({"bootstrap.servers": "127.0.0.1:1"})
    assert "headers=[]" in repr(plain.call_options(1.0)) and plain.location("h", 1) == "grpc+tcp://h:1"
    password = ClientTransport.from_config({"bootstrap.servers": "127.0.0.1:1", "security.protocol": "SASL_SSL",
                                            "sasl.username": "alice", "sasl.password": PASSWORD})
    assert PASSWORD not in repr(password) + repr(password.security)


@pytest.mark.parametrize("config, key, problem", [
    ({"security.protocol": "SASL_SSL", "sasl.token": "t", "sasl.password": "x", "sasl.username": "a"},
     "sasl.username", "either"),
    ({"security.protocol": "SSL", "sasl.token": "t"}, "sasl.token", "SASL_PLAINTEXT or SASL_SSL"),
    ({"security.protocol": "SASL_SSL", "sasl.token": "t\n"}, None, None),  # stripped: fine
    ({"security.protocol": "SASL_SSL", "sasl.token": "t" * 2000}, "sasl.token", "at most"),
    ({"ssl.truststore.location": "/x"}, "ssl.truststore.location", "SSL or SASL_SSL"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.token": "t", "ssl.keystore.location": "/x"},
     "ssl.keystore.location", "SSL or SASL_SSL"),
    ({"security.protocol": "SSL", "ssl.key.password": "pw"}, "ssl.key.password", "needs ssl.keystore.location"),
    ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "ldap"},
     "ssl.endpoint.identification.algorithm", "https"),
    ({"ssl.endpoint.identification.algorithm": ""}, "ssl.endpoint.identification.algorithm", "SSL or SASL_SSL"),
])
def test_client_security_keys_are_checked_by_name(config, key, problem):
    if key is None:
        assert parse_client_security(config).token == "t"
        return
    with pytest.raises(SecurityConfigError) as info:
        parse_client_security(config)
    assert info.value.key == key and problem in str(info.value) and "pw" not in str(info.value)


def test_an_empty_endpoint_identification_algorithm_is_refused_naming_the_key():
    with pytest.raises(InvalidConfigError, match="'ssl.endpoint.identification.algorithm'.*not supported"):
        ClientTransport.from_config({"bootstrap.servers": "127.0.0.1:1", "security.protocol": "SSL",
                                     "ssl.endpoint.identification.algorithm": ""})


def test_missing_tls_files_fail_when_the_client_is_made(tmp_path):
    with pytest.raises(InvalidConfigError, match="ssl.truststore.location"):
        Connections({"bootstrap.servers": "127.0.0.1:1", "security.protocol": "SSL",
                     "ssl.truststore.location": str(tmp_path / "absent.pem")})


def test_client_key_tables_accept_the_security_keys_and_refuse_others():
    config = {"bootstrap.servers": "h:1", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
              "sasl.jaas.config": "x", "sasl.username": "u", "sasl.password": "p", "sasl.token": "t",
              "ssl.truststore.location": "a", "ssl.keystore.location": "b", "ssl.key.password": "c",
              "ssl.endpoint.identification.algorithm": "https"}
    assert set(config) - {"bootstrap.servers"} == set(CLIENT_SECURITY_KEYS)
    for keys, what in ((PRODUCER_KEYS, "producer"), (CONSUMER_KEYS, "consumer"), (ADMIN_KEYS, "admin")):
        check_client_keys(keys, config, what)
        with pytest.raises(InvalidConfigError, match="unknown .* config 'ssl.keystore.typo'"):
            check_client_keys(keys, {**config, "ssl.keystore.typo": "x"}, what)
    assert admin_config({**config, "acks": "all"}) == config  # an Admin made from a producer's config keeps them


# --- TLS failures as errors ---------------------------------------------------------------------------

_PREFIX = "Flight returned unavailable error, with message: failed to connect to all addresses; last error: "


@pytest.mark.parametrize("detail, expected", [
    ("UNKNOWN: ipv4:127.0.0.1:5: Ssl handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: error:0A000086:SSL "
     "routines::certificate verify failed: self-signed certificate in certificate chain", "not signed by a CA"),
    ("UNKNOWN: ipv4:127.0.0.1:5: Peer name 127.0.0.1 is not in peer certificate", "does not name the host"),
    ("UNKNOWN: ipv4:127.0.0.1:5: Ssl handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: error:0A00010B:SSL "
     "routines::wrong version number", "does not speak TLS"),
    ("UNKNOWN: ipv4:127.0.0.1:5: Failed to connect to remote host: Connection refused", None),
    ("UNAVAILABLE: ipv4:127.0.0.1:5: Socket closed", None),
])
def test_recognisable_tls_failures_are_not_retriable(detail, expected):
    error = wire.to_ads_error(flight.FlightUnavailableError(_PREFIX + detail))
    if expected is None:
        assert isinstance(error, NetworkExceptionError) and error.retriable
    else:
        assert isinstance(error, SslAuthenticationFailedError) and not error.retriable and expected in str(error)


def test_an_unauthenticated_flight_error_is_a_sasl_failure():
    error = wire.to_ads_error(flight.FlightUnauthenticatedError("authentication failed"))
    assert isinstance(error, SaslAuthenticationFailedError) and not error.retriable


# --- real TLS handshakes against a Flight server in this process ------------------------------------

class _EchoIdentity(flight.FlightServerBase):
    """Answers every action with the caller's certificate identity and authorization header."""

    def __init__(self, location, **kwargs):
        super().__init__(location, middleware={"h": _HeaderKeeperFactory()}, **kwargs)

    def do_action(self, context, action):
        if action.type == "metadata":
            yield flight.Result(wire.dumps({"brokers": [], "topics": [], "controller_id": -1}))
            return
        header = context.get_middleware("h").authorization
        yield flight.Result(wire.dumps({"identity": context.peer_identity().decode(), "authorization": header}))


class _HeaderKeeper(flight.ServerMiddleware):
    def __init__(self, authorization):
        self.authorization = authorization


class _HeaderKeeperFactory(flight.ServerMiddlewareFactory):
    def start_call(self, info, headers):
        return _HeaderKeeper((headers.get("authorization") or [None])[0])


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    base = tmp_path_factory.mktemp("pki")
    ca, other = certs.create_ca(base / "ca"), certs.create_ca(base / "other", common_name="Other CA")
    server = certs.issue_certificate(ca, base / "server", "server", sans=("localhost", "127.0.0.1"))
    client = certs.issue_certificate(ca, base / "client", "alice", sans=("alice",), key_password="kp-secret")
    rogue = certs.issue_certificate(other, base / "rogue", "mallory", sans=("mallory",))
    chain, key = tls.read_pem_keystore(str(server.keystore_path))
    ca_pem = tls.read_truststore(str(ca.cert_path))
    servers = {
        "tls": _EchoIdentity("grpc+tls://127.0.0.1:0", tls_certificates=[flight.CertKeyPair(chain, key)]),
        "mtls": _EchoIdentity("grpc+tls://127.0.0.1:0", tls_certificates=[flight.CertKeyPair(chain, key)],
                              verify_client=True, root_certificates=ca_pem),
    }
    yield {"ca": str(ca.cert_path), "other": str(other.cert_path), "client": str(client.keystore_path),
           "rogue": str(rogue.keystore_path), "ports": {name: s.port for name, s in servers.items()}}
    for server_ in servers.values():
        server_.shutdown()


def _connections(pki, listener: str, **config) -> Connections:
    return Connections({"bootstrap.servers": f"127.0.0.1:{pki['ports'][listener]}", "request.timeout.ms": 10_000,
                        **config})


def _ask(connections: Connections) -> dict:
    host, port = connections.bootstrap[0]
    return connections.call_action(host, port, "whoami", {})


def test_tls_and_mutual_tls_round_trips_with_an_encrypted_client_key(pki):
    secure = {"security.protocol": "SSL", "ssl.truststore.location": pki["ca"]}
    connections = _connections(pki, "tls", **secure)
    assert _ask(connections) == {"identity": "", "authorization": None}
    mutual = _connections(pki, "mtls", **secure, **{"ssl.keystore.location": pki["client"],
                                                     "ssl.key.password": "kp-secret"})
    assert _ask(mutual)["identity"] == "alice"  # the certificate's first SAN: the broker's principal source
    assert "kp-secret" not in repr(mutual.transport) + repr(mutual.transport.security)
    connections.close()
    mutual.close()


def _fails_fast(connections: Connections, match: str) -> SslAuthenticationFailedError:
    started = time.monotonic()
    with pytest.raises(SslAuthenticationFailedError, match=match) as info:
        connections.refresh()  # call_any over the bootstrap list: must stop at once, not retry to a timeout
    assert time.monotonic() - started < 2.0 and not info.value.retriable
    connections.close()
    return info.value


def test_tls_misconfigurations_fail_fast_and_not_retriably(pki):
    ca = {"ssl.truststore.location": pki["ca"]}
    _fails_fast(_connections(pki, "tls", **{"security.protocol": "SSL", "ssl.truststore.location": pki["other"]}),
                "not signed by a CA")
    _fails_fast(_connections(pki, "tls"), "expects TLS but security.protocol is PLAINTEXT")
    _fails_fast(_connections(pki, "mtls", **{"security.protocol": "SASL_PLAINTEXT", "sasl.token": "t"}),
                "expects TLS.*use SASL_SSL")
    _fails_fast(_connections(pki, "mtls", **{"security.protocol": "SSL"}, **ca), "requires a client certificate")
    _fails_fast(_connections(pki, "mtls", **{"security.protocol": "SSL", "ssl.keystore.location": pki["rogue"]}, **ca),
                "refused this client's certificate")
    plain = flight.FlightServerBase("grpc+tcp://127.0.0.1:0")
    try:
        _fails_fast(Connections({"bootstrap.servers": f"127.0.0.1:{plain.port}", "security.protocol": "SSL", **ca}),
                    "does not speak TLS")
    finally:
        plain.shutdown()


def test_a_dead_port_stays_a_retriable_network_error(pki):
    connections = Connections({"bootstrap.servers": "127.0.0.1:1", "security.protocol": "SSL",
                               "ssl.truststore.location": pki["ca"]})
    with pytest.raises(NetworkExceptionError) as info:
        connections.refresh()
    assert info.value.retriable


class _SaslServer(flight.FlightServerBase):
    """``authenticate`` with Basic credentials; other actions need the Bearer token of the current generation."""

    def __init__(self):
        super().__init__("grpc+tcp://127.0.0.1:0", middleware={"h": _HeaderKeeperFactory()})
        self.authentications, self.generation, self.seen = 0, 1, []

    def do_action(self, context, action):
        header = context.get_middleware("h").authorization or ""
        if action.type == "authenticate":
            if header != "Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode():
                raise _refusal("authentication failed: invalid username or password")
            self.authentications += 1
            yield flight.Result(wire.dumps({"token": f"token-{self.generation}-{self.authentications}",
                                            "expiry_ms": int(time.time() * 1000) + 3_600_000,
                                            "principal": "User:alice"}))
            return
        self.seen.append(header)
        if not header.startswith(f"Bearer token-{self.generation}-"):
            raise _refusal("token revoked")
        yield flight.Result(wire.dumps({"ok": True}))


def _refusal(message: str) -> flight.FlightUnauthenticatedError:
    return flight.FlightUnauthenticatedError(message, extra_info=wire.dumps(
        {"error_code": int(ErrorCode.SASL_AUTHENTICATION_FAILED), "message": message}))


def test_a_password_client_authenticates_once_and_re_authenticates_once_after_a_refusal():
    server = _SaslServer()
    try:
        config = {"bootstrap.servers": f"127.0.0.1:{server.port}", "security.protocol": "SASL_PLAINTEXT",
                  "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                      f'username="alice" password="{PASSWORD}";'}
        connections = Connections(config)
        for _ in range(3):
            assert connections.call_action("127.0.0.1", server.port, "x", {}) == {"ok": True}
        assert server.authentications == 1 and all(h.startswith("Bearer ") for h in server.seen)
        assert not any(PASSWORD in h for h in server.seen)
        server.generation = 2  # every token issued so far is now refused: one new authentication fixes it
        assert connections.call_action("127.0.0.1", server.port, "x", {}) == {"ok": True}
        assert server.authentications == 2
        wrong = Connections({**config, "sasl.jaas.config": config["sasl.jaas.config"].replace(PASSWORD, "nope")})
        started = time.monotonic()
        with pytest.raises(SaslAuthenticationFailedError, match="invalid username or password") as info:
            wrong.refresh()
        assert not info.value.retriable and time.monotonic() - started < 2.0
        connections.close()
        wrong.close()
    finally:
        server.shutdown()


# --- streams: a refused token reaches the produce channel and the fetch session as itself -----------

class _RefuseEveryBearer(flight.ServerMiddlewareFactory):
    """What a SASL listener's middleware does with a token it will not take: refuse the call at its start."""

    def start_call(self, info, headers):
        raise _refusal("authentication failed: token expired")


def test_a_refused_token_fails_a_produce_stream_and_a_fetch_session_as_an_authentication_error():
    from types import SimpleNamespace

    import pyarrow as pa

    from ads_spark.client.producer_channel import BrokerChannel
    from ads_spark.protocol.fetch_session import FetchSession
    from ads_spark.protocol.records import PRODUCE_SCHEMA

    server = flight.FlightServerBase("grpc+tcp://127.0.0.1:0", middleware={"auth": _RefuseEveryBearer()})
    token = _token_with_expiry(2**62)
    transport = ClientTransport.from_config({"security.protocol": "SASL_PLAINTEXT", "sasl.token": token})
    client = transport.connect("127.0.0.1", server.port)
    try:
        answers = []
        channel = BrokerChannel(client, broker_id=1, answer_deadline_ms=10_000, transport=transport,
                                address=("127.0.0.1", server.port))
        item = SimpleNamespace(batch=pa.RecordBatch.from_pylist([], schema=PRODUCE_SCHEMA))
        for _ in range(2):  # the first send may be queued or refused (the stream already failed); a second is refused
            try:
                channel.send(item, {"topic": "t", "partition": 0}, lambda item, offset, error: answers.append(error))
            except SaslAuthenticationFailedError as refused:
                answers.append(refused)
            deadline = time.monotonic() + 10
            while not channel.broken and time.monotonic() < deadline:
                time.sleep(0.01)
        channel.close()
        assert len(answers) == 2 and all(isinstance(answer, SaslAuthenticationFailedError) for answer in answers)
        assert isinstance(answers[0], SaslAuthenticationFailedError) and not answers[0].retriable
        assert "sasl.token" in str(answers[0])  # not "lost the produce stream": resending cannot help
        session = FetchSession(lambda: client, transport=transport, address=("127.0.0.1", server.port))
        with pytest.raises(SaslAuthenticationFailedError, match="sasl.token") as info:
            session.fetch({"type": "fetch"}, 5.0)
        assert not info.value.retriable
        session.close()
    finally:
        client.close()
        server.shutdown()
