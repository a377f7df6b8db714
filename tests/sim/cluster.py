"""Brokers and the cluster object that the runner and the scenarios drive.

The broker here runs the real broker's partition shell: one ``Partition``
(broker/replica/partition.py) per partition over the simulated disk (disk.py),
which feeds every input to ``partition.step`` under its lock and executes the
effects. ``SimBroker`` keeps only what the environment does around it: it
delivers messages as the broker's handlers and fetcher would (the controller's
requests answered by controller_env.py, fenced by ``replication/fencing.py``),
keeps one fetch in flight per partition, holds the ZooKeeper session and
registration, flushes and checkpoints on the model's clock, and crashes and
restarts. After every call into a ``Partition`` it
reads the new state and shows it to the checker; truncations reach the checker
through the log (``SimLog.on_removed``). ``Cluster`` holds the shared model
(network, ZooKeeper, clock), every broker process's controller (the real core in
``controller_env.ControllerEnv``) and exposes the fault actions.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

from ads_spark.broker.replica.partition import Partition, PartitionRole
from ads_spark.errors import ErrorCode
from ads_spark.replication.state import LeaderAndIsr, PartitionConfig, PartitionState, Role

from tests.sim.controller_env import ControlAnswer, ControllerEnv, ControlRequest, answer_control_request
from tests.sim.disk import SimBatch, SimDisk
from tests.sim.model import (
    CLIENT, FETCH_MAX_BYTES, FETCH_TIMEOUT_MS, FetchReq, FetchResp, ProduceReq, ProduceResp, SimNet, SimZk, ZkWrite,
)

PRODUCE_TIMEOUT_MS = 200  # the produce request's timeout_ms
MAX_MESSAGE_BYTES = 1 << 20


@dataclass
class SimConfig:
    brokers: int = 3
    partitions: int = 1
    replication_factor: int = 3
    min_insync_replicas: int = 2
    unclean: bool = False
    session_timeout_ms: int = 150
    replica_lag_time_max_ms: int = 100
    drop_prob: float = 0.02
    delay_ms: tuple[int, int] = (1, 8)
    flush_every_ms: int = 25


class SimBroker:
    """One broker: its disk (survives crashes), its process (``partitions``, session, registration: not)."""

    def __init__(self, cluster: "Cluster", broker_id: int):
        self.c = cluster
        self.id = broker_id
        self.alive = True
        self.incarnation = 0  # bumps at each restart; the network drops messages for older ones
        self.started_clean = True  # this process's start; its every registration says so (as brokers do)
        self.session: int | None = None
        self.broker_epoch = -1  # from the registration znode; -1 until registered
        self.controller_epoch_seen = 0
        self.disk = SimDisk(broker_id, cluster.cfg.partitions)
        for p, partition_log in self.disk.logs.items():
            partition_log.on_removed = lambda end, cause, p=p: self._removed(p, end, cause)
        self.partitions: dict[int, Partition] = {}
        # Each partition's state as last read after a call into it (so, during a call, the state before it).
        self.states: dict[int, PartitionState] = {}
        self.fetch_sent_ms: dict[int, int] = {}
        self.last_flush_ms = 0
        # Produce answers a call gave, sent after it: the shell answers produces before it sends ISR writes,
        # this model always sent them after (the core's effect order), and keeping that order of network
        # sends keeps every seed's schedule the one it always was.
        self._answers: list[tuple[int, int, Exception | None]] = []
        self.recover()

    @property
    def disks(self):
        """The partition logs (the checker reads their record ids)."""
        return self.disk.logs

    # --- life cycle
    def recover(self) -> None:
        """Start the process: each partition recovers from the disk as the real broker's does."""
        for p, partition_log in self.disk.logs.items():
            partition = Partition("t", p, "sim", partition_log, self.disk.epoch_files[p], self.id, self.c.pconfig,
                                  high_watermark_checkpoint=self.disk.high_watermarks.get(p, 0),
                                  isr_sender=self._send_isr, producer_snapshots=self.disk.producer_snapshots[p])
            self.partitions[p] = partition
            self.states[p] = partition.state
            self.c.checker.on_state(self, p, partition.state, fresh=True)
        self.fetch_sent_ms = {}
        self._answers = []

    def crash(self) -> None:
        self.alive = False
        self.disk.crash()
        for p, partition_log in self.disk.logs.items():
            self.c.checker.on_data_removed(self, p, partition_log.log_end_offset, cause="crash")
        self.session = None
        self.broker_epoch = -1
        self.started_clean = False  # the next process starts after an unclean shutdown

    def restart(self) -> None:
        self.alive = True
        self.incarnation += 1
        self.controller_epoch_seen = 0
        self.recover()

    def zk_reachable(self) -> bool:
        return self.alive and self.id not in self.c.zk_cut

    def zk_step(self, now: int) -> None:
        """Heartbeat, notice an expired session, (re-)register."""
        if not self.zk_reachable():
            return
        zk = self.c.zk
        if self.session is None or not zk.heartbeat(self.session, now):
            self.session = zk.open_session(self.id, now)
            self.broker_epoch = -1
        if self.broker_epoch < 0 or self.id not in zk.brokers or zk.brokers[self.id].session != self.session:
            epoch = zk.register(self.id, self.session, clean=self.started_clean, incarnation=self.incarnation)
            if epoch is not None:
                self.broker_epoch = epoch
            else:
                self.broker_epoch = -1

    # --- around every call into a Partition
    def _after(self, p: int) -> None:
        """Read the partition's new state, send the produce answers its call gave, show the checker a change.

        The core returns the very same state object when an event changes nothing (most ticks), and the
        checker has judged that one: it is shown only states it has not seen."""
        state = self.partitions[p].state
        changed = state is not self.states[p]
        self.states[p] = state
        if self._answers:
            answers, self._answers = self._answers, []
            for req_id, base, failure in answers:
                error = ErrorCode.NONE if failure is None else failure.code
                self.c.net.send(self.c.now, self.id, CLIENT, ProduceResp(req_id, error, base, state.leader_epoch))
        if changed:
            self.c.checker.on_state(self, p, state)

    def _removed(self, p: int, new_end: int, cause: str) -> None:
        # Called during a Partition call, so ``states[p]`` is still the state before it.
        self.c.checker.on_data_removed(self, p, new_end, cause=cause,
                                       below_hw=new_end < self.states[p].high_watermark)

    def _send_isr(self, partition: Partition, proposal) -> None:
        """The shell's ISR sender: the write travels to ZooKeeper (``_zk_write``) and its answer back."""
        self.c.net.send(self.c.now, self.id, self.id,
                        ZkWrite(partition.partition, proposal.proposed, proposal.expected_partition_epoch),
                        self.incarnation)

    # --- inputs
    def receive(self, src: int, msg) -> None:
        match msg:
            case ControlRequest():
                answer_control_request(self, msg)
            case ControlAnswer():
                self.c.controllers.on_answer(msg)
            case FetchReq():
                self._follower_fetch(msg)
            case FetchResp():
                self._fetch_response(msg)
            case ProduceReq():
                self._produce(msg)
            case ZkWrite():
                self._zk_write(msg)

    def apply_leader_and_isr_entry(self, entry) -> None:
        """One partition of a fenced leader_and_isr body (wire form), read as control_handlers reads it."""
        self._apply_role(int(entry["partition"]), PartitionRole.from_wire(entry))

    def _apply_role(self, p: int, role: PartitionRole) -> None:
        if self.id not in role.replicas and self.id not in role.observers:
            return  # the real handler stops (and deletes) the replica; assignments never change here
        self.partitions[p].apply_leader_and_isr(role, self.c.now)
        self._after(p)
        self.fetch_sent_ms.pop(p, None)  # a new role: the fetcher asks at once

    def _follower_fetch(self, msg: FetchReq) -> None:
        """As the data handler answers a follower: the core decides, then what it says is read and sent."""
        c, request, partition = self.c, msg.request, self.partitions[msg.p]
        reply = partition.on_follower_fetch(msg.replica, msg.broker_epoch, request.current_leader_epoch,
                                            request.fetch_offset, request.last_fetched_epoch, c.now)
        self._after(msg.p)
        meta = {"error_code": int(reply.error), "high_watermark": reply.high_watermark,
                "log_start_offset": reply.log_start_offset, "leader_epoch": reply.leader_epoch}
        batches: list = []
        if reply.error is ErrorCode.NONE and reply.diverging_epoch is not None:
            meta["diverging_epoch"] = {"epoch": reply.diverging_epoch[0], "end_offset": reply.diverging_epoch[1]}
        elif reply.error is ErrorCode.NONE:
            budget = partition.replication_budget(msg.replica, FETCH_MAX_BYTES, c.now / 1000)
            batches = partition.read(request.fetch_offset, reply.read_end_offset_exclusive, budget, as_messages=True)
        c.net.send(c.now, self.id, msg.replica, FetchResp(msg.p, request, meta, tuple(batches)),
                   c.brokers[msg.replica].incarnation)

    def _fetch_response(self, msg: FetchResp) -> None:
        """As the fetcher: an error other than out-of-range is backed off from (here: asked again next tick)."""
        self.fetch_sent_ms.pop(msg.p, None)
        code = msg.meta["error_code"]
        if code and code != ErrorCode.OFFSET_OUT_OF_RANGE:
            return
        self.partitions[msg.p].apply_fetch_response(msg.request, msg.meta, msg.batches, self.c.now)
        self._after(msg.p)

    def _produce(self, msg: ProduceReq) -> None:
        def complete(base: int, failure: Exception | None, req_id: int = msg.req_id) -> None:
            self._answers.append((req_id, base, failure))

        self.partitions[msg.p].produce(SimBatch(msg.rids), acks=msg.acks, timeout_ms=PRODUCE_TIMEOUT_MS,
                                       max_message_bytes=MAX_MESSAGE_BYTES, now_ms=self.c.now,
                                       producer=(msg.pid, msg.pepoch, msg.seq), complete=complete)
        self._after(msg.p)

    def _zk_write(self, msg: ZkWrite) -> None:
        now, zk, partition = self.c.now, self.c.zk, self.partitions[msg.p]
        if not self.zk_reachable() or self.session not in zk.sessions:
            partition.on_isr_answer(None, None, now)
        elif zk.update_isr(msg.p, msg.proposed, msg.expected):
            partition.on_isr_answer(zk.partitions[msg.p], None, now)
        else:
            partition.on_isr_answer(None, zk.partitions[msg.p], now)
        self._after(msg.p)

    def tick(self, now: int) -> None:
        for p, partition in self.partitions.items():
            partition.tick(now)
            self._after(p)
            req = partition.fetch_request()
            if req is None or self.broker_epoch < 0:
                continue
            sent = self.fetch_sent_ms.get(p)
            if sent is not None and now - sent < FETCH_TIMEOUT_MS:
                continue  # one fetch in flight per partition, like a fetcher session
            self.fetch_sent_ms[p] = now
            leader = self.c.brokers.get(req.leader)
            if leader is not None:
                self.c.net.send(now, self.id, req.leader, FetchReq(p, self.id, self.broker_epoch, req),
                                leader.incarnation)
        if now - self.last_flush_ms >= self.c.cfg.flush_every_ms:
            self.checkpoint(now)

    def checkpoint(self, now: int) -> None:
        """The broker's periodic flush and checkpoints: logs fsynced, HWs and producer tables written."""
        self.last_flush_ms = now
        for p, partition in self.partitions.items():
            partition.log.flush()
            self.disk.high_watermarks[p] = partition.high_watermark
            partition.write_producer_snapshot()


@dataclass
class RequestMeta:
    p: int
    acks: int
    rids: tuple[int, ...]
    pid: int
    pepoch: int
    seq: int
    sent_ms: int


class Cluster:
    broker_class = SimBroker  # the process each broker runs (coordinator.py's adds a group coordinator)

    def __init__(self, cfg: SimConfig, rng: random.Random, checker):
        self.cfg = cfg
        self.rng = rng
        self.now = 0
        self.checker = checker
        checker.cluster = self
        self.pconfig = PartitionConfig(min_insync_replicas=cfg.min_insync_replicas,
                                       replica_lag_time_max_ms=cfg.replica_lag_time_max_ms,
                                       isr_update_retry_ms=50, unclean_leader_election_enable=cfg.unclean)
        self.net = SimNet(rng, cfg.drop_prob, cfg.delay_ms)
        self.zk = SimZk(cfg.session_timeout_ms)
        self.zk_cut: set[int] = set()
        ids = list(range(1, cfg.brokers + 1))
        self.assignment = self.zk.assignment
        self.assignment.update({p: tuple(ids[(p + i) % len(ids)] for i in range(cfg.replication_factor))
                                for p in range(cfg.partitions)})
        for p, reps in self.assignment.items():
            self.zk.partitions[p] = LeaderAndIsr(reps[0], 0, tuple(sorted(reps)), (), 0, 0)
        self.requests: dict[int, RequestMeta] = {}
        self.req_ids = itertools.count(1)
        self.brokers = {b: self.broker_class(self, b) for b in ids}
        self.controllers = ControllerEnv(self)
        self.producer = None

    # --- time
    def step(self, dt_ms: int) -> None:
        self.now += dt_ms
        now = self.now
        for b in self.brokers.values():
            b.zk_step(now)
        self.zk.expire(now)
        self.controllers.step(now)
        for src, dst, inc, msg in list(self.net.due(now)):
            if dst == CLIENT:
                if self.producer is not None:
                    self.producer.on_response(msg)
                continue
            b = self.brokers[dst]
            if b.alive and (inc < 0 or inc == b.incarnation):
                b.receive(src, msg)
        for b in self.brokers.values():
            if b.alive:
                b.tick(now)
        self.checker.after_step()

    # --- client side
    def send_produce(self, p: int, acks: int, rids: tuple[int, ...], pid: int = -1, pepoch: int = -1,
                     seq: int = -1) -> int:
        req_id = next(self.req_ids)
        self.requests[req_id] = RequestMeta(p, acks, rids, pid, pepoch, seq, self.now)
        leader = self.zk.partitions[p].leader
        if leader > 0:
            self.net.send(self.now, CLIENT, leader, ProduceReq(req_id, p, acks, rids, pid, pepoch, seq),
                          self.brokers[leader].incarnation)
        return req_id

    # --- faults
    def crash(self, b: int) -> None:
        if self.brokers[b].alive:
            self.brokers[b].crash()
            self.controllers.on_crash(b)

    def restart(self, b: int) -> None:
        if not self.brokers[b].alive:
            self.brokers[b].restart()

    def isolate_from_brokers(self, b: int) -> None:
        for o in self.brokers:
            if o != b:
                self.net.cut |= {(b, o), (o, b)}

    def cut_one_way(self, src: int, dst: int) -> None:
        self.net.cut.add((src, dst))

    def isolate_from_zk(self, b: int) -> None:
        self.zk_cut.add(b)

    def isolate_from_clients(self, b: int) -> None:
        self.net.cut |= {(b, CLIENT), (CLIENT, b)}

    def heal(self) -> None:
        self.net.cut.clear()
        self.zk_cut.clear()

    def leader_state(self, p: int):
        lai = self.zk.partitions[p]
        b = self.brokers.get(lai.leader)
        if b is None or not b.alive:
            return None
        s = b.states[p]
        return s if s.role is Role.LEADER and s.leader_epoch == lai.leader_epoch else None
