"""The chaos checker's workload driven through a Kafka client (issue #25 item 4): confluent-kafka writes
(acks=all, idempotent) and reads through the brokers' Kafka listeners during ``kill-leader`` and
``rolling-restart``; nothing acknowledged may be lost, no batch stored twice by one (producer, epoch), no
offset may hold two values and replicas must agree below their HW. A value librdkafka re-sent after bumping
its producer epoch (it re-sequences batches that may have been stored once messages time out: its issue
#4953, Kafka brokers store those twice too) is counted apart (``resent_under_new_epoch``, checker.py) and
printed, not failed: the protocol makes it a new write.

Short runs with a fixed seed, as the other chaos tests; the long run is ``ads chaos run --scenario
kill-leader --client kafka --duration 600``. Process faults on 127.0.0.1 only (no network namespaces), so
it runs beside the integration tests rather than in the chaos lane, which is the suite's longest.
"""

from __future__ import annotations

import pytest

from ads_spark.chaos import runner

pytestmark = [pytest.mark.chaos, pytest.mark.integration]


@pytest.mark.parametrize("scenario", ["kill-leader", "rolling-restart"])
def test_kafka_client_workload_loses_and_duplicates_nothing(scenario, tmp_path):
    report = runner.run(scenario, duration_s=12, seed=7, out=tmp_path, client="kafka")
    print(f"{scenario}: acknowledged {report['acknowledged']}, resent under a new epoch by librdkafka "
          f"{report['resent_under_new_epoch']} {report['examples'].get('resent_under_new_epoch', [])}, "
          f"errors {report['errors']}")
    assert report["client"] == "kafka" and report["acknowledged"] > 100 and report["consumer_reads"] > 100, report
    assert (report["lost"], report["duplicated"], report["inconsistent_offsets"], report["non_monotonic"],
            report["aborted_reads"], report["replica_divergence"]) == (0, 0, 0, 0, 0, 0), report
    assert report["nemesis_windows"], "no fault was injected"


def test_unknown_client_names_the_known_ones(tmp_path):
    with pytest.raises(ValueError, match="unknown client 'java'; known: ads, kafka"):
        runner.run("kill-leader", duration_s=1, seed=1, out=tmp_path, client="java")
