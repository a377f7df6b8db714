"""The Python client of ADS: producer, consumer and admin, with Kafka's config names.

See INTERFACES.md ("Python client") for the public surface; errors raised are
``ads_spark.errors.AdsError`` subclasses named after Kafka's error codes.
"""

from ads_spark.client.admin import Admin, TopicDescription
from ads_spark.protocol.connection import PartitionMetadata
from ads_spark.client.consumer import Consumer, Record, TopicPartition
from ads_spark.client.producer import Producer, RecordMetadata

__all__ = ["Admin", "Consumer", "PartitionMetadata", "Producer", "Record", "RecordMetadata", "TopicDescription",
           "TopicPartition"]
