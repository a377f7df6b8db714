"""Brokers, controller and the cluster object that the runner and the scenarios drive.

The broker here is deliberately what the real broker must be: it owns one
``PartitionState`` per partition, feeds every input to ``partition.step``, and
carries out the returned effects in order. ``Cluster`` holds the shared model
(network, ZooKeeper, clock) and exposes the fault actions.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

from ads_spark.errors import ErrorCode
from ads_spark.replication import dedupe, election, epochs
from ads_spark.replication import partition as core
from ads_spark.replication.state import BatchInfo, LeaderAndIsr, PartitionConfig, Role

from tests.sim.model import (
    CLIENT, FETCH_TIMEOUT_MS, METADATA_RESEND_MS, DiskLog, FetchReq, FetchResp, LeaderAndIsrMsg, ProduceReq,
    ProduceResp, SimNet, SimZk, ZkWrite,
)


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
    def __init__(self, cluster: "Cluster", broker_id: int):
        self.c = cluster
        self.id = broker_id
        self.alive = True
        self.incarnation = 0  # bumps at each restart; the network drops messages for older ones
        self.started_clean = True  # this process's start; its every registration says so (as brokers do)
        self.session: int | None = None
        self.broker_epoch = -1  # from the registration znode; -1 until registered
        self.controller_epoch_seen = 0
        self.disks: dict[int, DiskLog] = {p: DiskLog() for p in range(cluster.cfg.partitions)}
        self.states: dict[int, object] = {}
        self.payloads: dict[int, tuple[int, ...]] = {}  # produce req_id -> record ids, until appended
        self.fetch_sent_ms: dict[int, int] = {}
        self.last_flush_ms = 0
        self.recover()

    # --- life cycle
    def recover(self) -> None:
        for p, disk in self.disks.items():
            self.states[p] = core.initial_state(
                "t", p, self.id, self.c.pconfig, log_end_offset=disk.end_offset,
                high_watermark_checkpoint=disk.hw_checkpoint,
                epoch_pairs=tuple(epochs.rebuild(disk.batches).as_pairs()),
                producers=dedupe.rebuild(disk.batches))
            self.c.checker.on_state(self, p, self.states[p], fresh=True)
        self.fetch_sent_ms = {}
        self.payloads = {}

    def crash(self) -> None:
        self.alive = False
        for p, disk in self.disks.items():
            disk.crash()
            self.c.checker.on_data_removed(self, p, disk.end_offset, cause="crash")
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

    # --- the one place the core is driven
    def apply(self, p: int, event) -> None:
        state, effects = core.step(self.states[p], event)
        self.states[p] = state
        for eff in effects:
            self.execute(p, eff)
        self.c.checker.on_state(self, p, state)

    def execute(self, p: int, eff) -> None:
        c, disk, now = self.c, self.disks[p], self.c.now
        match eff:
            case core.AppendAsLeader():
                rids = self.payloads.pop(eff.request_id)
                meta = c.requests[eff.request_id]
                disk.append(BatchInfo(eff.base_offset, eff.record_count, eff.leader_epoch, meta.pid, meta.pepoch,
                                      meta.seq), rids)
            case core.AppendFetched():
                for info in eff.batches:
                    disk.append(info, self._fetched[info.base_offset])
            case core.Truncate():
                disk.truncate(eff.end_offset_exclusive)
                c.checker.on_data_removed(self, p, eff.end_offset_exclusive, cause="truncate",
                                          below_hw=eff.below_high_watermark)
            case core.ProduceCompleted():
                meta = c.requests.get(eff.request_id)
                if meta is not None and meta.acks != 0:
                    c.net.send(now, self.id, CLIENT, ProduceResp(eff.request_id, eff.error, eff.base_offset,
                                                                   self.states[p].leader_epoch))
                self.payloads.pop(eff.request_id, None)
            case core.ReplyFetch():
                batches = () if eff.error is not ErrorCode.NONE or eff.diverging_epoch else tuple(
                    disk.read(eff.fetch_offset, eff.read_end_offset_exclusive))
                rids = tuple(tuple(disk.rids[b.base_offset:b.next_offset]) for b in batches)
                resp = core.FetchResponse(eff.leader_epoch, eff.fetch_offset, eff.last_fetched_epoch, eff.error,
                                          eff.high_watermark, eff.log_start_offset, batches, eff.diverging_epoch)
                target = c.brokers[eff.replica_id]
                c.net.send(now, self.id, eff.replica_id, FetchResp(p, resp, rids), target.incarnation)
            case core.ProposeIsr():
                c.net.send(now, self.id, self.id, ZkWrite(p, eff.proposed, eff.expected_partition_epoch),
                           self.incarnation)
            case _:
                pass  # HighWatermarkChanged, EpochCacheChanged, LeaderAndIsrRefused: nothing to do here

    # --- inputs
    def receive(self, src: int, msg) -> None:
        now = self.c.now
        match msg:
            case LeaderAndIsrMsg():
                if msg.controller_epoch < self.controller_epoch_seen or msg.broker_epoch != self.broker_epoch:
                    return  # stale controller, or meant for another incarnation of this broker
                self.controller_epoch_seen = msg.controller_epoch
                ev = core.BecomeLeader if msg.lai.leader == self.id else core.BecomeFollower
                if msg.lai.leader != self.id and self.id not in msg.replicas:
                    return
                self.apply(msg.p, ev(msg.lai, msg.replicas, (), now))
                self.fetch_sent_ms.pop(msg.p, None)
            case FetchReq():
                self.apply(msg.p, core.FollowerFetch(msg.replica, msg.broker_epoch, msg.current_leader_epoch,
                                                     msg.fetch_offset, msg.last_fetched_epoch, now))
            case FetchResp():
                self.fetch_sent_ms.pop(msg.p, None)
                self._fetched = {b.base_offset: r for b, r in zip(msg.resp.batches, msg.rids)}
                self.apply(msg.p, core.FetchResponse(**{**_fields(msg.resp), "now_ms": now}))
            case ProduceReq():
                self.payloads[msg.req_id] = msg.rids
                self.apply(msg.p, core.Produce(msg.req_id, msg.acks, len(msg.rids), 200, now, msg.pid, msg.pepoch,
                                               msg.seq))
                self.payloads.pop(msg.req_id, None)
            case ZkWrite():
                self._zk_write(msg)

    def _zk_write(self, msg: ZkWrite) -> None:
        now, zk = self.c.now, self.c.zk
        if not self.zk_reachable() or self.session not in zk.sessions:
            self.apply(msg.p, core.IsrUpdateRejected(None, now))
            return
        if zk.cond_write(msg.p, msg.proposed, msg.expected):
            self.apply(msg.p, core.IsrUpdateAccepted(zk.partitions[msg.p], now))
        else:
            self.apply(msg.p, core.IsrUpdateRejected(zk.partitions[msg.p], now))

    def tick(self, now: int) -> None:
        for p in self.states:
            self.apply(p, core.Tick(now))
            req = core.fetch_request(self.states[p])
            if req is None or self.broker_epoch < 0:
                continue
            sent = self.fetch_sent_ms.get(p)
            if sent is not None and now - sent < FETCH_TIMEOUT_MS:
                continue  # one fetch in flight per partition, like a fetcher session
            self.fetch_sent_ms[p] = now
            leader = self.c.brokers.get(req.leader)
            if leader is not None:
                self.c.net.send(now, self.id, req.leader, FetchReq(p, self.id, self.broker_epoch,
                                req.current_leader_epoch, req.fetch_offset, req.last_fetched_epoch),
                                leader.incarnation)
        if now - self.last_flush_ms >= self.c.cfg.flush_every_ms:
            self.last_flush_ms = now
            for p, disk in self.disks.items():
                disk.flush(self.states[p].high_watermark)


def _fields(resp: core.FetchResponse) -> dict:
    return {f: getattr(resp, f) for f in resp.__dataclass_fields__}


class SimController:
    """The controller's runtime: detects broker changes in ZooKeeper and applies election.py's decisions."""

    def __init__(self, cluster: "Cluster", broker_id: int, epoch: int):
        self.c = cluster
        self.broker_id = broker_id
        self.epoch = epoch
        self.last_resend_ms = -10**9

    def views(self, without_restarted: bool = False) -> list[election.PartitionView]:
        """The znodes as decision inputs; ``without_restarted``: as every decision but the pass over broker
        changes takes them (election.without_restarted_members), as the controller's."""
        cfg = self.c.cfg
        views = [election.PartitionView("t", p, self.c.assignment[p], (), lai, cfg.min_insync_replicas, cfg.unclean)
                 for p, lai in sorted(self.c.zk.partitions.items())]
        if not without_restarted:
            return views
        return [election.without_restarted_members(view, self.live_broker_epochs()) for view in views]

    def live_broker_epochs(self) -> dict[int, int]:
        return {b: r.broker_epoch for b, r in self.c.zk.brokers.items()}

    def run(self, now: int) -> None:
        zk = self.c.zk
        live = frozenset(zk.brokers)
        all_brokers = frozenset(self.c.brokers)
        bounced = frozenset(b for b, r in zk.brokers.items() if zk.handled.get(b) != r.broker_epoch)
        unclean = election.unclean_starts_to_apply(
            {b: {"clean_shutdown": zk.brokers[b].clean, "incarnation": zk.brokers[b].incarnation} for b in bounced},
            zk.unclean_applied)
        failed = (all_brokers - live) | bounced
        views = self.views()
        epochs = self.live_broker_epochs()
        decisions = election.on_brokers_changed(views, live, failed, frozenset(unclean), self.epoch,
                                                live_broker_epochs=epochs)
        if any(d.unclean for d in decisions):  # unclean recovery (KIP-966), as controller_candidates.py
            decisions = election.on_brokers_changed(views, live, failed, frozenset(unclean), self.epoch,
                                                    log_ends=self.log_ends(live), live_broker_epochs=epochs)
        changed = set()
        for d in decisions:
            if not zk.cond_write(d.partition, d.new_state, d.expected_partition_epoch, self.epoch):
                return  # fenced or raced: re-read next round
            self.c.checker.on_election(d)
            changed.add(d.partition)
        for b in bounced:
            zk.handled[b] = zk.brokers[b].broker_epoch
        for b, incarnation in unclean.items():
            if election.unclean_start_recorded(b, views, {("t", p) for p in changed}):
                zk.unclean_applied[b] = incarnation
        if now - self.last_resend_ms >= METADATA_RESEND_MS:  # bounded re-push: lossy network
            self.last_resend_ms = now
            self.push(sorted(zk.partitions))
        elif changed:
            self.push(sorted(changed))

    def log_ends(self, live: frozenset[int]) -> dict:
        """What the live replicas would answer the controller's log-end question (read directly: the real
        controller asks over the network and leaves out a replica that does not answer)."""
        out: dict = {}
        for p in self.c.zk.partitions:
            for b in self.c.assignment[p]:
                broker = self.c.brokers[b]
                if b in live and broker.alive:
                    state = broker.states[p]
                    out.setdefault(("t", p), {})[b] = (state.epochs.latest_epoch, state.log_end_offset)
        return out

    def push(self, parts) -> None:
        zk, now = self.c.zk, self.c.now
        for p in parts:
            lai = zk.partitions[p]
            for r in self.c.assignment[p]:
                reg = zk.brokers.get(r)
                if reg is not None:
                    self.c.net.send(now, self.broker_id, r, LeaderAndIsrMsg(p, lai, self.c.assignment[p],
                                    self.epoch, reg.broker_epoch), self.c.brokers[r].incarnation)

    def controlled_shutdown(self, broker_id: int, force: bool = False) -> election.ShutdownPlan:
        plan = election.controlled_shutdown(self.views(without_restarted=True), broker_id, frozenset(self.c.zk.brokers),
                                            self.epoch, force)
        for d in plan.decisions:
            if self.c.zk.cond_write(d.partition, d.new_state, d.expected_partition_epoch, self.epoch):
                self.c.checker.on_election(d)
        self.push(sorted(self.c.zk.partitions))
        return plan


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
        self.assignment = {p: tuple(ids[(p + i) % len(ids)] for i in range(cfg.replication_factor))
                           for p in range(cfg.partitions)}
        for p, reps in self.assignment.items():
            self.zk.partitions[p] = LeaderAndIsr(reps[0], 0, tuple(sorted(reps)), (), 0, 0)
        self.requests: dict[int, RequestMeta] = {}
        self.req_ids = itertools.count(1)
        self.brokers = {b: SimBroker(self, b) for b in ids}
        self.controller: SimController | None = None
        self.producer = None

    # --- time
    def step(self, dt_ms: int) -> None:
        self.now += dt_ms
        now = self.now
        for b in self.brokers.values():
            b.zk_step(now)
        self.zk.expire(now)
        self._controller_step(now)
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

    def _controller_step(self, now: int) -> None:
        zk = self.zk
        if zk.controller is None:
            candidates = [b for b in self.brokers.values()
                          if b.zk_reachable() and b.session in zk.sessions and b.broker_epoch > 0]
            if candidates:
                chosen = min(candidates, key=lambda b: b.id)
                zk.controller = (chosen.id, chosen.session)
                zk.controller_epoch += 1
                self.controller = SimController(self, chosen.id, zk.controller_epoch)
        if self.controller is not None:
            owner = self.brokers[self.controller.broker_id]
            if owner.zk_reachable():
                self.controller.run(now)

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
