"""``ads cluster up|status|down``: a local cluster of background processes in a state dir.

The state dir holds ZooKeeper's data, one directory per broker (config, logs,
data), pid files and ``cluster.json`` with the addresses. ``up`` on an existing
dir restarts whatever is not running and keeps data and ports; ``down`` stops
only the processes whose pid files it wrote, brokers first (controlled), then
ZooKeeper.

A new cluster is secured unless ``--security none`` (ads_spark/cluster_security.py): mutual TLS on
every listener, the ACL authorizer, ZooKeeper over TLS with ACLs, and ``client.properties`` in the
state dir, which the other commands read. ``status`` says which mode runs; nothing prints a key.

The client (``ads_spark.client``) is imported inside the commands that use it: a broker starts
from this parser and must not load the producer or consumer (``tests/unit/test_import_graph.py``).
"""

from __future__ import annotations

from pathlib import Path

from ads_spark.cli.common import DEFAULT_STATE_DIR, partition_health, print_json
from ads_spark.cluster import LocalCluster
from ads_spark.cluster_security import SECURITY_MODES


def register(commands) -> None:
    cluster = commands.add_parser("cluster", help="a local cluster on 127.0.0.1")
    actions = cluster.add_subparsers(dest="action", required=True)
    up = actions.add_parser("up", help="start ZooKeeper and N brokers in the background")
    up.add_argument("--dir", default=str(DEFAULT_STATE_DIR))
    up.add_argument("--brokers", type=int, default=3)
    up.add_argument("--racks", default=None, help="comma-separated racks, assigned round-robin")
    up.add_argument("--zookeeper", default=None, help="use this ZooKeeper instead of an embedded one")
    up.add_argument("--override", action="append", default=[], metavar="K=V", help="broker config for all")
    up.add_argument("--security", choices=SECURITY_MODES, default=None,
                    help="tls (default for a new state dir): mutual TLS, ACL authorizer, ZooKeeper TLS and ACLs, "
                         "client.properties in --dir (with --zookeeper, that ZooKeeper's TLS is yours to set up "
                         "with --override zookeeper.ssl.*); none: the open cluster. An existing dir keeps its mode")
    up.set_defaults(func=cluster_up)
    status = actions.add_parser("status")
    status.add_argument("--dir", default=str(DEFAULT_STATE_DIR))
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=cluster_status)
    down = actions.add_parser("down")
    down.add_argument("--dir", default=str(DEFAULT_STATE_DIR))
    down.set_defaults(func=cluster_down)


def cluster_up(args) -> int:
    racks = [r.strip() for r in args.racks.split(",")] if args.racks else None
    cluster = LocalCluster(Path(args.dir))
    security = args.security if (args.security or cluster.state) else "tls"
    cluster.up(brokers=args.brokers, racks=racks, zookeeper=args.zookeeper, overrides=args.override,
               security=security)
    print(cluster.bootstrap_servers)
    # Kafka's clients and tools (kcat -b ... -L) use this one (ads_spark/kafka/; README "Kafka clients")
    print(f"Kafka bootstrap ({cluster.kafka_security_protocol}): {cluster.kafka_bootstrap_servers}")
    return 0


def cluster_status(args) -> int:
    from ads_spark.client import Admin

    cluster = LocalCluster(Path(args.dir))
    status = cluster.status()
    metadata, health = {}, None
    if any(b["alive"] for b in status["brokers"]):
        admin = Admin(cluster.client_config(**{"default.api.timeout.ms": 10_000}))
        try:
            metadata = admin.cluster()
            health = partition_health(admin.describe_topics(None))
        except Exception:  # status must print even when the cluster is broken
            pass
        finally:
            admin.close()
    registered = {int(b["id"]): b for b in metadata.get("brokers", [])}
    for broker in status["brokers"]:
        broker["controller"] = broker["id"] == metadata.get("controller_id")
        broker["metrics_port"] = registered.get(broker["id"], {}).get("metrics_port")
    controller_id = metadata.get("controller_id")
    status["controller_id"] = controller_id if controller_id is not None and controller_id >= 0 else None
    status["partitions"] = health  # None: no broker answered
    if args.json:
        print_json(status)
        return 0
    print(f"Security: {status['security']}" + (f" (client config: {status['client_config']})"
                                                if status["client_config"] else ""))
    print(f"ZooKeeper: {status['zookeeper']} ({'alive' if status['zookeeper_alive'] else 'down'})")
    print(f"Kafka bootstrap ({status['kafka_security_protocol']}): {status['kafka_bootstrap_servers']}")
    for broker in status["brokers"]:
        flags = ["alive" if broker["alive"] else "down"] + (["controller"] if broker["controller"] else [])
        print(f"Broker {broker['id']}: pid {broker['pid']} {broker['address']} rack={broker['rack']} "
              f"{' '.join(flags)}")
    print(f"Controller: {status['controller_id'] if status['controller_id'] is not None else 'unknown'}")
    if health is None:
        print("Partitions: unknown (no broker answered)")
    else:
        print(f"Partitions: {health['total']} total, {health['under_replicated']} under-replicated, "
              f"{health['under_min_isr']} under min ISR, {health['offline']} offline")
    return 0


def cluster_down(args) -> int:
    LocalCluster(Path(args.dir)).down()
    return 0
