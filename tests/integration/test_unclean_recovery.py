"""KIP-966's unclean recovery on a real cluster: an unclean election takes the live replica whose log holds
the most, not the first one in assignment order (the controller core asks them: replication/controller.py, broker/controller/effects.py)."""

from __future__ import annotations

import time

import pyarrow.flight as flight
import pytest

from ads_spark.client import Admin, Producer, TopicPartition
from ads_spark.protocol import wire
from ads_spark.errors import InvalidRequestError, StaleControllerEpochError
from tests.fixtures.cluster import leader_of, read_all, scrape
from tests.fixtures.waiting import wait_until

pytestmark = pytest.mark.integration


def produce_acked(cluster, topic: str, values: list[bytes]) -> None:
    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"}) as producer:
        futures = [producer.produce(topic, value=value, partition=0) for value in values]
    assert all(f.exception() is None for f in futures)


def offline_with_two_unequal_replicas(fresh_cluster, topic_name):
    """3 brokers, one partition assigned (1, 3, 2), min ISR 1: 100 records committed on {1, 2} while 3 was
    down, 50 more on 1 alone while 2 was down; then 1 dies and 2 and 3 come back. Offline (unclean election
    off); returns the cluster, an Admin and the 100 records broker 2 holds."""
    cluster = fresh_cluster(3, overrides=["replica.lag.time.max.ms=1500"])
    admin = Admin({"bootstrap.servers": cluster.bootstrap_servers})
    # Assignment order 1, 3, 2: in that order, an unclean election picks 3 before 2.
    admin.create_topic(topic_name, partitions=1, replication_factor=3, config={"min.insync.replicas": "1"},
                       replica_assignment=[[1, 3, 2]])
    wait_until(lambda: sorted(leader_of(admin, topic_name)[1]) == [1, 2, 3], what="a full ISR")
    assert leader_of(admin, topic_name)[0] == 1
    cluster.kill_broker(3)  # holds nothing of what follows
    wait_until(lambda: leader_of(admin, topic_name)[1] == [1, 2], what="the ISR to shrink to 1, 2")
    committed_on_2 = [b"c%d" % i for i in range(100)]
    produce_acked(cluster, topic_name, committed_on_2)
    cluster.kill_broker(2)
    wait_until(lambda: leader_of(admin, topic_name)[1] == [1], what="the ISR to shrink to the leader")
    produce_acked(cluster, topic_name, [b"l%d" % i for i in range(50)])  # only broker 1 has these
    cluster.kill_broker(1)
    cluster.start_broker(3)
    cluster.start_broker(2)
    wait_until(lambda: len(admin.cluster().get("brokers") or []) == 2, what="brokers 2 and 3 registered")
    time.sleep(2)  # the controller has seen both; the partition stays offline with unclean election off
    assert leader_of(admin, topic_name)[0] == -1
    return cluster, admin, committed_on_2


@pytest.mark.timeout(240)
def test_unclean_election_takes_the_replica_whose_log_holds_the_most(fresh_cluster, topic_name):
    cluster, admin, committed_on_2 = offline_with_two_unequal_replicas(fresh_cluster, topic_name)
    admin.alter_configs(topic_name, {"unclean.leader.election.enable": "true"})
    assert wait_until(lambda: (lambda leader: leader if leader >= 0 else None)(leader_of(admin, topic_name)[0]),
                      what="the unclean election") == 2
    # Only the 50 records broker 1 alone had are gone; in assignment order, 3 would have lost all 150.
    assert wait_until(lambda: read_all(cluster.bootstrap_servers, topic_name) == committed_on_2,
                      what="broker 2's records, readable")
    controller = wait_until(lambda: admin.cluster().get("controller_id"), what="a controller")
    assert scrape(cluster, controller, "ads_unclean_leader_elections_total") >= 1

    # A malformed question, or one from an older controller, gets a typed error and changes nothing (the
    # first names a controller epoch far ahead: were it recorded, broker 2 would refuse the real controller).
    port = next(b["port"] for b in cluster.state["brokers"] if b["id"] == 2)
    raw = flight.connect(f"grpc+tcp://127.0.0.1:{port}")
    asks = [({"controller_epoch": 10**6, "partitions": [{"topic": topic_name}]}, InvalidRequestError),
            ({"partitions": []}, InvalidRequestError),
            ({"controller_epoch": 0, "partitions": []}, StaleControllerEpochError)]
    for body, error in asks:
        with pytest.raises(flight.FlightError) as refused:
            list(raw.do_action(flight.Action(wire.ACTION_REPLICA_LOG_ENDS, wire.dumps(body))))
        assert isinstance(wire.to_ads_error(refused.value), error), refused.value
    # Broker 2 still obeys the controller: broker 1 comes back, truncates its 50 records away, rejoins, and
    # leadership moves back to it, broker 2 following.
    cluster.start_broker(1)
    wait_until(lambda: sorted(leader_of(admin, topic_name)[1]) == [1, 2, 3], what="the ISR to grow back to 3")
    admin.elect_leaders("preferred", [TopicPartition(topic_name, 0)])
    wait_until(lambda: leader_of(admin, topic_name)[0] == 1, what="the preferred leader")

    def role_on_2():
        status = raw.do_action(flight.Action(wire.ACTION_REPLICA_STATUS, wire.dumps({"topic": topic_name})))
        return wire.loads(next(iter(status)).body, "replica_status")["partitions"][0]["role"]

    wait_until(lambda: role_on_2() == "follower", what="broker 2 to follow")
    raw.close()
    # Right after the move, broker 1's HW may lag until its followers fetch; reads wait for it (KIP-207)
    # instead of seeing the partition end at 0 (this read found that, once in five runs).
    assert read_all(cluster.bootstrap_servers, topic_name) == committed_on_2
    admin.close()


@pytest.mark.timeout(240)
def test_a_requested_unclean_election_takes_the_replica_whose_log_holds_the_most(fresh_cluster, topic_name):
    """``ads leader-election --election-type unclean`` (Admin.elect_leaders) goes the same way."""
    cluster, admin, committed_on_2 = offline_with_two_unequal_replicas(fresh_cluster, topic_name)
    answer = admin.elect_leaders("unclean", [TopicPartition(topic_name, 0)])
    assert [item["error_code"] for item in answer["partitions"]] == [0]
    assert wait_until(lambda: (lambda leader: leader if leader >= 0 else None)(leader_of(admin, topic_name)[0]),
                      what="the unclean election") == 2
    assert wait_until(lambda: read_all(cluster.bootstrap_servers, topic_name) == committed_on_2,
                      what="broker 2's records, readable")
    admin.close()
