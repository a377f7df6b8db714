"""Storage engine: partition logs of Arrow IPC stream segments, their indexes and checkpoints.

The on-disk contract is in docs/DESIGN.md (section Storage). Modules:

* ``config``         LogConfig, the topic-level settings a log obeys
* ``segment``        one segment file and its recovery scan
* ``index``          the ``.index`` / ``.timeindex`` sidecars
* ``partition_log``  PartitionLog: append, read, truncate, roll, retain, flush, recover
* ``segment_loading`` which segments start-up trusts or scans; leader epochs rebuilt from batch headers
* ``checkpoints``    LeaderEpochFile and OffsetCheckpointFile (Kafka's text formats)
* ``manager``        LogManager: one ``log.dirs`` directory and its per-broker files
* ``log_dirs``       LogDirs: every ``log.dirs`` directory; where a new partition goes
* ``cleaner``        clean_log: one compaction pass (latest record per key), offsets kept with gaps
* ``cleaner_swap``   the crash-safe swap of cleaned segments, finished or rolled back on open
* ``cleaner_manager`` the broker's cleaner thread: which log to clean, up to where, how fast
"""

from ads_spark.broker.log.checkpoints import LeaderEpochFile, OffsetCheckpointFile
from ads_spark.broker.log.config import LogConfig
from ads_spark.broker.log.manager import LogManager, ensure_meta_properties
from ads_spark.broker.log.log_dirs import LogDirs
from ads_spark.broker.log.partition_log import PartitionLog

__all__ = ["LeaderEpochFile", "LogConfig", "LogDirs", "LogManager", "OffsetCheckpointFile", "PartitionLog",
           "ensure_meta_properties"]
