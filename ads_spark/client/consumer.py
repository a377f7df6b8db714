"""The consumer: assigned partitions, positions, and reads of committed records only.

Reads go to the partition leader (or, with ``client.rack``, to an in-sync
replica on the same rack when the broker offers one) and never return an offset
at or above the high watermark. ``poll`` returns records for code that wants
them one by one; ``poll_arrow`` and ``fetch_arrow`` return Arrow tables for bulk
readers such as the Spark source, with no per-record Python.
"""

from __future__ import annotations

import itertools
import logging
import time
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.flight as flight

from ads_spark.config import CONSUMER_KEYS, check_client_keys, parse_bool, parse_int
from ads_spark.protocol import wire
from ads_spark.protocol.connection import Connections, backoff_sleep
from ads_spark.errors import (
    AdsError,
    ErrorCode,
    InvalidRequestError,
    LeaderNotAvailableError,
    LogTruncationError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
    error_for,
)
from ads_spark.client.chunks import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    FetchedChunk,
    TopicPartition,
    empty_table,
    fetched_chunk,
    slice_offsets,
)
from ads_spark.client.poll_fetcher import PollFetcher
from ads_spark.client.groups.consumer_api import GroupMethods
from ads_spark.local_reads import NotLocal, SegmentsNotReadable, host_identity, read_located
from ads_spark.client.typed import TypedReadMethods, local_projection, received_batches
from ads_spark.replication.epochs import consumer_divergence

log = logging.getLogger("ads.client.consumer")

# Retriable failures (a leader moving, a broker down) are retried for up to default.api.timeout.ms
# (Kafka's name and default), long enough to ride out a failover (ZooKeeper session timeout + election).
API_TIMEOUT_MS_DEFAULT = 60_000
RECORDS_PER_POLL_MAX_DEFAULT = 500


class Record(NamedTuple):
    """One consumed record. A NamedTuple: built ~3.5x faster than a frozen dataclass, which was half of
    ``poll()``'s per-record cost (issue #7, the record-API consume case)."""

    topic: str
    partition: int
    offset: int
    timestamp: int  # ms
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


class Consumer(GroupMethods, TypedReadMethods):
    """A consumer of assigned or subscribed partitions: positions, and reads of committed records only.

    Owns the assignment and each partition's position (``_positions``: the next offset, or a
    sentinel resolved through ``list_offsets`` by ``auto.offset.reset`` when first needed),
    the parsed fetch settings, and the local read path's memory of brokers found to be on
    another host (``_not_local``). Has no thread of its own: ``poll``/``poll_arrow`` create a
    ``PollFetcher`` (``poll_fetcher.py``) on first use, which owns a pool of up to
    ``FETCH_THREADS_MAX`` threads, one fetch session per broker, one long-polling fetch in
    flight per leader and one buffered answer per partition. ``fetch_chunk`` and
    ``fetch_arrow`` (the Spark source's path) fetch in the caller's thread.

    Every read names the leader epoch the client's metadata holds (KIP-320) and ends below
    the HW of the replica read. A read goes to the leader, or with ``client.rack`` first to
    an in-sync replica or observer on that rack (KIP-392); when the leader is on this host, a
    read that does not long-poll (in ``poll``, a partition catching up) maps its segment files
    instead (``local_reads.py``). Retriable errors
    (a leader moving, a broker down) refresh metadata and retry within
    ``default.api.timeout.ms``. Delegates metadata and connections to
    ``protocol/connection.Connections`` (shared when passed in), and chunk building to
    ``chunks.py``.
    """

    def __init__(self, config: dict[str, Any], connections: Connections | None = None):
        check_client_keys(CONSUMER_KEYS, config, "consumer")  # a key it would not read: refused by name
        self.config = dict(config)
        self._connections = connections or Connections(config)
        self._owns_connections = connections is None
        self.client_rack = self.config.get("client.rack")
        self.fetch_max_bytes = self._int_setting("fetch.max.bytes", 50 << 20, min_value=1)
        self.partition_fetch_max_bytes = self._int_setting("max.partition.fetch.bytes", 8 << 20, min_value=1)
        self.fetch_max_wait_ms = self._int_setting("fetch.max.wait.ms", 500, min_value=0)
        self.api_timeout_ms = self._int_setting("default.api.timeout.ms", API_TIMEOUT_MS_DEFAULT, min_value=0)
        self.max_poll_records = self._int_setting("max.poll.records", RECORDS_PER_POLL_MAX_DEFAULT, min_value=1)
        reset = str(self.config.get("auto.offset.reset", "latest"))
        if reset not in ("earliest", "latest", "none"):
            raise InvalidRequestError(f"auto.offset.reset must be earliest, latest or none, got {reset!r}")
        self.auto_offset_reset = reset
        self._positions: dict[tuple[str, int], int] = {}
        # KIP-320: the leader epoch the records before each position were read in (-1: unknown, e.g. after a
        # seek, so not checked); a position whose epoch is not the leader's current one is checked first.
        self._position_epochs: dict[tuple[str, int], int] = {}
        self._next_partition = 0
        # The local read path (ads_spark/local_reads.py): brokers on this host are read from their
        # segment files; a broker found to be elsewhere, or whose files this process may not open (another
        # Unix user, security on), is not asked again (bounded by the brokers).
        self.local_reads = parse_bool(self.config.get("local.reads", "true"), name="local.reads")
        self._not_local: set[tuple[str, int]] = set()
        self.local_fetches = 0  # fetches served by the local read path (for tests and benchmarks)
        self._poll_fetcher: PollFetcher | None = None
        # Consumer groups (client/groups/): subscribe, commit, committed; None without group.id.
        self._make_group(self.config)

    def _int_setting(self, name: str, default: int, *, min_value: int) -> int:
        """Config key ``name`` as an int; a bad value raises InvalidConfigError naming the key."""
        return parse_int(self.config.get(name, default), name=name, min_value=min_value)

    # ---- assignment -------------------------------------------------------------

    def assign(self, partitions: list[TopicPartition]) -> None:
        if self._subscribed():
            raise InvalidRequestError("assign after subscribe: a consumer uses one or the other (unsubscribe first)")
        self._positions, self._position_epochs = {}, {}
        for tp in partitions:
            self._connections.partition(tp.topic, tp.partition)
            self._positions[tp.key()] = tp.offset
        self._next_partition = 0

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, p in self._positions]

    def seek(self, tp: TopicPartition) -> None:
        if tp.key() not in self._positions:
            raise InvalidRequestError(f"{tp.topic}-{tp.partition} is not assigned to this consumer")
        self._positions[tp.key()] = tp.offset
        self._position_epochs.pop(tp.key(), None)  # an offset without an epoch is not checked (as Kafka's seek)

    def position(self, tp):
        """One partition's position (resolved by auto.offset.reset when it has none yet); or, for a list, as
        confluent-kafka's ``position(partitions)``: TopicPartitions with the positions held (OFFSET_INVALID:
        none yet), without resolving anything."""
        if isinstance(tp, (list, tuple)) and not isinstance(tp, TopicPartition):
            return [TopicPartition(t.topic, t.partition, self._positions.get(t.key(), OFFSET_INVALID),
                                   leader_epoch=self._position_epochs.get(t.key())) for t in tp]
        return self._resolve_position(tp.key())

    def _resolve_position(self, key: tuple[str, int]) -> int:
        offset = self._positions[key]
        if offset >= 0:
            return offset
        if offset == OFFSET_INVALID:
            if self.auto_offset_reset == "none":
                raise OffsetOutOfRangeError(f"no position for {key[0]}-{key[1]} and auto.offset.reset=none")
            offset = OFFSET_BEGINNING if self.auto_offset_reset == "earliest" else OFFSET_END
        resolved = self.list_offsets([TopicPartition(*key)], "earliest" if offset == OFFSET_BEGINNING else "latest")
        self._positions[key] = resolved[TopicPartition(*key)]
        return self._positions[key]

    # ---- offsets -----------------------------------------------------------------

    def get_watermark_offsets(self, tp: TopicPartition) -> tuple[int, int]:
        """(log start offset, high watermark) of the partition."""
        response = self._list_offsets_raw([tp], -2)[tp.key()]
        return int(response["log_start_offset"]), int(response["high_watermark"])

    def list_offsets(self, tps: list[TopicPartition], spec: str | int) -> dict[TopicPartition, int]:
        timestamp = {"earliest": -2, "latest": -1}.get(spec, spec) if isinstance(spec, str) else spec
        if not isinstance(timestamp, int):
            raise InvalidRequestError(f"offset spec must be 'earliest', 'latest' or a timestamp in ms, got {spec!r}")
        raw = self._list_offsets_raw(tps, timestamp)
        return {TopicPartition(t, p): int(item["offset"]) for (t, p), item in raw.items()}

    def list_offsets_with_epochs(self, tps: list[TopicPartition], spec: str) -> dict[TopicPartition, tuple[int, int]]:
        """(offset, leader epoch) per partition from one answer of its leader: the epoch the offset was read in,
        which KIP-320's check of a position stored with it needs (the Spark source's checkpoints)."""
        raw = self._list_offsets_raw(tps, {"earliest": -2, "latest": -1}[spec])
        return {TopicPartition(t, p): (int(item["offset"]), int(item.get("leader_epoch", -1)))
                for (t, p), item in raw.items()}

    def _list_offsets_raw(self, tps: list[TopicPartition], timestamp: int) -> dict[tuple[str, int], dict]:
        return self._ask_leaders([tp.key() for tp in tps], wire.ACTION_LIST_OFFSETS, "list offsets",
                                 lambda key, meta: {"topic": key[0], "partition": key[1], "timestamp": timestamp})

    def offsets_for_leader_epochs(self, epochs: dict[tuple[str, int], int]) -> dict[tuple[str, int], dict]:
        """KIP-320: each partition's leader's answer for a leader epoch: ``leader_epoch`` (the largest it has
        at or below the one asked), ``end_offset`` (where that epoch ends in its log), ``log_end_offset`` and
        ``current_leader_epoch`` (the epoch the leader answered in)."""
        def entry(key, meta):
            return {"topic": key[0], "partition": key[1], "leader_epoch": epochs[key],
                    "current_leader_epoch": meta.leader_epoch}
        return self._ask_leaders(list(epochs), wire.ACTION_OFFSET_FOR_LEADER_EPOCH, "offset for leader epoch",
                                 entry)

    def _ask_leaders(self, keys: list[tuple[str, int]], action: str, what: str,
                     entry_for) -> dict[tuple[str, int], dict]:
        """One request per leader naming its partitions (``entry_for(key, metadata)``); retriable failures
        refresh metadata and ask again within default.api.timeout.ms. Answers carry the leader epoch asked in."""
        results: dict[tuple[str, int], dict] = {}
        deadline = time.monotonic() + self.api_timeout_ms / 1000
        no_leader: LeaderNotAvailableError | None = None
        for attempt in itertools.count():
            if attempt and time.monotonic() >= deadline:
                break
            by_leader, no_leader = self._group_by_leader([key for key in keys if key not in results])
            retry = no_leader is not None
            for leader, group in by_leader.items():
                asked_epoch = {key: meta.leader_epoch for key, meta in group}
                try:
                    response = self._connections.call_broker(
                        leader, action, {"partitions": [entry_for(key, meta) for key, meta in group]})
                except AdsError as exc:
                    if not exc.retriable:
                        raise
                    self._connections.mark_stale()
                    retry = True
                    continue
                for item in response["partitions"]:
                    if item["error_code"]:
                        error = error_for(item["error_code"], item.get("message", ""))
                        if not error.retriable:
                            raise error
                        self._connections.mark_stale()
                        retry = True
                    else:
                        key = (item["topic"], item["partition"])
                        results[key] = {**item, "current_leader_epoch": asked_epoch.get(key, -1)}
            if not retry:
                return results
            remaining_ms = int((deadline - time.monotonic()) * 1000)  # a back-off never outlasts the bound
            backoff_sleep(attempt, self._connections.retry_backoff_ms, max_ms=max(0, min(1000, remaining_ms)))
        if no_leader is not None:
            raise no_leader  # the typed error, naming the partition still without a leader
        raise RequestTimedOutError(f"{what} did not succeed within default.api.timeout.ms={self.api_timeout_ms}")

    def _group_by_leader(self, keys: list[tuple[str, int]]
                         ) -> tuple[dict[int, list], LeaderNotAvailableError | None]:
        """The partitions grouped by their leader, and the error for the last one without a leader (mid
        election: retried like any retriable error; ``leader_of`` already marked the metadata stale)."""
        by_leader: dict[int, list] = {}
        no_leader: LeaderNotAvailableError | None = None
        for key in keys:
            try:
                meta, _ = self._connections.leader_of(*key)
            except LeaderNotAvailableError as exc:
                no_leader = exc
                continue
            by_leader.setdefault(meta.leader, []).append((key, meta))
        return by_leader, no_leader

    # ---- KIP-320: checking a position after a leader change ---------------------------

    def _needs_validation(self, key: tuple[str, int], leader_epoch: int) -> bool:
        epoch = self._position_epochs.get(key, -1)
        return epoch >= 0 and epoch != leader_epoch

    def _validate_position(self, key: tuple[str, int], position: int) -> int:
        """The position after KIP-320's check against the current leader's epoch cache.

        When the leader's log no longer holds what was read before ``position`` (an unclean election cut it),
        ``auto.offset.reset=none`` raises LogTruncationError; otherwise the position moves back to where the
        logs agree (the records written there since were never read) and the lost range is logged."""
        asked = self._position_epochs[key]
        answer = self.offsets_for_leader_epochs({key: asked})[key]
        divergence = consumer_divergence(position, asked, (int(answer["leader_epoch"]), int(answer["end_offset"])),
                                         int(answer.get("log_end_offset", -1)))
        if divergence is None:
            self._position_epochs[key] = int(answer["current_leader_epoch"])
            return position
        resume_offset, _ = divergence
        if self.auto_offset_reset == "none":
            raise LogTruncationError(key[0], key[1], resume_offset, position)
        log.warning("%s-%s: offsets %d..%d this consumer read were truncated from the log (unclean leader "
                    "election); resuming at %d, where the leader's log and what was read agree",
                    key[0], key[1], resume_offset, position - 1, resume_offset)
        self._positions[key] = resume_offset
        self._position_epochs[key] = int(answer["current_leader_epoch"])
        return resume_offset

    # ---- reads -------------------------------------------------------------------

    def fetch_chunk(self, tp: TopicPartition, start_offset_inclusive: int, *, max_bytes: int | None = None,
                    max_wait_ms: int = 0, typed: dict | None = None) -> FetchedChunk:
        """One fetch from the leader: committed records from ``start_offset_inclusive``, as a table.
        ``typed``: a typed topic's read ({"topic", "version", "columns"}, ``broker/typed_fetch.py``)."""
        last_error: AdsError | None = None
        deadline = time.monotonic() + self.api_timeout_ms / 1000
        for attempt in itertools.count():
            if attempt and time.monotonic() >= deadline:
                break
            try:
                return self._fetch_once(tp, start_offset_inclusive, max_bytes or self.partition_fetch_max_bytes,
                                        max_wait_ms, prefer_rack=attempt == 0, typed=typed)
            except AdsError as exc:
                if not exc.retriable:
                    raise
                last_error = exc
                self._connections.mark_stale()
                backoff_sleep(attempt, self._connections.retry_backoff_ms)
        raise last_error or RequestTimedOutError("fetch failed")

    def _same_rack_replica(self, meta) -> Any:
        """KIP-392: an in-sync replica on this consumer's rack (it serves up to its own HW), else None.

        Called per partition on every poll, so it looks in the metadata held (no refresh for a broker it does
        not list: a replica that is down is skipped, or fails once and its partition falls back to the leader)."""
        if not self.client_rack:
            return None
        brokers = self._connections.view().brokers
        for replica in (*meta.isr, *meta.observers):  # observers serve remote readers (below their HW)
            address = brokers.get(replica)
            if address is not None and address.rack == self.client_rack:
                return address
        return None

    def _fetch_once(self, tp: TopicPartition, start: int, max_bytes: int, max_wait_ms: int,
                    prefer_rack: bool = True, typed: dict | None = None) -> FetchedChunk:
        meta, broker = self._connections.leader_of(tp.topic, tp.partition)
        # A retry after a failed same-rack read goes to the leader, which can always answer.
        replica = self._same_rack_replica(meta) if prefer_rack else None
        if replica is None and max_wait_ms == 0:
            local = self._fetch_local(tp, start, max_bytes, meta.leader_epoch, broker, typed)
            if local is not None:
                return local
        broker = replica or broker
        request = wire.consumer_fetch_request([(tp.topic, tp.partition, start, meta.leader_epoch)],
                                              max_wait_ms=max_wait_ms, max_bytes=max_bytes,
                                              partition_max_bytes=max_bytes, client_rack=self.client_rack)
        if typed is not None:
            request["typed"] = typed
        transport = self._connections.transport
        options = transport.call_options((max_wait_ms + self._connections.request_timeout_ms) / 1000,
                                         (broker.host, broker.port))
        try:
            reader = self._connections.client_for(broker.host, broker.port).do_get(
                flight.Ticket(wire.dumps(request)), options)
            infos, stored = wire.split_fetch_answer(
                (wire.loads(chunk.app_metadata, "fetch response"), chunk.data) for chunk in reader)
        except Exception as exc:
            error = transport.refused(wire.to_ads_error(exc), options)
            if error.retriable:
                self._connections.drop(broker.host, broker.port)
            raise error from None
        info, batches = infos.get(tp.key()), received_batches(stored.get(tp.key(), []), typed)
        if info is None:
            raise error_for(-1, "fetch response carried no partition metadata")
        if info["error_code"]:
            error = error_for(info["error_code"], info.get("message", ""))
            if replica is not None and replica.broker_id != meta.leader and isinstance(error, OffsetOutOfRangeError):
                # A replica behind the position (an observer lags the HW) cannot tell lost data from data it has
                # not got yet: retriable, and the retry asks the leader (KIP-392).
                raise error_for(ErrorCode.OFFSET_NOT_AVAILABLE, f"replica {replica.broker_id} has not got offset "
                                f"{start} of {tp.topic}-{tp.partition}; asking the leader")
            raise error
        return fetched_chunk(batches, start, int(info["high_watermark"]), int(info["log_start_offset"]),
                             int(info.get("leader_epoch", meta.leader_epoch)), info.get("next_offset"))

    def _fetch_local(self, tp: TopicPartition, start: int, max_bytes: int, leader_epoch: int,
                     broker, typed: dict | None = None) -> FetchedChunk | None:
        """The fetch's batches mapped from the leader's segment files, or None when it is not on this host.
        ``typed``: read as the typed read asks (``client/typed.local_projection``), the same columns as Flight."""
        key = (broker.host, broker.port)
        if not self.local_reads or key in self._not_local:
            return None
        body = {"topic": tp.topic, "partition": tp.partition, "fetch_offset": start,
                "current_leader_epoch": leader_epoch, "partition_max_bytes": max_bytes}
        try:
            answer = self._connections.call_action(broker.host, broker.port, wire.ACTION_LOCATE, body)
        except InvalidRequestError:  # a broker without the local read path
            self._not_local.add(key)
            return None
        if int(answer.get("error_code", 0)):
            raise error_for(int(answer["error_code"]), answer.get("message", ""))
        try:
            batches = read_located(answer, local_projection(self._connections, typed), tp.partition)
        except SegmentsNotReadable as exc:
            # Another Unix user than the broker's, with security on: the files stay closed to this process, so
            # its fetches skip the locate from now on (said once per broker, not per fetch).
            self._not_local.add(key)
            log.info("broker %s:%s: its segment files are not readable by this process (%s); reading over "
                     "Flight instead", broker.host, broker.port, exc)
            return None
        except NotLocal as exc:
            if answer.get("host_id") != host_identity():
                self._not_local.add(key)
            log.debug("%s-%s: local read at %s not possible (%s); fetching", tp.topic, tp.partition, start, exc)
            return None
        self.local_fetches += 1
        return fetched_chunk(batches, start, int(answer["high_watermark"]), int(answer["log_start_offset"]),
                             leader_epoch, answer.get("next_offset"))

    def fetch_arrow(self, tp: TopicPartition, start_offset_inclusive: int, end_offset_exclusive: int,
                    max_bytes: int | None = None) -> pa.Table:
        """Committed records with offsets in [start, min(end, HW)) as one RECORD_SCHEMA table."""
        return self.fetch_range(tp, start_offset_inclusive, end_offset_exclusive, max_bytes).table

    def fetch_range(self, tp: TopicPartition, start_offset_inclusive: int, end_offset_exclusive: int,
                    max_bytes: int | None = None, typed: dict | None = None,
                    keep_until_exclusive: int | None = None) -> FetchedChunk:
        """As ``fetch_arrow``, with where reading [start, end) stopped: ``next_offset`` (<= end) is past every
        record returned and every offset compaction removed, so a reader of a range whose last offsets are gone
        finishes instead of waiting for them. ``next_offset == start``: nothing readable there yet (the HW).
        With start >= end no fetch is made (the HW and log start are then -1: not asked).
        ``keep_until_exclusive`` (>= end): the last fetch's rows up to it are kept too, and ``next_offset`` may
        pass ``end`` up to it (a reader stepping through a longer range, which would otherwise fetch the
        batches holding each step's end twice)."""
        keep_until = max(end_offset_exclusive, keep_until_exclusive or end_offset_exclusive)
        tables, position, chunk = [], start_offset_inclusive, None
        while position < end_offset_exclusive:
            chunk = self.fetch_chunk(tp, position, max_bytes=max_bytes, typed=typed)
            if chunk.next_offset <= position:
                break
            if chunk.table.num_rows:
                tables.append(chunk.table)
            position = chunk.next_offset
            if position >= chunk.high_watermark:
                break
        table = slice_offsets(pa.concat_tables(tables), start_offset_inclusive, keep_until) \
            if tables else empty_table()
        if chunk is None:
            return FetchedChunk(table, -1, -1, start_offset_inclusive)
        return FetchedChunk(table, chunk.high_watermark, chunk.log_start_offset,
                            min(position, max(keep_until, start_offset_inclusive)), chunk.leader_epoch)

    def poll_arrow(self, timeout: float = 1.0) -> dict[TopicPartition, pa.Table]:
        """Records from the assigned partitions that have some, as tables; advances positions.

        Waits up to ``timeout`` seconds for the first committed data (ads_spark/client/poll_fetcher.py).
        At most ``max.poll.records`` records in all; a partition cut short resumes after its last record
        returned, and one left out keeps its position (its records come again in a later poll).
        """
        started_s = time.monotonic()
        self._group_before_poll(timeout)  # joins, rejoins and auto-commits (client/groups/membership.py)
        timeout = max(0.0, timeout - (time.monotonic() - started_s))
        if self._poll_fetcher is None:
            self._poll_fetcher = PollFetcher(self)
        positions = {key: self._resolve_position(key) for key in self._positions}
        result = {}
        records_left = self.max_poll_records
        cut_short = None
        for key, chunk in self._poll_fetcher.poll(positions, timeout).items():
            table = chunk.table
            if records_left <= 0:  # left out: buffered again at the position it still has
                self._poll_fetcher.keep(key, positions[key], chunk)
                continue
            if table.num_rows > records_left:
                table = table.slice(0, records_left)
                self._positions[key] = table.column("offset")[-1].as_py() + 1
                rest = FetchedChunk(chunk.table.slice(records_left), chunk.high_watermark,
                                    chunk.log_start_offset, chunk.next_offset, chunk.leader_epoch)
                cut_short = (key, self._positions[key], rest)
            else:
                self._positions[key] = chunk.next_offset
            self._position_epochs[key] = chunk.leader_epoch
            records_left -= table.num_rows
            result[TopicPartition(*key)] = table
        if cut_short is not None:  # after the left-out partitions, so that they come first next time
            self._poll_fetcher.keep(*cut_short)
        return result

    def _skip_gap(self, key: tuple[str, int], from_offset: int, to_offset: int, leader_epoch: int) -> None:
        """The poll path found no record in [from_offset, to_offset) (compaction removed them, or whole batches):
        the position moves past the gap, unless it moved meanwhile (a seek)."""
        if self._positions.get(key) == from_offset:
            self._positions[key] = to_offset
            self._position_epochs[key] = leader_epoch

    def poll(self, timeout: float = 1.0) -> list[Record]:
        if self.typed_reads:
            raise InvalidRequestError(f"poll() returns Kafka-shaped records; typed topics "
                                      f"{sorted(self.typed_reads)} are read with poll_arrow()")
        tables = self.poll_arrow(timeout)
        records: list[Record] = []
        for tp, table in tables.items():
            records.extend(_to_records(tp, table))
        return records

    def close(self) -> None:
        """Closes the group membership first (auto commit, on_revoke, leave_group), then the fetches."""
        try:
            self._group_close()
        finally:
            self._close_reads()

    def _close_reads(self) -> None:
        if self._poll_fetcher is not None:
            self._poll_fetcher.close()
        if self._owns_connections:
            self._connections.close()


def _to_records(tp: TopicPartition, table: pa.Table) -> list[Record]:
    rows = table.num_rows
    timestamps_ms = table.column("timestamp").cast(pa.int64()).to_pylist()
    headers_column = table.column("headers")
    if headers_column.null_count == rows:
        headers = [[] for _ in range(rows)]
    else:
        headers = [[(h["key"], h["value"]) for h in (entry or [])] for entry in headers_column.to_pylist()]
    return list(map(Record._make, zip(itertools.repeat(tp.topic, rows), itertools.repeat(tp.partition, rows),
                                      table.column("offset").to_pylist(), timestamps_ms,
                                      table.column("key").to_pylist(), table.column("value").to_pylist(), headers)))
