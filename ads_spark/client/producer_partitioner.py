"""Which partition a produced record goes to: an explicit partition, Kafka's key hash, or a sticky one.

Owns the producer's partition choice and its one piece of state, the sticky partition of each topic
for records without a key (and the bytes sent to it since it was chosen). The rules are Kafka's:
an explicit partition must exist (looked up once more in fresh metadata before it is refused, as
partitions may have been added); a key goes to ``toPositive(murmur2(key)) % partitions``
(``protocol/partitioner.py``, shared with the Spark sink, which also holds the cache of recent keys'
hashes); a null key sticks to one partition until ``batch.size`` bytes went there (KIP-794). Apart
from ``producer.py`` because none of it touches the queue, the batches or the sender: the producer
asks for a partition and reports the bytes it queued there, and the rules can be read and tested
without a producer.

Threads: ``choose`` runs on the caller's thread without a lock (as ``produce`` does); ``count_sticky``
runs under the producer's lock. A race between callers can only change which partition is the sticky
one (or restart its byte count), never pick a partition the topic lacks.
"""

from __future__ import annotations

import itertools

from ads_spark.errors import error_for
from ads_spark.protocol.connection import Connections
from ads_spark.protocol.partitioner import key_partition


class PartitionChooser:
    """The partition of each record; ``sticky`` (topic -> partition) is read directly by ``produce``'s hot path."""

    def __init__(self, connections: Connections, batch_size_bytes: int):
        self._connections = connections
        self._batch_size_bytes = batch_size_bytes
        self.sticky: dict[str, int] = {}
        self._sticky_bytes: dict[str, int] = {}  # produced to the topic's sticky partition since it was chosen
        self._round_robin = itertools.count()

    def choose(self, topic: str, key: bytes | None, partition: int | None) -> int:
        if partition is None and key is None:
            current = self.sticky.get(topic)
            if current is not None:  # checked against the partition count when it was chosen
                return current
        partitions = self._connections.partitions_for(topic)
        count = len(partitions)
        if partition is not None:
            if partition not in partitions:  # maybe partitions were added since the cached view: look once more
                partitions = self._connections.refresh([topic]).topics.get(topic) or partitions
                count = len(partitions)
            if partition not in partitions:
                raise error_for(3, f"topic '{topic}' has no partition {partition} (it has {count})")
            return partition
        if key is not None:
            return key_partition(key, count)  # Kafka's murmur2 partitioner (protocol/partitioner.py)
        # Sticky: null-key records go to one partition until batch.size bytes went there (Kafka KIP-794).
        current = self.sticky.get(topic)
        if current is None or current >= count:
            current = self.sticky[topic] = next(self._round_robin) % count
            self._sticky_bytes[topic] = 0
        return current

    def count_sticky(self, topic: str, number: int, size_bytes: int) -> None:
        """Moves the topic's sticky partition on once ``batch.size`` bytes went to it. Not on every sealed
        batch (KIP-480 did that): batches sealed on linger would spread a moderate rate over every
        partition, and each partition then costs the brokers a replicated append per round trip (RF=3,
        5k records/s over 3 partitions: ~300 requests/s, enough to saturate this machine's 2 cores)."""
        if self.sticky.get(topic) != number:
            return
        produced = self._sticky_bytes.get(topic, 0) + size_bytes
        if produced >= self._batch_size_bytes:
            self.sticky.pop(topic, None)
            self._sticky_bytes.pop(topic, None)
        else:
            self._sticky_bytes[topic] = produced
