"""The invariants, checked after every step of the simulation.

What is checked, precisely ("replica" = one broker's copy of one partition;
"incarnation" = one run of a broker process, between restarts):

1. one leader per epoch: no two brokers ever hold role LEADER for the same
   (partition, leader epoch);
2. a replica's leader epoch never decreases within an incarnation;
3. a replica's HW never decreases within an incarnation, except by a truncation
   below the HW that the core reported, and that is only allowed in a partition
   that had an (also reported) unclean election;
4. HW <= LEO of every ISR member: for the current leader L (ZooKeeper's leader,
   in its epoch), every member m of L's committed ISR that is alive, follows L
   in the same epoch, is the same incarnation L last heard from and is not
   being removed by L's ISR write in flight, has LEO(m) >= HW(L) (seed 801232:
   a follower back from a crash that lost part of L's committed records, heard
   from while L, cut from ZooKeeper, still retried the write removing it; seed
   201293: such a follower first heard from while L's write adding another
   replica was in flight, removed when its answer is adopted);
5. committed history: the first replica whose HW passes offset o fixes the
   committed record at o; every replica's records below its own HW must be the
   same record (so replica logs are identical below the HW, and what any
   reader saw below a HW never changes);
6. acknowledged acks=all records: at ack time the record is in the committed
   history at its offset and on every ISR member as in 4;
7. no committed (hence no acknowledged) record is lost: when a truncation or a
   crash removes a committed record from a replica, some replica's disk must
   still hold it. If the last copy went in a crash (all holders crashed and lost
   their unflushed tails: outside Kafka's "one in-sync replica alive"
   guarantee) the partition is marked *voided* and not checked further;
   if it went by a truncation, it is a violation;
8. consumers (reading the leader, or a follower KIP-392 style) never see an
   offset >= that replica's HW, and what they see is the committed history;
9. idempotence: no record id appears twice in the committed history.

After an unclean election (random schedules run with unclean election on in
one seed of eight), 5-9 start again from the new history instead of stopping
(``rebase_after_unclean``): the committed history becomes the new leader's log
up to its HW, and replicas and acknowledgements of epochs before that election
are not checked against it (a stale replica keeps old records below its HW
until it truncates; a leader cut off from ZooKeeper may still acknowledge in
its old epoch: both by design). Everything committed after the election is
checked as before, until the next unclean election.

How it sees the run (cluster.py): the simulated broker calls ``on_state`` with a
partition's state after every call into its ``Partition`` shell (``fresh`` when a
process starts), ``on_data_removed`` when the log truncates (``SimLog.on_removed``)
and when a crash loses an unflushed tail; the controller's environment
(controller_env.py) calls ``on_election`` for each decision of the real core that
ZooKeeper accepted; clients call ``on_ack`` and ``on_consume``. It reads logs'
record ids directly, and the active controller core's state for the check of
what it may elect (``_electable_members``). The liveness phase (liveness.py)
ends each random schedule and records its failure here too.
"""

from __future__ import annotations

from ads_spark.replication import isr as isr_rules
from ads_spark.replication import controller_decisions as decide
from ads_spark.replication.state import Role


class Checker:
    def __init__(self, rebase_after_unclean: bool = False):
        """``rebase_after_unclean``: an unclean election, which may lose committed records by design, starts
        the partition's history (5-9) again from the new leader's log (the module docstring); random
        schedules with unclean election on use it. The transcripts leave it off: their Jepsen case must
        show the loss."""
        self.rebase_after_unclean = rebase_after_unclean
        # Invariant: a replica or acknowledgement of partition p in an epoch below unclean_epoch[p] is not
        # checked against the history (it may hold or acknowledge what the unclean election dropped).
        self.unclean_epoch: dict[int, int] = {}
        self.acked_after_rebase = 0  # acks=all records checked against a history started by an unclean election
        # (broker, p): replicas that may hold records of a history an unclean election replaced; checked again
        # once they agree with the new one below their HW (``_reconciles``)
        self.unreconciled: set[tuple[int, int]] = set()
        self.cluster = None
        self.step_no = 0
        self.violations: list[str] = []
        self.leader_of_epoch: dict[tuple[int, int], int] = {}
        self._decision_views: tuple = (None, None, ())  # (core state, function, its views): see _electable_members
        self.last_epoch: dict[tuple[int, int, int], int] = {}
        self.last_hw: dict[tuple[int, int, int], int] = {}
        self.reference: dict[int, list[int]] = {}
        self.seen_rids: dict[int, set[int]] = {}
        self.checked_upto: dict[tuple[int, int], int] = {}
        self.unclean: set[int] = set()
        self.unclean_reasons: list[str] = []
        self.elections: list[str] = []
        self.voided: set[int] = set()
        self.acked_all = 0
        # p -> offset -> record of every acks=all acknowledgement checked against the history (the liveness
        # phase requires each readable in the end); emptied when an unclean election restarts the history
        self.acked: dict[int, dict[int, int]] = {}
        self.acked_one = 0
        self.consumed = 0
        self.losses: list[str] = []

    def fail(self, invariant: str, detail: str) -> None:
        if len(self.violations) < 20:
            self.violations.append(f'invariant "{invariant}": {detail} (step {self.step_no}, t={self.cluster.now}ms)')

    # ---- hooks called by the model
    def on_election(self, decision) -> None:
        self.elections.append(decision.reason)
        if decision.unclean:
            self.unclean.add(decision.partition)
            self.unclean_reasons.append(decision.reason)
            if self.rebase_after_unclean:
                self._rebase(decision.partition, decision.new_state.leader, decision.new_state.leader_epoch)

    def _rebase(self, p: int, leader_id: int, epoch: int) -> None:
        """The history of ``p`` starts again from what its new leader holds below its HW."""
        self.unclean_epoch[p] = epoch
        self.voided.discard(p)
        leader = self.cluster.brokers.get(leader_id)
        committed = []
        if leader is not None:
            disk = leader.disks[p]
            committed = list(disk.rids[:min(leader.states[p].high_watermark, disk.log_end_offset)])
        self.reference[p] = committed
        self.seen_rids[p] = set(committed)
        self.acked.pop(p, None)  # acknowledged in the history the election replaced: it may lose them
        self.unreconciled |= {(b, p) for b in self.cluster.brokers if b != leader_id}
        if leader is not None:
            self.checked_upto[(leader_id, p)] = len(committed)

    def _stale(self, p: int, epoch: int) -> bool:
        return epoch < self.unclean_epoch.get(p, -1)

    def on_state(self, broker, p: int, state, fresh: bool = False) -> None:
        key = (broker.id, broker.incarnation, p)
        if fresh:
            self.checked_upto[(broker.id, p)] = 0
            self.last_hw[key] = state.high_watermark
        if state.role is Role.LEADER:
            holder = self.leader_of_epoch.setdefault((p, state.leader_epoch), broker.id)
            if holder != broker.id:
                self.fail("one leader per epoch", f"p{p} epoch {state.leader_epoch}: brokers {holder} and {broker.id}")
        if state.leader_epoch < self.last_epoch.get(key, -1):
            self.fail("leader epoch never decreases", f"broker {broker.id} p{p}")
        self.last_epoch[key] = state.leader_epoch
        if state.high_watermark < self.last_hw.get(key, 0) and p not in self.unclean:
            self.fail("HW never decreases", f"broker {broker.id} p{p}: {self.last_hw[key]} -> {state.high_watermark}")
        self.last_hw[key] = state.high_watermark
        replica = (broker.id, p)
        if self._stale(p, state.leader_epoch):
            self.unreconciled.add(replica)
        elif state.role is Role.LEADER:  # its log is the history from here on: checked as it grows
            self.unreconciled.discard(replica)
            self._check_committed(broker, p, state.high_watermark)
        elif replica not in self.unreconciled or self._reconciles(broker, p, state.high_watermark):
            self._check_committed(broker, p, state.high_watermark)

    def _reconciles(self, broker, p: int, hw: int) -> bool:
        """Whether a replica that held records of the history before an unclean election now agrees with the
        new one below its HW (it has truncated what it must); from then on it is checked as any other."""
        disk, ref = broker.disks[p], self.reference.get(p, [])
        end = min(hw, disk.log_end_offset)
        # Above the history so far it could only add records nobody has checked (seed 1587: a follower back
        # from a crash with the old history's HW): it waits until the leader's HW has passed its own.
        if end > len(ref) or any(disk.rids[o] != ref[o] for o in range(end)):
            return False
        self.unreconciled.discard((broker.id, p))
        self.checked_upto[(broker.id, p)] = end
        return True

    def _check_committed(self, broker, p: int, hw: int) -> None:
        if p in self.voided:
            return
        disk = broker.disks[p]
        ref = self.reference.setdefault(p, [])
        seen = self.seen_rids.setdefault(p, set())
        start = self.checked_upto.get((broker.id, p), 0)
        for o in range(start, min(hw, disk.log_end_offset)):
            rid = disk.rids[o]
            if o < len(ref):
                if ref[o] != rid:
                    self.fail("replica logs identical below the HW",
                              f"p{p} offset {o}: broker {broker.id} has record {rid}, committed was {ref[o]}")
                    return
            elif o == len(ref):
                if rid in seen:
                    self.fail("idempotence: no record committed twice", f"p{p} record {rid} again at {o}")
                seen.add(rid)
                ref.append(rid)
        if hw > start:
            self.checked_upto[(broker.id, p)] = max(start, min(hw, disk.log_end_offset))

    def on_data_removed(self, broker, p: int, new_end: int, cause: str, below_hw: bool = False) -> None:
        key = (broker.id, p)
        self.checked_upto[key] = min(self.checked_upto.get(key, 0), new_end)
        if below_hw and p not in self.unclean:
            self.fail("truncate never below the HW without an unclean election", f"broker {broker.id} p{p} to {new_end}")
        if p in self.voided:
            return
        ref = self.reference.get(p, [])
        for o in range(new_end, len(ref)):
            holders = [b.id for b in self.cluster.brokers.values()
                       if b.disks[p].log_end_offset > o and b.disks[p].rids[o] == ref[o]]
            if not holders:
                if cause == "crash":
                    self.voided.add(p)
                    return
                msg = f"p{p} committed record {ref[o]} at offset {o} gone after {cause} on broker {broker.id}"
                self.losses.append(msg)
                self.fail("no acknowledged record lost", msg)
                return

    def on_ack(self, p: int, acks: int, base_offset: int, rids: tuple[int, ...], leader_epoch: int = -1) -> None:
        if acks != -1:
            self.acked_one += len(rids)
            return
        self.acked_all += len(rids)
        if p in self.voided or self._stale(p, leader_epoch):
            return
        if p in self.unclean_epoch:
            self.acked_after_rebase += len(rids)
        ref = self.reference.get(p, [])
        for i, rid in enumerate(rids):
            o = base_offset + i
            if o >= len(ref) or ref[o] != rid:
                self.fail("acks=all acknowledged only when committed",
                          f"p{p} record {rid} acked at {o}, committed history has "
                          f"{ref[o] if o < len(ref) else 'nothing'}")
                return
            self.acked.setdefault(p, {})[o] = rid
        leader = self.cluster.leader_state(p)
        if leader is not None:
            for m, disk in self._synced_members(p, leader):
                last = base_offset + len(rids) - 1
                if disk.log_end_offset <= last or disk.rids[last] != rids[-1]:
                    self.fail("acked records on every ISR member", f"p{p} offset {last} missing on broker {m}")

    def acked_records(self, p: int) -> list[tuple[int, int]]:
        """(offset, record) of the acks=all acknowledgements of ``p`` the cluster is held to (none once a crash
        took the last copy of a committed record: the partition is voided)."""
        return [] if p in self.voided else sorted(self.acked.get(p, {}).items())

    def _synced_members(self, p: int, leader):
        # Being removed: left out of the write in flight, or (seed 201293) found below the HW while that
        # write is in flight, which the leader cannot recall; it removes the member when the answer is
        # adopted (partition._lost_members). The controller-side check below covers its being elected.
        removing: frozenset[int] = frozenset()
        if leader.pending_isr is not None:
            removing = ((leader.isr - frozenset(leader.pending_isr.proposed.isr))
                        | isr_rules.behind_high_watermark(leader))
        for m in leader.isr:
            if m == leader.broker_id:
                continue
            b = self.cluster.brokers[m]
            s = b.states[p]
            prog = leader.progress.get(m)
            if (b.alive and prog is not None and b.broker_epoch == prog.broker_epoch and s.role is Role.FOLLOWER
                    and s.leader_epoch == leader.leader_epoch and m not in removing):
                yield m, b.disks[p]

    def after_step(self) -> None:
        self.step_no += 1
        electable = self._electable_members()
        for p in self.cluster.zk.partitions:
            leader = self.cluster.leader_state(p)
            if leader is None or (p in self.unclean and not self.rebase_after_unclean):
                continue
            if self._stale(p, leader.leader_epoch):
                continue
            for m, disk in self._synced_members(p, leader):
                if disk.log_end_offset < leader.high_watermark:
                    self.fail("HW <= LEO of every ISR member",
                              f"p{p} leader {leader.broker_id} HW {leader.high_watermark} > LEO {disk.log_end_offset} of {m}")
            for m, disk in electable.get(p, ()):
                if disk.log_end_offset < leader.high_watermark:
                    self.fail("every replica the controller may elect cleanly holds the committed records",
                              f"p{p} leader {leader.broker_id} HW {leader.high_watermark} > LEO {disk.log_end_offset} "
                              f"of ISR/ELR member {m} in the controller's view")

    def _electable_members(self) -> dict:
        """Per partition, the ISR and ELR members the active controller would elect cleanly now, alive in the
        incarnation it last read, with their logs.

        The leader's own view (``_synced_members``) misses a member that a write added after it restarted
        (seed 1034869): the leader removes it only once that write's answer comes back, and the controller
        could elect it meanwhile. This check reads the core's own state through its own decision views
        (``controller_decisions.decision_views``); a view older than the znode is left out, as a decision
        taken from it loses its conditional write.
        """
        c = self.cluster
        state = c.controllers.active_state()
        if state is None:
            return {}
        zk, out = c.zk, {}
        if self._decision_views[:2] != (state, decide.decision_views):  # a state is a value: reuse its views
            self._decision_views = (state, decide.decision_views, decide.decision_views(state, state.views.values()))
        for view in self._decision_views[2]:
            if view.state.partition_epoch != zk.partitions[view.partition].partition_epoch:
                continue
            for m in (*view.state.isr, *view.state.elr):
                reg, b = state.live.get(m), c.brokers[m]
                if reg is not None and b.alive and b.broker_epoch == reg.broker_epoch:
                    out.setdefault(view.partition, []).append((m, b.disks[view.partition]))
        return out

    def on_consume(self, broker, p: int, start: int, end_exclusive: int) -> None:
        state, disk = broker.states[p], broker.disks[p]
        if end_exclusive > state.high_watermark:
            self.fail("consumers never see an offset >= HW", f"p{p} read to {end_exclusive} > HW {state.high_watermark}")
        ref = self.reference.get(p, [])
        # A replica that has not truncated what an unclean election dropped still serves it up to its old HW,
        # as a Kafka follower does before its first fetch in the new epoch: part of what the election lost.
        unchecked = p in self.voided or self._stale(p, state.leader_epoch) or (broker.id, p) in self.unreconciled
        for o in range(start, min(end_exclusive, disk.log_end_offset)):
            self.consumed += 1
            if not unchecked and (o >= len(ref) or ref[o] != disk.rids[o]):
                self.fail("consumers see only committed records", f"p{p} offset {o} on broker {broker.id}")
                return
