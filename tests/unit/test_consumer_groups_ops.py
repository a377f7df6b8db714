"""Consumer-group operations without a cluster: the ``ads consumer-groups`` flag rules and reset arithmetic,
the Spark source's ``ads.commitOffsetsToGroup`` option and its committer, subscribePattern leaving internal
topics out, assignment decoding, and the lag gauges' collector (fake coordinator, fake leaders, fake clock).
The same behaviour on real processes: tests/integration/test_consumer_groups_cli.py and
tests/spark/test_spark_group_lag.py."""

from __future__ import annotations

import logging
import threading
from types import SimpleNamespace

import pytest

from ads_spark.broker.group.lag_metrics import GroupLagCollector, RemoteHighWatermarks
from ads_spark.cli import groups_cmd
from ads_spark.cli.main import build_parser
from ads_spark.client.admin_groups import OffsetAndMetadata, decode_assignment
from ads_spark.client.chunks import TopicPartition
from ads_spark.client.consumer_protocol import Assignment, encode_assignment
from ads_spark.errors import GroupAuthorizationFailedError, InvalidConfigError, InvalidRequestError
from ads_spark.spark.source.group_commit import GroupOffsetsCommitter, group_offsets
from ads_spark.spark.source.options import parse_source_options

BOOTSTRAP = {"ads.bootstrap.servers": "127.0.0.1:9092"}


def cli_args(*argv):
    return build_parser().parse_args(["consumer-groups", "--bootstrap-server", "127.0.0.1:1", *argv])


# ---- ads consumer-groups: flags -----------------------------------------------------------------------


@pytest.mark.parametrize("argv, problem", [
    (["--describe"], "--describe needs --group"),
    (["--reset-offsets", "--group", "g", "--topic", "t", "--execute"], "exactly one of --to-earliest"),
    (["--reset-offsets", "--group", "g", "--topic", "t", "--to-earliest", "--to-latest", "--execute"],
     "exactly one of --to-earliest"),
    (["--reset-offsets", "--group", "g", "--topic", "t", "--to-earliest"], "exactly one of --dry-run"),
    (["--reset-offsets", "--group", "g", "--to-earliest", "--dry-run"], "--reset-offsets needs --topic"),
    (["--describe", "--group", "g", "--to-offset", "3"], "--to-offset is only for --reset-offsets"),
    (["--delete-offsets", "--group", "g"], "--delete-offsets needs --topic"),
    (["--describe", "--group", "g", "--group", "h"], "--describe takes one --group"),
    (["--list", "--topic", "t"], "--topic is only for"),
])
def test_flag_combinations_are_refused_naming_the_flag(argv, problem):
    with pytest.raises(InvalidRequestError, match=problem):
        groups_cmd._check(cli_args(*argv))


def test_cli_errors_are_one_line(capsys):
    from ads_spark.cli.main import main

    assert main(["consumer-groups", "--bootstrap-server", "127.0.0.1:1", "--describe"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--describe needs --group" in err


class FakeAdmin:
    def __init__(self, earliest, latest, by_time=None):
        self.answers = {"earliest": earliest, "latest": latest}
        self.by_time = by_time or {}

    def list_offsets(self, tps, spec):
        found = self.answers.get(spec) if isinstance(spec, str) else self.by_time
        return {tp: found[tp] for tp in tps}


def test_reset_targets_are_clamped_to_log_start_and_high_watermark():
    a, b = TopicPartition("t", 0), TopicPartition("t", 1)
    admin = FakeAdmin({a: 5, b: 0}, {a: 50, b: 10}, by_time={a: 7, b: 10})
    targets = lambda *argv: groups_cmd.reset_targets(  # noqa: E731
        admin, cli_args("--reset-offsets", "--group", "g", "--topic", "t", "--dry-run", *argv), [a, b], {a: 40})
    assert targets("--to-earliest") == {a: 5, b: 0}
    assert targets("--to-latest") == {a: 50, b: 10}
    assert targets("--to-offset", "20") == {a: 20, b: 10}
    assert targets("--to-offset", "0") == {a: 5, b: 0}
    assert targets("--to-datetime", "2024-01-01T00:00:00Z") == {a: 7, b: 10}
    with pytest.raises(InvalidRequestError, match="no committed offset to shift for t-1"):
        targets("--shift-by", "-3")


def test_shift_by_moves_from_the_committed_offset():
    a = TopicPartition("t", 0)
    admin = FakeAdmin({a: 5}, {a: 50})
    args = cli_args("--reset-offsets", "--group", "g", "--topic", "t", "--dry-run", "--shift-by", "-100")
    assert groups_cmd.reset_targets(admin, args, [a], {a: 40}) == {a: 5}
    args = cli_args("--reset-offsets", "--group", "g", "--topic", "t", "--dry-run", "--shift-by", "3")
    assert groups_cmd.reset_targets(admin, args, [a], {a: 40}) == {a: 43}


def test_to_datetime_parses_iso_with_or_without_a_zone():
    assert groups_cmd.parse_datetime_ms("1970-01-01T00:00:01.500Z") == 1500
    assert groups_cmd.parse_datetime_ms("1970-01-01T01:00:01+01:00") == 1000
    with pytest.raises(InvalidRequestError, match="--to-datetime 'yesterday'"):
        groups_cmd.parse_datetime_ms("yesterday")


def test_topic_partitions_syntax():
    args = cli_args("--delete-offsets", "--group", "g", "--topic", "a", "--topic", "b:2,0")
    assert groups_cmd._topic_args(args) == [("a", None), ("b", [0, 2])]
    with pytest.raises(InvalidRequestError, match="partitions must be numbers"):
        groups_cmd._topic_args(cli_args("--delete-offsets", "--group", "g", "--topic", "b:x"))


def test_assignments_are_decoded_for_consumer_groups_only():
    data = encode_assignment(Assignment(partitions=(("t", 1), ("t", 0))))
    assert decode_assignment("consumer", data) == (TopicPartition("t", 0), TopicPartition("t", 1))
    assert decode_assignment("connect", data) == ()
    assert decode_assignment("consumer", b"\x00") == ()  # not the format: shown as unknown, no error


# ---- Spark: the option and the committer ----------------------------------------------------------------


def test_commit_offsets_to_group_option():
    options = {**BOOTSTRAP, "subscribe": "t", "ads.commitOffsetsToGroup": "watchers"}
    parsed = parse_source_options(options, streaming=True)
    assert parsed.commit_offsets_to_group == "watchers"
    assert "commitoffsetstogroup" not in parsed.client_config  # not passed on to the consumer
    assert parse_source_options({**BOOTSTRAP, "subscribe": "t"}, streaming=True).commit_offsets_to_group is None
    assert parse_source_options(options, streaming=None).commit_offsets_to_group == "watchers"
    with pytest.raises(InvalidConfigError, match="'ads.commitOffsetsToGroup' is for streaming queries only"):
        parse_source_options(options, streaming=False)
    for bad in ("", "x" * 256):
        with pytest.raises(InvalidConfigError, match="'ads.commitOffsetsToGroup' must be a consumer group id"):
            parse_source_options({**options, "ads.commitOffsetsToGroup": bad}, streaming=True)
    for key in ("group.id", "group.instance.id", "session.timeout.ms", "partition.assignment.strategy"):
        with pytest.raises(InvalidConfigError, match=f"'ads.{key}' is not supported.*ads.commitOffsetsToGroup"):
            parse_source_options({**BOOTSTRAP, "subscribe": "t", f"ads.{key}": "1"}, streaming=True)


def test_subscribe_pattern_leaves_internal_topics_out():
    pattern = parse_source_options({**BOOTSTRAP, "subscribePattern": ".*"}, streaming=True).subscription
    assert pattern.select_topics(["__consumer_offsets", "a", "b"]) == ["a", "b"]
    named = parse_source_options({**BOOTSTRAP, "subscribe": "__consumer_offsets"}, streaming=True).subscription
    assert named.select_topics(["__consumer_offsets", "a"]) == ["__consumer_offsets"]


OFFSETS = {"version": 1, "topics": {"t": {"topic_id": "id", "offsets": {"0": 7, "1": 3}, "epochs": {"0": 2}}}}


def test_group_offsets_carry_the_leader_epoch_read_in():
    assert group_offsets(OFFSETS) == {TopicPartition("t", 0): OffsetAndMetadata(7, "", 2),
                                      TopicPartition("t", 1): OffsetAndMetadata(3, "", -1)}


class RecordingAdmin:
    def __init__(self, fail_first: int = 0):
        self.commits: list[tuple[str, dict]] = []
        self.fail_first = fail_first
        self.release = threading.Event()
        self.release.set()

    def alter_consumer_group_offsets(self, group_id, offsets):
        self.release.wait(10)
        if self.fail_first:
            self.fail_first -= 1
            raise GroupAuthorizationFailedError(f"not authorized for group '{group_id}'")
        self.commits.append((group_id, offsets))


def test_committer_commits_the_newest_offsets_once_and_flushes_on_close():
    admin = RecordingAdmin()
    committer = GroupOffsetsCommitter("g", lambda config: admin)
    admin.release.clear()  # the first commit blocks: later submits replace one another in the slot
    committer.submit({}, OFFSETS)
    newer = {"version": 1, "topics": {"t": {"topic_id": "id", "offsets": {"0": 9, "1": 3}}}}
    newest = {"version": 1, "topics": {"t": {"topic_id": "id", "offsets": {"0": 10, "1": 4}}}}
    committer.submit({}, newer)
    committer.submit({}, newest)
    admin.release.set()
    committer.close(timeout_s=10)
    committed = [offsets[TopicPartition("t", 0)].offset for _, offsets in admin.commits]
    # The first commit may have taken 7 or, if the worker was slower than the submits, 9 (seen once); then the
    # slot holds only the newest: at most two commits, in order, ending with the newest.
    assert committed in ([7, 10], [9, 10], [10]), committed
    committer.submit({}, newest)  # closed: nothing more
    assert admin.commits[-1][1][TopicPartition("t", 1)].offset == 4


def test_committer_failures_are_logged_never_raised_and_retried_with_the_next_offsets(caplog):
    admin = RecordingAdmin(fail_first=1)
    committer = GroupOffsetsCommitter("g", lambda config: admin)
    with caplog.at_level(logging.WARNING, logger="ads.spark.source"):
        committer.submit({}, OFFSETS)
        committer.close(timeout_s=10)
    assert "could not commit the stream's offsets to consumer group 'g'" in caplog.text
    assert admin.commits == []
    committer = GroupOffsetsCommitter("g", lambda config: admin)
    committer.submit({}, OFFSETS)  # the same offsets again: the last attempt failed, so they are sent
    committer.close(timeout_s=10)
    assert len(admin.commits) == 1 and committer.commits == 1


# ---- the lag gauges -------------------------------------------------------------------------------------


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_remote_high_watermarks_one_call_per_leader_and_stale_ones_dropped():
    calls = []
    leaders = {("t", 0): 2, ("t", 1): 3, ("u", 0): 2, ("x", 0): -1}
    clock = FakeClock()
    remote = RemoteHighWatermarks(leaders.__getitem__, lambda leader, keys: calls.append((leader, keys)) or {
        k: 10 * leader for k in keys}, stale_max_s=30, clock=clock)
    remote._stop.set()  # no thread: rounds run by hand
    remote.want(leaders)
    remote.refresh()
    assert sorted(calls) == [(2, [("t", 0), ("u", 0)]), (3, [("t", 1)])]
    assert remote.get(("t", 1)) == 30 and remote.get(("x", 0)) is None
    clock.now += 31
    assert remote.get(("t", 1)) is None
    remote.want([("t", 0)])  # no longer wanted: forgotten
    assert remote._known.keys() == {("t", 0)}


def fake_broker(entries, led):
    partitions = [SimpleNamespace(topic=t, partition=p, high_watermark=hw, is_leader=True)
                  for (t, p), hw in led.items()]
    by_group: dict = {}
    for group_id, topic, partition, offset in entries:
        by_group.setdefault(group_id, {})[(topic, partition)] = SimpleNamespace(offset=offset)
    part = SimpleNamespace(number=0, lock=threading.Lock(), offsets=by_group)
    coordinator = SimpleNamespace(loaded_partitions=lambda: [part])
    return SimpleNamespace(group_coordinator=coordinator,
                           replica_manager=SimpleNamespace(partitions=lambda: partitions))


def samples(collector):
    return {(m.name, tuple(s.labels.values())): s.value for m in collector.collect() for s in m.samples}


def test_lag_gauges_from_local_and_remote_high_watermarks_with_a_series_limit():
    clock = FakeClock()
    remote = RemoteHighWatermarks(lambda key: 2, lambda leader, keys: {k: 100 for k in keys}, clock=clock)
    remote._stop.set()
    entries = [("g", "t", 0, 40), ("g", "t", 1, 5), ("h", "t", 1, 120), ("z", "t", 2, 1)]
    collector = GroupLagCollector(fake_broker(entries, {("t", 0): 50}), remote=remote, series_max=3)
    first = samples(collector)
    assert first[("ads_consumer_group_committed_offset", ("g", "t", "0"))] == 40
    assert first[("ads_consumer_group_lag", ("g", "t", "0"))] == 10  # local HW 50
    assert ("ads_consumer_group_lag", ("g", "t", "1")) not in first  # remote HW not asked yet
    assert ("ads_consumer_group_committed_offset", ("z", "t", "2")) not in first
    assert first[("ads_consumer_group_lag_series_dropped", ())] == 1
    remote.refresh()
    second = samples(collector)
    assert second[("ads_consumer_group_lag", ("g", "t", "1"))] == 95
    assert second[("ads_consumer_group_lag", ("h", "t", "1"))] == 0  # a stale HW below a newer commit


def test_no_coordinator_no_series():
    broker = SimpleNamespace(replica_manager=SimpleNamespace(partitions=lambda: []))
    found = samples(GroupLagCollector(broker))
    assert found == {("ads_consumer_group_lag_series_dropped", ()): 0}
