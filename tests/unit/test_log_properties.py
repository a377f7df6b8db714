"""Property test: random append/read/truncate/roll/reopen/crash/retention sequences against a model.

The model is a dict offset -> (value, timestamp) plus the log start offset. After
every step the log must hold exactly the model's records; a simulated power loss
(the active segment cut anywhere past the recovery point) may only shorten the
model to a prefix that still covers the recovery point.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from ads_spark.broker.log import LogConfig
from tests.fixtures.logs import open_log, produce_batch

pytestmark = pytest.mark.timeout(120)

CONFIG = LogConfig(segment_bytes=2_500, retention_ms=-1, flush_interval_messages=7)


class LogModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="ads-log-prop-"))
        self.directory = self.tmp / "t-0"
        self.log = open_log(self.directory, CONFIG)
        self.records: dict[int, tuple[bytes, int]] = {}
        self.start = 0
        self.end = 0
        self.counter = 0
        self.batch_bases: list[int] = []  # base offset of every batch in the log, ascending

    def teardown(self):
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @initialize(sizes=st.lists(st.integers(1, 6), min_size=2, max_size=15), base_ms=st.integers(0, 9_000))
    def prefill(self, sizes, base_ms):
        for n in sizes:
            self.append(n, [base_ms + (7 * self.counter + 3 * i) % 1_000 for i in range(6)])

    @rule(n=st.integers(1, 6), timestamps=st.lists(st.integers(0, 10_000), min_size=6, max_size=6))
    def append(self, n, timestamps):
        values = [b"r%d" % (self.counter + i) for i in range(n)]
        self.counter += n
        header = self.log.append_as_leader(produce_batch(values, timestamps[:n]), leader_epoch=0, now_ms=0)
        assert header.base_offset == self.end
        self.batch_bases.append(self.end)
        for i, value in enumerate(values):
            self.records[self.end + i] = (value, timestamps[i])
        self.end += n

    @rule(data=st.data(), max_bytes=st.integers(1, 300) | st.integers(1_000, 20_000))
    def read(self, data, max_bytes):
        offset = data.draw(st.integers(self.start, self.end))
        bound = data.draw(st.none() | st.integers(self.start, self.end + 1)
                          | st.sampled_from(self.batch_bases or [self.end]))
        batches = self.log.read(offset, max_bytes=max_bytes, end_offset_exclusive=bound)
        end = self.end if bound is None else min(bound, self.end)
        if offset >= end:
            assert batches == []
            return
        assert batches and batches[0][1].base_offset <= offset < batches[0][1].next_offset
        assert all(header.base_offset < end for _, header in batches)
        expected = batches[0][1].base_offset
        for batch, header in batches:
            assert header.base_offset == expected
            offsets = batch.column("offset").to_pylist()
            values = batch.column("value").to_pylist()
            for o, v in zip(offsets, values):
                if o >= self.start:
                    assert self.records[o][0] == v
            expected = header.next_offset
        if len(batches) > 1:
            assert sum(header.record_count for _, header in batches) > 0

    @rule(data=st.data())
    def truncate(self, data):
        point = data.draw(st.integers(max(self.start - 2, 0), self.end + 2))
        self.log.truncate_to(point)
        if point >= self.end:
            expected_end = self.end
        elif point < self.start:  # below the log start: the log restarts empty at the point
            expected_end = self.start = point
            self.records.clear()
            self.batch_bases.clear()
        else:  # a straddling batch goes whole: cut at the base of the batch holding the point
            expected_end = max(b for b in self.batch_bases if b <= point)
        assert self.log.log_end_offset == expected_end
        self._cut_model(expected_end)

    @rule()
    def roll(self):
        self.log.roll(now_ms=0)

    @rule(clean=st.booleans())
    def reopen(self, clean):
        recovery_point = self.log.recovery_point
        if clean:
            self.log.close()
        else:
            for segment in self.log._segments:
                segment.close()
        self.log = open_log(self.directory, CONFIG, recovery_point=recovery_point, clean_shutdown=clean,
                            log_start_offset=self.start)
        assert self.log.log_end_offset == self.end

    @precondition(lambda self: self.log._segments[-1].batch_count > 0)
    @rule(data=st.data())
    def power_loss(self, data):
        """Cut the active segment anywhere at or after the first unflushed batch, then recover."""
        recovery_point = self.log.recovery_point
        segment = self.log._segments[-1]
        entries = [segment.index.entry(i) for i in range(segment.batch_count)]
        unflushed = [e for e in entries if e.next_offset > recovery_point]
        if not unflushed:
            return
        cut = data.draw(st.integers(unflushed[0].position, segment.size_bytes))
        for s in self.log._segments:
            s.close()
        os.truncate(segment.path, cut)
        self.log = open_log(self.directory, CONFIG, recovery_point=recovery_point, log_start_offset=self.start)
        assert recovery_point <= self.log.log_end_offset <= self.end
        self._cut_model(self.log.log_end_offset)

    @rule(data=st.data())
    def advance_start(self, data):
        offset = data.draw(st.integers(self.start, self.end))
        self.log.advance_log_start_offset(offset)
        self.start = offset

    @rule(fraction=st.floats(0, 1))
    def retention(self, fraction):
        high_watermark = self.start + int((self.end - self.start) * fraction)
        self.log.apply_retention(10**12, max_deletable_offset_exclusive=high_watermark)
        assert self.log.log_start_offset <= max(high_watermark, self.start)
        self.start = self.log.log_start_offset

    @rule(target_ms=st.integers(0, 10_001))
    def timestamp_lookup(self, target_ms):
        assert self.log.offset_for_timestamp(target_ms) == self._expected_lookup(target_ms)

    def _expected_lookup(self, target_ms):
        """Kafka's answer from the model: in offset order, the first record at/after the log start
        with timestamp >= target, searched batch by batch (batches whose max timestamp is lower are skipped)."""
        for _, header in self.log.batches():
            if header.max_timestamp_ms < target_ms:
                continue
            for offset in range(max(header.base_offset, self.start), header.next_offset):
                if self.records[offset][1] >= target_ms:
                    return offset, self.records[offset][1]
        return None

    def _cut_model(self, end):
        for offset in range(end, self.end):
            self.records.pop(offset, None)
        self.end = end
        self.start = min(self.start, end)
        self.batch_bases = [b for b in self.batch_bases if b < end]

    @invariant()
    def matches_model(self):
        assert (self.log.log_start_offset, self.log.log_end_offset) == (self.start, self.end)
        assert self.log.log_start_offset <= self.log.log_end_offset
        assert self.log.recovery_point <= self.log.log_end_offset
        got = {}
        for batch, _ in self.log.batches():
            for o, v in zip(batch.column("offset").to_pylist(), batch.column("value").to_pylist()):
                if o >= self.start:
                    got[o] = v
        assert got == {o: v for o, (v, _) in self.records.items() if o >= self.start}


LogModel.TestCase.settings = settings(max_examples=40, stateful_step_count=30, deadline=None,
                                      suppress_health_check=[HealthCheck.too_slow])
TestLogModel = LogModel.TestCase
