"""Archiving a topic to a Parquet dataset on any fsspec URL, exactly once per offset.

Used by ``jobs/archive.py``. For each micro-batch of a streaming read of the
topic, every executor task writes the rows of its offset range with pyarrow to
``<url>/topic=<t>/partition=<p>/<first offset>-<last offset>.parquet``. The file
name is a function of the offsets alone, and Spark re-executes a micro-batch
over exactly the offsets its checkpoint recorded, so a replayed batch rewrites
the same files instead of adding new ones. Lives in the package (not in the job
script) because executors must be able to import the function they run.
"""

from __future__ import annotations

import os
from typing import Iterator

import pyarrow as pa

ARCHIVE_SCHEMA = "topic string, partition int, first_offset long, last_offset long, rows long, path string"


def file_path(base: str, topic: str, partition: int, first: int, last: int) -> str:
    return f"{base.rstrip('/')}/topic={topic}/partition={partition}/{first:020d}-{last:020d}.parquet"


def write_partition_files(url: str):
    """A mapInArrow function: write each (topic, partition) group of a task's rows to one Parquet file."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import fsspec
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        table = pa.Table.from_batches(list(batches))
        if table.num_rows == 0:
            return
        fs, base = fsspec.core.url_to_fs(url)
        written = []
        for topic in pc.unique(table.column("topic")).to_pylist():
            of_topic = table.filter(pc.equal(table.column("topic"), topic))
            for partition in pc.unique(of_topic.column("partition")).to_pylist():
                rows = of_topic.filter(pc.equal(of_topic.column("partition"), partition))
                rows = rows.sort_by("offset")
                first, last = rows.column("offset")[0].as_py(), rows.column("offset")[-1].as_py()
                path = file_path(base, topic, partition, first, last)
                fs.makedirs(os.path.dirname(path), exist_ok=True)
                # Written under a temporary name and moved into place, so a reader never sees half a file.
                tmp = path + ".tmp"
                with fs.open(tmp, "wb") as handle:
                    pq.write_table(rows, handle)
                fs.mv(tmp, path)
                written.append((topic, partition, first, last, rows.num_rows, path))
        yield pa.RecordBatch.from_pylist(
            [dict(zip(("topic", "partition", "first_offset", "last_offset", "rows", "path"), w)) for w in written],
            schema=pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("first_offset", pa.int64()),
                              ("last_offset", pa.int64()), ("rows", pa.int64()), ("path", pa.string())]))

    return run


def start_archive(spark, bootstrap: str, topic: str, url: str, checkpoint: str, available_now: bool,
                  max_offsets_per_trigger: int | None = None, options: dict[str, str] | None = None):
    """``options``: further reader options, e.g. the cluster's ``ads.security.protocol`` and ``ads.ssl.*``."""
    reader = (spark.readStream.format("ads").options(**(options or {})).option("ads.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest").option("includeHeaders", "true"))
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    writer_fn = write_partition_files(url)

    def archive_batch(batch_df, batch_id: int) -> None:
        batch_df.mapInArrow(writer_fn, ARCHIVE_SCHEMA).collect()

    query = reader.load().writeStream.foreachBatch(archive_batch).option("checkpointLocation", checkpoint)
    query = query.trigger(availableNow=True) if available_now else query.trigger(processingTime="5 seconds")
    return query.start()
