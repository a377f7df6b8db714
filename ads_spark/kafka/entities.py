"""Kafka request and response messages as kio entities: which class serves an (API key, version), and
how a handler's plain answer becomes a typed response.

kio (generated from Kafka's JSON message specs, one frozen dataclass per version) decodes requests and
encodes responses; its dataclasses want typed values (an ``ErrorCode`` member, a ``timedelta`` for the
``*_timedelta`` fields, a ``datetime`` for a timestamp) and one class per version, so a handler written
against kio directly would repeat itself per version. Handlers answer plain dicts instead, keyed by
kio's field names, and ``build`` makes the entity of the version asked for: fields that version lacks
are dropped, fields the handler left out take the field's default or the zero of its type, and values
are converted by the field's Kafka type. One place knows kio's typing rules.

A ``bytes`` or ``records`` value may be a ``Chunks`` (several buffers meant back to back): ``Parts``, the
writable kio writes into, keeps them by reference, so a fetch answer's batches are never joined or copied
into the frame (frames.encode_response_parts; the server sends the buffers with sendmsg).

Throttling does not exist in ADS, so every ``throttle_time`` is 0 (left out by handlers).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import logging
import types
import typing
import uuid
from typing import Any

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode as KafkaErrorCode
from kio.serial import entity_writer
from kio.static.constants import EntityType

log = logging.getLogger("ads.kafka")

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_ZERO_UUID = uuid.UUID(int=0)
_KNOWN_ERROR_CODES = frozenset(code.value for code in KafkaErrorCode)


@functools.lru_cache(maxsize=None)
def request_class(api_key: int, version: int) -> type:
    """kio's request entity class of ``api_key`` at ``version``; raises kio's KioIndexError for an unknown
    key or version (the caller checks the version table first)."""
    return _payload_class(api_key, version, EntityType.request)


@functools.lru_cache(maxsize=None)
def response_class(api_key: int, version: int) -> type:
    return _payload_class(api_key, version, EntityType.response)


def _payload_class(api_key: int, version: int, entity_type: EntityType) -> type:
    module = load_payload_module(api_key, version, entity_type)
    suffix = "Request" if entity_type is EntityType.request else "Response"
    found = [value for name, value in vars(module).items()
             if isinstance(value, type) and name.endswith(suffix) and getattr(value, "__type__", None) is entity_type]
    if len(found) != 1:
        raise LookupError(f"kio module {module.__name__} has {len(found)} {suffix} classes")
    return found[0]


def error_code(code: int) -> KafkaErrorCode:
    """Kafka's error code member for ``code``; a code Kafka does not define (ADS's own, such as
    SSL_AUTHENTICATION_FAILED) is sent as UNKNOWN_SERVER_ERROR, and logged, since a client could not read it."""
    if code in _KNOWN_ERROR_CODES:
        return KafkaErrorCode(code)
    log.warning("error code %s has no Kafka meaning; answered as UNKNOWN_SERVER_ERROR", code)
    return KafkaErrorCode.unknown_server_error


@dataclasses.dataclass(frozen=True, slots=True)
class _FieldPlan:
    name: str
    convert: typing.Callable[[Any], Any]
    default: Any  # dataclasses.MISSING: the zero below
    zero: Any


@functools.lru_cache(maxsize=None)
def _plan(cls: type) -> tuple[_FieldPlan, ...]:
    hints = typing.get_type_hints(cls)
    plans = []
    for field in dataclasses.fields(cls):
        annotation = hints[field.name]
        kafka_type = field.metadata.get("kafka_type")
        convert, zero = _converter(annotation, kafka_type)
        if field.default is not dataclasses.MISSING:
            default = field.default
        elif field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            default = field.default_factory()  # type: ignore[misc]
        else:
            default = dataclasses.MISSING
        plans.append(_FieldPlan(field.name, convert, default, zero))
    return tuple(plans)


def _optional_inner(annotation: Any) -> tuple[Any, bool]:
    """(the type inside ``X | None``, True) or (annotation, False)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        inner = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(inner) == 1 and len(typing.get_args(annotation)) == 2:
            return inner[0], True
    return annotation, False


def _converter(annotation: Any, kafka_type: str | None) -> tuple[typing.Callable[[Any], Any], Any]:
    """How a plain value becomes this field's value, and the field's zero (used when a handler leaves it out)."""
    inner, nullable = _optional_inner(annotation)
    convert, zero = _converter_of(inner, kafka_type)
    if nullable:
        # A left-out records field or array is sent empty, not null: librdkafka refuses a null fetch
        # records set ("invalid MessageSetSize -1") and read_committed consumers expect an empty
        # aborted-transactions list. Other nullable fields (strings, nested entities) are sent as null.
        keeps_zero = kafka_type == "records" or typing.get_origin(inner) is tuple
        return (lambda value: None if value is None else convert(value)), (zero if keeps_zero else None)
    return convert, zero


def _converter_of(annotation: Any, kafka_type: str | None) -> tuple[typing.Callable[[Any], Any], Any]:
    if typing.get_origin(annotation) is tuple:
        item = typing.get_args(annotation)[0]
        item_convert, _ = _converter_of(item, kafka_type)
        return (lambda values: tuple(item_convert(value) for value in values)), ()
    if dataclasses.is_dataclass(annotation):
        return (lambda value: build(annotation, value) if isinstance(value, dict) else value), \
            _LazyZero(annotation)
    if kafka_type == "error_code":
        return (lambda value: value if isinstance(value, KafkaErrorCode) else error_code(int(value))), \
            KafkaErrorCode.none
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return (lambda value: value if isinstance(value, datetime.timedelta)
                else datetime.timedelta(milliseconds=int(value))), datetime.timedelta(0)
    if kafka_type == "datetime_i64":
        return (lambda value: value if isinstance(value, datetime.datetime)
                else _EPOCH + datetime.timedelta(milliseconds=int(value))), _EPOCH
    if kafka_type == "uuid":
        return (lambda value: value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))), _ZERO_UUID
    if kafka_type == "string":
        return str, ""
    if kafka_type in ("bytes", "records"):
        return (lambda value: value), b""
    if kafka_type == "bool":
        return bool, False
    if kafka_type == "float64":
        return float, 0.0
    return int, 0


class _LazyZero:
    """A nested entity's zero: built on first use (its own fields' zeros), as nested classes are recursive."""

    __slots__ = ("cls",)

    def __init__(self, cls: type):
        self.cls = cls


class Chunks:
    """Buffers a ``bytes`` or ``records`` field holds back to back, passed to kio in place of one bytes
    value: kio's writers take ``len`` and hand the value to ``write``, where ``Parts`` keeps the buffers
    as they are. Joining a fetch answer's batches, then copying them into the frame, cost two copies of
    every byte served (docs/perf/kafka-clients.md)."""

    __slots__ = ("parts", "_length")

    def __init__(self, parts: list):
        self.parts = parts
        self._length = sum(memoryview(part).nbytes for part in parts)

    def __len__(self) -> int:
        return self._length


class Parts:
    """The writable kio writes a response into: small writes gather in a bytearray, ``Chunks`` are kept by
    reference between them."""

    def __init__(self):
        self.parts: list = []
        self._current = bytearray()

    def write(self, data) -> int:
        if isinstance(data, Chunks):
            if self._current:
                self.parts.append(self._current)
                self._current = bytearray()
            self.parts.extend(data.parts)
            return len(data)
        self._current += data
        return len(data)

    def finish(self) -> list:
        if self._current:
            self.parts.append(self._current)
        return self.parts


def build(cls: type, value: dict[str, Any]) -> Any:
    """The ``cls`` entity of a handler's plain answer (see the module docstring). Keys the version does not
    have are ignored; that is what makes one answer serve every version."""
    kwargs = {}
    for plan in _plan(cls):
        if plan.name in value:
            kwargs[plan.name] = plan.convert(value[plan.name])
        elif plan.default is not dataclasses.MISSING:
            kwargs[plan.name] = plan.default
        elif isinstance(plan.zero, _LazyZero):
            kwargs[plan.name] = build(plan.zero.cls, {})
        else:
            kwargs[plan.name] = plan.zero
    return cls(**kwargs)


def encode(cls: type, entity: Any) -> bytes:
    """The entity's body bytes (no size prefix, no header)."""
    parts = Parts()
    entity_writer(cls)(parts, entity)
    return b"".join(parts.finish())


def field_names(cls: type) -> frozenset[str]:
    """The fields of one version's entity: what a handler may read from a request with plain attribute access."""
    return frozenset(plan.name for plan in _plan(cls))
