"""The certificate authority of ads_spark.security.certs, the PEM keystore reader and `ads certs`."""

from __future__ import annotations

import datetime as dt
import ipaddress
import stat

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from ads_spark.cli.main import main as ads_main
from ads_spark.errors import InvalidConfigError, InvalidRequestError
from ads_spark.security import certs
from ads_spark.security.tls import read_pem_keystore, read_truststore


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _verify_signed_by(cert: x509.Certificate, issuer: x509.Certificate) -> None:
    issuer.public_key().verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(cert.signature_hash_algorithm))


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return certs.create_ca(tmp_path_factory.mktemp("certs") / "ca")


def test_create_ca_writes_a_self_signed_ca_with_private_modes(tmp_path):
    ca = certs.create_ca(tmp_path / "ca", common_name="Test CA", valid_days=30)
    assert ca.cert_path.name == "ca.pem" and ca.key_path.name == "ca-key.pem"
    assert _mode(tmp_path / "ca") == 0o700 and _mode(ca.key_path) == 0o600
    assert ca.key_path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")  # PKCS#8
    assert ca.cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    _verify_signed_by(ca.cert, ca.cert)
    assert "BEGIN" not in repr(ca) and "PRIVATE" not in repr(ca)
    loaded = certs.load_ca(tmp_path / "ca")
    assert loaded.cert == ca.cert


def test_issued_chain_verifies_against_the_ca_and_keeps_san_order(ca, tmp_path):
    issued = certs.issue_certificate(ca, tmp_path / "out", "alice", ("alice", "127.0.0.1", "bob.example"),
                                     server=False)
    assert _mode(tmp_path / "out") == 0o700 and _mode(issued.keystore_path) == 0o600
    assert issued.keystore_path.name == "alice.pem" and issued.cert_path.name == "alice.crt"
    chain, key = read_pem_keystore(str(issued.keystore_path))
    leaf, ca_cert = x509.load_pem_x509_certificates(chain)
    assert leaf == issued.cert == x509.load_pem_x509_certificate(issued.cert_path.read_bytes())
    assert ca_cert == ca.cert
    _verify_signed_by(leaf, ca.cert)
    # the store API checks the whole chain (signature, validity, CA constraints) as a TLS peer would
    store = x509.verification.Store([ca.cert])
    builder = x509.verification.PolicyBuilder().store(store)
    builder.build_client_verifier().verify(leaf, [])
    sans = list(leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value)
    assert sans == [x509.DNSName("alice"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    x509.DNSName("bob.example")]
    usages = list(leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)
    assert usages == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert key.startswith(b"-----BEGIN PRIVATE KEY-----")


def test_server_certificate_verifies_for_its_host(ca, tmp_path):
    issued = certs.issue_certificate(ca, tmp_path, "broker", client=False)
    store = x509.verification.Store([ca.cert])
    verifier = x509.verification.PolicyBuilder().store(store).build_server_verifier(x509.DNSName("localhost"))
    verifier.verify(issued.cert, [])
    usages = list(issued.cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)
    assert usages == [ExtendedKeyUsageOID.SERVER_AUTH]


def test_encrypted_key_round_trips_through_the_keystore_reader(ca, tmp_path):
    issued = certs.issue_certificate(ca, tmp_path, "enc", key_password="pässword")
    text = issued.keystore_path.read_bytes()
    assert text.startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----") and b"BEGIN PRIVATE KEY" not in text
    chain, key_pem = read_pem_keystore(str(issued.keystore_path), "pässword")
    key = serialization.load_pem_private_key(key_pem, password=None)  # unencrypted PKCS#8 in memory
    public = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    assert key.public_key().public_bytes(*public) == issued.cert.public_key().public_bytes(*public)
    for wrong in ("", "nope"):
        with pytest.raises(InvalidConfigError, match="ssl.key.password") as refused:
            read_pem_keystore(str(issued.keystore_path), wrong)
        assert "nope" not in str(refused.value) and "BEGIN" not in str(refused.value)


def test_keystore_reader_refusals_name_the_key(ca, tmp_path):
    plain = certs.issue_certificate(ca, tmp_path, "plain")
    with pytest.raises(InvalidConfigError, match="ssl.key.password"):
        read_pem_keystore(str(plain.keystore_path), "unexpected")  # a password for an unencrypted key
    with pytest.raises(InvalidConfigError, match="ssl.keystore.location"):
        read_pem_keystore(str(tmp_path / "missing.pem"))
    with pytest.raises(InvalidConfigError, match="ssl.keystore.location"):
        read_pem_keystore("")
    with pytest.raises(InvalidConfigError, match="ssl.keystore.location.*private key"):
        read_pem_keystore(str(plain.cert_path))  # certificate only
    key_only = tmp_path / "key-only.pem"
    key_only.write_bytes(plain.keystore_path.read_bytes().split(b"-----BEGIN CERTIFICATE")[0])
    with pytest.raises(InvalidConfigError, match="ssl.keystore.location.*no PEM certificate"):
        read_pem_keystore(str(key_only))
    other = certs.issue_certificate(ca, tmp_path, "other")
    mixed = tmp_path / "mixed.pem"
    mixed.write_bytes(key_only.read_bytes() + other.cert_path.read_bytes())
    with pytest.raises(InvalidConfigError, match="not the private key's"):
        read_pem_keystore(str(mixed))
    assert read_truststore(str(ca.cert_path)).startswith(b"-----BEGIN CERTIFICATE-----")
    with pytest.raises(InvalidConfigError, match="ssl.truststore.location"):
        read_truststore(str(key_only))


def test_validity_window_and_expired_certificates(ca, tmp_path):
    now = dt.datetime.now(dt.timezone.utc)
    expired = certs.issue_certificate(ca, tmp_path, "old", not_before=now - dt.timedelta(days=3),
                                      not_after=now - dt.timedelta(days=1))
    assert expired.cert.not_valid_after_utc < now
    short = certs.issue_certificate(ca, tmp_path, "short", valid_days=2)
    assert dt.timedelta(days=1) < short.cert.not_valid_after_utc - now <= dt.timedelta(days=2)


def test_wrong_key_usage_certificate_lacks_signature_and_encipherment(ca, tmp_path):
    issued = certs.issue_certificate(ca, tmp_path, "badku", key_usage_digital_signature=False)
    usage = issued.cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert not usage.digital_signature and not usage.key_encipherment


@pytest.mark.parametrize("bad", [
    dict(name="../escape"), dict(name=".hidden"), dict(name="a/b"), dict(name=""), dict(name="x" * 65),
    dict(sans=()), dict(sans=("has space",)), dict(sans=("a,b",)), dict(sans=("x" * 254,)),
    dict(valid_days=0), dict(valid_days=40000), dict(valid_days=True), dict(client=False, server=False),
    dict(not_before=dt.datetime(2030, 1, 1)),  # naive datetime
])
def test_issue_refuses_bad_input_and_writes_nothing(ca, tmp_path, bad):
    args = dict(name="ok", sans=("localhost",), client=True, server=True, valid_days=10) | bad
    name, sans = args.pop("name"), args.pop("sans")
    with pytest.raises(InvalidRequestError):
        certs.issue_certificate(ca, tmp_path / "out", name, sans, **args)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_load_ca_refuses_a_directory_without_one(tmp_path):
    with pytest.raises(InvalidRequestError, match="ca-key.pem"):
        certs.load_ca(tmp_path)


def test_cli_creates_a_ca_and_issues_without_printing_keys(tmp_path, capsys):
    (tmp_path / "pw").write_text("hunter2\n")
    assert ads_main(["certs", "create-ca", "--dir", str(tmp_path / "ca")]) == 0
    assert ads_main(["certs", "issue", "--ca-dir", str(tmp_path / "ca"), "--name", "alice", "--san", "alice",
                     "--san", "127.0.0.1", "--client-only", "--days", "30", "--key-password-file",
                     str(tmp_path / "pw"), "--dir", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert str(tmp_path / "out" / "alice.pem") in out and str(tmp_path / "ca" / "ca.pem") in out
    assert "BEGIN" not in out and "hunter2" not in out
    chain, _ = read_pem_keystore(str(tmp_path / "out" / "alice.pem"), "hunter2")
    leaf = x509.load_pem_x509_certificates(chain)[0]
    assert list(leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.CLIENT_AUTH]
    assert leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value[0] == x509.DNSName("alice")
    assert ads_main(["certs", "issue", "--ca-dir", str(tmp_path / "nope"), "--name", "x",
                     "--dir", str(tmp_path / "o")]) == 1
    assert "ca-key.pem" in capsys.readouterr().err
