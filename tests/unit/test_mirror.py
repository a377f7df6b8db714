"""The mirror's pure parts: remote names, loop prevention, checkpoints and offset translation."""

from __future__ import annotations

import json

import pytest

from ads_spark.errors import InvalidConfigError
from ads_spark.mirror.checkpoints import Checkpoint, CheckpointIndex, parse_offsets_json, translate_offsets
from ads_spark.mirror.job import batch_end_offsets
from ads_spark.mirror.naming import MirrorPolicy, loops_back, path_after_mirror
from ads_spark.mirror.topics import mirrored_configs
from ads_spark.spark.source.options import Subscription

EAST_TO_WEST = MirrorPolicy("east", "west")


def test_prefix_naming_and_its_inverse():
    assert EAST_TO_WEST.remote_topic("orders") == "east.orders"
    assert EAST_TO_WEST.source_topic("east.orders") == "orders"
    assert EAST_TO_WEST.checkpoint_topic == "east.checkpoints.internal"
    with pytest.raises(InvalidConfigError, match="not a mirror of cluster 'east'"):
        EAST_TO_WEST.source_topic("orders")


def test_identity_naming_keeps_the_name():
    policy = MirrorPolicy("east", "west", naming="identity")
    assert policy.remote_topic("orders") == "orders" == policy.source_topic("orders")


@pytest.mark.parametrize("kwargs, message", [
    ({"source_alias": "ea.st", "target_alias": "west"}, "source alias"),
    ({"source_alias": "east", "target_alias": "east"}, "two different clusters"),
    ({"source_alias": "east", "target_alias": "west", "naming": "suffix"}, "naming must be one of"),
    ({"source_alias": "east", "target_alias": "west", "pattern": "("}, "not a valid regular expression"),
])
def test_bad_policies_are_refused_naming_the_problem(kwargs, message):
    with pytest.raises(InvalidConfigError, match=message):
        MirrorPolicy(**kwargs)


def test_no_loops_and_no_internal_topics():
    source_topics = ["orders", "west.orders", "east.orders", "__consumer_offsets", "west.checkpoints.internal",
                     "payments", "tmp-1"]
    policy = MirrorPolicy("east", "west", exclude="tmp-.*")
    # west.* came from the target: mirroring it back would loop. east.orders is mirrored (chains are allowed:
    # it would become east.east.orders), as MirrorMaker 2 does for topics of a third cluster.
    assert policy.mirrored_topics(source_topics) == ["east.orders", "orders", "payments"]
    # The source's subscribePattern selects exactly the same topics.
    subscription = Subscription("subscribePattern", pattern=policy.subscribe_pattern())
    assert subscription.select_topics(source_topics) == policy.mirrored_topics(source_topics)
    narrow = MirrorPolicy("east", "west", pattern="orders|west\\..*")
    assert narrow.mirrored_topics(source_topics) == ["orders"]
    assert Subscription("subscribePattern", pattern=narrow.subscribe_pattern()).select_topics(source_topics) \
        == ["orders"]


def test_provenance_header_stops_identity_loops():
    assert path_after_mirror(None, "east") == "east"
    assert path_after_mirror("east", "west") == "east,west"
    assert loops_back("east", "east") and loops_back("west,east", "east")
    assert not loops_back(None, "east") and not loops_back("", "east") and not loops_back("eastern", "east")


def test_configs_tied_to_the_source_cluster_are_not_mirrored():
    assert mirrored_configs({"retention.ms": 1000, "min.insync.replicas": "2", "observers": "3",
                             "max.message.bytes": "2048"}) == {"retention.ms": "1000", "max.message.bytes": "2048"}


def test_checkpoint_records_round_trip():
    checkpoint = Checkpoint("orders", 2, 1500, 1490)
    key, value = checkpoint.to_record()
    assert key == b"orders/2" and Checkpoint.from_value(value) == checkpoint
    with pytest.raises(InvalidConfigError, match="cannot be read"):
        Checkpoint.from_value(b'{"version": 99}')


def test_translation_never_skips_and_rereads_less_than_one_batch():
    # Mirror batches ended at source offsets 100, 250 and 400 of orders-0; the target holds 5 fewer
    # records (say, records the loop filter dropped), so the offsets differ.
    index = CheckpointIndex([Checkpoint("orders", 0, s, s - 5) for s in (100, 250, 400)]
                            + [Checkpoint("orders", 0, 250, 245)])  # a replayed batch writes it again
    assert index.translate("orders", 0, 250) == 245  # exactly at a checkpoint: nothing re-read
    assert index.translate("orders", 0, 300) == 245  # between: re-reads 50 < one batch (150)
    assert index.translate("orders", 0, 999) == 395  # beyond the mirror: resumes at its last checkpoint
    assert index.translate("orders", 0, 40) == -2  # before the first checkpoint: earliest, nothing skipped
    assert index.translate("orders", 0, -1) == -1 and index.translate("orders", 1, 7) == -2


def test_translate_starting_offsets_json_both_forms():
    index = CheckpointIndex([Checkpoint("orders", 0, 100, 90), Checkpoint("orders", 1, 50, 50)])
    kafka_form = '{"orders": {"0": 120, "1": -1}}'
    assert json.loads(translate_offsets(kafka_form, index, EAST_TO_WEST)) == {"east.orders": {"0": 90, "1": -1}}
    source_form = {"version": 1, "topics": {"orders": {"topic_id": "x", "offsets": {"1": 70}}}}
    assert json.loads(translate_offsets(source_form, index, EAST_TO_WEST)) == {"east.orders": {"1": 50}}
    for bad in ("[1]", '{"orders": {"0": -3}}', '{"orders": 5}', "{"):
        with pytest.raises(InvalidConfigError, match="startingOffsets"):
            parse_offsets_json(bad)


def test_batch_end_offsets_read_from_sparks_offsets_log(tmp_path):
    (tmp_path / "offsets").mkdir()
    source = {"version": 1, "topics": {"orders": {"topic_id": "x", "offsets": {"0": 334, "1": 12}}}}
    (tmp_path / "offsets" / "4").write_text("v1\n{\"batchWatermarkMs\":0}\n" + json.dumps(source) + "\n")
    assert batch_end_offsets(str(tmp_path), 4) == {("orders", 0): 334, ("orders", 1): 12}
    (tmp_path / "offsets" / "5").write_text("v1\n{}\n-\n")
    assert batch_end_offsets("file:" + str(tmp_path), 5) == {}


@pytest.mark.parametrize("kwargs, message", [
    ({"max_offsets_per_trigger": 0}, "max_offsets_per_trigger must be a positive integer"),
    ({"trigger_interval_ms": -5}, "trigger_interval_ms must be a positive integer"),
    ({"replication_factor": 0}, "replication_factor must be positive"),
    ({"checkpoint_location": " "}, "checkpoint location is empty"),
    ({"starting_offsets": "newest"}, "option 'startingOffsets' must be 'earliest', 'latest' or JSON"),
    ({"source_options": {"fetch.max.byte": "1"}}, "option 'ads.fetch.max.byte' is not a consumer setting"),
])
def test_bad_mirror_settings_are_refused_naming_them(kwargs, message):
    from ads_spark.mirror.job import MirrorConfig

    settings = {"policy": EAST_TO_WEST, "source_bootstrap": "127.0.0.1:1", "target_bootstrap": "127.0.0.1:2",
                "checkpoint_location": "/tmp/ckpt", **kwargs}
    with pytest.raises(InvalidConfigError, match=message):
        MirrorConfig(**settings)
