"""The coordinator's invariants, checked after every step beside checker.py's nine.

10. committed offsets survive failover: for every (group, topic, partition), the
    offset the current coordinator serves (the broker ZooKeeper names leader of the
    group's offsets partition, leading in that epoch, as ``Cluster.leader_state``)
    is the value of the latest commit of it acknowledged to a client, or of a
    commit attempted later, never an older one; it is served with the leader epoch
    and metadata that commit carried. With nothing acknowledged yet it is nothing or
    an attempted value. A leader in the current epoch must have loaded its log.
11. acknowledged generations survive failover: once a member's sync was answered
    NONE in generation g (the coordinator answers it only after the group record of
    g was appended with acks=all), the current coordinator's group has generation
    >= g (generations only grow in the log: a new coordinator may reuse a number
    whose record was never acknowledged, as Kafka's does).

Where checker.py gives up on a partition, so does this: a partition *voided* (a
crash took the last copy of a committed record) is not checked any more, and an
unclean election drops the acknowledgements of the history it replaced (only
later ones are held, as ``rebase_after_unclean`` does for records).
Commits and group records are also records: their acknowledgements go to
``Checker.on_ack``, so invariants 5-7 and the liveness phase follow them too.
"""

from __future__ import annotations

from ads_spark.replication import group_offsets as offsets_core

from tests.sim.checker import Checker

Key = tuple[str, str, int]  # (group, topic, partition)


class CoordinatorChecker(Checker):
    def __init__(self, rebase_after_unclean: bool = True):
        super().__init__(rebase_after_unclean=rebase_after_unclean)
        self.attempted: dict[Key, dict[int, offsets_core.CommitPartition]] = {}
        self.acked_commit: dict[Key, tuple[int, int]] = {}  # key -> (offset, offsets partition)
        self.acked_generation: dict[str, int] = {}  # group -> the latest generation a sync was answered in
        self.commits_acked = 0
        self.coordinator_loads = 0
        self.coordinator_loads_with_commits = 0  # loads that found committed offsets in the log (failovers)
        self.coordinator_checks = 0  # (step, key) pairs where a coordinator's answer was compared

    def on_commit_sent(self, group_id: str, partitions) -> None:
        for part in partitions:
            self.attempted.setdefault((group_id, part.topic, part.partition), {})[part.offset] = part

    def on_commit_acked(self, p: int, group_id: str, partitions, leader_epoch: int) -> None:
        self.commits_acked += 1
        if p in self.voided or self._stale(p, leader_epoch):
            return
        for part in partitions:
            key = (group_id, part.topic, part.partition)
            if part.offset > self.acked_commit.get(key, (-1, p))[0]:
                self.acked_commit[key] = (part.offset, p)

    def on_generation_acked(self, group_id: str, generation: int) -> None:
        """A member's sync answered NONE: the group record of ``generation`` was appended with acks=all."""
        if generation > self.acked_generation.get(group_id, -1):
            self.acked_generation[group_id] = generation

    def on_election(self, decision) -> None:
        super().on_election(decision)
        if decision.unclean and self.rebase_after_unclean:
            self.acked_commit = {k: v for k, v in self.acked_commit.items() if v[1] != decision.partition}
            self.acked_generation = {g: n for g, n in self.acked_generation.items()
                                     if self.cluster.coordinator_of(g)[0] != decision.partition}

    def after_step(self) -> None:
        super().after_step()
        self._check_offsets()
        self._check_generations()

    def _coordinator(self, group_id: str):
        """(offsets partition, its current leader's state, that broker's coordinator) or None: none leads it now,
        or its partition is voided."""
        c = self.cluster
        p, _ = c.coordinator_of(group_id)
        leader = c.leader_state(p)
        if leader is None or p in self.voided:
            return None
        return p, leader, c.brokers[leader.broker_id].coordinator

    def _check_generations(self) -> None:
        for group_id, acked in self.acked_generation.items():
            found = self._coordinator(group_id)
            if found is None:
                continue
            p, leader, coordinator = found
            loaded = coordinator.serving(p, leader.leader_epoch)
            entry = loaded.groups.get(group_id) if loaded else None
            generation = entry.group.generation_id if entry else None
            if loaded is not None and (generation is None or generation < acked):
                self.fail("acknowledged generations survive failover",
                          f"group {group_id} on coordinator {leader.broker_id} (p{p} epoch {leader.leader_epoch}) "
                          f"has generation {generation}, a sync was answered in {acked}")

    def _check_offsets(self) -> None:
        found: dict[str, tuple | None] = {}
        for key, attempts in self.attempted.items():
            group_id, topic, partition = key
            if group_id not in found:
                found[group_id] = self._coordinator(group_id)
            if found[group_id] is None:
                continue
            p, leader, coordinator = found[group_id]
            if coordinator.serving(p, leader.leader_epoch) is None:
                self.fail("the leader of an offsets partition coordinates its groups",
                          f"p{p} leader {leader.broker_id} epoch {leader.leader_epoch} has not loaded its log")
                return
            served = coordinator.fetch(p, group_id, (topic, partition))
            self.coordinator_checks += 1
            acked = self.acked_commit.get(key, (None, p))[0]
            where = f"group {group_id} {topic}-{partition} on coordinator {leader.broker_id} (p{p} epoch {leader.leader_epoch})"
            if served is None:
                if acked is not None:
                    self.fail("acknowledged commits survive failover", f"{where}: serves nothing, acknowledged {acked}")
                continue
            sent = attempts.get(served.offset)
            if sent is None or (served.leader_epoch, served.metadata) != (sent.leader_epoch, sent.metadata):
                self.fail("a coordinator serves only what was committed",
                          f"{where}: serves {served}, never committed as such")
            elif acked is not None and served.offset < acked:
                self.fail("acknowledged commits survive failover",
                          f"{where}: serves {served.offset}, older than the acknowledged {acked}")
