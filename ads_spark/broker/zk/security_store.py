"""What the security state keeps in ZooKeeper: user credentials, token secrets, ACLs and ACL changes.

ZooKeeper I/O only, over a ``ZkSession``'s bounded helpers; the rules (hashes, tokens, the authorizer)
are pure modules in ``ads_spark/security`` and the in-memory state is ``broker/security_state.py``.

Layout (paths in ``model.py``, relative to the chroot):

* ``/config/users/<username>``: a ``StoredCredential`` (JSON). Every change also sets the data of
  ``/config/users`` in the same transaction, so one data watch sees password changes too (a children
  watch sees only adds and deletes).
* ``/security/token_secrets``: JSON list of base64url secrets, newest first; the first broker creates it
  with 32 random bytes.
* ``/acls/<LITERAL|PREFIXED>/<Topic|Group|Cluster>/<encoded name>``: the JSON list of the ACLs on that one
  resource pattern. A name is path-encoded (``encode_resource_name``): ``.`` and ``..`` (a valid PREFIXED
  name) cannot be a znode name, so they and ``%`` are percent-encoded.
* ``/acl_changes/acl_change_<seq>``: created in the same transaction as every ACL write, so a broker that
  saw change ``seq`` and then read the ACLs holds every change up to ``seq``.

Writes are optimistic: read, compute, commit with the versions read; a concurrent writer makes the
commit fail and the whole change is computed again (bounded attempts). The session's guarded client
gives every create its ZooKeeper ACL (``broker/zk/acls.py``: ``/config/users`` and ``/security`` are
never world-readable under ``zookeeper.set.acl``).
"""

from __future__ import annotations

import base64
import json
import logging
import os
from typing import Any, Callable, Iterable

from kazoo.exceptions import NodeExistsError

from ads_spark.broker.zk.model import (
    ACL_CHANGE_PREFIX, ACL_CHANGES_PATH, ACLS_PATH, CONFIG_USERS_PATH, SECURITY_PATH, TOKEN_SECRETS_PATH,
    ZooKeeperUnavailable, encode_json,
)
from ads_spark.broker.zk.session import MultiOpFailed, ZkSession
from ads_spark.errors import InvalidRequestError
from ads_spark.security.authorizer import AclBinding, AclBindingFilter, PatternType, ResourceType
from ads_spark.security.credentials import (
    MAX_SECRETS, MIN_SECRET_BYTES, CredentialFormatError, StoredCredential, validate_username,
)

log = logging.getLogger("ads.broker.security")

TOKEN_SECRET_BYTES = 32
WRITE_ATTEMPTS_MAX = 10  # optimistic writes lost to concurrent writers before giving up
ACL_RESOURCES_MAX = 100_000  # resource patterns read per reload: bounds a reload's work and memory
USERS_MAX = 10_000
ACL_CHANGES_KEPT = 100  # change notifications kept; only the newest sequence number matters to readers
_ZNODE_UNSAFE = {"%": "%25", ".": "%2E"}


def encode_resource_name(name: str) -> str:
    """``name`` as one znode name: '%' always, and '.' in the names '.' and '..', percent-encoded."""
    encoded = name.replace("%", "%25")
    if encoded in (".", ".."):
        encoded = encoded.replace(".", "%2E")
    return encoded


def decode_resource_name(encoded: str) -> str:
    return encoded.replace("%2E", ".").replace("%25", "%")


def acl_resource_path(pattern_type: PatternType, resource_type: ResourceType, name: str) -> str:
    return f"{ACLS_PATH}/{pattern_type.name}/{resource_type.value}/{encode_resource_name(name)}"


def change_sequence(child: str) -> int | None:
    """The sequence number of an ``acl_change_<seq>`` znode name (None for anything else)."""
    if not child.startswith(ACL_CHANGE_PREFIX):
        return None
    digits = child[len(ACL_CHANGE_PREFIX):]
    return int(digits) if digits.isdigit() else None


def _acl_key(binding: AclBinding) -> tuple[PatternType, ResourceType, str]:
    return binding.pattern_type, binding.resource_type, binding.resource_name


def _decode_acls(data: bytes, path: str) -> list[AclBinding]:
    """The ACLs of one znode; a defect raises InvalidRequestError naming the path (the reload fails closed)."""
    try:
        items = json.loads(data.decode("utf-8")) if data else []
    except (UnicodeDecodeError, ValueError):
        raise InvalidRequestError(f"ACL znode {path} does not hold JSON") from None
    if not isinstance(items, list):
        raise InvalidRequestError(f"ACL znode {path} does not hold a JSON list")
    return [AclBinding.from_dict(item) for item in items]


class SecurityStore:
    """Reads and writes the security znodes through one ``ZkSession`` (see the module docstring)."""

    def __init__(self, session: ZkSession, random_bytes: Callable[[int], bytes] = os.urandom):
        self.session = session
        self._random_bytes = random_bytes

    def _create(self, path: str, value: bytes) -> str:
        return self.session._wait(self.session.client.create_async(path, value), f"creating {path}")

    def ensure_paths(self) -> None:
        """The parents every security znode lives under (each created with its own ACL)."""
        for path in ("/config", CONFIG_USERS_PATH, SECURITY_PATH, ACLS_PATH, ACL_CHANGES_PATH):
            try:
                self._create(path, b"")
            except NodeExistsError:
                pass

    # ---- credentials -----------------------------------------------------------------------------

    def usernames(self) -> list[str]:
        return self.session._children(CONFIG_USERS_PATH)

    def read_credential(self, username: str) -> StoredCredential | None:
        found = self.session._read(f"{CONFIG_USERS_PATH}/{validate_username(username)}")
        return None if found is None else StoredCredential.from_json(found[0])

    def read_credentials(self) -> dict[str, StoredCredential]:
        """Every user's credential; a znode that is not one is logged and left out (that user cannot log in)."""
        names = self.usernames()
        if len(names) > USERS_MAX:
            raise InvalidRequestError(f"{len(names)} users in ZooKeeper, above the {USERS_MAX} a broker loads")
        found = self.session._read_many([f"{CONFIG_USERS_PATH}/{name}" for name in names])
        credentials = {}
        for name, item in zip(names, found):
            if item is None:
                continue
            try:
                credentials[validate_username(name)] = StoredCredential.from_json(item[0])
            except CredentialFormatError as exc:
                log.error("credential znode of user %r left out: %s", name, exc)
        return credentials

    def alter_credentials(self, upserts: Callable[[dict[str, StoredCredential | None]], dict[str, StoredCredential]],
                          names: Iterable[str], deletes: Iterable[str]) -> None:
        """One transaction: ``upserts(current)`` (credentials by name, computed from what each user has now)
        written, ``deletes`` removed (each must exist: InvalidRequestError naming it, nothing changed)."""
        names, deletes = list(names), list(deletes)
        for _ in range(WRITE_ATTEMPTS_MAX):
            paths = [f"{CONFIG_USERS_PATH}/{validate_username(name)}" for name in names + deletes]
            found = self.session._read_many(paths)
            current = dict(zip(names + deletes, found))
            missing = [name for name in deletes if current[name] is None]
            if missing:
                raise InvalidRequestError(f"no such user: {', '.join(missing)}")
            written = upserts({name: None if current[name] is None else StoredCredential.from_json(current[name][0])
                               for name in names})

            def build(tx, current=current, written=written) -> None:
                for name, credential in written.items():
                    path = f"{CONFIG_USERS_PATH}/{name}"
                    if current[name] is None:
                        tx.create(path, credential.to_json())
                    else:
                        tx.set_data(path, credential.to_json(), version=current[name][1].version)
                for name in deletes:
                    tx.delete(f"{CONFIG_USERS_PATH}/{name}", version=current[name][1].version)
                tx.set_data(CONFIG_USERS_PATH, b"", version=-1)  # wakes every broker's data watch

            try:
                self.session._commit(build, "writing user credentials")
                return
            except MultiOpFailed:
                continue  # another writer changed a user in between: compute again from what is there now
        raise ZooKeeperUnavailable(f"user credentials kept changing under {WRITE_ATTEMPTS_MAX} attempts to write them")

    # ---- token secrets ----------------------------------------------------------------------------

    def token_secrets(self) -> list[bytes]:
        """The secrets, newest first; the first broker to ask creates the list with one random secret."""
        found = self.session._read(TOKEN_SECRETS_PATH)
        if found is None:
            fresh = [base64.urlsafe_b64encode(self._random_bytes(TOKEN_SECRET_BYTES)).decode("ascii")]
            try:
                self._create(TOKEN_SECRETS_PATH, encode_json(fresh))
            except NodeExistsError:
                pass  # another broker was first: use its secret
            found = self.session._read(TOKEN_SECRETS_PATH)
            if found is None:
                raise ZooKeeperUnavailable(f"{TOKEN_SECRETS_PATH} vanished right after it was created")
        try:
            secrets = [base64.urlsafe_b64decode(text) for text in json.loads(found[0].decode("utf-8"))][:MAX_SECRETS]
        except (ValueError, TypeError, UnicodeDecodeError):
            raise InvalidRequestError(f"{TOKEN_SECRETS_PATH} is not a JSON list of base64 secrets") from None
        if not secrets or any(len(secret) < MIN_SECRET_BYTES for secret in secrets):
            raise InvalidRequestError(f"{TOKEN_SECRETS_PATH} holds no secret, or one under {MIN_SECRET_BYTES} bytes")
        return secrets

    # ---- ACLs ---------------------------------------------------------------------------------------

    def latest_acl_change(self) -> int:
        """The highest change sequence number in ZooKeeper (-1: none yet)."""
        sequences = [seq for seq in map(change_sequence, self.session._children(ACL_CHANGES_PATH)) if seq is not None]
        return max(sequences, default=-1)

    def _acl_paths(self) -> list[str]:
        paths: list[str] = []
        for pattern_type in PatternType:
            for resource_type in ResourceType:
                parent = f"{ACLS_PATH}/{pattern_type.name}/{resource_type.value}"
                paths.extend(f"{parent}/{child}" for child in self.session._children(parent))
                if len(paths) > ACL_RESOURCES_MAX:
                    raise InvalidRequestError(f"more than {ACL_RESOURCES_MAX} ACL resources in ZooKeeper: "
                                              "not loading them")
        return paths

    def read_acls_versioned(self) -> dict[str, tuple[list[AclBinding], int]]:
        """Every ACL znode: path -> (its ACLs, its znode version). A corrupt znode raises (fail closed)."""
        paths = self._acl_paths()
        result = {}
        for path, item in zip(paths, self.session._read_many(paths)):
            if item is not None:
                result[path] = (_decode_acls(item[0], path), item[1].version)
        return result

    def read_acls(self) -> list[AclBinding]:
        return [binding for bindings, _ in self.read_acls_versioned().values() for binding in bindings]

    def create_acls(self, bindings: list[AclBinding]) -> int:
        """Add ``bindings`` (one already there is left as it is); returns the change's sequence number, or -1
        when every binding was already there (nothing written)."""
        by_path: dict[str, list[AclBinding]] = {}
        for binding in bindings:
            by_path.setdefault(acl_resource_path(*_acl_key(binding)), []).append(binding)

        def plan() -> dict[str, tuple[list[AclBinding], int | None]]:
            found = self.session._read_many(list(by_path))
            changes = {}
            for (path, added), item in zip(by_path.items(), found):
                existing = [] if item is None else _decode_acls(item[0], path)
                new = [b for b in dict.fromkeys(added) if b not in existing]
                if new:
                    changes[path] = (existing + new, None if item is None else item[1].version)
            return changes

        return self._write_acls(plan)

    def delete_acls(self, filters: list[AclBindingFilter]) -> tuple[list[AclBinding], int]:
        """Remove every ACL a filter matches; (the ACLs removed, the change's sequence number or -1 if none)."""
        deleted: list[AclBinding] = []

        def plan() -> dict[str, tuple[list[AclBinding], int | None]]:
            deleted.clear()
            changes = {}
            for path, (bindings, version) in self.read_acls_versioned().items():
                gone = [b for b in bindings if any(f.matches(b) for f in filters)]
                if gone:
                    deleted.extend(gone)
                    changes[path] = ([b for b in bindings if b not in gone], version)
            return changes

        sequence = self._write_acls(plan)
        return sorted(deleted, key=AclBinding.sort_key), sequence

    def _write_acls(self, plan: Callable[[], dict[str, tuple[list[AclBinding], int | None]]]) -> int:
        """Commit ``plan()`` (path -> (new ACLs, version read or None if absent)) with a change notification,
        atomically; recompute on a lost race. Returns the notification's sequence number (-1: nothing to do)."""
        for _ in range(WRITE_ATTEMPTS_MAX):
            changes = plan()
            if not changes:
                return -1
            # encode_json refuses a value above ZNODE_VALUE_BYTES_MAX (~5,000 ACLs on one resource pattern)
            values = {path: encode_json([b.to_dict() for b in sorted(bindings, key=AclBinding.sort_key)])
                      for path, (bindings, _) in changes.items() if bindings}
            self._ensure_acl_parents(changes)

            def build(tx, changes=changes, values=values) -> None:
                for path, (bindings, version) in changes.items():
                    if version is None:
                        tx.create(path, values[path])
                    elif bindings:
                        tx.set_data(path, values[path], version=version)
                    else:
                        tx.delete(path, version=version)
                tx.create(f"{ACL_CHANGES_PATH}/{ACL_CHANGE_PREFIX}", encode_json({"version": 1}), sequence=True)

            try:
                results = self.session._commit(build, "writing ACLs")
            except MultiOpFailed:
                continue
            sequence = change_sequence(str(results[-1]).rsplit("/", 1)[-1])
            self._prune_changes()
            return -1 if sequence is None else sequence
        raise ZooKeeperUnavailable(f"ACLs kept changing under {WRITE_ATTEMPTS_MAX} attempts to write them")

    def _ensure_acl_parents(self, changes: dict[str, Any]) -> None:
        """``/acls/<pattern>/<type>`` for each path written (kazoo's makepath would give parents no ACL of ours)."""
        parents = {path.rsplit("/", 1)[0] for path in changes}
        for parent in sorted(parents | {path.rsplit("/", 1)[0] for path in parents}, key=len):
            try:
                self._create(parent, b"")
            except NodeExistsError:
                pass

    def _prune_changes(self) -> None:
        """Delete all but the newest ACL_CHANGES_KEPT notifications (readers need only the newest)."""
        children = sorted((seq, child) for child in self.session._children(ACL_CHANGES_PATH)
                          if (seq := change_sequence(child)) is not None)
        stale = children[:-ACL_CHANGES_KEPT]
        if stale:
            self.session._delete_many([f"{ACL_CHANGES_PATH}/{child}" for _, child in stale])
