"""Helpers shared by the CLI commands: finding the cluster to talk to, opening an admin client, printing JSON.

The client config: ``--command-config FILE`` (Kafka's tools' option: client properties such as
``security.protocol`` and ``ssl.*``), else, when the cluster is the one of the state dir (no
``--bootstrap-server``), the ``client.properties`` a secured ``ads cluster up`` wrote there.
``--bootstrap-server`` always names the brokers; without it the state dir does.

Nothing here imports the client at module level: every command module imports this one, and a broker
starts from the same parser (``ads server``), so the client is loaded only when a command that needs it
runs (``tests/unit/test_import_graph.py`` holds the broker to that).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ads_spark.errors import InvalidRequestError

DEFAULT_STATE_DIR = Path(os.environ.get("ADS_STATE_DIR", "state"))
STATE_FILE = "cluster.json"
CLIENT_PROPERTIES = "client.properties"  # as ads_spark.cluster_security writes it


def add_bootstrap(parser) -> None:
    parser.add_argument("--bootstrap-server", dest="bootstrap_server", default=None,
                        help="HOST:PORT[,HOST:PORT] (default: the cluster of `ads cluster up` in --dir)")
    parser.add_argument("--dir", default=str(DEFAULT_STATE_DIR), help="state dir of `ads cluster up`")
    parser.add_argument("--command-config", dest="command_config", default=None, metavar="FILE",
                        help="client properties (security.protocol, ssl.*, sasl.*); default: client.properties "
                             "in --dir when no --bootstrap-server is given")


def bootstrap_servers(args) -> str:
    if args.bootstrap_server:
        return args.bootstrap_server
    return state_dir_bootstrap(Path(args.dir))


def state_dir_bootstrap(state_dir: Path) -> str:
    """The bootstrap servers of the cluster `ads cluster up` keeps in ``state_dir``."""
    state = Path(state_dir) / STATE_FILE
    if not state.exists():
        raise InvalidRequestError(
            f"no --bootstrap-server given and no cluster state at {state}; start one with `ads cluster up`"
        )
    from ads_spark.cluster import LocalCluster

    servers = LocalCluster(Path(state_dir)).bootstrap_servers
    if not servers:
        raise InvalidRequestError(f"the cluster state at {state} names no brokers; run `ads cluster up` again")
    return servers


def resolve_client_config(bootstrap: str | None, command_config: str | None, state_dir: Path) -> dict[str, str]:
    """A client config from the three places a command (or a job in jobs/) takes it from.

    ``command_config`` (a client properties file) if given, else ``state_dir``'s client.properties when
    the cluster is the state dir's (``bootstrap`` not given); the brokers are ``bootstrap`` if given, else
    the file's ``bootstrap.servers``, else the state dir's cluster.
    """
    from ads_spark.config import read_properties

    default = Path(state_dir) / CLIENT_PROPERTIES
    if command_config:
        properties = read_properties(Path(command_config))
    elif not bootstrap and default.is_file():
        properties = read_properties(default)
    else:
        properties = {}
    if bootstrap or "bootstrap.servers" not in properties:
        properties["bootstrap.servers"] = bootstrap or state_dir_bootstrap(Path(state_dir))
    return properties


def client_config(args, **extra) -> dict:
    config = resolve_client_config(args.bootstrap_server, getattr(args, "command_config", None), Path(args.dir))
    return {**config, **extra}


def open_admin(args, **extra):
    """An ``Admin`` for the cluster the command's arguments name (the client is imported here, on use)."""
    from ads_spark.client import Admin

    return Admin(client_config(args, **extra))


def admin_call(args, call):
    """``call(admin)`` on an ``Admin`` opened for the command's cluster, closed whatever happens."""
    admin = open_admin(args)
    try:
        return call(admin)
    finally:
        admin.close()


def print_json(value) -> None:
    print(json.dumps(value, indent=2, sort_keys=True))


# ---- partition health: one definition for `ads topics describe` filters and `ads cluster status` -----------
# As Kafka's kafka-topics defines them: under-replicated needs a leader; a partition without a leader counts
# as under min ISR too (nothing can be committed), and as unavailable.

UNDER_MIN_ISR_NOTE = ("ISR below min.insync.replicas={min_isr}: the high watermark stops, so acks=1 writes are "
                      "acknowledged but not readable until the ISR recovers; acks=all writes are refused")


def is_under_replicated(partition) -> bool:
    return partition.leader >= 0 and len(partition.isr) < len(partition.replicas)


def is_under_min_isr(partition, min_insync_replicas: int) -> bool:
    return partition.leader < 0 or len(partition.isr) < min_insync_replicas


def is_unavailable(partition) -> bool:
    live_replicas = [r for r in partition.replicas if r not in partition.offline_replicas]
    return partition.leader < 0 or not live_replicas


def under_min_isr_note(partition, min_insync_replicas: int) -> str | None:
    """A led partition below min ISR behaves unlike Kafka's (docs/DESIGN.md, departures): say so where it shows."""
    if partition.leader >= 0 and len(partition.isr) < min_insync_replicas:
        return UNDER_MIN_ISR_NOTE.format(min_isr=min_insync_replicas)
    return None


def partition_health(descriptions) -> dict[str, int]:
    """Counts over every partition of ``descriptions`` (``Admin.describe_topics``)."""
    partitions = [(p, d.min_insync_replicas) for d in descriptions for p in d.partitions]
    return {"total": len(partitions),
            "under_replicated": sum(is_under_replicated(p) for p, _ in partitions),
            "under_min_isr": sum(is_under_min_isr(p, m) for p, m in partitions),
            "offline": sum(p.leader < 0 for p, _ in partitions)}
