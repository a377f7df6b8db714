"""The local read path: what the broker locates is exactly what a fetch returns, and anything unsafe is refused."""

from __future__ import annotations

import dataclasses
import os

import pyarrow as pa
import pytest

from ads_spark.broker.log import LogConfig
from ads_spark.local_reads import NotLocal, describe_segments, host_identity, read_located
from tests.fixtures.logs import fill, open_log

pytestmark = pytest.mark.timeout(30)


def _answer(log, start, end, max_bytes=1 << 30):
    located = log.locate(start, max_bytes=max_bytes, end_offset_exclusive=end)
    return {"host_id": host_identity(), "segments": describe_segments(located)}


def _offsets(batches):
    return pa.Table.from_batches(batches).column("offset").to_pylist() if batches else []


def test_located_batches_are_the_fetched_batches_across_segments(tmp_path):
    log = open_log(tmp_path / "t-0", config=dataclasses.replace(LogConfig(), segment_bytes=4096))
    fill(log, [5] * 30)
    assert len(list((tmp_path / "t-0").glob("*.arrows"))) > 2
    for start, end, budget in ((0, 150, 1 << 30), (17, 93, 1 << 30), (40, 150, 3000), (149, 150, 1)):
        fetched = [b for b, _ in log.read(start, max_bytes=budget, end_offset_exclusive=end)]
        local = read_located(_answer(log, start, end, budget))
        assert _offsets(local) == _offsets(fetched), (start, end, budget)
        assert pa.Table.from_batches(local).equals(pa.Table.from_batches(fetched))
    assert read_located(_answer(log, 150, 150)) == []  # nothing at or past the end


def test_another_host_a_replaced_file_or_a_moved_batch_is_refused(tmp_path):
    log = open_log(tmp_path / "t-0")
    fill(log, [4, 4, 4])
    answer = _answer(log, 0, 12)
    with pytest.raises(NotLocal, match="another host"):
        read_located({**answer, "host_id": "elsewhere/boot"})
    segment = answer["segments"][0]
    moved = {**answer, "segments": [{**segment, "batches": [[segment["batches"][1][0], *segment["batches"][0][1:]]]}]}
    with pytest.raises(NotLocal, match="is not offset 0"):
        read_located(moved)
    # A truncation writes a new file and renames it over the old one: the inode changes.
    path = segment["path"]
    os.replace(path, path + ".old")
    with open(path + ".old", "rb") as old, open(path, "wb") as new:
        new.write(old.read())
    with pytest.raises(NotLocal, match="replaced"):
        read_located(answer)
    os.remove(path)
    with pytest.raises(NotLocal, match="cannot map"):
        read_located(answer)
