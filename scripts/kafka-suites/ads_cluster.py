"""A local ADS cluster for the Kafka clients' own test suites (kafka_python_suite.sh, librdkafka_suite.sh).

``up`` starts an open cluster (the suites' external-broker modes speak PLAINTEXT only) in a state dir and
prints its Kafka bootstrap (host:port,...) once ``kcat``-level Metadata answers; ``down`` stops it. The suites
run against it like any user would: nothing here reaches into the brokers.

    python scripts/kafka-suites/ads_cluster.py up --dir D --brokers 3 [--override K=V ...]
    python scripts/kafka-suites/ads_cluster.py down --dir D
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys
import time
from pathlib import Path

from ads_spark.cluster import LocalCluster

READY_TIMEOUT_S = 60.0  # every broker's Kafka port answering ApiVersions
PROBE_TIMEOUT_S = 2.0


def kafka_bootstrap(cluster: LocalCluster) -> str:
    """The cluster's Kafka bootstrap as LocalCluster reports it (issue #25 adds it beside the Flight one)."""
    value = getattr(cluster, "kafka_bootstrap_servers", None)
    if not value:
        raise SystemExit("LocalCluster has no Kafka bootstrap (is the Kafka listener on in this tree?)")
    return value


def _answers_api_versions(host: str, port: int) -> bool:
    """One ApiVersions v0 request; True when a well-framed answer with our correlation id comes back."""
    correlation_id = 7
    client_id = b"ads-suites"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S) as sock:
            sock.sendall(struct.pack(">i", len(body)) + body)
            head = sock.recv(8)
            return len(head) == 8 and struct.unpack(">ii", head)[1] == correlation_id
    except OSError:
        return False


def wait_kafka_ready(bootstrap: str, timeout_s: float = READY_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    pending = [a.rsplit(":", 1) for a in bootstrap.split(",")]
    while pending and time.monotonic() < deadline:
        pending = [(h, p) for h, p in pending if not _answers_api_versions(h, int(p))]
        if pending:
            time.sleep(0.2)
    if pending:
        raise SystemExit(f"Kafka listeners {pending} did not answer ApiVersions within {timeout_s}s")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["up", "down"])
    parser.add_argument("--dir", required=True)
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--override", action="append", default=[], metavar="K=V")
    args = parser.parse_args(argv)
    cluster = LocalCluster(Path(args.dir))
    if args.action == "down":
        cluster.down()
        return 0
    cluster.up(brokers=args.brokers, overrides=args.override, security="none")
    bootstrap = kafka_bootstrap(cluster)
    wait_kafka_ready(bootstrap)
    print(bootstrap)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
