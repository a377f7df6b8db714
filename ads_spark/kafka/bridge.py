"""A Kafka request's way into ADS: the same check, authorization and handler as a Flight action.

Every Kafka API that has an ADS action (metadata, topics, configs, groups, offsets) calls it here, with
the body checked by ``request_schemas`` and authorized by ``authorization.authorize_call`` exactly as
``broker/rpc/server.py`` does for a Flight call, under the Kafka connection's ``CallContext``. So a
Kafka client can do nothing a Flight client with the same principal could not, and ACLs, bounds and
typed errors have one definition. The data plane (produce, fetch) is called directly by
handlers_data.py, as the Flight server does, and authorizes there.
"""

from __future__ import annotations

from typing import Any

from ads_spark.broker.rpc import authorization, call_context
from ads_spark.broker.rpc.server import internal_error
from ads_spark.errors import AdsError, InvalidRequestError
from ads_spark.kafka.api import KafkaCall
from ads_spark.protocol import request_schemas


def call_action(call: KafkaCall, name: str, body: dict[str, Any]) -> dict[str, Any]:
    """ADS action ``name`` with ``body`` as ``call``'s principal; raises the action's AdsError."""
    broker = call.broker
    handler = broker.action_handlers().get(name)
    if handler is None:
        raise InvalidRequestError(f"action '{name}' is not served by this broker")
    checked = request_schemas.checker(name)(body)
    ctx = call.context
    authorization.authorize_call(getattr(broker, "security", None), ctx, name, checked, lambda: topic_names(call))
    with call_context.using(ctx):
        return handler(checked)


def topic_names(call: KafkaCall) -> list[str]:
    """Every topic the broker knows (init_producer_id's KIP-679 alternative needs them)."""
    return list(call.broker.metadata.topics)


def error_code_of(exc: BaseException, where: str) -> int:
    """Kafka's code for an exception of one partition or group: an AdsError's own (ADS's codes are Kafka's
    numbers); anything else is a bug of ours, logged under a reference, answered UNKNOWN_SERVER_ERROR."""
    if isinstance(exc, AdsError):
        return int(exc.code)
    return int(internal_error(where).code)
