"""Which ZooKeeper ACL each znode ADS creates gets (``zookeeper.set.acl``), and securing an existing tree.

ZooKeeper ACLs are per znode, not inherited, and a create or delete is checked
against the PARENT's ACL: one znode created open (by ``ensure_path``, say) lets
anyone who reaches ZooKeeper create or delete its children. So the policy is a
function of the path alone and ``session.GuardedKazooClient`` applies it to
every create request it sends (single creates, ``ensure_path`` steps and the
creates inside a multi-op), including the chroot itself; no call site chooses.

With ``set_acl`` off every znode is open (``OPEN_ACL_UNSAFE``, ZooKeeper's and
ADS's historic default). With it on, as Kafka's ``zookeeper.set.acl=true``: the
creator's identity gets every permission (``auth`` scheme: ZooKeeper writes the
session's authenticated ids, for x509 the certificate's full RFC 2253 DN) and
everyone else may read, except under the secret paths (user credentials, token
secrets), which only the creator may read. All brokers must therefore present
ZooKeeper client certificates with the SAME subject DN (or the ensemble must
name theirs as ``X509AuthenticationProvider.superUser``): a znode one broker
creates is changed by another when that one becomes controller.

``secure_tree`` is the migration for a tree created open (``ads zookeeper
secure``, like Kafka's zookeeper-security-migration): it sets the policy's ACL
on every existing znode under the session's chroot, children before their
parent (so a parent turned creator-only never hides children not yet done).
"""

from __future__ import annotations

from dataclasses import dataclass

from kazoo.exceptions import NoNodeError
from kazoo.security import ACL, ANYONE_ID_UNSAFE, CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, Id, Permissions

# Paths (relative to the chroot) whose znodes, and everything below, nobody but their creator may read:
# salted credentials and the token-signing secrets (docs/DESIGN.md, section Security). Defined only here.
SECRET_PATHS = ("/config/users", "/security")
# ZooKeeper's own subtree at the real root; its ACLs are the server's business.
ZOOKEEPER_INTERNAL_PATH = "/zookeeper"
SECURE_TREE_ZNODES_MAX = 1_000_000
SECURE_TREE_DEPTH_MAX = 64
WORLD_READ = ACL(Permissions.READ, ANYONE_ID_UNSAFE)


def is_secret_path(path: str) -> bool:
    """True for a secret path and every path below one (``/security``, ``/config/users/alice``)."""
    return any(path == secret or path.startswith(secret + "/") for secret in SECRET_PATHS)


def acls_for(path: str, set_acl: bool, principal_id: str | None = None) -> list[ACL]:
    """The ACL a znode at ``path`` (relative to the chroot) is created or secured with.

    ``principal_id`` names the owner's x509 DN explicitly (for an operator
    securing a tree for brokers whose certificate it does not hold); by default
    the owner is whoever creates the znode.
    """
    if not set_acl:
        return list(OPEN_ACL_UNSAFE)
    owner = [ACL(Permissions.ALL, Id("x509", principal_id))] if principal_id else list(CREATOR_ALL_ACL)
    return owner if is_secret_path(path) else owner + [WORLD_READ]


@dataclass
class SecureTreeResult:
    """What ``secure_tree`` did: znodes given the world-readable policy, the secret one, vanished meanwhile."""

    secured: int = 0
    secret: int = 0
    vanished: int = 0

    @property
    def total(self) -> int:
        return self.secured + self.secret


def secure_tree(client, timeout_s: float, principal_id: str | None = None, set_acl: bool = True,
                max_znodes: int = SECURE_TREE_ZNODES_MAX, max_depth: int = SECURE_TREE_DEPTH_MAX,
                ) -> SecureTreeResult:
    """Set ``acls_for(path, set_acl, principal_id)`` on every znode under ``client``'s chroot.

    ``client`` is a connected kazoo client rooted at the chroot. Bounded: more
    than ``max_znodes`` znodes or a tree deeper than ``max_depth`` raises
    ValueError before anything beyond the bound is touched. Znodes deleted while
    the walk runs are counted, not an error.
    """
    result = SecureTreeResult()
    # An explicit stack (post-order: children first) keeps deep trees off Python's recursion limit.
    stack: list[tuple[str, int, bool]] = [("/", 0, False)]
    visited = 0
    while stack:
        path, depth, children_done = stack.pop()
        if children_done:
            _secure_one(client, path, set_acl, principal_id, timeout_s, result)
            continue
        visited += 1
        if visited > max_znodes:
            raise ValueError(f"more than {max_znodes} znodes under the chroot; nothing beyond that was changed")
        if depth > max_depth:
            raise ValueError(f"{path} is deeper than {max_depth} levels; nothing below it was changed")
        stack.append((path, depth, True))
        try:
            children = client.get_children_async(path).get(timeout=timeout_s)
        except NoNodeError:
            continue
        for child in sorted(children):
            child_path = ("" if path == "/" else path) + "/" + child
            if not client.chroot and child_path == ZOOKEEPER_INTERNAL_PATH:
                continue
            stack.append((child_path, depth + 1, False))
    return result


def _secure_one(client, path: str, set_acl: bool, principal_id: str | None, timeout_s: float,
                result: SecureTreeResult) -> None:
    try:
        client.set_acls_async(path, acls_for(path, set_acl, principal_id)).get(timeout=timeout_s)
    except NoNodeError:
        result.vanished += 1
        return
    if set_acl and is_secret_path(path):
        result.secret += 1
    else:
        result.secured += 1
