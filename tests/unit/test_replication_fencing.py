"""KIP-380 fencing of controller requests (replication/fencing.py), and its users agreeing with it.

The rule: an older controller epoch than the one obeyed is STALE_CONTROLLER_EPOCH;
a broker epoch older than the broker's registration (or any, before it has
registered) is STALE_BROKER_EPOCH; a refused request leaves the remembered
controller epoch as it was.
"""

from __future__ import annotations

import pytest

from ads_spark.broker.metadata_cache import MetadataCache
from ads_spark.errors import ErrorCode, StaleControllerEpochError
from ads_spark.replication.fencing import NO_BROKER_EPOCH, check_control_request


def test_newer_or_same_controller_epoch_is_obeyed_and_remembered():
    assert check_control_request(3, 3).obeyed and check_control_request(3, 3).controller_epoch == 3
    verdict = check_control_request(3, 5)
    assert verdict.obeyed and verdict.controller_epoch == 5


def test_older_controller_epoch_is_refused_and_the_seen_epoch_kept():
    verdict = check_control_request(5, 4)
    assert verdict.error is ErrorCode.STALE_CONTROLLER_EPOCH and verdict.controller_epoch == 5
    assert "4" in verdict.message and "5" in verdict.message


@pytest.mark.parametrize("request_epoch", [None, NO_BROKER_EPOCH])
def test_no_broker_epoch_in_the_request_is_not_checked(request_epoch):
    for current in (NO_BROKER_EPOCH, 7):
        assert check_control_request(1, 1, request_broker_epoch=request_epoch, current_broker_epoch=current).obeyed


def test_broker_epoch_of_an_earlier_registration_is_refused_and_changes_nothing():
    verdict = check_control_request(2, 9, request_broker_epoch=10, current_broker_epoch=12)
    assert verdict.error is ErrorCode.STALE_BROKER_EPOCH
    assert verdict.controller_epoch == 2, "a refused request must not raise the remembered controller epoch"


def test_current_broker_epoch_is_obeyed():
    verdict = check_control_request(2, 2, request_broker_epoch=12, current_broker_epoch=12)
    assert verdict.obeyed and verdict.controller_epoch == 2


def test_a_newer_registration_than_the_broker_knows_is_obeyed():
    # The controller saw the new znode before the broker's own registration call returned.
    assert check_control_request(2, 2, request_broker_epoch=13, current_broker_epoch=12).obeyed


def test_unregistered_broker_refuses_any_addressed_request():
    verdict = check_control_request(2, 2, request_broker_epoch=12, current_broker_epoch=NO_BROKER_EPOCH)
    assert verdict.error is ErrorCode.STALE_BROKER_EPOCH and verdict.controller_epoch == 2


def test_a_stale_broker_epoch_wins_over_a_stale_controller_epoch():
    # Both stale: either refusal changes nothing; Kafka checks the broker epoch first, and so do we.
    assert check_control_request(5, 4, request_broker_epoch=1, current_broker_epoch=2).error \
        is ErrorCode.STALE_BROKER_EPOCH


def test_metadata_cache_fences_with_the_same_rule():
    cache = MetadataCache()
    cache.apply_update({"controller_epoch": 4, "controller_id": 1, "brokers": []})
    with pytest.raises(StaleControllerEpochError):
        cache.apply_update({"controller_epoch": 3, "controller_id": 2, "brokers": []})
    assert (cache.controller_epoch, cache.controller_id) == (4, 1)
    cache.apply_update({"controller_epoch": 4, "controller_id": 1, "brokers": []})
    assert cache.controller_epoch == 4


class _Broker:
    """Just enough of a broker for ControlHandlers' fence: touching anything else fails the test."""

    broker_id = 2

    def __init__(self, broker_epoch):
        self._broker_epoch = broker_epoch

    def broker_epoch(self):
        return self._broker_epoch

    def __getattr__(self, name):
        raise AssertionError(f"a refused request touched broker.{name}")


def test_control_handlers_refuse_a_stale_broker_epoch_before_anything_else():
    from ads_spark.broker.rpc.control_handlers import ControlHandlers
    from ads_spark.errors import StaleBrokerEpochError

    handlers = ControlHandlers(_Broker(broker_epoch=50))
    entry = {"topic": "t", "partition": 0, "leader": 2, "leader_epoch": 9, "isr": [2], "replicas": [2]}
    with pytest.raises(StaleBrokerEpochError):
        handlers.handle_leader_and_isr({"controller_epoch": 10**6, "broker_epoch": 49, "partitions": [entry]})
    assert handlers._controller_epoch == -1  # not recorded: the real controller is still obeyed
    with pytest.raises(StaleControllerEpochError):  # the controller epoch fence still applies to everything
        handlers._controller_epoch = 7
        handlers.handle_stop_replica({"controller_epoch": 6, "partitions": []})
