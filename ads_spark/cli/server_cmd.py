"""``ads zookeeper start`` and ``ads broker start``: the two server processes, in the foreground.

SIGTERM (and Ctrl-C) on a broker is a controlled shutdown: leadership moves
away first, then the process exits; SIGKILL is the crash the recovery code is
for.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import sys
import threading
from pathlib import Path


def register(commands) -> None:
    zookeeper = commands.add_parser("zookeeper", help="embedded ZooKeeper")
    zk_actions = zookeeper.add_subparsers(dest="action", required=True)
    zk_start = zk_actions.add_parser("start", help="run an embedded ZooKeeper in the foreground")
    zk_start.add_argument("--data-dir", required=True)
    zk_start.add_argument("--port", type=int, default=2181)
    zk_start.add_argument("--host", default="127.0.0.1", help="address to listen on (a test host's own address)")
    zk_start.add_argument("--tls-keystore", default=None,
                          help="PEM key (PKCS#8) + certificate: serve TLS only, on --port, x509 client auth enforced")
    zk_start.add_argument("--tls-truststore", default=None, help="PEM CA bundle client certificates must chain to")
    zk_start.set_defaults(func=start_zookeeper)
    from ads_spark.cli import zookeeper_cmd

    zookeeper_cmd.register_actions(zk_actions)  # `ads zookeeper secure`

    broker = commands.add_parser("broker", help="a broker process")
    broker_actions = broker.add_subparsers(dest="action", required=True)
    broker_start = broker_actions.add_parser("start", help="run a broker in the foreground")
    broker_start.add_argument("--config", required=True, help="broker.properties")
    broker_start.add_argument("--override", action="append", default=[], metavar="K=V")
    broker_start.add_argument("--ready-file", default=None, help="write host:port here once serving")
    broker_start.set_defaults(func=start_broker)


def start_zookeeper(args) -> int:
    from ads_spark.broker.zk.embedded import ZkServerTls, run_foreground

    if bool(args.tls_keystore) != bool(args.tls_truststore):
        raise ValueError("--tls-keystore and --tls-truststore go together")
    tls = ZkServerTls(args.tls_keystore, args.tls_truststore) if args.tls_keystore else None
    run_foreground(Path(args.data_dir), args.port, host=args.host, tls=tls)
    return 0


def start_broker(args) -> int:
    from ads_spark.broker.allocator import keep_freed_memory
    from ads_spark.broker.runtime import build_broker
    from ads_spark.broker.zk.model import ZooKeeperUnavailable
    from ads_spark.config import load_broker_config

    keep_freed_memory()  # before any thread starts: it caps the allocator's arenas
    logging.getLogger("ads").setLevel(logging.INFO)
    config = load_broker_config(Path(args.config), args.override)
    broker = build_broker(config)
    stop_requested = threading.Event()

    def on_signal(signum, _frame):
        stop_requested.set()

    # `kill -USR1 <pid>` writes every thread's stack to the broker log: how to see where a broker is stuck.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        broker.start()
    except ZooKeeperUnavailable as exc:  # logged by the broker already; a line, not a traceback
        print(f"ads broker start: error: broker {config.broker_id} cannot start: {exc}", file=sys.stderr)
        return 1
    if args.ready_file:
        tmp = Path(args.ready_file + ".tmp")
        tmp.write_text(f"{broker.host}:{broker.port}\n")
        tmp.rename(args.ready_file)
    while not stop_requested.wait(0.5):
        if broker.fatal_error is not None:
            logging.getLogger("ads").critical("stopping: %s", broker.fatal_error)
            broker.stop(controlled=False)
            # As below: an open Flight stream must not keep a broker that has to go alive in finalisation.
            logging.shutdown()
            os._exit(1)
    broker.stop(controlled=True)
    # Logs are closed and checkpointed; do not let a Flight stream a client still holds open
    # keep the process alive in interpreter finalisation.
    logging.shutdown()
    os._exit(0)
