"""``ads consumer-groups`` on a real 3-broker cluster: --list, --describe (offsets, log end, lag, members),
--reset-offsets (every scenario, --dry-run and --execute, refused while the group has members), --delete-offsets,
--delete, --json, the one-line errors, and the coordinator's ``ads_consumer_group_lag`` gauge agreeing with
--describe. The CLI runs in this process (``cli.main.main``) against the cluster's brokers; a group member is
made with the raw join/sync actions, so the test needs no group consumer."""

from __future__ import annotations

import base64
import json
import uuid

import pytest

from ads_spark.cli.main import main
from ads_spark.client import Admin, Producer
from ads_spark.client.consumer_protocol import Assignment, Subscription, encode_assignment, encode_subscription
from ads_spark.errors import ErrorCode
from ads_spark.protocol import wire
from tests.fixtures.cluster import metric_values, start_cluster, stop_cluster
from tests.fixtures.waiting import wait_until

pytestmark = pytest.mark.integration

# Small settings so the test is quick: a 3-partition __consumer_offsets, no initial rebalance delay.
OVERRIDES = ["offsets.topic.num.partitions=3", "group.initial.rebalance.delay.ms=0",
             "group.min.session.timeout.ms=1000"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    started = start_cluster(tmp_path_factory, 3, OVERRIDES)
    yield started
    stop_cluster(started)


@pytest.fixture(scope="module")
def admin(cluster):
    client = Admin({"bootstrap.servers": cluster.bootstrap_servers})
    yield client
    client.close()


def ads(capsys, cluster, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["consumer-groups", "--bootstrap-server", cluster.bootstrap_servers, *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def ads_json(capsys, cluster, *argv):
    code, out, err = ads(capsys, cluster, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def one_line_error(capsys, cluster, *argv) -> str:
    code, out, err = ads(capsys, cluster, *argv)
    assert code == 1 and out == "" and err.count("\n") == 1, (code, out, err)
    return err


def topic_with_records(admin, cluster, counts: list[int]) -> str:
    topic = f"g-{uuid.uuid4().hex[:8]}"
    admin.create_topic(topic, partitions=len(counts), replication_factor=3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    try:
        for partition, count in enumerate(counts):
            for i in range(count):
                producer.produce(topic, value=f"v{i}".encode(), partition=partition)
        assert producer.flush(30) == 0
    finally:
        producer.close()
    return topic


def rows(described) -> dict[int, tuple]:
    return {r["partition"]: (r["current_offset"], r["log_end_offset"], r["lag"]) for r in described["partitions"]}


def test_reset_describe_delete_offsets_and_delete(capsys, cluster, admin):
    topic, group = topic_with_records(admin, cluster, [10, 4]), f"grp-{uuid.uuid4().hex[:8]}"
    assert "does not exist" in one_line_error(capsys, cluster, "--describe", "--group", group)

    planned = ads_json(capsys, cluster, "--reset-offsets", "--group", group, "--topic", topic, "--to-offset", "3",
                       "--dry-run")
    assert not planned["executed"] and [p["new_offset"] for p in planned["partitions"]] == [3, 3]
    assert "does not exist" in one_line_error(capsys, cluster, "--describe", "--group", group)  # dry run: nothing

    ads_json(capsys, cluster, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
    described = ads_json(capsys, cluster, "--describe", "--group", group)
    assert described["members"] == [] and rows(described) == {0: (0, 10, 10), 1: (0, 4, 4)}

    ads_json(capsys, cluster, "--reset-offsets", "--group", group, "--topic", topic, "--shift-by", "2", "--execute")
    assert rows(ads_json(capsys, cluster, "--describe", "--group", group)) == {0: (2, 10, 8), 1: (2, 4, 2)}
    ads_json(capsys, cluster, "--reset-offsets", "--group", group, "--topic", f"{topic}:1", "--to-latest",
             "--execute")
    assert rows(ads_json(capsys, cluster, "--describe", "--group", group)) == {0: (2, 10, 8), 1: (4, 4, 0)}

    series = f'ads_consumer_group_lag{{group="{group}",partition="0",topic="{topic}"}}'
    wait_until(lambda: sorted(metric_values(cluster, series).values()) == [0.0, 0.0, 8.0], timeout_s=30,
               what="the coordinator (one broker) to export lag 8 for partition 0")

    code, out, _ = ads(capsys, cluster, "--describe", "--group", group)
    assert code == 0 and f"Consumer group '{group}' has no active members." in out
    assert "CURRENT-OFFSET" in out and "LOG-END-OFFSET" in out and "LAG" in out
    code, out, _ = ads(capsys, cluster, "--list")
    assert code == 0 and group in out.split()
    assert group in [g["group_id"] for g in ads_json(capsys, cluster, "--list")["groups"]]

    ads_json(capsys, cluster, "--delete-offsets", "--group", group, "--topic", f"{topic}:1")
    assert rows(ads_json(capsys, cluster, "--describe", "--group", group)) == {0: (2, 10, 8)}
    assert "no committed offsets for topic" in one_line_error(capsys, cluster, "--delete-offsets", "--group", group,
                                                              "--topic", f"{topic}:1")

    code, out, _ = ads(capsys, cluster, "--delete", "--group", group)
    assert code == 0 and "was successful" in out
    assert group not in ads(capsys, cluster, "--list")[1].split()
    assert "does not exist" in one_line_error(capsys, cluster, "--describe", "--group", group)


def join_as_member(admin, group: str, topic: str) -> str:
    """One member that joins, leads and syncs an assignment of partition 0 (raw actions: KIP-394's two joins)."""
    body = {"group_id": group, "member_id": "", "client_id": "cli-test", "session_timeout_ms": 30_000,
            "rebalance_timeout_ms": 10_000, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata_b64": base64.b64encode(
                encode_subscription(Subscription(topics=(topic,)))).decode()}]}
    groups = admin._groups
    _, answer = groups.call_coordinator(group, wire.ACTION_JOIN_GROUP, body)
    if answer.get("error_code") == ErrorCode.MEMBER_ID_REQUIRED:
        _, answer = groups.call_coordinator(group, wire.ACTION_JOIN_GROUP, {**body, "member_id": answer["member_id"]})
    assert answer.get("error_code", 0) == 0, answer
    member_id = answer["member_id"]
    assignment = base64.b64encode(encode_assignment(Assignment(partitions=((topic, 0),)))).decode()
    _, synced = groups.call_coordinator(group, wire.ACTION_SYNC_GROUP, {
        "group_id": group, "generation_id": answer["generation_id"], "member_id": member_id,
        "assignments": [{"member_id": member_id, "assignment_b64": assignment}]})
    assert synced.get("error_code", 0) == 0, synced
    return member_id


def test_a_group_with_members_is_described_and_not_reset_or_deleted(capsys, cluster, admin):
    topic, group = topic_with_records(admin, cluster, [5, 0]), f"grp-{uuid.uuid4().hex[:8]}"
    member_id = join_as_member(admin, group, topic)
    described = ads_json(capsys, cluster, "--describe", "--group", group)
    assert described["state"] == "Stable"
    assert [(m["member_id"], m["assignment"]) for m in described["members"]] == [
        (member_id, [{"topic": topic, "partition": 0}])]
    row = described["partitions"][0]  # assigned, nothing committed: no current offset, no lag
    assert (row["topic"], row["partition"], row["current_offset"], row["log_end_offset"], row["lag"],
            row["member_id"]) == (topic, 0, None, 5, None, member_id) and row["host"]

    error = one_line_error(capsys, cluster, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
                           "--execute")
    assert f"group '{group}'" in error and "inactive" in error and "1 member" in error
    assert "NON_EMPTY_GROUP" in one_line_error(capsys, cluster, "--delete", "--group", group)


def test_errors_name_the_problem_in_one_line(capsys, cluster, admin):
    group = f"grp-{uuid.uuid4().hex[:8]}"
    assert "does not exist" in one_line_error(capsys, cluster, "--reset-offsets", "--group", group, "--topic",
                                              "no-such-topic", "--to-earliest", "--dry-run")
    topic = topic_with_records(admin, cluster, [1])
    assert "no partition 7" in one_line_error(capsys, cluster, "--reset-offsets", "--group", group, "--topic",
                                              f"{topic}:7", "--to-earliest", "--dry-run")
    assert "no committed offset to shift" in one_line_error(capsys, cluster, "--reset-offsets", "--group", group,
                                                            "--topic", topic, "--shift-by", "1", "--dry-run")
    assert "invalid group id" in one_line_error(capsys, cluster, "--describe", "--group", "x" * 300).lower()
