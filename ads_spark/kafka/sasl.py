"""SASL on the Kafka port: SaslHandshake (v1, PLAIN only) then SaslAuthenticate (v0-v2) with PLAIN's token.

A SASL_PLAINTEXT or SASL_SSL Kafka listener serves only ApiVersions and these two until a login succeeds
(server.py checks ``ApiHandler.before_auth``). PLAIN's token is ``authzid NUL username NUL password``;
the password is checked by ``broker.security.authenticate``, the same check (PBKDF2 hash, one ZooKeeper
read, no user-name oracle) as the Flight ``authenticate`` action, and the connection's principal becomes
``User:<name>``. Every refusal reads the same (SASL_AUTHENTICATION_FAILED with Kafka's fixed text) and
closes the connection after its answer, as Kafka does: a client cannot tell a wrong password from an
unknown user, and cannot try a second password on one connection.

Not served: SaslHandshake v0's raw token framing (the client then sends PLAIN's token without a
SaslAuthenticate around it; clients since Kafka 1.0 use v1), answered ILLEGAL_SASL_STATE and closed
with a log line saying so; re-authentication (KIP-368): session_lifetime_ms is 0.
"""

from __future__ import annotations

import logging

from ads_spark.errors import AdsError
from ads_spark.kafka.api import ApiHandler, KafkaCall
from ads_spark.listener_config import SASL_PROTOCOLS
from ads_spark.security.credentials import Secret

log = logging.getLogger("ads.kafka.sasl")

SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36
MECHANISMS = ("PLAIN",)
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58
AUTHENTICATION_FAILED = "Authentication failed: Invalid username or password"
PLAIN_TOKEN_BYTES_MAX = 4096  # authzid, user and password together; anything longer is no login of ours


class SaslState:
    """One connection's exchange: ``phase`` is start -> handshaken -> done; ``close_after_response`` tells
    server.py to close the connection once the current answer is sent (every SASL failure)."""

    __slots__ = ("phase", "close_after_response")

    def __init__(self):
        self.phase = "start"
        self.close_after_response = False


def _state(call: KafkaCall) -> SaslState:
    if call.connection.sasl is None:
        call.connection.sasl = SaslState()
    return call.connection.sasl


def _refuse(state: SaslState, reason: str, call: KafkaCall) -> None:
    log.info("Kafka connection from %s on %s: %s; closing it", call.context.host, call.context.listener_name, reason)
    state.close_after_response = True


def handle_sasl_handshake(call: KafkaCall, request) -> dict:
    state = _state(call)
    mechanisms = list(MECHANISMS)
    if call.context.security_protocol not in SASL_PROTOCOLS:
        _refuse(state, "SaslHandshake on a listener without SASL", call)
        return {"error_code": ILLEGAL_SASL_STATE, "mechanisms": mechanisms}
    if call.version == 0:
        _refuse(state, "SaslHandshake v0 (raw SASL tokens without SaslAuthenticate) is not "
                "served; the client must use SaslHandshake v1", call)
        return {"error_code": ILLEGAL_SASL_STATE, "mechanisms": mechanisms}
    if state.phase != "start":
        _refuse(state, f"SaslHandshake in phase {state.phase}", call)
        return {"error_code": ILLEGAL_SASL_STATE, "mechanisms": mechanisms}
    if request.mechanism not in MECHANISMS:
        _refuse(state, f"SASL mechanism {request.mechanism[:64]!r} is not served "
                "(PLAIN only)", call)
        return {"error_code": UNSUPPORTED_SASL_MECHANISM, "mechanisms": mechanisms}
    state.phase = "handshaken"
    return {"error_code": 0, "mechanisms": mechanisms}


def parse_plain_token(token: bytes) -> tuple[str, Secret] | None:
    """(username, password) of PLAIN's ``authzid NUL user NUL password``; None when malformed or when the
    authorization id names someone else (ADS has no impersonation)."""
    if not isinstance(token, (bytes, bytearray)) or len(token) > PLAIN_TOKEN_BYTES_MAX:
        return None
    parts = bytes(token).split(b"\x00")
    if len(parts) != 3:
        return None
    try:
        authzid, username, password = (part.decode("utf-8") for part in parts)
    except UnicodeDecodeError:
        return None
    if not username or not password or (authzid and authzid != username):
        return None
    return username, Secret(password)


def handle_sasl_authenticate(call: KafkaCall, request) -> dict:
    state = _state(call)
    failed = {"error_code": SASL_AUTHENTICATION_FAILED, "error_message": AUTHENTICATION_FAILED, "auth_bytes": b""}
    if call.context.security_protocol not in SASL_PROTOCOLS or state.phase != "handshaken":
        _refuse(state, f"SaslAuthenticate in phase {state.phase}", call)
        return {"error_code": ILLEGAL_SASL_STATE, "error_message": "SaslAuthenticate not expected now",
                "auth_bytes": b""}
    state.phase = "done"
    credentials = parse_plain_token(request.auth_bytes)
    if credentials is None:
        _refuse(state, "a malformed PLAIN token", call)
        return failed
    try:
        answer = call.broker.security.authenticate(*credentials)
    except AdsError as exc:  # wrong password, unknown user, security state not loaded yet: one answer
        _refuse(state, f"SASL PLAIN login refused ({exc.code.name})", call)
        return failed
    call.connection.set_principal(answer["principal"])
    return {"error_code": 0, "auth_bytes": b"", "session_lifetime": 0}


API_HANDLERS = [
    ApiHandler(SASL_HANDSHAKE_KEY, "SaslHandshake", 0, 1, handle_sasl_handshake, before_auth=True),
    ApiHandler(SASL_AUTHENTICATE_KEY, "SaslAuthenticate", 0, 2, handle_sasl_authenticate, before_auth=True),
]
