"""Authentication of Flight calls: the ``authorization`` header and the principal of each call.

Two halves, because Flight gives them different places:

* ``AuthMiddlewareFactory.start_call`` runs before Arrow reads a stream's first message, so a call
  that cannot be authenticated is refused there, before it costs the broker anything but the
  headers. It reads the ``authorization`` header: at most one value of at most
  ``HEADER_CHARS_MAX`` characters, ``Basic <base64(user:password)>`` (strict base64, UTF-8, the
  user before the first colon; the password may hold colons, RFC 7617) or ``Bearer <token>``. A
  Bearer token is verified here (``broker.security.principal_for_token``, an HMAC check); Basic
  credentials are only kept, for the ``authenticate`` action to check. Anything else is refused with
  ``FlightUnauthenticatedError`` and a fixed message (SASL_AUTHENTICATION_FAILED in its extra_info):
  never the header, never a traceback (a non-Flight exception raised here would send the client one).
  Installed only on SASL_* listeners: elsewhere the principal does not come from the header.
* ``CallAuthenticator.context_for`` runs in the handler and makes the call's ``CallContext``: the
  token's principal on a SASL_* listener (no valid token: only DoAction ``authenticate`` may pass),
  the mapped client-certificate identity on an SSL listener that requires one, else
  ``User:ANONYMOUS``; the peer's IP as host. A call without the middleware's instance (``start_call``
  returned None, or a server built without it) is anonymous, never trusted.
"""

from __future__ import annotations

import base64
import binascii
import logging
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import unquote

import pyarrow.flight as flight

from ads_spark.broker.rpc.call_context import CallContext
from ads_spark.errors import ErrorCode, SaslAuthenticationFailedError
from ads_spark.protocol import wire
from ads_spark.security.authorizer import ANONYMOUS
from ads_spark.security.credentials import Secret, TokenError, TokenExpiredError

log = logging.getLogger("ads.broker.auth")

MIDDLEWARE_KEY = "ads-auth"
HEADER = "authorization"
HEADER_CHARS_MAX = 8192
AUTHENTICATE_ACTION = "authenticate"
SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})
SSL_PROTOCOLS = frozenset({"SSL"})  # SASL_SSL's principal is the token's, not the certificate's

# The only texts a refused caller is sent: none repeats what it sent or says why a check failed inside.
MALFORMED = "authentication failed: malformed authorization header"
TOKEN_INVALID = "authentication failed: invalid token"
TOKEN_EXPIRED = "authentication failed: token expired; authenticate again"
TOKEN_REQUIRED = "authentication failed: this listener needs a token from the authenticate action"
BASIC_ONLY_AUTHENTICATE = "authentication failed: Basic credentials are accepted by the authenticate action only"


def unauthenticated(message: str) -> flight.FlightUnauthenticatedError:
    """The Flight error for a refused call; its extra_info carries SASL_AUTHENTICATION_FAILED (58)."""
    detail = wire.dumps({"error_code": int(ErrorCode.SASL_AUTHENTICATION_FAILED), "message": message})
    return flight.FlightUnauthenticatedError(message, extra_info=detail)


@dataclass(frozen=True, slots=True)
class Credentials:
    """A parsed header: exactly one of ``token`` and ``basic`` is set."""

    token: str | None = None
    basic: tuple[str, Secret] | None = None

    def __repr__(self) -> str:
        return "Credentials(token)" if self.token is not None else "Credentials(basic)"


def parse_authorization(values: Any) -> Credentials | None:
    """The header's values (Flight gives a list per name) as credentials; None when absent.

    Raises ``FlightUnauthenticatedError`` (fixed message) for anything but one well-formed value."""
    if values is None:
        return None
    if not isinstance(values, list) or len(values) != 1 or not isinstance(values[0], str):
        raise unauthenticated(MALFORMED)
    value = values[0]
    if len(value) > HEADER_CHARS_MAX:
        raise unauthenticated(MALFORMED)
    scheme, space, rest = value.partition(" ")
    if not space or not rest or rest != rest.strip() or " " in rest:
        raise unauthenticated(MALFORMED)
    scheme = scheme.lower()  # RFC 7235: the scheme is case-insensitive
    if scheme == "bearer":
        if not rest.isascii() or not rest.isprintable():
            raise unauthenticated(MALFORMED)
        return Credentials(token=rest)
    if scheme == "basic":
        return Credentials(basic=_basic(rest))
    raise unauthenticated(MALFORMED)


def _basic(encoded: str) -> tuple[str, Secret]:
    try:
        text = base64.b64decode(encoded.encode("ascii"), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):  # UnicodeError is a ValueError
        raise unauthenticated(MALFORMED) from None
    username, colon, password = text.partition(":")
    if not colon or not username:
        raise unauthenticated(MALFORMED)
    return username, Secret(password)


class _CallCredentials(flight.ServerMiddleware):
    """What ``start_call`` established for one call: a verified principal, or Basic credentials."""

    __slots__ = ("principal", "basic")

    def __init__(self, principal: str | None, basic: tuple[str, Secret] | None):
        super().__init__()
        self.principal = principal
        self.basic = basic


class AuthMiddlewareFactory(flight.ServerMiddlewareFactory):
    """Per SASL_* listener. ``principal_for_token(token) -> "User:name"`` raises on a bad token."""

    def __init__(self, principal_for_token: Callable[[str], str]):
        super().__init__()
        self._principal_for_token = principal_for_token

    def start_call(self, info, headers):
        try:
            return self._start_call(info.method, headers)
        except flight.FlightError:
            raise
        except Exception:  # never a traceback to the client; the cause is ours to log (no header in it)
            log.warning("authentication check failed unexpectedly; call refused", exc_info=True)
            raise unauthenticated(TOKEN_INVALID) from None

    def _start_call(self, method, headers) -> _CallCredentials | None:
        credentials = parse_authorization(headers.get(HEADER))
        is_action = method == flight.FlightMethod.DO_ACTION
        if credentials is None:
            if is_action:
                return None  # the handler refuses every action but authenticate
            raise unauthenticated(TOKEN_REQUIRED)  # streams are refused before they read a message
        if credentials.basic is not None:
            if not is_action:
                raise unauthenticated(BASIC_ONLY_AUTHENTICATE)
            return _CallCredentials(None, credentials.basic)
        try:
            principal = self._principal_for_token(credentials.token)
        except TokenExpiredError:
            raise unauthenticated(TOKEN_EXPIRED) from None
        except TokenError:  # tampered, foreign secret, revoked, malformed
            raise unauthenticated(TOKEN_INVALID) from None
        return _CallCredentials(principal, None)


def host_of(peer: str) -> str:
    """The IP of gRPC's peer string ('ipv4:127.0.0.1:5555' -> '127.0.0.1', 'ipv6:%5B::1%5D:5' -> '::1')."""
    kind, _, rest = peer.partition(":")
    host = rest.rpartition(":")[0] if kind in ("ipv4", "ipv6") else rest
    if kind == "ipv6":
        host = unquote(host).strip("[]")
    return host


class CallAuthenticator:
    """Makes each call's ``CallContext`` for one listener (one per ``BrokerFlightServer``)."""

    def __init__(self, listener_name: str, security_protocol: str, client_auth_required: bool = False,
                 principal_mapping_rules: str = "DEFAULT"):
        self.listener_name = listener_name
        self.security_protocol = security_protocol
        self.sasl = security_protocol in SASL_PROTOCOLS
        self._mapper = None
        if security_protocol in SSL_PROTOCOLS and client_auth_required:
            from ads_spark.security.tls import PrincipalMapper  # only SSL listeners need it
            self._mapper = PrincipalMapper(principal_mapping_rules)

    def middleware(self, principal_for_token: Callable[[str], str]) -> dict[str, flight.ServerMiddlewareFactory]:
        """The factory to install (SASL_* listeners only); empty elsewhere: no per-call cost. It must come
        before the stream-counting middleware: a call refused here then never holds a stream slot (a
        factory raising after another returned its instance would leave that instance uncompleted)."""
        return {MIDDLEWARE_KEY: AuthMiddlewareFactory(principal_for_token)} if self.sasl else {}

    def context_for(self, context, action: str | None = None) -> CallContext:
        """The call's context. ``action``: the DoAction name (None for streams and DoGet). On a SASL_*
        listener a call without a verified token is refused unless it is DoAction ``authenticate``."""
        host = host_of(context.peer())
        if self.sasl:
            credentials = context.get_middleware(MIDDLEWARE_KEY)
            principal = getattr(credentials, "principal", None)
            basic = getattr(credentials, "basic", None)
            if action == AUTHENTICATE_ACTION:
                return CallContext(principal or ANONYMOUS, host, self.listener_name, self.security_protocol, basic)
            if basic is not None:
                raise SaslAuthenticationFailedError(BASIC_ONLY_AUTHENTICATE)
            if principal is None:
                raise SaslAuthenticationFailedError(TOKEN_REQUIRED)
            return CallContext(principal, host, self.listener_name, self.security_protocol)
        principal = ANONYMOUS
        if self._mapper is not None:
            identity = context.peer_identity()
            if identity:
                principal = self._mapper.principal_of(identity)
        return CallContext(principal, host, self.listener_name, self.security_protocol)


def authenticator_for(broker, listener_name: str, security_protocol: str,
                      client_auth_required: bool) -> CallAuthenticator:
    """The authenticator of one of ``broker``'s listeners (its ``ssl.principal.mapping.rules`` when an SSL
    listener requires client certificates). A stand-in broker without a full config gets the defaults."""
    rules = "DEFAULT"
    if security_protocol in SSL_PROTOCOLS and client_auth_required:
        rules = broker.config["ssl.principal.mapping.rules"]
    return CallAuthenticator(listener_name, security_protocol, client_auth_required, rules)


def token_verifier(broker) -> Callable[[str], str]:
    """``broker.security.principal_for_token``, looked up per call (the security state may be built after
    the servers); a broker without it refuses every token (``start_call`` turns the error into a refusal)."""
    return lambda token: broker.security.principal_for_token(token)
