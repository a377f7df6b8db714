"""ads_spark.security.tls: principal mapping rules, the broker's TLS settings, and TLS failures as real
Flight clients see them.

The failure tests run a real ``FlightServerBase`` over TLS on 127.0.0.1 and record what the client sees.
Texts observed with pyarrow 26 (each failure surfaced in ~1-10 ms; no gRPC retry delays it):

* client trusts another CA (or only the system CAs):
  "... last error: UNKNOWN: ipv4:127.0.0.1:P: Ssl handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL:
  error:0A000086:SSL routines::certificate verify failed: self-signed certificate in certificate chain"
* hostname mismatch (override_hostname, or a certificate without the dialled host):
  "... last error: UNKNOWN: ipv4:127.0.0.1:P: Peer name wronghost is not in peer certificate"
* server certificate without serverAuth / with a key usage TLS refuses:
  "... certificate verify failed: unsuitable certificate purpose"; expired: "... certificate has expired"
* TLS client -> plaintext listener: "... Ssl handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL:
  error:0A00010B:SSL routines::wrong version number"
* mTLS listener refusing the client (no certificate, rogue CA, expired, server-only EKU): the client sees
  only "... last error: UNAVAILABLE: ipv4:127.0.0.1:P: Socket closed" (the server logs the reason)
* plaintext client -> TLS listener: the same "... UNAVAILABLE: ipv4:127.0.0.1:P: Socket closed"
* dead port: "... last error: UNKNOWN: ipv4:127.0.0.1:P: Failed to connect to remote host: Connection refused"
* a socket that accepts and closes: plaintext "... Socket closed", TLS "... Handshake read failed (Socket closed)"
  (or "(recvmsg:Connection reset by peer)" when the close races the client's hello)
All start "Flight returned unavailable error, with message: failed to connect to all addresses; ".
"""

from __future__ import annotations

import datetime as dt
import socket
import threading
import time

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from pyarrow import flight

from ads_spark.errors import InvalidConfigError, SslAuthenticationFailedError
from ads_spark.security import certs
from ads_spark.security.tls import PrincipalMapper, ServerTls, classify_tls_failure, read_pem_keystore, server_tls

FAIL_FAST_S = 2.0  # the issue wants a TLS failure reported within 1-2 s
CALL_TIMEOUT_S = 5.0


# --- ssl.principal.mapping.rules --------------------------------------------------------------------------

RULES = (r"RULE:^(.*)@EXAMPLE\.COM$/$1/L, RULE:^svc-(?<role>[a-z]+)$/${role}/U,"
         r" RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/, RULE:^host-(\d+)$/broker\$$1/, DEFAULT")


@pytest.mark.parametrize("rules, identity, principal", [
    ("DEFAULT", "alice", "User:alice"),
    ("", "alice", "User:alice"),
    ("DEFAULT", b"Alice.Smith", "User:Alice.Smith"),
    ("DEFAULT", b"", "User:ANONYMOUS"),
    ("DEFAULT", "", "User:ANONYMOUS"),
    (RULES, "Bob@EXAMPLE.COM", "User:bob"),                 # L flag
    (RULES, "svc-fetcher", "User:FETCHER"),                 # U flag, Java named group
    (RULES, "CN=carol,OU=ServiceUsers,O=x", "User:carol"),  # a pattern with commas (Kafka's docs example)
    (RULES, "host-7", "User:broker$7"),                     # escaped dollar in the replacement
    (RULES, "bob@example.org", "User:bob@example.org"),     # no RULE matches: falls through to DEFAULT
    ("RULE:^a(.*)$/x$1/,RULE:^(.*)$/second-$1/", "zed", "User:second-zed"),  # first non-matching rule skipped
    ("RULE:^a(.*)$/x$1/,RULE:^(.*)$/second-$1/", "abc", "User:xbc"),         # first match wins
    ("RULE:b/whole/", "abc", None),  # the pattern must match the WHOLE identity; no rule left: refused
])
def test_principal_mapping_rules(rules, identity, principal):
    mapper = PrincipalMapper(rules)
    if principal is None:
        with pytest.raises(SslAuthenticationFailedError, match="ssl.principal.mapping.rules"):
            mapper.principal_of(identity)
    else:
        assert mapper.principal_of(identity) == principal


@pytest.mark.parametrize("rules", [
    "RULE:abc", "RULE:a/b", "FOO", "DEFAULT,", "DEFAULT DEFAULT", "RULE:a/b/X", "RULE:(/x/",
    "RULE:a/$1/", "RULE:(a)/$2/", "RULE:a/${nope}/", "RULE:a/x\\", ",DEFAULT",
])
def test_invalid_rules_are_refused_naming_the_key(rules):
    with pytest.raises(InvalidConfigError, match="ssl.principal.mapping.rules"):
        PrincipalMapper(rules)


def test_mapping_refuses_an_empty_result_and_oversized_or_non_utf8_identities():
    with pytest.raises(SslAuthenticationFailedError, match="empty name"):
        PrincipalMapper("RULE:^x(.*)$/$1/").principal_of("x")
    with pytest.raises(SslAuthenticationFailedError):
        PrincipalMapper().principal_of("a" * 2000)
    with pytest.raises(SslAuthenticationFailedError, match="UTF-8"):
        PrincipalMapper().principal_of(b"\xff\xfe")


# --- server_tls --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, a rogue CA and the certificates the tests present (EC P-256: the whole set takes ~50 ms)."""
    root = tmp_path_factory.mktemp("pki")
    ca = certs.create_ca(root / "ca")
    rogue = certs.create_ca(root / "rogue", common_name="Rogue CA")
    now = dt.datetime.now(dt.timezone.utc)
    past = dict(not_before=now - dt.timedelta(days=10), not_after=now - dt.timedelta(days=1))
    issued = {
        "server": certs.issue_certificate(ca, root, "server", ("localhost", "127.0.0.1"), key_password="pw"),
        "other_host": certs.issue_certificate(ca, root, "other_host", ("otherhost",)),
        "client_only": certs.issue_certificate(ca, root, "client_only", ("localhost", "127.0.0.1"), server=False),
        "bad_usage": certs.issue_certificate(ca, root, "bad_usage", key_usage_digital_signature=False),
        "expired_server": certs.issue_certificate(ca, root, "expired_server", **past),
        "alice": certs.issue_certificate(ca, root, "alice", ("alice", "127.0.0.1"), common_name="Alice", server=False),
        "rogue_alice": certs.issue_certificate(rogue, root, "rogue_alice", ("alice",), server=False),
        "expired_alice": certs.issue_certificate(ca, root, "expired_alice", ("alice",), server=False, **past),
        "server_only_alice": certs.issue_certificate(ca, root, "server_only_alice", ("alice",), client=False),
    }
    return {"ca": ca, "rogue": rogue, **issued}


def _config(pki, **overrides):
    config = {"ssl.keystore.location": str(pki["server"].keystore_path), "ssl.key.password": "pw",
              "ssl.truststore.location": str(pki["ca"].cert_path), "ssl.client.auth": "required"}
    config.update(overrides)
    return config


def test_server_tls_builds_flight_settings(pki):
    tls = server_tls(_config(pki))
    assert isinstance(tls, ServerTls) and tls.verify_client
    assert tls.root_certificates.startswith(b"-----BEGIN CERTIFICATE-----")
    assert tls.cert_pairs[0].key.startswith(b"-----BEGIN PRIVATE KEY-----")  # decrypted for gRPC
    assert "PRIVATE" not in repr(tls) and "pw" not in repr(tls)
    one_way = server_tls(_config(pki, **{"ssl.client.auth": "none"}))
    assert not one_way.verify_client and one_way.root_certificates is None
    assert server_tls({}) is None and server_tls({"ssl.keystore.location": ""}) is None


@pytest.mark.parametrize("overrides, key", [
    ({"ssl.client.auth": "requested"}, "ssl.client.auth"),
    ({"ssl.client.auth": "sometimes"}, "ssl.client.auth"),
    ({"ssl.truststore.location": ""}, "ssl.truststore.location"),
    ({"ssl.truststore.location": "/nonexistent/ca.pem"}, "ssl.truststore.location"),
    ({"ssl.keystore.location": "/nonexistent/k.pem"}, "ssl.keystore.location"),
    ({"ssl.key.password": "Zebra42"}, "ssl.key.password"),
    ({"ssl.key.password": ""}, "ssl.key.password"),
    ({"ssl.keystore.type": "JKS"}, "ssl.keystore.type"),
    ({"ssl.truststore.type": "PKCS12"}, "ssl.truststore.type"),
])
def test_server_tls_refusals_name_the_key(pki, overrides, key):
    with pytest.raises(InvalidConfigError, match=key.replace(".", r"\.")) as refused:
        server_tls(_config(pki, **overrides))
    assert "Zebra42" not in str(refused.value)


def test_server_tls_required_refuses_a_missing_keystore():
    with pytest.raises(InvalidConfigError, match="ssl.keystore.location"):
        server_tls({"ssl.keystore.location": ""}, required=True)


# --- real Flight TLS failures -----------------------------------------------------------------------------

class _EchoIdentity(flight.FlightServerBase):
    """Answers every action with the caller's TLS peer identity."""

    def do_action(self, context, action):
        yield flight.Result(context.peer_identity())


def _pair(issued, password=""):
    chain, key = read_pem_keystore(str(issued.keystore_path), password)
    return flight.CertKeyPair(cert=chain, key=key)


def _tls_server(pki, cert="server", verify_client=False):
    password = "pw" if cert == "server" else ""
    extra = {"verify_client": True, "root_certificates": pki["ca"].cert_path.read_bytes()} if verify_client else {}
    return _EchoIdentity("grpc+tls://127.0.0.1:0", tls_certificates=[_pair(pki[cert], password)], **extra)


def _call(port, scheme="grpc+tls", client_cert=None, roots=None, **client_options):
    """(identity or None, error text or None, seconds) of one action on a fresh client."""
    if client_cert is not None:
        pair = _pair(client_cert)
        client_options.update(cert_chain=pair.cert, private_key=pair.key)
    if roots is not None:
        client_options["tls_root_certs"] = roots.cert_path.read_bytes()
    started = time.monotonic()
    client = flight.FlightClient(f"{scheme}://127.0.0.1:{port}", **client_options)
    try:
        results = list(client.do_action(flight.Action("whoami", b""), flight.FlightCallOptions(timeout=CALL_TIMEOUT_S)))
        return results[0].body.to_pybytes(), None, time.monotonic() - started
    except flight.FlightError as exc:
        return None, str(exc), time.monotonic() - started
    finally:
        client.close()


def _assert_fails_fast(outcome, expected_text):
    identity, error, seconds = outcome
    assert identity is None and error is not None and expected_text in error, error
    assert seconds < FAIL_FAST_S, (seconds, error)
    return error


def test_one_way_tls_failures_are_recognised(pki):
    server = _tls_server(pki)
    try:
        identity, error, _ = _call(server.port, roots=pki["ca"])
        assert error is None and identity == b""  # one-way TLS: no client identity
        untrusted = _assert_fails_fast(_call(server.port, roots=pki["rogue"]), "certificate verify failed")
        assert "ssl.truststore.location" in classify_tls_failure(untrusted)
        system_roots = _assert_fails_fast(_call(server.port), "certificate verify failed")
        assert "ssl.truststore.location" in classify_tls_failure(system_roots)
        mismatch = _assert_fails_fast(_call(server.port, roots=pki["ca"], override_hostname="wronghost"),
                                      "Peer name wronghost is not in peer certificate")
        assert "wronghost" in classify_tls_failure(mismatch)
        plaintext = _assert_fails_fast(_call(server.port, scheme="grpc+tcp"), "Socket closed")
        # the same text as a proxy that accepts and closes: not claimed as TLS
        assert classify_tls_failure(plaintext) is None and classify_tls_failure(plaintext, client_tls=False) is None
    finally:
        server.shutdown()


@pytest.mark.parametrize("cert, expected_text, reason", [
    ("other_host", "Peer name 127.0.0.1 is not in peer certificate", "127.0.0.1"),
    ("client_only", "unsuitable certificate purpose", "not for server use"),
    ("bad_usage", "unsuitable certificate purpose", "not for server use"),
    ("expired_server", "certificate has expired", "expired"),
])
def test_broken_server_certificates_are_recognised(pki, cert, expected_text, reason):
    server = _tls_server(pki, cert)
    try:
        error = _assert_fails_fast(_call(server.port, roots=pki["ca"]), expected_text)
        assert reason in classify_tls_failure(error)
    finally:
        server.shutdown()


def test_tls_client_against_a_plaintext_listener_is_recognised():
    server = _EchoIdentity("grpc+tcp://127.0.0.1:0")
    try:
        error = _assert_fails_fast(_call(server.port), "wrong version number")
        assert "does not speak TLS" in classify_tls_failure(error)
    finally:
        server.shutdown()


def test_mutual_tls_identity_and_refused_client_certificates(pki):
    server = _tls_server(pki, verify_client=True)
    try:
        identity, error, _ = _call(server.port, client_cert=pki["alice"], roots=pki["ca"])
        assert error is None and identity == b"alice"  # the FIRST SAN, not the CN "Alice" nor a DN
        assert PrincipalMapper("DEFAULT").principal_of(identity) == "User:alice"
        for refused in (None, pki["rogue_alice"], pki["expired_alice"], pki["server_only_alice"]):
            error = _assert_fails_fast(_call(server.port, client_cert=refused, roots=pki["ca"]), "Socket closed")
            assert "Handshake read failed" not in error
            assert "client certificate" in classify_tls_failure(error, client_tls=True)
            assert classify_tls_failure(error) is None  # without knowing the client used TLS: ambiguous
    finally:
        server.shutdown()


def test_identity_is_the_common_name_without_subject_alternative_names(pki):
    ca = pki["ca"]
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "erin"),
                         x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "ops")])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca.cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=1))
            .sign(ca.key, hashes.SHA256()))
    server = _tls_server(pki, verify_client=True)
    try:
        client = flight.FlightClient(
            f"grpc+tls://127.0.0.1:{server.port}", tls_root_certs=ca.cert_path.read_bytes(),
            cert_chain=cert.public_bytes(serialization.Encoding.PEM),
            private_key=key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
        try:
            results = list(client.do_action(flight.Action("whoami", b""), flight.FlightCallOptions(timeout=CALL_TIMEOUT_S)))
        finally:
            client.close()
        assert results[0].body.to_pybytes() == b"erin"  # the CN alone, not "CN=erin,OU=ops"
    finally:
        server.shutdown()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_dead_ports_and_closing_sockets_are_not_called_tls_failures(pki):
    port = _free_port()
    for scheme in ("grpc+tls", "grpc+tcp"):
        error = _assert_fails_fast(_call(port, scheme=scheme, roots=pki["ca"] if scheme == "grpc+tls" else None),
                                   "Connection refused")
        assert classify_tls_failure(error) is None and classify_tls_failure(error, client_tls=True) is None
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    stop = threading.Event()

    def accept_and_close():  # a proxy whose backend is down: TCP accepted, then closed
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            conn.close()

    thread = threading.Thread(target=accept_and_close, daemon=True)
    thread.start()
    try:
        port = listener.getsockname()[1]
        # "Handshake read failed (Socket closed)", or "(recvmsg:Connection reset by peer)" when the close races
        tls_error = _assert_fails_fast(_call(port, roots=pki["ca"]), "Handshake read failed")
        assert classify_tls_failure(tls_error, client_tls=True) is None
        plain_error = _assert_fails_fast(_call(port, scheme="grpc+tcp"), "127.0.0.1")  # "Socket closed" (or reset)
        assert classify_tls_failure(plain_error) is None and classify_tls_failure(plain_error, client_tls=False) is None
    finally:
        stop.set()
        thread.join(timeout=2)
        listener.close()


def test_classify_ignores_unrelated_errors():
    for text in ("", "Flight returned timeout error, with message: Deadline Exceeded",
                 "NOT_LEADER_OR_FOLLOWER: t-0", "Socket closed by peer during fetch"):
        assert classify_tls_failure(text) is None and classify_tls_failure(text, client_tls=True) is None
