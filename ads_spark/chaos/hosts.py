"""Test hosts for fault injection: one Linux network namespace per node, a private switch, firewall nemeses.

Jepsen runs each node on its own machine and cuts links with iptables; here each
node (ZooKeeper, every broker, the client that runs the workload) is a network
namespace made by the run itself, joined to a bridge that lives in a namespace
of its own. Every veth pair is created inside the switch namespace and one end
moved into the host's namespace, so no device, address or route of the test ever
exists in the machine's own namespace, and the hosts have no route anywhere but
their /24: no packet of a test can leave them.

Faults are nftables rules in a host's own namespace (one table, ``inet
ads_chaos``, flushed on heal): drop to and from chosen peers (a partition, a
one-way drop, "isolated from brokers but not from ZooKeeper"), random loss
(``numgen``), and a slow link (an HTB rate limit on the host's interface; the
kernel here has no ``netem``, so fixed added latency is not available, and the
rate limit's queueing delay stands in for it).

Cleanup is the point of this module: ``destroy`` kills every process in every
namespace of the run and deletes the namespaces (which takes the devices with
them); namespaces are named after the owning process so a later run removes
what a killed run left (``sweep_stale``).

Own host names (``hostnames=True``): every command run on a host then runs in a UTS namespace of
its own whose host name is ``<host>-<run id>``, and ``ip netns exec`` mounts a hosts file that
resolves every host's name to its address (``/etc/netns/<namespace>/hosts``, written by ``create``
and removed with the namespace). The filesystem stays shared, so anything that decides "same
machine" must go by host identity: the local read path (``ads_spark/local_reads.py``) compares
host names, and this is what makes each namespace a machine of its own to it (and to Java, whose
local host look-up needs its name to resolve).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass

NAMESPACE_PREFIX = "adschaos"
SUBNET_PREFIX = "10.213.0"   # /24, exists only inside the run's namespaces
SWITCH = "sw"
BRIDGE = "br0"
HOST_DEVICE = "eth0"
COMMAND_TIMEOUT_S = 10.0
FIREWALL_TABLE = "ads_chaos"
SLOW_LINK_RATE = "2mbit"
PROCESS_EXIT_WAIT_S = 5.0
NETNS_ETC = "/etc/netns"  # `ip netns exec NS` bind-mounts /etc/netns/NS/<file> over /etc/<file>
# Set the UTS host name, then become the command (exec: the pid stays the one `ip netns exec` started).
SET_HOSTNAME_AND_EXEC = 'hostname "$0" && exec "$@"'


class HostsUnavailableError(RuntimeError):
    """This machine cannot build test hosts (not root, or `ip`/`nft` missing); the message says which."""


def missing_requirements() -> str | None:
    """Why test hosts cannot be built here, or None when they can."""
    if os.geteuid() != 0:
        return "network-namespace test hosts need root (ip netns, nft)"
    for tool, package in (("ip", "iproute2"), ("nft", "nftables")):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (Debian package {package}; `make install` installs it as root)"
    return None


def _run(argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    if check and result.returncode != 0:
        raise HostsUnavailableError(f"{' '.join(argv)} failed: {result.stderr.strip() or result.stdout.strip()}")
    return result


@dataclass(frozen=True)
class Host:
    name: str
    namespace: str
    address: str


class TestNetwork:
    """Hosts on one private switch. ``create`` builds them; ``destroy`` removes all of it, also after errors."""

    __test__ = False  # not a pytest class

    def __init__(self, host_names: list[str], run_id: str | None = None, hostnames: bool = False):
        self.run_id = run_id or f"{os.getpid()}"
        self.switch_namespace = self._namespace(SWITCH)
        self.hosts = {name: Host(name, self._namespace(name), f"{SUBNET_PREFIX}.{index + 10}")
                      for index, name in enumerate(host_names)}
        self.own_hostnames = hostnames
        self._slowed: set[str] = set()

    def _namespace(self, name: str) -> str:
        return f"{NAMESPACE_PREFIX}-{self.run_id}-{name}"

    def namespaces(self) -> list[str]:
        return [self.switch_namespace] + [h.namespace for h in self.hosts.values()]

    # ---- build / tear down ----------------------------------------------------------------

    def create(self) -> "TestNetwork":
        reason = missing_requirements()
        if reason:
            raise HostsUnavailableError(reason)
        try:
            _run(["ip", "netns", "add", self.switch_namespace])
            sw = ["ip", "-n", self.switch_namespace]
            _run(sw + ["link", "add", BRIDGE, "type", "bridge"])
            _run(sw + ["link", "set", BRIDGE, "up"])
            for index, host in enumerate(self.hosts.values()):
                self._add_host(host, f"v{index}")
            if self.own_hostnames:
                self._write_hosts_files()
        except BaseException:
            self.destroy()
            raise
        return self

    def _add_host(self, host: Host, switch_port: str) -> None:
        _run(["ip", "netns", "add", host.namespace])
        sw = ["ip", "-n", self.switch_namespace]
        _run(sw + ["link", "add", switch_port, "type", "veth", "peer", "name", HOST_DEVICE, "netns", host.namespace])
        _run(sw + ["link", "set", switch_port, "master", BRIDGE])
        _run(sw + ["link", "set", switch_port, "up"])
        inside = ["ip", "-n", host.namespace]
        _run(inside + ["addr", "add", f"{host.address}/24", "dev", HOST_DEVICE])
        _run(inside + ["link", "set", HOST_DEVICE, "up"])
        _run(inside + ["link", "set", "lo", "up"])
        self._nft(host, f"add table inet {FIREWALL_TABLE}")
        for hook in ("input", "output"):
            self._nft(host, f"add chain inet {FIREWALL_TABLE} {hook} {{ type filter hook {hook} priority 0 ; }}")

    def _write_hosts_files(self) -> None:
        """Each host's /etc/hosts (as its processes see it): localhost and every host's name and address."""
        lines = ["127.0.0.1 localhost", "::1 localhost"]
        lines += [f"{host.address} {self.hostname(host.name)}" for host in self.hosts.values()]
        for host in self.hosts.values():
            directory = os.path.join(NETNS_ETC, host.namespace)
            os.makedirs(directory, exist_ok=True)
            with open(os.path.join(directory, "hosts"), "w") as out:
                out.write("\n".join(lines) + "\n")

    def destroy(self) -> None:
        """Kill every process in the run's namespaces, then delete them (devices go with them)."""
        destroy_namespaces([ns for ns in self.namespaces() if ns in list_namespaces()])
        remove_hosts_files(self.namespaces())

    def __enter__(self) -> "TestNetwork":
        return self.create()

    def __exit__(self, *exc_info) -> None:
        self.destroy()

    # ---- running things on hosts ----------------------------------------------------------------

    def exec_prefix(self, host_name: str) -> list[str]:
        """Prepend to a command line to run it on ``host_name`` (``ip netns exec`` execs: the pid is the command's;
        with own host names ``unshare`` and ``sh`` exec too, so it still is)."""
        prefix = ["ip", "netns", "exec", self.hosts[host_name].namespace]
        if self.own_hostnames:
            prefix += ["unshare", "--uts", "sh", "-c", SET_HOSTNAME_AND_EXEC, self.hostname(host_name)]
        return prefix

    def hostname(self, host_name: str) -> str:
        """The host name processes on ``host_name`` see (with ``hostnames=True``; else the machine's)."""
        return f"{host_name}-{self.run_id}" if self.own_hostnames else socket.gethostname()

    def address(self, host_name: str) -> str:
        return self.hosts[host_name].address

    # ---- faults ---------------------------------------------------------------------------

    def _nft(self, host: Host, command: str) -> None:
        _run(self.exec_prefix(host.name) + ["nft", command])

    def drop(self, from_host: str, to_hosts: list[str], both_ways: bool = True) -> None:
        """Packets from ``from_host`` to each of ``to_hosts`` vanish (and the replies too when ``both_ways``)."""
        source = self.hosts[from_host]
        for name in to_hosts:
            target = self.hosts[name]
            self._nft(source, f"add rule inet {FIREWALL_TABLE} output ip daddr {target.address} drop")
            self._nft(target, f"add rule inet {FIREWALL_TABLE} input ip saddr {source.address} drop")
            if both_ways:
                self._nft(target, f"add rule inet {FIREWALL_TABLE} output ip daddr {source.address} drop")
                self._nft(source, f"add rule inet {FIREWALL_TABLE} input ip saddr {target.address} drop")

    def isolate(self, host_name: str, from_hosts: list[str]) -> None:
        self.drop(host_name, [h for h in from_hosts if h != host_name], both_ways=True)

    def lose_packets(self, host_name: str, percent: int) -> None:
        """Each packet leaving or entering ``host_name`` is dropped with probability ``percent``/100."""
        host = self.hosts[host_name]
        for hook in ("input", "output"):
            self._nft(host, f"add rule inet {FIREWALL_TABLE} {hook} numgen random mod 100 < {int(percent)} drop")

    def slow_link(self, host_name: str) -> None:
        """Rate-limit the host's interface: queueing delay (hundreds of ms under load) stands in for netem."""
        prefix = self.exec_prefix(host_name)
        _run(prefix + ["tc", "qdisc", "replace", "dev", HOST_DEVICE, "root", "handle", "1:", "htb", "default", "1"])
        _run(prefix + ["tc", "class", "replace", "dev", HOST_DEVICE, "parent", "1:", "classid", "1:1", "htb",
                       "rate", SLOW_LINK_RATE])
        self._slowed.add(host_name)

    def heal(self) -> None:
        """Every rule and rate limit of the run removed: all hosts see each other again."""
        for host in self.hosts.values():
            self._nft(host, f"flush table inet {FIREWALL_TABLE}")
        for name in sorted(self._slowed):
            _run(self.exec_prefix(name) + ["tc", "qdisc", "del", "dev", HOST_DEVICE, "root"], check=False)
        self._slowed.clear()


def list_namespaces() -> list[str]:
    if shutil.which("ip") is None:
        return []
    result = _run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in result.stdout.splitlines() if line.strip()]


def namespace_pids(namespace: str) -> list[int]:
    result = _run(["ip", "netns", "pids", namespace], check=False)
    return [int(p) for p in result.stdout.split() if p.isdigit()]


def destroy_namespaces(namespaces: list[str]) -> None:
    """SIGKILL every process in each namespace (waiting a bounded time), then delete the namespaces."""
    for namespace in namespaces:
        for pid in namespace_pids(namespace):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + PROCESS_EXIT_WAIT_S
    while time.monotonic() < deadline and any(namespace_pids(ns) for ns in namespaces):
        time.sleep(0.1)
    for namespace in namespaces:
        _run(["ip", "netns", "del", namespace], check=False)


def remove_hosts_files(namespaces: list[str]) -> None:
    for namespace in namespaces:
        shutil.rmtree(os.path.join(NETNS_ETC, namespace), ignore_errors=True)
    try:
        os.rmdir(NETNS_ETC)  # only when empty: another namespace's files stay
    except OSError:
        pass


def sweep_stale() -> list[str]:
    """Remove namespaces of earlier runs whose owning process is gone (a run killed outright); returns them."""
    stale = []
    known = list_namespaces()
    leftover_files = os.listdir(NETNS_ETC) if os.path.isdir(NETNS_ETC) else []
    for namespace in known + [name for name in leftover_files if name not in known]:
        parts = namespace.split("-")
        if len(parts) >= 3 and parts[0] == NAMESPACE_PREFIX and parts[1].isdigit():
            owner = int(parts[1])
            try:
                os.kill(owner, 0)
            except ProcessLookupError:
                stale.append(namespace)
            except PermissionError:
                pass
    destroy_namespaces([ns for ns in stale if ns in known])
    remove_hosts_files(stale)
    return stale
