"""The producer's settings: its config keys read once, into numbers the queue and the sender use.

Owns the reading of every producer key that shapes delivery (``acks``, ``linger.ms``, ``batch.size``,
``max.request.size``, the timeouts, ``max.in.flight.requests.per.connection``, ``retry.backoff.ms``,
``retries``, ``enable.idempotence``, ``ads.producer.id``/``ads.producer.epoch``) and the rules that tie
them together: Kafka's idempotence default (on unless acks is not all or retries is 0), its refusals
(idempotence asked for with acks other than all, or with no retries), and a caller-chosen identity
implying idempotence without coalescing. Apart from ``producer.py`` so that those rules read in one place
and are checked before any thread starts; the producer copies the result into plain attributes (read on
its hot path). Unknown keys are refused by ``config.check_client_keys`` before this runs; metadata keys
(``bootstrap.servers``, ``metadata.max.age.ms``) belong to ``protocol/connection.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ads_spark.config import parse_bool, parse_int
from ads_spark.errors import InvalidConfigError, InvalidRequestError
from ads_spark.protocol import wire

# ``max.request.size``: below the brokers' default message.max.bytes (8 MiB); a topic that accepts less
# gets the parts one by one (``Producer._split_refused_locked``).
DEFAULT_REQUEST_BYTES_MAX = 4 << 20
RETRIES_DEFAULT = 2**31 - 1  # Kafka's: resends are bounded by delivery.timeout.ms, not counted


@dataclass(frozen=True)
class ProducerSettings:
    acks: int  # -1 (all), 1 or 0
    linger_ms: int
    batch_size_bytes: int
    request_bytes_max: int  # queued batches of a partition leave together up to this size; 0: never coalesced
    delivery_timeout_ms: int
    request_timeout_ms: int
    max_in_flight: int
    retry_backoff_ms: int
    retries: int
    idempotent: bool
    producer_id: int  # -1: asked of a broker before the first send
    producer_epoch: int
    caller_chosen_id: bool  # ``ads.producer.id`` given: its numbering is never reset


def parse_producer_settings(config: Mapping[str, Any]) -> ProducerSettings:
    """The settings of ``config``; a bad value or a forbidden combination raises naming the key."""
    def setting(name: str, default: int) -> int:  # a bad value: InvalidConfigError naming the key
        return parse_int(config.get(name, default), name=name)

    acks = wire.parse_acks(config.get("acks", "all"))
    linger_ms = setting("linger.ms", 5)
    batch_size_bytes = setting("batch.size", 1 << 20)
    request_bytes_max = setting("max.request.size", DEFAULT_REQUEST_BYTES_MAX)
    delivery_timeout_ms = setting("delivery.timeout.ms", 120_000)
    request_timeout_ms = setting("request.timeout.ms", 30_000)
    max_in_flight = setting("max.in.flight.requests.per.connection", 5)
    retry_backoff_ms = setting("retry.backoff.ms", 100)
    # Resends of a batch after a retriable error, on top of delivery.timeout.ms (Kafka's default: no
    # count limit, the timeout bounds them). 0: a batch fails on its first retriable error.
    retries = parse_int(config.get("retries", RETRIES_DEFAULT), name="retries", min_value=0)
    # Kafka's default: idempotent unless the user asked for acks other than all (which it requires),
    # or for no retries (an idempotent producer must be able to resend a batch whose outcome it missed).
    idempotence = config.get("enable.idempotence")
    if idempotence is None:
        idempotent = acks == -1 and retries > 0
    else:
        idempotent = parse_bool(idempotence, name="enable.idempotence")
        if idempotent and acks != -1:
            raise InvalidRequestError("enable.idempotence=true requires acks=all")
        if idempotent and retries == 0:
            raise InvalidConfigError("invalid value 0 for 'retries': enable.idempotence=true needs retries > 0")
    producer_id, producer_epoch = -1, -1
    caller_chosen_id = config.get("ads.producer.id") is not None
    if caller_chosen_id:
        # A caller-chosen identity (the Spark sink derives one per query, micro-batch and task), so that
        # a re-executed write numbers its batches exactly as the first attempt did and the brokers
        # drop what they already have. Idempotence is implied.
        if acks != -1:
            raise InvalidRequestError("ads.producer.id requires acks=all")
        idempotent = True
        producer_id = parse_int(config["ads.producer.id"], name="ads.producer.id")
        producer_epoch = parse_int(config.get("ads.producer.epoch", 0), name="ads.producer.epoch")
        if producer_id < 0 or producer_epoch < 0:
            raise InvalidRequestError("ads.producer.id and ads.producer.epoch must be >= 0")
        # The brokers recognise a replayed batch by its exact sequence range, so a replay must cut the
        # same batches as the first attempt: no coalescing, whose cuts depend on timing.
        request_bytes_max = 0
    return ProducerSettings(
        acks=acks, linger_ms=linger_ms, batch_size_bytes=batch_size_bytes, request_bytes_max=request_bytes_max,
        delivery_timeout_ms=delivery_timeout_ms, request_timeout_ms=request_timeout_ms, max_in_flight=max_in_flight,
        retry_backoff_ms=retry_backoff_ms, retries=retries, idempotent=idempotent, producer_id=producer_id,
        producer_epoch=producer_epoch, caller_chosen_id=caller_chosen_id)
