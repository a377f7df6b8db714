"""The consumer's poll path: one long-polling fetch in flight per leader broker, answers buffered.

``Consumer.poll`` used to ask each partition in turn with ``max_wait_ms=0`` and
sleep 50 ms when none had data, so a record waited on average half that sleep
plus a pass over every partition before anyone saw it. This is the shape of
Kafka's consumer fetcher instead: poll sends, to every leader that has no fetch
in flight, one fetch for all the assigned partitions it leads that have nothing
buffered; the broker holds it until one of them has committed data (it wakes on
the HW move, not on a timer) or ``fetch.max.wait.ms`` passes; poll returns as
soon as any answer has data. An answer that arrives after poll returned stays
buffered for the next poll, and is used only if it starts at the partition's
position then (a seek in between drops it).

With ``client.rack``, a partition is fetched from an in-sync replica or observer
on that rack instead of its leader (KIP-392, ``Consumer._same_rack_replica``), as
Kafka's consumer does: it answers up to its own HW. When that replica fails to
answer for the partition (down, behind, no longer a replica: any error), the
partition goes to the leader, which answers authoritatively, for
``RACK_REPLICA_FALLBACK_S`` before the replica is tried again. KIP-320's check of a
position after a leader change always asks the leader (``Consumer._validate_position``).

A partition known to lag (its last answer ended below the HW), or not fetched
yet, is first read through the local read path when it is fetched from its
leader and the leader is on this host (``ads_spark/local_reads.py``): catching up
moves segment bytes, the tail moves by long-poll.

Bounds: one fetch per source broker in flight (so threads <= brokers, capped by
``FETCH_THREADS_MAX``), one buffered answer per partition, one fallback deadline per partition.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ads_spark.client.chunks import FetchedChunk, TopicPartition, fetched_chunk
from ads_spark.client.typed import received_batches
from ads_spark.protocol import wire
from ads_spark.protocol.fetch_session import FetchSession
from ads_spark.errors import AdsError, OffsetOutOfRangeError, error_for

log = logging.getLogger("ads.client.poll")

FETCH_THREADS_MAX = 16
# After a retriable failure (leader moved, broker down) a leader is not asked again before this.
# (Not the controller channel's RETRY_BACKOFF_S: that paces the controller's requests to brokers.)
FETCH_RETRY_BACKOFF_S = 0.1
# After a same-rack replica failed to serve a partition, its reads go to the leader for this long: long enough
# that a replica that is down or far behind costs one failed fetch per period, short enough that reads return to
# the rack soon after it recovers (Kafka's consumer waits for the leader to name a preferred replica again).
RACK_REPLICA_FALLBACK_S = 5.0


@dataclass
class _Answer:
    start_offset_inclusive: int
    chunk: FetchedChunk | None
    error: AdsError | None = None


class PollFetcher:
    def __init__(self, consumer):
        self._consumer = consumer
        self._connections = consumer._connections
        self._executor = ThreadPoolExecutor(max_workers=FETCH_THREADS_MAX, thread_name_prefix="ads-poll")
        self._changed = threading.Condition()
        # Invariant: a broker id is in _in_flight from the moment its fetch is submitted until its answers
        # are in _answers; so at most one fetch per leader is outstanding.
        self._in_flight: set[tuple[int, str | None]] = set()  # (broker id, typed topic or None)
        self._answers: dict[tuple[str, int], _Answer] = {}
        # Whether a partition's last answer ended below the HW; unknown (never fetched) counts as lagging.
        self._lagging: dict[tuple[str, int], bool] = {}
        self._not_before: dict[tuple[int, str | None], float] = {}  # -> monotonic time it may be asked again
        # Partition -> monotonic time until which it is read from its leader, its same-rack replica having failed.
        self._replica_fallback_until: dict[tuple[str, int], float] = {}
        # Partitions whose fetch position was beyond the leader's log: checked (KIP-320) before the next fetch
        # when their position has an epoch, once per position (the position a check kept is in
        # _out_of_range_checked: out of range again there, the error goes to the caller). Bounded by the partitions.
        self._out_of_range: set[tuple[str, int]] = set()
        self._out_of_range_checked: dict[tuple[str, int], int] = {}
        self._sessions: dict[tuple, FetchSession] = {}  # one per broker address (and typed read)
        self._closed = False

    def poll(self, positions: dict[tuple[str, int], int], timeout_s: float) -> dict[tuple[str, int], object]:
        """Chunks (starting at the partition's position) for partitions that have committed data."""
        deadline = time.monotonic() + max(0.0, timeout_s)
        while True:
            ready = self._take_ready(positions)
            if ready:
                return ready
            retry_at = self._send_fetches(positions)
            now = time.monotonic()
            if now >= deadline:
                return {}
            with self._changed:
                if not self._answers:  # wait for an answer, or until a backed-off leader may be asked again
                    self._changed.wait(min(deadline, retry_at) - now)

    def _take_ready(self, positions) -> dict:
        ready, error = {}, None
        with self._changed:
            for key, answer in list(self._answers.items()):
                if key not in positions or answer.start_offset_inclusive != positions[key]:
                    del self._answers[key]  # assignment or position changed while it was in flight
                    continue
                if answer.error is not None:
                    del self._answers[key]
                    error = error or answer.error
                    continue
                if answer.chunk.table.num_rows:
                    ready[key] = self._answers.pop(key).chunk
                    continue
                del self._answers[key]
                if answer.chunk.next_offset > answer.start_offset_inclusive:
                    # No record in [position, next_offset): compaction removed them. The position moves past the
                    # gap and this poll fetches from there, instead of asking for the gap again.
                    positions[key] = answer.chunk.next_offset
                    self._consumer._skip_gap(key, answer.start_offset_inclusive, answer.chunk.next_offset,
                                             answer.chunk.leader_epoch)
        if error is not None and not ready:
            raise error
        return ready

    def keep(self, key, start_offset_inclusive: int, chunk: FetchedChunk) -> None:
        """Buffer again records ``poll`` returned but the caller did not use (``max.poll.records``), so the next
        poll takes them without a fetch. No fetch of ``key`` can be in flight: its answer was just taken."""
        with self._changed:
            self._answers.setdefault(key, _Answer(start_offset_inclusive, chunk))

    def _send_fetches(self, positions) -> float:
        """Send what is due; returns when a broker skipped for backing off may be asked again (inf: none).

        Each wanted partition is ``(key, position, leader epoch, address, from_replica)``; ``from_replica``:
        sent to a same-rack replica that is not the leader."""
        by_source: dict[int, list] = {}
        now = time.monotonic()
        retry_at = float("inf")
        for key, position in positions.items():
            try:
                meta, broker = self._connections.leader_of(*key)
            except AdsError as exc:  # no leader right now (a failover): fetched once metadata names one
                if not exc.retriable:
                    raise
                retry_at = min(retry_at, now + FETCH_RETRY_BACKOFF_S)
                continue
            if self._consumer._needs_validation(key, meta.leader_epoch) or key in self._out_of_range:
                position = self._validate(key, position, positions)
                if position is None:  # the check failed retriably: the leader is asked again after a pause
                    retry_at = min(retry_at, now + FETCH_RETRY_BACKOFF_S)
                    continue
            source, address = self._source_for(key, meta, broker, now)
            # A typed topic's partitions are fetched on a session of their own (its answers have its schema).
            typed_topic = key[0] if key[0] in self._consumer.typed_reads else None
            by_source.setdefault((source, typed_topic), []).append((key, position, meta.leader_epoch, address,
                                                                    source != meta.leader))
        with self._changed:
            if self._closed:
                return retry_at
            for source, wanted in by_source.items():
                if source in self._in_flight:
                    continue
                if self._not_before.get(source, 0.0) > now:
                    retry_at = min(retry_at, self._not_before[source])
                    continue
                wanted = [w for w in wanted if w[0] not in self._answers]
                if wanted:
                    self._in_flight.add(source)
                    self._executor.submit(self._fetch_from, source, wanted)
        return retry_at

    def _source_for(self, key, meta, leader_address, now: float):
        """(broker id, address) to fetch ``key`` from: its same-rack replica (KIP-392) unless that failed within
        RACK_REPLICA_FALLBACK_S, else its leader."""
        if self._replica_fallback_until.get(key, 0.0) <= now:
            replica = self._consumer._same_rack_replica(meta)
            if replica is not None:
                return replica.broker_id, replica
        return meta.leader, leader_address

    def _fall_back_to_leader(self, keys) -> None:
        until = time.monotonic() + RACK_REPLICA_FALLBACK_S
        for key in keys:
            self._replica_fallback_until[key] = until

    def _validate(self, key, position: int, positions) -> int | None:
        """KIP-320 after a leader change (or an out-of-range answer): the checked position, also written to
        ``positions`` so that answers for the old one are dropped. LogTruncationError (reset none) propagates
        to the caller of poll; a retriable failure gives None."""
        try:
            checked = self._consumer._validate_position(key, position)
        except AdsError as exc:
            if not exc.retriable:
                raise
            self._connections.mark_stale()
            return None
        if key in self._out_of_range:
            self._out_of_range.discard(key)
            self._out_of_range_checked[key] = checked
        positions[key] = checked
        return checked

    def _fetch_from(self, source: tuple[int, str | None], wanted: list) -> None:
        """One fetch from broker ``source[0]`` (a leader, or a same-rack replica of some of ``wanted``), of the
        typed topic ``source[1]`` (None: Kafka-shaped topics)."""
        answers: dict[tuple[str, int], _Answer] = {}
        try:
            answers = self._fetch_local(wanted) or self._fetch_remote(wanted)
        except AdsError as exc:
            if exc.retriable:
                self._connections.mark_stale()
            # A same-rack replica that failed: its partitions go to their leaders, which decide (no error kept).
            self._fall_back_to_leader(key for key, *_, from_replica in wanted if from_replica)
            answers = {key: _Answer(position, None, None if exc.retriable or from_replica else exc)
                       for key, position, _, _, from_replica in wanted}
            if exc.retriable:
                self._not_before[source] = time.monotonic() + FETCH_RETRY_BACKOFF_S
        except Exception as exc:  # a bug must not wedge poll: the broker is asked again after a pause
            log.warning("poll fetch from broker %s failed: %r", source, exc)
            self._fall_back_to_leader(key for key, *_, from_replica in wanted if from_replica)
            self._not_before[source] = time.monotonic() + FETCH_RETRY_BACKOFF_S
        finally:
            with self._changed:
                for key, answer in answers.items():
                    if answer.chunk is not None or answer.error is not None:
                        self._answers[key] = answer
                self._in_flight.discard(source)
                self._changed.notify_all()

    def _fetch_local(self, wanted: list) -> dict:
        """Lagging partitions read from this host's segment files; {} when none had anything that way."""
        answers = {}
        for key, position, epoch, broker, from_replica in wanted:
            if from_replica or not self._lagging.get(key, True):  # the local path reads leaders' files only
                continue
            chunk = self._consumer._fetch_local(TopicPartition(*key), position,
                                                self._consumer.partition_fetch_max_bytes,
                                                epoch, broker, self._consumer.typed_reads.get(key[0]))
            if chunk is not None and (chunk.table.num_rows or chunk.next_offset > position):  # data or a gap
                answers[key] = self._record(key, position, chunk)
            else:
                self._lagging[key] = False  # not local, or nothing to read: the long poll takes it
        return answers

    def _record(self, key, position: int, chunk) -> _Answer:
        self._lagging[key] = chunk.next_offset < chunk.high_watermark
        return _Answer(position, chunk)

    def _fetch_remote(self, wanted: list) -> dict:
        """One fetch for every wanted partition of this broker, held by the broker until one has data."""
        consumer = self._consumer
        broker = wanted[0][3]
        request = wire.consumer_fetch_request([(key[0], key[1], position, epoch)
                                               for key, position, epoch, _, _ in wanted],
                                              max_wait_ms=consumer.fetch_max_wait_ms,
                                              max_bytes=consumer.fetch_max_bytes,
                                              partition_max_bytes=consumer.partition_fetch_max_bytes,
                                              client_rack=consumer.client_rack)
        timeout_s = (consumer.fetch_max_wait_ms + self._connections.request_timeout_ms) / 1000
        try:
            session = self._session_for(broker, self._consumer.typed_reads.get(wanted[0][0][0]))
            infos, batches = wire.split_fetch_answer(session.fetch(request, timeout_s))
        except AdsError as error:
            if error.retriable:
                self._connections.drop(broker.host, broker.port)
            raise
        typed = self._consumer.typed_reads.get(wanted[0][0][0])
        return {key: self._answer_from(key, position, infos.get(key), received_batches(batches.get(key, []), typed),
                                       from_replica)
                for key, position, _, _, from_replica in wanted}

    def _session_for(self, broker, typed: dict | None) -> FetchSession:
        key = (broker.host, broker.port, wire.dumps(typed) if typed is not None else None)
        with self._changed:
            session = self._sessions.get(key)
            if session is None:
                session = self._sessions[key] = FetchSession(
                    lambda: self._connections.client_for(broker.host, broker.port),
                    transport=self._connections.transport, address=key[:2], typed=typed)
            return session

    def _answer_from(self, key, position: int, info: dict | None, batches: list,
                     from_replica: bool = False) -> _Answer:
        if info is None:
            return _Answer(position, None, error_for(-1, f"fetch response carried no metadata for {key}"))
        if info["error_code"]:
            error = error_for(info["error_code"], info.get("message", ""))
            if from_replica:
                # Behind (out of range, HW not there yet), fenced, or no longer a replica: a follower cannot tell
                # which, the leader can (KIP-392). The partition is fetched from the leader next.
                self._fall_back_to_leader([key])
                if error.retriable:
                    self._connections.mark_stale()
                return _Answer(position, None, None)
            if error.retriable:
                self._connections.mark_stale()
                return _Answer(position, None, None)
            if isinstance(error, OffsetOutOfRangeError) and self._consumer._position_epochs.get(key, -1) >= 0 \
                    and self._out_of_range_checked.get(key) != position:
                self._out_of_range.add(key)  # maybe truncated under this position: checked, then fetched again
                return _Answer(position, None, None)
            return _Answer(position, None, error)
        chunk = fetched_chunk(batches, position, int(info["high_watermark"]), int(info["log_start_offset"]),
                              int(info.get("leader_epoch", -1)), info.get("next_offset"))
        return self._record(key, position, chunk)

    def close(self) -> None:
        with self._changed:
            self._closed = True
        # An in-flight long poll ends within fetch.max.wait.ms; the threads are not waited for.
        self._executor.shutdown(wait=False, cancel_futures=True)
        for session in list(self._sessions.values()):
            session.cancel()  # an outstanding long poll would hold close() for fetch.max.wait.ms
            session.close()

