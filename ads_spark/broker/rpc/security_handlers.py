"""The security actions: ``authenticate``, ACL administration and user administration.

Thin: every input is checked in full (each ACL built as an ``AclBinding``, each filter as an
``AclBindingFilter``, each user name and password checked and hashed) before anything is written, so a
refused request changes nothing; the ZooKeeper writes are ``zk/security_store.py``'s, the state and the
token rules ``broker/security_state.py``'s. Which principal may call which of these is checked before a
handler runs (``security/request_acls.py``: Cluster Alter to change, Cluster Describe to read;
``authenticate`` needs none, it is what makes a principal).

Passwords arrive in a ``Secret`` (authenticate's Basic header) or in the body of
``alter_user_credentials``; neither is ever put in an answer, an error or a log line.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any, Iterator

from ads_spark.broker.rpc import call_context
from ads_spark.broker.zk.model import ZooKeeperUnavailable
from ads_spark.errors import BrokerNotAvailableError, InvalidRequestError, SecurityDisabledError
from ads_spark.protocol import wire
from ads_spark.protocol.records import now_ms
from ads_spark.security.authorizer import AclBinding, AclBindingFilter
from ads_spark.security.credentials import (
    SALT_BYTES, AuthenticationError, Secret, StoredCredential, hash_password, next_credential_version,
    validate_username,
)

SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")


def acl_filter_from_dict(data: dict[str, Any]) -> AclBindingFilter:
    """The filter of a request's JSON (absent/null fields match anything; ``pattern_type`` Any by default)."""
    return AclBindingFilter(data.get("resource_type"), data.get("resource_name"), data.get("pattern_type") or "Any",
                            data.get("principal"), data.get("host"), data.get("operation"), data.get("permission"))


def _indexed(what: str, index: int, exc: InvalidRequestError) -> InvalidRequestError:
    return InvalidRequestError(f"{what}[{index}]: {exc.message}")


@contextmanager
def _zookeeper(what: str) -> Iterator[None]:
    """A lost ZooKeeper session answers BROKER_NOT_AVAILABLE (retriable), not an internal error."""
    try:
        yield
    except ZooKeeperUnavailable:
        raise BrokerNotAvailableError(f"{what}: this broker cannot reach ZooKeeper right now; retry") from None


class SecurityHandlers:
    def __init__(self, broker):
        self.broker = broker

    def handlers(self) -> dict:
        return {
            wire.ACTION_AUTHENTICATE: self.handle_authenticate,
            wire.ACTION_CREATE_ACLS: self.handle_create_acls,
            wire.ACTION_DELETE_ACLS: self.handle_delete_acls,
            wire.ACTION_DESCRIBE_ACLS: self.handle_describe_acls,
            wire.ACTION_ALTER_USER_CREDENTIALS: self.handle_alter_user_credentials,
            wire.ACTION_DESCRIBE_USERS: self.handle_describe_users,
        }

    def _store(self):
        store = self.broker.security.store
        if store is None:
            raise BrokerNotAvailableError("this broker has no ZooKeeper session yet; retry")
        return store

    # ---- authentication ----------------------------------------------------------------------------

    def handle_authenticate(self, body: dict[str, Any]) -> dict[str, Any]:
        """Basic credentials (read by the server's middleware into the call context) -> a token."""
        ctx = call_context.current()
        if ctx.security_protocol not in SASL_PROTOCOLS:
            raise SecurityDisabledError(f"authenticate is served on SASL_PLAINTEXT and SASL_SSL listeners only; "
                                        f"this call came in on a {ctx.security_protocol} listener")
        if ctx.basic_credentials is None:
            raise AuthenticationError("authenticate needs an 'authorization: Basic <base64 username:password>' header")
        username, password = ctx.basic_credentials
        return self.broker.security.authenticate(username, password)

    # ---- ACLs ---------------------------------------------------------------------------------------

    def handle_create_acls(self, body: dict[str, Any]) -> dict[str, Any]:
        bindings = []
        for index, item in enumerate(body["acls"]):
            try:
                bindings.append(AclBinding.from_dict(item))
            except InvalidRequestError as exc:
                raise _indexed("create_acls: acls", index, exc) from None
        store = self._store()
        with _zookeeper("create_acls"):
            sequence = store.create_acls(bindings)
            version = sequence + 1 if sequence >= 0 else store.latest_acl_change() + 1
        return {"error_code": 0, "acls": len(set(bindings)), "version": version}

    def handle_delete_acls(self, body: dict[str, Any]) -> dict[str, Any]:
        filters = []
        for index, item in enumerate(body["filters"]):
            try:
                filters.append(acl_filter_from_dict(item))
            except InvalidRequestError as exc:
                raise _indexed("delete_acls: filters", index, exc) from None
        store = self._store()
        with _zookeeper("delete_acls"):
            deleted, sequence = store.delete_acls(filters)
            version = sequence + 1 if sequence >= 0 else store.latest_acl_change() + 1
        return {"error_code": 0, "deleted": [binding.to_dict() for binding in deleted], "version": version}

    def handle_describe_acls(self, body: dict[str, Any]) -> dict[str, Any]:
        """The ACLs of this broker's cache that the filter matches, and the cache's version."""
        acl_filter = acl_filter_from_dict(body.get("filter") or {})
        security = self.broker.security
        acls, version = security.acls, security.acl_cache_version
        return {"error_code": 0, "acls": [binding.to_dict() for binding in acls.matching(acl_filter)],
                "cache_version": version}

    # ---- users --------------------------------------------------------------------------------------

    def handle_alter_user_credentials(self, body: dict[str, Any]) -> dict[str, Any]:
        """Add users or change their passwords, and delete users, in one transaction. A changed or deleted
        user's tokens stop working on every broker as soon as it sees the change (credential version)."""
        upserts = body.get("upsert") or []
        deletes = [validate_username(name, field="delete") for name in body.get("delete") or []]
        both = sorted({item["username"] for item in upserts} & set(deletes))
        if both:
            raise InvalidRequestError(f"alter_user_credentials: {', '.join(both)} both upserted and deleted")
        if not upserts and not deletes:
            raise InvalidRequestError("alter_user_credentials: nothing to upsert or delete")
        iterations = self.broker.security.settings.hash_iterations
        hashed = {}  # every password is checked and hashed before anything is written
        for item in upserts:
            name = validate_username(item["username"])
            salt = os.urandom(SALT_BYTES)
            hashed[name] = (salt, hash_password(Secret(item["password"]), salt, iterations))

        def credentials(current: dict[str, StoredCredential | None]) -> dict[str, StoredCredential]:
            now = now_ms()
            return {name: StoredCredential(salt, iterations, digest, next_credential_version(
                        None if current[name] is None else current[name].credential_version, now))
                    for name, (salt, digest) in hashed.items()}

        with _zookeeper("alter_user_credentials"):
            self._store().alter_credentials(credentials, list(hashed), deletes)
        return {"error_code": 0, "upserted": sorted(hashed), "deleted": sorted(deletes)}

    def handle_describe_users(self, body: dict[str, Any]) -> dict[str, Any]:
        """User names only (never a credential), read from ZooKeeper so a user just added is listed."""
        with _zookeeper("describe_users"):
            return {"error_code": 0, "users": self._store().usernames()}
