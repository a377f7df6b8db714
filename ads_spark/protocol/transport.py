"""How a client reaches a broker: TLS on the connection and a bearer token on every call.

Producers, consumers, the admin client, the CLI, Spark and a broker's own outgoing calls (replica
fetchers, controller channels) all dial brokers through one ``ClientTransport`` built from Kafka's
client keys (``security/client_security.py`` parses them): ``connect`` gives a Flight client (TLS with
the truststore's CAs and, for mutual TLS, the keystore's certificate) and ``call_options`` the options
of one call (its timeout and, on SASL_* protocols, ``authorization: Bearer <token>``).

Tokens: a client with a password never sends it on ordinary calls. ``TokenSource`` calls the broker's
``authenticate`` action once (``authorization: Basic base64(user:password)``), caches the token, and
gets a new one when 80% of its lifetime has passed. A token a broker refuses (expired, revoked) is
dropped and the refusal made retriable once, so the caller's retry authenticates again; a fresh token
refused within ``REAUTH_WINDOW_S`` fails for good. ``sasl.token`` gives a token directly (Spark
executors): it cannot be refreshed, so its refusal or expiry fails with a message saying so.

TLS failures look like "broker down" to gRPC; ``wire.to_ads_error`` turns the recognisable ones into
the non-retriable ``SslAuthenticationFailedError``. The ones gRPC reports only as "Socket closed"
(a plaintext client at a TLS listener, a client certificate the broker refused or did not get) are
told apart by ``explain_unreachable``: one bounded TLS handshake probe with Python's ``ssl``.

Hostname checking cannot be turned off: Arrow Flight's only switch (``disable_server_verification``)
also skips the CA check, so ``ssl.endpoint.identification.algorithm=`` (empty) is refused here.
Nothing here puts a password, key or token in a repr, a log line or an error message.
"""

from __future__ import annotations

import base64
import json
import random
import socket
import ssl
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import pyarrow.flight as flight

from ads_spark.errors import (AdsError, ErrorCode, InvalidConfigError, NetworkExceptionError,
                              SaslAuthenticationFailedError, SslAuthenticationFailedError)
from ads_spark.protocol import wire
from ads_spark.security.client_security import ClientSecurity, SecurityConfigError, parse_client_security

AUTHENTICATE_ACTION = wire.ACTION_AUTHENTICATE
REFRESH_FRACTION = 0.8  # a token is replaced once this part of its lifetime has passed
MIN_LIFETIME_S = 1.0  # a token said to live less (clock skew) is still used this long, not once per call
REFRESH_RETRY_S = 5.0  # after a failed refresh, the old (still valid) token is used this long before trying again
REAUTH_WINDOW_S = 10.0  # a token refused this soon after being obtained for a refused one: give up
AUTHENTICATE_TIMEOUT_S = 10.0
AUTHENTICATE_BROKERS_MAX = 8  # brokers asked for a token before giving up (each within the timeout)
PROBE_TIMEOUT_S = 1.0
HOSTNAME_KEY = "ssl.endpoint.identification.algorithm"


@dataclass(frozen=True)
class _Token:
    value: str = field(repr=False)
    refresh_at_s: float  # monotonic
    expires_at_s: float  # monotonic; the broker's clock decides, this only schedules
    after_refusal_at_s: float | None  # when it was obtained to replace a refused token


class TokenSource:
    """The bearer token of one client identity: obtained lazily, cached, refreshed ahead of expiry.

    ``authenticate()`` asks a broker for a token (the ``authenticate`` answer: token, expiry_ms);
    ``static_token`` is ``sasl.token`` instead. ``monotonic_s``/``wall_ms`` are the clocks (tests pass
    fakes). Thread-safe; one thread authenticates at a time while the others wait for its token."""

    def __init__(self, authenticate: Callable[[], Mapping[str, Any]] | None, static_token: str | None = None, *,
                 monotonic_s: Callable[[], float] = time.monotonic, wall_ms: Callable[[], int] | None = None):
        if (authenticate is None) == (static_token is None):
            raise ValueError("a TokenSource needs either authenticate or a static token")
        self._authenticate = authenticate
        self._static = static_token
        self._static_expiry_ms = token_expiry_ms(static_token) if static_token is not None else None
        self._monotonic_s = monotonic_s
        self._wall_ms = wall_ms or (lambda: int(time.time() * 1000))
        self._lock = threading.Lock()  # guards the fields below
        self._auth_lock = threading.Lock()  # one authenticate at a time
        self._token: _Token | None = None
        self._retry_refresh_at_s = 0.0
        self._replacing_refused = False

    def __repr__(self) -> str:
        return f"TokenSource(static={self._static is not None})"

    def token(self) -> str:
        """The token to send now, authenticating first when there is none or it is due for refresh."""
        if self._static is not None:
            return self._static_token()
        now = self._monotonic_s()
        with self._lock:
            held = self._token
            if held is not None and (now < held.refresh_at_s or now < min(self._retry_refresh_at_s, held.expires_at_s)):
                return held.value
        with self._auth_lock:
            now = self._monotonic_s()
            with self._lock:
                held, replacing = self._token, self._replacing_refused
            if held is not None and now < held.refresh_at_s:
                return held.value  # another thread refreshed it while this one waited
            try:
                answer = self._authenticate()
            except AdsError as error:
                if held is not None and now < held.expires_at_s and error.retriable:
                    with self._lock:  # keep using the old token for a while; the broker says when it is done
                        self._retry_refresh_at_s = now + REFRESH_RETRY_S
                    return held.value
                raise
            fresh = self._from_answer(answer, now, replacing)
            with self._lock:
                self._token, self._replacing_refused, self._retry_refresh_at_s = fresh, False, 0.0
            return fresh.value

    def _from_answer(self, answer: Mapping[str, Any], now: float, replacing: bool) -> _Token:
        value, expiry_ms = answer.get("token"), answer.get("expiry_ms")
        if not isinstance(value, str) or not value or isinstance(expiry_ms, bool) or not isinstance(expiry_ms, int):
            raise SaslAuthenticationFailedError("the broker's authenticate answer carries no token")
        lifetime_s = max(MIN_LIFETIME_S, (expiry_ms - self._wall_ms()) / 1000)
        return _Token(value, now + REFRESH_FRACTION * lifetime_s, now + lifetime_s, now if replacing else None)

    def _static_token(self) -> str:
        if self._static_expiry_ms is not None and self._wall_ms() >= self._static_expiry_ms:
            raise _static_refused("expired")
        return self._static

    def refused(self, token: str | None, error: AdsError) -> AdsError:
        """What the caller should raise for a broker's refusal of ``token`` (None: the current one).

        The first refusal of a token drops it and comes back retriable, so the caller's next attempt
        authenticates again; a token obtained for that and refused too fails for good."""
        if self._static is not None:
            return _static_refused("refused by the broker: expired, revoked or not issued by this cluster")
        now = self._monotonic_s()
        with self._lock:
            held = self._token
            if held is None or (token is not None and held.value != token):
                error.retriable = True  # already replaced (another call saw the refusal first): try again
                return error
            self._token = None
            given_up = held.after_refusal_at_s is not None and now - held.after_refusal_at_s < REAUTH_WINDOW_S
            self._replacing_refused = not given_up
        error.retriable = not given_up
        return error


def _static_refused(why: str) -> SaslAuthenticationFailedError:
    return SaslAuthenticationFailedError(f"the token in sasl.token was {why}; a token given in sasl.token cannot be "
                                         "refreshed (no password): obtain a new one")


def token_expiry_ms(token: str | None) -> int | None:
    """The expiry a token says it has (``ads1.<payload>.<mac>``), unverified; None when it cannot be read.

    Only to fail before sending a token the broker would refuse anyway; the broker verifies it."""
    try:
        payload = token.split(".")[1]
        value = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["exp"]
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    except (AttributeError, IndexError, ValueError, KeyError, TypeError):
        return None


@dataclass(frozen=True)
class _TlsMaterial:
    root_certs: bytes | None
    cert_chain: bytes | None
    private_key: bytes | None = field(repr=False)


def _load_tls(security: ClientSecurity, prefix: str) -> _TlsMaterial | None:
    """The PEM bytes the TLS settings name, read now so a wrong path fails when the client is made."""
    if not security.uses_tls:
        return None
    if not security.check_hostname:
        raise SecurityConfigError(prefix + HOSTNAME_KEY, "an empty value (no host name check) is not supported: "
                                  "Arrow Flight can skip the host name check only together with the CA check; "
                                  "issue broker certificates naming the hosts clients dial (ads certs issue --san)")
    from ads_spark.security import tls  # cryptography loads only for clients that use TLS

    roots = tls.read_truststore(security.truststore_location, prefix + "ssl.truststore.location") \
        if security.truststore_location else None
    chain = key = None
    if security.keystore_location:
        password = security.key_password.reveal() if security.key_password is not None else ""
        chain, key = tls.read_pem_keystore(security.keystore_location, password)
    return _TlsMaterial(roots, chain, key)


class ClientTransport:
    """Connections and call options for one client config; safe to share between threads."""

    def __init__(self, security: ClientSecurity | None = None, *, bootstrap: list[tuple[str, int]] = (),
                 prefix: str = "", tls_material: _TlsMaterial | None = None,
                 tokens: TokenSource | None = None):
        self.security = security or ClientSecurity()
        self._bootstrap = list(bootstrap)
        self._tls = tls_material if tls_material is not None else _load_tls(self.security, prefix)
        if tokens is None and self.security.uses_sasl:
            tokens = TokenSource(None, self.security.token) if self.security.token is not None \
                else TokenSource(self._authenticate)
        self.tokens = tokens
        self._candidates: Callable[[], list[tuple[str, int]]] = lambda: list(self._bootstrap)
        # options -> the token they carry, so a refusal drops that token and not a newer one
        self._sent: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._sent_lock = threading.Lock()

    @classmethod
    def from_config(cls, config: Mapping[str, Any], *, prefix: str = "") -> ClientTransport:
        """The transport ``config``'s security keys describe; a bad key raises InvalidConfigError naming it."""
        bootstrap = config.get(prefix + "bootstrap.servers")
        return cls(parse_client_security(config, prefix=prefix), prefix=prefix,
                   bootstrap=wire.parse_bootstrap(bootstrap) if bootstrap else [])

    def __repr__(self) -> str:
        return (f"ClientTransport(protocol={self.security.protocol}, tls={self._tls is not None}, "
                f"client_certificate={self._tls is not None and self._tls.cert_chain is not None})")

    @property
    def uses_tls(self) -> bool:
        return self._tls is not None

    def set_authentication_candidates(self, candidates: Callable[[], list[tuple[str, int]]]) -> None:
        """Where ``authenticate`` is asked when a call names no broker (Connections: known brokers first)."""
        self._candidates = candidates

    def location(self, host: str, port: int) -> str:
        return f"grpc+tls://{host}:{port}" if self._tls is not None else wire.address_of(host, port)

    def connect(self, host: str, port: int) -> flight.FlightClient:
        """A Flight client to ``host:port``: TLS (CA and host name checked; mutual with a keystore) or plain."""
        if self._tls is None:
            return flight.connect(self.location(host, port))
        return flight.connect(self.location(host, port), tls_root_certs=self._tls.root_certs,
                              cert_chain=self._tls.cert_chain, private_key=self._tls.private_key)

    def call_options(self, timeout_s: float | None, address: tuple[str, int] | None = None) -> flight.FlightCallOptions:
        """Options of one call: its timeout and, on SASL_*, the bearer token (obtained first if need be,
        from the broker at ``address`` when given). Never log these: pyarrow's repr shows the headers."""
        if self.tokens is None:
            return flight.FlightCallOptions(timeout=timeout_s)
        token = self._token_via(address)
        options = flight.FlightCallOptions(timeout=timeout_s, headers=[(b"authorization", b"Bearer " + token.encode())])
        with self._sent_lock:
            self._sent[options] = token
        return options

    def _token_via(self, address: tuple[str, int] | None) -> str:
        """The token, authenticating with the broker at ``address`` first if one is needed (the broker the
        call goes to is reachable; kept per thread since calls on other threads may go elsewhere)."""
        _PREFERRED.address = address
        try:
            return self.tokens.token()
        finally:
            _PREFERRED.address = None

    def refused(self, error: AdsError, options: flight.FlightCallOptions | None) -> AdsError:
        """``error`` as the caller should raise it: a SASL_AUTHENTICATION_FAILED for a token goes through
        ``TokenSource.refused`` (retriable once); anything else is returned unchanged."""
        if self.tokens is None or error.code != ErrorCode.SASL_AUTHENTICATION_FAILED:
            return error
        with self._sent_lock:
            token = self._sent.get(options) if options is not None else None
        return self.tokens.refused(token, error)

    def _authenticate(self) -> Mapping[str, Any]:
        """The ``authenticate`` answer of the first broker that gives one; the password goes only there."""
        security = self.security
        basic = base64.b64encode(f"{security.username}:{security.password.reveal()}".encode()).decode()
        options = flight.FlightCallOptions(timeout=AUTHENTICATE_TIMEOUT_S,
                                           headers=[(b"authorization", b"Basic " + basic.encode())])
        preferred = getattr(_PREFERRED, "address", None)
        candidates = self._candidates()
        random.shuffle(candidates)
        candidates = ([preferred] if preferred else []) + [a for a in candidates if a != preferred]
        if not candidates:
            raise InvalidConfigError("SASL authentication needs a broker to ask: bootstrap.servers is empty")
        last: AdsError | None = None
        for host, port in candidates[:AUTHENTICATE_BROKERS_MAX]:
            try:
                client = self.connect(host, port)
                try:
                    results = list(client.do_action(flight.Action(AUTHENTICATE_ACTION, b"{}"), options))
                finally:
                    client.close()
            except Exception as exc:
                error = self.explain_unreachable(wire.to_ads_error(exc), host, port)
                if not error.retriable:
                    raise error from None
                last = error
                continue
            if not results:
                raise SaslAuthenticationFailedError("the broker's authenticate answer is empty")
            return wire.loads(results[0].body, "authenticate answer")
        raise last or NetworkExceptionError("no broker reachable to authenticate with")

    def explain_unreachable(self, error: AdsError, host: str, port: int) -> AdsError:
        """A retriable "Socket closed" while connecting, told apart by one bounded TLS probe: the broker
        speaks TLS to a plaintext client, or closed a TLS connection for want of an acceptable client
        certificate. Anything else (or a probe that cannot tell) returns ``error`` unchanged."""
        text = str(error)
        if not (isinstance(error, NetworkExceptionError) and "Socket closed" in text
                and "failed to connect" in text):
            return error
        speaks_tls, closed_without_certificate = _probe_tls(host, port)
        if speaks_tls and self._tls is None:
            return SslAuthenticationFailedError(
                f"the broker at {host}:{port} expects TLS but security.protocol is {self.security.protocol}: "
                f"use {'SASL_SSL' if self.security.uses_sasl else 'SSL'} and ssl.truststore.location")
        if speaks_tls and closed_without_certificate:
            if self._tls.cert_chain is None:
                return SslAuthenticationFailedError(
                    f"the broker at {host}:{port} requires a client certificate (ssl.client.auth=required): "
                    "set ssl.keystore.location")
            return SslAuthenticationFailedError(
                f"the broker at {host}:{port} refused this client's certificate (ssl.keystore.location): not "
                "issued by a CA in the broker's truststore, expired or not yet valid, or not for client "
                "authentication")
        return error


_PREFERRED = threading.local()  # the broker the current thread's call goes to: asked first for a token


def _probe_tls(host: str, port: int) -> tuple[bool, bool]:
    """(the endpoint completes a TLS handshake, it then closes the connection without a word).

    No certificate is checked here: nothing is sent but a ClientHello, and the answer only decides which
    error message a failed connection gets. A broker that accepts the client without a certificate
    sends its HTTP/2 settings at once; one that requires a certificate closes the connection."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S) as raw:
            with context.wrap_socket(raw, server_hostname=host) as wrapped:
                try:
                    return True, wrapped.recv(9) == b""
                except (ssl.SSLError, ConnectionError):
                    return True, True
                except OSError:  # timed out: a broker that said nothing did not refuse us
                    return True, False
    except OSError:  # includes ssl.SSLError: not TLS, or not reachable at all
        return False, False


PLAINTEXT = ClientTransport()
