"""A local 3-node NATS JetStream cluster on 127.0.0.1, and a file-backed stream of 3 replicas on it.

    python -m benchmarks.peers.nats_cluster check          # start, create an R3 stream, publish and read back, tear down
    python -m benchmarks.peers.nats_cluster up [--for-s 600]   # start and keep it up (Ctrl-C tears it down)

Each node gets a client port and a cluster (route) port chosen at run time, a
config file and a JetStream store dir under one work dir; ``down`` stops the
three process groups and removes the work dir. Streams are created with
``num_replicas=3`` and file storage, so a publish is acknowledged once a
quorum (2 of 3) has stored it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.peers.procs import (
    PeerUnavailable, check_or_hold, free_port, missing_binaries, spawn, stop_all, wait_for_port,
)

NODES = 3
START_TIMEOUT_S = 30.0
STREAM_READY_TIMEOUT_S = 30.0


class NatsCluster:
    def __init__(self, work_dir: Path | None = None):
        self.dir = Path(work_dir or tempfile.mkdtemp(prefix="peer-nats-"))
        self.client_ports: list[int] = []
        self.processes = []

    @property
    def servers(self) -> list[str]:
        return [f"nats://127.0.0.1:{port}" for port in self.client_ports]

    def up(self, timeout_s: float = START_TIMEOUT_S) -> None:
        if missing_binaries(["nats-server"]):
            raise PeerUnavailable("nats-server not installed (run benchmarks/peers/install.sh)")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.client_ports = [free_port() for _ in range(NODES)]
        route_ports = [free_port() for _ in range(NODES)]
        routes = ", ".join(f"nats-route://127.0.0.1:{port}" for port in route_ports)
        for index in range(NODES):
            node_dir = self.dir / f"n{index + 1}"
            (node_dir / "jetstream").mkdir(parents=True, exist_ok=True)
            config = node_dir / "nats.conf"
            config.write_text(
                f'server_name: "n{index + 1}"\n'
                f"listen: 127.0.0.1:{self.client_ports[index]}\n"
                f'jetstream {{ store_dir: "{node_dir / "jetstream"}", max_memory_store: 256MB, '
                f"max_file_store: 8GB }}\n"
                f'cluster {{ name: "ads-bench", listen: 127.0.0.1:{route_ports[index]}, routes: [{routes}] }}\n'
                "max_payload: 8MB\n")
            self.processes.append(spawn(["nats-server", "-c", str(config)], node_dir / "nats.log"))
        try:
            for process, port in zip(self.processes, self.client_ports):
                wait_for_port(port, timeout_s, process, "nats-server")
        except PeerUnavailable:
            self.down()
            raise

    def down(self) -> None:
        stop_all(self.processes, self.dir)
        self.processes = []


async def connect(cluster: NatsCluster):
    import nats

    return await nats.connect(servers=cluster.servers, connect_timeout=5, max_reconnect_attempts=3)


async def create_stream(js, name: str, subject: str, timeout_s: float = STREAM_READY_TIMEOUT_S) -> None:
    """A file-backed stream of 3 replicas; retried until the JetStream meta leader is elected."""
    from nats.js.api import StorageType, StreamConfig

    config = StreamConfig(name=name, subjects=[subject], num_replicas=NODES, storage=StorageType.FILE)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await js.add_stream(config)
            return
        except Exception as exc:  # no meta leader yet (503) or a timeout while the cluster forms
            if time.monotonic() > deadline:
                raise PeerUnavailable(f"JetStream stream not created within {timeout_s}s: {exc!r}") from exc
            await asyncio.sleep(0.5)


async def _check(cluster: NatsCluster, records: int = 1000) -> None:
    from nats.js.api import AckPolicy, ConsumerConfig

    nc = await connect(cluster)
    js = nc.jetstream()
    await create_stream(js, "CHECK", "check")
    acks = [await js.publish_async("check", b"x" * 1024) for _ in range(records)]
    await asyncio.gather(*acks)
    info = await js.stream_info("CHECK")
    sub = await js.pull_subscribe("check", stream="CHECK", config=ConsumerConfig(ack_policy=AckPolicy.NONE))
    received = 0
    deadline = time.monotonic() + 30
    while received < records and time.monotonic() < deadline:
        received += len(await sub.fetch(batch=records - received, timeout=5))
    await js.delete_stream("CHECK")
    await nc.close()
    print(f"nats: {info.state.messages} messages stored on R{info.config.num_replicas} "
          f"(leader {info.cluster.leader}, replicas {[r.name for r in info.cluster.replicas or []]}); "
          f"{received} read back")


def main() -> int:
    parser = argparse.ArgumentParser(description="local 3-node NATS JetStream cluster")
    parser.add_argument("command", choices=["check", "up"])
    parser.add_argument("--for-s", type=float, default=600.0, help="how long `up` keeps the cluster up")
    args = parser.parse_args()
    cluster = NatsCluster()
    cluster.up()
    print(f"nats up: {','.join(cluster.servers)} (dir {cluster.dir})", flush=True)
    check_or_hold(cluster, args.command, args.for_s, _check)
    return 0


if __name__ == "__main__":
    sys.exit(main())
