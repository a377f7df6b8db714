"""``ads zookeeper secure``: put ADS's ZooKeeper ACLs on a tree that was created open.

The migration step of turning on ``zookeeper.set.acl`` on a running cluster (as
Kafka's zookeeper-security-migration): once every broker talks to ZooKeeper
over TLS with the same client certificate, this walks the chroot and sets on
every existing znode the ACL a broker with ``zookeeper.set.acl=true`` would
create it with (``broker/zk/acls.py``): creator-all for the certificate's DN,
world-read except under the secret paths. Run it with the brokers' ZooKeeper
client certificate (or pass ``--principal`` with their DN), after the brokers
run with ``zookeeper.set.acl=true``, or znodes they create meanwhile stay open.

``--command-config`` is a properties file with the ``zookeeper.ssl.*`` keys a
broker uses; other keys are refused by name. Only counts are printed.
"""

from __future__ import annotations

import sys

from ads_spark.errors import InvalidConfigError

DEFAULT_TIMEOUT_S = 15.0


def register_actions(zk_actions) -> None:
    """Add ``secure`` to the ``ads zookeeper`` sub-commands (``server_cmd`` owns the parser)."""
    secure = zk_actions.add_parser("secure", help="set ADS's ACLs on every existing znode under the chroot")
    secure.add_argument("--zookeeper", required=True, help="HOST:PORT[,HOST:PORT][/chroot] (default chroot /ads)")
    secure.add_argument("--command-config", required=True,
                        help="properties with zookeeper.ssl.client.enable=true, zookeeper.ssl.keystore.location, "
                             "zookeeper.ssl.truststore.location[, zookeeper.ssl.endpoint.identification.algorithm]")
    secure.add_argument("--principal", default=None,
                        help="owner DN (RFC 2253, e.g. CN=ads-brokers); default: this client certificate's DN")
    secure.add_argument("--max-znodes", type=int, default=None, help="refuse trees with more znodes than this")
    secure.add_argument("--timeout-s", type=float, default=DEFAULT_TIMEOUT_S,
                        help="bound on connecting and on each ZooKeeper call")
    secure.set_defaults(func=secure_zookeeper)


def command_config_security(path: str) -> dict:
    """``ZkSession`` TLS kwargs from the command config; the file must turn ZooKeeper TLS on."""
    from ads_spark.broker.zk.tls import (
        HOSTNAME_KEY, KEYSTORE_KEY, SSL_ENABLE_KEY, TRUSTSTORE_KEY, zk_security_kwargs,
    )
    from ads_spark.config import read_properties

    properties = read_properties(path)
    allowed = (SSL_ENABLE_KEY, KEYSTORE_KEY, TRUSTSTORE_KEY, HOSTNAME_KEY)
    for key in properties:
        if key not in allowed:
            raise InvalidConfigError(f"unknown key '{key}' in --command-config {path} (known: {', '.join(allowed)})")
    kwargs = zk_security_kwargs(properties)
    if kwargs["tls"] is None:
        raise InvalidConfigError(f"--command-config {path}: set {SSL_ENABLE_KEY}=true; the ACLs name the TLS "
                                 "client certificate's DN")
    return {"tls": kwargs["tls"], "set_acl": True}


def secure_zookeeper(args) -> int:
    from ads_spark.broker.zk.acls import SECURE_TREE_ZNODES_MAX, acls_for, secure_tree
    from ads_spark.broker.zk.session import ZkSession
    from ads_spark.broker.zk.tls import ZooKeeperTlsError

    max_znodes = SECURE_TREE_ZNODES_MAX if args.max_znodes is None else args.max_znodes
    if not 1 <= max_znodes <= SECURE_TREE_ZNODES_MAX:
        raise InvalidConfigError(f"--max-znodes must be in 1..{SECURE_TREE_ZNODES_MAX}")
    if not 0 < args.timeout_s <= 600:
        raise InvalidConfigError("--timeout-s must be in (0, 600]")
    session = ZkSession(args.zookeeper, connect_timeout_s=args.timeout_s, request_timeout_s=args.timeout_s,
                        **command_config_security(args.command_config))
    try:
        # Not connect(): that would create ADS's base znodes in a chroot that may not be an ADS tree.
        client = session.open_unmanaged_client(lambda path: acls_for(path, True, args.principal))
    except ZooKeeperTlsError as exc:
        print(f"ads zookeeper: error: {exc}", file=sys.stderr)
        return 1
    try:
        if session.chroot and not client.exists_async("/").get(timeout=args.timeout_s):
            print(f"ads zookeeper: error: chroot {session.chroot} does not exist", file=sys.stderr)
            return 1
        result = secure_tree(client, args.timeout_s, principal_id=args.principal, max_znodes=max_znodes)
    finally:
        client.stop()
        client.close()
    print(f"secured {result.total} znodes under {session.chroot or '/'}: {result.secured} world-readable, "
          f"{result.secret} secret (creator only); {result.vanished} vanished during the walk")
    return 0
