"""``ads_spark.kafka.entities``: one plain answer becomes every version's response, typed as kio wants, and
decodes back to the same values; and every version the table advertises has kio classes both ways."""

from __future__ import annotations

import datetime

import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from ads_spark.kafka import api, entities

FETCH, PRODUCE, API_VERSIONS = 1, 0, 18


def roundtrip(cls, entity):
    decoded, _ = entity_reader(cls)(entities.encode(cls, entity), 0)
    return decoded


@pytest.mark.parametrize("version", range(4, 13))
def test_one_fetch_answer_serves_every_version(version):
    cls = entities.response_class(FETCH, version)
    answer = {"responses": [{"topic": "orders", "partitions": [
        {"partition_index": 2, "error_code": 6, "high_watermark": 42, "last_stable_offset": 42,
         "log_start_offset": 3, "aborted_transactions": [], "records": b"\x00" * 61,
         "not_a_field_of_any_version": 1}]}]}
    decoded = roundtrip(cls, entities.build(cls, answer))
    partition = decoded.responses[0].partitions[0]
    assert decoded.responses[0].topic == "orders"
    assert (partition.partition_index, partition.error_code, partition.high_watermark) == (
        2, ErrorCode.not_leader_or_follower, 42)
    assert partition.records == b"\x00" * 61
    assert decoded.throttle_time == datetime.timedelta(0)


def test_left_out_fields_take_defaults_or_zeros():
    cls = entities.response_class(PRODUCE, 8)
    entity = entities.build(cls, {"responses": [{"name": "t", "partition_responses": [{"index": 0}]}]})
    partition = entity.responses[0].partition_responses[0]
    assert partition.error_code == ErrorCode.none and partition.base_offset == 0
    assert partition.log_append_time is None and partition.log_start_offset == -1  # kio's defaults
    assert partition.record_errors == ()


def test_an_error_code_kafka_does_not_define_is_sent_as_unknown_server_error():
    cls = entities.response_class(API_VERSIONS, 3)
    assert entities.build(cls, {"error_code": -100}).error_code == ErrorCode.unknown_server_error
    assert entities.build(cls, {"error_code": 35}).error_code == ErrorCode.unsupported_version


def test_nested_zero_entities_are_built():
    cls = entities.response_class(FETCH, 12)
    entity = entities.build(cls, {"responses": [{"topic": "t", "partitions": [{"partition_index": 0}]}]})
    partition = entity.responses[0].partitions[0]
    assert partition.diverging_epoch.epoch == -1 and partition.records == b""  # records never null


def test_every_advertised_version_has_kio_classes_both_ways():
    table = api.registry()
    for entry in table.values():
        for version in range(entry.min_version, entry.max_version + 1):
            entities.request_class(entry.api_key, version)
            entities.response_class(entry.api_key, version)
