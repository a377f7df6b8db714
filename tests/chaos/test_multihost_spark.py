"""Several hosts for real: ZooKeeper, three brokers and a Spark standalone cluster on network-namespace hosts.

Each host has its own address and host name; a broker and a Spark worker share each of b1..b3, the
master and the driver run on ``client``. The quickstart pipeline runs secured (mutual TLS on every
listener, the ACL authorizer, ZooKeeper over TLS) and broker host b2 is cut off by the firewall
once the transformer's first micro-batch is done. The run must show, on every worker host, reads of
the local broker through the local read path and reads of the others over the network (and never a
local read of another host's broker), and a plain consumer must find every order exactly once.
Needs root, ``ip``/``nft``, Java and the pyspark wheel; otherwise it skips and says why.
"""

from __future__ import annotations

import os

import pytest

from ads_spark.chaos.hosts import NAMESPACE_PREFIX, NETNS_ETC, list_namespaces, missing_requirements
from ads_spark.chaos.spark_standalone import WORKER_HOSTS, run_deployment, spark_missing

REASON = missing_requirements() or spark_missing()
pytestmark = [pytest.mark.chaos, pytest.mark.integration, pytest.mark.spark,
              pytest.mark.skipif(REASON is not None, reason=str(REASON))]

RECORDS = 6000
RUN_BUDGET_S = 240.0  # everything: hosts, ZooKeeper, brokers, Spark, the pipeline, the teardown


def _left_behind() -> list[str]:
    mine = f"{NAMESPACE_PREFIX}-{os.getpid()}-"
    files = os.listdir(NETNS_ETC) if os.path.isdir(NETNS_ETC) else []
    return [name for name in list_namespaces() + files if name.startswith(mine)]


@pytest.mark.timeout(600)
def test_secured_quickstart_on_spark_standalone_reads_locally_and_loses_nothing_when_a_host_is_cut(tmp_path):
    report = run_deployment(tmp_path / "run", security="tls", records=RECORDS, timeout_s=RUN_BUDGET_S + 120)
    assert _left_behind() == []  # namespaces (with their devices and processes) and hosts files all gone

    broker = report["broker_security"]
    assert broker["listeners"].startswith("SSL://") and broker["ssl.client.auth"] == "required"
    assert broker["authorizer.class.name"] and broker["zookeeper.ssl.client.enable"] == "true"
    assert report["client_security_protocol"] == "SSL"  # so every network fetch was over TLS

    hostnames = report["hostnames"]
    assert len(set(hostnames.values())) == len(hostnames)
    assert len(report["executors"]) == len(WORKER_HOSTS)
    assert sorted(report["leaders_before"].values()) == sorted(WORKER_HOSTS)

    for host in WORKER_HOSTS:
        counts = report["locality"][host]
        assert counts["local_fetches"] > 0, (host, report["locality"])
        assert counts["remote_fetches"] > 0, (host, report["locality"])
    assert report["misplaced_fetches"] == 0  # local exactly when the leader is on the reader's host

    assert report["cut"]["host"] == "b2"
    assert "b2" not in report["leaders_after"].values()
    assert report["check"] == {"read": RECORDS, "lost": 0, "duplicated": 0, "unexpected": 0}
    assert report["replayed"] == report["replay_expected"]
    assert report["wall_s"] < RUN_BUDGET_S, report
