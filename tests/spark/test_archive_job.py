"""jobs/archive.py: a topic archived to Parquet (pyarrow, fsspec), each offset once even after a replay.

The replay is forced the way a crash between "files written" and "batch
committed" leaves it: the last commit record is removed from the checkpoint, so
the restarted query runs that micro-batch again over the same offsets.
"""

from __future__ import annotations


from pathlib import Path

import pyarrow.dataset as ds
import pytest

from tests.fixtures.spark import new_topic, produce


pytestmark = [pytest.mark.spark, pytest.mark.integration]


def test_archive_writes_each_offset_once_across_a_replay(spark, admin, bootstrap, tmp_path):
    from ads_spark.archive import start_archive

    topic = new_topic(admin, partitions=2)
    produce(bootstrap, topic, [(i % 2, None, f"v{i}".encode(), [("h", b"x")]) for i in range(600)])
    archive, checkpoint = tmp_path / "archive", str(tmp_path / "ckpt")
    start_archive(spark, bootstrap, topic, str(archive), checkpoint, True, 200).awaitTermination(180)
    files_before = sorted(p.name for p in archive.rglob("*.parquet"))
    written_at = {p: p.stat().st_mtime_ns for p in archive.rglob("*.parquet")}
    commits = sorted((Path(checkpoint) / "commits").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    last_commit = [p for p in commits if p.name.isdigit()][-1]
    last_commit.unlink()  # as if the driver died after writing the files of that batch
    (last_commit.parent / f".{last_commit.name}.crc").unlink(missing_ok=True)
    start_archive(spark, bootstrap, topic, str(archive), checkpoint, True, 200).awaitTermination(180)
    assert sorted(p.name for p in archive.rglob("*.parquet")) == files_before  # rewritten, not added
    rewritten = sorted(p.name for p, at in written_at.items() if p.stat().st_mtime_ns != at)
    assert rewritten == ["00000000000000000200-00000000000000000299.parquet"] * 2  # the replayed batch, both partitions
    assert not list(archive.rglob("*.tmp"))
    table = ds.dataset(str(archive), format="parquet", partitioning="hive").to_table()
    offsets = sorted(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist()))
    assert offsets == sorted((p, o) for p in (0, 1) for o in range(300))
    assert sorted(table.column("value").to_pylist()) == sorted(f"v{i}".encode() for i in range(600))
    assert table.column("headers").to_pylist()[0] == [{"key": "h", "value": b"x"}]
