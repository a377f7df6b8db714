"""A small certificate authority for ADS's TLS listeners, tests and `ads certs`.

Owns making keys and certificates with the ``cryptography`` package (no ``openssl`` shell-outs, so
it runs the same everywhere and tests can build any broken certificate an attack test needs):
``create_ca`` writes a self-signed CA, ``issue_certificate`` signs a leaf certificate for a broker
or a client and writes it as the PEM keystore the ``ssl.keystore.location`` key reads (PKCS#8 key,
then the certificate chain).

Keys are EC P-256: fast to make (tests issue dozens) and accepted by gRPC. Every private key file
is written 0600 inside a directory made 0700; nothing here logs or returns key material as text.

SAN order matters: Arrow Flight reports a client's identity as its certificate's FIRST subject
alternative name (else its CN), so a client certificate should list the user name first, e.g.
``sans=("alice",)``.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ads_spark.errors import InvalidRequestError

CA_CERT_FILE = "ca.pem"
CA_KEY_FILE = "ca-key.pem"
MAX_VALID_DAYS = 36500  # 100 years: anything longer is a typo
MAX_SANS = 100
MAX_NAME_CHARS = 64
MAX_SAN_CHARS = 253  # a DNS name's limit
# A file name: letters, digits, dot, dash, underscore; no leading dot (no hidden files, no "..").
_SAFE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,%d}" % (MAX_NAME_CHARS - 1))
# A DNS-ish SAN (also a user name used as identity): no spaces, commas, slashes or control chars.
_SAFE_SAN = re.compile(r"[A-Za-z0-9*_.@-]+")


@dataclass(frozen=True)
class CertAuthority:
    """A CA on disk and loaded: ``cert_path`` (ca.pem) and ``key_path`` (ca-key.pem, 0600)."""

    cert_path: Path
    key_path: Path
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    def __repr__(self) -> str:  # the key object's repr is harmless, but say only what a reader needs
        return f"CertAuthority(cert_path={str(self.cert_path)!r}, subject={self.cert.subject.rfc4514_string()!r})"


@dataclass(frozen=True)
class IssuedCertificate:
    """A leaf certificate written by ``issue_certificate``.

    ``keystore_path`` (<name>.pem): PKCS#8 key + certificate + CA certificate, 0600 (the value for
    ``ssl.keystore.location``); ``cert_path`` (<name>.crt): the certificate alone.
    """

    keystore_path: Path
    cert_path: Path
    cert: x509.Certificate


def _bounded_days(valid_days: int, key: str = "valid_days") -> int:
    if isinstance(valid_days, bool) or not isinstance(valid_days, int) or not 1 <= valid_days <= MAX_VALID_DAYS:
        raise InvalidRequestError(f"{key} must be an integer in 1..{MAX_VALID_DAYS}, got {valid_days!r}")
    return valid_days


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not _SAFE_NAME.fullmatch(name):
        raise InvalidRequestError(
            f"certificate name {name!r} must be 1..{MAX_NAME_CHARS} of letters, digits, '.', '_', '-' "
            "and not start with '.'")
    return name


def _private_dir(directory) -> Path:
    """``directory`` created 0700 if new (an existing one keeps its mode: it may be shared on purpose)."""
    path = Path(directory)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to a file that is 0600 from its first byte (replacing any old file)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _write_public(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _pkcs8(key, password: str | None) -> bytes:
    encryption = (serialization.BestAvailableEncryption(password.encode())
                  if password else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def create_ca(directory, common_name: str = "ADS CA", valid_days: int = 3650) -> CertAuthority:
    """Make a self-signed CA in ``directory``: ca.pem (certificate) and ca-key.pem (PKCS#8 key, 0600)."""
    _bounded_days(valid_days)
    if not isinstance(common_name, str) or not 1 <= len(common_name) <= 64:
        raise InvalidRequestError("the CA common name must be 1..64 characters")
    path = _private_dir(directory)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))  # a little clock skew between hosts
        .not_valid_after(now + dt.timedelta(days=valid_days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                     crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_path, cert_path = path / CA_KEY_FILE, path / CA_CERT_FILE
    _write_private(key_path, _pkcs8(key, None))
    _write_public(cert_path, _pem(cert))
    return CertAuthority(cert_path=cert_path, key_path=key_path, cert=cert, key=key)


def load_ca(directory) -> CertAuthority:
    """The CA ``create_ca`` wrote in ``directory``."""
    path = Path(directory)
    key_path, cert_path = path / CA_KEY_FILE, path / CA_CERT_FILE
    for needed in (key_path, cert_path):
        if not needed.is_file():
            raise InvalidRequestError(f"no CA at {path}: {needed.name} is missing (make one with `ads certs create-ca`)")
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (ValueError, TypeError) as exc:
        # The exception text names the format problem only, never key bytes.
        raise InvalidRequestError(f"the CA at {path} cannot be read: {type(exc).__name__}") from None
    if not hasattr(key, "sign"):
        raise InvalidRequestError(f"the CA key at {key_path} is not a signing key")
    return CertAuthority(cert_path=cert_path, key_path=key_path, cert=cert, key=key)


def _san_entries(sans: Sequence[str]) -> list[x509.GeneralName]:
    if isinstance(sans, str):
        sans = (sans,)
    if not 1 <= len(sans) <= MAX_SANS:
        raise InvalidRequestError(f"a certificate needs 1..{MAX_SANS} subject alternative names, got {len(sans)}")
    entries: list[x509.GeneralName] = []
    for san in sans:
        if not isinstance(san, str) or not 1 <= len(san) <= MAX_SAN_CHARS:
            raise InvalidRequestError(f"subject alternative name {san!r} must be 1..{MAX_SAN_CHARS} characters")
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(san)))
            continue
        except ValueError:
            pass
        if not _SAFE_SAN.fullmatch(san):
            raise InvalidRequestError(f"subject alternative name {san!r} has characters a DNS name cannot have")
        entries.append(x509.DNSName(san))
    return entries


def _validity(not_before, not_after, valid_days: int) -> tuple[dt.datetime, dt.datetime]:
    start = not_before or (_now() - dt.timedelta(minutes=5))
    end = not_after or (start + dt.timedelta(days=_bounded_days(valid_days)))
    for moment in (start, end):
        if moment.tzinfo is None:
            raise InvalidRequestError("not_before / not_after must be timezone-aware datetimes")
    if end <= start:
        raise InvalidRequestError("not_after must be later than not_before")
    if end - start > dt.timedelta(days=MAX_VALID_DAYS):
        raise InvalidRequestError(f"a certificate may be valid for at most {MAX_VALID_DAYS} days")
    return start, end


def issue_certificate(ca: CertAuthority, directory, name: str, sans: Sequence[str] = ("localhost", "127.0.0.1"),
                      *, common_name: str | None = None, client: bool = True, server: bool = True,
                      not_before: dt.datetime | None = None, not_after: dt.datetime | None = None,
                      valid_days: int = 825, key_password: str | None = None,
                      key_usage_digital_signature: bool = True) -> IssuedCertificate:
    """Sign a leaf certificate with ``ca`` and write ``<name>.pem`` (keystore, 0600) and ``<name>.crt``.

    ``sans`` keep their order (IP literals become IPAddress entries, the rest DNSName); the first is
    the identity Flight reports for a client. ``client``/``server`` choose the extended key usages.
    ``key_password`` encrypts the PKCS#8 key ("BEGIN ENCRYPTED PRIVATE KEY"). ``not_before``/
    ``not_after`` (aware datetimes) override ``valid_days`` so tests can make expired certificates;
    ``key_usage_digital_signature=False`` makes a certificate whose key usage is dataEncipherment only,
    which TLS refuses for a server and for a client (attack tests).
    """
    _check_name(name)
    if not (client or server):
        raise InvalidRequestError("a certificate must be for a client, a server or both")
    entries = _san_entries(sans)
    start, end = _validity(not_before, not_after, valid_days)
    first_san = sans if isinstance(sans, str) else sans[0]
    subject_cn = common_name if common_name is not None else first_san[:64]
    if not 1 <= len(subject_cn) <= 64:
        raise InvalidRequestError("the common name must be 1..64 characters")
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject_cn)]))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        # Without digitalSignature, keyEncipherment must go too: OpenSSL accepts a server certificate with
        # either, so only dataEncipherment-alone is refused for both uses (the attack tests need that).
        .add_extension(x509.KeyUsage(digital_signature=key_usage_digital_signature, content_commitment=False,
                                     key_encipherment=key_usage_digital_signature,
                                     data_encipherment=not key_usage_digital_signature, key_agreement=False,
                                     key_cert_sign=False, crl_sign=False, encipher_only=False,
                                     decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.SubjectAlternativeName(entries), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    path = _private_dir(directory)
    keystore_path, cert_path = path / f"{name}.pem", path / f"{name}.crt"
    _write_private(keystore_path, _pkcs8(key, key_password) + _pem(cert) + _pem(ca.cert))
    _write_public(cert_path, _pem(cert))
    return IssuedCertificate(keystore_path=keystore_path, cert_path=cert_path, cert=cert)
