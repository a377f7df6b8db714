"""Passwords, tokens and client security settings, as pure functions over data.

Owns what issue #23's authentication needs before anything is wired: (a) salted password hashes and
the ``StoredCredential`` record kept on a ZooKeeper znode, (b) the signed, expiring token the broker's
``authenticate`` action hands out so that a password is checked once and later calls carry a 5 us HMAC
check instead, and the ``Secret`` wrapper every password lives in. (Kafka's client settings that carry
a password are parsed in ``client_security``.) No I/O, no clock and no randomness: salts, secrets and
``now_ms`` are inputs, so every rule here is a unit test and the broker stays a thin shell.

A password only ever lives in a ``Secret``, whose repr hides it and which refuses to be pickled: the
Spark driver must authenticate and ship a token, and a password that slips into a pickled task or a
log line is a bug this makes loud instead of silent.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ads_spark.errors import AdsError, ErrorCode, InvalidRequestError

# --- errors -------------------------------------------------------------------------------------------

# Kafka's SASL_AUTHENTICATION_FAILED (58): non-retriable, so no retry loop spins on a wrong password.
_AUTHENTICATION_CODE = ErrorCode.SASL_AUTHENTICATION_FAILED


class AuthenticationError(AdsError):
    """A password or token was refused. Never retriable: retrying the same credentials cannot help."""

    code = _AUTHENTICATION_CODE
    retriable = False


class TokenError(AuthenticationError):
    """A token was refused; the subclass says why, so a client knows whether to re-authenticate."""


class MalformedTokenError(TokenError):
    """The token is not one this module issued (wrong shape, size, encoding or payload)."""


class TokenSignatureError(TokenError):
    """No current secret signed this token: tampered, forged, or signed by a secret since retired."""


class TokenExpiredError(TokenError):
    """The token's expiry is past; the client authenticates again with its password."""


class TokenRevokedError(TokenError):
    """The token's user was deleted or changed its password after the token was issued."""


class CredentialFormatError(InvalidRequestError):
    """A credential, password or user name is out of bounds; ``field`` names which one."""

    def __init__(self, field: str, problem: str):
        self.field = field
        super().__init__(f"invalid '{field}': {problem}")


# --- secrets ------------------------------------------------------------------------------------------

class Secret:
    """A password that cannot leak by accident: repr/str/format hide it and pickling raises.

    Pickling raises (``__reduce__``) because in Spark anything the driver holds can be pickled into a
    task, a plan or a checkpoint; the driver must authenticate once and ship the token instead. Copies
    are allowed (the value is immutable) so option dictionaries can still be copied on the driver.
    """

    __slots__ = ("_value",)

    def __init__(self, value: str):
        if not isinstance(value, str):
            raise TypeError("Secret wraps a str")
        self._value = value

    def reveal(self) -> str:
        """The password itself: call only where it is hashed or sent to the broker's authenticate."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return repr(self)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        return hmac.compare_digest(self._value.encode(), other._value.encode())

    __hash__ = None  # type: ignore[assignment]  # equal secrets need not be set members

    def __reduce__(self):
        raise TypeError("a Secret (password) cannot be pickled: authenticate on the driver and ship the token")

    def __copy__(self) -> Secret:
        return self

    def __deepcopy__(self, memo: dict) -> Secret:
        return self


def _password_bytes(password: str | Secret) -> bytes:
    raw = password.reveal() if isinstance(password, Secret) else password
    if not isinstance(raw, str):
        raise CredentialFormatError("password", "must be a string")
    encoded = raw.encode("utf-8")
    if not 1 <= len(encoded) <= MAX_PASSWORD_BYTES:
        raise CredentialFormatError("password", f"must be 1..{MAX_PASSWORD_BYTES} bytes of UTF-8")
    return encoded


# --- (a) salted password hashes -----------------------------------------------------------------------

HASH_ALGORITHM = "pbkdf2-hmac-sha512"
# OWASP's 2023 figure for PBKDF2-HMAC-SHA512; ~120 ms here, paid once per client authenticate.
DEFAULT_ITERATIONS = 210_000
MIN_ITERATIONS = 4_096  # Kafka's SCRAM minimum; lets tests and small clusters pay ~2 ms
MAX_ITERATIONS = 10_000_000  # bounds the CPU a corrupted znode can make every authenticate cost
SALT_BYTES = 16  # what callers should draw from os.urandom; 16..64 accepted
MIN_SALT_BYTES, MAX_SALT_BYTES = 16, 64
HASH_BYTES = 64  # SHA-512's output: the derived key is one block, no extra PBKDF2 rounds
MAX_PASSWORD_BYTES = 1024
MAX_CREDENTIAL_JSON_BYTES = 4096  # a stored credential is ~250 bytes; refuse anything much larger
MAX_USERNAME_CHARS = 128
# Letters, digits and . _ - @ only: '*' would read as Kafka's User:* wildcard in an ACL, ':' splits a
# principal, ',' and ';' split CLI lists and JAAS options, whitespace and controls hide in logs.
_USERNAME = re.compile(r"[A-Za-z0-9._@-]+")
_DUMMY_SALT = b"ads-unknown-user"  # 16 bytes; used only so unknown users cost a full hash


def validate_username(username: Any, *, field: str = "username") -> str:
    """``username`` if it may name an ADS user, else ``CredentialFormatError`` naming the field."""
    if not isinstance(username, str):
        raise CredentialFormatError(field, "must be a string")
    if not 1 <= len(username) <= MAX_USERNAME_CHARS:
        raise CredentialFormatError(field, f"must be 1..{MAX_USERNAME_CHARS} characters")
    if not _USERNAME.fullmatch(username):
        raise CredentialFormatError(field, "may contain only letters, digits and . _ - @")
    return username


def _check_int(value: Any, field: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise CredentialFormatError(field, "must be an integer")
    if not low <= value <= high:
        raise CredentialFormatError(field, f"must be in {low}..{high}")
    return value


def _check_salt(salt: Any) -> bytes:
    if not isinstance(salt, bytes):
        raise CredentialFormatError("salt", "must be bytes")
    if not MIN_SALT_BYTES <= len(salt) <= MAX_SALT_BYTES:
        raise CredentialFormatError("salt", f"must be {MIN_SALT_BYTES}..{MAX_SALT_BYTES} bytes")
    return salt


def hash_password(password: str | Secret, salt: bytes, iterations: int = DEFAULT_ITERATIONS) -> bytes:
    """PBKDF2-HMAC-SHA512 of the UTF-8 password (no normalisation, as Kafka's PLAIN does none).

    PBKDF2 rather than scrypt: scrypt is memory-hard, which helps against GPUs but makes every
    concurrent, not-yet-authenticated ``authenticate`` call cost ~16 MiB on a broker that shares its
    host with Spark executors (SECURITY.md's pre-authentication memory problem); PBKDF2 costs CPU only,
    is in every hashlib build and FIPS list, and is the function Kafka's SCRAM credentials use (salt +
    iterations). SHA-512 rather than SHA-256: 64-bit arithmetic narrows the GPU advantage per iteration.
    """
    _check_int(iterations, "iterations", MIN_ITERATIONS, MAX_ITERATIONS)
    return hashlib.pbkdf2_hmac("sha512", _password_bytes(password), _check_salt(salt), iterations, HASH_BYTES)


def next_credential_version(previous_version: int | None, now_ms: int) -> int:
    """The version of a new credential: above the previous one and not below ``now_ms``.

    Tokens are revoked by comparing versions, so a version must never come back: a user deleted and
    added again (``previous_version`` unknown, None) gets the time of the change, which is later than
    the version any still-valid token carries (each was the time of an earlier change)."""
    return max(now_ms, (previous_version or 0) + 1)


@dataclass(frozen=True, slots=True)
class StoredCredential:
    """What the credentials znode holds for one user: never the password, only its salted hash."""

    salt: bytes
    iterations: int
    hash: bytes
    credential_version: int
    algorithm: str = HASH_ALGORITHM

    def __post_init__(self):
        _check_salt(self.salt)
        _check_int(self.iterations, "iterations", MIN_ITERATIONS, MAX_ITERATIONS)
        if not isinstance(self.hash, bytes) or len(self.hash) != HASH_BYTES:
            raise CredentialFormatError("hash", f"must be {HASH_BYTES} bytes")
        _check_int(self.credential_version, "credential_version", 1, 2**63 - 1)
        if self.algorithm != HASH_ALGORITHM:
            raise CredentialFormatError("algorithm", f"must be {HASH_ALGORITHM}")

    def __repr__(self) -> str:  # the hash is offline-attackable: keep it out of logs too
        return (f"StoredCredential(algorithm={self.algorithm!r}, iterations={self.iterations}, "
                f"credential_version={self.credential_version})")

    @classmethod
    def create(cls, password: str | Secret, salt: bytes, credential_version: int,
               iterations: int = DEFAULT_ITERATIONS) -> StoredCredential:
        """A credential for ``password``; ``salt`` is fresh randomness the caller draws (SALT_BYTES)."""
        return cls(salt, iterations, hash_password(password, salt, iterations), credential_version)

    def to_json(self) -> bytes:
        """The znode's bytes (UTF-8 JSON, binary fields base64url)."""
        return json.dumps({"algorithm": self.algorithm, "iterations": self.iterations,
                           "salt": _b64encode(self.salt), "hash": _b64encode(self.hash),
                           "credential_version": self.credential_version}, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes | str) -> StoredCredential:
        """Parse a znode's bytes; any defect is a ``CredentialFormatError`` naming the field."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        if not isinstance(data, bytes) or len(data) > MAX_CREDENTIAL_JSON_BYTES:
            raise CredentialFormatError("credential", f"must be at most {MAX_CREDENTIAL_JSON_BYTES} bytes")
        try:
            fields = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            raise CredentialFormatError("credential", "is not JSON") from None
        if not isinstance(fields, dict):
            raise CredentialFormatError("credential", "must be a JSON object")
        expected = {"algorithm", "iterations", "salt", "hash", "credential_version"}
        mismatched = sorted(set(fields) ^ expected)
        if mismatched:
            raise CredentialFormatError(mismatched[0], "unknown field" if mismatched[0] in fields else "missing")
        return cls(_b64field(fields["salt"], "salt"), fields["iterations"], _b64field(fields["hash"], "hash"),
                   fields["credential_version"], fields["algorithm"])

    def verify(self, password: str | Secret) -> bool:
        """True if ``password`` hashes to this credential (constant-time comparison)."""
        return hmac.compare_digest(hash_password(password, self.salt, self.iterations), self.hash)


def verify_password(stored: StoredCredential | None, password: str | Secret,
                    unknown_user_iterations: int = DEFAULT_ITERATIONS) -> bool:
    """Check a password against a user's credential, or against none (unknown user).

    An unknown user still costs one full hash at ``unknown_user_iterations`` (pass the iterations the
    cluster creates credentials with), so the answer and its time do not tell which user names exist."""
    if stored is None:
        hmac.compare_digest(hash_password(password, _DUMMY_SALT, unknown_user_iterations), bytes(HASH_BYTES))
        return False
    return stored.verify(password)


def _b64encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    """Strict base64url without padding (raises ValueError), so one value has exactly one spelling."""
    if not re.fullmatch(r"[A-Za-z0-9_-]*", text) or len(text) % 4 == 1:
        raise ValueError("not base64url")
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if _b64encode(raw) != text:
        raise ValueError("non-canonical base64url")
    return raw


def _b64field(value: Any, field: str) -> bytes:
    if not isinstance(value, str):
        raise CredentialFormatError(field, "must be a base64url string")
    try:
        return _b64decode(value)
    except (ValueError, binascii.Error):
        raise CredentialFormatError(field, "is not base64url") from None


# --- (b) tokens ---------------------------------------------------------------------------------------

TOKEN_PREFIX = "ads1"  # format version; a future format gets a new prefix, never a reinterpretation
_TOKEN_MAC_CONTEXT = b"ads-token-v1\x00"  # domain separation: this key signs nothing else
MIN_SECRET_BYTES = 32  # HMAC-SHA256's key strength; shorter secrets are refused
MAX_SECRETS = 8  # the newest signs, older ones only verify during rotation
MAX_TOKEN_CHARS = 1024
DEFAULT_TOKEN_LIFETIME_MS = 60 * 60 * 1000
MAX_TOKEN_LIFETIME_MS = 7 * 24 * 60 * 60 * 1000


@dataclass(frozen=True, slots=True)
class TokenClaims:
    """What a verified token proves: who, under which credential version, until when."""

    username: str
    credential_version: int
    expiry_ms: int

    @property
    def principal(self) -> str:
        """Kafka's principal string, what the authorizer's ACLs name."""
        return f"User:{self.username}"


def _check_secret(secret: Any) -> bytes:
    if not isinstance(secret, bytes) or len(secret) < MIN_SECRET_BYTES:
        raise CredentialFormatError("token secret", f"must be at least {MIN_SECRET_BYTES} bytes")
    return secret


def _mac(secret: bytes, payload: bytes) -> bytes:
    return hmac.new(secret, _TOKEN_MAC_CONTEXT + payload, hashlib.sha256).digest()


def issue_token(secret: bytes, username: str, credential_version: int, now_ms: int,
                lifetime_ms: int = DEFAULT_TOKEN_LIFETIME_MS) -> str:
    """An opaque bearer token ``ads1.<payload>.<mac>`` (base64url) signed with HMAC-SHA256."""
    validate_username(username)
    _check_int(credential_version, "credential_version", 1, 2**63 - 1)
    _check_int(now_ms, "now_ms", 0, 2**62)
    _check_int(lifetime_ms, "lifetime_ms", 1, MAX_TOKEN_LIFETIME_MS)
    payload = json.dumps({"u": username, "v": credential_version, "exp": now_ms + lifetime_ms},
                         separators=(",", ":"), sort_keys=True).encode()
    return f"{TOKEN_PREFIX}.{_b64encode(payload)}.{_b64encode(_mac(_check_secret(secret), payload))}"


def _split_token(token: Any) -> tuple[bytes, bytes]:
    """(payload, mac) of a token's shape; nothing in it is trusted yet."""
    if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS:
        raise MalformedTokenError("token is not a string of at most %d characters" % MAX_TOKEN_CHARS)
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX:
        raise MalformedTokenError(f"token is not an {TOKEN_PREFIX} token")
    try:
        return _b64decode(parts[1]), _b64decode(parts[2])
    except (ValueError, binascii.Error):
        raise MalformedTokenError("token is not base64url") from None


def _claims(payload: bytes) -> TokenClaims:
    """The claims of a payload whose MAC already checked (so a failure here is our own format bug)."""
    try:
        fields = json.loads(payload)
        claims = TokenClaims(fields["u"], fields["v"], fields["exp"])
        validate_username(claims.username)
        _check_int(claims.credential_version, "v", 1, 2**63 - 1)
        _check_int(claims.expiry_ms, "exp", 0, 2**63 - 1)
    except (ValueError, TypeError, KeyError, CredentialFormatError):
        raise MalformedTokenError("token payload is not valid") from None
    return claims


def verify_token(secrets: Sequence[bytes], token: str, now_ms: int,
                 current_version_of: Callable[[str], int | None]) -> TokenClaims:
    """The claims of a valid token, or a ``TokenError`` saying why not.

    ``secrets`` newest first: during a rotation tokens signed by a retiring secret stay valid until it
    is dropped from the list. ``current_version_of(username)`` is the user's credential version now
    (None: no such user); any difference from the token's revokes it. Signature before anything else,
    so an unsigned payload is never parsed."""
    if not secrets or len(secrets) > MAX_SECRETS:
        raise CredentialFormatError("token secrets", f"must list 1..{MAX_SECRETS} secrets")
    _check_int(now_ms, "now_ms", 0, 2**63 - 1)
    keys = [_check_secret(secret) for secret in secrets]
    payload, mac = _split_token(token)
    # every secret is tried (no early exit), so timing does not tell which one matched
    matched = [hmac.compare_digest(_mac(key, payload), mac) for key in keys]
    if not any(matched):
        raise TokenSignatureError("token signature does not match a current secret")
    claims = _claims(payload)
    if now_ms >= claims.expiry_ms:
        raise TokenExpiredError(f"token expired at {claims.expiry_ms} ms (now {now_ms} ms): authenticate again")
    current = current_version_of(claims.username)
    if current is None:
        raise TokenRevokedError("token revoked: its user was deleted")
    if current != claims.credential_version:
        raise TokenRevokedError("token revoked: its user's password changed")
    return claims
