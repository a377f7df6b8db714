"""Recovery: torn and corrupt tails are cut exactly, only the unflushed tail is validated,
indexes are rebuilt, and a SIGKILLed writer loses no acknowledged batch."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.ipc as ipc
import pytest

from ads_spark.broker.log import LogConfig
from ads_spark.broker.log.index import ENTRY_BYTES
from tests.fixtures.logs import open_log, produce_batch, stored_values, values_for

pytestmark = pytest.mark.timeout(60)

REPO_ROOT = Path(__file__).resolve().parents[2]


def write_log(directory: Path, batch_sizes, config: LogConfig | None = None):
    log = open_log(directory, config)
    first = 0
    for n in batch_sizes:
        log.append_as_leader(produce_batch(values_for(first, n)), leader_epoch=0, now_ms=0)
        first += n
    return log


def positions(log, segment_number=-1):
    """(base_offset, position, size) of each batch of one segment, from the index."""
    segment = log._segments[segment_number]
    return [(e.base_offset, e.position, e.size) for e in (segment.index.entry(i) for i in range(segment.batch_count))]


def crash(log):
    """Drop the log without flushing or closing cleanly, as a killed process would."""
    for segment in log._segments:
        segment.close()


def test_torn_tail_is_cut_at_the_last_whole_batch(tmp_path):
    log = write_log(tmp_path / "t-0", [3, 3, 3, 3])
    batches = positions(log)
    crash(log)
    segment = tmp_path / "t-0" / "00000000000000000000.arrows"
    _, last_position, last_size = batches[-1]
    os.truncate(segment, last_position + last_size // 2)
    recovered = open_log(tmp_path / "t-0", recovery_point=0)
    assert recovered.log_end_offset == 9 and recovered.recovery_point == 9
    assert segment.stat().st_size == last_position
    assert stored_values(recovered) == {i: b"value-%d" % i for i in range(9)}
    assert ipc.open_stream(str(segment)).read_all().num_rows == 9
    recovered.append_as_leader(produce_batch([b"new"]), leader_epoch=1, now_ms=0)
    assert stored_values(recovered)[9] == b"new"


@pytest.mark.parametrize("where", ["body", "metadata", "length"])
def test_corrupt_byte_cuts_there_and_drops_later_segments(tmp_path, where):
    log = write_log(tmp_path / "t-0", [4] * 12, LogConfig(segment_bytes=6_000))
    bases = log.segment_base_offsets
    assert len(bases) >= 3
    victim_base, victim_position, victim_size = positions(log, 0)[2]
    crash(log)
    segment = tmp_path / "t-0" / "00000000000000000000.arrows"
    data = bytearray(segment.read_bytes())
    offset = {"body": victim_position + victim_size - 20, "metadata": victim_position + 40,
              "length": victim_position + 5}[where]
    data[offset] ^= 0xFF
    segment.write_bytes(bytes(data))
    recovered = open_log(tmp_path / "t-0", recovery_point=0)
    assert recovered.log_end_offset == victim_base == 8
    assert recovered.segment_base_offsets == [0]
    assert segment.stat().st_size == victim_position
    assert sorted(p.name for p in (tmp_path / "t-0").iterdir()) == [
        "00000000000000000000.arrows", "00000000000000000000.index", "00000000000000000000.timeindex"]
    assert stored_values(recovered) == {i: b"value-%d" % i for i in range(8)}


def test_only_segments_past_the_recovery_point_are_validated(tmp_path):
    log = write_log(tmp_path / "t-0", [4] * 12, LogConfig(segment_bytes=6_000))
    bases = log.segment_base_offsets
    first_body = positions(log, 0)[0]
    crash(log)
    segment = tmp_path / "t-0" / "00000000000000000000.arrows"
    data = bytearray(segment.read_bytes())
    data[first_body[1] + first_body[2] - 20] ^= 0xFF  # damage below the recovery point
    segment.write_bytes(bytes(data))
    trusting = open_log(tmp_path / "t-0", recovery_point=bases[1])
    assert trusting.log_end_offset == 48 and trusting.segment_base_offsets == bases  # not re-read: O(tail)
    crash(trusting)
    validating = open_log(tmp_path / "t-0", recovery_point=0)
    assert validating.log_end_offset == 0 and validating.segment_base_offsets == [0]


def test_clean_shutdown_trusts_every_segment(tmp_path):
    log = write_log(tmp_path / "t-0", [4] * 12, LogConfig(segment_bytes=6_000))
    bases = log.segment_base_offsets
    log.close()
    reopened = open_log(tmp_path / "t-0", recovery_point=0, clean_shutdown=True)
    assert reopened.segment_base_offsets == bases and reopened.log_end_offset == 48
    assert not any(s.index._loaded for s in reopened._segments[:-1])  # indexes load lazily
    assert stored_values(reopened) == {i: b"value-%d" % i for i in range(48)}


@pytest.mark.parametrize("damage", ["missing", "torn", "stale"])
def test_bad_indexes_are_rebuilt(tmp_path, damage):
    log = write_log(tmp_path / "t-0", [4] * 12, LogConfig(segment_bytes=6_000))
    bases = log.segment_base_offsets
    log.close()
    index = tmp_path / "t-0" / "00000000000000000000.index"
    if damage == "missing":
        index.unlink()
        (tmp_path / "t-0" / "00000000000000000000.timeindex").unlink()
    elif damage == "torn":
        os.truncate(index, index.stat().st_size - 3)
    else:
        os.truncate(index, index.stat().st_size - ENTRY_BYTES)
    reopened = open_log(tmp_path / "t-0", recovery_point=48, clean_shutdown=True)
    assert reopened.segment_base_offsets == bases
    assert stored_values(reopened) == {i: b"value-%d" % i for i in range(48)}
    assert reopened.offset_for_timestamp(1003) == (3, 1003)
    assert index.stat().st_size % ENTRY_BYTES == 0 and index.stat().st_size > 0


def test_stray_files_and_broken_schema(tmp_path):
    log = write_log(tmp_path / "t-0", [2, 2])
    log.roll(now_ms=0)
    crash(log)
    directory = tmp_path / "t-0"
    (directory / "00000000000000000000.arrows.truncating").write_bytes(b"junk")
    (directory / "leader-epoch-checkpoint.tmp").write_bytes(b"junk")
    (directory / "00000000000000000004.arrows").write_bytes(b"\xff\xff\xff")  # torn schema of the new segment
    recovered = open_log(directory, recovery_point=4)
    assert recovered.log_end_offset == 4 and recovered.segment_base_offsets == [0, 4]
    assert not any(p.name.endswith((".truncating", ".tmp")) for p in directory.iterdir())
    recovered.append_as_leader(produce_batch([b"x"]), leader_epoch=0, now_ms=0)
    assert ipc.open_stream(str(directory / "00000000000000000004.arrows")).read_all().num_rows == 1


WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from ads_spark.broker.log import LogConfig, PartitionLog
    from tests.fixtures.logs import produce_batch, values_for

    log = PartitionLog.open(Path(sys.argv[1]), LogConfig(segment_bytes=20_000, flush_interval_messages=25),
                            recovery_point=0, clean_shutdown=False, now_ms=0)
    first = 0
    while True:
        header = log.append_as_leader(produce_batch(values_for(first, 3)), leader_epoch=0, now_ms=0)
        print(header.base_offset, flush=True)
        first += 3
""")


def test_sigkill_loses_no_acknowledged_batch(tmp_path):
    directory = tmp_path / "t-0"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(directory)], cwd=REPO_ROOT,
                            stdout=subprocess.PIPE, text=True)
    acknowledged: list[int] = []
    deadline = time.monotonic() + 30
    try:
        while len(acknowledged) < 300 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            acknowledged.append(int(line))
        os.kill(proc.pid, signal.SIGKILL)
        acknowledged += [int(line) for line in proc.stdout.read().split()]  # printed before the kill landed
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert len(acknowledged) >= 300, "writer did not start"
    assert acknowledged == list(range(0, 3 * len(acknowledged), 3))
    recovered = open_log(directory, LogConfig(segment_bytes=20_000), recovery_point=0)
    assert len(recovered.segment_base_offsets) > 2
    assert recovered.log_end_offset >= acknowledged[-1] + 3
    values = stored_values(recovered)
    for base in acknowledged:
        assert recovered.read(base, max_bytes=1)[0][1].base_offset == base
        assert [values[base + i] for i in range(3)] == values_for(base, 3)
    for path in sorted(directory.glob("*.arrows")):
        assert ipc.open_stream(str(path)).read_all().num_rows > 0 or path == sorted(directory.glob("*.arrows"))[-1]
