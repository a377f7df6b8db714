"""A local 3-node RabbitMQ cluster on 127.0.0.1 with the stream plugin, and streams of 3 replicas on it.

    python -m benchmarks.peers.rabbitmq_cluster check         # start, cluster, create an R3 stream, send/read, down
    python -m benchmarks.peers.rabbitmq_cluster up [--for-s 600]

Three Erlang nodes on one host need distinct node names (``adsbenchN@localhost``),
ports (AMQP, distribution, stream; management stays off) and data dirs, and
one Erlang cookie. All of that lives under one work dir: HOME points there (so
the cookie is ours, not root's), the ``RABBITMQ_*`` variables point every file
there, and the Debian env file in /etc is not read. We start our own ``epmd``
on a port chosen at run time, so the nodes and the CLI tools register with it
and never start the system one. ``down`` stops the nodes' process groups and
that epmd, then removes the work dir.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.peers.procs import (
    PeerUnavailable, check_or_hold, free_port, missing_binaries, spawn, stop_all, stop_group, wait_for_port,
)

NODES = 3
RABBIT_BIN = Path("/usr/lib/rabbitmq/bin")
START_TIMEOUT_S = 90.0
CTL_TIMEOUT_S = 60.0
COOKIE = "ADSBENCHCOOKIEPEERSRABBITMQ"
# Erlang schedulers spin while idle by default; on a 2-core machine shared with other work that steals CPU.
ERL_ARGS = "+sbwt none +sbwtdcpu none +sbwtdio none -kernel inet_dist_use_interface {127,0,0,1}"


class RabbitCluster:
    def __init__(self, work_dir: Path | None = None):
        self.dir = Path(work_dir or tempfile.mkdtemp(prefix="peer-rabbitmq-"))
        self.epmd_port = 0
        self.stream_ports: list[int] = []
        self.amqp_ports: list[int] = []
        self.dist_ports: list[int] = []
        self.processes: list[subprocess.Popen] = []
        self.epmd: subprocess.Popen | None = None

    def node(self, index: int) -> str:
        return f"adsbench{index + 1}@localhost"

    def up(self, timeout_s: float = START_TIMEOUT_S) -> None:
        missing = missing_binaries([str(RABBIT_BIN / "rabbitmq-server"), "epmd"])
        if missing:
            raise PeerUnavailable(f"{', '.join(missing)} not installed (run benchmarks/peers/install.sh)")
        self.dir.mkdir(parents=True, exist_ok=True)
        cookie = self.dir / ".erlang.cookie"
        cookie.write_text(COOKIE)
        cookie.chmod(0o400)
        self.epmd_port = free_port()
        self.epmd = spawn(["epmd", "-port", str(self.epmd_port), "-address", "127.0.0.1"], self.dir / "epmd.log")
        self.amqp_ports = [free_port() for _ in range(NODES)]
        self.stream_ports = [free_port() for _ in range(NODES)]
        self.dist_ports = [free_port() for _ in range(NODES)]
        try:
            wait_for_port(self.epmd_port, 10, self.epmd, "epmd")
            for index in range(NODES):
                self.processes.append(self._start_node(index))
            for index, process in enumerate(self.processes):
                wait_for_port(self.stream_ports[index], timeout_s, process, f"rabbitmq node {self.node(index)}")
            for index in range(1, NODES):
                self.ctl(index, "stop_app")
                self.ctl(index, "join_cluster", self.node(0))
                self.ctl(index, "start_app")
                wait_for_port(self.stream_ports[index], timeout_s, self.processes[index], self.node(index))
        except (PeerUnavailable, subprocess.SubprocessError, OSError) as exc:
            logs = self.dir / "logs"
            self.down(remove_dir=False)
            raise PeerUnavailable(f"rabbitmq cluster did not start: {exc} (logs in {logs})") from exc

    def _env(self, index: int) -> dict[str, str]:
        node_dir = self.dir / f"n{index + 1}"
        env = {key: value for key, value in os.environ.items() if not key.startswith("RABBITMQ_")}
        env.update({
            "HOME": str(self.dir), "ERL_EPMD_PORT": str(self.epmd_port), "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODENAME": self.node(index), "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.amqp_ports[index]), "RABBITMQ_DIST_PORT": str(self.dist_ports[index]),
            "RABBITMQ_CONF_ENV_FILE": str(self.dir / "rabbitmq-env.conf"),
            "RABBITMQ_CONFIG_FILE": str(node_dir / "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.dir / "enabled_plugins"),
            "RABBITMQ_MNESIA_BASE": str(node_dir / "mnesia"), "RABBITMQ_LOG_BASE": str(self.dir / "logs"),
            "RABBITMQ_PID_FILE": str(node_dir / "rabbit.pid"), "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": ERL_ARGS,
            "RABBITMQ_CTL_ERL_ARGS": "+sbwt none",
        })
        return env

    def _start_node(self, index: int) -> subprocess.Popen:
        node_dir = self.dir / f"n{index + 1}"
        node_dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "logs").mkdir(exist_ok=True)
        (self.dir / "rabbitmq-env.conf").write_text("# empty: every setting comes from the environment\n")
        (self.dir / "enabled_plugins").write_text("[rabbitmq_stream].\n")
        (node_dir / "rabbitmq.conf").write_text(
            f"listeners.tcp.1 = 127.0.0.1:{self.amqp_ports[index]}\n"
            f"stream.listeners.tcp.1 = 127.0.0.1:{self.stream_ports[index]}\n"
            "stream.advertised_host = 127.0.0.1\n"
            f"stream.advertised_port = {self.stream_ports[index]}\n"
            "loopback_users = none\n")
        return spawn([str(RABBIT_BIN / "rabbitmq-server")], node_dir / "server.out", env=self._env(index))

    def ctl(self, index: int, *args: str) -> str:
        done = subprocess.run([str(RABBIT_BIN / "rabbitmqctl"), "-n", self.node(index), *args],
                              env=self._env(index), capture_output=True, text=True, timeout=CTL_TIMEOUT_S,
                              start_new_session=True)
        if done.returncode != 0:
            raise PeerUnavailable(f"rabbitmqctl {' '.join(args)} on {self.node(index)}: "
                                  f"{(done.stderr or done.stdout).strip()[-400:]}")
        return done.stdout

    def down(self, remove_dir: bool = True) -> None:
        stop_all(self.processes, None, timeout_s=20)
        self.processes = []
        if self.epmd is not None:
            stop_group(self.epmd.pid)
            self.epmd.wait(timeout=5)
            self.epmd = None
        if remove_dir:
            shutil.rmtree(self.dir, ignore_errors=True)


def producer(cluster: RabbitCluster):
    from rstream import Producer

    return Producer("127.0.0.1", cluster.stream_ports[0], username="guest", password="guest",
                    connection_name="ads-bench-producer")


def consumer(cluster: RabbitCluster):
    from rstream import Consumer

    return Consumer("127.0.0.1", cluster.stream_ports[0], username="guest", password="guest",
                    connection_name="ads-bench-consumer")


async def create_stream(cluster: RabbitCluster, name: str) -> None:
    async with producer(cluster) as client:
        await client.create_stream(name, arguments={"x-initial-cluster-size": NODES}, exists_ok=True)


async def delete_stream(cluster: RabbitCluster, name: str) -> None:
    async with producer(cluster) as client:
        await client.delete_stream(name, missing_ok=True)


async def _check(cluster: RabbitCluster, records: int = 1000) -> None:
    from rstream import AMQPMessage, ConsumerOffsetSpecification, OffsetType

    await create_stream(cluster, "check")
    async with producer(cluster) as client:
        for start in range(0, records, 100):
            await client.send_batch("check", [AMQPMessage(body=b"x" * 1024) for _ in range(100)])
        await client.send_wait("check", AMQPMessage(body=b"last"))
    received = []
    async with consumer(cluster) as client:
        await client.subscribe("check", lambda message, context: received.append(context.offset),
                               offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None))
        deadline = time.monotonic() + 30
        while len(received) < records + 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
    members = cluster.ctl(0, "cluster_status")
    replicas = subprocess.run([str(RABBIT_BIN / "rabbitmq-streams"), "-n", cluster.node(0), "stream_status", "check", "--formatter", "json"],
                              env=cluster._env(0), capture_output=True, text=True, timeout=CTL_TIMEOUT_S)
    await delete_stream(cluster, "check")
    print(f"rabbitmq: {len(received)} of {records + 1} read back\n{replicas.stdout.strip()}\n"
          f"{' '.join(line.strip() for line in members.splitlines() if 'adsbench' in line)}")


def main() -> int:
    parser = argparse.ArgumentParser(description="local 3-node RabbitMQ cluster with streams")
    parser.add_argument("command", choices=["check", "up"])
    parser.add_argument("--for-s", type=float, default=600.0, help="how long `up` keeps the cluster up")
    args = parser.parse_args()
    cluster = RabbitCluster()
    started = time.monotonic()
    cluster.up()
    print(f"rabbitmq up in {time.monotonic() - started:.1f}s: stream ports {cluster.stream_ports} "
          f"(dir {cluster.dir})", flush=True)
    check_or_hold(cluster, args.command, args.for_s, _check)
    return 0


if __name__ == "__main__":
    sys.exit(main())
