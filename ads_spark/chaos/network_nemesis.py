"""Nemeses that need test hosts: network partitions, ZooKeeper session loss, lossy and slow links, lost page cache.

Each fault starts, lasts a seeded time, and is healed before the next one, and
each leaves a named window for the report. The schedules:

* ``jepsen-2013``: reference 002's schedule, repeated. The leader of partition 0
  is cut off from the other brokers but not from ZooKeeper or the client (its ISR
  shrinks to itself), then cut off from everything (its ZooKeeper session
  expires and the controller reacts), then healed. With min.insync.replicas=2
  and unclean election off, nothing acknowledged may be lost; with
  min.insync.replicas=1 and unclean election on (``jepsen-2013-unsafe``) the
  writes the lone leader acknowledged are lost, as Jepsen saw in Kafka 0.8.
* ``partition-random``: one of isolate-node, split (majority/minority),
  bridge, one-way drop, leader-from-brokers, zookeeper-session-loss, over the
  nodes {zk, b1, b2, b3}; the client keeps its links (an isolated leader that
  clients can still reach is the dangerous case).
* ``last-replica-standing`` (KIP-966): the followers of partition 0 are cut
  from the other brokers one by one until its leader is the last replica in
  the ISR (writes refused: min ISR 2), then that leader crashes and loses its
  unflushed tail. It must not lead again with what it has left: the follower
  that left the ISR last (an ELR member) holds every committed record and leads.
* ``mixed``: those plus the process nemeses (kill/pause the leader, kill the
  controller), packet loss, a slow link, and a crash that loses the log's
  unflushed tail.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

from ads_spark.broker.log.checkpoints import OffsetCheckpointFile
from ads_spark.broker.log.manager import RECOVERY_POINT_CHECKPOINT, partition_dir_name
from ads_spark.broker.log.segment import SEGMENT_SUFFIX, parse_segment_file_name, scan_segment
from ads_spark.chaos.checker import NemesisWindow
from ads_spark.chaos.hosts import TestNetwork
from ads_spark.cluster import ZOOKEEPER_HOST, LocalCluster, broker_host_name

JEPSEN_CUT_FROM_BROKERS_S = 8.0   # > replica.lag.time.max.ms: the ISR shrinks to the leader
JEPSEN_CUT_FROM_ALL_S = 12.0      # > zookeeper.session.timeout.ms + the controller's reaction
JEPSEN_HEALED_S = 8.0
FOLLOWER_CUT_STEP_S = 5.0         # > replica.lag.time.max.ms: each cut follower leaves the ISR
LAST_REPLICA_DOWN_S = 4.0
NETWORK_FAULT_S = (4.0, 10.0)
SESSION_LOSS_S = 9.0              # > the brokers' 6 s ZooKeeper session timeout
PACKET_LOSS_PERCENT = 20
PARTITION_KINDS = ("isolate-node", "split", "bridge", "one-way", "leader-from-brokers", "zookeeper-session-loss")
PROCESS_KINDS = ("kill-leader", "pause-leader", "kill-controller", "crash-lose-unflushed")
LINK_KINDS = ("packet-loss", "slow-link")
MIXED_KINDS = PARTITION_KINDS + PROCESS_KINDS + LINK_KINDS


class HostNemesis:
    """Faults on the test hosts of one run; the process nemesis (runner.Nemesis) kills and pauses, and reads
    the cluster's metadata (``leader_of``, ``controller``)."""

    def __init__(self, cluster: LocalCluster, network: TestNetwork, rng: random.Random, process_nemesis):
        self.cluster, self.network, self.rng = cluster, network, rng
        self.process_nemesis = process_nemesis
        self.leader_of, self.controller = process_nemesis.leader_of, process_nemesis.controller
        self.windows: list[NemesisWindow] = []

    def _nodes(self) -> list[str]:
        return [ZOOKEEPER_HOST] + [broker_host_name(b) for b in self.cluster.broker_ids()]

    def _brokers(self) -> list[str]:
        return [broker_host_name(b) for b in self.cluster.broker_ids()]

    def _window(self, name: str, started: float) -> None:
        self.windows.append(NemesisWindow(name, started, time.time()))

    def _hold_then_heal(self, name: str, length_s: float) -> None:
        started = time.time()
        try:
            time.sleep(length_s)
        finally:
            self.network.heal()
        self._window(name, started)

    # ---- schedules ------------------------------------------------------------------------

    def jepsen_2013_cycle(self) -> None:
        leader = broker_host_name(self.leader_of(0))
        others = [h for h in self._brokers() if h != leader]
        started = time.time()
        self.network.isolate(leader, others)
        time.sleep(JEPSEN_CUT_FROM_BROKERS_S)
        self._window(f"{leader} cut from brokers", started)
        started = time.time()
        self.network.isolate(leader, [ZOOKEEPER_HOST, "client"])
        try:
            time.sleep(JEPSEN_CUT_FROM_ALL_S)
        finally:
            self.network.heal()
        self._window(f"{leader} cut from all", started)
        time.sleep(JEPSEN_HEALED_S)

    def last_replica_standing_cycle(self) -> None:
        leader_id = self.leader_of(0)
        leader, brokers = broker_host_name(leader_id), self._brokers()
        followers = [h for h in brokers if h != leader]
        started = time.time()
        try:
            for follower in followers:
                self.network.isolate(follower, brokers)
                time.sleep(FOLLOWER_CUT_STEP_S)
            self._window(f"{'+'.join(followers)} cut off: {leader} last in ISR", started)
            started = time.time()
            removed_bytes = self._crash_and_restart(leader_id, LAST_REPLICA_DOWN_S, lose_unflushed=True)
        finally:
            self.network.heal()
        self._window(f"{leader} crashed, lost {removed_bytes} unflushed bytes", started)
        time.sleep(JEPSEN_HEALED_S)

    def run_one(self, kind: str) -> None:
        length_s = self.rng.uniform(*NETWORK_FAULT_S)
        if kind in ("kill-leader", "pause-leader"):
            self.process_nemesis.run_one(kind)
            self.windows.append(self.process_nemesis.windows[-1])
            return
        if kind == "kill-controller":
            return self._kill_and_restart(self.controller(), "kill-controller", lose_unflushed=False)
        if kind == "crash-lose-unflushed":
            return self._kill_and_restart(self.rng.choice(self.cluster.broker_ids()), "crash-lose-unflushed",
                                          lose_unflushed=True)
        name = self._start_network_fault(kind)
        self._hold_then_heal(name, SESSION_LOSS_S if kind == "zookeeper-session-loss" else length_s)

    def _start_network_fault(self, kind: str) -> str:
        nodes, brokers = self._nodes(), self._brokers()
        if kind == "isolate-node":
            victim = self.rng.choice(nodes)
            self.network.isolate(victim, nodes)
            return f"isolate {victim}"
        if kind == "split":
            shuffled = self.rng.sample(nodes, len(nodes))
            minority = shuffled[:self.rng.choice((1, 2))]
            for host in minority:
                self.network.drop(host, [h for h in nodes if h not in minority])
            return f"split {'+'.join(sorted(minority))} | rest"
        if kind == "bridge":
            shuffled = self.rng.sample(nodes, len(nodes))
            bridge, left, right = shuffled[0], shuffled[1:2], shuffled[2:]
            for host in left:
                self.network.drop(host, right)
            return f"bridge {bridge} between {'+'.join(left)} and {'+'.join(right)}"
        if kind == "one-way":
            source, target = self.rng.sample(nodes, 2)
            self.network.drop(source, [target], both_ways=False)
            return f"drop {source}->{target}"
        if kind == "leader-from-brokers":
            leader = broker_host_name(self.leader_of(self.rng.randrange(3)))
            self.network.isolate(leader, brokers)
            return f"{leader} cut from brokers"
        if kind == "zookeeper-session-loss":
            victim = self.rng.choice(brokers)
            self.network.isolate(victim, [ZOOKEEPER_HOST])
            return f"{victim} loses ZooKeeper"
        if kind == "packet-loss":
            victim = self.rng.choice(nodes)
            self.network.lose_packets(victim, PACKET_LOSS_PERCENT)
            return f"{PACKET_LOSS_PERCENT}% loss at {victim}"
        if kind == "slow-link":
            victim = self.rng.choice(nodes)
            self.network.slow_link(victim)
            return f"slow link at {victim}"
        raise ValueError(f"unknown network fault {kind!r}")

    def _kill_and_restart(self, broker_id: int, name: str, lose_unflushed: bool) -> None:
        started = time.time()
        removed_bytes = self._crash_and_restart(broker_id, self.rng.uniform(*NETWORK_FAULT_S), lose_unflushed)
        self._window(f"{name} b{broker_id}" + (f" ({removed_bytes} bytes)" if lose_unflushed else ""), started)

    def _crash_and_restart(self, broker_id: int, down_s: float, lose_unflushed: bool) -> int:
        """SIGKILL, optionally lose the unflushed tail, stay down ``down_s``, restart; bytes removed."""
        self.cluster.kill_broker(broker_id)
        removed = lose_unflushed_tail(self.cluster.dir / f"broker-{broker_id}" / "data", self.rng) \
            if lose_unflushed else {}
        time.sleep(down_s)
        self.cluster.start_broker(broker_id)
        return sum(removed.values())


def lose_unflushed_tail(data_dir: Path, rng: random.Random) -> dict[str, int]:
    """What a power cut does to a log: everything past the last fsync may vanish, the last write may be torn.

    For each partition, the segment bytes after the recovery point (the offset up
    to which the broker has fsynced, per its checkpoint) are cut at a seeded
    position: at or before the first batch past the recovery point, sometimes
    in the middle of it. Returns the bytes removed per partition directory.
    """
    recovery_points = _recovery_points(data_dir / RECOVERY_POINT_CHECKPOINT)
    removed: dict[str, int] = {}
    for partition_dir in sorted(p for p in data_dir.iterdir() if p.is_dir()):
        recovery_point = recovery_points.get(partition_dir.name, 0)
        for segment in sorted(partition_dir.glob(f"*{SEGMENT_SUFFIX}")):
            base_offset = parse_segment_file_name(segment.name)
            if base_offset is None:
                continue
            size = segment.stat().st_size
            keep = _bytes_kept(segment, base_offset, recovery_point, rng)
            if keep < size:
                with open(segment, "r+b") as handle:
                    handle.truncate(keep)
                removed[partition_dir.name] = removed.get(partition_dir.name, 0) + size - keep
    return removed


def _bytes_kept(segment: Path, base_offset: int, recovery_point: int, rng: random.Random) -> int:
    entries, _schema, schema_end, _valid_end, _problem = scan_segment(segment, base_offset)
    past = [e for e in entries if e.next_offset > recovery_point]
    if not past:
        return segment.stat().st_size
    first = past[0]
    torn_bytes = rng.randrange(first.size) if rng.random() < 0.5 else 0
    return max(first.position, schema_end) + torn_bytes


def _recovery_points(path: Path) -> dict[str, int]:
    return {partition_dir_name(topic, partition): offset
            for (topic, partition), offset in OffsetCheckpointFile(path).read().items()}

