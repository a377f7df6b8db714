"""Unit tests for the shared contracts: error codes, config validation, the record format, the wire codec."""

import json

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from ads_spark import config, errors
from ads_spark.protocol import records
from ads_spark.protocol import wire


def test_error_classes_follow_kafka_codes_and_retriability():
    err = errors.error_for(errors.ErrorCode.NOT_LEADER_OR_FOLLOWER, "moved")
    assert isinstance(err, errors.NotLeaderOrFollowerError)
    assert err.retriable and err.code == 6
    assert "NOT_LEADER_OR_FOLLOWER: moved" == str(err)
    assert not errors.error_for(10, "big").retriable
    assert isinstance(errors.error_for(9999, "x"), errors.UnknownServerError)
    with pytest.raises(errors.InvariantViolation):
        errors.error_for(0)


def test_invariant_violation_is_not_an_ads_error():
    assert not issubclass(errors.InvariantViolation, errors.AdsError)


def test_broker_config_defaults_and_unknown_keys():
    cfg = config.BrokerConfig({"broker.id": "3", "log.dirs": "/tmp/x", "zookeeper.connect": "127.0.0.1:2181/ads2"})
    assert cfg.broker_id == 3
    assert cfg["replica.lag.time.max.ms"] == 30000
    assert cfg.zookeeper_hosts_and_chroot == ("127.0.0.1:2181", "/ads2")
    with pytest.raises(errors.InvalidConfigError, match="replica.lag.tme.max.ms"):
        config.BrokerConfig({"broker.id": "1", "log.dirs": "d", "zookeeper.connect": "z",
                             "replica.lag.tme.max.ms": "1"})
    with pytest.raises(errors.InvalidConfigError, match="missing required broker config: broker.id"):
        config.BrokerConfig({"log.dirs": "d", "zookeeper.connect": "z"})


def test_config_values_are_typed_and_bounded():
    with pytest.raises(errors.InvalidConfigError, match="'min.insync.replicas'"):
        config.validate_topic_config({"min.insync.replicas": "zero"}, 3)
    with pytest.raises(errors.InvalidConfigError, match="larger than the replication factor 2"):
        config.validate_topic_config({"min.insync.replicas": "3"}, 2)
    with pytest.raises(errors.InvalidConfigError, match="must be true or false"):
        config.validate_topic_config({"unclean.leader.election.enable": "yes"}, 3)
    assert config.validate_topic_config({"retention.ms": " 1000 ", "unclean.leader.election.enable": "TRUE"}, 3) == {
        "retention.ms": "1000", "unclean.leader.election.enable": "true"}


def test_observers_is_refused_as_a_topic_config():
    """Observers are placement (ads topics create --observers), not a setting a config alter could change."""
    with pytest.raises(errors.InvalidConfigError, match="'observers' is not a topic config.*--observers"):
        config.validate_topic_config({"observers": "4"}, 3)
    assert "observers" not in config.TOPIC_KEYS


def test_topic_config_falls_back_to_broker_defaults():
    cfg = config.BrokerConfig({"broker.id": "1", "log.dirs": "d", "zookeeper.connect": "z",
                               "min.insync.replicas": "2", "log.retention.ms": "5000"})
    effective = config.effective_topic_config(cfg.topic_defaults(), {"retention.ms": "10"})
    assert effective["min.insync.replicas"] == 2
    assert effective["retention.ms"] == 10


def test_properties_file_parsing(tmp_path):
    path = tmp_path / "broker.properties"
    path.write_text("# comment\nbroker.id=7\n\nlog.dirs = /data\nzookeeper.connect=127.0.0.1:2181\n")
    cfg = config.load_broker_config(path, ["broker.rack=r1"])
    assert (cfg.broker_id, cfg["log.dirs"], cfg["broker.rack"]) == (7, "/data", "r1")
    path.write_text("broker.id 7\n")
    with pytest.raises(errors.InvalidConfigError, match="expected key=value"):
        config.read_properties(path)


def _record_batch(n=3):
    produce = records.conform_produce_batch(pa.record_batch({"value": pa.array([b"v%d" % i for i in range(n)])}))
    offsets = pa.array(range(10, 10 + n), pa.int64())
    return pa.RecordBatch.from_arrays([offsets, *produce.columns], schema=records.RECORD_SCHEMA)


def test_header_crc_detects_changed_data_and_changed_header():
    batch = _record_batch()
    header = records.seal(batch, records.BatchHeader(10, 3, leader_epoch=2, max_timestamp_ms=5))
    records.verify(batch, header)
    other = _record_batch()
    tampered = pa.RecordBatch.from_arrays(
        [other.column(0), other.column(1), other.column(2), pa.array([b"v0", b"v1", b"XX"]), other.column(4)],
        schema=records.RECORD_SCHEMA)
    with pytest.raises(errors.CorruptMessageError, match="CRC mismatch"):
        records.verify(tampered, header)
    from dataclasses import replace
    with pytest.raises(errors.CorruptMessageError):
        records.verify(batch, replace(header, leader_epoch=3))


def test_header_round_trips_through_ipc_metadata():
    batch = _record_batch()
    header = records.seal(batch, records.BatchHeader(10, 3, 1, 5, producer_id=9, producer_epoch=0, base_sequence=4))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, records.RECORD_SCHEMA) as writer:
        writer.write_batch(batch, custom_metadata=header.to_metadata())
    read, metadata = pa.ipc.open_stream(sink.getvalue()).read_next_batch_with_custom_metadata()
    parsed = records.BatchHeader.from_metadata(metadata)
    assert parsed == header and parsed.last_sequence == 6
    records.verify(read, parsed)


def test_conform_rejects_bad_produce_batches():
    with pytest.raises(errors.InvalidRequestError, match="no 'value' column"):
        records.conform_produce_batch(pa.record_batch({"key": pa.array([b"k"])}))
    with pytest.raises(errors.InvalidRequestError, match="unknown column"):
        records.conform_produce_batch(pa.record_batch({"value": pa.array([b"v"]), "junk": pa.array([1])}))
    with pytest.raises(errors.InvalidRequestError, match="empty record batch"):
        records.conform_produce_batch(pa.record_batch({"value": pa.array([], pa.binary())}))
    conformed = records.conform_produce_batch(pa.record_batch({"value": pa.array(["text"])}))
    assert conformed.schema == records.PRODUCE_SCHEMA and conformed.column("value")[0].as_py() == b"text"
    assert records.conform_produce_batch(conformed) is conformed  # already conformed: passed through
    # A schema may declare the timestamp non-nullable and still carry nulls: checked on both paths.
    null_timestamp = pa.RecordBatch.from_arrays([pa.array([None], pa.timestamp("ms")), *conformed.columns[1:]],
                                                schema=records.PRODUCE_SCHEMA)
    with pytest.raises(errors.InvalidRequestError, match="'timestamp' must not contain nulls"):
        records.conform_produce_batch(null_timestamp)
    with pytest.raises(errors.InvalidRequestError, match="'timestamp' must not contain nulls"):
        records.conform_produce_batch(pa.record_batch({"timestamp": pa.array([None], pa.timestamp("ms")),
                                                       "value": pa.array([b"v"])}))


def test_wire_errors_round_trip_through_flight_exceptions():
    raised = wire.flight_error(errors.NotEnoughReplicasError("isr too small"))
    back = wire.to_ads_error(raised)
    assert isinstance(back, errors.NotEnoughReplicasError) and back.message == "isr too small"
    assert isinstance(wire.to_ads_error(flight.FlightUnavailableError("down")), errors.NetworkExceptionError)


def test_a_call_on_a_client_another_thread_closed_is_a_retriable_network_error():
    client = flight.connect("grpc://127.0.0.1:1")  # never contacted: connect is lazy
    client.close()
    with pytest.raises(pa.ArrowInvalid) as raised:
        list(client.do_action(flight.Action("metadata", b"{}")))
    assert isinstance(wire.to_ads_error(raised.value), errors.NetworkExceptionError)


def test_wire_rejects_malformed_bodies():
    with pytest.raises(errors.InvalidRequestError, match="not valid JSON"):
        wire.loads(b"{nope", "fetch")
    with pytest.raises(errors.InvalidRequestError, match="missing field 'topic'"):
        wire.require({}, "topic", str, "produce")
    with pytest.raises(errors.InvalidRequestError, match="boolean"):
        wire.require({"partition": True}, "partition", int, "produce")
    with pytest.raises(errors.InvalidRequiredAcksError):
        wire.parse_acks("2")
    assert [wire.parse_acks(v) for v in ("all", "-1", 1, "0")] == [-1, -1, 1, 0]
    assert wire.parse_bootstrap("a:1, grpc+tcp://b:2") == [("a", 1), ("b", 2)]
    with pytest.raises(errors.InvalidRequestError, match="bootstrap"):
        wire.parse_bootstrap("")
    assert json.loads(wire.dumps({"b": 1, "a": 2})) == {"a": 2, "b": 1}


def test_verify_replicas_compares_only_the_common_committed_range():
    from ads_spark.cli.verify_cmd import compare_replicas

    same = {1: {"high_watermark": 30, "log_start_offset": 0, "batches": [[0, 10, 0, 7], [10, 10, 1, 8], [20, 10, 1, 9]]},
            2: {"high_watermark": 20, "log_start_offset": 0, "batches": [[0, 10, 0, 7], [10, 10, 1, 8]]}}
    assert compare_replicas(same) == (20, None)
    diverged = {1: same[1], 2: {"high_watermark": 20, "log_start_offset": 0,
                                "batches": [[0, 10, 0, 7], [10, 10, 2, 5]]}}
    compared, difference = compare_replicas(diverged)
    assert compared == 20 and "[10, 10, 1, 8]" in difference and "[10, 10, 2, 5]" in difference
