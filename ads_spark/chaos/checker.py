"""The queue checker of a fault-injection run, pure: what was acknowledged against what can be read.

Modelled on Jepsen's Kafka queue checker. Inputs are plain records of what the
workload saw; the verdict counts:

* lost: acknowledged (ok with an offset), then not readable at the end;
* unseen: sent with an unknown outcome (timed out) and not readable (not an error);
* duplicated: one value stored at two offsets;
* resent_under_new_epoch (only when the run says which producer wrote each offset, ``producer_at``): a
  value whose copies carry different epochs of one producer id, each later copy a higher epoch: the
  client re-sent it after bumping its epoch and restarting its sequences, which the protocol treats as
  a new write no broker can tell from the first. librdkafka does so for batches that may have been
  stored (its issue #4953); it is counted apart from ``duplicated``, which then holds only copies one
  (producer, epoch) wrote twice: a dedupe failure of the brokers;
* inconsistent_offsets: one offset holding different values in different reads
  (the final read, consumers, an acknowledgement's offset);
* non_monotonic: a consumer that saw offsets of one partition go backwards;
* aborted_reads: a value whose send definitely failed, yet readable;
* replica_divergence: replicas whose batches differ below their common HW;
* availability: the share of the run's seconds in which some acks=all send
  succeeded (``ok_share``: the share of sends that did), and per partition the
  longest stretch without a successful send, with the faults active then.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Optional, Sequence

OK, FAILED, UNKNOWN = "ok", "failed", "unknown"

# (partition, offset) -> (producer id, producer epoch) of the batch holding it, None when not known
ProducerAt = Callable[[int, int], Optional[tuple[int, int]]]


@dataclass(frozen=True, slots=True)
class Attempt:
    value: bytes
    partition: int
    outcome: str  # OK, FAILED (a definite error) or UNKNOWN (timed out: may or may not be stored)
    offset: int  # the acknowledged offset when ok, else -1
    started_s: float
    ended_s: float
    error: str = ""  # the error's type when not ok (for the report; the checker does not judge it)


@dataclass(frozen=True, slots=True)
class NemesisWindow:
    name: str
    started_s: float
    ended_s: float


@dataclass
class Verdict:
    acknowledged: int = 0
    lost: int = 0
    unseen: int = 0
    duplicated: int = 0
    resent_under_new_epoch: int = 0
    inconsistent_offsets: int = 0
    non_monotonic: int = 0
    aborted_reads: int = 0
    replica_divergence: int = 0
    availability: float = 1.0
    ok_share: float = 1.0
    longest_outage_s: float = 0.0
    longest_outage_partition: int = -1
    longest_outage_cause: str = "none"
    outages: list = field(default_factory=list)  # the longest few: [partition, start_s, length_s, cause]
    errors: dict = field(default_factory=dict)  # error type -> sends that ended with it
    examples: dict[str, list] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return not (self.lost or self.duplicated or self.inconsistent_offsets or self.non_monotonic
                    or self.aborted_reads or self.replica_divergence)

    def to_json(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k != "examples"}
        out["valid"] = self.valid
        out["examples"] = {k: [repr(x) for x in v[:5]] for k, v in self.examples.items()}
        return out


def check(attempts: Sequence[Attempt], final_reads: Mapping[int, Sequence[tuple[int, bytes]]],
          consumer_reads: Sequence[Sequence[tuple[int, int, bytes]]] = (),
          replica_batches: Mapping[int, Mapping[int, Sequence[tuple]]] | None = None,
          nemesis: Sequence[NemesisWindow] = (), run_window_s: tuple[float, float] | None = None,
          producer_at: ProducerAt | None = None) -> Verdict:
    """``final_reads``: partition -> (offset, value) of everything readable at the end;
    ``consumer_reads``: per consumer, (partition, offset, value) in the order seen;
    ``replica_batches``: partition -> broker -> batches below that replica's HW;
    ``producer_at``: given only for a client known to re-send under a bumped epoch (see the module)."""
    v = Verdict()
    stored: dict[bytes, list[tuple[int, int]]] = {}
    at_offset: dict[tuple[int, int], set[bytes]] = {}
    for partition, rows in final_reads.items():
        for offset, value in rows:
            stored.setdefault(value, []).append((partition, offset))
            at_offset.setdefault((partition, offset), set()).add(value)
    for reads in consumer_reads:
        last: dict[int, int] = {}
        for partition, offset, value in reads:
            at_offset.setdefault((partition, offset), set()).add(value)
            if offset < last.get(partition, -1):
                v.non_monotonic += 1
                v.examples.setdefault("non_monotonic", []).append((partition, last[partition], offset))
            last[partition] = offset
    for attempt in attempts:
        places = stored.get(attempt.value, [])
        if attempt.outcome == OK:
            v.acknowledged += 1
            at_offset.setdefault((attempt.partition, attempt.offset), set()).add(attempt.value)
            if not places:
                v.lost += 1
                v.examples.setdefault("lost", []).append((attempt.partition, attempt.offset, attempt.value))
        elif attempt.outcome == UNKNOWN and not places:
            v.unseen += 1
        elif attempt.outcome == FAILED and places:
            v.aborted_reads += 1
            v.examples.setdefault("aborted_reads", []).append(attempt.value)
    for value, places in stored.items():
        if len(places) <= 1:
            continue
        if producer_at is not None and _resent_under_new_epoch(sorted(places), producer_at):
            v.resent_under_new_epoch += 1
            v.examples.setdefault("resent_under_new_epoch", []).append(
                (value, [(p, o, producer_at(p, o)) for p, o in sorted(places)]))
        else:
            v.duplicated += 1
            v.examples.setdefault("duplicated", []).append((value, places))
    for key, values in at_offset.items():
        if len(values) > 1:
            v.inconsistent_offsets += 1
            v.examples.setdefault("inconsistent_offsets", []).append((key, sorted(values)))
    v.replica_divergence = _divergence(replica_batches or {}, v)
    _availability(attempts, nemesis, run_window_s, v)
    return v


def _resent_under_new_epoch(places: Sequence[tuple[int, int]], producer_at: ProducerAt) -> bool:
    """Every copy written by one producer id, the epochs strictly rising in offset order (a copy whose
    producer is unknown, or two under one epoch, is a duplicate)."""
    writers = [producer_at(partition, offset) for partition, offset in places]
    if any(w is None or w[0] < 0 for w in writers) or len({p for p, _ in places}) != 1:
        return False
    return len({w[0] for w in writers}) == 1 and all(a[1] < b[1] for a, b in zip(writers, writers[1:]))


def _divergence(replica_batches: Mapping[int, Mapping[int, Sequence[tuple]]], v: Verdict) -> int:
    diverged = 0
    for partition, by_broker in replica_batches.items():
        views = list(by_broker.values())
        common = min((len(b) for b in views), default=0)
        if any(list(b[:common]) != list(views[0][:common]) for b in views[1:]):
            diverged += 1
            v.examples.setdefault("replica_divergence", []).append(partition)
    return diverged


AVAILABILITY_BUCKET_S = 1.0
OUTAGES_REPORTED = 5


def _availability(attempts: Iterable[Attempt], nemesis: Sequence[NemesisWindow],
                  run_window_s: tuple[float, float] | None, v: Verdict) -> None:
    attempts = sorted(attempts, key=lambda a: a.ended_s)
    if not attempts:
        return
    for attempt in attempts:
        if attempt.outcome != OK:
            v.errors[attempt.error or attempt.outcome] = v.errors.get(attempt.error or attempt.outcome, 0) + 1
    v.ok_share = sum(a.outcome == OK for a in attempts) / len(attempts)
    start, end = run_window_s or (attempts[0].started_s, attempts[-1].ended_s)
    buckets = max(1, int((end - start) / AVAILABILITY_BUCKET_S + 0.999))
    served = {int((a.ended_s - start) / AVAILABILITY_BUCKET_S) for a in attempts
              if a.outcome == OK and start <= a.ended_s <= end}
    v.availability = round(len(served & set(range(buckets))) / buckets, 4)
    gaps = []
    for partition in sorted({a.partition for a in attempts}):
        successes = [start] + [a.ended_s for a in attempts
                               if a.partition == partition and a.outcome == OK and start <= a.ended_s <= end] + [end]
        gaps += [(successes[i + 1] - successes[i], successes[i], partition) for i in range(len(successes) - 1)]
    gaps.sort(reverse=True)
    for length, gap_start, partition in gaps[:OUTAGES_REPORTED]:
        causes = sorted({w.name for w in nemesis if w.started_s <= gap_start + length and w.ended_s >= gap_start})
        v.outages.append([partition, round(gap_start - start, 2), round(length, 2),
                          ", ".join(causes) if causes else "no fault active"])
    if v.outages:
        v.longest_outage_partition, _, v.longest_outage_s, v.longest_outage_cause = v.outages[0]
