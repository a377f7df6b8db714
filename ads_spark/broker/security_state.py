"""A broker's security state: the ACL cache and its version, users' credential versions, token secrets.

Two parts, so the rules are unit tests without ZooKeeper:

* ``BrokerSecurity`` holds immutable snapshots (an ``Acls`` with its version; credentials by user; the
  token secrets) that ``apply_*`` swaps in one assignment each, and answers from them: ``authorize``
  (the pure ``authorizer.authorize`` with ``super.users`` and ``allow.everyone.if.no.acl.found``),
  ``principal_for_token`` (an HMAC check, no I/O, on every call of a SASL listener) and ``authenticate``
  (one salted hash per password check; an unknown user costs the same hash).
* ``_ZkSync`` keeps those snapshots current from ZooKeeper (``zk/security_store.py``): watches only wake
  its one thread, which reloads what changed. A reload of the ACLs reads every ACL znode, after reading
  the newest change sequence number, so the version it reports is never ahead of what it holds.
  Notifications that arrive during a reload are coalesced into the next one; a failed reload is tried
  again every ``RELOAD_RETRY_S`` until it succeeds or the broker stops (the old snapshot keeps serving,
  and before the first load every authorization is refused, except for super users).

``acl_cache_version`` is 1 + the highest ACL change sequence number applied (0: loaded, no change ever
made; -1: not loaded). ``create_acls`` / ``delete_acls`` answer the version their change produces, and
``ads acls`` waits until every live broker's ``describe_acls`` reports at least that.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable

from ads_spark.broker.zk.model import ACL_CHANGES_PATH, CONFIG_USERS_PATH, TOKEN_SECRETS_PATH, ZooKeeperUnavailable
from ads_spark.broker.zk.security_store import SecurityStore
from ads_spark.errors import BrokerNotAvailableError
from ads_spark.protocol.records import now_ms
from ads_spark.security import authorizer
from ads_spark.security.authorizer import Acls, Decision, Operation, Resource
from ads_spark.security.credentials import (
    AuthenticationError, CredentialFormatError, Secret, StoredCredential, TokenSignatureError, issue_token,
    verify_password, verify_token,
)

log = logging.getLogger("ads.broker.security")

AUTHENTICATION_FAILED = "authentication failed: invalid username or password"
RELOAD_RETRY_S = 1.0
STOP_WAIT_S = 5.0


@dataclass(frozen=True)
class SecuritySettings:
    """The broker config keys the security state reads, parsed once."""

    authorizer_enabled: bool
    super_users: frozenset[str]
    allow_if_no_acl: bool
    token_lifetime_ms: int
    hash_iterations: int

    @classmethod
    def from_config(cls, config: Any) -> SecuritySettings:
        super_users = config["super.users"]
        if isinstance(super_users, str):
            super_users = authorizer.parse_super_users(super_users)
        return cls(bool(config["authorizer.class.name"]), frozenset(super_users),
                   bool(config["allow.everyone.if.no.acl.found"]), int(config["authentication.token.lifetime.ms"]),
                   int(config["credential.hash.iterations"]))


class BrokerSecurity:
    """See the module docstring. ``clock_ms`` is an input so token expiry is a unit test."""

    def __init__(self, config: Any, clock_ms: Callable[[], int] = now_ms):
        self.settings = SecuritySettings.from_config(config)
        self._clock_ms = clock_ms
        self._acl_state: tuple[Acls, int] = (Acls(), -1)
        self._credentials: dict[str, StoredCredential] = {}
        self._secrets: tuple[bytes, ...] = ()
        self.store: SecurityStore | None = None
        self._sync: _ZkSync | None = None

    # ---- snapshots -----------------------------------------------------------------------------

    @property
    def authorizer_enabled(self) -> bool:
        return self.settings.authorizer_enabled

    @property
    def acl_cache_version(self) -> int:
        return self._acl_state[1]

    @property
    def acls_loaded(self) -> bool:
        return self._acl_state[1] >= 0

    @property
    def acls(self) -> Acls:
        return self._acl_state[0]

    @property
    def loaded(self) -> bool:
        """Secrets, users and ACLs have each been loaded from ZooKeeper at least once (a secured broker opens
        its listeners only then: see ``ZkMembership.connect``)."""
        sync = self._sync
        return sync is not None and sync.loaded_kinds.issuperset(sync.KINDS)

    def apply_acls(self, acls: Acls, version: int) -> bool:
        """Swap in ``acls`` at ``version``; an older version than the one held is ignored (False)."""
        if version < self._acl_state[1]:
            return False
        self._acl_state = (acls, version)
        return True

    def apply_credentials(self, credentials: dict[str, StoredCredential]) -> None:
        self._credentials = dict(credentials)

    def apply_secrets(self, secrets: list[bytes]) -> None:
        self._secrets = tuple(secrets)

    def credential_version_of(self, username: str) -> int | None:
        credential = self._credentials.get(username)
        return None if credential is None else credential.credential_version

    # ---- decisions -------------------------------------------------------------------------------

    def authorize(self, ctx: Any, operation: Operation, resource: Resource) -> Decision:
        """May the caller of ``ctx`` (a ``CallContext``: principal, host) do ``operation`` on ``resource``?"""
        if not self.settings.authorizer_enabled:
            return Decision(True, "no authorizer configured (authorizer.class.name is empty)")
        acls, version = self._acl_state
        if version < 0 and ctx.principal not in self.settings.super_users:
            return Decision(False, f"{Operation.parse(operation).value} on {resource} refused for {ctx.principal}: "
                                   "this broker has not loaded the ACLs from ZooKeeper yet")
        # a CallContext has the principal and host the authorizer reads: no RequestContext copy per call
        return authorizer.authorize(acls, ctx, operation, resource, self.settings.super_users,
                                    self.settings.allow_if_no_acl)

    def principal_for_token(self, token: str) -> str:
        """``User:<name>`` of a valid token; ``credentials.TokenError`` saying why not."""
        secrets = self._secrets
        if not secrets:
            raise TokenSignatureError("this broker has not loaded the token secrets from ZooKeeper yet")
        return verify_token(secrets, token, self._clock_ms(), self.credential_version_of).principal

    def authenticate(self, username: str, password: Secret) -> dict[str, Any]:
        """The ``authenticate`` answer: a token for a right password; the same refusal for a wrong one, an
        unknown user or a malformed name or password, each after one full hash (no user-name oracle)."""
        secrets = self._secrets
        if not secrets:
            raise BrokerNotAvailableError("this broker has not loaded the token secrets from ZooKeeper yet; retry")
        stored = None
        try:
            stored = self._credential_for_login(username)
        except CredentialFormatError:
            pass  # a name no user can have: answered as an unknown user
        try:
            accepted = verify_password(stored, password, self.settings.hash_iterations)
        except CredentialFormatError:  # an empty or oversized password: nobody has it
            accepted = False
        if not accepted or stored is None:
            raise AuthenticationError(AUTHENTICATION_FAILED)
        now = self._clock_ms()
        token = issue_token(secrets[0], username, stored.credential_version, now, self.settings.token_lifetime_ms)
        return {"token": token, "expiry_ms": now + self.settings.token_lifetime_ms, "principal": f"User:{username}"}

    def _credential_for_login(self, username: str) -> StoredCredential | None:
        """Read from ZooKeeper on every login, known user or not: it is current (a user added through another
        broker a moment ago), and a known and an unknown name cost the same read and the same hash, so the
        answer's timing does not tell which names exist (a cache hit for known users only did). Logins are
        once per client and token lifetime, so the read is not on a hot path."""
        credential = self._credentials.get(username)
        if self.store is not None and isinstance(username, str):
            try:
                credential = self.store.read_credential(username)
            except ZooKeeperUnavailable:
                raise BrokerNotAvailableError("this broker cannot reach ZooKeeper right now; retry") from None
            if credential is not None and username not in self._credentials and self._sync is not None:
                # Not put in the cache here: a deletion reloaded meanwhile would be undone for good. The reload
                # brings it (for this broker's token checks) within milliseconds.
                self._sync.request("users")
        return credential

    # ---- lifecycle -------------------------------------------------------------------------------

    def start(self, zk_session) -> None:
        """Load users, ACLs and secrets and keep them current (called once the ZooKeeper session is up)."""
        if self._sync is not None:
            return
        self.store = SecurityStore(zk_session)
        self._sync = _ZkSync(self, zk_session, self.store)
        self._sync.start()

    def stop(self) -> None:
        sync, self._sync = self._sync, None
        if sync is not None:
            sync.stop()


class _ZkSync:
    """Keeps a ``BrokerSecurity``'s snapshots current from ZooKeeper on one thread (module docstring)."""

    KINDS = ("secrets", "users", "acls")

    def __init__(self, security: BrokerSecurity, session, store: SecurityStore):
        self.security, self.session, self.store = security, session, store
        self._pending: set[str] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self.loaded_kinds: set[str] = set()  # each kind once loaded (only ever grows)
        self._thread = threading.Thread(target=self._run, name="security-sync", daemon=True)

    def start(self) -> None:
        self.store.ensure_paths()
        # Watches before the first load: a change between the load and the watch would otherwise be missed.
        session = self.session
        session._watch_children("security_acl_changes", ACL_CHANGES_PATH, lambda: self.request("acls"))
        session._watch_children("security_users_children", CONFIG_USERS_PATH, lambda: self.request("users"))
        session._watch_data("security_users", CONFIG_USERS_PATH, lambda: self.request("users"))
        session._watch_data("security_token_secrets", TOKEN_SECRETS_PATH, lambda: self.request("secrets"))
        session.add_session_listener(self._on_session)
        for kind in self.KINDS:
            try:
                self._reload(kind)
            except Exception:
                log.warning("loading %s from ZooKeeper failed; retrying in the background", kind, exc_info=True)
                self.request(kind)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        for kind in ("security_acl_changes", "security_users_children", "security_users", "security_token_secrets"):
            self.session.unwatch(kind)
        if self._thread.is_alive():
            self._thread.join(STOP_WAIT_S)

    def _on_session(self, state: str) -> None:
        if state == "connected":  # changes made while disconnected fired no watch
            for kind in self.KINDS:
                self.request(kind)

    def request(self, kind: str) -> None:
        with self._lock:
            self._pending.add(kind)
        self._wake.set()

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait()
            self._wake.clear()
            with self._lock:
                kinds, self._pending = self._pending, set()
            failed = False
            for kind in self.KINDS:
                if kind not in kinds or self._stopping.is_set():
                    continue
                try:
                    self._reload(kind)
                except Exception:
                    log.warning("reloading %s from ZooKeeper failed; retrying in %ss", kind, RELOAD_RETRY_S,
                                exc_info=True)
                    failed = True
                    self.request(kind)
            if failed:
                self._stopping.wait(RELOAD_RETRY_S)

    def _reload(self, kind: str) -> None:
        if kind == "secrets":
            self.security.apply_secrets(self.store.token_secrets())
        elif kind == "users":
            self.security.apply_credentials(self.store.read_credentials())
        else:
            # The sequence number first: the ACLs read after it include every change up to it.
            version = self.store.latest_acl_change() + 1
            acls = Acls(self.store.read_acls())
            if self.security.apply_acls(acls, version):
                log.info("ACL cache at version %s: %s ACLs", version, len(acls))
        self.loaded_kinds.add(kind)
