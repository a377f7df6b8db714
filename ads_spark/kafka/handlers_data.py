"""Kafka's data-plane APIs on ADS: Produce, Fetch, ListOffsets, OffsetForLeaderEpoch, InitProducerId.

Each Kafka request becomes ADS's own call, so a record written or read through the Kafka port takes
the path a Flight client's takes: a produced batch goes to ``DataHandlers.handle_produce_chunk`` (which
authorizes Write on its topic, checks it, dedupes an idempotent producer's retry per partition and
replicates it with the request's acks), a fetch to ``Broker.handle_fetch`` after the Flight server's
authorization (which long-polls, bounds the read by the HW, fences an old or unknown leader epoch and
returns the whole batch holding the fetch offset, at least one batch past max bytes), and list
offsets, epochs and producer ids to ADS's actions through ``bridge``. This module only translates:
fields one way, answers and error codes (ADS's codes are Kafka's numbers) the other, and records
through the compiled codec (``record_batches``: one Kafka batch v2 <-> one ADS Arrow batch; nothing
here loops over records).

Kafka's per-partition answers are kept: a partition whose topic the caller may not use is answered
TOPIC_AUTHORIZATION_FAILED and the rest of the request is served, as Kafka does (ADS's Flight fetch
refuses the whole request instead). What ADS does not have is answered honestly, never faked:
transactions (a transactional id is TRANSACTIONAL_ID_AUTHORIZATION_FAILED, a fatal error clients
report as such), fetch sessions (session id 0: every answer is a full one, KIP-227's sessionless
mode), follower fetches from a Kafka replica (INVALID_REQUEST: ADS's followers replicate over Flight),
and aborted transactions (always none, so the last stable offset is the HW).

Typed topics (``schema.type=arrow``, issue #26) hold Arrow columns, not key/value records: a Produce to one
is INVALID_RECORD per partition naming ADS's Arrow producer (before decoding), a Fetch of one
``TYPED_TOPIC_FETCH_ERROR`` per partition; ListOffsets, OffsetForLeaderEpoch and Metadata answer as for any topic.
"""

from __future__ import annotations

import datetime
import struct
import threading
from typing import Any, Callable, Iterable

import crc32c
import pyarrow as pa

from ads_spark.broker.rpc import authorization, call_context
from ads_spark.config_schemas import ARROW, SCHEMA_TYPE
from ads_spark.errors import (
    AdsError, ErrorCode, InvalidRecordError, RequestTimedOutError, UnsupportedCompressionTypeError,
)
from ads_spark.kafka import bridge, entities, record_batches
from ads_spark.kafka.api import ApiHandler, KafkaCall
from ads_spark.protocol import request_schemas, wire
from ads_spark.protocol.names import is_valid_topic_name
from ads_spark.protocol.schema_kinds import PARTITION_ID_MAX

PRODUCE_KEY, FETCH_KEY, LIST_OFFSETS_KEY, INIT_PRODUCER_ID_KEY, OFFSET_FOR_LEADER_EPOCH_KEY = 0, 1, 2, 22, 23

# Kafka's codes for what ADS has no error class of its own (its classes carry Kafka's numbers too).
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71

# A Kafka fetch of a typed topic's partition. Fetch answers carry no per-partition message, so the code alone
# must say why and end the read: 43 ("message format on broker does not support request") is Kafka's code for
# stored records a fetch cannot be served as; librdkafka hands it to the application as a consumer error, not
# retriable (nor in kio), and the Java consumer throws on it. INVALID_REQUEST would blame the client's request,
# CORRUPT_MESSAGE is retriable, TOPIC_AUTHORIZATION_FAILED / UNKNOWN_TOPIC_OR_PARTITION point at ACLs / metadata.
TYPED_TOPIC_FETCH_ERROR = UNSUPPORTED_FOR_MESSAGE_FORMAT

ZSTD_PRODUCE_VERSION_MIN = 7  # Kafka accepts zstd batches from Produce v7 on (KIP-110)
# A produce request waits for its partitions' answers up to its own timeout (capped by the broker's
# request.timeout.ms.max, as ADS's produce path caps it) plus this: ADS answers each partition by then
# (REQUEST_TIMED_OUT at the latest), so the margin only covers the tick that expires it.
PRODUCE_ANSWER_MARGIN_S = 5.0
# Kafka's "no session" (FetchRequest session_epoch FINAL) and "open one" (INITIAL) epochs.
SESSION_EPOCH_FINAL, SESSION_EPOCH_INITIAL = -1, 0


def ms_of(value: Any) -> int:
    """Milliseconds of a kio ``timedelta`` field (or an int already in ms)."""
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    return int(value)


def refused_topics(call: KafkaCall, name: str, topics: Iterable[str], body_of: Callable[[str], dict]) -> dict[str, int]:
    """The error code of each topic the caller may not make request ``name`` on (absent: allowed), decided by
    ADS's one authorization path per topic, so the rest of a Kafka request is still served."""
    security = getattr(call.broker, "security", None)
    refused = {}
    for topic in dict.fromkeys(topics):
        try:
            authorization.authorize_call(security, call.context, name, body_of(topic))
        except AdsError as exc:
            refused[topic] = int(exc.code)
    return refused


def _in_partitions(topic: str) -> dict:
    return {"partitions": [{"topic": topic}]}


def group_by_topic(answers: list[tuple[str, dict]], topic_field: str, partitions_field: str) -> list[dict]:
    """Kafka's per-topic answer lists, topics in the order the request named them first."""
    grouped: dict[str, list] = {}
    for topic, answer in answers:
        grouped.setdefault(topic, []).append(answer)
    return [{topic_field: topic, partitions_field: items} for topic, items in grouped.items()]


def _typed(call: KafkaCall, topic: str) -> bool:
    """A typed topic (``schema.type=arrow``): no Kafka record batch can be written to or read from it."""
    return call.broker.topic_config(topic).get(SCHEMA_TYPE) == ARROW


# ---- Produce ----------------------------------------------------------------------------------------


# Batches decoded at once, across every connection. A compressed batch inflates up to its topic's
# max.message.bytes before it is refused, and that memory is not counted by queued.max.request.bytes (which
# counts bytes read): without this bound, bombs sent on many connections at once cost that many times the
# limit (8 bombs peaked at +600 MiB). Decoding is fast next to appending (~0.2 us a record), so the two cores
# never wait on this.
DECODES_AT_ONCE_MAX = 4
_decoding = threading.BoundedSemaphore(DECODES_AT_ONCE_MAX)
DECODE_WAIT_S = 30.0


def decode_one_batch(records: Any, version: int, uncompressed_bytes_max: int) -> record_batches.KafkaBatch:
    """The one v2 batch of a partition's ``records`` (Kafka's rule for Produce v3+), decoded; typed errors:
    none or several batches -> INVALID_RECORD, a bad CRC or framing -> CORRUPT_MESSAGE, zstd before v7 ->
    UNSUPPORTED_COMPRESSION_TYPE, records inflating past ``uncompressed_bytes_max`` -> RECORD_TOO_LARGE."""
    if not records:
        raise InvalidRecordError("a produce partition carries no record batch")
    batches = record_batches.split_batches(records)
    if len(batches) != 1:
        raise InvalidRecordError(f"a produce request (v3+) carries exactly one record batch per partition, "
                                 f"got {len(batches)}")
    if not _decoding.acquire(timeout=DECODE_WAIT_S):
        raise RequestTimedOutError(f"{DECODES_AT_ONCE_MAX} record batches were being decoded for "
                                   f"{DECODE_WAIT_S:.0f} s; retry")
    try:
        batch = record_batches.decode_batch(batches[0], uncompressed_bytes_max)
    finally:
        _decoding.release()
    if batch.compression == record_batches.COMPRESSION_ZSTD and version < ZSTD_PRODUCE_VERSION_MIN:
        raise UnsupportedCompressionTypeError(f"zstd needs Produce v{ZSTD_PRODUCE_VERSION_MIN} or later, "
                                              f"the request is v{version}")
    return batch


def produce_meta(topic: str, partition: int, acks: int, timeout_ms: int, batch: record_batches.KafkaBatch,
                 correlation_id: int) -> dict:
    """ADS's produce chunk metadata (request_schemas.PRODUCE_BATCH_METADATA) of one Kafka partition."""
    return {"topic": topic, "partition": partition, "acks": acks, "timeout_ms": max(timeout_ms, 0),
            "correlation_id": correlation_id, "producer_id": batch.producer_id,
            "producer_epoch": batch.producer_epoch, "base_sequence": batch.base_sequence}


def produce_partition_answer(index: int, answer: dict | None, log_start_offset: int) -> dict:
    """Kafka's PartitionProduceResponse of ADS's answer to one chunk (None: none came in time)."""
    if answer is None:
        return {"index": index, "error_code": int(ErrorCode.REQUEST_TIMED_OUT), "base_offset": -1,
                "log_start_offset": -1, "error_message": "no answer from the partition in time"}
    code = int(answer.get("error_code") or 0)
    if code:
        return {"index": index, "error_code": code, "base_offset": -1, "log_start_offset": -1,
                "error_message": answer.get("message")}
    append_ms = answer.get("log_append_time_ms", -1)
    return {"index": index, "error_code": 0, "base_offset": answer["base_offset"],
            "log_append_time": None if append_ms is None or append_ms < 0 else append_ms,
            "log_start_offset": log_start_offset}


class _Answers:
    """The answers of a produce request's partitions, which come from other threads (acks=all completes when
    followers fetch); ``wait`` returns when all came or the time is up."""

    def __init__(self, count: int):
        self.values: list[dict | None] = [None] * count
        self._missing = count
        self._done = threading.Condition()

    def responder(self, slot: int) -> Callable[[dict | None], None]:
        answered = [False]

        def respond(answer: dict | None) -> None:
            with self._done:
                if answered[0]:
                    return
                answered[0] = True
                # acks=0 success answers None: recorded as a success without an offset
                self.values[slot] = {"error_code": 0, "base_offset": -1} if answer is None else answer
                self._missing -= 1
                self._done.notify_all()
        return respond

    def wait(self, timeout_s: float) -> None:
        with self._done:
            self._done.wait_for(lambda: self._missing == 0, timeout=timeout_s)


def handle_produce(call: KafkaCall, request: Any) -> dict | None:
    acks = int(request.acks)
    timeout_ms = min(max(ms_of(request.timeout), 0), call.broker.config["request.timeout.ms.max"])
    entries = [(topic.name, part.index, part.records) for topic in request.topic_data for part in topic.partition_data]
    answers = _Answers(len(entries))
    refusal = _produce_refusal(request, acks)
    for slot, (topic, index, records) in enumerate(entries):
        respond = answers.responder(slot)
        if refusal is not None:
            respond(refusal)
        else:
            _submit_partition(call, topic, index, records, acks, timeout_ms, respond)
    answers.wait(timeout_ms / 1000 + PRODUCE_ANSWER_MARGIN_S)
    if acks == 0:
        failed = [(topic, index, answer) for (topic, index, _), answer in zip(entries, answers.values)
                  if answer is None or answer.get("error_code")]
        if failed:
            # Kafka's broker closes an acks=0 producer's connection on an error: the only way it can tell it
            topic, index, answer = failed[0]
            raise AdsError(f"acks=0 produce to {topic}-{index} failed: "
                           f"{(answer or {}).get('message') or 'no answer in time'}")
        return None
    replicas = call.broker.replica_manager
    results = []
    for (topic, index, _), answer in zip(entries, answers.values):
        found = replicas.maybe_get(topic, index) if answer and not answer.get("error_code") else None
        results.append((topic, produce_partition_answer(index, answer, found.state.log_start_offset if found else -1)))
    return {"responses": group_by_topic(results, "name", "partition_responses")}


def _produce_refusal(request: Any, acks: int) -> dict | None:
    """The answer of every partition of a request ADS refuses whole, else None."""
    if getattr(request, "transactional_id", None) is not None:
        return {"error_code": TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                "message": "ADS has no transactions: a transactional producer is refused"}
    if acks not in (-1, 0, 1):
        return {"error_code": int(ErrorCode.INVALID_REQUIRED_ACKS), "message": f"acks must be -1, 0 or 1, not {acks}"}
    return None


def _submit_partition(call: KafkaCall, topic: str, index: int, records: Any, acks: int, timeout_ms: int,
                      respond: Callable[[dict | None], None]) -> None:
    """Hand one partition's batch to ADS's produce path; every outcome comes back through ``respond``."""
    refused = refused_topics(call, "produce", [topic], lambda name: {"topic": name})
    if refused:  # before decoding: a caller without Write costs the broker no decompression
        respond({"error_code": refused[topic], "message": f"not authorized to write to {topic}"})
        return
    if _typed(call, topic):  # before decoding: nothing of the batch could be stored
        respond({"error_code": int(ErrorCode.INVALID_RECORD),
                 "message": f"topic '{topic}' is typed ({SCHEMA_TYPE}={ARROW}): its records are the columns of "
                            f"a registered Arrow schema, not Kafka key/value records; produce to it with ADS's "
                            f"Arrow producer (Producer.produce_arrow); nothing was stored"})
        return
    try:
        # Arrow holds a record in about as many bytes as Kafka's varints do: the topic's batch limit bounds
        # what a batch may inflate to (a larger one is refused by the append anyway).
        batch = decode_one_batch(records, call.version, call.broker.topic_config(topic)["max.message.bytes"])
    except AdsError as exc:  # nothing is stored
        respond({"error_code": int(exc.code), "message": exc.message or str(exc)})
        return
    meta = produce_meta(topic, index, acks, timeout_ms, batch, call.header.correlation_id)
    with call_context.using(call.context):  # the chunk is authorized (again, cached) under this caller
        call.broker.data.handle_produce_chunk(batch.records, pa.py_buffer(wire.dumps(meta)), respond)


# ---- Fetch ------------------------------------------------------------------------------------------


def fetch_plan(request: Any) -> tuple[list[tuple[str, int]], list[dict], dict[tuple[str, int], int]]:
    """(every asked partition in request order, ADS's fetch entries, the error code of each partition answered
    without reading). Values ADS's schema refuses (a negative offset or partition, a name that is no topic's)
    are answered per partition as Kafka does, not as a refused request."""
    order, entries, errors = [], [], {}
    seen = set()
    for topic in request.topics:
        for part in topic.partitions:
            key = (topic.topic, int(part.partition))
            if key in seen:  # named twice: answered once (Kafka keeps one entry per partition too)
                continue
            seen.add(key)
            order.append(key)
            if not is_valid_topic_name(topic.topic) or not 0 <= key[1] <= PARTITION_ID_MAX:
                errors[key] = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            elif part.fetch_offset < 0:
                errors[key] = int(ErrorCode.OFFSET_OUT_OF_RANGE)
            else:
                entries.append({"topic": key[0], "partition": key[1], "fetch_offset": int(part.fetch_offset),
                                "current_leader_epoch": max(int(getattr(part, "current_leader_epoch", -1)), -1),
                                "partition_max_bytes": max(int(part.partition_max_bytes), 0)})
    return order, entries, errors


def fetch_body(request: Any, entries: list[dict], answer_at_once: bool) -> dict:
    """ADS's fetch request (request_schemas.FETCH) of a consumer's Kafka fetch."""
    return {"type": "fetch", "replica_id": -1,
            "max_wait_ms": 0 if answer_at_once else max(ms_of(request.max_wait), 0),
            "min_bytes": max(int(request.min_bytes), 0),
            "max_bytes": max(int(getattr(request, "max_bytes", 0x7FFFFFFF)), 0),
            "partitions": entries}


def fetch_partition_answer(partition: int, meta: dict, records: bytes) -> dict:
    """Kafka's fetch PartitionData of ADS's answer for one partition; ``records``: the encoded batches."""
    high_watermark = meta.get("high_watermark", -1)
    return {"partition_index": partition, "error_code": int(meta.get("error_code") or 0),
            "high_watermark": high_watermark, "last_stable_offset": high_watermark,  # no transactions
            "log_start_offset": meta.get("log_start_offset", -1), "aborted_transactions": (),
            "preferred_read_replica": -1, "records": records}


def encode_records(batches: list) -> bytes | bytearray | entities.Chunks:
    """The stored (batch, header) pairs as Kafka batches v2, back to back (b"" for none, never null); several
    stay separate buffers (``entities.Chunks``), sent as they are."""
    if not batches:
        return b""
    if len(batches) == 1:
        return record_batches.encode_batch(*batches[0])
    return entities.Chunks([record_batches.encode_batch(batch, header) for batch, header in batches])


_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")  # Kafka's v2 batch header; the CRC-32C covers attributes on
_CRC_AT, _CRC_FROM, _LOG_OVERHEAD_BYTES = 17, 21, 12


def gap_batch(fetch_offset: int, next_offset: int, leader_epoch: int) -> bytes:
    """A v2 batch with no records spanning [fetch_offset, next_offset): how a Kafka client is moved past
    offsets compaction removed up to the read bound, where ADS answers "nothing, go on at next_offset".
    Kafka's own cleaner keeps such empty batches, and its clients continue after an empty batch's last
    offset; without it a client would ask again for the same offset at once, in a loop."""
    header = bytearray(_BATCH_HEADER.size)
    _BATCH_HEADER.pack_into(header, 0, fetch_offset, _BATCH_HEADER.size - _LOG_OVERHEAD_BYTES, leader_epoch, 2, 0,
                            0, next_offset - fetch_offset - 1, -1, -1, -1, -1, -1, 0)
    struct.pack_into(">I", header, _CRC_AT, crc32c.crc32c(memoryview(header)[_CRC_FROM:]))
    return bytes(header)


def partition_records(meta: dict, batches: list, fetch_offset: int) -> bytes:
    """The ``records`` of one fetched partition: its batches encoded, or a gap batch when ADS read none but
    says the next offset is further on (compacted away), or b""."""
    if batches:
        return encode_records(batches)
    next_offset = meta.get("next_offset")
    if next_offset is not None and next_offset > fetch_offset and not meta.get("error_code"):
        return gap_batch(fetch_offset, next_offset, meta.get("leader_epoch", -1))
    return b""


def handle_fetch(call: KafkaCall, request: Any) -> dict:
    session_refusal = _session_refusal(request)
    if session_refusal is not None:
        return {"error_code": session_refusal, "session_id": 0, "responses": ()}
    order, entries, errors = fetch_plan(request)
    if int(request.replica_id) >= 0:  # ADS's followers replicate over Flight; a Kafka replica is not served
        errors = {key: int(ErrorCode.INVALID_REQUEST) for key in order}
        entries = []
    refused = refused_topics(call, "fetch", [entry["topic"] for entry in entries], _in_partitions)
    for entry in entries:
        if entry["topic"] in refused:
            errors[(entry["topic"], entry["partition"])] = refused[entry["topic"]]
    entries = [entry for entry in entries if entry["topic"] not in refused]
    for entry in entries:
        if _typed(call, entry["topic"]):  # after authorization: a caller without Read learns nothing of it
            errors[(entry["topic"], entry["partition"])] = TYPED_TOPIC_FETCH_ERROR
    entries = [entry for entry in entries if (entry["topic"], entry["partition"]) not in errors]
    read: dict[tuple[str, int], tuple[dict, list]] = {}
    if entries:
        body = request_schemas.check(request_schemas.FETCH, fetch_body(request, entries, bool(errors)), "fetch")
        with call_context.using(call.context):
            for meta, batches in call.broker.handle_fetch(body):
                read[(meta["topic"], meta["partition"])] = (meta, batches)
    offsets = {(entry["topic"], entry["partition"]): entry["fetch_offset"] for entry in entries}
    answers = []
    for key in order:
        meta, batches = read.get(key, ({"error_code": errors.get(key, int(ErrorCode.UNKNOWN_SERVER_ERROR))}, []))
        records = partition_records(meta, batches, offsets[key]) if key in offsets else b""
        answers.append((key[0], fetch_partition_answer(key[1], meta, records)))
    return {"error_code": 0, "session_id": 0, "responses": group_by_topic(answers, "topic", "partitions")}


def _session_refusal(request: Any) -> int | None:
    """Fetch sessions (KIP-227) are not kept: a sessionless or new-session fetch is served in full and
    answered with session id 0 (which tells the client no session was made); an incremental one is refused."""
    session_id = int(getattr(request, "session_id", 0))
    session_epoch = int(getattr(request, "session_epoch", SESSION_EPOCH_FINAL))
    if session_id != 0:
        return FETCH_SESSION_ID_NOT_FOUND
    if session_epoch not in (SESSION_EPOCH_FINAL, SESSION_EPOCH_INITIAL):
        return INVALID_FETCH_SESSION_EPOCH
    return None


# ---- ListOffsets, OffsetForLeaderEpoch: ADS's actions, per partition ------------------------------------


def _valid_partition(topic: str, partition: int) -> bool:
    return is_valid_topic_name(topic) and 0 <= partition <= PARTITION_ID_MAX


def partition_action(call: KafkaCall, action: str, entries: list[dict], answered: dict) -> dict:
    """ADS action ``action`` on ``entries`` (its partitions, each {"topic", "partition", ...}) less those in
    ``answered`` ((topic, partition) -> answer) and those whose topic the caller may not use: each
    partition's item of ADS's answer, or {"error_code": ...}, by (topic, partition)."""
    results = dict(answered)
    asked = [entry for entry in entries if (entry["topic"], entry["partition"]) not in results]
    refused = refused_topics(call, action, [entry["topic"] for entry in asked], _in_partitions)
    for entry in asked:
        if entry["topic"] in refused:
            results[(entry["topic"], entry["partition"])] = {"error_code": refused[entry["topic"]]}
    asked = [entry for entry in asked if entry["topic"] not in refused]
    if not asked:
        return results
    try:
        answer = bridge.call_action(call, action, {"partitions": asked})
    except AdsError as exc:
        return {**results, **{(entry["topic"], entry["partition"]): {"error_code": int(exc.code)} for entry in asked}}
    for item in answer["partitions"]:
        results[(item["topic"], item["partition"])] = item
    return results


def list_offsets_entries(request: Any) -> tuple[list[dict], dict]:
    """(ADS's list_offsets entries in request order, answers of partitions refused without asking ADS):
    a partition named twice is INVALID_REQUEST (Kafka's rule), a timestamp other than -1 (latest), -2
    (earliest) or >= 0 (by time) is INVALID_REQUEST (-3, max timestamp, is ListOffsets v7's)."""
    entries, answered, seen = [], {}, set()
    for topic in request.topics:
        for part in topic.partitions:
            key = (topic.name, int(part.partition_index))
            entries.append({"topic": key[0], "partition": key[1], "timestamp": int(part.timestamp),
                            "current_leader_epoch": max(int(getattr(part, "current_leader_epoch", -1)), -1)})
            if key in seen or int(part.timestamp) < -2:
                answered[key] = {"error_code": int(ErrorCode.INVALID_REQUEST)}
            elif not _valid_partition(*key):
                answered[key] = {"error_code": int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)}
            seen.add(key)
    return entries, answered


def list_offsets_answer(partition: int, item: dict) -> dict:
    """Kafka's ListOffsetsPartitionResponse of ADS's item: latest is the HW (the last stable offset too: no
    transactions), earliest the log start; by time, the first offset at or after it (the time index) or
    -1/-1 when no record is that recent, as Kafka answers."""
    code = int(item.get("error_code") or 0)
    if code or item.get("found") is False:
        return {"partition_index": partition, "error_code": code, "timestamp": -1, "offset": -1, "leader_epoch": -1}
    return {"partition_index": partition, "error_code": 0, "timestamp": item["timestamp"], "offset": item["offset"],
            "leader_epoch": item.get("leader_epoch", -1)}


def handle_list_offsets(call: KafkaCall, request: Any) -> dict:
    entries, answered = list_offsets_entries(request)
    unique = list({(entry["topic"], entry["partition"]): entry for entry in entries}.values())
    results = partition_action(call, "list_offsets", unique, answered)
    answers = [(entry["topic"], list_offsets_answer(entry["partition"], results[(entry["topic"], entry["partition"])]))
               for entry in entries]
    return {"topics": group_by_topic(answers, "name", "partitions")}


def epoch_entries(request: Any) -> tuple[list[dict], dict]:
    """(ADS's offset_for_leader_epoch entries, answers given without asking ADS): a negative epoch has no end
    offset (Kafka's UNDEFINED_EPOCH_OFFSET, -1/-1, no error)."""
    entries, answered, seen = [], {}, set()
    for topic in request.topics:
        for part in topic.partitions:
            key = (topic.topic, int(part.partition))
            entries.append({"topic": key[0], "partition": key[1], "leader_epoch": int(part.leader_epoch),
                            "current_leader_epoch": max(int(getattr(part, "current_leader_epoch", -1)), -1)})
            if key in seen:
                answered[key] = {"error_code": int(ErrorCode.INVALID_REQUEST)}
            elif not _valid_partition(*key):
                answered[key] = {"error_code": int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)}
            elif int(part.leader_epoch) < 0:
                answered[key] = {"error_code": 0, "leader_epoch": -1, "end_offset": -1}
            seen.add(key)
    return entries, answered


def epoch_answer(partition: int, item: dict) -> dict:
    """Kafka's EpochEndOffset of ADS's item (the leader's epoch cache: largest epoch <= the asked one, its end)."""
    code = int(item.get("error_code") or 0)
    if code:
        return {"partition": partition, "error_code": code, "leader_epoch": -1, "end_offset": -1}
    return {"partition": partition, "error_code": 0, "leader_epoch": item.get("leader_epoch", -1),
            "end_offset": item.get("end_offset", -1)}


def handle_offset_for_leader_epoch(call: KafkaCall, request: Any) -> dict:
    entries, answered = epoch_entries(request)
    unique = list({(entry["topic"], entry["partition"]): entry for entry in entries}.values())
    results = partition_action(call, "offset_for_leader_epoch", unique, answered)
    answers = [(entry["topic"], epoch_answer(entry["partition"], results[(entry["topic"], entry["partition"])]))
               for entry in entries]
    return {"topics": group_by_topic(answers, "topic", "partitions")}


# ---- InitProducerId ---------------------------------------------------------------------------------


def handle_init_producer_id(call: KafkaCall, request: Any) -> dict:
    """A new idempotent producer id from ADS's ZooKeeper-allocated blocks. A producer re-initializing (v3+,
    KIP-360, with its old id and epoch) gets a new id, as Kafka gives a non-transactional producer; a
    transactional id is refused (ADS has no transactions)."""
    if request.transactional_id is not None:
        return {"error_code": TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "producer_id": -1, "producer_epoch": -1}
    try:
        answer = bridge.call_action(call, "init_producer_id", {})
    except AdsError as exc:
        return {"error_code": int(exc.code), "producer_id": -1, "producer_epoch": -1}
    return {"error_code": 0, "producer_id": answer["producer_id"], "producer_epoch": answer["producer_epoch"]}


API_HANDLERS: list[ApiHandler] = [
    ApiHandler(PRODUCE_KEY, "Produce", 3, 9, handle_produce),
    ApiHandler(FETCH_KEY, "Fetch", 4, 12, handle_fetch),
    ApiHandler(LIST_OFFSETS_KEY, "ListOffsets", 1, 6, handle_list_offsets),
    ApiHandler(INIT_PRODUCER_ID_KEY, "InitProducerId", 0, 4, handle_init_producer_id),
    ApiHandler(OFFSET_FOR_LEADER_EPOCH_KEY, "OffsetForLeaderEpoch", 2, 4, handle_offset_for_leader_epoch),
]
