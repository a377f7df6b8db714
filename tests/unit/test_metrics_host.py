"""``metrics.host`` (issue #22 item 8): loopback by default, any interface when asked, bad values refused.

127.0.0.2 is a loopback address a server bound to 127.0.0.1 does not answer on, and one bound to
0.0.0.0 does: it stands for "another host" without a second machine.
"""

from __future__ import annotations

import urllib.request
from types import SimpleNamespace

import pytest

from ads_spark import config
from ads_spark.broker.metrics import BrokerMetrics, DurationHistogram
from ads_spark.errors import InvalidConfigError

REQUIRED = {"broker.id": "1", "log.dirs": "d", "zookeeper.connect": "z"}


def _serve(host_config: dict):
    broker = SimpleNamespace(replica_manager=SimpleNamespace(partitions=lambda: []),
                             config=config.BrokerConfig({**REQUIRED, **host_config}))
    metrics = BrokerMetrics(broker)
    return metrics, metrics.serve(0)


def _answers(address: str, port: int) -> bool:
    try:
        return b"ads_under_replicated_partitions" in urllib.request.urlopen(
            f"http://{address}:{port}/metrics", timeout=5).read()
    except OSError:
        return False


def test_the_endpoint_binds_loopback_by_default():
    metrics, port = _serve({})
    try:
        assert _answers("127.0.0.1", port)
        assert not _answers("127.0.0.2", port)
    finally:
        metrics.close()


def test_metrics_host_opens_the_endpoint_to_other_addresses():
    metrics, port = _serve({"metrics.host": "0.0.0.0"})
    try:
        assert _answers("127.0.0.2", port)
    finally:
        metrics.close()


@pytest.mark.parametrize("bad", ["", "host:9100", "http://host", "two words", "-dash"])
def test_a_bad_metrics_host_is_refused_naming_the_key(bad):
    with pytest.raises(InvalidConfigError, match="'metrics.host'"):
        config.BrokerConfig({**REQUIRED, "metrics.host": bad})


def test_the_election_histogram_is_cumulative_with_a_sum():
    histogram = DurationHistogram((0.01, 0.1))
    for seconds in (0.005, 0.05, 0.05, 3.0):
        histogram.observe(seconds)
    buckets, total_s = histogram.snapshot()
    assert buckets == [("0.01", 1), ("0.1", 3), ("+Inf", 4)]
    assert total_s == pytest.approx(3.105)
