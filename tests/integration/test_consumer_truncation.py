"""KIP-320 in the Consumer, on a real cluster: after an unclean election truncates records it already read, a
consumer resumes at the truncation point (and reads what was written there since) or, with
auto.offset.reset=none, raises LogTruncationError naming the partition and the lost range."""

from __future__ import annotations

import time

import pytest

from ads_spark.client import Consumer, TopicPartition
from ads_spark.errors import LogTruncationError
from tests.fixtures.truncation import (
    BOTH_HAVE,
    ONLY_LEADER_HAS,
    OVERRIDES,
    elect_unclean,
    write_into_cut,
    write_then_isolate,
)

pytestmark = pytest.mark.integration

POLL_WAIT_S = 60


def poll_values(consumer, count: int) -> list[bytes]:
    values, deadline = [], time.monotonic() + POLL_WAIT_S
    while len(values) < count and time.monotonic() < deadline:
        values.extend(r.value for r in consumer.poll(0.5))
    return values


@pytest.mark.timeout(300)
def test_consumer_detects_truncation_by_an_unclean_election(fresh_cluster, topic_name):
    cluster = fresh_cluster(3, overrides=OVERRIDES)
    admin = write_then_isolate(cluster, topic_name)
    read = BOTH_HAVE + ONLY_LEADER_HAS
    consumers = {reset: Consumer({"bootstrap.servers": cluster.bootstrap_servers, "auto.offset.reset": reset,
                                  "default.api.timeout.ms": "20000"})
                 for reset in ("earliest", "none")}
    try:
        for consumer in consumers.values():
            consumer.assign([TopicPartition(topic_name, 0, 0)])
            assert len(poll_values(consumer, read)) == read
        elect_unclean(cluster, admin, topic_name)
        written = write_into_cut(cluster.bootstrap_servers, topic_name)

        # Without the check the consumer would go on at offset 120 and never see the records at 20..119.
        resumed = consumers["earliest"]
        assert poll_values(resumed, len(written)) == written
        assert resumed.position(TopicPartition(topic_name, 0)) == BOTH_HAVE + len(written)

        strict = consumers["none"]
        with pytest.raises(LogTruncationError) as truncated:
            deadline = time.monotonic() + POLL_WAIT_S
            while time.monotonic() < deadline:
                strict.poll(0.5)
        error = truncated.value
        assert (error.topic, error.partition, error.lost_from_offset, error.lost_to_offset_exclusive) == \
            (topic_name, 0, BOTH_HAVE, read)
        assert f"{topic_name}-0: offsets {BOTH_HAVE}..{read - 1}" in str(error)
        assert strict.position(TopicPartition(topic_name, 0)) == read  # unchanged until the user seeks
        strict.seek(TopicPartition(topic_name, 0, error.divergent_offset))
        assert poll_values(strict, len(written)) == written
    finally:
        for consumer in consumers.values():
            consumer.close()
        admin.close()
