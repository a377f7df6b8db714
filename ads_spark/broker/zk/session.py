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
"""

from __future__ import annotations

import logging
import threading
import uuid
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionClosedError, ConnectionLoss, KazooException, NodeExistsError, NoNodeError, OperationTimeoutError,
    RolledBackError, RuntimeInconsistency, SessionExpiredError, ZookeeperError, ZookeeperStoppedError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from ads_spark.broker.zk.model import (
    BASE_PATHS, CLUSTER_ID_PATH, CONTROLLER_EPOCH_PATH, ZNODE_VALUE_BYTES_MAX, ZooKeeperUnavailable, encode_json,
)
from ads_spark.errors import InvalidRequestError
from ads_spark.protocol.names import shown

log = logging.getLogger("ads.broker.zk")

DEFAULT_CHROOT = "/ads"
DEFAULT_SESSION_TIMEOUT_MS = 18000
DEFAULT_CONNECT_TIMEOUT_S = 15.0
# ConnectionClosedError: kazoo's answer once its client is closed (also after its connection thread died).
_LOST_ERRORS = (ConnectionLoss, ConnectionClosedError, SessionExpiredError, ZookeeperStoppedError,
                KazooTimeoutError, OperationTimeoutError)
# ZooKeeper's own limit on a path is the packet size; ours are short, and a long one is someone else's string.
ZNODE_PATH_CHARS_MAX = 4096


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
    connection thread.
    """

    def _call(self, request, async_object):
        problem = request_problem(request)
        if problem is not None:
            async_object.set_exception(InvalidRequestError(f"not sent to ZooKeeper: {problem}"))
            return False
        return super()._call(request, async_object)


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
                 request_timeout_s: float | None = None):
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
        self._client: KazooClient | None = None
        self._watchers: dict[str, Any] = {}
        self._watch_callbacks: dict[str, Callable[[], None]] = {}
        self._session_listeners: list[Callable[[str], None]] = []
        self._lock = threading.Lock()

    # ---- connection -------------------------------------------------------------------

    def connect(self) -> "ZkSession":
        """Open the session (bounded by ``connect_timeout_s``); create the base znodes and cluster id."""
        if self._client is not None:
            return self
        self._ensure_chroot()
        client = GuardedKazooClient(hosts=self.hosts + self.chroot, timeout=self.session_timeout_ms / 1000.0)
        try:
            client.start(timeout=self.connect_timeout_s)
        except KazooTimeoutError as exc:
            client.close()
            raise ZooKeeperUnavailable(f"no ZooKeeper session with {self.hosts} within "
                                       f"{self.connect_timeout_s}s") from exc
        client.add_listener(self._on_state)
        self._client = client
        self._ensure_base_paths()
        return self

    def _ensure_chroot(self) -> None:
        if not self.chroot:
            return
        bootstrap = GuardedKazooClient(hosts=self.hosts, timeout=self.session_timeout_ms / 1000.0)
        try:
            bootstrap.start(timeout=self.connect_timeout_s)
            with unavailable_on_loss("creating the chroot"):
                bootstrap.ensure_path_async(self.chroot).get(timeout=self.request_timeout_s)
        except KazooTimeoutError as exc:
            raise ZooKeeperUnavailable(f"no ZooKeeper session with {self.hosts} within "
                                       f"{self.connect_timeout_s}s") from exc
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
