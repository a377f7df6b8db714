"""A producer asked for a partition its cached metadata does not know looks the topic up once more.

Found by the mirror (tests/spark/test_mirror.py): after a topic grows, a sink task's producer, reusing a
process's cached metadata, refused a record for a new partition as UNKNOWN_TOPIC_OR_PARTITION while the
sink itself had just read the new count from the cluster.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ads_spark.client.producer_partitioner import PartitionChooser
from ads_spark.errors import UnknownTopicOrPartitionError
from tests.fixtures.producers import OnePartitionConnections


class GrownConnections(OnePartitionConnections):
    """The cached view knows partition 0 of ``t``; the cluster, asked again, has partitions 0-2."""

    def __init__(self):
        self.refreshed = 0

    def refresh(self, topics=None):
        self.refreshed += 1
        return SimpleNamespace(topics={"t": {p: SimpleNamespace(leader=1) for p in range(3)}})


def test_a_partition_added_since_the_cached_view_is_found():
    connections = GrownConnections()
    chooser = PartitionChooser(connections, batch_size_bytes=1 << 20)
    assert chooser.choose("t", None, 2) == 2
    assert connections.refreshed == 1
    with pytest.raises(UnknownTopicOrPartitionError, match="has no partition 7 \\(it has 3\\)"):
        chooser.choose("t", None, 7)
