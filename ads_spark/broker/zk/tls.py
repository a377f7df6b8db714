"""ZooKeeper over TLS for ADS's kazoo clients: trust only the configured CA, check the hostname.

Kazoo 2.11 has TLS (``use_ssl``, ``ca``, ``certfile``, ``keyfile``,
``verify_certs``, ``check_hostname``) but its connection code
(``kazoo.handlers.utils.create_tcp_connection``) always loads the system's
default CA roots as well as ``ca``, so any publicly trusted certificate would be
accepted for the ZooKeeper server, and ``check_hostname`` defaults to off. ADS
replaces only that step: ``TlsThreadingHandler`` is kazoo's threading handler
whose ``create_connection`` builds its own context from ``ZkTls`` (the truststore
alone, the client certificate, hostname checked unless turned off) and opens the
connection with it; everything else is kazoo's.

A certificate the client refuses (unknown CA, hostname not in the SAN, expired)
would make kazoo retry the connection until the caller's timeout, as if the
server were down. The handler records the refusal, so ``ZkSession.connect``
fails at once with ``ZooKeeperTlsError`` naming the reason (not a key byte).

The keystore is one PEM file holding the PKCS#8 private key and the
certificate chain (what ``ads certs issue`` writes); Python's ``ssl`` reads both
from the same file. An encrypted key is refused: there is no password key for
ZooKeeper's client certificate (and ``ssl`` would otherwise prompt on a terminal).
"""

from __future__ import annotations

import socket
import ssl
import threading
from dataclasses import dataclass
from typing import Any, Mapping

from kazoo.handlers.threading import SequentialThreadingHandler

from ads_spark.broker.zk.model import ZooKeeperUnavailable
from ads_spark.config import parse_bool
from ads_spark.errors import InvalidConfigError

SSL_ENABLE_KEY = "zookeeper.ssl.client.enable"
KEYSTORE_KEY = "zookeeper.ssl.keystore.location"
TRUSTSTORE_KEY = "zookeeper.ssl.truststore.location"
HOSTNAME_KEY = "zookeeper.ssl.endpoint.identification.algorithm"
SET_ACL_KEY = "zookeeper.set.acl"
ZK_SECURITY_KEYS = (SET_ACL_KEY, SSL_ENABLE_KEY, KEYSTORE_KEY, TRUSTSTORE_KEY, HOSTNAME_KEY)
_HOSTNAME_ALGORITHMS = ("https", "")
_KEYSTORE_BYTES_MAX = 1 << 20


class ZooKeeperTlsError(ZooKeeperUnavailable):
    """The TLS connection to ZooKeeper was refused by this client (certificate not trusted, wrong host...).

    A ``ZooKeeperUnavailable`` so existing handling applies, but retrying cannot help.
    """


@dataclass(frozen=True)
class ZkTls:
    """A kazoo client's TLS settings: PEM keystore (key + chain), PEM CA bundle, check the hostname or not."""

    keystore_location: str
    truststore_location: str
    check_hostname: bool = True

    def context(self) -> ssl.SSLContext:
        """A client context trusting only the truststore; ValueError naming the file if one is unusable."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED, hostname checked by default
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.check_hostname = self.check_hostname
        try:
            context.load_verify_locations(cafile=self.truststore_location)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"{TRUSTSTORE_KEY} {self.truststore_location!r} is not a readable PEM CA bundle: "
                             f"{type(exc).__name__}") from None
        _check_keystore(self.keystore_location)
        try:
            context.load_cert_chain(self.keystore_location, self.keystore_location, password=_no_password)
        except (OSError, ssl.SSLError, _EncryptedKey) as exc:
            raise ValueError(f"{KEYSTORE_KEY} {self.keystore_location!r} must hold an unencrypted PKCS#8 key and "
                             f"its certificate chain (PEM): {type(exc).__name__}") from None
        return context


class _EncryptedKey(Exception):
    pass


def _no_password() -> bytes:
    raise _EncryptedKey()


def _check_keystore(path: str) -> None:
    try:
        with open(path, "rb") as handle:
            head = handle.read(_KEYSTORE_BYTES_MAX)
    except OSError as exc:
        raise ValueError(f"{KEYSTORE_KEY} {path!r} cannot be read: {type(exc).__name__}") from None
    if b"ENCRYPTED PRIVATE KEY" in head:
        raise ValueError(f"{KEYSTORE_KEY} {path!r} holds an encrypted key; ZooKeeper's client certificate needs "
                         "an unencrypted PKCS#8 key (keep the file 0600)")


class TlsThreadingHandler(SequentialThreadingHandler):
    """Kazoo's threading handler, connecting with the ``ZkTls`` context instead of kazoo's own."""

    def __init__(self, tls: ZkTls):
        super().__init__()
        self.tls = tls
        self._context = tls.context()  # at construction: a bad file fails before any connection
        self._lock = threading.Lock()
        self.refused: str | None = None  # why the last server certificate was refused, for connect()

    def create_connection(self, address, hostname=None, timeout=None, use_ssl=False, **_kazoo_tls: Any):
        # kazoo's own TLS arguments are ignored on purpose: the context above replaces them.
        if not isinstance(hostname, str):  # kazoo's `command()` passes the port here
            hostname = address[0]
        sock = socket.create_connection(address, timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return self._context.wrap_socket(sock, server_hostname=hostname)
        except ssl.SSLCertVerificationError as exc:
            with self._lock:
                self.refused = f"{hostname}:{address[1]}: {exc.verify_message or exc.reason}"
            sock.close()
            raise
        except BaseException:
            sock.close()
            raise


def zk_security_kwargs(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``{"tls": ZkTls | None, "set_acl": bool}`` for ``ZkSession`` from the ``zookeeper.*`` security keys.

    ``settings`` maps key names to values (parsed bools or their text; absent keys
    take the defaults). Raises InvalidConfigError naming the key at fault.
    """
    enabled = parse_bool(settings.get(SSL_ENABLE_KEY, False), name=SSL_ENABLE_KEY)
    set_acl = parse_bool(settings.get(SET_ACL_KEY, False), name=SET_ACL_KEY)
    algorithm = str(settings.get(HOSTNAME_KEY, "https")).strip()
    if algorithm not in _HOSTNAME_ALGORITHMS:
        raise InvalidConfigError(f"invalid value {algorithm!r} for '{HOSTNAME_KEY}': must be https or empty")
    if not enabled:
        if set_acl:
            raise InvalidConfigError(f"'{SET_ACL_KEY}' is true but '{SSL_ENABLE_KEY}' is false: the creator "
                                     "ACLs name the ZooKeeper client certificate's DN, so set up ZooKeeper TLS")
        return {"tls": None, "set_acl": False}
    for key in (KEYSTORE_KEY, TRUSTSTORE_KEY):
        if not str(settings.get(key, "") or "").strip():
            raise InvalidConfigError(f"'{SSL_ENABLE_KEY}' is true: set '{key}' (a PEM file)")
    tls = ZkTls(str(settings[KEYSTORE_KEY]).strip(), str(settings[TRUSTSTORE_KEY]).strip(),
                check_hostname=algorithm == "https")
    return {"tls": tls, "set_acl": set_acl}
