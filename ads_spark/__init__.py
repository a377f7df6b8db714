"""ADS: a partitioned, replicated, append-only log for Spark (Kafka's replication, Arrow storage)."""

__version__ = "0.1.0"
