"""Request handlers of the data plane: produce, fetch, list offsets.

Each handler validates its request fully before it touches a partition, so a
bad request changes nothing. Fetches long-poll: when nothing is readable they
wait (bounded by the request's ``max_wait_ms`` and the broker's cap) for an
append or HW move instead of sleeping.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc

from ads_spark.config_schemas import ARROW, schema_type
from ads_spark.protocol import request_schemas, wire
from ads_spark.local_reads import describe_segments, host_identity
from ads_spark.errors import AdsError, InvalidRecordError, ErrorCode, InvalidRequestError, InvalidTopicError, error_for
from ads_spark.broker.group.offsets_topic import is_internal
from ads_spark.broker.replica.partition import Partition
from ads_spark.broker.rpc import authorization, call_context
from ads_spark.broker.rpc.server import error_response
from ads_spark.broker.typed_fetch import TypedRead
from ads_spark.broker.typed_produce import conform_typed_batch, refuse_typed_batch
from ads_spark.protocol.records import (
    TIMESTAMP_TYPE_CREATE_TIME, TIMESTAMP_TYPE_LOG_APPEND_TIME, as_message_batch, conform_produce_batch, now_ms,
)
from ads_spark.replication import epochs
from ads_spark.replication.state import Role

FETCH_MAX_BYTES_DEFAULT = 50 << 20
PARTITION_FETCH_MAX_BYTES_DEFAULT = 1 << 20


def check_record_batch(batch: pa.RecordBatch, topic: str, partition: int) -> None:
    """Refuse a batch whose buffers contradict its own header before anything reads them.

    Flight decodes a produce stream's IPC message without checking the body against the header: a batch
    with a valid schema and header over random bytes (offsets pointing anywhere) was accepted, and the first
    read of it (``nbytes``) crashed the broker with SIGSEGV inside libarrow. Full validation checks every
    offset and length against the buffers (and UTF-8 of string columns); it costs ~7 us for a 4 MiB batch of
    1 KiB values, ~18 us with headers, against milliseconds to append and replicate it."""
    try:
        batch.validate(full=True)
    except (pa.ArrowInvalid, pa.ArrowException) as exc:
        raise InvalidRecordError(f"{topic}-{partition}: the record batch does not match its own header "
                                  f"({str(exc).splitlines()[0][:200]})") from None


def check_keys_for_policy(batch: pa.RecordBatch, topic: str, cleanup_policy: str) -> None:
    """A compacted topic keeps the latest record per key, so a record without a key is refused there
    (INVALID_RECORD, as Kafka does), before anything is appended."""
    if "compact" in cleanup_policy.split(",") and batch.column("key").null_count:
        first = pc.index(batch.column("key").is_null(), True).as_py()
        raise InvalidRecordError(f"topic '{topic}' has cleanup.policy={cleanup_policy}: every record needs a key "
                                 f"(record {first} of the batch has none); nothing was appended")


def consumer_next_offset(fetch_offset: int, end_offset_exclusive: int, spans: list) -> int | None:
    """Where a consumer's next fetch starts after reading ``spans`` ((base offset, offset span) of each batch
    sent, in order) from ``fetch_offset`` below ``end_offset_exclusive`` (its read bound).

    A compacted batch keeps its offset span but not every row, and whole batches may be gone: the last row sent
    + 1 can be inside a gap, where a reader would ask again for nothing. So the answer names the end of the last
    batch's span, capped at the bound; with nothing sent though the fetch offset is below the bound (the read
    found no batch there), the bound itself. None: nothing to say (the reader stays where it is)."""
    if spans:
        base_offset, offset_span = spans[-1]
        return min(end_offset_exclusive, base_offset + offset_span)
    return end_offset_exclusive if fetch_offset < end_offset_exclusive else None


def _any_gap_skipped(responses) -> bool:
    """A partition with nothing sent but a next offset past a gap: answered at once, so the reader moves on
    instead of long-polling for records that were compacted away."""
    return any(not batches and "next_offset" in meta for meta, batches in responses)


def _as_typed_read(batches: list, spec: dict, typed: TypedRead | None) -> tuple[list, int]:
    """A consumer's batches as its read sends them (typed ones only to a typed read of their topic), and how
    many the read's filters skipped by their statistics (``TypedRead.may_match``)."""
    if typed is None:
        if any(header.schema_id for _, header in batches):
            raise InvalidRequestError(f"topic '{spec['topic']}' is typed (schema.type=arrow): fetch it as a typed "
                                      f"read naming a schema version")
        return batches, 0
    if spec["topic"] != typed.topic:
        raise InvalidRequestError(f"a typed read of topic '{typed.topic}' cannot fetch topic '{spec['topic']}'")
    kept = [(batch, header) for batch, header in batches if typed.may_match(header)]
    sent = [(typed.convert(batch, header, spec["partition"]), header) for batch, header in kept]
    return sent, len(batches) - len(kept)


def _or(value: Any, default: Any) -> Any:
    """A checked optional field: absent and null both mean the default."""
    return default if value is None else value


class DataHandlers:
    def __init__(self, broker):
        self.broker = broker
        self.replicas = broker.replica_manager
        # Request counts for the metrics endpoint (plain ints: a lost increment under a race is
        # acceptable for a rate, a lock on every request is not). "fetch_empty": fetches answered
        # with no data, the cost of long-polls that wake for nothing. "fetch_follower_read": consumer
        # partition reads this broker answered as a follower or observer (KIP-392, same rack).
        self.request_counts = {"produce": 0, "fetch_follower": 0, "fetch_consumer": 0, "fetch_empty": 0,
                               "fetch_follower_read": 0}
        # Partitions whose produce or fetch failed (Kafka's FailedProduceRequestsPerSec and
        # FailedFetchRequestsPerSec, which count per partition too), same plain ints.
        self.failed_counts = {"produce": 0, "fetch": 0}
        # Arrow bytes of the record batches fetches returned, by reader (ads_fetch_bytes_total): what a
        # typed read's projection saves shows here.
        self.fetched_bytes = {"consumer": 0, "follower": 0}
        # Batches typed reads did not send because their statistics ruled out the read's filters
        # (ads_fetch_batches_skipped_total; a long-poll that reads again counts its skips again).
        self.skipped_batches = 0
        self._rotation = 0  # where the next fetch starts reading (a race only shifts a start: no lock)

    # ---- produce ----------------------------------------------------------------

    def handle_produce_chunk(self, batch: pa.RecordBatch | None, app_metadata: pa.Buffer | None,
                             respond: Callable[[dict], None]) -> None:
        correlation_id = None
        self.request_counts["produce"] += 1
        try:
            meta = wire.loads(app_metadata, "produce batch metadata")
            if isinstance(meta, dict) and type(meta.get("correlation_id")) is int:
                correlation_id = meta["correlation_id"]  # so that even a refusal is matched to its request
            request_schemas.check(request_schemas.PRODUCE_BATCH_METADATA, meta, "produce")
            # Each chunk names its topic: Write on it, checked before anything reads the batch.
            authorization.authorize_call(getattr(self.broker, "security", None), call_context.current(), "produce", meta)
            # Checked above (types, ranges, names): read as they are, with the defaults of absent fields.
            topic, partition = meta["topic"], meta["partition"]
            if is_internal(topic):  # only group coordinators append to __consumer_offsets (broker/group/)
                raise InvalidTopicError(f"topic '{topic}' is internal: clients may not produce to it")
            acks = wire.parse_acks(_or(meta.get("acks"), "all"))
            timeout_ms = min(_or(meta.get("timeout_ms"), 30000), self.broker.config["request.timeout.ms.max"])
            producer = (_or(meta.get("producer_id"), -1), _or(meta.get("producer_epoch"), -1),
                        _or(meta.get("base_sequence"), -1))
            if batch is None:
                raise InvalidRequestError("produce chunk carries no record batch")
            check_record_batch(batch, topic, partition)
            topic_config = self.broker.topic_config(topic)
            if schema_type(topic_config) == ARROW:
                topic_id = self.replicas.get(topic, partition).topic_id
                conformed = conform_typed_batch(batch, topic, topic_id, self.broker.schemas)
            else:
                refuse_typed_batch(batch, topic)
                conformed = conform_produce_batch(batch)
            check_keys_for_policy(conformed, topic, topic_config["cleanup.policy"])
            max_bytes = topic_config["max.message.bytes"]
            # message.timestamp.type=LogAppendTime: the broker's clock replaces the producer's timestamps,
            # and the answer carries that time (Kafka's ProduceResponse log_append_time_ms; -1 otherwise).
            log_append_time = topic_config["message.timestamp.type"] == "LogAppendTime"
            append_time_ms = now_ms()

            record_count = conformed.num_rows

            def complete(base_offset: int, error: AdsError | None) -> None:
                if error is not None:
                    self.failed_counts["produce"] += 1
                    respond(error_response(correlation_id, error))
                elif acks == 0:
                    respond(None)  # acks=0: no answer (the client did not wait); errors are still sent
                else:
                    respond({"correlation_id": correlation_id, "error_code": 0,
                             "base_offset": base_offset, "record_count": record_count,
                             "log_append_time_ms": append_time_ms if log_append_time else -1})

            self.replicas.produce(topic, partition, conformed, acks=acks, timeout_ms=max(timeout_ms, 0),
                                  max_message_bytes=max_bytes, producer=producer, complete=complete,
                                  timestamp_type=TIMESTAMP_TYPE_LOG_APPEND_TIME if log_append_time
                                  else TIMESTAMP_TYPE_CREATE_TIME, append_time_ms=append_time_ms)
        except Exception as exc:  # every failure is answered; the stream and the broker go on
            self.failed_counts["produce"] += 1
            respond(error_response(correlation_id, exc))

    # ---- fetch --------------------------------------------------------------------

    def handle_fetch(self, request: dict[str, Any], replica_messages: bool = False,
                     typed: TypedRead | None = None) -> list[tuple[dict, list]]:
        """``replica_messages``: a follower's session; batches go as stored IPC messages (REPLICA_MESSAGE_SCHEMA).
        ``typed``: a consumer's read of a typed topic; batches go in ``typed.schema`` (``broker/typed_fetch.py``).

        ``request`` has passed ``request_schemas.FETCH`` at the boundary: fields are read as they are."""
        replica_id = _or(request.get("replica_id"), -1)
        if replica_messages and replica_id < 0:
            raise InvalidRequestError("a replica fetch session serves followers only (replica_id >= 0)")
        broker_epoch = _or(request.get("broker_epoch"), -1)
        max_wait_ms = min(_or(request.get("max_wait_ms"), 0), self.broker.config["fetch.wait.max.ms.max"])
        min_bytes = _or(request.get("min_bytes"), 1)
        # fetch.max.bytes bounds one answer across all its partitions, whatever the request asks for.
        max_bytes = max(1, min(_or(request.get("max_bytes"), FETCH_MAX_BYTES_DEFAULT),
                               self.broker.config["fetch.max.bytes"]))
        client_rack = request.get("client_rack") or None
        specs = [self._fetch_spec(entry) for entry in request["partitions"]]
        deadline = time.monotonic() + max_wait_ms / 1000
        self.request_counts["fetch_follower" if replica_id >= 0 else "fetch_consumer"] += 1
        keys = {(spec["topic"], spec["partition"]) for spec in specs}
        # A follower waits for data (or a role/epoch change); a consumer also for HW moves, which
        # make data readable to it.
        changed = self.replicas.watch(keys, wake_on_high_watermark=replica_id < 0)
        try:
            while True:
                changed.clear()
                responses, total_bytes = self._read_all(specs, replica_id, broker_epoch, max_bytes, client_rack,
                                                        replica_messages, typed)
                remaining_s = deadline - time.monotonic()
                if total_bytes >= min_bytes or remaining_s <= 0 or self._any_error(responses) \
                        or _any_gap_skipped(responses):
                    if not total_bytes:
                        self.request_counts["fetch_empty"] += 1
                    self.fetched_bytes["follower" if replica_id >= 0 else "consumer"] += total_bytes
                    return responses
                changed.wait(remaining_s)
        finally:
            self.replicas.unwatch(keys, changed)

    @staticmethod
    def _any_error(responses) -> bool:
        return any(meta.get("error_code") or meta.get("diverging_epoch") for meta, _ in responses)

    @staticmethod
    def _fetch_spec(entry: dict[str, Any]) -> dict[str, Any]:
        """A partition of a fetch (or a locate), checked by ``request_schemas.FETCH_PARTITION``, with defaults."""
        return {
            "topic": entry["topic"], "partition": entry["partition"], "fetch_offset": entry["fetch_offset"],
            "current_leader_epoch": _or(entry.get("current_leader_epoch"), -1),
            "last_fetched_epoch": _or(entry.get("last_fetched_epoch"), -1),
            "partition_max_bytes": max(1, _or(entry.get("partition_max_bytes"), PARTITION_FETCH_MAX_BYTES_DEFAULT)),
        }

    def _read_all(self, specs, replica_id: int, broker_epoch: int, max_bytes: int, client_rack: str | None,
                  replica_messages: bool = False, typed: TypedRead | None = None):
        responses, total_bytes = [], 0
        # Reading starts at a different partition each time, so that partitions late in a request are not
        # starved when earlier ones use up max_bytes (Kafka's fetch sessions rotate likewise).
        self._rotation = start = (self._rotation + 1) % max(len(specs), 1)
        for spec in specs[start:] + specs[:start]:
            # Each partition may send one batch larger than its share (a reader must get past a batch larger
            # than its limits) while the answer is under max_bytes; past it, partitions are answered with
            # their metadata only: the answer's size stays bounded by max_bytes and one batch.
            remaining = max_bytes - total_bytes
            budget = max(1, min(spec["partition_max_bytes"], remaining)) if remaining > 0 else 0
            meta = {"topic": spec["topic"], "partition": spec["partition"], "error_code": 0}
            try:
                partition = self.replicas.get(spec["topic"], spec["partition"])
                batches = self._read_one(partition, spec, replica_id, broker_epoch, budget, meta, client_rack,
                                         replica_messages, typed)
            except AdsError as exc:
                self.failed_counts["fetch"] += 1
                meta.update(error_code=int(exc.code), message=exc.message or str(exc))
                batches = []
            responses.append((meta, batches))
            total_bytes += sum(batch.nbytes for batch, _ in batches)
        return responses, total_bytes

    def _read_one(self, partition: Partition, spec, replica_id: int, broker_epoch: int, budget: int,
                  meta: dict, client_rack: str | None = None, replica_messages: bool = False,
                  typed: TypedRead | None = None) -> list:
        if replica_id >= 0:
            return self._read_for_follower(partition, spec, replica_id, broker_epoch, budget, meta,
                                           replica_messages)
        allow_follower = self.broker.may_serve_follower_read(client_rack)
        end = partition.consumer_read_bound(spec["current_leader_epoch"], spec["fetch_offset"], allow_follower)
        state = partition.state
        meta.update(high_watermark=end, log_start_offset=state.log_start_offset,
                    log_end_offset=state.log_end_offset, leader_epoch=state.leader_epoch)
        if state.role is not Role.LEADER:  # the bound check let a same-rack read through to this replica
            self.request_counts["fetch_follower_read"] += 1
        if budget <= 0:
            return []
        batches = partition.read(spec["fetch_offset"], end, budget)
        # From every batch read, sent or skipped by the read's filters: the reader moves past skipped batches,
        # and offsets stay those of the log, so a replay reads the same rows.
        next_offset = consumer_next_offset(spec["fetch_offset"], end,
                                           [(header.base_offset, header.record_count) for _, header in batches[-1:]])
        batches, skipped = _as_typed_read(batches, spec, typed)
        self.skipped_batches += skipped
        if next_offset is not None:
            meta["next_offset"] = next_offset
        return batches

    def _read_for_follower(self, partition: Partition, spec, replica_id: int, broker_epoch: int, budget: int,
                           meta: dict, replica_messages: bool = False) -> list:
        """The core decides (fencing, divergence, ISR, HW); this reads what it says to send."""
        reply = partition.on_follower_fetch(replica_id, broker_epoch, spec["current_leader_epoch"],
                                            spec["fetch_offset"], spec["last_fetched_epoch"], now_ms())
        meta.update(high_watermark=reply.high_watermark, log_start_offset=reply.log_start_offset,
                    log_end_offset=reply.read_end_offset_exclusive, leader_epoch=reply.leader_epoch)
        if reply.error is not ErrorCode.NONE:
            raise error_for(reply.error, f"{partition.topic}-{partition.partition}: follower {replica_id} "
                                         f"fetch at {spec['fetch_offset']} refused: {reply.error.name}")
        if reply.diverging_epoch is not None:
            meta["diverging_epoch"] = {"epoch": reply.diverging_epoch[0], "end_offset": reply.diverging_epoch[1]}
            return []
        budget = partition.replication_budget(replica_id, budget, time.monotonic())
        if budget <= 0:
            return []  # throttled catch-up (reassignment): the follower asks again
        if not replica_messages:
            return partition.read(spec["fetch_offset"], reply.read_end_offset_exclusive, budget)
        stored = partition.read(spec["fetch_offset"], reply.read_end_offset_exclusive, budget, as_messages=True)
        return [(as_message_batch(message), header) for message, header in stored]

    # ---- locate (the local read path) -----------------------------------------------

    def handle_locate(self, body: dict[str, Any]) -> dict[str, Any]:
        """What a consumer fetch from ``fetch_offset`` would return, as places in the segment files."""
        spec = self._fetch_spec(body)
        try:
            partition = self.replicas.get(spec["topic"], spec["partition"])
            end = partition.consumer_read_bound(spec["current_leader_epoch"], spec["fetch_offset"], False)
            located = partition.locate(spec["fetch_offset"], end, spec["partition_max_bytes"])
        except AdsError:
            self.failed_counts["fetch"] += 1  # a failed fetch of the local read path
            raise
        segments = describe_segments(located)
        answer = {"error_code": 0, "host_id": host_identity(), "high_watermark": end,
                  "log_start_offset": partition.state.log_start_offset, "segments": segments}
        # Read after locate: the log start only grows, so a fetch offset at or above it now was in range then,
        # and an empty answer means nothing is stored in [fetch_offset, end) (a gap left by compaction).
        in_range = spec["fetch_offset"] >= answer["log_start_offset"]
        if segments or (not located and in_range):  # not when the files moved away between locate and stat
            spans = [(base, count) for segment in segments for _, _, base, count in segment["batches"]]
            next_offset = consumer_next_offset(spec["fetch_offset"], end, spans)
            if next_offset is not None:
                answer["next_offset"] = next_offset
        return answer

    # ---- offset for leader epoch (KIP-320, a consumer's check of its position) ----------------

    def handle_offset_for_leader_epoch(self, body: dict[str, Any]) -> dict[str, Any]:
        """Where this leader's log ends for each asked epoch: (largest epoch <= it, that epoch's end offset).

        Followers get the same answer inside their fetches (a diverging epoch); consumers, which do not send
        the epoch of what they read with every fetch, ask it here after a leader change. Only the leader
        answers, in the leader epoch the client names, so a deposed leader cannot vouch for a position.
        ``body`` has passed ``request_schemas`` ("offset_for_leader_epoch")."""
        results = []
        for entry in body["partitions"]:
            item = {"topic": entry["topic"], "partition": entry["partition"], "error_code": 0}
            try:
                partition = self.replicas.get(entry["topic"], entry["partition"])
                partition.check_leader(_or(entry.get("current_leader_epoch"), -1))
                state = partition.state  # one immutable state: the cache and the log end agree
                epoch, end_offset = epochs.end_offset_for(state.epochs, entry["leader_epoch"], state.log_end_offset)
                item.update(leader_epoch=epoch, end_offset=end_offset, log_end_offset=state.log_end_offset)
            except AdsError as exc:
                item.update(error_code=int(exc.code), message=exc.message or str(exc))
            results.append(item)
        return {"partitions": results}

    # ---- list offsets -------------------------------------------------------------

    def handle_list_offsets(self, body: dict[str, Any]) -> dict[str, Any]:
        results = []
        for entry in wire.require(body, "partitions", list, "list_offsets"):
            topic = wire.require(entry, "topic", str, "list_offsets")
            number = wire.require(entry, "partition", int, "list_offsets")
            timestamp = wire.require(entry, "timestamp", int, "list_offsets")
            item = {"topic": topic, "partition": number, "error_code": 0}
            try:
                item.update(self._list_offset(topic, number, timestamp,
                                              wire.optional(entry, "current_leader_epoch", int, -1, "list_offsets")))
            except AdsError as exc:
                item.update(error_code=int(exc.code), message=exc.message or str(exc))
            results.append(item)
        return {"partitions": results}

    def _list_offset(self, topic: str, number: int, timestamp: int, leader_epoch: int) -> dict[str, Any]:
        partition = self.replicas.get(topic, number)
        hw = partition.list_offsets_bound(leader_epoch)
        log_start = partition.state.log_start_offset
        base = {"high_watermark": hw, "log_start_offset": log_start, "leader_epoch": partition.leader_epoch}
        if timestamp == -2:
            return {**base, "offset": log_start, "timestamp": -1}
        if timestamp == -1:
            return {**base, "offset": hw, "timestamp": -1}
        if timestamp < 0:
            raise InvalidRequestError(f"list_offsets timestamp must be -2, -1 or >= 0, got {timestamp}")
        found = partition.log.offset_for_timestamp(timestamp)
        if found is None or found[0] >= hw:
            return {**base, "offset": hw, "timestamp": -1, "found": False}
        return {**base, "offset": found[0], "timestamp": found[1], "found": True}
