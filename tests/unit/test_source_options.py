"""Source options: every option of the contract parses, and every mistake names the option."""

import pytest

from ads_spark.errors import InvalidConfigError
from ads_spark.spark.sink.options import parse_sink_options
from ads_spark.spark.source.options import EARLIEST, LATEST, parse_source_options

BASE = {"ads.bootstrap.servers": "127.0.0.1:9092", "subscribe": "orders"}


def parse(streaming=True, **extra):
    return parse_source_options({**BASE, **extra}, streaming=streaming)


def rejects(match, streaming=True, base=BASE, **extra):
    with pytest.raises(InvalidConfigError, match=match):
        parse_source_options({**base, **extra}, streaming=streaming)


def test_defaults_follow_kafka():
    stream, batch = parse(), parse(streaming=False)
    assert stream.starting.kind == "latest" and stream.ending is None
    assert batch.starting.kind == "earliest" and batch.ending.kind == "latest"
    assert stream.fail_on_data_loss is True and stream.include_headers is False
    assert stream.max_trigger_delay_ms == 15 * 60 * 1000
    assert stream.client_config == {"bootstrap.servers": "127.0.0.1:9092"}


def test_bootstrap_required_and_checked():
    rejects("'ads.bootstrap.servers' is required", base={"subscribe": "t"})
    rejects("bad entry 'nohost'", base={"ads.bootstrap.servers": "nohost", "subscribe": "t"})


def test_kafka_prefix_points_to_ads_prefix():
    rejects("'ads.bootstrap.servers'", **{"kafka.bootstrap.servers": "h:1"})


def test_options_are_case_insensitive_and_client_options_pass_through():
    o = parse_source_options({"ADS.Bootstrap.Servers": "h:1", "SUBSCRIBE": "a, b", "ads.client.rack": "r1",
                              "ads.max.partition.fetch.bytes": "1024"}, streaming=True)
    assert o.subscription.topics == ("a", "b")
    assert o.client_config["client.rack"] == "r1" and o.client_config["max.partition.fetch.bytes"] == "1024"


def test_forbidden_consumer_settings():
    rejects("use startingOffsets", **{"ads.auto.offset.reset": "earliest"})
    rejects("checkpoint", **{"ads.group.id": "g"})


def test_interceptors_refused_by_source_and_sink():
    rejects("'ads.interceptor.classes' is not supported", **{"ads.interceptor.classes": "com.example.I"})
    with pytest.raises(InvalidConfigError, match="'ads.interceptor.classes' is not supported"):
        parse_sink_options({"ads.bootstrap.servers": "127.0.0.1:9092", "topic": "t",
                            "ads.interceptor.classes": "com.example.I"})


def test_exactly_one_subscription_kind():
    rejects("exactly one .* \\(found: none\\)", base={"ads.bootstrap.servers": "h:1"})
    rejects("\\(found: subscribe, subscribePattern\\)", subscribePattern="o.*")
    rejects("'subscribe' is empty", subscribe=" , ")


def test_pattern_and_assign():
    base = {"ads.bootstrap.servers": "h:1"}
    o = parse_source_options({**base, "subscribePattern": "ord.*"}, streaming=True)
    assert o.subscription.select_topics(["orders", "x-orders", "ord"]) == ["ord", "orders"]
    rejects("not a valid regular expression", base=base, subscribePattern="(")
    o = parse_source_options({**base, "assign": '{"b":[1,0],"a":[2]}'}, streaming=True)
    assert o.subscription.assigned == (("a", 2), ("b", 0), ("b", 1))
    assert o.subscription.wanted_partitions("b", [0, 1, 2]) == [0, 1]
    rejects("not valid JSON", base=base, assign="{")
    rejects("non-empty list", base=base, assign='{"a":[]}')
    rejects("non-negative integer", base=base, assign='{"a":[-1]}')


def test_starting_offsets_json_with_special_values():
    o = parse(startingOffsets='{"orders":{"1":-2,"0":42}}')
    assert o.starting.kind == "offsets"
    assert o.starting.as_map() == {("orders", 0): 42, ("orders", 1): EARLIEST}
    rejects("must be an offset >= 0, -2", startingOffsets='{"orders":{"0":-3}}')
    rejects("'startingOffsets' must be 'earliest', 'latest' or JSON", startingOffsets="oldest")
    rejects("partition 'x'", startingOffsets='{"orders":{"x":1}}')


def test_checkpoint_form_accepted_as_starting_offsets():
    o = parse(startingOffsets='{"version":1,"topics":{"orders":{"topic_id":"u","offsets":{"0":5}}}}')
    assert o.starting.as_map() == {("orders", 0): 5}


def test_batch_only_rules():
    rejects("startingOffsets='latest' is not allowed in a batch", streaming=False, startingOffsets="latest")
    rejects("-1 \\(latest\\) is not allowed", streaming=False, startingOffsets='{"orders":{"0":-1}}')
    rejects("endingOffsets='earliest'", streaming=False, endingOffsets="earliest")
    rejects("-2 \\(earliest\\) is not allowed", streaming=False, endingOffsets='{"orders":{"0":-2}}')
    assert parse(streaming=False, endingOffsets='{"orders":{"0":-1}}').ending.as_map() == {("orders", 0): LATEST}


def test_ending_options_rejected_for_streams():
    for option in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
        rejects(f"'{option}' is for batch queries only", **{option: "1"})


def test_mode_neutral_parse_at_load_time_accepts_both():
    o = parse_source_options({**BASE, "startingOffsets": "latest", "endingOffsets": "latest"}, streaming=None)
    assert o.starting.kind == "latest"


def test_timestamp_precedence_as_kafka():
    o = parse(startingTimestamp="1000", startingOffsetsByTimestamp='{"orders":{"0":5}}', startingOffsets="earliest")
    assert (o.starting.kind, o.starting.timestamp_ms) == ("timestamp", 1000)
    o = parse(startingOffsetsByTimestamp='{"orders":{"0":5}}', startingOffsets="earliest")
    assert o.starting.kind == "timestamps" and o.starting.as_map() == {("orders", 0): 5}
    rejects("'startingTimestamp' must be a non-negative integer", startingTimestamp="yesterday")
    rejects("timestamp in ms", startingOffsetsByTimestamp='{"orders":{"0":-2}}')
    o = parse(streaming=False, endingTimestamp="2000")
    assert (o.ending.kind, o.ending.timestamp_ms) == ("timestamp", 2000)


def test_numbers_booleans_durations_sizes():
    o = parse(maxOffsetsPerTrigger="100", minOffsetsPerTrigger="10", maxTriggerDelay="30s", minPartitions="4",
              maxRecordsPerPartition="1000", maxBytesPerTrigger="64m", failOnDataLoss="FALSE", includeHeaders="true")
    assert (o.max_offsets_per_trigger, o.min_offsets_per_trigger, o.max_trigger_delay_ms) == (100, 10, 30_000)
    assert (o.min_partitions, o.max_records_per_partition, o.max_bytes_per_trigger) == (4, 1000, 64 << 20)
    assert o.fail_on_data_loss is False and o.include_headers is True
    assert parse(maxTriggerDelay="250").max_trigger_delay_ms == 250
    assert parse(maxTriggerDelay="2h").max_trigger_delay_ms == 7_200_000
    rejects("'maxOffsetsPerTrigger' must be a positive integer", maxOffsetsPerTrigger="0")
    rejects("'minPartitions' must be a positive integer", minPartitions="two")
    rejects("'failOnDataLoss' must be 'true' or 'false'", failOnDataLoss="yes")
    rejects("'maxTriggerDelay' must be a duration", maxTriggerDelay="5 fortnights")
    rejects("'maxBytesPerTrigger' must be a positive size", maxBytesPerTrigger="0")
    rejects("must not exceed", maxOffsetsPerTrigger="5", minOffsetsPerTrigger="6")


@pytest.mark.parametrize("option", ["ads.max.poll.record", "ads.linger.ms", "ads.acks", "ads.enable.idempotence"])
def test_an_ads_option_the_consumer_does_not_read_is_refused_at_load(option):
    """On the driver, naming the option, for both modes and the mode-neutral parse of load()."""
    for streaming in (None, True, False):
        rejects(f"option '{option}' is not a consumer setting", streaming=streaming, **{option: "5"})


def test_every_consumer_setting_passes_through():
    settings = {"ads.max.poll.records": "7", "ads.local.reads": "false", "ads.fetch.max.wait.ms": "50",
                "ads.default.api.timeout.ms": "9000", "ads.retry.backoff.ms": "10"}
    assert parse(streaming=None, **settings).client_config["max.poll.records"] == "7"
