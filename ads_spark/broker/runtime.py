"""Building a broker from its configuration, with its ZooKeeper membership wired in."""

from __future__ import annotations

from ads_spark.broker.broker import Broker
from ads_spark.config import BrokerConfig


def build_broker(config: BrokerConfig) -> Broker:
    from ads_spark.broker.zk.membership import ZkMembership

    return Broker(config, zk_factory=ZkMembership)
