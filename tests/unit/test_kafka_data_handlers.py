"""The Kafka data-plane and metadata handlers' mapping (ads_spark/kafka/handlers_data.py, handlers_metadata.py):
Kafka requests -> ADS's request dicts, ADS's answers -> Kafka's fields, on stand-in brokers (no processes).

Records are checked against kafka-python's own batch builder and reader (an independent implementation of
the v2 format), answers by encoding them with kio at every advertised version."""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid

import pyarrow as pa
import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kio.schema.errors import ErrorCode as KafkaErrorCode
from kio.serial import entity_reader

from ads_spark.broker.rpc import call_context
from ads_spark.errors import AdsError, ErrorCode
from ads_spark.kafka import entities, handlers_data, handlers_metadata
from ads_spark.kafka.api import ConnectionState, KafkaCall, RequestHeader
from ads_spark.protocol import request_schemas, wire
from ads_spark.protocol.records import RECORD_SCHEMA, BatchHeader

PRODUCE, FETCH, LIST_OFFSETS, METADATA, INIT_PRODUCER_ID, EPOCH, DESCRIBE_CLUSTER = 0, 1, 2, 3, 22, 23, 60


def kafka_batch(count: int = 3, producer_id: int = -1, base_sequence: int = -1, compression: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(2, compression, False, producer_id, 0 if producer_id >= 0 else -1,
                                        base_sequence, 1 << 20)
    for i in range(count):
        builder.append(i, 1_700_000_000_000 + i, f"k{i}".encode(), f"v{i}".encode(), [("h", b"x")])
    return bytes(builder.build())


def request(api_key: int, version: int, value: dict):
    return entities.build(entities.request_class(api_key, version), value)


def encoded(api_key: int, version: int, answer: dict):
    """The answer through kio at ``version`` and back: what a client would read."""
    cls = entities.response_class(api_key, version)
    return entity_reader(cls)(entities.encode(cls, entities.build(cls, answer)), 0)[0]


class StandInData:
    """``DataHandlers.handle_produce_chunk`` as seen from the Kafka layer: answers from another thread."""

    def __init__(self, answer_of):
        self.answer_of = answer_of
        self.chunks = []

    def handle_produce_chunk(self, batch, app_metadata, respond):
        meta = wire.loads(app_metadata, "produce")
        request_schemas.check(request_schemas.PRODUCE_BATCH_METADATA, meta, "produce")
        self.chunks.append((batch, meta, call_context.current()))
        threading.Thread(target=respond, args=(self.answer_of(meta),)).start()


class StandInPartition:
    class state:
        log_start_offset = 5


class StandInReplicas:
    def maybe_get(self, topic, partition):
        return StandInPartition()


class StandInBroker:
    security = None
    broker_id = 2
    zk = None

    def __init__(self, answer_of=None, fetched=None):
        self.config = {"request.timeout.ms.max": 30000, "auto.create.topics.enable": True}
        self.data = StandInData(answer_of or (lambda meta: {"error_code": 0, "base_offset": 40,
                                                            "log_append_time_ms": -1}))
        self.replica_manager = StandInReplicas()
        self.fetched = fetched or []
        self.fetch_requests = []

    def handle_fetch(self, body):
        self.fetch_requests.append(body)
        return self.fetched

    def topic_config(self, topic):
        return {"max.message.bytes": 1 << 20}


def make_call(broker, api_key: int, version: int) -> KafkaCall:
    context = call_context.CallContext("User:alice", "127.0.0.1", "kafka.PLAINTEXT", "PLAINTEXT")
    return KafkaCall(broker, RequestHeader(api_key, version, 77, "test"), ConnectionState(context, True))


def produce_request(version: int, partitions: dict[int, bytes | None], acks: int = -1, transactional_id=None):
    return request(PRODUCE, version, {
        "transactional_id": transactional_id, "acks": acks, "timeout": 5000,
        "topic_data": [{"name": "orders", "partition_data": [{"index": p, "records": r}
                                                             for p, r in partitions.items()]}]})


# ---- Produce --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [3, 7, 9])
def test_produce_hands_each_batch_to_ads_with_the_producer_fields_and_answers_every_partition(version):
    broker = StandInBroker()
    call = make_call(broker, PRODUCE, version)
    answer = handlers_data.handle_produce(call, produce_request(version, {
        0: kafka_batch(3, producer_id=9, base_sequence=12), 1: kafka_batch(2)}))
    metas = sorted((meta for _, meta, _ in broker.data.chunks), key=lambda meta: meta["partition"])
    assert metas[0] == {"topic": "orders", "partition": 0, "acks": -1, "timeout_ms": 5000, "correlation_id": 77,
                        "producer_id": 9, "producer_epoch": 0, "base_sequence": 12}
    assert metas[1]["producer_id"] == -1 and metas[1]["base_sequence"] == -1
    batch = next(batch for batch, meta, _ in broker.data.chunks if meta["partition"] == 0)
    assert batch.column("key").to_pylist() == [b"k0", b"k1", b"k2"]
    assert all(ctx.principal == "User:alice" for _, _, ctx in broker.data.chunks)  # the caller's context
    decoded = encoded(PRODUCE, version, answer)
    partitions = decoded.responses[0].partition_responses
    assert [(p.index, p.error_code, p.base_offset) for p in partitions] == [(0, KafkaErrorCode.none, 40),
                                                                             (1, KafkaErrorCode.none, 40)]
    assert partitions[0].log_append_time is None
    if version >= 5:  # the field's first version
        assert partitions[0].log_start_offset == 5


def test_produce_answers_log_append_time_and_ads_errors_per_partition():
    def answer_of(meta):
        if meta["partition"] == 1:
            return {"error_code": int(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER), "message": "gap"}
        return {"error_code": 0, "base_offset": 7, "log_append_time_ms": 1_700_000_000_123}
    answer = handlers_data.handle_produce(make_call(StandInBroker(answer_of), PRODUCE, 8),
                                          produce_request(8, {0: kafka_batch(), 1: kafka_batch()}))
    first, second = encoded(PRODUCE, 8, answer).responses[0].partition_responses
    assert round(first.log_append_time.timestamp() * 1000) == 1_700_000_000_123
    assert (second.error_code, second.base_offset, second.log_start_offset, second.error_message) == (
        KafkaErrorCode.out_of_order_sequence_number, -1, -1, "gap")


def test_produce_refuses_bad_batches_per_partition_and_stores_nothing():
    good = kafka_batch()
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF  # a record byte: the CRC no longer matches
    broker = StandInBroker()
    answer = handlers_data.handle_produce(make_call(broker, PRODUCE, 8), produce_request(8, {
        0: good + good, 1: bytes(corrupt), 2: None, 3: good}))
    codes = [p.error_code for p in encoded(PRODUCE, 8, answer).responses[0].partition_responses]
    assert codes == [KafkaErrorCode.invalid_record, KafkaErrorCode.corrupt_message, KafkaErrorCode.invalid_record, KafkaErrorCode.none]
    assert [meta["partition"] for _, meta, _ in broker.data.chunks] == [3]


def test_produce_of_zstd_before_v7_is_unsupported_compression(monkeypatch):
    decode = handlers_data.record_batches.decode_batch
    monkeypatch.setattr(handlers_data.record_batches, "decode_batch",
                        lambda data, limit: dataclasses.replace(decode(data, limit), compression=4))  # as if zstd
    with pytest.raises(AdsError) as refused:
        handlers_data.decode_one_batch(kafka_batch(), 6, 1 << 20)
    assert refused.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    assert handlers_data.decode_one_batch(kafka_batch(), 7, 1 << 20).record_count == 3


def test_a_transactional_producer_is_refused_without_touching_ads():
    broker = StandInBroker()
    answer = handlers_data.handle_produce(make_call(broker, PRODUCE, 8),
                                          produce_request(8, {0: kafka_batch()}, transactional_id="tx"))
    assert encoded(PRODUCE, 8, answer).responses[0].partition_responses[0].error_code == \
        KafkaErrorCode.transactional_id_authorization_failed
    assert broker.data.chunks == []


def test_acks_zero_sends_no_answer_and_an_error_closes_the_connection():
    broker = StandInBroker(lambda meta: None)  # ADS answers an appended acks=0 batch with None
    assert handlers_data.handle_produce(make_call(broker, PRODUCE, 8),
                                        produce_request(8, {0: kafka_batch()}, acks=0)) is None
    failing = StandInBroker(lambda meta: {"error_code": int(ErrorCode.NOT_LEADER_OR_FOLLOWER), "message": "moved"})
    with pytest.raises(Exception, match="moved"):
        handlers_data.handle_produce(make_call(failing, PRODUCE, 8), produce_request(8, {0: kafka_batch()}, acks=0))


def test_a_partition_without_an_answer_in_time_is_request_timed_out(monkeypatch):
    monkeypatch.setattr(handlers_data, "PRODUCE_ANSWER_MARGIN_S", 0.05)
    broker = StandInBroker()
    broker.data.handle_produce_chunk = lambda batch, meta, respond: None  # never answers
    started = time.monotonic()
    answer = handlers_data.handle_produce(make_call(broker, PRODUCE, 8), request(PRODUCE, 8, {
        "acks": 1, "timeout": 0, "topic_data": [{"name": "t", "partition_data": [{"index": 0,
                                                                                 "records": kafka_batch()}]}]}))
    assert time.monotonic() - started < 2
    assert answer["responses"][0]["partition_responses"][0]["error_code"] == int(ErrorCode.REQUEST_TIMED_OUT)


# ---- Fetch ---------------------------------------------------------------------------------------------


def stored_batch(base_offset: int, count: int, leader_epoch: int = 4):
    batch = pa.RecordBatch.from_pydict({
        "offset": list(range(base_offset, base_offset + count)),
        "timestamp": pa.array([1_700_000_000_000 + i for i in range(count)], pa.timestamp("ms")),
        "key": [f"k{i}".encode() for i in range(count)], "value": [f"v{i}".encode() for i in range(count)],
        "headers": [[{"key": "h", "value": b"x"}]] * count}, schema=RECORD_SCHEMA)
    return batch, BatchHeader(base_offset, count, leader_epoch, 1_700_000_000_000 + count - 1,
                              producer_id=3, producer_epoch=1, base_sequence=0)


def fetch_request(version: int, partitions: list[tuple[str, int, int]], **more):
    value = {"replica_id": -1, "max_wait": 500, "min_bytes": 1, "max_bytes": 1 << 20,
             "topics": [{"topic": topic, "partitions": [{"partition": p, "fetch_offset": offset,
                                                         "current_leader_epoch": 4, "partition_max_bytes": 1 << 16}]}
                        for topic, p, offset in partitions], **more}
    return request(FETCH, version, value)


@pytest.mark.parametrize("version", [4, 11, 12])
def test_fetch_builds_ads_request_and_encodes_stored_batches_as_kafka_batches(version):
    batches = [stored_batch(10, 3), stored_batch(13, 2)]
    broker = StandInBroker(fetched=[
        ({"topic": "t", "partition": 0, "error_code": 0, "high_watermark": 15, "log_start_offset": 2,
          "log_end_offset": 15, "leader_epoch": 4}, batches),
        ({"topic": "t", "partition": 1, "error_code": int(ErrorCode.FENCED_LEADER_EPOCH), "message": "old"}, [])])
    answer = handlers_data.handle_fetch(make_call(broker, FETCH, version),
                                        fetch_request(version, [("t", 0, 11), ("t", 1, 0)]))
    body = broker.fetch_requests[0]
    epoch = 4 if version >= 9 else -1  # current_leader_epoch: Fetch v9+ (KIP-320)
    assert body == {"type": "fetch", "replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 1 << 20,
                    "partitions": [{"topic": "t", "partition": 0, "fetch_offset": 11, "current_leader_epoch": epoch,
                                    "partition_max_bytes": 1 << 16},
                                   {"topic": "t", "partition": 1, "fetch_offset": 0, "current_leader_epoch": epoch,
                                    "partition_max_bytes": 1 << 16}]}
    decoded = encoded(FETCH, version, answer)
    first, second = decoded.responses[0].partitions
    assert (first.error_code, first.high_watermark, first.last_stable_offset) == (KafkaErrorCode.none, 15, 15)
    assert getattr(first, "log_start_offset", 2) == 2  # Fetch v5+
    assert (second.error_code, second.records, second.high_watermark) == (KafkaErrorCode.fenced_leader_epoch, b"", -1)
    assert first.aborted_transactions == () and getattr(first, "preferred_read_replica", -1) == -1
    if version >= 7:
        assert decoded.session_id == 0
    records = bytes(first.records)
    read = []
    position = 0
    while position < len(records):  # kafka-python's reader, one batch at a time
        length = int.from_bytes(records[position + 8:position + 12], "big") + 12
        kafka_batch_read = DefaultRecordBatch(records[position:position + length])
        assert kafka_batch_read.validate_crc()
        assert (kafka_batch_read.leader_epoch, kafka_batch_read.producer_id) == (4, 3)
        read += [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in kafka_batch_read]
        position += length
    assert read == [(10 + i, 1_700_000_000_000 + i, f"k{i}".encode(), f"v{i}".encode(), [("h", b"x")])
                    for i in range(3)] + [(13 + i, 1_700_000_000_000 + i, f"k{i}".encode(), f"v{i}".encode(),
                                           [("h", b"x")]) for i in range(2)]


def test_fetch_answers_bad_partitions_itself_and_at_once():
    broker = StandInBroker(fetched=[({"topic": "t", "partition": 0, "error_code": 0, "high_watermark": 0,
                                      "log_start_offset": 0}, [])])
    answer = handlers_data.handle_fetch(make_call(broker, FETCH, 11), fetch_request(11, [
        ("t", 0, 0), ("t", 1, -5), ("bad name", 0, 0), ("t", -1, 0), ("t", 0, 0)]))
    assert broker.fetch_requests[0]["max_wait_ms"] == 0  # an error in the answer: no long-poll
    assert [e["partition"] for e in broker.fetch_requests[0]["partitions"]] == [0]
    codes = [(t["topic"], p["partition_index"], p["error_code"], p["records"]) for t in answer["responses"]
             for p in t["partitions"]]
    assert codes == [("t", 0, 0, b""), ("t", 1, 1, b""), ("t", -1, 3, b""), ("bad name", 0, 3, b"")]


def test_fetch_sessions_and_kafka_replicas_are_refused():
    broker = StandInBroker()
    call = make_call(broker, FETCH, 12)
    assert handlers_data.handle_fetch(call, fetch_request(12, [("t", 0, 0)], session_id=5))["error_code"] == 70
    assert handlers_data.handle_fetch(call, fetch_request(12, [("t", 0, 0)], session_epoch=3))["error_code"] == 71
    new_session = handlers_data.handle_fetch(call, fetch_request(12, [("t", 0, 0)], session_epoch=0))
    assert new_session["session_id"] == 0 and broker.fetch_requests  # served in full, no session made
    broker.fetch_requests.clear()
    replica = handlers_data.handle_fetch(call, fetch_request(12, [("t", 0, 0)], replica_id=1))
    assert replica["responses"][0]["partitions"][0]["error_code"] == int(ErrorCode.INVALID_REQUEST)
    assert broker.fetch_requests == []


def test_encoding_no_batches_is_empty_bytes():
    assert handlers_data.encode_records([]) == b""


# ---- ListOffsets, OffsetForLeaderEpoch, InitProducerId -----------------------------------------------


def test_list_offsets_entries_and_answers():
    asked = request(LIST_OFFSETS, 5, {"replica_id": -1, "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "timestamp": -1, "current_leader_epoch": 3},
        {"partition_index": 1, "timestamp": -3}, {"partition_index": 2, "timestamp": 1000},
        {"partition_index": 2, "timestamp": -2}]}]})
    entries, answered = handlers_data.list_offsets_entries(asked)
    assert entries[0] == {"topic": "t", "partition": 0, "timestamp": -1, "current_leader_epoch": 3}
    assert answered == {("t", 1): {"error_code": 42}, ("t", 2): {"error_code": 42}}  # -3; named twice
    found = {"topic": "t", "partition": 0, "error_code": 0, "offset": 17, "timestamp": 1005, "leader_epoch": 3,
             "found": True}
    assert handlers_data.list_offsets_answer(0, found) == {"partition_index": 0, "error_code": 0,
                                                           "timestamp": 1005, "offset": 17, "leader_epoch": 3}
    not_found = {**found, "offset": 20, "timestamp": -1, "found": False}
    assert handlers_data.list_offsets_answer(0, not_found)["offset"] == -1  # Kafka: no record that recent
    assert handlers_data.list_offsets_answer(0, {"error_code": 74})["error_code"] == 74
    for version in range(1, 7):
        encoded(LIST_OFFSETS, version, {"topics": [{"name": "t", "partitions": [
            handlers_data.list_offsets_answer(0, found)]}]})


def test_offset_for_leader_epoch_entries_and_answers():
    asked = request(EPOCH, 4, {"topics": [{"topic": "t", "partitions": [
        {"partition": 0, "current_leader_epoch": 5, "leader_epoch": 3}, {"partition": 1, "leader_epoch": -1}]}]})
    entries, answered = handlers_data.epoch_entries(asked)
    assert entries[0] == {"topic": "t", "partition": 0, "leader_epoch": 3, "current_leader_epoch": 5}
    request_schemas.checker("offset_for_leader_epoch")({"partitions": entries[:1]})
    assert answered == {("t", 1): {"error_code": 0, "leader_epoch": -1, "end_offset": -1}}
    assert handlers_data.epoch_answer(0, {"error_code": 0, "leader_epoch": 3, "end_offset": 90}) == {
        "partition": 0, "error_code": 0, "leader_epoch": 3, "end_offset": 90}


def test_init_producer_id_refuses_a_transactional_id():
    call = make_call(StandInBroker(), INIT_PRODUCER_ID, 4)
    answer = handlers_data.handle_init_producer_id(call, request(INIT_PRODUCER_ID, 4, {
        "transactional_id": "tx", "transaction_timeout": 60000}))
    assert answer["error_code"] == 53 and answer["producer_id"] == -1


# ---- Metadata ------------------------------------------------------------------------------------------


def test_requested_topics_all_or_named():
    assert handlers_metadata.requested_topics(request(METADATA, 0, {"topics": []}), 0) is None
    assert handlers_metadata.requested_topics(request(METADATA, 1, {"topics": None}), 1) is None
    assert handlers_metadata.requested_topics(request(METADATA, 1, {"topics": []}), 1) == []
    named = request(METADATA, 9, {"topics": [{"name": "a"}, {"name": "b"}, {"name": "a"}]})
    assert handlers_metadata.requested_topics(named, 9) == ["a", "b"]


def test_partition_entries_say_why_a_leader_cannot_be_used():
    entry = {"partition": 3, "leader": 2, "leader_epoch": 7, "replicas": [1, 2, 3], "isr": [2, 3]}
    live, listed = {2, 3}, {2, 3}
    assert handlers_metadata.partition_entry(entry, listed, live, 9) == {
        "error_code": 0, "partition_index": 3, "leader_id": 2, "leader_epoch": 7, "replica_nodes": [1, 2, 3],
        "isr_nodes": [2, 3], "offline_replicas": [1]}
    assert handlers_metadata.partition_entry({**entry, "leader": -1}, listed, live, 9)["error_code"] == 5
    assert handlers_metadata.partition_entry(entry, {3}, live, 9)["error_code"] == 72  # no Kafka listener
    assert handlers_metadata.partition_entry(entry, {3}, live, 5)["error_code"] == 5


def test_topic_entries_carry_ids_and_internal_flags():
    topic_id = str(uuid.uuid4())
    entry = handlers_metadata.topic_entry({"topic": "__consumer_offsets", "topic_id": topic_id, "error_code": 0,
                                           "partitions": []}, set(), set(), 11)
    assert entry["topic_id"] == uuid.UUID(topic_id) and entry["is_internal"]
    assert handlers_metadata.topic_id_of("not-a-uuid") is None


def test_operations_bits_are_kafkas_acl_operation_codes():
    from ads_spark.security.authorizer import Operation
    assert handlers_metadata.operations_bits({Operation.READ: True, Operation.WRITE: False,
                                              Operation.DESCRIBE: True}) == (1 << 3) | (1 << 8)


class MetadataBroker(StandInBroker):
    """A broker whose metadata action answers from a fixed cluster; create_topics records what it creates."""

    def __init__(self, topics):
        super().__init__()
        self.topics = topics
        self.created = []

        class Cache:
            def live_brokers(cache):
                return [type("Info", (), {"broker_id": b})() for b in (1, 2, 3)]
        self.metadata = Cache()

    def action_handlers(self):
        return {"metadata": self._metadata, "create_topics": self._create}

    def _metadata(self, body):
        assert call_context.current().listener_name == "kafka.PLAINTEXT"
        names = body.get("topics")
        known = {t["topic"]: t for t in self.topics}
        chosen = list(known) if names is None else names
        return {"controller_id": 3, "controller_epoch": 1,
                "brokers": [{"id": b, "host": "127.0.0.1", "port": 9000 + b, "rack": None} for b in (1, 2, 3)],
                "topics": [known.get(n, {"topic": n, "error_code": 3, "partitions": []}) for n in chosen]}

    def _create(self, body):
        self.created += [t["topic"] for t in body["topics"]]
        return {"error_code": 0, "topics": []}


@pytest.mark.parametrize("version", [0, 3, 4, 7, 9, 11])
def test_metadata_maps_ads_answer_and_auto_creates_named_topics(version):
    broker = MetadataBroker([{"topic": "a", "topic_id": str(uuid.uuid4()), "error_code": 0, "partitions": [
        {"topic": "a", "partition": 0, "leader": 1, "leader_epoch": 6, "replicas": [1, 2], "isr": [1, 2]}]}])
    value = {"topics": [{"name": "a"}, {"name": "new"}, {"name": "bad/name"}]}
    if version >= 4:
        value["allow_auto_topic_creation"] = True
    answer = handlers_metadata.handle_metadata(make_call(broker, METADATA, version), request(METADATA, version, value))
    decoded = encoded(METADATA, version, answer)
    assert [(b.node_id, b.port) for b in decoded.brokers] == [(1, 9001), (2, 9002), (3, 9003)]
    assert [(t.name, t.error_code) for t in decoded.topics] == [
        ("a", KafkaErrorCode.none), ("new", KafkaErrorCode.leader_not_available), ("bad/name", KafkaErrorCode.invalid_topic_exception)]
    assert broker.created == ["new"]
    partition = decoded.topics[0].partitions[0]
    assert (partition.leader_id, partition.replica_nodes, partition.isr_nodes) == (1, (1, 2), (1, 2))
    if version >= 7:
        assert partition.leader_epoch == 6
    if version >= 1:
        assert decoded.controller_id == 3


def test_metadata_does_not_auto_create_when_the_request_or_the_broker_says_no():
    broker = MetadataBroker([])
    value = {"topics": [{"name": "new"}], "allow_auto_topic_creation": False}
    answer = handlers_metadata.handle_metadata(make_call(broker, METADATA, 9), request(METADATA, 9, value))
    assert answer["topics"][0]["error_code"] == 3 and broker.created == []
    broker.config["auto.create.topics.enable"] = False
    answer = handlers_metadata.handle_metadata(make_call(broker, METADATA, 3),
                                               request(METADATA, 3, {"topics": [{"name": "new"}]}))
    assert answer["topics"][0]["error_code"] == 3 and broker.created == []


def test_describe_cluster_and_api_versions():
    broker = MetadataBroker([])
    answer = handlers_metadata.handle_describe_cluster(
        make_call(broker, DESCRIBE_CLUSTER, 0), request(DESCRIBE_CLUSTER, 0, {"include_cluster_authorized_operations": True}))
    decoded = encoded(DESCRIBE_CLUSTER, 0, answer)
    assert [b.broker_id for b in decoded.brokers] == [1, 2, 3] and decoded.controller_id == 3
    assert decoded.cluster_authorized_operations != -2147483648  # asked: every operation (no authorizer)
    versions = handlers_metadata.handle_api_versions(make_call(broker, 18, 3), None)
    keys = {entry["api_key"]: (entry["min_version"], entry["max_version"]) for entry in versions["api_keys"]}
    assert keys[PRODUCE] == (3, 9) and keys[FETCH] == (4, 12) and keys[METADATA] == (0, 11)
    assert keys[LIST_OFFSETS] == (1, 6) and keys[EPOCH] == (2, 4) and keys[INIT_PRODUCER_ID] == (0, 4)


# ---- authorization per topic -----------------------------------------------------------------------


class OneTopicSecurity:
    """An authorizer allowing everything on every topic but ``secret``."""

    authorizer_enabled = True
    acl_cache_version = None  # nothing cached between calls

    def authorize(self, ctx, operation, resource):
        allowed = resource.name != "secret"
        return type("Decision", (), {"allowed": allowed, "reason": "test"})()


def test_a_topic_the_caller_may_not_use_is_refused_alone():
    broker = StandInBroker(fetched=[({"topic": "open", "partition": 0, "error_code": 0, "high_watermark": 3,
                                      "log_start_offset": 0}, [stored_batch(0, 3)])])
    broker.security = OneTopicSecurity()
    fetched = handlers_data.handle_fetch(make_call(broker, FETCH, 11),
                                         fetch_request(11, [("secret", 0, 0), ("open", 0, 0)]))
    assert [p["partition"] for p in broker.fetch_requests[0]["partitions"]] == [0]
    assert [(t["topic"], t["partitions"][0]["error_code"], bool(t["partitions"][0]["records"]))
            for t in fetched["responses"]] == [("secret", 29, False), ("open", 0, True)]
    produced = handlers_data.handle_produce(make_call(broker, PRODUCE, 8), request(PRODUCE, 8, {
        "acks": -1, "timeout": 5000, "topic_data": [
            {"name": "secret", "partition_data": [{"index": 0, "records": kafka_batch()}]},
            {"name": "open", "partition_data": [{"index": 0, "records": kafka_batch()}]}]}))
    assert [(t["name"], t["partition_responses"][0]["error_code"]) for t in produced["responses"]] == [
        ("secret", 29), ("open", 0)]
    assert [meta["topic"] for _, meta, _ in broker.data.chunks] == ["open"]  # nothing decoded for "secret"


def test_a_gap_compaction_left_up_to_the_bound_is_answered_with_an_empty_batch_spanning_it():
    broker = StandInBroker(fetched=[({"topic": "t", "partition": 0, "error_code": 0, "high_watermark": 20,
                                      "log_start_offset": 0, "leader_epoch": 4, "next_offset": 20}, [])])
    answer = handlers_data.handle_fetch(make_call(broker, FETCH, 11), fetch_request(11, [("t", 0, 12)]))
    records = answer["responses"][0]["partitions"][0]["records"]
    batch = DefaultRecordBatch(records)  # kafka-python's reader: a valid batch with no records
    assert batch.validate_crc() and list(batch) == []
    assert (batch.base_offset, batch.base_offset + batch.last_offset_delta + 1, batch.leader_epoch) == (12, 20, 4)
    assert handlers_data.partition_records({"next_offset": 12}, [], 12) == b""  # nothing to skip


def test_a_batch_may_inflate_to_its_topics_limit_and_no_further():
    """A compressed batch is refused once its records pass the topic's max.message.bytes, however small it
    arrived: the bound on what one bomb costs (at most DECODES_AT_ONCE_MAX of them inflate at once)."""
    from kafka.record.default_records import DefaultRecordBatchBuilder
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=1, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    builder.append(0, timestamp=1, key=None, value=b"\0" * (4 << 20), headers=[])
    bomb = bytes(builder.build())
    assert len(bomb) < 64 << 10
    with pytest.raises(AdsError) as refused:
        handlers_data.decode_one_batch(bomb, 8, 1 << 20)
    assert refused.value.code == ErrorCode.RECORD_TOO_LARGE
    assert handlers_data.decode_one_batch(bomb, 8, 8 << 20).record_count == 1
