"""The partition state znode at the ZooKeeper boundary: what the core's state becomes, and what is refused."""

import json

import pytest

from ads_spark.broker.zk.model import PartitionStateZnode
from ads_spark.errors import InvalidRequestError
from ads_spark.replication.state import NO_LEADER, LeaderAndIsr


def test_the_last_known_elr_goes_to_zookeeper_and_back():
    state = LeaderAndIsr(NO_LEADER, 6, (), (), 12, 7, (), (1, 3))
    znode = PartitionStateZnode.from_leader_and_isr(state)
    assert json.loads(znode.to_json())["last_known_elr"] == [1, 3]
    assert PartitionStateZnode.from_json(znode.to_json()).to_leader_and_isr(12) == state
    # A state written before the field existed reads as none recorded.
    old = {"leader": -1, "leader_epoch": 6, "isr": [], "elr": []}
    assert PartitionStateZnode.from_dict(old).to_leader_and_isr(3).last_known_elr == ()


@pytest.mark.parametrize("field,value", [("last_known_elr", "1,2"), ("last_known_elr", [1, "2"]),
                                         ("last_known_elr", [1, 1]), ("isr", [-2]), ("elr", [True]),
                                         ("last_known_elr", {"1": 2})])
def test_a_member_list_that_is_not_broker_ids_is_refused_naming_the_field(field, value):
    with pytest.raises(InvalidRequestError, match=field):
        PartitionStateZnode.from_dict({"leader": -1, "leader_epoch": 0, "isr": [], field: value})
