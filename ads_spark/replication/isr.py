"""ISR decisions of a partition leader: who is in sync, and the ISR writes that follow.

* Progress: a follower's LEO is its fetch offset; it is "caught up" at a fetch
  that reaches the leader's LEO, or that reaches the LEO the leader had at the
  follower's previous fetch (Kafka's rule, so a steady stream of produces does
  not make a keeping-up follower look lagging).
* Shrink: an ISR member not caught up for ``replica.lag.time.max.ms``, or whose
  broker epoch changed (it restarted, and may have lost an unflushed tail), or
  whose log ends below the HW (``behind_high_watermark``).
* Expand: a non-ISR replica (never an observer) whose LEO >= HW and >= the
  start offset of the current leader epoch (so it has truncated to this
  leader's history) and who fetched with its current broker epoch.
* Every write records the broker epoch of each follower it names
  (``known_broker_epochs``). A member whose fetches carry a newer one once the
  write is adopted restarted meanwhile and leaves (``restarted_since_recorded``);
  the controller does not elect it meanwhile (election.py).
* ELR (KIP-966): replicas removed while the ISR is below min ISR join the ELR;
  a replica that joins the ISR leaves it; the ELR empties once the ISR reaches
  min ISR again. ``next_elr`` is shared with the controller's election.py.

A change is only proposed here (``proposal``); it takes effect when the
version-conditional ZooKeeper write succeeds (IsrUpdateAccepted in partition.py).
"""

from __future__ import annotations

from ads_spark.replication.state import (
    UNKNOWN_BROKER_EPOCH,
    broker_epoch_recorded,
    FollowerProgress,
    LeaderAndIsr,
    PartitionState,
    PendingIsrChange,
    evolve,
)


def update_progress(prog: FollowerProgress, fetch_offset: int, broker_epoch: int, leader_log_end_offset: int,
                    now_ms: int) -> FollowerProgress:
    """The leader's view of a follower after a valid fetch at ``fetch_offset``."""
    same_incarnation = prog.broker_epoch in (broker_epoch, UNKNOWN_BROKER_EPOCH)
    # A reordered, older fetch of the same incarnation must not move its LEO back.
    leo = max(prog.log_end_offset, fetch_offset) if same_incarnation else fetch_offset
    if fetch_offset >= leader_log_end_offset:
        caught_up_ms = now_ms
    elif prog.last_fetch_leader_leo >= 0 and fetch_offset >= prog.last_fetch_leader_leo:
        caught_up_ms = prog.last_fetch_ms
    else:
        caught_up_ms = prog.last_caught_up_ms
    return FollowerProgress(
        log_end_offset=leo,
        last_caught_up_ms=max(caught_up_ms, prog.last_caught_up_ms),
        last_fetch_ms=now_ms,
        last_fetch_leader_leo=leader_log_end_offset,
        broker_epoch=max(broker_epoch, prog.broker_epoch),
    )


def out_of_sync(state: PartitionState, now_ms: int) -> frozenset[int]:
    """ISR members (not the leader) that lagged too long."""
    lag_max = state.config.replica_lag_time_max_ms
    out = set()
    for replica in state.isr:
        if replica == state.broker_id:
            continue
        prog = state.progress.get(replica)
        if prog is None or now_ms - prog.last_caught_up_ms > lag_max:
            out.add(replica)
    return frozenset(out)


def behind_high_watermark(state: PartitionState) -> frozenset[int]:
    """ISR members (not the leader), heard from in their current incarnation, whose log ends below the HW.

    Only a follower back from a crash that lost part of the committed records gets there: while it is
    in the ISR, the HW never passes its log end. Its restart removes it at its first fetch, but only
    when no other ISR write is in flight; and a write adding it may land after it restarted
    (simulation seed 1034869). It must leave the ISR, and not for the ELR (``_propose_removal``).
    """
    out = set()
    for replica in state.isr:
        if replica == state.broker_id:
            continue
        prog = state.progress.get(replica)
        if (prog is not None and prog.broker_epoch != UNKNOWN_BROKER_EPOCH
                and prog.log_end_offset < state.high_watermark):
            out.add(replica)
    return frozenset(out)


def restarted_since_recorded(state: PartitionState, written: LeaderAndIsr) -> frozenset[int]:
    """ISR members (not the leader) that fetched with a newer broker epoch than ``written`` recorded.

    The write named an incarnation the member has since replaced: a restart seen while the write was in
    flight. The restart may have lost records the HW covers, so the member leaves, as at a restart seen
    with no write in flight; its next fetch may add it back under its new epoch.
    """
    out = set()
    for replica in state.isr:
        recorded = written.recorded_broker_epoch(replica)
        prog = state.progress.get(replica)
        if (replica != state.broker_id and recorded is not None and prog is not None
                and prog.broker_epoch > recorded):
            out.add(replica)
    return frozenset(out)


def known_broker_epochs(state: PartitionState, members: frozenset[int]) -> tuple[tuple[int, int], ...]:
    """The incarnation of each follower in ``members`` for the write: the one this leader heard from, else
    the one the adopted ISR recorded (a member not heard from yet keeps its record: without it, a write
    made before its first fetch dropped the record, and the controller could no longer tell that it
    restarted; simulation seed 201293)."""
    pairs = []
    for member in sorted(members):
        epoch = last_known_broker_epoch(state, member)
        if member != state.broker_id and epoch != UNKNOWN_BROKER_EPOCH:
            pairs.append((member, epoch))
    return tuple(pairs)


def last_known_broker_epoch(state: PartitionState, member: int) -> int:
    """The incarnation of ``member`` this leader heard from, else the one its adopted ISR recorded."""
    prog = state.progress.get(member)
    if prog is not None and prog.broker_epoch != UNKNOWN_BROKER_EPOCH:
        return prog.broker_epoch
    recorded = broker_epoch_recorded(state.recorded_broker_epochs, member)
    return UNKNOWN_BROKER_EPOCH if recorded is None else recorded


def may_join(state: PartitionState, replica: int) -> bool:
    """Whether ``replica`` qualifies to be added to the ISR now."""
    if replica in state.isr or replica in state.observers or replica not in state.replicas:
        return False
    prog = state.progress.get(replica)
    if prog is None or prog.broker_epoch == UNKNOWN_BROKER_EPOCH:
        return False
    return (prog.log_end_offset >= state.high_watermark
            and prog.log_end_offset >= state.leader_epoch_start_offset)


def next_elr(old_isr: frozenset[int], new_isr: frozenset[int], old_elr: frozenset[int], min_insync_replicas: int,
             ineligible: frozenset[int] = frozenset()) -> frozenset[int]:
    """KIP-966 eligible leader replicas after an ISR change."""
    if len(new_isr) >= min_insync_replicas:
        return frozenset()
    # Members removed while the ISR is (now) below min ISR: the HW was computed with
    # them until this change and is frozen from now on, so they hold every committed record.
    removed = old_isr - new_isr
    return (old_elr | removed) - new_isr - ineligible


def proposal(state: PartitionState, new_isr: frozenset[int], now_ms: int,
             ineligible: frozenset[int] = frozenset()) -> tuple[PartitionState, LeaderAndIsr]:
    """Start an ISR write; the returned znode value is conditional on ``state.partition_epoch``."""
    elr = next_elr(state.isr, new_isr, state.elr, state.config.min_insync_replicas, ineligible)
    proposed = LeaderAndIsr(
        leader=state.broker_id,
        leader_epoch=state.leader_epoch,
        isr=tuple(sorted(new_isr)),
        elr=tuple(sorted(elr)),
        partition_epoch=state.partition_epoch,
        isr_broker_epochs=known_broker_epochs(state, new_isr),
    )
    pending = PendingIsrChange(proposed=proposed, maximal_isr=state.isr | new_isr, sent_at_ms=now_ms)
    return evolve(state, pending_isr=pending), proposed
