"""Options of the Spark source "ads": parsing and validation, pure.

Owns the translation of the user's string options (Spark's Kafka connector
vocabulary, with ``ads.`` where Kafka says ``kafka.``) into one frozen
``SourceOptions`` value, and every "bad option" error the user can meet. It
exists so that a typo or a contradictory combination fails at ``load()`` with a
message naming the option, before any connection is opened, and so that the
readers work from typed values instead of strings.

The client pass-through (``ads.<name>`` -> ``<name>``) and the scalar kinds
(booleans, positive integers, durations, sizes) are shared with the sink and
live in ``ads_spark.spark.options``; an ``ads.<name>`` the consumer does not
read (``config.CONSUMER_KEYS``, plus the security keys ``spark.options.SECURITY_KEYS``) is refused
here, at ``load()``. The SASL login is kept apart from ``client_config`` (``login``) so that no
password is ever part of what a reader ships to executors.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from ads_spark.config import CONSUMER_KEYS
from ads_spark.errors import InvalidConfigError
from ads_spark.security.client_security import ClientSecurity
from ads_spark.spark.options import (
    SECURITY_KEYS,
    lower_keys,
    option_bool,
    parse_bytes,
    parse_client_config,
    parse_duration_ms,
    positive_int,
    split_login,
)

EARLIEST = -2  # in offsets JSON: the log start offset of the partition
LATEST = -1  # in offsets JSON: the high watermark of the partition

MAX_TRIGGER_DELAY_MS_DEFAULT = 15 * 60 * 1000

# startingOffsetsByTimestampStrategy: what a partition with no record at or after the starting
# timestamp does. "error" (Spark's default) fails the query naming it; "latest" starts it at its end.
TIMESTAMP_STRATEGIES = ("error", "latest")

# ads.commitOffsetsToGroup=<group>: a stream commits each finished micro-batch's end offsets to this consumer
# group (a standalone commit), so its lag shows in `ads consumer-groups --describe` and the lag gauges. The
# checkpoint stays where the query resumes from; the group is for watching (reader.GroupOffsetsCommitter).
COMMIT_GROUP_OPTION = "ads.commitOffsetsToGroup"
GROUP_ID_CHARS_MAX = 255  # Kafka's (and the coordinator's) limit on a group id

# Internal topics a subscribePattern never matches (Kafka's exclude.internal.topics=true); naming one in
# 'subscribe' or 'assign' still reads it, as in Kafka.
INTERNAL_TOPICS = frozenset({"__consumer_offsets"})

# Kafka consumer settings the source decides itself; setting them is a mistake.
_CLIENT_KEYS_FORBIDDEN = {
    "group.id": "the source tracks offsets in the Spark checkpoint, not in a consumer group (to watch a "
                f"stream's lag as a group's, set '{COMMIT_GROUP_OPTION}')",
    "auto.offset.reset": "use startingOffsets instead",
    "enable.auto.commit": "the source never commits offsets to the brokers",
    "key.deserializer": "keys are returned as binary; cast them in Spark",
    "value.deserializer": "values are returned as binary; cast them in Spark",
}
# The group member's settings (config_groups.GROUP_CONSUMER_KEYS): the source joins no group, so they would
# do nothing.
_CLIENT_KEYS_FORBIDDEN.update({key: f"the source joins no consumer group (to watch a stream's lag as a group's, "
                                    f"set '{COMMIT_GROUP_OPTION}')"
                               for key in ("group.instance.id", "auto.commit.interval.ms", "session.timeout.ms",
                                           "heartbeat.interval.ms", "max.poll.interval.ms",
                                           "partition.assignment.strategy")})



@dataclass(frozen=True)
class Subscription:
    """Which topics (or partitions) to read: exactly one of the three kinds."""

    kind: str  # "subscribe" | "subscribePattern" | "assign"
    topics: tuple[str, ...] = ()  # subscribe: the named topics
    pattern: str = ""  # subscribePattern: a regular expression matched against the whole name
    assigned: tuple[tuple[str, int], ...] = ()  # assign: (topic, partition) pairs, sorted

    def select_topics(self, existing_topics: list[str]) -> list[str]:
        """The topics this subscription reads, given the names that exist now (sorted)."""
        if self.kind == "subscribePattern":
            compiled = re.compile(self.pattern)
            return sorted(t for t in existing_topics if compiled.fullmatch(t) and t not in INTERNAL_TOPICS)
        if self.kind == "subscribe":
            return sorted(self.topics)
        return sorted({t for t, _ in self.assigned})

    def wanted_partitions(self, topic: str, partitions: list[int]) -> list[int]:
        if self.kind != "assign":
            return sorted(partitions)
        return sorted(p for t, p in self.assigned if t == topic)


@dataclass(frozen=True)
class OffsetSpec:
    """Where a read starts or ends, before it is resolved against the cluster.

    kind: "earliest" | "latest" | "offsets" (per partition, -2/-1 allowed) |
    "timestamp" (one timestamp for every partition) | "timestamps" (per partition).
    """

    kind: str
    per_partition: tuple[tuple[str, int, int], ...] = ()  # (topic, partition, offset or timestamp_ms)
    timestamp_ms: int = -1
    option: str = ""  # the option it came from, for error messages

    def as_map(self) -> dict[tuple[str, int], int]:
        return {(t, p): v for t, p, v in self.per_partition}


@dataclass(frozen=True)
class SourceOptions:
    client_config: dict[str, str]
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec | None  # batch only; None for streams
    fail_on_data_loss: bool = True
    include_headers: bool = False
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = MAX_TRIGGER_DELAY_MS_DEFAULT
    max_bytes_per_trigger: int | None = None
    starting_timestamp_strategy: str = "error"  # one of TIMESTAMP_STRATEGIES
    commit_offsets_to_group: str | None = None  # COMMIT_GROUP_OPTION (streams only)
    extra: dict[str, str] = field(default_factory=dict)
    # SASL: who the driver logs in as (its password a Secret, which refuses pickling) until a reader
    # registers it in the driver process (``clients.register_login``) and keeps only the handle.
    login: ClientSecurity | None = None
    login_handle: str = ""
    # A typed topic's read (spark/source/typed.py TypedSource), set by the data source after asking the
    # brokers; None: Kafka-shaped.
    typed: Any = None

    @property
    def bootstrap_servers(self) -> str:
        return self.client_config["bootstrap.servers"]


# ---- entry points ---------------------------------------------------------------


def parse_source_options(options: Mapping[str, Any], *, streaming: bool | None) -> SourceOptions:
    """Validate every source option; raise InvalidConfigError naming the first bad one.

    ``streaming`` None (Spark asking for the schema at ``load()``, before it says whether
    the query is a stream) checks everything except the batch-only / stream-only rules.
    """
    opts = lower_keys(options)
    commit_group = _commit_group(opts.pop(COMMIT_GROUP_OPTION.lower(), None), streaming)
    client_config = parse_client_config(opts)
    for key in _CLIENT_KEYS_FORBIDDEN:
        if key in client_config:
            raise InvalidConfigError(f"option 'ads.{key}' is not supported: {_CLIENT_KEYS_FORBIDDEN[key]}")
    unknown = sorted(key for key in client_config if key not in CONSUMER_KEYS and key not in SECURITY_KEYS)
    if unknown:  # at load(), on the driver: the Consumer would refuse it only when a reader builds one
        raise InvalidConfigError(f"option 'ads.{unknown[0]}' is not a consumer setting the ads source can pass on "
                                 f"(known: {', '.join('ads.' + k for k in sorted(CONSUMER_KEYS))})")
    client_config, login = split_login(client_config)
    starting, ending = _parse_offset_specs(opts, streaming)
    max_offsets = positive_int(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger")
    min_offsets = positive_int(opts, "minoffsetspertrigger", "minOffsetsPerTrigger")
    if max_offsets is not None and min_offsets is not None and min_offsets > max_offsets:
        raise InvalidConfigError(f"minOffsetsPerTrigger ({min_offsets}) must not exceed "
                                 f"maxOffsetsPerTrigger ({max_offsets})")
    return SourceOptions(
        client_config=client_config,
        login=login,
        subscription=parse_subscription(opts),
        starting=starting,
        ending=ending,
        fail_on_data_loss=option_bool(opts, "failondataloss", "failOnDataLoss", True),
        include_headers=option_bool(opts, "includeheaders", "includeHeaders", False),
        min_partitions=positive_int(opts, "minpartitions", "minPartitions"),
        max_records_per_partition=positive_int(opts, "maxrecordsperpartition", "maxRecordsPerPartition"),
        max_offsets_per_trigger=max_offsets,
        min_offsets_per_trigger=min_offsets,
        max_trigger_delay_ms=parse_duration_ms(opts.get("maxtriggerdelay"), "maxTriggerDelay",
                                               MAX_TRIGGER_DELAY_MS_DEFAULT),
        max_bytes_per_trigger=parse_bytes(opts.get("maxbytespertrigger"), "maxBytesPerTrigger"),
        starting_timestamp_strategy=_timestamp_strategy(opts),
        commit_offsets_to_group=commit_group,
    )


def _commit_group(raw: str | None, streaming: bool | None) -> str | None:
    if raw is None:
        return None
    if streaming is False:
        raise InvalidConfigError(f"option '{COMMIT_GROUP_OPTION}' is for streaming queries only (spark.readStream):"
                                 f" a batch query commits no offsets")
    if not raw or len(raw) > GROUP_ID_CHARS_MAX or "\x00" in raw:
        raise InvalidConfigError(f"option '{COMMIT_GROUP_OPTION}' must be a consumer group id of 1 to "
                                 f"{GROUP_ID_CHARS_MAX} characters (no NUL), got {raw[:80]!r}")
    return raw


# ---- subscription ---------------------------------------------------------------


def parse_subscription(opts: Mapping[str, str]) -> Subscription:
    given = [name for key, name in (("subscribe", "subscribe"), ("subscribepattern", "subscribePattern"),
                                    ("assign", "assign")) if key in opts]
    if len(given) != 1:
        found = ", ".join(given) if given else "none"
        raise InvalidConfigError(f"exactly one of the options 'subscribe', 'subscribePattern' or 'assign' "
                                 f"must be set to say what to read (found: {found})")
    kind = given[0]
    raw = opts[kind.lower()].strip()
    if kind == "subscribe":
        topics = tuple(sorted({t.strip() for t in raw.split(",") if t.strip()}))
        if not topics:
            raise InvalidConfigError("option 'subscribe' is empty: give a comma-separated list of topics")
        return Subscription(kind, topics=topics)
    if kind == "subscribePattern":
        if not raw:
            raise InvalidConfigError("option 'subscribePattern' is empty: give a regular expression")
        try:
            re.compile(raw)
        except re.error as exc:
            raise InvalidConfigError(f"option 'subscribePattern' is not a valid regular expression: {exc}") from None
        return Subscription(kind, pattern=raw)
    return Subscription(kind, assigned=_parse_assign(raw))


def _parse_assign(raw: str) -> tuple[tuple[str, int], ...]:
    example = """expected JSON like {"topicA":[0,1],"topicB":[2,4]}"""
    parsed = _load_json(raw, "assign", example)
    pairs = set()
    for topic, partitions in parsed.items():
        if not isinstance(partitions, list) or not partitions:
            raise InvalidConfigError(f"option 'assign': topic {topic!r} needs a non-empty list of partitions; {example}")
        for p in partitions:
            if not isinstance(p, int) or isinstance(p, bool) or p < 0:
                raise InvalidConfigError(f"option 'assign': partition {p!r} of topic {topic!r} is not a "
                                         f"non-negative integer")
            pairs.add((topic, p))
    if not pairs:
        raise InvalidConfigError(f"option 'assign' names no partitions; {example}")
    return tuple(sorted(pairs))


# ---- starting and ending offsets ------------------------------------------------


def _parse_offset_specs(opts: Mapping[str, str], streaming: bool | None) -> tuple[OffsetSpec, OffsetSpec | None]:
    ending_keys = [name for key, name in (("endingoffsets", "endingOffsets"), ("endingtimestamp", "endingTimestamp"),
                                          ("endingoffsetsbytimestamp", "endingOffsetsByTimestamp")) if key in opts]
    if streaming is None:
        return _parse_spec(opts, "starting", default="latest"), _parse_spec(opts, "ending", default="latest")
    if streaming and ending_keys:
        raise InvalidConfigError(f"option '{ending_keys[0]}' is for batch queries only (spark.read); "
                                 f"a stream has no end")
    starting = _parse_spec(opts, "starting", default="latest" if streaming else "earliest")
    if not streaming and starting.kind == "latest":
        raise InvalidConfigError("startingOffsets='latest' is not allowed in a batch query: it would read nothing; "
                                 "use 'earliest', offsets JSON or a timestamp")
    if not streaming and starting.kind == "offsets" and any(v == LATEST for _, _, v in starting.per_partition):
        raise InvalidConfigError("startingOffsets: -1 (latest) is not allowed for a partition in a batch query")
    if streaming:
        return starting, None
    ending = _parse_spec(opts, "ending", default="latest")
    if ending.kind == "earliest":
        raise InvalidConfigError("endingOffsets='earliest' is not allowed in a batch query: it would read nothing; "
                                 "use 'latest', offsets JSON or a timestamp")
    if ending.kind == "offsets" and any(v == EARLIEST for _, _, v in ending.per_partition):
        raise InvalidConfigError("endingOffsets: -2 (earliest) is not allowed for a partition in a batch query")
    return starting, ending


def _parse_spec(opts: Mapping[str, str], which: str, default: str) -> OffsetSpec:
    """Kafka's precedence: <which>Timestamp, then <which>OffsetsByTimestamp, then <which>Offsets."""
    ts_name, by_ts_name, offsets_name = f"{which}Timestamp", f"{which}OffsetsByTimestamp", f"{which}Offsets"
    if ts_name.lower() in opts:
        return OffsetSpec("timestamp", timestamp_ms=_non_negative(opts[ts_name.lower()], ts_name), option=ts_name)
    if by_ts_name.lower() in opts:
        per_partition = parse_partition_json(opts[by_ts_name.lower()], by_ts_name, allow_special=False)
        return OffsetSpec("timestamps", per_partition=per_partition, option=by_ts_name)
    raw = opts.get(offsets_name.lower(), default).strip()
    if raw.lower() in ("earliest", "latest"):
        return OffsetSpec(raw.lower(), option=offsets_name)
    if not raw.startswith("{"):
        raise InvalidConfigError(f"option '{offsets_name}' must be 'earliest', 'latest' or JSON like "
                                 f"""{{"topicA":{{"0":23,"1":-1}}}}, got {raw!r}""")
    return OffsetSpec("offsets", per_partition=parse_partition_json(raw, offsets_name, allow_special=True),
                      option=offsets_name)


def parse_partition_json(raw: str, option: str, *, allow_special: bool) -> tuple[tuple[str, int, int], ...]:
    """{"topic":{"0":23}} (Kafka's form) or this source's checkpoint form, to sorted triples."""
    example = """{"topicA":{"0":23,"1":-2}}""" if allow_special else """{"topicA":{"0":1700000000000}}"""
    parsed = _load_json(raw, option, f"expected JSON like {example}")
    if "topics" in parsed and isinstance(parsed.get("version"), int):
        parsed = {t: entry.get("offsets", {}) for t, entry in parsed["topics"].items()}
    triples = []
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict) or not partitions:
            raise InvalidConfigError(f"option '{option}': topic {topic!r} needs an object of partition -> value; "
                                     f"expected JSON like {example}")
        for p_raw, value in partitions.items():
            if not str(p_raw).isdigit():
                raise InvalidConfigError(f"option '{option}': partition {p_raw!r} of topic {topic!r} is not a "
                                         f"non-negative integer")
            low = -2 if allow_special else 0
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                what = "an offset >= 0, -2 (earliest) or -1 (latest)" if allow_special else "a timestamp in ms >= 0"
                raise InvalidConfigError(f"option '{option}': value {value!r} for {topic}-{p_raw} must be {what}")
            triples.append((topic, int(p_raw), value))
    return tuple(sorted(triples))


# ---- scalar helpers -------------------------------------------------------------


def _load_json(raw: str, option: str, example: str) -> dict:
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidConfigError(f"option '{option}' is not valid JSON ({exc.msg} at char {exc.pos}); "
                                 f"{example}") from None
    if not isinstance(parsed, dict) or not parsed:
        raise InvalidConfigError(f"option '{option}' must be a non-empty JSON object; {example}")
    return parsed


def _timestamp_strategy(opts: Mapping[str, str]) -> str:
    raw = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if raw not in TIMESTAMP_STRATEGIES:
        raise InvalidConfigError(f"option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', "
                                 f"got {opts['startingoffsetsbytimestampstrategy']!r}")
    return raw


def _non_negative(raw: str, option: str) -> int:
    text = raw.strip()
    if not text.isdigit():
        raise InvalidConfigError(f"option '{option}' must be a non-negative integer (ms since the epoch for "
                                 f"timestamps), got {raw!r}")
    return int(text)
