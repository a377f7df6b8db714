"""The ZooKeeper session under the adapter: connect, chroot, bounded calls, typed errors, watches.

``ZkSession`` owns one kazoo client. Every call waits at most
``request_timeout_s`` and turns a lost connection or session into
``ZooKeeperUnavailable``; the topic and cluster operations in ``zk.py`` and
``zk_topics.py`` are built on its small helpers (``_read``, ``_children``,
``_commit``). Watches are persistent kazoo recipes, one subscriber per kind:
subscribing again replaces the callback, so a controller that is re-elected
does not pile up duplicate handlers.

Kazoo serialises each request on its one connection thread, and an exception
there ends that thread for good: the session is gone and nothing reconnects it
(issue #20: a topic name with a lone surrogate did this, and the broker lived
on, cut off, still acknowledging writes as a leader). Two guards: the client is
a ``GuardedKazooClient``, which checks every request in the caller's thread
before kazoo queues it (paths encodable, without NUL, bounded; values bytes
within ZooKeeper's bound) and fails it with INVALID_REQUEST instead; and
``connection_thread_problem`` lets the broker's periodic work notice if the
thread died anyway, so the broker exits rather than live on without ZooKeeper.

The same funnel gives every znode this session creates its ACL: the guarded
client sets each create's ACL (plain creates, ``ensure_path`` steps, creates in
a multi-op) from ``acls.acls_for(path, set_acl)``, whatever the call site
passed, so no create can leave an open parent behind (docs/DESIGN.md, section
ZooKeeper security). ``tls=ZkTls(...)`` connects over TLS (``tls.py``).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionClosedError, ConnectionLoss, KazooException, NoAuthError, NodeExistsError, NoNodeError,
    OperationTimeoutError,
    RolledBackError, RuntimeInconsistency, SessionExpiredError, ZookeeperError, ZookeeperStoppedError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState
from kazoo.protocol.serialization import Create, Create2, Transaction
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from ads_spark.broker.zk.acls import acls_for
from ads_spark.broker.zk.model import (
    BASE_PATHS, CLUSTER_ID_PATH, CONTROLLER_EPOCH_PATH, ZNODE_VALUE_BYTES_MAX, ZooKeeperUnavailable, encode_json,
)
from ads_spark.broker.zk.tls import (
    ZK_SECURITY_KEYS, TlsThreadingHandler, ZkTls, ZooKeeperTlsError, zk_security_kwargs,
)
from ads_spark.errors import InvalidRequestError
from ads_spark.protocol.names import shown

log = logging.getLogger("ads.broker.zk")

DEFAULT_CHROOT = "/ads"
DEFAULT_SESSION_TIMEOUT_MS = 18000
DEFAULT_CONNECT_TIMEOUT_S = 15.0
CONNECT_POLL_S = 0.1  # how often a pending connect looks for a refused TLS certificate
# ConnectionClosedError: kazoo's answer once its client is closed (also after its connection thread died).
_LOST_ERRORS = (ConnectionLoss, ConnectionClosedError, SessionExpiredError, ZookeeperStoppedError,
                KazooTimeoutError, OperationTimeoutError)
# ZooKeeper's own limit on a path is the packet size; ours are short, and a long one is someone else's string.
ZNODE_PATH_CHARS_MAX = 4096


class ZooKeeperAccessDenied(ZooKeeperUnavailable):
    """ZooKeeper's ACLs refuse this session's identity what every ADS session needs (another DN owns the tree)."""


class MultiOpFailed(Exception):
    """A transaction was rolled back; ``index`` is the operation that failed and ``error`` why."""

    def __init__(self, index: int, error: ZookeeperError):
        super().__init__(f"operation {index} failed: {type(error).__name__}")
        self.index = index
        self.error = error


def request_problem(request: Any) -> str | None:
    """Why kazoo must not be given ``request`` (one operation or a multi-op), or None.

    Kazoo itself refuses ``.`` and ``..`` path components (in the caller's
    thread); what it does not check is whether it can encode a path, which it
    finds out on its connection thread.
    """
    operations = getattr(request, "operations", None)
    for operation in operations if operations is not None else (request,):
        path = getattr(operation, "path", None)
        if path is not None:
            problem = _path_problem(path)
            if problem is not None:
                return problem
        data = getattr(operation, "data", None)
        if data is not None and (not isinstance(data, bytes) or len(data) > ZNODE_VALUE_BYTES_MAX):
            return (f"the value for {shown(path)} must be bytes of at most {ZNODE_VALUE_BYTES_MAX}, "
                    f"not {type(data).__name__} of length {len(data) if hasattr(data, '__len__') else '?'}")
    return None


def _path_problem(path: Any) -> str | None:
    if not isinstance(path, str):
        return f"a znode path must be a string, not {type(path).__name__}"
    if len(path) > ZNODE_PATH_CHARS_MAX:
        return f"znode path {shown(path)} is {len(path)} characters, above {ZNODE_PATH_CHARS_MAX}"
    if "\x00" in path:
        return f"znode path {shown(path)} contains NUL"
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return f"znode path {shown(path)} is not valid Unicode (a lone surrogate)"
    return None


class GuardedKazooClient(KazooClient):
    """A KazooClient that checks each request in the caller's thread before queueing it.

    ``_call`` is kazoo's single funnel from every ``*_async`` method and
    ``transaction().commit_async()`` to its request queue (kazoo 2.x). A request
    it refuses is failed at once with InvalidRequestError on its async result,
    the way kazoo fails requests on a closed client, and never reaches the
    connection thread. Every create it passes on carries ``acl_policy(path)``
    (path relative to the chroot); the default policy is ``acls_for(path, False)``.
    """

    def __init__(self, *args, acl_policy: Callable[[str], list] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.acl_policy = acl_policy or (lambda path: acls_for(path, False))

    def _call(self, request, async_object):
        problem = request_problem(request)
        if problem is not None:
            async_object.set_exception(InvalidRequestError(f"not sent to ZooKeeper: {problem}"))
            return False
        return super()._call(self._with_acls(request), async_object)

    def _with_acls(self, request):
        if isinstance(request, (Create, Create2)):
            return request._replace(acl=self.acl_policy(self.unchroot(request.path)))
        if isinstance(request, Transaction):
            return request._replace(operations=[self._with_acls(op) for op in request.operations])
        return request


@contextmanager
def unavailable_on_loss(what: str) -> Iterator[None]:
    """Turn kazoo's connection, session and timeout errors into ``ZooKeeperUnavailable``."""
    try:
        yield
    except _LOST_ERRORS as exc:
        raise ZooKeeperUnavailable(f"ZooKeeper unavailable while {what}: {type(exc).__name__} {exc}") from exc


class ZkSession:
    """One ZooKeeper session rooted at ``chroot``; see the module docstring."""

    def __init__(self, hosts: str, chroot: str = DEFAULT_CHROOT,
                 session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
                 connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
                 request_timeout_s: float | None = None, tls: ZkTls | None = None, set_acl: bool = False):
        if set_acl and tls is None:
            raise ValueError("set_acl needs tls: the creator ACLs name the client certificate's DN")
        hosts, _, inline_chroot = hosts.partition("/")
        chroot = "/" + inline_chroot if inline_chroot else chroot
        if not chroot.startswith("/") or chroot.endswith("/") and chroot != "/":
            raise ValueError(f"chroot must be an absolute path without a trailing '/': {chroot!r}")
        self.hosts = hosts
        self.chroot = "" if chroot == "/" else chroot
        self.session_timeout_ms = int(session_timeout_ms)
        self.connect_timeout_s = connect_timeout_s
        # A request outliving the session cannot succeed anyway.
        self.request_timeout_s = request_timeout_s or max(1.0, self.session_timeout_ms / 1000.0)
        self.tls = tls
        self.set_acl = bool(set_acl)
        self._client: KazooClient | None = None
        self._watchers: dict[str, Any] = {}
        self._watch_callbacks: dict[str, Callable[[], None]] = {}
        self._session_listeners: list[Callable[[str], None]] = []
        self._lock = threading.Lock()

    @classmethod
    def from_broker_config(cls, config, **overrides) -> "ZkSession":
        """A session (of ``cls``) as a broker's config describes it: connect string, timeout, TLS, ACLs."""
        hosts, chroot = config.zookeeper_hosts_and_chroot
        kwargs: dict[str, Any] = {"chroot": chroot, "session_timeout_ms": config["zookeeper.session.timeout.ms"]}
        kwargs.update(zk_security_kwargs({key: config[key] for key in ZK_SECURITY_KEYS}))
        kwargs.update(overrides)
        return cls(hosts, **kwargs)

    # ---- connection -------------------------------------------------------------------

    def connect(self) -> "ZkSession":
        """Open the session (bounded by ``connect_timeout_s``); create the base znodes and cluster id."""
        if self._client is not None:
            return self
        self._ensure_chroot()
        client = self._start_client(self.hosts + self.chroot, lambda path: acls_for(path, self.set_acl))
        client.add_listener(self._on_state)
        self._client = client
        try:
            self._ensure_base_paths()
        except NoAuthError:
            self.close()
            raise ZooKeeperAccessDenied(
                f"ZooKeeper refuses this client's identity the ADS znodes under {self.chroot or '/'} (they were "
                "created with zookeeper.set.acl by another certificate DN; every broker must present a ZooKeeper "
                "client certificate with the same DN)") from None
        return self

    def _start_client(self, hosts: str, acl_policy: Callable[[str], list]) -> GuardedKazooClient:
        """A started client (bounded by ``connect_timeout_s``); with TLS, a refused certificate fails at once."""
        tls_kwargs: dict[str, Any] = {}
        if self.tls is not None:
            tls_kwargs = {"handler": TlsThreadingHandler(self.tls), "use_ssl": True, "verify_certs": True,
                          "ca": self.tls.truststore_location, "certfile": self.tls.keystore_location,
                          "keyfile": self.tls.keystore_location, "check_hostname": self.tls.check_hostname}
        client = GuardedKazooClient(hosts=hosts, timeout=self.session_timeout_ms / 1000.0, acl_policy=acl_policy,
                                    **tls_kwargs)
        started = client.start_async()
        deadline = time.monotonic() + self.connect_timeout_s
        refused = None
        while not started.wait(min(CONNECT_POLL_S, max(0.0, deadline - time.monotonic()))):
            refused = getattr(client.handler, "refused", None)
            if refused is not None or time.monotonic() >= deadline:
                break
        if client.connected:
            return client
        client.stop()
        client.close()
        if refused is not None:
            raise ZooKeeperTlsError(f"ZooKeeper's TLS certificate was refused ({refused}); check "
                                    f"zookeeper.ssl.truststore.location and the ZooKeeper host names")
        over_tls = (" over TLS (if ZooKeeper is up, it may refuse this client's certificate)"
                    if self.tls is not None else "")
        raise ZooKeeperUnavailable(f"no ZooKeeper session with {self.hosts}{over_tls} within "
                                   f"{self.connect_timeout_s}s")

    def open_unmanaged_client(self, acl_policy: Callable[[str], list] | None = None) -> GuardedKazooClient:
        """A started kazoo client on the chroot with this session's TLS, creating nothing (tools; caller stops it).

        ``acl_policy`` defaults to this session's (``acls_for(path, set_acl)``).
        """
        return self._start_client(self.hosts + self.chroot, acl_policy or (lambda path: acls_for(path, self.set_acl)))

    def _ensure_chroot(self) -> None:
        if not self.chroot:
            return
        # Outside the chroot no path is secret: the chroot and its ancestors get the base policy.
        bootstrap = self._start_client(self.hosts, lambda _path: acls_for("/", self.set_acl))
        try:
            with unavailable_on_loss("creating the chroot"):
                bootstrap.ensure_path_async(self.chroot).get(timeout=self.request_timeout_s)
        finally:
            bootstrap.stop()
            bootstrap.close()

    def _ensure_base_paths(self) -> None:
        with unavailable_on_loss("creating the base znodes"):
            for path in BASE_PATHS:
                self.client.ensure_path_async(path).get(timeout=self.request_timeout_s)
        self._create_if_absent(CONTROLLER_EPOCH_PATH, b"0")
        # The first client to connect names the cluster; everyone after reads the same id.
        self._create_if_absent(CLUSTER_ID_PATH, encode_json({"version": "1", "id": str(uuid.uuid4())}))

    def _create_if_absent(self, path: str, value: bytes) -> bool:
        """Create ``path`` with ``value``; False if it already existed."""
        try:
            self._wait(self.client.create_async(path, value), f"creating {path}")
            return True
        except NodeExistsError:
            return False

    def close(self) -> None:
        """End the session: its ephemeral znodes (registration, controller) go at once."""
        client, self._client = self._client, None
        self._watchers.clear()
        self._watch_callbacks.clear()
        if client is None:
            return
        try:
            client.stop()
        finally:
            client.close()

    def __enter__(self) -> "ZkSession":
        return self.connect()

    def __exit__(self, *exc_info) -> None:
        self.close()

    @property
    def client(self) -> KazooClient:
        if self._client is None:
            raise ZooKeeperUnavailable("not connected to ZooKeeper (call connect() first)")
        return self._client

    @property
    def connected(self) -> bool:
        return self._client is not None and self._client.connected

    def connection_thread_problem(self) -> str | None:
        """Why this session can never come back, or None while it can (connected or reconnecting).

        Cheap enough for every broker tick. Kazoo runs one connection thread per
        client from ``start()`` until ``stop()``; if it has ended while the client
        was not stopped, an exception killed it (or its retry policy gave up) and
        no request will ever be sent again.
        """
        client = self._client
        if client is None or client._stopped.is_set():
            return None  # not connected yet, or closed on purpose
        routine = getattr(getattr(client, "_connection", None), "_connection_routine", None)
        if routine is not None and routine.is_alive():
            return None
        return (f"kazoo's ZooKeeper connection thread for {self.hosts}{self.chroot} has died (see the traceback "
                "logged by kazoo above); this process has no ZooKeeper session and will never get one back")

    @property
    def session_id(self) -> int | None:
        client_id = self._client.client_id if self._client is not None else None
        return client_id[0] if client_id else None

    # ---- session state ----------------------------------------------------------------

    def add_session_listener(self, listener: Callable[[str], None]) -> None:
        """``listener(state)`` with state 'connected', 'suspended' or 'lost'; called on kazoo's thread.

        It must not block or call ZooKeeper; hand work to another thread.
        """
        self._session_listeners.append(listener)

    def _on_state(self, state: str) -> None:
        name = {KazooState.CONNECTED: "connected", KazooState.SUSPENDED: "suspended",
                KazooState.LOST: "lost"}.get(state, str(state).lower())
        if name == "lost":
            log.warning("ZooKeeper session lost; ephemeral znodes of this session are gone")
        for listener in list(self._session_listeners):
            try:
                listener(name)
            except Exception:
                log.exception("ZooKeeper session listener failed")

    # ---- bounded calls ----------------------------------------------------------------

    def _wait(self, async_result, what: str) -> Any:
        with unavailable_on_loss(what):
            return async_result.get(timeout=self.request_timeout_s)

    def _read(self, path: str) -> tuple[bytes, Any] | None:
        """(data, stat) of ``path``, or None if it does not exist."""
        try:
            return self._wait(self.client.get_async(path), f"reading {path}")
        except NoNodeError:
            return None

    def _read_many(self, paths: list[str]) -> list[tuple[bytes, Any] | None]:
        """Pipelined reads: one round trip's latency for many znodes."""
        pending = [self.client.get_async(path) for path in paths]
        results = []
        for path, result in zip(paths, pending):
            try:
                results.append(self._wait(result, f"reading {path}"))
            except NoNodeError:
                results.append(None)
        return results

    def _children(self, path: str) -> list[str]:
        try:
            return sorted(self._wait(self.client.get_children_async(path), f"listing {path}"))
        except NoNodeError:
            return []

    def _delete_many(self, paths: list[str]) -> None:
        """Pipelined deletes; a znode already gone is fine."""
        pending = [(path, self.client.delete_async(path)) for path in paths]
        for path, result in pending:
            try:
                self._wait(result, f"deleting {path}")
            except NoNodeError:
                pass

    def _commit_async(self, build: Callable[[Any], None]):
        transaction = self.client.transaction()
        build(transaction)
        return transaction.commit_async()

    def _transaction_result(self, async_result, what: str) -> list[Any]:
        """The results of a committed transaction, or ``MultiOpFailed`` naming the failed operation."""
        results = self._wait(async_result, what)
        for index, result in enumerate(results):
            if isinstance(result, (RolledBackError, RuntimeInconsistency)):
                continue
            if isinstance(result, KazooException):
                if isinstance(result, _LOST_ERRORS):
                    raise ZooKeeperUnavailable(f"ZooKeeper unavailable while {what}: {result!r}")
                raise MultiOpFailed(index, result)
        return results

    def _commit(self, build: Callable[[Any], None], what: str) -> list[Any]:
        """Run the operations ``build(transaction)`` adds as one atomic multi-op."""
        return self._transaction_result(self._commit_async(build), what)

    # ---- watches ----------------------------------------------------------------------

    def _watch_children(self, kind: str, path: str, callback: Callable[[], None]) -> None:
        """``callback()`` after every change of ``path``'s children (not for the state at subscription)."""
        self._watch_callbacks[kind] = callback
        if kind in self._watchers:
            return
        first = [True]

        def on_children(_children: list[str]) -> None:
            if first[0]:
                first[0] = False
                return
            self._fire(kind)

        self._watchers[kind] = ChildrenWatch(self.client, path, on_children)

    def _watch_data(self, kind: str, path: str, callback: Callable[[], None],
                    fire_if_absent: bool = False) -> None:
        """``callback()`` after every change of ``path`` (created, changed, deleted).

        With ``fire_if_absent`` it also fires at subscription when the znode does
        not exist, closing the gap between the caller's last look and the watch.
        """
        self._watch_callbacks[kind] = callback
        if kind in self._watchers:
            if fire_if_absent and self._read(path) is None:
                self._fire(kind)
            return
        first = [True]

        def on_data(data, _stat) -> None:
            if first[0]:
                first[0] = False
                if not (fire_if_absent and data is None):
                    return
            self._fire(kind)

        self._watchers[kind] = DataWatch(self.client, path, on_data)

    def _fire(self, kind: str) -> None:
        callback = self._watch_callbacks.get(kind)
        if callback is None:
            return
        try:
            callback()
        except Exception:
            log.exception("ZooKeeper watch callback %s failed", kind)

    def unwatch(self, kind: str) -> None:
        """Stop calling the subscriber of ``kind`` (the kazoo watch stays, silent)."""
        self._watch_callbacks.pop(kind, None)
