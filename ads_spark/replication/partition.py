"""The dispatcher: ``step(state, event) -> (state, effects)`` for one partition replica on one broker.

How the broker drives it (the contract for ``ads_spark/broker``):

* The broker owns one ``PartitionState`` per hosted partition, built at start
  by ``initial_state`` from what recovery found on disk (log start/end, HW
  checkpoint, the epoch cache and producer table rebuilt from batch headers).
* Every change goes through ``step`` under that partition's lock: a produce, a
  follower's fetch, a fetch response on a follower, a controller's
  leader-and-isr, the answer to an ISR write, and a periodic ``Tick(now_ms)``
  (every ~``replica.lag.time.max.ms / 2`` or faster). Time is always an input.
* The broker executes the returned effects **in list order, before feeding the
  next event of the same partition**: ``AppendAsLeader`` / ``AppendFetched`` /
  ``Truncate`` / ``ResetLog`` are disk writes the state already assumes done;
  ``ProposeIsr`` is a ZooKeeper write conditional on the znode version whose
  outcome comes back as ``IsrUpdateAccepted`` / ``IsrUpdateRejected``;
  ``ReplyFetch`` says what to read and send; ``ProduceCompleted`` answers a
  produce; ``HighWatermarkChanged`` / ``EpochCacheChanged`` are checkpoints to
  persist lazily and wake-ups for long-polling fetches.
* A follower asks ``fetch_request(state)`` what to fetch next; its fetcher
  sends it and feeds the answer back as ``FetchResponse``.
* Consumers ask ``check_consumer_fetch`` for the bound they may read to (HW).

Errors here are outcomes (ErrorCode in an effect); only a broken invariant
raises ``InvariantViolation``. ``check_invariants`` runs after every step that
changes the state (an unchanged state was checked when it was made).
"""

from __future__ import annotations

from dataclasses import dataclass

from ads_spark.errors import ErrorCode, InvariantViolation
from ads_spark.replication import acks, dedupe, epochs, hw, isr, roles
from ads_spark.replication.state import (
    FollowerProgress,
    PartitionConfig,
    LeaderAndIsr,
    PartitionState,
    PendingProduce,
    Role,
    BatchInfo,
    UNKNOWN_BROKER_EPOCH,
    check_invariants,
    evolve,
)

from ads_spark.replication.events import (  # noqa: F401 (re-exported: the broker and tests use partition.X)
    BecomeLeader,
    BecomeFollower,
    StopReplica,
    Produce,
    FollowerFetch,
    FetchResponse,
    Tick,
    IsrUpdateAccepted,
    IsrUpdateRejected,
    LogStartAdvanced,
    ConfigChanged,
    AppendAsLeader,
    AppendFetched,
    Truncate,
    ResetLog,
    HighWatermarkChanged,
    EpochCacheChanged,
    ProduceCompleted,
    ReplyFetch,
    ProposeIsr,
    LeaderAndIsrRefused,
    Event,
    Effect,
)

# ------------------------------------------------------------ the dispatcher


def initial_state(topic: str, partition: int, broker_id: int, config: PartitionConfig, *, log_start_offset: int = 0,
                  log_end_offset: int = 0, high_watermark_checkpoint: int = 0,
                  epoch_pairs: tuple[tuple[int, int], ...] = (),
                  producers: dedupe.ProducerTable = dedupe.ProducerTable()) -> PartitionState:
    """A replica as recovery left it: role NONE until the controller speaks."""
    cache = epochs.truncate_from_end(epochs.from_pairs(epoch_pairs), log_end_offset + 1)
    high_watermark = max(log_start_offset, min(high_watermark_checkpoint, log_end_offset))
    state = PartitionState(topic=topic, partition=partition, broker_id=broker_id, config=config,
                           log_start_offset=log_start_offset, log_end_offset=log_end_offset,
                           high_watermark=high_watermark, epochs=cache, producers=producers)
    check_invariants(state)
    return state


def step(state: PartitionState, event: Event) -> tuple[PartitionState, list[Effect]]:
    """Apply one event; the only way a replica's replication state changes."""
    match event:
        case BecomeLeader() | BecomeFollower():
            new, effects = _on_leader_and_isr(state, event)
        case StopReplica():
            new, done = roles.stop(state)
            effects = _completions(done)
        case Produce():
            new, effects = _on_produce(state, event)
        case FollowerFetch():
            new, effects = _on_follower_fetch(state, event)
        case FetchResponse():
            new, effects = _on_fetch_response(state, event)
        case Tick(now_ms=now_ms):
            new, effects = _on_tick(state, now_ms)
        case IsrUpdateAccepted():
            new, effects = _on_isr_accepted(state, event)
        case IsrUpdateRejected():
            new, effects = _on_isr_rejected(state, event)
        case LogStartAdvanced():
            new, effects = _on_log_start_advanced(state, event)
        case ConfigChanged():
            # A lower min ISR may complete waiting produces; a higher one may fail them.
            new, effects = _settle(state, evolve(state, config=event.config), event.now_ms)
        case _:
            raise InvariantViolation(f"unknown event {event!r}")
    if new is not state:
        check_invariants(new)
    return new, effects


def _completions(done: list[acks.Completion]) -> list[Effect]:
    return [ProduceCompleted(c.request_id, c.error, c.base_offset) for c in done]


def _settle(old: PartitionState, state: PartitionState, now_ms: int) -> tuple[PartitionState, list[Effect]]:
    """After any leader change of LEO/progress/ISR: advance the HW and answer what can be answered."""
    new_hw = hw.next_high_watermark(state)
    effects: list[Effect] = []
    if new_hw != state.high_watermark:
        state = evolve(state, high_watermark=new_hw)
    if state.high_watermark != old.high_watermark:
        effects.append(HighWatermarkChanged(state.high_watermark))
    if state.pending_produces:
        rest, done = acks.complete(state.pending_produces, state.high_watermark, len(state.isr),
                                   state.config.min_insync_replicas, now_ms)
        state = evolve(state, pending_produces=rest)
        effects.extend(_completions(done))
    return state, effects


def _on_leader_and_isr(state: PartitionState, event: BecomeLeader | BecomeFollower):
    lai = event.leader_and_isr
    refusal = roles.check_leader_and_isr(state, lai)
    if refusal is not None:
        return state, [LeaderAndIsrRefused(refusal.error, refusal.message)]
    if isinstance(event, BecomeLeader):
        if lai.leader != state.broker_id:
            raise InvariantViolation(f"BecomeLeader for leader {lai.leader} sent to broker {state.broker_id}")
        new, done = roles.become_leader(state, lai, event.replicas, event.observers, event.now_ms)
    else:
        new, done = roles.become_follower(state, lai, event.replicas, event.observers)
    effects: list[Effect] = _completions(done)
    target = truncation_on_becoming_follower(new) if new.role is Role.FOLLOWER else None
    if target is not None:
        new, truncated = _truncate_to(new, target)
        effects.extend(truncated)
    if new.epochs != state.epochs:
        effects.append(EpochCacheChanged(tuple(new.epochs.as_pairs())))
    new, more = _settle(state, new, event.now_ms)
    return new, effects + more


def _on_produce(state: PartitionState, event: Produce):
    error = acks.check_before_append(state, event.acks)
    if error is not ErrorCode.NONE:
        return state, [ProduceCompleted(event.request_id, error, -1)]
    verdict = dedupe.check(state.producers, event.producer_id, event.producer_epoch, event.base_sequence,
                           event.record_count)
    effects: list[Effect] = []
    match verdict:
        case dedupe.Duplicate(base_offset=base, last_offset=last):
            pass
        case dedupe.Append():
            base, last = state.log_end_offset, state.log_end_offset + event.record_count - 1
            batch = BatchInfo(base, event.record_count, state.leader_epoch, event.producer_id,
                              event.producer_epoch, event.base_sequence)
            state = evolve(state, log_end_offset=last + 1,
                           producers=dedupe.record_append(state.producers, batch))
            effects.append(AppendAsLeader(event.request_id, base, event.record_count, state.leader_epoch))
        case dedupe.OutOfOrderSequence():
            return state, [ProduceCompleted(event.request_id, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)]
        case dedupe.InvalidProducerEpoch():
            return state, [ProduceCompleted(event.request_id, ErrorCode.INVALID_PRODUCER_EPOCH, -1)]
        case _:
            return state, [ProduceCompleted(event.request_id, ErrorCode.UNKNOWN_PRODUCER_ID, -1)]
    if event.acks == acks.Acks.ALL:
        pending = PendingProduce(event.request_id, base, last, event.now_ms + event.timeout_ms)
        old = state
        state = evolve(state, pending_produces=acks.add_pending(state.pending_produces, pending))
    else:
        old = state
        if event.acks == acks.Acks.LEADER:
            effects.append(ProduceCompleted(event.request_id, ErrorCode.NONE, base))
    new, more = _settle(old, state, event.now_ms)
    return new, effects + more


def _fetch_error(state: PartitionState, event: FollowerFetch) -> ErrorCode:
    if state.role is not Role.LEADER or state.fenced:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    if event.current_leader_epoch < state.leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    if event.current_leader_epoch > state.leader_epoch:
        return ErrorCode.UNKNOWN_LEADER_EPOCH
    if event.replica_id not in state.progress:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    if event.broker_epoch < state.progress[event.replica_id].broker_epoch:
        return ErrorCode.STALE_BROKER_EPOCH
    return ErrorCode.NONE


def _on_follower_fetch(state: PartitionState, event: FollowerFetch):
    def reply(error: ErrorCode, s: PartitionState, diverging=None) -> ReplyFetch:
        return ReplyFetch(event.replica_id, error, s.leader_epoch, event.fetch_offset, event.last_fetched_epoch,
                          s.log_end_offset, s.high_watermark, s.log_start_offset, diverging)

    error = _fetch_error(state, event)
    if error is not ErrorCode.NONE:
        return state, [reply(error, state)]
    diverging = epochs.diverging_epoch(state.epochs, state.log_end_offset, event.fetch_offset,
                                       event.last_fetched_epoch)
    if diverging is not None:
        return state, [reply(ErrorCode.NONE, state, diverging)]
    if event.fetch_offset > state.log_end_offset or event.fetch_offset < state.log_start_offset:
        return state, [reply(ErrorCode.OFFSET_OUT_OF_RANGE, state)]
    old_prog = state.progress[event.replica_id]
    if _repeats_caught_up_fetch(state, old_prog, event):
        return state, [reply(ErrorCode.NONE, state)]
    prog = isr.update_progress(old_prog, event.fetch_offset, event.broker_epoch, state.log_end_offset, event.now_ms)
    new = evolve(state, progress={**state.progress, event.replica_id: prog})
    effects: list[Effect] = []
    known = isr.last_known_broker_epoch(state, event.replica_id)
    restarted = known != UNKNOWN_BROKER_EPOCH and event.broker_epoch > known
    # A member whose log ends below the HW lost committed records (a crash): its first fetch to a leader
    # that never heard from it shows no new broker epoch, only the short log (simulation seed 201293).
    behind = prog.log_end_offset < new.high_watermark
    if new.pending_isr is None:
        if (restarted or behind) and event.replica_id in new.isr:
            new, effects = _propose_removal(new, event.now_ms, lost=frozenset({event.replica_id}))
        elif isr.may_join(new, event.replica_id):
            # Never re-propose a member known to lack committed records along with the one joining.
            lost = isr.behind_high_watermark(new)
            new, proposed = isr.proposal(new, (new.isr - lost) | {event.replica_id}, event.now_ms, ineligible=lost)
            effects.append(ProposeIsr(proposed, proposed.partition_epoch))
    new, more = _settle(state, new, event.now_ms)
    return new, effects + more + [reply(ErrorCode.NONE, new)]


# An ISR member that keeps asking at the leader's unchanged log end is answered without a new
# state for up to this long (capped at a tenth of replica.lag.time.max.ms).
REPEATED_FETCH_REFRESH_MS_MAX = 500


def _repeats_caught_up_fetch(state: PartitionState, prog: FollowerProgress, event: FollowerFetch) -> bool:
    """Whether this fetch only repeats one already stepped: an ISR member, same incarnation, asking again
    at the leader's log end, which has not moved since that fetch, which was itself caught up.

    Stepping it would only move the follower's fetch and caught-up times forward: its LEO, the HW,
    the ISR and the waiting produces stay as they are. A follower fetches every partition it follows
    on this leader each time it fetches any: with 30 idle RF=3 partitions, follower-fetch steps were
    ~40% of a leader's busy time (py-spy), nearly all of them such repeats. They are answered from the state as it is, and stepped again once the recorded fetch
    is ``refresh`` old, so the follower's caught-up time lags by at most that: a tenth of the ISR lag
    bound, never enough to take a follower that keeps up out of the ISR.
    """
    refresh_ms = min(REPEATED_FETCH_REFRESH_MS_MAX, state.config.replica_lag_time_max_ms // 10)
    # The leader's LEO cannot have moved since that fetch: a follower's LEO never passes the leader LEO
    # it fetched under, and a leader's LEO only grows within its epoch (the progress resets with it).
    return (event.fetch_offset == state.log_end_offset == prog.log_end_offset
            and prog.last_caught_up_ms == prog.last_fetch_ms
            and event.now_ms - prog.last_fetch_ms < refresh_ms
            and event.broker_epoch == prog.broker_epoch
            and event.replica_id in state.isr and state.pending_isr is None)


def _on_log_start_advanced(state: PartitionState, event: LogStartAdvanced):
    start = event.log_start_offset
    if start <= state.log_start_offset:
        return state, []
    if start > state.high_watermark:
        raise InvariantViolation(f"log start {start} would pass the HW {state.high_watermark}: uncommitted data deleted")
    new = evolve(state, log_start_offset=start, epochs=epochs.truncate_from_start(state.epochs, start))
    return new, [EpochCacheChanged(tuple(new.epochs.as_pairs()))] if new.epochs != state.epochs else []


def _on_fetch_response(state: PartitionState, event: FetchResponse):
    if (state.role is Role.FOLLOWER and event.leader_epoch == state.leader_epoch
            and event.error is ErrorCode.OFFSET_OUT_OF_RANGE and event.log_start_offset > state.log_end_offset):
        # Everything this follower has is older than the leader's log start (retention ran): start over there.
        event = evolve(event, error=ErrorCode.NONE, fetch_offset=state.log_end_offset, batches=())
    if (state.role is not Role.FOLLOWER or event.leader_epoch != state.leader_epoch
            or event.fetch_offset != state.log_end_offset or event.last_fetched_epoch != state.epochs.latest_epoch
            or event.error is not ErrorCode.NONE):
        # Stale, or an error the fetcher handles by backing off and refreshing metadata. The log
        # position must match in full: a late answer to a fetch from before a truncation and re-fetch
        # to the same end offset told this follower to truncate again, below offsets it had since
        # reported to the leader, which counted them towards the HW (simulation seed 203695).
        return state, []
    if event.diverging_epoch is not None:
        return _truncate_to(state, truncation_on_divergence(state, event.diverging_epoch))
    if event.log_start_offset > state.log_end_offset:
        new = evolve(state, log_start_offset=event.log_start_offset, log_end_offset=event.log_start_offset,
                     high_watermark=event.log_start_offset, epochs=epochs.EpochCache(),
                     producers=dedupe.ProducerTable())
        return new, [ResetLog(event.log_start_offset)]
    new, effects = state, []
    if event.batches:
        new = _append_fetched(state, event)
        effects.append(AppendFetched(event.batches))
        if new.epochs != state.epochs:
            effects.append(EpochCacheChanged(tuple(new.epochs.as_pairs())))
    new_hw = hw.follower_high_watermark(new.high_watermark, event.high_watermark, new.log_end_offset)
    if new_hw != state.high_watermark:
        new = evolve(new, high_watermark=new_hw)
        effects.append(HighWatermarkChanged(new_hw))
    return new, effects


def _append_fetched(state: PartitionState, event: FetchResponse) -> PartitionState:
    leo, cache, producers = state.log_end_offset, state.epochs, state.producers
    for batch in event.batches:
        # A batch after the log end: the leader's cleaner left a gap there (fetched.py checked which gaps).
        if batch.base_offset < leo or batch.record_count <= 0:
            raise InvariantViolation(f"fetched batch at {batch.base_offset} does not continue the log at {leo}")
        if batch.leader_epoch > event.leader_epoch or batch.leader_epoch < cache.latest_epoch:
            raise InvariantViolation(f"fetched batch epoch {batch.leader_epoch} out of order"
                                     f" (cache latest {cache.latest_epoch}, leader {event.leader_epoch})")
        cache = epochs.assign(cache, batch.leader_epoch, batch.base_offset)
        producers = dedupe.record_append(producers, batch)
        leo = batch.base_offset + batch.record_count
    return evolve(state, log_end_offset=leo, epochs=cache, producers=producers)


def truncation_on_becoming_follower(state: PartitionState) -> int | None:
    """Where a replica that just became a follower cuts its log: nowhere (None).

    KIP-101: it keeps its log and cuts only where its fetches find it diverging from the leader's
    (``truncation_on_divergence``). Cutting to its own HW, as before KIP-101, may drop committed
    records: a follower's HW lags the leader's, so records the leader counted as committed may sit
    above it."""
    return None


def truncation_on_divergence(state: PartitionState, diverging_epoch: tuple[int, int]) -> int:
    """Where a follower cuts its log when the leader answers a fetch with ``diverging_epoch`` (the
    leader's (epoch, end offset) for the follower's last epoch): the end of the prefix both logs
    share, never the follower's HW (which may be stale, see ``truncation_on_becoming_follower``)."""
    return epochs.truncation_target(state.epochs, state.log_end_offset, diverging_epoch)


def _truncate_to(state: PartitionState, target: int):
    if target >= state.log_end_offset:
        # Nothing to cut from the log, but an epoch this replica started without writing a record
        # (it led briefly) may sit at the target; keeping it would make every later fetch diverge
        # at the same point again and never progress.
        cache = epochs.truncate_from_end(state.epochs, target)
        if cache == state.epochs:
            return state, []
        new = evolve(state, epochs=cache)
        return new, [EpochCacheChanged(tuple(cache.as_pairs()))]
    below_hw = target < state.high_watermark
    new = evolve(state, log_end_offset=target, high_watermark=min(state.high_watermark, target),
                 epochs=epochs.truncate_from_end(state.epochs, target),
                 producers=dedupe.truncate(state.producers, target))
    effects: list[Effect] = [Truncate(target, below_hw), EpochCacheChanged(tuple(new.epochs.as_pairs()))]
    if below_hw:
        effects.append(HighWatermarkChanged(new.high_watermark))
    return new, effects


def _on_tick(state: PartitionState, now_ms: int):
    if not state.is_leader:
        return state, []
    effects: list[Effect] = []
    new = state
    pending = state.pending_isr
    if pending is not None:
        if now_ms - pending.sent_at_ms >= state.config.isr_update_retry_ms:
            new = evolve(state, pending_isr=evolve(pending, sent_at_ms=now_ms))
            effects.append(ProposeIsr(pending.proposed, pending.proposed.partition_epoch))
    else:
        new, effects = _propose_removal(state, now_ms, lagging=isr.out_of_sync(state, now_ms),
                                        lost=isr.behind_high_watermark(state))
    new, more = _settle(state, new, now_ms)
    return new, effects + more


def _propose_removal(state: PartitionState, now_ms: int, lagging: frozenset[int] = frozenset(),
                     lost: frozenset[int] = frozenset()) -> tuple[PartitionState, list[Effect]]:
    """The one way a leader shrinks its ISR: propose it without ``lagging`` (they may join the ELR) and
    ``lost`` (members that may lack committed records: a restart, or a log end below the HW; never the
    ELR). Nothing when both are empty or a write is already in flight.

    Members below the HW are looked for on a tick, right after an ISR is adopted, and at their own
    fetch: a member gets there only by a restart, which its fetch reports (a newer broker epoch, or,
    to a leader that never heard from it, a log end below the HW), and a restart seen while a write
    is in flight is found when that write's answer is adopted (seed 1034869)."""
    if (not lagging and not lost) or state.pending_isr is not None:
        return state, []
    new, proposed = isr.proposal(state, state.isr - lagging - lost, now_ms, ineligible=lost)
    return new, [ProposeIsr(proposed, proposed.partition_epoch)]


def _lost_members(adopted: PartitionState, written: LeaderAndIsr) -> frozenset[int]:
    """Members of a just-adopted ISR that may lack committed records: below the HW, or restarted since
    the write recorded their incarnation (a restart seen while that write was in flight)."""
    return isr.behind_high_watermark(adopted) | isr.restarted_since_recorded(adopted, written)


def _on_isr_accepted(state: PartitionState, event: IsrUpdateAccepted):
    lai = event.leader_and_isr
    if (state.role is not Role.LEADER or state.fenced or lai.leader != state.broker_id
            or lai.leader_epoch != state.leader_epoch or lai.partition_epoch <= state.partition_epoch):
        return state, []  # an answer to an older term or a repeat
    new = evolve(state, isr=frozenset(lai.isr), elr=frozenset(lai.elr), partition_epoch=lai.partition_epoch,
                 pending_isr=None, recorded_broker_epochs=lai.isr_broker_epochs)
    new, effects = _propose_removal(new, event.now_ms, lost=_lost_members(new, lai))
    new, more = _settle(state, new, event.now_ms)
    return new, effects + more


def _on_isr_rejected(state: PartitionState, event: IsrUpdateRejected):
    if state.role is not Role.LEADER or state.fenced or event.current is None:
        return state, []  # unreachable ZooKeeper: the Tick re-sends after isr_update_retry_ms
    cur = event.current
    pending = state.pending_isr
    if pending is not None and cur.partition_epoch == pending.proposed.partition_epoch:
        # Not the answer to the write in flight: a write conditional on that version cannot fail on it.
        # It answers an earlier write (simulation seed 521390: a second copy of a write that had just
        # succeeded): taken as this write's answer, it dropped the pending expansion, the HW passed the
        # joining member, and then the write landed.
        return state, []
    if cur.leader == state.broker_id and cur.leader_epoch == state.leader_epoch:
        # Someone (the controller) changed the znode within our term: adopt it and decide again.
        if cur.partition_epoch < state.partition_epoch:
            return state, []
        new = evolve(state, isr=frozenset(cur.isr), elr=frozenset(cur.elr), partition_epoch=cur.partition_epoch,
                     pending_isr=None, recorded_broker_epochs=cur.isr_broker_epochs)
        if state.broker_id not in new.isr:
            new, done = roles.fence(new)
            return new, _completions(done)
        new, effects = _propose_removal(new, event.now_ms, lost=_lost_members(new, cur))
        new, more = _settle(state, new, event.now_ms)
        return new, effects + more
    new, done = roles.fence(state)
    return new, _completions(done)


# ------------------------------------------------------------ queries


@dataclass(frozen=True, slots=True)
class FetchRequest:
    leader: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int


def fetch_request(state: PartitionState) -> FetchRequest | None:
    """What a follower's fetcher should ask its leader for next (None unless following a leader)."""
    if state.role is not Role.FOLLOWER or state.leader < 0:
        return None
    return FetchRequest(state.leader, state.leader_epoch, state.log_end_offset, state.epochs.latest_epoch)


def check_consumer_fetch(state: PartitionState, current_leader_epoch: int | None, fetch_offset: int,
                         allow_follower: bool = False) -> tuple[ErrorCode, int]:
    """(error, end_offset_exclusive) for a consumer read: never at or past the HW."""
    if state.role is Role.NONE or (state.role is Role.FOLLOWER and not allow_follower) or state.fenced:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER, -1
    if current_leader_epoch is not None:
        if current_leader_epoch < state.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH, -1
        if current_leader_epoch > state.leader_epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH, -1
    if state.role is Role.FOLLOWER and state.high_watermark < fetch_offset <= state.log_end_offset:
        # A follower whose HW lags the leader's: committed there, not yet known here. Retriable.
        return ErrorCode.OFFSET_NOT_AVAILABLE, -1
    if fetch_offset < state.log_start_offset or fetch_offset > state.log_end_offset:
        return ErrorCode.OFFSET_OUT_OF_RANGE, -1
    # A leader's HW can be below an offset its log holds: a new leader learns the HW from its followers'
    # first fetches, and a consumer may come from the previous leader with a position up to that one's
    # HW. As in Kafka, such a read gets nothing (end <= fetch offset) until the HW passes it; it used to
    # be OFFSET_OUT_OF_RANGE, which a Spark task took for lost data and a consumer as a reason to reset.
    return ErrorCode.NONE, state.high_watermark


def check_list_offsets(state: PartitionState, current_leader_epoch: int | None) -> ErrorCode:
    """Whether the leader may answer a client's list_offsets now (Kafka's KIP-207): not while its HW is
    below the start of its epoch, since a new leader's HW lags until its followers fetch, and the offsets
    it gave (latest, or one found by timestamp) would go back from what the previous leader gave."""
    error, _ = check_consumer_fetch(state, current_leader_epoch, state.log_start_offset)
    if error is not ErrorCode.NONE:
        return error
    if state.high_watermark < state.leader_epoch_start_offset:
        return ErrorCode.OFFSET_NOT_AVAILABLE
    return ErrorCode.NONE
