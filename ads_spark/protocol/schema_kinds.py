"""The kinds of values a request body is checked against, and the shared field kinds built from them.

``request_schemas`` (every call's schema) and ``group_schemas`` (the consumer-group calls) build on these;
the rules they enforce are in ``request_schemas``' docstring. Each kind's ``fit`` returns the value or
raises ``Misfit`` naming what is wrong; ``Misfit.as_error`` turns it into the typed error of the call.
"""

from __future__ import annotations

from typing import Any, Iterable

from ads_spark.errors import (
    AdsError,
    InvalidRequestError,
    InvalidTopicError,
)
from ads_spark.protocol.names import TOPIC_NAME_CHARS_MAX, TOPIC_NAME_RULE, is_valid_topic_name, shown

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

PARTITION_ID_MAX = 100_000 - 1  # admin_handlers.PARTITIONS_PER_TOPIC_MAX partitions, numbered from 0
REPLICAS_PER_PARTITION_MAX = 64
PARTITIONS_PER_REQUEST_MAX = 200_000
TOPICS_PER_REQUEST_MAX = 10_000
BROKERS_PER_REQUEST_MAX = 10_000
CONFIG_ENTRIES_MAX = 128
CONFIG_VALUE_CHARS_MAX = 4096
HOST_CHARS_MAX = 255
SHORT_TEXT_CHARS_MAX = 1024


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number with a fraction", str: "a string",
            list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


class Misfit(Exception):
    """A value that does not fit its kind: the problem, and the path to it built on the way out.

    Paths are assembled only for a refusal (each container prepends its step as the exception passes):
    building ``partitions[17].topic`` for every field that fits cost most of checking a fetch."""

    def __init__(self, problem: str, error: type[AdsError] = InvalidRequestError):
        super().__init__(problem)
        self.problem, self.error, self.steps = problem, error, []

    def as_error(self, what: str) -> AdsError:
        return self.error(f"{what}{''.join(reversed(self.steps))}: {self.problem}")


class Kind:
    """One kind of JSON value; ``fit`` returns the value or raises ``Misfit``."""

    error: type[AdsError] = InvalidRequestError

    def fit(self, value: Any) -> Any:
        raise NotImplementedError


class Int(Kind):
    def __init__(self, min_value: int = INT64_MIN, max_value: int = INT64_MAX,
                 error: type[AdsError] = InvalidRequestError):
        self.min_value, self.max_value, self.error = min_value, max_value, error

    def fit(self, value: Any) -> int:
        if type(value) is not int:  # bool is a subclass of int: refused here on purpose
            raise Misfit(f"must be an integer, got {_json_type(value)}")
        if value < self.min_value:
            raise Misfit(f"must be >= {self.min_value}, got {shown(value)}", self.error)
        if value > self.max_value:
            raise Misfit(f"must be <= {self.max_value}, got {shown(value)}", self.error)
        return value


class Bool(Kind):
    def fit(self, value: Any) -> bool:
        if type(value) is not bool:
            raise Misfit(f"must be true or false, got {_json_type(value)} {shown(value)}")
        return value


def _text_problem(value: str, max_chars: int) -> str | None:
    if len(value) > max_chars:
        return f"at most {max_chars} characters, got {len(value)}"
    if "\x00" in value:
        return f"must not contain NUL, got {shown(value)}"
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"not valid Unicode (a lone surrogate), got {shown(value)}"
    return None


def check_text(value: str, what: str, max_chars: int) -> str:
    """A string that is safe to use anywhere: bounded, no NUL, no lone surrogate (they cannot be encoded as
    UTF-8: one reached kazoo once and killed its connection thread)."""
    problem = _text_problem(value, max_chars)
    if problem is not None:
        raise InvalidRequestError(f"{what}: {problem}")
    return value


class Text(Kind):
    def __init__(self, max_chars: int = SHORT_TEXT_CHARS_MAX, choices: Iterable[str] | None = None):
        self.max_chars = max_chars
        self.choices = tuple(choices) if choices is not None else None

    def fit(self, value: Any) -> str:
        if type(value) is not str:
            raise Misfit(f"must be a string, got {_json_type(value)}")
        problem = _text_problem(value, self.max_chars)
        if problem is not None:
            raise Misfit(problem)
        if self.choices is not None and value not in self.choices:
            raise Misfit(f"must be one of {', '.join(map(repr, self.choices))}, got {shown(value)}")
        return value


class Scalar(Kind):
    """A JSON scalar: null, true/false, an integer in int64's range, a number, or a bounded string."""

    def __init__(self, max_chars: int = SHORT_TEXT_CHARS_MAX):
        self.text = Text(max_chars)

    def fit(self, value: Any) -> Any:
        if value is None or type(value) in (bool, float):
            return value
        if type(value) is int:
            return Int().fit(value)
        if type(value) is str:
            return self.text.fit(value)
        raise Misfit(f"must be a JSON scalar, got {_json_type(value)}")


class TopicName(Kind):
    # Names seen valid, so a fetch of many partitions of few topics runs the pattern once per topic. Bounded:
    # cleared when full, so a stream of made-up names costs a pattern each, never memory.
    _valid: set[str] = set()
    VALID_NAMES_CACHED_MAX = 10_000

    def fit(self, value: Any) -> str:
        if type(value) is str and value in self._valid:
            return value
        if not is_valid_topic_name(value):
            kind = "" if type(value) is str else f" ({_json_type(value)})"
            raise Misfit(f"invalid topic name {shown(value)}{kind}: use {TOPIC_NAME_RULE}", InvalidTopicError)
        if len(self._valid) >= self.VALID_NAMES_CACHED_MAX:
            self._valid.clear()
        self._valid.add(value)
        return value


class OneOf(Kind):
    """The first of ``kinds`` that accepts the value (e.g. acks: "all" or -1)."""

    def __init__(self, *kinds: Kind):
        self.kinds = kinds

    def fit(self, value: Any) -> Any:
        problems = []
        for kind in self.kinds:
            try:
                return kind.fit(value)
            except Misfit as misfit:
                problems.append(misfit.problem)
        raise Misfit(" or ".join(problems))


class ListOf(Kind):
    def __init__(self, item: Kind, max_items: int, min_items: int = 0, distinct: bool = False):
        self.item, self.max_items, self.min_items, self.distinct = item, max_items, min_items, distinct

    def fit(self, value: Any) -> list:
        if type(value) is not list:
            raise Misfit(f"must be a list, got {_json_type(value)}")
        if not self.min_items <= len(value) <= self.max_items:
            raise Misfit(f"must have {self.min_items} to {self.max_items} items, got {len(value)}")
        fit = self.item.fit
        index = 0
        try:
            for index, item in enumerate(value):
                fit(item)
        except Misfit as misfit:
            misfit.steps.append(f"[{index}]")
            raise
        if self.distinct and len(set(value)) != len(value):
            raise Misfit(f"names an item twice: {shown(value)}")
        return value


class MapOf(Kind):
    """A JSON object with free keys (topic configs): keys and values of one kind each, bounded."""

    def __init__(self, key: Kind, value: Kind, max_items: int):
        self.key, self.value, self.max_items = key, value, max_items

    def fit(self, value: Any) -> dict:
        if type(value) is not dict:
            raise Misfit(f"must be an object, got {_json_type(value)}")
        if len(value) > self.max_items:
            raise Misfit(f"must have at most {self.max_items} entries, got {len(value)}")
        for key, item in value.items():
            try:
                self.key.fit(key)
                self.value.fit(item)
            except Misfit as misfit:
                misfit.steps.append(f"[{shown(key)}]")
                raise
        return value


class Field:
    __slots__ = ("kind", "required", "nullable")

    def __init__(self, kind: Kind, required: bool, nullable: bool):
        self.kind, self.required, self.nullable = kind, required, nullable


def required(kind: Kind) -> Field:
    return Field(kind, True, False)


def optional(kind: Kind) -> Field:
    """May be absent or null (the handler's default applies)."""
    return Field(kind, False, True)


class Obj(Kind):
    """A JSON object with named fields; a field it does not define is refused."""

    def __init__(self, fields: dict[str, Field]):
        self.fields = fields
        self._required = [name for name, field in fields.items() if field.required]

    def fit(self, value: Any) -> dict:
        if type(value) is not dict:
            raise Misfit(f"must be a JSON object, got {_json_type(value)}")
        fields = self.fields
        for name, item in value.items():
            field = fields.get(name)
            if field is None:
                raise Misfit(f"unknown field {shown(name)} (known: {', '.join(sorted(fields)) or 'none'})")
            if item is None:
                if field.nullable:
                    continue
                misfit = Misfit("must not be null")
                misfit.steps.append(f".{name}")
                raise misfit
            try:
                field.kind.fit(item)
            except Misfit as misfit:
                misfit.steps.append(f".{name}")
                raise
        for name in self._required:
            if name not in value:
                raise Misfit(f"missing field '{name}'")
        return value


class Distinct(ListOf):
    """A list of objects that names each key (the ``key_fields`` of an item) at most once: a fetch naming one
    partition 2,000 times once made a broker read it 2,000 times into one answer, and a create_topics
    naming one topic twice created it, then refused the request."""

    def __init__(self, item: Kind, max_items: int, key_fields: tuple[str, ...], min_items: int = 0):
        super().__init__(item, max_items, min_items)
        self.key_fields = key_fields

    def fit(self, value: Any) -> list:
        super().fit(value)
        fields = self.key_fields
        keys = {tuple(entry[f] for f in fields) for entry in value}
        if len(keys) != len(value):
            seen: set = set()
            for index, entry in enumerate(value):
                key = tuple(entry[f] for f in fields)
                if key in seen:
                    named = ", ".join(f"{f} {shown(v)}" for f, v in zip(fields, key))
                    misfit = Misfit(f"names {named} a second time")
                    misfit.steps.append(f"[{index}]")
                    raise misfit
                seen.add(key)
        return value


# ---- the kinds of values ADS requests carry -----------------------------------------------------------

BROKER_ID = Int(0, INT32_MAX)
LEADER_ID = Int(-1, INT32_MAX)  # -1: no leader
EPOCH = Int(-1, INT32_MAX)  # leader, partition and controller epochs (int32 as Kafka's); -1: unknown
BROKER_EPOCH = Int(-1, INT64_MAX)  # a registration's czxid
PARTITION_ID = Int(0, PARTITION_ID_MAX)
OFFSET = Int(0, INT64_MAX)
BYTES = Int(0, INT64_MAX)
DURATION_MS = Int(0, INT64_MAX)
BROKER_IDS = ListOf(BROKER_ID, REPLICAS_PER_PARTITION_MAX, distinct=True)
CONFIG = MapOf(Text(TOPIC_NAME_CHARS_MAX), Text(CONFIG_VALUE_CHARS_MAX), CONFIG_ENTRIES_MAX)
TOPIC = TopicName()
ACKS = OneOf(Text(8, choices=("all", "-1", "1", "0")), Int(-1, 1))


def _partition(**more: Field) -> dict[str, Field]:
    return {"topic": required(TOPIC), "partition": required(PARTITION_ID), **more}


def _partitions(entry: Obj, max_items: int = PARTITIONS_PER_REQUEST_MAX, min_items: int = 0) -> Distinct:
    return Distinct(entry, max_items, ("topic", "partition"), min_items)
