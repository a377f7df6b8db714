"""Helpers shared by the CLI commands: finding the cluster to talk to, opening an admin client, printing JSON.

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


def add_bootstrap(parser) -> None:
    parser.add_argument("--bootstrap-server", dest="bootstrap_server", default=None,
                        help="HOST:PORT[,HOST:PORT] (default: the cluster of `ads cluster up` in --dir)")
    parser.add_argument("--dir", default=str(DEFAULT_STATE_DIR), help="state dir of `ads cluster up`")


def bootstrap_servers(args) -> str:
    if args.bootstrap_server:
        return args.bootstrap_server
    state = Path(args.dir) / STATE_FILE
    if not state.exists():
        raise InvalidRequestError(
            f"no --bootstrap-server given and no cluster state at {state}; start one with `ads cluster up`"
        )
    from ads_spark.cluster import LocalCluster

    servers = LocalCluster(Path(args.dir)).bootstrap_servers
    if not servers:
        raise InvalidRequestError(f"the cluster state at {state} names no brokers; run `ads cluster up` again")
    return servers


def client_config(args, **extra) -> dict:
    return {"bootstrap.servers": bootstrap_servers(args), **extra}


def open_admin(args, **extra):
    """An ``Admin`` for the cluster the command's arguments name (the client is imported here, on use)."""
    from ads_spark.client import Admin

    return Admin(client_config(args, **extra))


def print_json(value) -> None:
    print(json.dumps(value, indent=2, sort_keys=True))
