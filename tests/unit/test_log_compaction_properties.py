"""Property test of compaction: any interleaving of appends (tombstones included), cleaning, truncation,
restart and replication to a follower; a reader from the log start sees, for every key, its latest value
(or nothing once its tombstone expired), at that record's offset, offsets strictly increasing.

The model is the list of every record appended that truncation left (offset, key, value). Cleaning
may only remove records that a later record of the same key supersedes, or a tombstone, and never
touches the active segment. The follower copies the leader's (cleaned) batches as they are, through
the checks a replica fetch runs, and cleans on its own.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from ads_spark.broker.log import LogConfig, PartitionLog
from ads_spark.broker.log.cleaner import clean_log
from ads_spark.broker.log.fetched import check_fetched_messages
from ads_spark.protocol.records import PRODUCE_SCHEMA, verify

pytestmark = pytest.mark.timeout(120)

CONFIG = LogConfig(segment_bytes=2_000, cleanup_policy="compact")
KEYS = [b"a", b"b", b"c", b"d", None]  # None: a record without a key (always kept)
SCRATCH_DIR = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
RECORD = st.tuples(st.sampled_from(KEYS), st.booleans())  # (key, is a tombstone)


def open_at(directory: Path, clean_shutdown: bool) -> PartitionLog:
    return PartitionLog.open(directory, CONFIG, recovery_point=0, clean_shutdown=clean_shutdown, now_ms=0)


def read_all(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    rows = []
    for batch, header in log.batches():
        verify(batch, header)
        rows.extend(zip(batch.column("offset").to_pylist(), batch.column("key").to_pylist(),
                        batch.column("value").to_pylist()))
    return rows


class Replica:
    """A log, the cleaner's checkpoint for it, and its directory."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.log = open_at(directory, clean_shutdown=False)
        self.first_dirty: int | None = None

    def clean(self, high_watermark: int, now_ms: int, retention_ms: int, entries_max: int) -> None:
        end = min(high_watermark, self.log.segment_base_offsets[-1])  # as the broker bounds it
        stats = clean_log(self.log, clean_end_offset_exclusive=end, now_ms=now_ms,
                          delete_retention_ms=retention_ms, min_compaction_lag_ms=0,
                          key_map_entries_max=entries_max, throttle=lambda n: None,
                          first_dirty_offset=self.first_dirty)
        assert not stats.abandoned
        self.first_dirty = stats.cleaned_up_to

    def truncate(self, point: int) -> None:
        self.log.truncate_to(point)
        if self.first_dirty is not None:
            self.first_dirty = min(self.first_dirty, self.log.log_end_offset)

    def reopen(self, clean_shutdown: bool) -> None:
        self.log.close()
        self.log = open_at(self.directory, clean_shutdown)


class CompactionModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        # tmpfs when there is one: the logs fsync at every roll and swap, which the property does not need
        self.tmp = Path(tempfile.mkdtemp(prefix="ads-compaction-prop-", dir=SCRATCH_DIR))
        self.leader = Replica(self.tmp / "leader-0")
        self.follower = Replica(self.tmp / "follower-0")
        self.records: list[tuple[int, bytes | None, bytes | None]] = []
        self.now_ms = 0
        self.counter = 0
        # Cleaning stays below it and truncation never goes below it, as in the broker: compaction's promise
        # holds only for a log that is not cut below its high watermark (an unclean election voids it, as in
        # Kafka). Always at a batch boundary.
        self.high_watermark = 0

    def teardown(self):
        self.leader.log.close()
        self.follower.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @rule(batch=st.lists(RECORD, min_size=1, max_size=4), roll=st.booleans())
    def append(self, batch, roll):
        self.do_append(batch, roll)

    def do_append(self, batch, roll):
        keys = [key for key, _ in batch]
        values = [None if tombstone and key is not None else b"v%d" % (self.counter + i)
                  for i, (key, tombstone) in enumerate(batch)]
        self.counter += len(batch)
        n = len(batch)
        produced = pa.RecordBatch.from_arrays(
            [pa.array(np.full(n, self.now_ms, dtype=np.int64), pa.timestamp("ms")), pa.array(keys, pa.binary()),
             pa.array(values, pa.binary()), pa.nulls(n, PRODUCE_SCHEMA.field("headers").type)], schema=PRODUCE_SCHEMA)
        header = self.leader.log.append_as_leader(produced, leader_epoch=0, now_ms=self.now_ms)
        self.records.extend((header.base_offset + i, keys[i], values[i]) for i in range(n))
        if roll:
            self.leader.log.roll(self.now_ms)

    @rule(advance_ms=st.integers(0, 100), retention_ms=st.integers(0, 60), entries_max=st.sampled_from([4, 6, 100]),
          forget_checkpoint=st.booleans())
    def clean_leader(self, advance_ms, retention_ms, entries_max, forget_checkpoint):
        self.do_clean(advance_ms, retention_ms, entries_max, forget_checkpoint)

    def do_clean(self, advance_ms, retention_ms, entries_max, forget_checkpoint):
        self.now_ms += advance_ms
        if forget_checkpoint:
            self.leader.first_dirty = None
        self.leader.clean(self.high_watermark, self.now_ms, retention_ms, entries_max)

    @rule(data=st.data())
    def truncate(self, data):
        self.do_truncate(data.draw(st.integers(self.high_watermark, self.leader.log.log_end_offset)))

    def do_truncate(self, point):
        self.leader.truncate(point)
        end = self.leader.log.log_end_offset
        self.records = [r for r in self.records if r[0] < end]
        # The follower's divergent tail goes too (what its fetches' epoch checks do in the broker).
        if self.follower.log.log_end_offset > end:
            self.follower.truncate(end)

    @rule()
    def commit(self):
        self.do_commit()

    def do_commit(self):
        """The high watermark moves to the log end once the follower has copied it (acks=all, the follower in
        the ISR). A follower left behind while the leader's tombstones expire would keep what they deleted:
        Kafka's rule too (delete.retention.ms must cover how far a replica or reader lags)."""
        self.do_replicate(False)
        self.high_watermark = self.leader.log.log_end_offset

    @rule(leader_clean=st.booleans(), follower_clean=st.booleans())
    def reopen(self, leader_clean, follower_clean):
        self.do_reopen(leader_clean, follower_clean)

    def do_reopen(self, leader_clean, follower_clean):
        self.leader.reopen(leader_clean)
        self.follower.reopen(follower_clean)

    @rule(clean_after=st.booleans())
    def replicate(self, clean_after):
        self.do_replicate(clean_after)

    def do_replicate(self, clean_after):
        follower, leader = self.follower.log, self.leader.log
        for _ in range(1000):  # bounded: each round appends at least one batch
            if follower.log_end_offset >= leader.log_end_offset:
                break
            fetch_offset = follower.log_end_offset
            messages = leader.read(fetch_offset, max_bytes=3_000, as_messages=True)
            follower.append_encoded(check_fetched_messages(messages, fetch_offset), now_ms=self.now_ms)
        assert follower.log_end_offset == leader.log_end_offset
        self.check(follower)
        if clean_after:
            self.follower.clean(self.high_watermark, self.now_ms, 0, 100)
            self.check(follower)

    @invariant()
    def leader_reads_the_latest_value_of_every_key(self):
        self.check(self.leader.log)

    def check(self, log: PartitionLog) -> None:
        rows = read_all(log)
        offsets = [offset for offset, _, _ in rows]
        assert offsets == sorted(set(offsets)), "offsets must strictly increase"
        appended = {offset: (key, value) for offset, key, value in self.records}
        for offset, key, value in rows:  # nothing invented, nothing moved
            assert appended.get(offset) == (key, value), (offset, key, value)
        latest: dict[bytes, tuple[int, bytes | None]] = {}
        for offset, key, value in self.records:
            if key is not None:
                latest[key] = (offset, value)
        seen: dict[bytes, tuple[int, bytes | None]] = {}
        for offset, key, value in rows:
            if key is not None:
                seen[key] = (offset, value)
        for key, (offset, value) in latest.items():
            if value is None:  # a tombstone: seen as the latest, or the key is gone altogether
                assert seen.get(key) in (None, (offset, None)), (key, seen.get(key), offset)
            else:
                assert seen.get(key) == (offset, value), (key, seen.get(key), offset, value)
        null_keyed = [r for r in self.records if r[1] is None]
        assert [r for r in rows if r[1] is None] == null_keyed, "a record without a key is never removed"
        if log is self.leader.log:  # the follower's segments are its own: its active one may hold cleaned batches
            active_base = log.segment_base_offsets[-1]
            assert [r for r in rows if r[0] >= active_base] == [r for r in self.records if r[0] >= active_base]


CompactionModel.TestCase.settings = settings(max_examples=120, stateful_step_count=40, deadline=None,
                                             suppress_health_check=[HealthCheck.too_slow])
TestCompactionModel = CompactionModel.TestCase
