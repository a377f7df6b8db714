"""The fuzzer's malformed JSON inputs: every DoAction body, ticket, fetch-session request and forged
control-plane call it sends (descriptors and produce streams: ``fuzz_streams``).

Owned here so that what is sent can be read (and reviewed) apart from how it is sent and checked
(``fuzz.py``). Each input is built from a *template*, a well-formed request that changes nothing
even if a broker accepted it (absent topics, broker 999), with one thing wrong: a body that is not
JSON or not UTF-8, a field missing, of the wrong type, out of range, unknown, holding a lone
surrogate or NUL, a bad topic name, nesting 100,000 deep, a list of 2,000, a 20 MiB body. Inputs
are meant to be refused, so any state change they cause is a defect, which is why no value here
is one a correct broker may accept (-1 is a valid leader or timestamp, so only partition numbers,
counts, ports and offsets get it).

The choice is deterministic for a seed: variants of one (target, kind) group come in a fixed
order with the most telling first (the ``topic`` field, the empty name), and a bounded run takes
that one and a seeded sample of the rest. Bodies are built when sent, so a run holds no more than
one 20 MiB body per broker at a time. Placeholders (``LED_PARTITION``, ``CONTROLLER_EPOCH``, ...)
are filled in per broker when sent: a produce must reach the partition's leader to get past the
leadership check to the code under test.
"""

from __future__ import annotations

import copy
import json
import random
from dataclasses import dataclass, field
from typing import Any, Callable

import pyarrow as pa

from ads_spark.protocol.request_schemas import PARTITION_ID_MAX
from ads_spark.schemas import ipc

KEEP_TOPIC = "keep"
SINK_TOPIC = "fuzzsink"  # produce inputs go here, never to keep: an accepted garbage batch must not reach it
ABSENT_TOPIC = "fuzz-absent"
CREATED_TOPIC = "fuzz-created"  # created only if a broker accepts a malformed create_topics
ABSENT_BROKER = 999
# Placeholders, filled in per broker when an input is sent (fuzz_send.py ``Targets.fill``).
LED_PARTITION = 987654321  # a partition of the input's topic that the receiving broker leads
CONTROLLER_ID = 987654322  # the active controller's id and epoch: a forged call the broker would obey
CONTROLLER_EPOCH = 987654323
SELF_ID = 987654324  # the receiving broker's own id
HUGE_EPOCH = 2 ** 63 - 1
TRAVERSAL_TOPIC = "../../../x/victim"  # from <cluster>/broker-N/data: <cluster>/../x/victim-0

DEPTH = 100_000
REPEATS = 2_000
OVERSIZED_BYTES = 20 << 20
LONG_NAME_CHARS = 1 << 20
BAD_TOPIC_NAMES = ("", ".", "..", TRAVERSAL_TOPIC, "a/b", "a" * LONG_NAME_CHARS)
# Unambiguously outside any field's range: beyond int64, and absurd. -1 is valid for many fields.
OUT_OF_RANGE_INTS = (2 ** 63, -(2 ** 63) - 1, 10 ** 30)
NEGATIVE_FIELDS = frozenset({"partition", "partitions", "replication_factor", "port", "fetch_offset"})
EXTRA_BAD_VALUES = {"port": (65536,)}
# Where the default wrong values include a valid one (acks may be 1 or "1"), the only ones tried.
ONLY_BAD_VALUES = {"acks": ("false", 2, 1.5, True, [], {})}
NOT_JSON = (b"{", b"not json", b"\x00\x01\x02", b'{"a": 1}{"b": 2}', b"NaN", b"[1,]")
WRONG_JSON_TYPES = ([], [1], 1, "x", None, True)
UNKNOWN_FIELD = "zz_unknown"
KINDS = ("not_json", "invalid_utf8", "wrong_json_type", "missing_field", "wrong_type", "out_of_range",
         "unknown_field", "lone_surrogate", "nul", "bad_topic_name", "deep_nesting", "huge_list", "oversized")


@dataclass(frozen=True)
class Template:
    """A well-formed request. ``required``: dotted field paths ("partitions.*.topic"); ``frozen``: fields
    left alone because any value is valid (a correlation id is echoed back); ``types``: the type of a
    field whose template value is null."""

    body: dict
    required: frozenset = frozenset()
    led_topic: str | None = None
    frozen: frozenset = frozenset()
    types: dict = field(default_factory=dict)


def _t(body: dict, required: str = "", led_topic: str | None = None, frozen: str = "", **types) -> Template:
    return Template(body, frozenset(required.split()), led_topic, frozenset(frozen.split()), types)


def _fetch_body() -> dict:
    return {"type": "fetch", "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
            "client_rack": None, "partitions": [{"topic": KEEP_TOPIC, "partition": LED_PARTITION, "fetch_offset": 0,
                                                 "current_leader_epoch": -1, "partition_max_bytes": 1 << 16}]}


_PARTITION_ENTRY = {"topic": ABSENT_TOPIC, "partition": 0, "topic_id": "fuzz-topic-id", "leader": ABSENT_BROKER,
                    "leader_epoch": 0, "isr": [ABSENT_BROKER], "elr": [], "replicas": [ABSENT_BROKER],
                    "observers": [], "partition_epoch": 0, "offline_replicas": [], "throttle_bytes_per_s": None,
                    "config": {}}

ACTION_TEMPLATES: dict[str, Template] = {
    "metadata": _t({"topics": [ABSENT_TOPIC], "include_config": True}),
    "list_offsets": _t({"partitions": [{"topic": KEEP_TOPIC, "partition": LED_PARTITION, "timestamp": -1,
                                        "current_leader_epoch": -1}]},
                       "partitions partitions.*.topic partitions.*.partition partitions.*.timestamp", KEEP_TOPIC),
    "locate": _t({"topic": KEEP_TOPIC, "partition": LED_PARTITION, "fetch_offset": 0, "current_leader_epoch": -1,
                  "last_fetched_epoch": -1, "partition_max_bytes": 1 << 16},
                 "topic partition fetch_offset", KEEP_TOPIC),
    "replica_status": _t({"topic": KEEP_TOPIC}),
    "init_producer_id": _t({}),
    "create_topics": _t({"topics": [{"topic": CREATED_TOPIC, "partitions": 1, "replication_factor": 1,
                                     "config": {"retention.ms": "60000"}, "replica_assignment": None,
                                     "observers": []}]},
                        "topics topics.*.topic topics.*.partitions topics.*.replication_factor",
                        replica_assignment=list),
    "delete_topics": _t({"topics": [ABSENT_TOPIC]}, "topics"),
    "describe_configs": _t({"topic": KEEP_TOPIC}, "topic"),
    # On the absent topic every variant is refused whatever its count; the counts on a real topic that must be
    # refused (a decrease, the same, too many) are ``partition_increase_inputs``.
    "create_partitions": _t({"topic": ABSENT_TOPIC, "partitions": 4}, "topic partitions"),
    "alter_configs": _t({"topic": ABSENT_TOPIC, "set": {"retention.ms": "60000"}, "delete": []}, "topic"),
    # Typed topics (issue #26): a valid schema for the absent topic (every variant is refused, nothing registered);
    # describe on the keep topic, Kafka-shaped, which answers without versions.
    "register_schema": _t({"topic": ABSENT_TOPIC, "schema": ipc.to_base64(pa.schema([pa.field("id", pa.int64())])),
                           "dry_run": False}, "topic schema"),
    "describe_schema": _t({"topic": KEEP_TOPIC}, "topic"),
    "elect_leaders": _t({"election_type": "preferred", "partitions": [{"topic": ABSENT_TOPIC, "partition": 0}]},
                        "election_type partitions.*.topic partitions.*.partition"),
    "alter_partition_reassignments": _t(
        {"partitions": [{"topic": ABSENT_TOPIC, "partition": 0, "replicas": [1, 2, 3]}],
         "throttle_bytes_per_s": 1 << 20},
        "partitions partitions.*.topic partitions.*.partition partitions.*.replicas"),
    "controlled_shutdown": _t({"broker_id": ABSENT_BROKER, "broker_epoch": 0, "force": False},
                              "broker_id broker_epoch"),
    "leader_and_isr": _t({"controller_id": CONTROLLER_ID, "controller_epoch": CONTROLLER_EPOCH,
                          "partitions": [dict(_PARTITION_ENTRY)],
                          "brokers": [{"id": ABSENT_BROKER, "host": "127.0.0.1", "port": 9, "rack": None}]},
                         "controller_epoch partitions partitions.*.topic partitions.*.partition partitions.*.leader "
                         "partitions.*.leader_epoch partitions.*.isr partitions.*.replicas", rack=str,
                         throttle_bytes_per_s=int),
    "update_metadata": _t({"controller_id": CONTROLLER_ID, "controller_epoch": CONTROLLER_EPOCH,
                           "partitions": [{k: v for k, v in _PARTITION_ENTRY.items() if k != "config"}]},
                          "controller_epoch partitions.*.topic partitions.*.partition", throttle_bytes_per_s=int),
    "stop_replica": _t({"controller_epoch": CONTROLLER_EPOCH,
                        "partitions": [{"topic": ABSENT_TOPIC, "partition": 0, "delete": False}]},
                       "controller_epoch partitions partitions.*.topic partitions.*.partition"),
    "replica_log_ends": _t({"controller_epoch": CONTROLLER_EPOCH, "partitions": [
        {"topic": ABSENT_TOPIC, "partition": 0, "topic_id": "fuzz-topic-id", "config": {}}]},
        "controller_epoch partitions partitions.*.topic partitions.*.partition"),
}
FETCH_TEMPLATE = _t(_fetch_body(),
                    "type partitions partitions.*.topic partitions.*.partition partitions.*.fetch_offset",
                    KEEP_TOPIC, client_rack=str)
PRODUCE_META_TEMPLATE = _t({"correlation_id": 1, "topic": SINK_TOPIC, "partition": LED_PARTITION, "acks": "all",
                            "timeout_ms": 1000, "producer_id": -1, "producer_epoch": -1, "base_sequence": -1},
                           "topic partition", SINK_TOPIC, frozen="correlation_id")
# Actions a broker lists that have no template above get the body-level kinds only.
GENERIC_TEMPLATE = _t({})


@dataclass(frozen=True)
class Variant:
    kind: str
    label: str
    build: Callable[[], bytes]


@dataclass(frozen=True)
class FuzzInput:
    """One input, sent to every broker. ``call`` says how (fuzz_send.py ``send``): "action" (``name``, the
    body), "get" (the ticket), "put"/"exchange" (a descriptor, nothing written), "session" (a fetch-session
    request), "produce" (one chunk: ``batch`` with the body as its metadata), "raw_produce" (the same, its
    message body replaced in transit by the proxy, fuzz_raw.py)."""

    category: str
    kind: str
    label: str
    call: str
    name: str = ""
    build: Callable[[], bytes] | None = None
    descriptor: tuple | None = None  # ("cmd", build) or ("path", parts)
    schema: pa.Schema | None = None
    batch: Callable[[], pa.RecordBatch | None] | None = None
    scramble: str = ""
    led_topic: str | None = None
    timeout_s: float | None = None


def dumps(value: Any) -> bytes:
    """JSON as a client would send it; lone surrogates and NUL go out as \\u escapes, valid JSON."""
    return json.dumps(value).encode()


# ---- fields of a template ------------------------------------------------------------


def fields(body: Any, path: tuple = ()) -> list[tuple[tuple, Any]]:
    """(path, value) of every field in ``body``, depth first; list items are visited through item 0."""
    found = []
    if isinstance(body, dict):
        for key, value in body.items():
            found.append(((*path, key), value))
            found.extend(fields(value, (*path, key)))
    elif isinstance(body, list) and body and isinstance(body[0], (dict, list)):
        found.append(((*path, 0), body[0]))
        found.extend(fields(body[0], (*path, 0)))
    return found


def dotted(path: tuple) -> str:
    return ".".join("*" if isinstance(p, int) else p for p in path)


def with_value(body: dict, path: tuple, value: Any) -> dict:
    result = copy.deepcopy(body)
    target = result
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return result


def without(body: dict, path: tuple) -> dict:
    result = copy.deepcopy(body)
    target = result
    for part in path[:-1]:
        target = target[part]
    del target[path[-1]]
    return result


# Fields whose variants come first in their groups: topic names reach ZooKeeper paths and file names,
# and a controller epoch recorded from a malformed request deafens a broker (issue #20, finding 5).
FIRST_FIELDS = ("topic", "topics", "controller_epoch")


def _topic_first(items: list[tuple[tuple, Any]]) -> list[tuple[tuple, Any]]:
    return sorted(items, key=lambda item: FIRST_FIELDS.index(item[0][-1]) if item[0][-1] in FIRST_FIELDS else 9)


def _field_type(template: Template, path: tuple, value: Any) -> type | None:
    if value is None:
        return template.types.get(path[-1])
    return type(value)


# ---- variants of one template, by kind -----------------------------------------------------


def variants(template: Template) -> dict[str, list[Variant]]:
    """Every variant of ``template``, grouped by kind, in a fixed order (the most telling first)."""
    body = template.body
    items = _topic_first([(p, v) for p, v in fields(body) if dotted(p) not in template.frozen
                          and p[-1] not in template.frozen])
    strings = [(p, v) for p, v in items if _field_type(template, p, v) is str]
    string_lists = [(p, v) for p, v in items if isinstance(v, list) and v and all(isinstance(x, str) for x in v)]
    groups: dict[str, list[Variant]] = {kind: [] for kind in KINDS}
    groups["not_json"] = [Variant("not_json", f"body {raw[:12]!r}", lambda raw=raw: raw) for raw in NOT_JSON]
    groups["invalid_utf8"] = _invalid_utf8(body, strings)
    groups["wrong_json_type"] = [Variant("wrong_json_type", f"body {v!r}", lambda v=v: dumps(v))
                                 for v in WRONG_JSON_TYPES]
    groups["missing_field"] = [Variant("missing_field", f"no {dotted(p)}", lambda p=p: dumps(without(body, p)))
                               for p, _ in items if dotted(p) in template.required]
    groups["wrong_type"] = _wrong_types(template, items)
    groups["out_of_range"] = _out_of_range(body, items)
    groups["unknown_field"] = [Variant("unknown_field", f"{dotted(p) or 'body'}.{UNKNOWN_FIELD}",
                                       lambda p=p: dumps(_with_unknown(body, p)))
                               for p in [(), *[p for p, v in items if isinstance(v, dict)]]]
    for kind, text in (("lone_surrogate", "\ud800"), ("nul", "a\u0000b")):
        groups[kind] = [Variant(kind, f"{dotted(p)}={text!r}", lambda p=p, t=text: dumps(with_value(body, p, t)))
                        for p, _ in strings]
        groups[kind] += [Variant(kind, f"{dotted(p)}[0]={text!r}", lambda p=p, v=v, t=text: dumps(
            with_value(body, p, [t, *v[1:]]))) for p, v in string_lists]
        groups[kind] += [Variant(kind, f"key {text!r} in {dotted(p)}", lambda p=p, v=v, t=text: dumps(
            with_value(body, p, {**v, t: "1"}))) for p, v in items if isinstance(v, dict)]
    groups["bad_topic_name"] = _bad_topic_names(body, items)
    groups["deep_nesting"] = _deep(body, items)
    groups["huge_list"] = [Variant("huge_list", f"{dotted(p)} x{REPEATS}", lambda p=p, v=v: dumps(
        with_value(body, p, [v[0]] * REPEATS))) for p, v in items if isinstance(v, list) and v]
    groups["oversized"] = _oversized(body, strings)
    return {kind: found for kind, found in groups.items() if found}


def _with_unknown(body: dict, path: tuple) -> dict:
    if not path:
        return {**copy.deepcopy(body), UNKNOWN_FIELD: 1}
    target = body
    for part in path:
        target = target[part]
    return with_value(body, path, {**target, UNKNOWN_FIELD: 1})


def _invalid_utf8(body: dict, strings) -> list[Variant]:
    """Raw bytes that are not UTF-8 where a string goes: a stray byte, an overlong '/', a CESU surrogate."""
    found = []
    for raw in (b"\xff\xfe", b"\xc0\xaf", b"\xed\xa0\x80"):
        if strings:
            path = strings[0][0]
            marker = "\u2603fuzz\u2603"

            def build(path=path, raw=raw, marker=marker) -> bytes:
                text = json.dumps(with_value(body, path, marker), ensure_ascii=False).encode()
                return text.replace(marker.encode(), raw)
            found.append(Variant("invalid_utf8", f"{dotted(path)}={raw!r}", build))
        else:
            found.append(Variant("invalid_utf8", f"key {raw!r}", lambda raw=raw: b'{"' + raw + b'": 1}'))
    return found


def _wrong_types(template: Template, items) -> list[Variant]:
    """Each field as another JSON type: "1" or true or 1.0 for an int, 1 for a string, "false" for a bool."""
    found = []
    for path, value in items:
        kind = _field_type(template, path, value)
        value = {int: 1, str: "x"}.get(kind, value) if value is None else value
        if kind is bool:
            wrong = ["false", 0]
        elif kind is int:
            wrong = [str(value), True, float(value) + 0.5, None]  # x.5: 1.0 might fairly be taken for 1
            if dotted(path) not in template.required:
                wrong.remove(None)  # null is "absent" for an optional field
        elif kind is str:
            wrong = [1, [value or "x"], {}]
        elif kind is list:
            wrong = ["x", {}] + ([[1]] if value and isinstance(value[0], dict) else [[[]]])
        elif kind is dict:
            wrong = [[], "x"]
        else:
            continue
        wrong += list(EXTRA_BAD_VALUES.get(path[-1], ()))
        wrong = list(ONLY_BAD_VALUES.get(path[-1], wrong))
        found += [Variant("wrong_type", f"{dotted(path)}={w!r}"[:80], lambda p=path, w=w: dumps(
            with_value(template.body, p, w))) for w in wrong]
    return found


def _out_of_range(body: dict, items) -> list[Variant]:
    found = []
    for path, value in items:
        if type(value) is not int:
            continue
        values = list(OUT_OF_RANGE_INTS) + ([-1] if path[-1] in NEGATIVE_FIELDS else [])
        found += [Variant("out_of_range", f"{dotted(path)}={v}", lambda p=path, v=v: dumps(with_value(body, p, v)))
                  for v in values]
    return found


def _bad_topic_names(body: dict, items) -> list[Variant]:
    found = []
    for path, value in items:
        if path[-1] == "topic" and isinstance(value, str):
            found += [Variant("bad_topic_name", f"{dotted(path)}={n[:24]!r}{'...' if len(n) > 24 else ''}",
                              lambda p=path, n=n: dumps(with_value(body, p, n))) for n in BAD_TOPIC_NAMES]
        elif path[-1] == "topics" and isinstance(value, list) and value and isinstance(value[0], str):
            found += [Variant("bad_topic_name", f"{dotted(path)}=[{n[:24]!r}]",
                              lambda p=path, n=n: dumps(with_value(body, p, [n]))) for n in BAD_TOPIC_NAMES]
    return found


def deep_list(depth: int = DEPTH) -> bytes:
    return b"[" * depth + b"]" * depth


def deep_object(depth: int = DEPTH) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


def _deep(body: dict, items) -> list[Variant]:
    found = [Variant("deep_nesting", f"body [[[...]]] x{DEPTH}", deep_list),
             Variant("deep_nesting", f'body {{"a":{{...}}}} x{DEPTH}', deep_object)]
    lists = [p for p, v in items if isinstance(v, list)]
    if lists:
        path = lists[0]
        marker = '"\u2603deep\u2603"'

        def build(path=path) -> bytes:
            return json.dumps(with_value(body, path, "\u2603deep\u2603"), ensure_ascii=False).encode().replace(
                marker.encode(), deep_list())
        found.append(Variant("deep_nesting", f"{dotted(path)}=[[[...]]] x{DEPTH}", build))
    return found


def _oversized(body: dict, strings) -> list[Variant]:
    found = [Variant("oversized", f"body + {OVERSIZED_BYTES >> 20} MiB of spaces",
                     lambda: dumps(body) + b" " * OVERSIZED_BYTES)]
    if strings:
        path = strings[0][0]
        found.append(Variant("oversized", f"{dotted(path)} of {OVERSIZED_BYTES >> 20} MiB",
                             lambda p=path: dumps(with_value(body, p, "a" * OVERSIZED_BYTES))))
    return found


def choose(groups: dict[str, list[Variant]], rng: random.Random, per_group: int | None) -> list[Variant]:
    """Each group's first variant and a seeded sample of the rest (all of them when ``per_group`` is None)."""
    chosen = []
    for kind in KINDS:
        group = groups.get(kind, [])
        if per_group is None or len(group) <= per_group:
            chosen += group
        elif group:
            chosen += [group[0], *rng.sample(group[1:], per_group - 1)]
    return chosen


# ---- inputs by category ----------------------------------------------------------------------


def action_inputs(names: list[str], rng: random.Random, per_group: int | None) -> dict[str, list[FuzzInput]]:
    """``action:<name>`` -> the chosen variants of that action's template."""
    result = {}
    for name in names:
        template = ACTION_TEMPLATES.get(name, GENERIC_TEMPLATE)
        result[f"action:{name}"] = [
            FuzzInput(f"action:{name}", v.kind, v.label, "action", name=name, build=v.build,
                      led_topic=template.led_topic, timeout_s=OVERSIZED_TIMEOUT_S if v.kind == "oversized" else None)
            for v in choose(variants(template), rng, per_group)]
    return result


OVERSIZED_TIMEOUT_S = 20.0  # 20 MiB to three brokers at once on a loaded 2-core machine


def ticket_inputs(rng: random.Random, per_group: int | None) -> list[FuzzInput]:
    """DoGet tickets: the fetch request with one thing wrong, and tickets that are not fetches."""
    chosen = [FuzzInput("tickets", v.kind, v.label, "get", build=v.build, led_topic=KEEP_TOPIC,
                        timeout_s=OVERSIZED_TIMEOUT_S if v.kind == "oversized" else None)
              for v in choose(variants(FETCH_TEMPLATE), rng, per_group)]
    others = [{"type": "produce"}, {"type": 5}, {}, {"type": "fetch_session"}, {"type": "\ud800"}]
    return chosen + [FuzzInput("tickets", "wrong_request_type", f"ticket {o!r}", "get", build=lambda o=o: dumps(o))
                     for o in others]


def session_inputs(rng: random.Random, per_group: int | None) -> list[FuzzInput]:
    """Fetch-session requests (DoExchange, one per stream) with one thing wrong."""
    return [FuzzInput("fetch_session", v.kind, v.label, "session", build=v.build, led_topic=KEEP_TOPIC,
                      timeout_s=OVERSIZED_TIMEOUT_S if v.kind == "oversized" else None)
            for v in choose(variants(FETCH_TEMPLATE), rng, per_group)]


def partition_increase_inputs(keep_partitions: int) -> list[FuzzInput]:
    """create_partitions a broker must refuse, most of them naming the keep topic (``keep_partitions`` now) so
    that the count checks are reached: a decrease, the same count, none, one past the most a topic may have
    and far past it; the next count (a valid grow) as another JSON type, with an unknown field or a field
    missing; and an unknown topic. The valid grow itself is sent by ``fuzz_grow``."""
    grow, most = keep_partitions + 1, PARTITION_ID_MAX + 1
    keep = {"topic": KEEP_TOPIC}
    cases = [("decrease", {**keep, "partitions": count}) for count in sorted({keep_partitions - 1, 1} - {0})]
    cases += [("same_count", {**keep, "partitions": keep_partitions}),
              ("zero", {**keep, "partitions": 0}), ("negative", {**keep, "partitions": -1})]
    cases += [("huge_count", {**keep, "partitions": count}) for count in (most + 1, 2 ** 31, 2 ** 63, 10 ** 30)]
    cases += [("wrong_type", {**keep, "partitions": wrong}) for wrong in (str(grow), grow + 0.5, True, None, [grow])]
    cases += [("wrong_type", {"topic": [KEEP_TOPIC], "partitions": grow}),
              ("unknown_field", {**keep, "partitions": grow, UNKNOWN_FIELD: 1}),
              ("missing_field", {"partitions": grow}), ("missing_field", dict(keep)),
              ("unknown_topic", {"topic": ABSENT_TOPIC, "partitions": grow}),
              ("unknown_topic", {"topic": KEEP_TOPIC.upper(), "partitions": grow})]  # names are case-sensitive
    return [FuzzInput("partition_increase", kind, _short(body), "action", name="create_partitions",
                      build=lambda b=body: dumps(b)) for kind, body in cases]


def forged_inputs() -> list[FuzzInput]:
    """Malformed control-plane calls as an impersonating client would send them (issue #20 findings 3-5).

    The ones at the real controller epoch come first: on a broker that records the epoch of a malformed
    call, the huge-epoch ones make every later call stale."""
    entry = dict(_PARTITION_ENTRY, leader=SELF_ID, isr=[SELF_ID], replicas=[SELF_ID])
    real = {"controller_id": CONTROLLER_ID, "controller_epoch": CONTROLLER_EPOCH}
    huge = {"controller_id": CONTROLLER_ID, "controller_epoch": HUGE_EPOCH}
    calls = [
        ("path_traversal", "leader_and_isr", {**real, "partitions": [dict(entry, topic=TRAVERSAL_TOPIC)],
                                              "brokers": []}),
        ("path_traversal", "stop_replica", {**real, "partitions": [{"topic": TRAVERSAL_TOPIC, "partition": 0,
                                                                    "delete": True}]}),
        ("path_traversal", "leader_and_isr", {**real, "partitions": [dict(entry, topic="a/b")], "brokers": []}),
        ("phantom_partition", "replica_log_ends", {**real, "partitions": [{"topic": "", "partition": 0}]}),
        ("phantom_partition", "replica_log_ends", {**real, "partitions": [{"topic": TRAVERSAL_TOPIC, "partition": 0}]}),
        ("phantom_partition", "leader_and_isr", {**real, "partitions": [dict(entry, topic="..")], "brokers": []}),
    ]
    calls += [("delete_bad_name", "delete_topics", {"topics": [name]}) for name in BAD_TOPIC_NAMES]
    calls += [
        ("huge_epoch", "leader_and_isr", {**huge, "partitions": [dict(_PARTITION_ENTRY)], "brokers": "x"}),
        ("huge_epoch", "leader_and_isr", {**huge, "partitions": [dict(_PARTITION_ENTRY)], "brokers": [{"id": "x"}]}),
        ("huge_epoch", "leader_and_isr", {**huge, "partitions": [dict(_PARTITION_ENTRY)], "brokers": [1, 2]}),
        ("huge_epoch", "leader_and_isr", {**huge, "partitions": "x", "brokers": []}),
        ("huge_epoch", "leader_and_isr", {**huge, "partitions": [{"topic": 5}], "brokers": []}),
        ("huge_epoch", "update_metadata", {**huge, "brokers": [{"id": "x"}], "partitions": []}),
        ("huge_epoch", "update_metadata", {**huge, "partitions": [{"partition": 0}]}),
        ("huge_epoch", "stop_replica", {**huge, "partitions": "x"}),
        ("huge_epoch", "replica_log_ends", {**huge, "partitions": [{"topic": 5, "partition": 0}]}),
        ("out_of_range_epoch", "stop_replica", {"controller_epoch": 2 ** 63, "partitions": []}),
    ]
    return [FuzzInput("forged_control", kind, f"{name} {_short(body)}", "action", name=name,
                      build=lambda b=body: dumps(b)) for kind, name, body in calls]


def _short(body: dict) -> str:
    text = json.dumps(body, default=str)
    return text if len(text) <= 120 else text[:117] + "..."
