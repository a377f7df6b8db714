"""The leader-epoch cache and the divergence rules built on it (KIP-101, KIP-279, KIP-320).

A replica keeps, per partition, the list of (leader epoch, start offset): the
first offset written in each epoch. It is what lets a follower find exactly
where its log diverged from a new leader's, instead of truncating to a high
watermark that may be stale (the bug KIP-101 fixed) or keeping records that a
later leader overwrote (KIP-279's repeated fast leader changes).

The protocol here is the fetch-time validation of KIP-320: a follower's fetch
carries ``fetch_offset`` and ``last_fetched_epoch`` (the latest epoch in its
cache); the leader answers with a diverging epoch (epoch, end offset) when its
own log does not contain that position; the follower truncates to the
``truncation_target`` and fetches again. Each round strictly lowers the
follower's latest epoch, so repeated leader changes resolve in a bounded number
of rounds and never truncate below the common prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ads_spark.errors import InvariantViolation

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int  # >= 0
    start_offset: int  # first offset written (or to be written) in this epoch


@dataclass(frozen=True, slots=True)
class EpochCache:
    """Entries sorted by epoch, strictly increasing; start offsets non-decreasing."""

    entries: tuple[EpochEntry, ...] = ()

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else UNDEFINED_EPOCH

    @property
    def latest_start_offset(self) -> int | None:
        return self.entries[-1].start_offset if self.entries else None

    def as_pairs(self) -> list[tuple[int, int]]:
        return [(e.epoch, e.start_offset) for e in self.entries]


def from_pairs(pairs: Iterable[tuple[int, int]]) -> EpochCache:
    cache = EpochCache()
    for epoch, start in pairs:
        cache = assign(cache, epoch, start)
    return cache


def assign(cache: EpochCache, epoch: int, start_offset: int) -> EpochCache:
    """Record that ``epoch`` starts at ``start_offset`` (leader election or first batch of an epoch).

    A known latest epoch is a no-op. An older epoch is a bug. Entries whose start
    offset is at or past ``start_offset`` held no records, so they are dropped.
    """
    if epoch < 0 or start_offset < 0:
        raise InvariantViolation(f"epoch cache: bad entry ({epoch}, {start_offset})")
    if cache.entries and epoch == cache.latest_epoch:
        return cache
    if cache.entries and epoch < cache.latest_epoch:
        raise InvariantViolation(f"epoch cache: epoch {epoch} is older than latest {cache.latest_epoch}")
    kept = tuple(e for e in cache.entries if e.start_offset < start_offset)
    return EpochCache(kept + (EpochEntry(epoch, start_offset),))


def truncate_from_end(cache: EpochCache, end_offset_exclusive: int) -> EpochCache:
    """The cache after the log was truncated to end at ``end_offset_exclusive``."""
    return EpochCache(tuple(e for e in cache.entries if e.start_offset < end_offset_exclusive))


def last_record_epoch(cache: EpochCache, log_end_offset: int) -> int:
    """The leader epoch of the log's last record: the latest entry starting below ``log_end_offset``
    (UNDEFINED_EPOCH for an empty log). Not ``latest_epoch``: a leader records its epoch when elected,
    before writing, and a crash can take every record of an epoch while the durable checkpoint keeps its
    entry, so a replica with no record of an epoch can hold its entry (simulation seed 210868: an empty log
    reported epoch 1 and outranked the one replica holding the committed records of epoch 0)."""
    return next((e.epoch for e in reversed(cache.entries) if e.start_offset < log_end_offset), UNDEFINED_EPOCH)


def truncate_from_start(cache: EpochCache, log_start_offset: int) -> EpochCache:
    """The cache after retention moved the log start: the epoch covering it now starts there."""
    covering = [e for e in cache.entries if e.start_offset <= log_start_offset]
    later = tuple(e for e in cache.entries if e.start_offset > log_start_offset)
    if not covering:
        return EpochCache(later)
    return EpochCache((EpochEntry(covering[-1].epoch, log_start_offset),) + later)


def end_offset_for(cache: EpochCache, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
    """(epoch, end offset exclusive) of the largest epoch <= ``requested_epoch`` (OffsetsForLeaderEpoch).

    * the latest epoch ends at the log end offset;
    * a known or skipped epoch ends where the next larger epoch starts; the
      returned epoch is the largest one <= requested that this log has;
    * an epoch older than all entries: (UNDEFINED_EPOCH, first start offset);
    * a newer epoch than this log knows, or an empty cache: (UNDEFINED_EPOCH, UNDEFINED_OFFSET).
    """
    if not cache.entries or requested_epoch > cache.latest_epoch:
        return UNDEFINED_EPOCH, UNDEFINED_OFFSET
    if requested_epoch == cache.latest_epoch:
        return requested_epoch, log_end_offset
    if requested_epoch < cache.entries[0].epoch:
        return UNDEFINED_EPOCH, cache.entries[0].start_offset
    floor = cache.entries[0]
    for entry in cache.entries[1:]:
        if entry.epoch > requested_epoch:
            return floor.epoch, entry.start_offset
        floor = entry
    raise InvariantViolation("epoch cache: unreachable end_offset_for branch")


def diverging_epoch(
    leader_cache: EpochCache, leader_log_end_offset: int, fetch_offset: int, last_fetched_epoch: int
) -> tuple[int, int] | None:
    """The leader's check of a follower fetch: (epoch, end offset) if the follower diverged, else None.

    The follower's log is a prefix of the leader's when the leader has
    ``last_fetched_epoch`` and that epoch extends at least to ``fetch_offset``.
    A follower with an empty log (UNDEFINED epoch) cannot have diverged.
    """
    if last_fetched_epoch == UNDEFINED_EPOCH:
        return None
    epoch, end_offset = end_offset_for(leader_cache, last_fetched_epoch, leader_log_end_offset)
    if epoch == UNDEFINED_EPOCH and end_offset == UNDEFINED_OFFSET:
        # The follower has an epoch newer than the leader's latest: it must not happen
        # for a current leader; answer with the leader's whole log as the common bound.
        return leader_cache.latest_epoch, leader_log_end_offset
    if epoch < last_fetched_epoch or end_offset < fetch_offset:
        return epoch, end_offset
    return None


def truncation_target(
    follower_cache: EpochCache, follower_log_end_offset: int, diverging: tuple[int, int]
) -> int:
    """Where a follower truncates on a diverging epoch: the end of the common prefix, never a HW.

    The leader's log holds epoch <= E only up to ``end``; the follower's holds it
    up to its own end offset for E. Records below the smaller of the two were
    written by the same leaders at the same offsets, so they are identical.
    """
    leader_epoch, leader_end = diverging
    if leader_epoch == UNDEFINED_EPOCH:
        # The leader has nothing at or before the follower's epochs: keep at most what precedes its log.
        return max(0, min(leader_end, follower_log_end_offset)) if leader_end >= 0 else 0
    f_epoch, f_end = end_offset_for(follower_cache, leader_epoch, follower_log_end_offset)
    if f_epoch == UNDEFINED_EPOCH:
        f_end = 0 if f_end == UNDEFINED_OFFSET else f_end
    return max(0, min(leader_end, f_end, follower_log_end_offset))


def rebuild(batches: Iterable[object]) -> EpochCache:
    """The cache implied by a log's batches (anything with base_offset and leader_epoch), in order."""
    cache = EpochCache()
    for batch in batches:
        if batch.leader_epoch > cache.latest_epoch:  # type: ignore[attr-defined]
            cache = assign(cache, batch.leader_epoch, batch.base_offset)  # type: ignore[attr-defined]
    return cache


def consumer_divergence(position: int, position_epoch: int, answer: tuple[int, int],
                        leader_log_end_offset: int) -> tuple[int, int] | None:
    """KIP-320's check of a consumer's position: (offset to resume at, its epoch), or None when nothing diverged.

    ``position`` is the next offset the consumer reads and ``position_epoch`` the leader epoch of what
    it read before it (or a later epoch known to cover it); ``answer`` is the leader's
    ``end_offset_for(position_epoch)``. The leader's log holds the consumer's records only below that
    end: when the end is below the position, the records in [end, position) the consumer read were
    truncated away (an unclean election) and whatever the log holds there now was never read, so
    reading resumes at the end. An unknown position epoch (an offset given without one) is not checked.
    An answer with no epoch and no offset (the leader knows no epoch at or before it) puts the common
    prefix at most at the leader's log end.
    """
    if position_epoch == UNDEFINED_EPOCH or position <= 0:
        return None
    epoch, end_offset = answer
    if end_offset == UNDEFINED_OFFSET:
        end_offset = leader_log_end_offset
    if end_offset >= position:
        return None
    return max(0, end_offset), epoch
