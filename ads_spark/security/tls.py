"""TLS for ADS's Flight listeners and clients: keystores, the server's TLS settings, principals, failures.

Owns four things every TLS user in ADS shares, so the broker, the clients and the tests agree:

* ``read_pem_keystore`` / ``read_truststore``: the PEM files ``ssl.keystore.location`` and
  ``ssl.truststore.location`` name (only PEM: Flight/gRPC takes PEM bytes). The private key is
  decrypted in memory with ``ssl.key.password`` and handed to Flight as unencrypted PKCS#8, because
  gRPC cannot decrypt a key itself.
* ``server_tls``: the broker config keys turned into what ``FlightServerBase`` takes.
* ``PrincipalMapper``: Kafka's ``ssl.principal.mapping.rules`` applied to the client certificate's
  identity. NOTE: Flight reports a peer's identity as its certificate's FIRST subject alternative
  name (or its CN when it has none), not Kafka's full subject DN ("CN=alice,OU=..."), so rules here
  see "alice", and rules written for Kafka DNs must be rewritten.
* ``classify_tls_failure``: gRPC's TLS failure texts, recognised and turned into a reason a user can act
  on (which key to fix), so a client can raise ``SslAuthenticationFailedError`` instead of retrying.

Nothing here logs, returns in an error or reprs a password or key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from ads_spark.errors import InvalidConfigError, SslAuthenticationFailedError

KEYSTORE_KEY = "ssl.keystore.location"
KEY_PASSWORD_KEY = "ssl.key.password"
TRUSTSTORE_KEY = "ssl.truststore.location"
CLIENT_AUTH_KEY = "ssl.client.auth"
MAPPING_RULES_KEY = "ssl.principal.mapping.rules"
MAX_PEM_FILE_BYTES = 1 << 20  # a keystore or CA bundle is a few KiB; refuse to slurp a wrong, huge file
MAX_IDENTITY_CHARS = 1024
ANONYMOUS = "User:ANONYMOUS"

_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----\r?\n.*?-----END \1-----\r?\n?", re.S)
_KEY_LABELS = {b"PRIVATE KEY", b"ENCRYPTED PRIVATE KEY", b"RSA PRIVATE KEY", b"EC PRIVATE KEY"}
_CERT_LABEL = b"CERTIFICATE"


# --- PEM files -----------------------------------------------------------------------------------------

def _read_pem_file(path: str, key: str) -> bytes:
    if not path:
        raise InvalidConfigError(f"{key} is not set")
    file = Path(path)
    try:
        size = file.stat().st_size
        if not file.is_file():
            raise InvalidConfigError(f"{key}={path} is not a file")
        if size > MAX_PEM_FILE_BYTES:
            raise InvalidConfigError(f"{key}={path} is {size} bytes, more than a PEM file holds "
                                     f"(limit {MAX_PEM_FILE_BYTES})")
        return file.read_bytes()
    except OSError as exc:
        raise InvalidConfigError(f"{key}={path} cannot be read: {exc.strerror or type(exc).__name__}") from None


def _pem_blocks(data: bytes) -> list[tuple[bytes, bytes]]:
    return [(m.group(1), m.group(0)) for m in _PEM_BLOCK.finditer(data)]


def _certificates(blocks, path: str, key: str) -> list[x509.Certificate]:
    certs = []
    for label, block in blocks:
        if label != _CERT_LABEL:
            continue
        try:
            certs.append(x509.load_pem_x509_certificate(block))
        except ValueError:
            raise InvalidConfigError(f"{key}={path} holds a CERTIFICATE block that is not a valid certificate") from None
    return certs


def _load_key(block: bytes, key_password: str, path: str):
    password = key_password.encode() if key_password else None
    try:
        return serialization.load_pem_private_key(block, password=password)
    except TypeError:
        # cryptography says TypeError for "encrypted but no password" and "password but not encrypted".
        if password is None:
            raise InvalidConfigError(f"the private key in {KEYSTORE_KEY}={path} is encrypted and "
                                     f"{KEY_PASSWORD_KEY} is not set") from None
        raise InvalidConfigError(f"{KEY_PASSWORD_KEY} is set but the private key in {KEYSTORE_KEY}={path} "
                                 "is not encrypted") from None
    except ValueError:
        if password is not None:
            raise InvalidConfigError(f"{KEY_PASSWORD_KEY} does not decrypt the private key in "
                                     f"{KEYSTORE_KEY}={path} (wrong password?)") from None
        raise InvalidConfigError(f"the private key in {KEYSTORE_KEY}={path} cannot be read") from None
    except Exception as exc:  # e.g. an unsupported algorithm; never echo the text (it may quote bytes)
        raise InvalidConfigError(f"the private key in {KEYSTORE_KEY}={path} cannot be read: "
                                 f"{type(exc).__name__}") from None


def read_pem_keystore(path: str, key_password: str = "") -> tuple[bytes, bytes]:
    """(certificate chain PEM, unencrypted PKCS#8 private key PEM) from the keystore file at ``path``.

    The file holds exactly one private key (PKCS#8, encrypted with ``key_password`` or not; PKCS#1/SEC1
    accepted too) and one or more certificates, the first being the key's own. The decrypted key exists
    only in the returned bytes. Problems raise ``InvalidConfigError`` naming ssl.keystore.location or,
    for the password, ssl.key.password.
    """
    data = _read_pem_file(path, KEYSTORE_KEY)
    blocks = _pem_blocks(data)
    key_blocks = [block for label, block in blocks if label in _KEY_LABELS]
    certs = _certificates(blocks, path, KEYSTORE_KEY)
    if len(key_blocks) != 1:
        raise InvalidConfigError(f"{KEYSTORE_KEY}={path} must hold exactly one PEM private key, found {len(key_blocks)}")
    if not certs:
        raise InvalidConfigError(f"{KEYSTORE_KEY}={path} holds no PEM certificate")
    private_key = _load_key(key_blocks[0], key_password or "", path)
    public_der = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if private_key.public_key().public_bytes(*public_der) != certs[0].public_key().public_bytes(*public_der):
        raise InvalidConfigError(f"in {KEYSTORE_KEY}={path} the first certificate is not the private key's "
                                 "(put the key's own certificate first, then its CA chain)")
    key_pem = private_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                        serialization.NoEncryption())
    chain_pem = b"".join(cert.public_bytes(serialization.Encoding.PEM) for cert in certs)
    return chain_pem, key_pem


def read_truststore(path: str, key: str = TRUSTSTORE_KEY) -> bytes:
    """The CA certificates (PEM) in the truststore at ``path``; at least one, all valid."""
    data = _read_pem_file(path, key)
    certs = _certificates(_pem_blocks(data), path, key)
    if not certs:
        raise InvalidConfigError(f"{key}={path} holds no PEM certificate")
    return b"".join(cert.public_bytes(serialization.Encoding.PEM) for cert in certs)


# --- the broker's TLS settings ----------------------------------------------------------------------------

@dataclass(frozen=True)
class ServerTls:
    """What ``FlightServerBase(tls_certificates=, verify_client=, root_certificates=)`` takes."""

    cert_pairs: list
    verify_client: bool
    root_certificates: bytes | None

    def __repr__(self) -> str:  # the pairs hold the decrypted key: never print them
        return f"ServerTls(cert_pairs=<{len(self.cert_pairs)} pair(s)>, verify_client={self.verify_client})"


def server_tls(config: Mapping[str, object], *, required: bool = False) -> ServerTls | None:
    """The TLS settings of a broker listener from the broker's ssl.* keys, or None without a keystore.

    ``required`` (an SSL or SASL_SSL listener) refuses a missing ssl.keystore.location instead of
    answering None. ssl.client.auth=required needs ssl.truststore.location (the CAs client certificates
    are checked against); ``requested`` is refused because Flight cannot ask for an optional certificate.
    """
    from pyarrow import flight  # here, not at import: the pure callers (config checks) need no pyarrow

    for type_key in ("ssl.keystore.type", "ssl.truststore.type"):
        value = str(config.get(type_key, "PEM") or "PEM")
        if value.upper() != "PEM":
            raise InvalidConfigError(f"{type_key}={value} is not supported: only PEM")
    client_auth = str(config.get(CLIENT_AUTH_KEY, "none") or "none").strip().lower()
    if client_auth not in ("none", "required"):
        why = " (Flight cannot request an optional client certificate)" if client_auth == "requested" else ""
        raise InvalidConfigError(f"{CLIENT_AUTH_KEY}={client_auth} is not supported{why}: use none or required")
    keystore = str(config.get(KEYSTORE_KEY, "") or "")
    truststore = str(config.get(TRUSTSTORE_KEY, "") or "")
    if not keystore:
        if required:
            raise InvalidConfigError(f"{KEYSTORE_KEY} is not set: a TLS listener needs a key and certificate")
        return None
    verify_client = client_auth == "required"
    if verify_client and not truststore:
        raise InvalidConfigError(f"{CLIENT_AUTH_KEY}=required needs {TRUSTSTORE_KEY}: the CA certificates "
                                 "client certificates are checked against")
    chain, key = read_pem_keystore(keystore, str(config.get(KEY_PASSWORD_KEY, "") or ""))
    roots = read_truststore(truststore) if truststore else None  # read even when unused: a bad path fails now
    return ServerTls(cert_pairs=[flight.CertKeyPair(cert=chain, key=key)], verify_client=verify_client,
                     root_certificates=roots if verify_client else None)


# --- ssl.principal.mapping.rules -------------------------------------------------------------------------

@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern | None  # None: DEFAULT
    replacement: str
    case: str  # "", "L" or "U"

    def apply(self, identity: str) -> str | None:
        if self.pattern is None:
            return identity
        match = self.pattern.fullmatch(identity)
        if match is None:
            return None
        result = _expand(self.replacement, match)
        return result.lower() if self.case == "L" else result.upper() if self.case == "U" else result


def _expand(replacement: str, match: re.Match) -> str:
    """Java's replacement syntax, as Kafka uses it: ``$1``, ``${name}``, and ``\\x`` for a literal x."""
    out, i = [], 0
    while i < len(replacement):
        char = replacement[i]
        if char == "\\" and i + 1 < len(replacement):
            out.append(replacement[i + 1])
            i += 2
        elif char == "$" and replacement[i + 1:i + 2] == "{":
            end = replacement.index("}", i)
            out.append(match.group(replacement[i + 2:end]) or "")
            i = end + 1
        elif char == "$":
            j = i + 2  # Java reads the longest run of digits that is still a group number
            while j < len(replacement) and replacement[j].isdigit() and int(replacement[i + 1:j + 1]) <= match.re.groups:
                j += 1
            out.append(match.group(int(replacement[i + 1:j])) or "")
            i = j
        else:
            out.append(char)
            i += 1
    return "".join(out)


def _check_replacement(replacement: str, pattern: re.Pattern) -> None:
    """Refuse at load what ``_expand`` would trip on at the first client: bad or unknown group references."""
    i = 0
    while i < len(replacement):
        if replacement[i] == "\\":
            if i + 1 >= len(replacement):
                raise ValueError("a replacement may not end with a backslash")
            i += 2
            continue
        if replacement[i] == "$":
            if replacement[i + 1:i + 2] == "{":
                end = replacement.find("}", i)
                if end < 0 or replacement[i + 2:end] not in pattern.groupindex:
                    raise ValueError("unknown named group in the replacement")
                i = end + 1
                continue
            if not replacement[i + 1:i + 2].isdigit() or int(replacement[i + 1]) > pattern.groups:
                raise ValueError("'$' must be followed by a group number the pattern has (write \\$ for a dollar)")
        i += 1


def _read_until_slash(text: str, start: int) -> tuple[str, int]:
    """The text up to the next unescaped '/' and the index after it (a ``\\/`` stays in, as Kafka keeps it)."""
    i = start
    while i < len(text):
        if text[i] == "\\":
            i += 2
        elif text[i] == "/":
            return text[start:i], i + 1
        else:
            i += 1
    raise ValueError("a RULE needs the form RULE:pattern/replacement/[L|U]")


def _java_groups(pattern: str) -> str:
    """Java's named group ``(?<name>...)`` in Python's spelling; lookbehinds ``(?<=``/``(?<!`` untouched."""
    return re.sub(r"(?<!\\)\(\?<(?=[A-Za-z])", "(?P<", pattern)


def _parse_rules(rules: str) -> list[_Rule]:
    parsed, i, text = [], 0, rules.strip()
    while i < len(text):
        while i < len(text) and text[i].isspace():
            i += 1
        if text.startswith("DEFAULT", i):
            parsed.append(_Rule(None, "", ""))
            i += len("DEFAULT")
        elif text.startswith("RULE:", i):
            pattern_text, i = _read_until_slash(text, i + len("RULE:"))
            replacement, i = _read_until_slash(text, i)
            case = text[i] if i < len(text) and text[i] in "LU" else ""
            i += len(case)
            try:
                pattern = re.compile(_java_groups(pattern_text))
            except re.error as exc:
                raise ValueError(f"bad pattern {pattern_text!r}: {exc}") from None
            _check_replacement(replacement, pattern)
            parsed.append(_Rule(pattern, replacement, case))
        else:
            raise ValueError(f"expected DEFAULT or RULE:pattern/replacement/[L|U] at {text[i:i + 40]!r}")
        while i < len(text) and text[i].isspace():
            i += 1
        if i < len(text):
            if text[i] != ",":
                raise ValueError(f"expected ',' between rules at {text[i:i + 40]!r}")
            i += 1
            if not text[i:].strip():
                raise ValueError("a trailing ',' with no rule after it")
    return parsed


class PrincipalMapper:
    """Kafka's ``ssl.principal.mapping.rules``: the first rule that matches names the principal.

    ``rules`` is a comma-separated list of ``DEFAULT`` (the identity as it is) and
    ``RULE:pattern/replacement/[L|U]``: ``pattern`` (a regex, Java spelling of named groups accepted)
    must match the WHOLE identity; ``replacement`` may use ``$1``/``${name}``; ``L``/``U`` lower- or
    upper-case the result. A rule that does not match passes to the next; when none matches the client is
    refused (``SslAuthenticationFailedError``), as Kafka refuses it. An empty string means DEFAULT.

    The identity is what Flight reports for the client certificate: its FIRST subject alternative name,
    or its CN when it has none -- not Kafka's full subject DN, so "CN=alice,OU=x" rules never match; write
    rules against "alice". Invalid rules raise ``InvalidConfigError`` naming ssl.principal.mapping.rules.
    """

    def __init__(self, rules: str = "DEFAULT"):
        if not isinstance(rules, str):
            raise InvalidConfigError(f"{MAPPING_RULES_KEY} must be a string")
        try:
            self._rules = _parse_rules(rules) if rules.strip() else [_Rule(None, "", "")]
        except ValueError as exc:
            raise InvalidConfigError(f"{MAPPING_RULES_KEY} is invalid: {exc}") from None
        self.rules_text = rules

    def __repr__(self) -> str:
        return f"PrincipalMapper({self.rules_text!r})"

    def principal_of(self, peer_identity: bytes | str) -> str:
        """``User:<mapped name>`` for a client certificate identity; no identity -> User:ANONYMOUS."""
        if isinstance(peer_identity, bytes):
            try:
                peer_identity = peer_identity.decode("utf-8")
            except UnicodeDecodeError:
                raise SslAuthenticationFailedError("the client certificate identity is not UTF-8") from None
        if not peer_identity:
            return ANONYMOUS
        if len(peer_identity) > MAX_IDENTITY_CHARS:
            raise SslAuthenticationFailedError(f"the client certificate identity is longer than "
                                               f"{MAX_IDENTITY_CHARS} characters")
        for rule in self._rules:
            name = rule.apply(peer_identity)
            if name:
                return f"User:{name}"
            if name == "":
                raise SslAuthenticationFailedError(f"{MAPPING_RULES_KEY} maps the client certificate identity "
                                                   f"{peer_identity!r} to an empty name")
        raise SslAuthenticationFailedError(f"no rule of {MAPPING_RULES_KEY} matches the client certificate "
                                           f"identity {peer_identity!r}")


# --- recognising TLS failures in Flight's error texts ----------------------------------------------------
# Observed with pyarrow 26 (gRPC, BoringSSL/OpenSSL 3) on 127.0.0.1, each within ~10 ms of the call
# (the texts, per case, are recorded in tests/unit/test_tls.py). Every connection failure reads
# "failed to connect to all addresses; last error: <STATUS>: <address>: <detail>"; only the detail says
# which. A dead port says "Connection refused", a killed broker too, so neither is ever read as TLS.

_PEER_NAME = re.compile(r"Peer name (\S{1,300}) is not in peer certificate")
_VERIFY_FAILED = "certificate verify failed"
_VERIFY_REASONS = (
    ("unsuitable certificate purpose", "the broker's certificate is not for server use (its key usage or "
                                       "extended key usage does not allow TLS server authentication)"),
    ("certificate has expired", "the broker's certificate has expired"),
    ("certificate is not yet valid", "the broker's certificate is not valid yet (check the clocks)"),
)
_NOT_TRUSTED = (f"the broker's certificate is not signed by a CA in {TRUSTSTORE_KEY} (or that key is unset and "
                "the system CAs do not trust it)")
_CLIENT_CERT_REFUSED = (
    f"the broker closed the connection right after the TLS handshake: its listener requires a client "
    f"certificate and refused this one (the certificate in {KEYSTORE_KEY} is missing, not signed by a CA in "
    f"the broker's {TRUSTSTORE_KEY}, expired, or not for client use)")


def classify_tls_failure(message: str, *, client_tls: bool | None = None) -> str | None:
    """A reason a user can act on when ``message`` (a Flight error's text) is a TLS failure, else None.

    Recognised without context: the broker's certificate untrusted / expired / not for server use /
    not naming the dialled host, and a TLS client talking to a plaintext listener. A broker refusing the
    CLIENT's certificate shows the client only "Socket closed" right after the handshake; a plaintext
    client talking to a TLS listener or a proxy that accepts and closes looks the same, so that case is
    recognised only when the caller says it used TLS (``client_tls=True``): a TLS client meeting a
    proxy that closes reads "Handshake read failed (Socket closed)" instead, which stays None.
    """
    if not message:
        return None
    text = str(message)
    if _VERIFY_FAILED in text:
        for marker, reason in _VERIFY_REASONS:
            if marker in text:
                return reason
        return _NOT_TRUSTED
    peer = _PEER_NAME.search(text)
    if peer:
        return (f"the broker's certificate does not name the host {peer.group(1)} the client connected to "
                "(ssl.endpoint.identification.algorithm=https checks it): add it to the certificate's subject "
                "alternative names or advertise a host the certificate names")
    if "wrong version number" in text:
        return ("the broker's listener does not speak TLS: the client's security.protocol (SSL or SASL_SSL) "
                "does not match the listener's")
    if "Ssl handshake failed" in text:
        detail = text.split("SSL routines::", 1)[1].strip() if "SSL routines::" in text else "no detail"
        return f"the TLS handshake with the broker failed: {detail[:200]}"
    if client_tls and text.rstrip().endswith(": Socket closed") and "Handshake read failed" not in text:
        return _CLIENT_CERT_REFUSED
    return None
