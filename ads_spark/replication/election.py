"""The controller's leader decisions, pure: who leads each partition after a change.

Order of choice (ARCHITECTURE.md invariant 7, KIP-966):

1. a live ISR member, in replica order (so the preferred replica first);
2. a live ELR member, in replica order: it left the ISR while the ISR was below
   min ISR, so it holds every committed record (the HW was frozen, hw.py);
3. only with unclean.leader.election.enable: a live, non-observer replica,
   and the result says ``unclean=True`` so the loss is reported, never silent.
   Given the replicas' log ends (the controller asks them first), the one whose
   log holds the most, else in replica order;
4. unclean recovery (KIP-966, automatic): when ISR and ELR are both empty because
   crashes took every member out, and every non-observer replica is live and
   reported its log end, the replica whose log holds the most
   (``most_complete_replica``): every surviving copy of a committed record is in
   a log no longer than the chosen one, so this loses only what no replica kept
   (``recovery=True``, not unclean). Every replica, not only the last known ELR:
   a follower outside the ISR may hold a committed record every ISR member lost
   in the crash (simulation seed 582, min ISR 1). Once the controller has waited
   ``unclean.recovery.timeout.ms`` (``recovery_timed_out``), the members of
   ``last_known_elr`` suffice; a replica still missing then may have held more,
   so that choice is reported as unclean;
5. otherwise no leader: the partition is offline (leader NO_LEADER, epoch bumped).

A broker that restarted after an unclean shutdown is ``ineligible``: it leaves
ISR and ELR and may lead again only after it caught up and the leader
re-admitted it to the ISR (a replica that lost data re-syncs fully first).
An ISR member registered under another broker epoch than the leader's ISR write
recorded for it is no candidate either (``without_restarted_members``).

Every change bumps ``partition_epoch`` (the znode version the write is
conditional on) and a new leader bumps ``leader_epoch``. ``on_brokers_changed``
handles MANY partitions in one pass so the controller writes and notifies in
batches.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Mapping, Sequence

from ads_spark.errors import ErrorCode
from ads_spark.replication.isr import next_elr
from ads_spark.replication.state import NO_LEADER, LeaderAndIsr

@dataclass(frozen=True, slots=True)
class PartitionView:
    """What the controller knows of one partition: assignment, znode and the configs it decides with."""

    topic: str
    partition: int
    replicas: tuple[int, ...]  # preferred first
    observers: tuple[int, ...]
    state: LeaderAndIsr
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False


@dataclass(frozen=True, slots=True)
class Decision:
    """A znode write to make (conditional on ``expected_partition_epoch``) and push to the replicas."""

    topic: str
    partition: int
    new_state: LeaderAndIsr
    expected_partition_epoch: int
    unclean: bool = False  # the new leader was not in ISR/ELR: committed records may be lost
    reason: str = ""
    # Chosen by unclean recovery (rule 4): without log ends yet, a placeholder the controller re-decides once
    # it asked the replicas (it never writes one decided without them).
    recovery: bool = False


@dataclass(frozen=True, slots=True)
class Choice:
    leader: int
    unclean: bool
    recovery: bool = False


# (last leader epoch in its log, log end offset) of one replica, as it answered the controller.
LogEnd = tuple[int, int]


def most_complete_replica(view: PartitionView, candidates: frozenset[int], log_ends: Mapping[int, LogEnd]) -> int:
    """KIP-966's unclean recovery: of ``candidates`` that reported their log end, the one whose log holds
    the most, by last epoch then log end offset (a longer log of an older epoch may hold records a newer
    leader truncated); ties go in replica order. NO_LEADER if none reported."""
    reported = [r for r in view.replicas if r in candidates and r in log_ends]
    if not reported:
        return NO_LEADER
    return max(reported, key=lambda r: (log_ends[r], -view.replicas.index(r)))


def clean_candidates(view: PartitionView, available: frozenset[int], ineligible: frozenset[int]) -> tuple[int, ...]:
    """The replicas a clean election may pick, best first: the ``available`` ISR members, then the
    ``available`` ELR members, each in replica order (so the preferred replica first), none ``ineligible``.

    Only these hold every committed record; any other leader may lose some (an unclean election)."""
    return tuple(r for pool in (view.state.isr, view.state.elr) for r in view.replicas
                 if r in pool and r in available and r not in ineligible)


def recovery_waits_for(view: PartitionView, timed_out: bool = False) -> frozenset[int]:
    """The replicas unclean recovery waits for (rule 4): every non-observer replica; once ``timed_out``,
    the ``last_known_elr`` (without one, still every replica: a state written before it was kept).
    Empty unless ISR and ELR are empty."""
    if view.state.isr or view.state.elr:
        return frozenset()
    every = frozenset(r for r in view.replicas if r not in view.observers)
    return frozenset(view.state.last_known_elr) if timed_out and view.state.last_known_elr else every


def _recovery_choice(view: PartitionView, ok: frozenset[int], log_ends: Mapping[int, LogEnd] | None,
                     timed_out: bool) -> Choice:
    """Rule 4 of the module docstring. ``log_ends`` None: not asked yet, so a placeholder (the first
    available replica) that tells the controller to ask; asked: the most complete of those that reported
    once every replica waited for did, else none. Unclean if a replica did not report."""
    waits_for = recovery_waits_for(view, timed_out)
    if not waits_for or not waits_for <= ok:
        return Choice(NO_LEADER, False)
    if log_ends is None:
        return Choice(next(r for r in view.replicas if r in ok), False, recovery=True)
    if not waits_for <= set(log_ends):
        return Choice(NO_LEADER, False)
    return Choice(most_complete_replica(view, ok, log_ends), not recovery_waits_for(view) <= set(log_ends),
                  recovery=True)


def choose_leader(view: PartitionView, live: frozenset[int], ineligible: frozenset[int] = frozenset(),
                  exclude: frozenset[int] = frozenset(), log_ends: Mapping[int, LogEnd] | None = None,
                  recovery_timed_out: bool = False) -> Choice:
    """Pick the leader by the order in the module docstring (``exclude``: e.g. a broker shutting down).

    ``log_ends``: the log ends the live replicas reported (None: not asked), for an unclean election or
    unclean recovery to pick the most complete one; an unclean election without them (or with none
    reported) goes in replica order, unclean recovery waits (``recovery_timed_out``: see rule 4)."""
    ok = live - exclude - set(view.observers)
    clean = clean_candidates(view, ok, ineligible)
    if clean:
        return Choice(clean[0], False)
    if view.unclean_leader_election_enable:
        best = most_complete_replica(view, ok, log_ends or {})
        if best != NO_LEADER:
            return Choice(best, True)
        for r in view.replicas:
            if r in ok:
                return Choice(r, True)
    return _recovery_choice(view, ok, log_ends, recovery_timed_out)


def _decide(view: PartitionView, isr: frozenset[int], elr: frozenset[int], leader: int, new_epoch: bool,
            controller_epoch: int, unclean: bool, reason: str, last_known_elr: frozenset[int] | None = None,
            recovery: bool = False) -> Decision:
    """The decision writing this state; ``last_known_elr`` None keeps the current one while nobody leads
    and the ISR is empty (its invariant), else it is dropped."""
    cur = view.state
    if leader != NO_LEADER or isr:
        last_known_elr = frozenset()
    elif last_known_elr is None:
        last_known_elr = frozenset(cur.last_known_elr)
    new = LeaderAndIsr(
        leader=leader,
        leader_epoch=cur.leader_epoch + 1 if new_epoch else cur.leader_epoch,
        isr=tuple(sorted(isr)),
        elr=tuple(sorted(elr - isr)),
        partition_epoch=cur.partition_epoch + 1,
        controller_epoch=controller_epoch,
        # The leader's own entry is dropped: leaders record only their followers, and an entry carried over
        # for an unclean choice named the incarnation it had when it was last in sync (seed 547 with unclean
        # election on: the next pass took the new leader for restarted and wrote it out of its own ISR).
        isr_broker_epochs=tuple(pair for pair in cur.isr_broker_epochs if pair[0] in isr and pair[0] != leader),
        last_known_elr=tuple(sorted(last_known_elr)),
    )
    return Decision(view.topic, view.partition, new, cur.partition_epoch, unclean, reason, recovery)


def restarted_members(view: PartitionView, live_broker_epochs: Mapping[int, int]) -> frozenset[int]:
    """ISR members registered under another broker epoch than the ISR write recorded for them.

    Such a member restarted after the leader last heard from it, and the restart may have lost records
    the HW covered: the leader's write adding it can land after the restart, and after the controller
    took the restarted broker out of every ISR (simulation seed 1034869). It is no candidate, it does
    not go to the ELR, and a pass over broker changes writes the ISR without it; its leader removes it
    as well once its fetches show the new epoch. A member without a recorded epoch is not checked.
    """
    cur = view.state
    # Never the leader: a leader that restarted is a failed broker, and the partition gets a new leader.
    return frozenset(member for member, recorded in cur.isr_broker_epochs
                     if member in cur.isr and member != cur.leader
                     and live_broker_epochs.get(member, recorded) != recorded)


def without_restarted_members(view: PartitionView, live_broker_epochs: Mapping[int, int]) -> PartitionView:
    """``view`` without its ``restarted_members``: what any decision other than a pass over broker
    changes (which removes them in a write of its own) must take the ISR to be."""
    restarted = restarted_members(view, live_broker_epochs)
    if not restarted:
        return view
    cur = view.state
    return replace(view, state=replace(cur, isr=tuple(r for r in cur.isr if r not in restarted)))


def elect(view: PartitionView, live: frozenset[int], controller_epoch: int,
          ineligible: frozenset[int] = frozenset(), exclude: frozenset[int] = frozenset(),
          reason: str = "election", log_ends: Mapping[int, LogEnd] | None = None,
          recovery_timed_out: bool = False) -> Decision:
    """A new leader for ``view`` (maybe none), with the ISR and ELR that follow."""
    cur = view.state
    isr = frozenset(cur.isr) - ineligible
    elr = frozenset(cur.elr) - ineligible
    narrowed = replace(view, state=replace(cur, isr=tuple(isr), elr=tuple(elr)))
    choice = choose_leader(narrowed, live, ineligible, exclude, log_ends, recovery_timed_out)
    if choice.leader == NO_LEADER:
        return _decide(view, isr, elr, NO_LEADER, True, controller_epoch, False, reason + ": no eligible leader")
    if choice.recovery:
        found = (f"the most complete of those that reported (last epoch, log end) {dict(log_ends)}"
                 if log_ends is not None else "placeholder until the replicas report their log ends")
        waited = sorted(recovery_waits_for(narrowed, recovery_timed_out))
        lossy = (f"; UNCLEAN: unclean.recovery.timeout.ms passed and replicas "
                 f"{sorted(recovery_waits_for(narrowed) - set(log_ends or ()))} did not report, committed records "
                 f"they hold may be lost" if choice.unclean else "")
        return _decide(view, frozenset({choice.leader}), frozenset(), choice.leader, True, controller_epoch,
                       choice.unclean, reason + f": unclean recovery of replica {choice.leader}, every ISR/ELR member "
                       f"having restarted after a crash and {waited} being back ({found}){lossy}", recovery=True)
    if choice.unclean:
        chosen = (f"the most complete of {len(log_ends)} that reported (last epoch, log end) {log_ends}"
                  if log_ends and choice.leader in log_ends else "in replica order: no log ends reported")
        return _decide(view, frozenset({choice.leader}), frozenset(), choice.leader, True, controller_epoch, True,
                       reason + f": UNCLEAN election of out-of-sync replica {choice.leader} ({chosen}),"
                                f" committed records may be lost")
    if choice.leader in isr:
        return _decide(view, isr, elr, choice.leader, True, controller_epoch, False, reason)
    new_isr = isr | {choice.leader}  # an ELR member leads: it rejoins the ISR
    return _decide(view, new_isr, next_elr(isr, new_isr, elr, view.min_insync_replicas), choice.leader, True,
                   controller_epoch, False, reason + ": from ELR")


def on_brokers_changed(views: Iterable[PartitionView], live: frozenset[int], failed: frozenset[int],
                       unclean_restarted: frozenset[int], controller_epoch: int,
                       log_ends: Mapping[tuple[str, int], Mapping[int, LogEnd]] | None = None,
                       live_broker_epochs: Mapping[int, int] | None = None) -> list[Decision]:
    """One pass over all partitions after brokers died or re-registered.

    ``failed``: brokers whose session ended or whose incarnation was replaced
    (a restart); they leave every ISR. ``unclean_restarted``: of those, the ones
    back after an unclean shutdown; they also leave every ELR. Offline
    partitions get a new leader if one became possible. ``log_ends``: per
    partition, what its live replicas reported, for unclean elections.
    ``live_broker_epochs``: each live broker's registered epoch; the
    ``restarted_members`` of a partition leave its ISR as unclean restarts do.
    """
    decisions = []
    for view in views:
        cur = view.state
        restarted = restarted_members(view, live_broker_epochs or {})
        lost = unclean_restarted | restarted
        old_isr, old_elr = frozenset(cur.isr), frozenset(cur.elr)
        new_isr = old_isr - failed - restarted
        # Dead brokers stay ELR-eligible (KIP-966) unless they came back unclean.
        new_elr = next_elr(old_isr, new_isr, old_elr, view.min_insync_replicas, lost)
        ineligible = lost
        if not new_isr and not new_elr and len(view.replicas) == 1 and set(view.replicas) & lost:
            # The only replica came back from an unclean shutdown: there is no other copy that could hold
            # more, so electing it loses nothing a wait would save (excluding it would leave every RF=1
            # partition offline for ever). With more replicas electing one at once would be an unclean
            # election: the seeded simulation (seed 44) showed followers then truncating committed records,
            # so there the partition waits for unclean recovery (rule 4: every replica back, the longest log)
            # or an ISR/ELR member returning clean.
            new_elr = next_elr(old_isr, new_isr, old_elr, view.min_insync_replicas)
            ineligible = frozenset()
        shrunk = replace(view, state=replace(cur, isr=tuple(new_isr), elr=tuple(new_elr),
                                             last_known_elr=next_last_known_elr(cur, new_isr, new_elr)))
        leader_gone = cur.leader == NO_LEADER or cur.leader in failed or cur.leader not in live
        if leader_gone:
            d = elect(shrunk, live, controller_epoch, ineligible, reason="leader failed",
                      log_ends=ends_of(log_ends, (view.topic, view.partition)))
            if d.new_state.leader == NO_LEADER and cur.leader == NO_LEADER and new_isr == old_isr \
                    and new_elr == old_elr and d.new_state.last_known_elr == cur.last_known_elr:
                continue  # still offline, nothing new to write
            decisions.append(d)
        elif new_isr != old_isr or new_elr != old_elr:
            decisions.append(_decide(view, new_isr, new_elr, cur.leader, False, controller_epoch, False,
                                     f"brokers {sorted((failed | restarted) & old_isr)} left the ISR"))
    return decisions


def next_last_known_elr(cur: LeaderAndIsr, new_isr: frozenset[int], new_elr: frozenset[int]) -> tuple[int, ...]:
    """KIP-966's last known ELR after a pass over broker changes leaves ``new_isr`` / ``new_elr``: while the
    ISR is empty, the ISR and ELR members taken out of both (restarted after a crash, so their unflushed
    tails may be gone) accumulate; they held every committed record before the crash, so past
    unclean.recovery.timeout.ms unclean recovery needs only them back (rule 4). Empty once the ISR is not."""
    if new_isr:
        return ()
    before = set(cur.last_known_elr) if not cur.isr else set()
    return tuple(sorted(before | ((set(cur.isr) | set(cur.elr)) - new_elr)))


def ends_of(log_ends: Mapping[tuple[str, int], Mapping[int, LogEnd]] | None,
            key: tuple[str, int]) -> Mapping[int, LogEnd] | None:
    """One partition's reported log ends: None if nobody was asked yet, {} if asked and none answered (so
    unclean recovery waits instead of taking its placeholder)."""
    return None if log_ends is None else log_ends.get(key, {})


def unclean_starts_to_apply(registrations: dict[int, dict], applied: dict[int, str | None]) -> dict[int, str | None]:
    """Of the registered brokers, those whose unclean start (KIP-966) no controller has applied yet:
    broker id -> the incarnation (the process) that started so.

    ``registrations``: broker id -> its registration ({"clean_shutdown", "incarnation"}); ``applied``:
    broker id -> the incarnation whose unclean start a controller recorded as applied. A process keeps its
    start's flag in every registration, including those after an expired session, which lost nothing:
    applying it again each time dropped the broker from every ELR at each new session, and a partition
    whose ISR members all had their sessions expired stayed offline for good. A registration without an
    incarnation is taken as unclean each time (the safe reading).
    """
    return {broker_id: info.get("incarnation") for broker_id, info in sorted(registrations.items())
            if not info.get("clean_shutdown", True)
            and (info.get("incarnation") is None or applied.get(broker_id) != info.get("incarnation"))}


def unclean_start_recorded(broker_id: int, views: Iterable[PartitionView], written: set) -> bool:
    """Whether the unclean start of ``broker_id`` may be recorded as applied: every partition naming it in
    its ISR or ELR took the decision written for it (``written``: keys; one lost to a race is not)."""
    return all((view.topic, view.partition) in written for view in views
               if broker_id in view.state.isr or broker_id in view.state.elr)


def preferred_leader_election(view: PartitionView, live: frozenset[int],
                              controller_epoch: int) -> Decision | ErrorCode:
    """Move leadership to the preferred replica, only if it is live and in the ISR."""
    preferred = view.replicas[0]
    if view.state.leader == preferred:
        return ErrorCode.ELECTION_NOT_NEEDED
    if preferred not in live or preferred not in view.state.isr:
        return ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    return _decide(view, frozenset(view.state.isr), frozenset(view.state.elr), preferred, True,
                   controller_epoch, False, "preferred leader election")


@dataclass(frozen=True, slots=True)
class ShutdownPlan:
    decisions: tuple[Decision, ...]
    refused: tuple[tuple[str, int], ...]  # partitions the broker still leads/keeps because of min ISR


def controlled_shutdown(views: Sequence[PartitionView], broker_id: int, live: frozenset[int],
                        controller_epoch: int, force: bool = False) -> ShutdownPlan:
    """Move leadership away from ``broker_id`` and take it out of ISRs, without going below min ISR.

    A partition where leaving would drop the ISR below min ISR (or leave no
    other in-sync leader) is refused unless ``force``; the broker should wait
    and retry (controlled.shutdown.max.retries) before stopping anyway.
    """
    decisions, refused = [], []
    for view in views:
        cur = view.state
        if broker_id not in cur.isr and cur.leader != broker_id:
            continue
        remaining = frozenset(cur.isr) - {broker_id}
        others = remaining & (live - {broker_id})
        if not force and (len(remaining) < view.min_insync_replicas or not others):
            refused.append((view.topic, view.partition))
            continue
        # A clean shutdown lost nothing: it stays ELR-eligible if the ISR falls below min.
        elr = next_elr(frozenset(cur.isr), remaining, frozenset(cur.elr), view.min_insync_replicas)
        shrunk = replace(view, state=replace(cur, isr=tuple(remaining), elr=tuple(elr)))
        if cur.leader == broker_id:
            decisions.append(elect(shrunk, live, controller_epoch, exclude=frozenset({broker_id}),
                                   reason=f"controlled shutdown of {broker_id}"))
        else:
            decisions.append(_decide(view, remaining, elr, cur.leader, False, controller_epoch, False,
                                     f"controlled shutdown of {broker_id}"))
    return ShutdownPlan(tuple(decisions), tuple(refused))
