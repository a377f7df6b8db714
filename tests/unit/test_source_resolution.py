"""Read-time resolution of batch offsets and startingOffsetsByTimestampStrategy, with a fake cluster."""

from types import SimpleNamespace

import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from ads_spark.errors import InvalidConfigError, LeaderNotAvailableError
from ads_spark.protocol.records import RECORD_SCHEMA
from ads_spark.spark.source import reader
from ads_spark.spark.source.offsets import PartitionState, TopicState
from ads_spark.spark.source.options import OffsetSpec, parse_source_options
from ads_spark.spark.source.planning import OffsetRange
from ads_spark.spark.source.resolution import (
    DeferredRange,
    check_starting_timestamps,
    defer_batch,
    piece_range,
)


class FakeTopic:
    """One topic "t" (id "id1") of one partition holding offsets [log_start, hw); record i has timestamp
    1000 + i ms. Serves both as the Admin and the Consumer."""

    def __init__(self, log_start, hw):
        self.log_start, self.hw = log_start, hw

    def snapshot(self):
        return {"t": TopicState("id1", {0: PartitionState(self.log_start, self.hw)})}

    def describe_topics(self, names):
        return [SimpleNamespace(topic="t", topic_id="id1", partitions=[SimpleNamespace(partition=0)])]

    def list_offsets(self, tps, spec):
        if spec == "earliest":
            found = self.log_start
        elif spec == "latest":
            found = self.hw
        else:  # first offset whose timestamp is at or after spec, the HW when there is none
            found = min(self.hw, max(self.log_start, int(spec) - 1000))
        return {tp: found for tp in tps}

    def fetch_arrow(self, tp, start, end, max_bytes=None):
        first, last = max(start, self.log_start), min(end, self.hw)
        offsets = list(range(first, max(first, last)))
        n = len(offsets)
        return pa.table({"offset": pa.array(offsets, pa.int64()),
                         "timestamp": pa.array([1000 + o for o in offsets], pa.timestamp("ms")),
                         "key": pa.nulls(n, pa.binary()), "value": pa.array([b"v"] * n, pa.binary()),
                         "headers": pa.nulls(n, RECORD_SCHEMA.field("headers").type)}, schema=RECORD_SCHEMA)

    def fetch_range(self, tp, start, end, max_bytes=None, typed=None, keep_until_exclusive=None):
        table = self.fetch_arrow(tp, start, end, max_bytes)
        next_offset = table.column("offset")[-1].as_py() + 1 if table.num_rows else start
        return SimpleNamespace(table=table, next_offset=next_offset)


def batch_reader(cluster, monkeypatch, **extra):
    monkeypatch.setattr(reader.clients, "consumer_for", lambda config: cluster)
    monkeypatch.setattr(reader.clients, "admin_for", lambda config: cluster)
    monkeypatch.setattr(reader.lookups, "take_snapshot", lambda admin, subscription, require_existing: cluster.snapshot())
    monkeypatch.setattr(reader.lookups, "take_complete_snapshot", lambda admin, subscription: cluster.snapshot())
    options = parse_source_options({"ads.bootstrap.servers": "h:1", "subscribe": "t", **extra}, streaming=False)
    return reader.AdsBatchReader(options)


def offsets_read(batch, partitions):
    batches = [b for p in partitions for b in batch.read(p)]
    return sorted(o for b in batches for o in b.column(b.schema.get_field_index("offset")).to_pylist())


def test_a_batch_dataframe_run_again_reads_what_is_there_then(monkeypatch):
    cluster = FakeTopic(0, 10)
    batch = batch_reader(cluster, monkeypatch, minPartitions="3")
    partitions = batch.partitions()  # pyspark plans once per DataFrame and keeps these
    assert offsets_read(batch, partitions) == list(range(10))
    cluster.log_start, cluster.hw = 4, 25  # retention and new records between two runs
    assert offsets_read(batch, partitions) == list(range(4, 25))


def test_an_empty_partition_at_planning_is_read_when_it_has_records(monkeypatch):
    cluster = FakeTopic(0, 0)
    batch = batch_reader(cluster, monkeypatch)
    partitions = batch.partitions()
    assert offsets_read(batch, partitions) == []
    cluster.hw = 3
    assert offsets_read(batch, partitions) == [0, 1, 2]


def test_explicit_offsets_stay_fixed(monkeypatch):
    cluster = FakeTopic(0, 10)
    batch = batch_reader(cluster, monkeypatch, startingOffsets='{"t":{"0":2}}', endingOffsets='{"t":{"0":5}}')
    partitions = batch.partitions()
    assert partitions == [OffsetRange("t", 0, "id1", 2, 5)]
    cluster.hw = 50
    assert offsets_read(batch, partitions) == [2, 3, 4]


def test_pieces_keep_their_cut_points_and_tile_the_moved_partition():
    snapshot = {"t": TopicState("id1", {0: PartitionState(0, 90)})}
    pieces = [OffsetRange("t", 0, "id1", a, b) for a, b in ((0, 30), (30, 60), (60, 90))]
    tasks = defer_batch(pieces, OffsetSpec("earliest"), OffsetSpec("latest"), snapshot)
    assert all(isinstance(t, DeferredRange) for t in tasks)
    for start, end in ((0, 90), (40, 200), (75, 80), (95, 100)):
        ranges = [piece_range(t, start, end) for t in tasks]
        covered = [o for r in ranges for o in range(r.start_offset_inclusive, r.end_offset_exclusive)]
        assert covered == list(range(start, end))


def test_starting_timestamp_without_a_record_fails_naming_it_unless_strategy_latest(monkeypatch):
    snapshot = {"t": TopicState("id1", {0: PartitionState(0, 10), 1: PartitionState(0, 4)})}
    spec = OffsetSpec("timestamp", timestamp_ms=1005, option="startingTimestamp")
    with pytest.raises(InvalidConfigError, match=r"'startingTimestamp': t-1 has no record with a timestamp at or "
                                                 r"after 1005 ms .*startingOffsetsByTimestampStrategy=latest"):
        check_starting_timestamps(spec, snapshot, {("t", 0): 5, ("t", 1): 4}, "error")
    assert check_starting_timestamps(spec, snapshot, {("t", 0): 5, ("t", 1): 4}, "latest") == \
        {("t", 0): 5, ("t", 1): 4}
    cluster = FakeTopic(0, 10)
    with pytest.raises(InvalidConfigError, match="t-0 has no record with a timestamp at or after 1020 ms"):
        batch_reader(cluster, monkeypatch, startingTimestamp="1020").partitions()
    assert batch_reader(cluster, monkeypatch, startingTimestamp="1020",
                        startingOffsetsByTimestampStrategy="LATEST").partitions()
    stream = reader.AdsStreamReader(parse_source_options(
        {"ads.bootstrap.servers": "h:1", "subscribe": "t", "startingOffsetsByTimestamp": '{"t":{"0":1020}}'},
        streaming=True))
    with pytest.raises(InvalidConfigError, match="'startingOffsetsByTimestamp': t-0 has no record"):
        stream.initialOffset()


def test_strategy_applies_when_a_batch_runs_again_and_ending_timestamps_fall_back_to_the_end(monkeypatch):
    cluster = FakeTopic(0, 10)
    batch = batch_reader(cluster, monkeypatch, startingTimestamp="1008", endingTimestamp="1500")
    partitions = batch.partitions()
    assert offsets_read(batch, partitions) == [8, 9]
    cluster.log_start, cluster.hw = 9, 9  # everything at or after the timestamp removed, nothing new
    with pytest.raises(InvalidConfigError, match="has no record with a timestamp at or after 1008 ms"):
        offsets_read(batch, partitions)


def test_strategy_option_is_checked():
    with pytest.raises(InvalidConfigError, match="'startingOffsetsByTimestampStrategy' must be 'error' or 'latest'"):
        parse_source_options({"ads.bootstrap.servers": "h:1", "subscribe": "t",
                              "startingOffsetsByTimestampStrategy": "earliest"}, streaming=True)
    parsed = parse_source_options({"ads.bootstrap.servers": "h:1", "subscribe": "t"}, streaming=False)
    assert parsed.starting_timestamp_strategy == "error"


# ---- a stream over partitions without a leader ------------------------------------------------


class LeaderlessCluster:
    """Topic "t" (id "id1"), partitions 0 and 1 led by brokers 0 and 1, each with [log start, HW) and a
    leader epoch. A partition in ``leaderless`` has no leader: asking for its offsets fails as the
    Consumer does (LEADER_NOT_AVAILABLE from its metadata). Serves as Admin, Consumer and Connections."""

    def __init__(self):
        self.state = {0: [0, 10, 1], 1: [0, 10, 1]}
        self.leaderless: set[int] = set()
        self.epoch_answer_fails: set[int] = set()
        self.config, self._connections = {}, self

    def leader_of(self, topic, partition):
        if partition in self.leaderless:
            raise LeaderNotAvailableError(f"{topic}-{partition} has no leader right now")
        return SimpleNamespace(leader=partition, leader_epoch=self.state[partition][2]), None

    def list_topics(self):
        return ["t"]

    def describe_topics(self, names):
        return [SimpleNamespace(topic="t", topic_id="id1",
                                partitions=[SimpleNamespace(partition=p) for p in sorted(self.state)])]

    def list_offsets_with_epochs(self, tps, spec):
        for tp in tps:
            self.leader_of(tp.topic, tp.partition)
        column = {"earliest": 0, "latest": 1}[spec]
        return {tp: (self.state[tp.partition][column], self.state[tp.partition][2]) for tp in tps}

    def list_offsets(self, tps, spec):
        return {tp: offset for tp, (offset, _) in self.list_offsets_with_epochs(tps, spec).items()}

    def offsets_for_leader_epochs(self, epochs):
        if any(p in self.epoch_answer_fails for _, p in epochs):
            raise LeaderNotAvailableError("the leader moved")
        return {(t, p): {"leader_epoch": e, "end_offset": self.state[p][1], "log_end_offset": self.state[p][1],
                         "current_leader_epoch": self.state[p][2]} for (t, p), e in epochs.items()}


def stream_reader(cluster, monkeypatch, **extra):
    monkeypatch.setattr(reader.clients, "consumer_for", lambda config: cluster)
    monkeypatch.setattr(reader.clients, "admin_for", lambda config: cluster)
    monkeypatch.setattr(reader.lookups, "latest_with_epochs", lambda admin, tps: admin.list_offsets_with_epochs(
        tps, "latest"))
    options = parse_source_options({"ads.bootstrap.servers": "h:1", "subscribe": "t", **extra}, streaming=True)
    return reader.AdsStreamReader(options)


def stream_offsets(offset_json):
    entry = offset_json["topics"]["t"]
    return entry["offsets"], entry.get("epochs", {})


def test_a_leaderless_partition_keeps_its_offset_while_the_others_advance(monkeypatch):
    cluster = LeaderlessCluster()
    stream = stream_reader(cluster, monkeypatch, failOnDataLoss="true")
    start = stream.initialOffset()
    assert stream_offsets(start) == ({"0": 10, "1": 10}, {"0": 1, "1": 1})
    cluster.state = {0: [0, 20, 1], 1: [0, 20, 1]}
    cluster.leaderless = {1}
    end = stream.latestOffset(start, ReadAllAvailable())
    assert stream_offsets(end) == ({"0": 20, "1": 10}, {"0": 1, "1": 1})  # carried, not lost, not new
    assert [(r.partition, r.start_offset_inclusive, r.end_offset_exclusive)
            for r in stream.partitions(start, end)] == [(0, 10, 20)]
    cluster.state = {0: [0, 20, 1], 1: [0, 25, 2]}
    cluster.leaderless = set()
    after = stream.latestOffset(end, ReadAllAvailable())
    assert stream_offsets(after) == ({"0": 20, "1": 25}, {"0": 1, "1": 2})
    assert [(r.partition, r.start_offset_inclusive, r.end_offset_exclusive)
            for r in stream.partitions(end, after)] == [(1, 10, 25)]  # resumes where it was


def test_a_partition_whose_leader_vanishes_before_its_epoch_check_does_not_move(monkeypatch):
    cluster = LeaderlessCluster()
    stream = stream_reader(cluster, monkeypatch)
    start = stream.initialOffset()
    cluster.state = {0: [0, 20, 2], 1: [0, 20, 2]}  # both changed leader: both offsets are checked
    cluster.epoch_answer_fails = {1}
    end = stream.latestOffset(start, ReadAllAvailable())
    assert stream_offsets(end) == ({"0": 20, "1": 10}, {"0": 2, "1": 1})


def test_a_new_stream_waits_for_leaders_then_starts_every_partition_per_starting_offsets(monkeypatch):
    cluster = LeaderlessCluster()
    cluster.leaderless = {1}
    stream = stream_reader(cluster, monkeypatch)
    monkeypatch.setattr(reader.lookups.time, "sleep", lambda s: cluster.leaderless.clear())
    assert stream_offsets(stream.initialOffset()) == ({"0": 10, "1": 10}, {"0": 1, "1": 1})
    cluster.leaderless = {1}
    monkeypatch.setattr(reader.lookups.time, "sleep", lambda s: None)
    with pytest.raises(LeaderNotAvailableError, match="t-1"):
        reader.lookups.take_complete_snapshot(cluster, stream.options.subscription, wait_s_max=0.0)


def test_a_batch_query_fails_on_a_leaderless_partition(monkeypatch):
    cluster = LeaderlessCluster()
    cluster.leaderless = {1}
    stream_reader(cluster, monkeypatch)
    options = parse_source_options({"ads.bootstrap.servers": "h:1", "subscribe": "t"}, streaming=False)
    with pytest.raises(LeaderNotAvailableError, match="t-1"):
        reader.lookups.take_snapshot(cluster, options.subscription, require_existing=True)
