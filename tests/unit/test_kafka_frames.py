"""Kafka framing without sockets (ads_spark/kafka/frames.py): the size check before any allocation, request
headers v1 and v2 (flexible versions, tagged fields), what an unknown API or version or a broken body
becomes, ApiVersions' fallback answer, and response headers v0 / v1."""

from __future__ import annotations

import io
import struct

import pytest
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsRequestV3
from kio.schema.metadata.v4.request import MetadataRequest as MetadataRequestV4
from kio.schema.metadata.v4.request import MetadataRequestTopic as MetadataTopicV4
from kio.schema.metadata.v9.request import MetadataRequest as MetadataRequestV9
from kio.schema.request_header.v1 import RequestHeader as HeaderV1
from kio.schema.request_header.v2 import RequestHeader as HeaderV2
from kio.serial import entity_reader, entity_writer

from ads_spark.kafka import frames
from ads_spark.kafka.api import ApiHandler, RequestHeader

TABLE = {18: ApiHandler(18, "ApiVersions", 0, 3, lambda call, request: {}, before_auth=True),
         3: ApiHandler(3, "Metadata", 0, 11, lambda call, request: {})}


def _request(header_cls, api_key, version, body_cls, body, correlation_id=7, client_id="k2-test") -> bytes:
    out = io.BytesIO()
    entity_writer(header_cls)(out, header_cls(request_api_key=api_key, request_api_version=version,
                                              correlation_id=correlation_id, client_id=client_id))
    entity_writer(body_cls)(out, body)
    return out.getvalue()


def _api_versions_v3(**kwargs) -> bytes:
    return _request(HeaderV2, 18, 3, ApiVersionsRequestV3,
                    ApiVersionsRequestV3(client_software_name="k2", client_software_version="1"), **kwargs)


# ---- the size prefix ----------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, -1, -(2**31), 1025, 2**31 - 1])
def test_a_size_that_is_not_positive_or_over_the_limit_is_refused(size):
    with pytest.raises(frames.FrameSizeError, match="frame size"):
        frames.frame_size(struct.pack(">i", size), max_bytes=1024)


def test_a_size_within_the_limit_is_read_and_a_short_prefix_is_refused():
    assert frames.frame_size(struct.pack(">i", 1024), max_bytes=1024) == 1024
    assert frames.frame_size(struct.pack(">i", 1), max_bytes=1024) == 1
    with pytest.raises(frames.FrameSizeError):
        frames.frame_size(b"\x00\x00\x01", max_bytes=1024)


# ---- request headers ----------------------------------------------------------------------------------


def test_a_non_flexible_version_has_header_v1_and_its_body_decodes():
    body = MetadataRequestV4(topics=(MetadataTopicV4(name="orders"),), allow_auto_topic_creation=False)
    outcome = frames.decode_request(_request(HeaderV1, 3, 4, MetadataRequestV4, body, correlation_id=42), TABLE)
    assert isinstance(outcome, frames.Request)
    assert outcome.header == RequestHeader(3, 4, 42, "k2-test")
    assert outcome.request == body and outcome.entry is TABLE[3]


def test_a_flexible_version_has_header_v2_whose_tagged_fields_are_skipped():
    body = MetadataRequestV9(topics=None, allow_auto_topic_creation=True, include_cluster_authorized_operations=False,
                             include_topic_authorized_operations=False)
    plain = _request(HeaderV2, 3, 9, MetadataRequestV9, body)
    assert frames.decode_request(plain, TABLE).request == body
    # The same header with one unknown tagged field (tag 5, 3 bytes): a v2 header's tag section is read over.
    header_len = len(_request(HeaderV2, 3, 9, MetadataRequestV9, body)) - len(_body_bytes(MetadataRequestV9, body))
    tagged = plain[:header_len - 1] + b"\x01\x05\x03abc" + plain[header_len:]
    outcome = frames.decode_request(tagged, TABLE)
    assert isinstance(outcome, frames.Request) and outcome.request == body
    assert outcome.header == RequestHeader(3, 9, 7, "k2-test")


def _body_bytes(cls, entity) -> bytes:
    out = io.BytesIO()
    entity_writer(cls)(out, entity)
    return out.getvalue()


def test_a_null_client_id_is_kept():
    outcome = frames.decode_request(_api_versions_v3(client_id=None), TABLE)
    assert isinstance(outcome, frames.Request) and outcome.header.client_id is None


# ---- what closes a connection ------------------------------------------------------------------------------


def test_an_unknown_api_key_or_version_or_a_broken_frame_closes_the_connection():
    metadata_v4 = _request(HeaderV1, 3, 4, MetadataRequestV4,
                           MetadataRequestV4(topics=None, allow_auto_topic_creation=False))
    unknown_key = struct.pack(">hhi", 1000, 0, 9) + metadata_v4[8:]
    outcome = frames.decode_request(unknown_key, TABLE)
    assert isinstance(outcome, frames.Close) and "API key 1000" in outcome.reason
    assert outcome.header.correlation_id == 9
    too_new = struct.pack(">hh", 3, 12) + metadata_v4[4:]
    outcome = frames.decode_request(too_new, TABLE)
    assert isinstance(outcome, frames.Close) and "Metadata v12 is not served (versions 0-11)" in outcome.reason
    truncated = frames.decode_request(metadata_v4[:-1], TABLE)
    assert isinstance(truncated, frames.Close) and "cannot be decoded" in truncated.reason
    # Bytes after a decoded body are left unread, as Kafka leaves them (librdkafka 2.16 sends some)
    trailing = frames.decode_request(metadata_v4 + b"\x01\x00\x00", TABLE)
    assert isinstance(trailing, frames.Request) and trailing.request.topics is None
    for short in (b"", b"\x00\x03\x00\x04\x00\x00\x00"):
        outcome = frames.decode_request(short, TABLE)
        assert isinstance(outcome, frames.Close) and outcome.header is None
    bad_utf8 = _request(HeaderV1, 3, 4, MetadataRequestV4,
                        MetadataRequestV4(topics=(MetadataTopicV4(name="ab"),), allow_auto_topic_creation=False))
    bad_utf8 = bad_utf8.replace(b"ab", b"\xff\xfe")
    assert isinstance(frames.decode_request(bad_utf8, TABLE), frames.Close)


# ---- ApiVersions' fallback -----------------------------------------------------------------------------------


def test_an_api_versions_version_not_served_is_answered_in_v0_with_unsupported_version_and_the_table():
    v4 = bytearray(_api_versions_v3(correlation_id=1234))
    v4[2:4] = struct.pack(">h", 4)  # kafka-python asks v4 first; its header is v2 like v3's
    outcome = frames.decode_request(bytes(v4), TABLE)
    assert isinstance(outcome, frames.Reply) and outcome.header.api_version == 4
    size, correlation_id = struct.unpack_from(">ii", outcome.frame)
    assert size == len(outcome.frame) - 4 and correlation_id == 1234
    answer, used = entity_reader(ApiVersionsResponseV0)(memoryview(outcome.frame[8:]).toreadonly(), 0)
    assert used == len(outcome.frame) - 8  # header v0: the correlation id alone, no tag section
    assert int(answer.error_code) == frames.UNSUPPORTED_VERSION == 35
    assert [(k.api_key, k.min_version, k.max_version) for k in answer.api_keys] == [(3, 0, 11), (18, 0, 3)]


# ---- responses ---------------------------------------------------------------------------------------------


def test_a_response_header_is_v0_for_non_flexible_versions_and_api_versions_and_v1_for_flexible_ones():
    api_versions_v3 = frames.encode_response(5, 18, 3, {"api_keys": []})
    metadata_v4 = frames.encode_response(5, 3, 4, {})
    metadata_v9 = frames.encode_response(5, 3, 9, {})
    for frame in (api_versions_v3, metadata_v4, metadata_v9):
        size, correlation_id = struct.unpack_from(">ii", frame)
        assert size == len(frame) - 4 and correlation_id == 5
    # ApiVersions v3's body starts right after the correlation id: error code 0 (int16), then a compact array
    assert api_versions_v3[8:10] == b"\x00\x00"
    # Metadata v9 (flexible): header v1, an empty tag section (one 0 byte) before the body
    assert metadata_v9[8:9] == b"\x00"
    assert len(metadata_v9) - len(frames.frame(5, 0, b"")) > 0
    assert frames.frame(5, 0, b"xy") == struct.pack(">ii", 6, 5) + b"xy"
    assert frames.frame(5, 1, b"xy") == struct.pack(">ii", 7, 5) + b"\x00xy"


def test_records_given_as_chunks_are_sent_as_the_same_buffers_and_frame_like_joined_bytes():
    from ads_spark.kafka import entities

    batches = [bytearray(b"A" * 100), bytearray(b"B" * 50)]
    answer = {"responses": [{"topic": "t", "partitions": [{"partition_index": 0, "high_watermark": 9,
                                                          "records": entities.Chunks(batches)}]}]}
    joined_answer = {"responses": [{"topic": "t", "partitions": [{"partition_index": 0, "high_watermark": 9,
                                                                 "records": b"A" * 100 + b"B" * 50}]}]}
    for version in (4, 12):  # legacy and compact (flexible) records
        parts = frames.encode_response_parts(7, 1, version, answer)
        assert any(part is batches[0] for part in parts) and any(part is batches[1] for part in parts)
        assert b"".join(parts) == frames.encode_response(7, 1, version, joined_answer)
        size, correlation_id = struct.unpack_from(">ii", parts[0])
        assert size == sum(len(part) for part in parts) - 4 and correlation_id == 7
