"""The cleaner's swap survives SIGKILL at every step: the log reopens with the old segments or the new ones.

A child interpreter opens a copy of one prepared log and cleans it with ``cleaner_swap.step_hook``
killing it (SIGKILL: no cleanup, no flush) right after the n-th file operation of the pass, for
every n the pass has. The parent then reopens the directory as a restarted broker would
(``PartitionLog.open``: trusted below the recovery point, and again with every batch re-validated)
and requires exactly the records before cleaning (killed before the swap's commit point) or exactly
the records after (killed at or after it), no cleaner file left, and a log that appends and cleans
again. A kill in the middle of the recovery that finishes a committed swap is tested too.
"""

from __future__ import annotations

import json
import shutil
import signal

import numpy as np
import pyarrow as pa
import pytest

from ads_spark.broker.log import LogConfig, PartitionLog
from ads_spark.broker.log.cleaner import clean_log
from ads_spark.protocol.records import PRODUCE_SCHEMA
from tests.fixtures.fresh_interpreter import run_python

pytestmark = pytest.mark.timeout(120)

CHILD_TIMEOUT_S = 30
# Merges the first two segments into one and cleans the third alone (it is larger: see ``prepared``).
CLEAN_SEGMENT_BYTES = 12_000

CHILD = """
import json, os, signal, sys
from ads_spark.broker.log import LogConfig, PartitionLog, cleaner_swap
from ads_spark.broker.log.cleaner import clean_log

directory, kill_at, kill_in = sys.argv[1], int(sys.argv[2]), sys.argv[3]
labels = []

def hook(label):
    labels.append(label)
    if len(labels) - 1 == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)

if kill_in == "recovery":
    cleaner_swap.step_hook = hook
log = PartitionLog.open(directory, LogConfig(segment_bytes=int(sys.argv[4])), recovery_point=int(sys.argv[5]),
                        clean_shutdown=True, now_ms=0)
cleaner_swap.step_hook = hook
clean_log(log, clean_end_offset_exclusive=log.segment_base_offsets[-1], now_ms=1_000, delete_retention_ms=0,
          min_compaction_lag_ms=0, key_map_entries_max=1_000, throttle=lambda n: None)
log.close()
print(json.dumps(labels))
"""


def batch(pairs, value_bytes: int) -> pa.RecordBatch:
    n = len(pairs)
    values = [None if v is None else v * value_bytes for _, v in pairs]
    return pa.RecordBatch.from_arrays(
        [pa.array(np.full(n, 5, dtype=np.int64), pa.timestamp("ms")), pa.array([k for k, _ in pairs], pa.binary()),
         pa.array(values, pa.binary()), pa.nulls(n, PRODUCE_SCHEMA.field("headers").type)], schema=PRODUCE_SCHEMA)


def reopen(directory, *, trusted: bool) -> PartitionLog:
    end = max(int(p.stem) for p in directory.glob("*.arrows"))  # the active segment's base: all below is synced
    return PartitionLog.open(directory, LogConfig(segment_bytes=CLEAN_SEGMENT_BYTES),
                             recovery_point=end if trusted else 0, clean_shutdown=False, now_ms=0)


def rows(log: PartitionLog) -> list:
    result = []
    for b, header in log.batches():
        result.extend(zip(b.column("offset").to_pylist(), b.column("key").to_pylist(), b.column("value").to_pylist()))
    return result


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """A log of four segments (the last active): two small, one larger, each with superseded keys and tombstones;
    its records before and after one cleaning pass, and the directory listing after it."""
    root = tmp_path_factory.mktemp("cleaner-crash")
    template = root / "template" / "t-0"
    log = PartitionLog.open(template, LogConfig(), recovery_point=0, clean_shutdown=False, now_ms=0)
    for segment, value_bytes in enumerate([20, 20, 2_000]):
        for i in range(4):
            log.append_as_leader(batch([(b"k%d" % ((segment + i) % 5), b"v"), (b"t", None if i % 2 else b"w")],
                                       value_bytes), leader_epoch=0, now_ms=0)
        log.roll(0)
    log.append_as_leader(batch([(b"k0", b"active")], 1), leader_epoch=0, now_ms=0)
    before = rows(log)
    sizes = [size for _, _, size, _ in log.segment_summaries()]
    assert sizes[0] + sizes[1] <= CLEAN_SEGMENT_BYTES < sizes[0] + sizes[1] + sizes[2]
    log.close()
    cleaned = root / "cleaned" / "t-0"
    shutil.copytree(template, cleaned)
    log = reopen(cleaned, trusted=True)
    clean_log(log, clean_end_offset_exclusive=log.segment_base_offsets[-1], now_ms=1_000, delete_retention_ms=0,
              min_compaction_lag_ms=0, key_map_entries_max=1_000, throttle=lambda n: None)
    after = rows(log)
    log.close()
    assert len(after) < len(before)
    listing = sorted(p.name for p in cleaned.iterdir())
    labels = json.loads(_child(root / "labels", template, -1, "clean").stdout)
    return root, template, before, after, listing, labels


def _child(run_dir, template, kill_at: int, kill_in: str):
    directory = run_dir / "t-0"
    if not directory.exists():
        shutil.copytree(template, directory)
    end = max(int(p.stem) for p in directory.glob("*.arrows"))
    return run_python(["-c", CHILD, str(directory), str(kill_at), kill_in, str(CLEAN_SEGMENT_BYTES), str(end)],
                      cwd=str(run_dir), timeout_s=CHILD_TIMEOUT_S)


def _check(directory, expected, listing):
    for trusted in (True, False):
        log = reopen(directory, trusted=trusted)
        assert rows(log) == expected
        log.close()
    names = sorted(p.name for p in directory.iterdir())
    assert not [n for n in names if n.endswith((".cleaned", ".tmp")) or n.startswith("cleaner-swap")]
    if listing is not None:
        assert names == listing
    log = reopen(directory, trusted=True)  # and it lives on: appends, cleans again
    log.append_as_leader(batch([(b"k1", b"z")], 1), leader_epoch=0, now_ms=0)
    log.roll(0)
    clean_log(log, clean_end_offset_exclusive=log.segment_base_offsets[-1], now_ms=2_000, delete_retention_ms=0,
              min_compaction_lag_ms=0, key_map_entries_max=1_000, throttle=lambda n: None)
    assert rows(log)[-1][1:] == (b"k1", b"z")
    log.close()


def test_the_pass_has_the_steps_the_swap_protocol_names(prepared):
    _, _, _, _, _, labels = prepared
    commit = labels.index("manifest-written")
    assert labels[:commit] == ["written 00000000000000000000.arrows.cleaned",
                               "written 00000000000000000016.arrows.cleaned", "cleaned-written"]
    assert labels[-2:] == ["replaced", "manifest-deleted"]
    assert sum(label.startswith("renamed") for label in labels) == 6
    assert sum(label.startswith("deleted") for label in labels) == 3  # the merged second segment's files


def test_sigkill_at_every_step_leaves_the_old_or_the_new_segments(prepared):
    root, template, before, after, listing, labels = prepared
    commit = labels.index("manifest-written")
    for kill_at, label in enumerate(labels):
        run_dir = root / f"kill-{kill_at}"
        run_dir.mkdir()
        result = _child(run_dir, template, kill_at, "clean")
        assert result.returncode == -signal.SIGKILL, (label, result.stderr)
        committed = kill_at >= commit
        _check(run_dir / "t-0", after if committed else before, listing if committed else None)


@pytest.mark.parametrize("recovery_kill_at", [0, 4])
def test_sigkill_while_recovery_finishes_a_committed_swap(prepared, recovery_kill_at):
    root, template, _, after, listing, labels = prepared
    run_dir = root / f"recovery-{recovery_kill_at}"
    run_dir.mkdir()
    assert _child(run_dir, template, labels.index("manifest-written"), "clean").returncode == -signal.SIGKILL
    assert _child(run_dir, template, recovery_kill_at, "recovery").returncode == -signal.SIGKILL
    _check(run_dir / "t-0", after, listing)
