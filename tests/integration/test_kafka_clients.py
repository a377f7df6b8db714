"""Kafka's own clients end to end on a 3-broker cluster's Kafka listener, open and secured (issue #25 item 4).

For each of confluent-kafka, kafka-python and aiokafka: an idempotent acks=all producer writes keyed records
with headers and create times; a group of that library's consumers (each in its own thread, manual commits
after every batch) reads them; the group is closed, more records are written, and a restarted group (of
another size) resumes from the committed offsets. Checked: every produced (partition, offset) handled exactly
once across both groups, offsets of a partition handled in order and with no gap, every field equal to what
was produced, each key on the partition Kafka's murmur2 partitioner (and ADS's) picks, and the commits
visible to ADS's own admin client. The producer of each scenario is another library than its consumers, so
each library also reads what another one wrote. kcat: ``-L``, ``-P -K:`` with headers, ``-C -e -o beginning``
with a format, and ``-G`` group mode, twice (the second run resumes from the first's commits: nothing left).

The secured cluster's Kafka listener is TLS with client certificates (as its Flight listener); the clients
present the admin's certificate (User:admin, a super user: ACLs are test_kafka_groups_admin's and the
listener's tests' subject).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections import Counter

import pytest

from ads_spark.protocol.partitioner import key_partition
from tests.fixtures.cluster import start_cluster, stop_cluster
from tests.fixtures.kafka_clients import (
    LIBRARIES, PRODUCERS, Record, consume_as_group, items, kafka_endpoint, kcat_args,
)
from tests.fixtures.waiting import wait_until

pytestmark = pytest.mark.integration

PARTITIONS = 3
RECORDS_PER_ROUND = 60
KCAT_TIMEOUT_S = 60
# A small __consumer_offsets (created on the first FindCoordinator) and a short wait for a new group's members.
OVERRIDES = ["offsets.topic.num.partitions=3", "group.initial.rebalance.delay.ms=500"]
# Who writes what each library's group reads: every library produces once and consumes once.
SCENARIOS = [pytest.param(LIBRARIES[(i + 1) % len(LIBRARIES)], library, id=f"{library}-group")
             for i, library in enumerate(LIBRARIES)]


@pytest.fixture(scope="module", params=["open", "secured"])
def kafka_cluster(request, tmp_path_factory):
    cluster = start_cluster(tmp_path_factory, 3, overrides=OVERRIDES,
                            security="tls" if request.param == "secured" else "none")
    yield cluster
    stop_cluster(cluster)


@pytest.fixture(scope="module")
def ads_admin(kafka_cluster):
    from ads_spark.client import Admin

    client = Admin(kafka_cluster.client_config())
    yield client
    client.close()


@pytest.fixture(scope="module")
def endpoint(kafka_cluster):
    return kafka_endpoint(kafka_cluster)


def new_topic(ads_admin) -> str:
    name = f"kc-{uuid.uuid4().hex[:8]}"
    ads_admin.create_topic(name, partitions=PARTITIONS, replication_factor=3, config={"min.insync.replicas": "2"})
    return name


def check_landed(produced: list[Record]) -> None:
    """Each key on murmur2's partition; per partition, offsets consecutive in the order of production."""
    assert all(r.partition == key_partition(r.key, PARTITIONS) for r in produced), \
        [(r.key, r.partition) for r in produced if r.partition != key_partition(r.key, PARTITIONS)][:5]
    for partition in range(PARTITIONS):
        offsets = [r.offset for r in produced if r.partition == partition]
        first = offsets[0] if offsets else 0
        assert offsets == list(range(first, first + len(offsets))), (partition, offsets)


def check_handled_exactly_once(produced: list[Record], handled: list[Record]) -> None:
    counts = Counter((r.partition, r.offset) for r in handled)
    twice = sorted(k for k, n in counts.items() if n > 1)
    missing = sorted({(r.partition, r.offset) for r in produced} - set(counts))
    extra = sorted(set(counts) - {(r.partition, r.offset) for r in produced})
    assert (twice, missing, extra) == ([], [], []), f"twice {twice[:10]}, missing {missing[:10]}, extra {extra[:10]}"
    by_place = {(r.partition, r.offset): r for r in produced}
    differing = [(r, by_place[(r.partition, r.offset)]) for r in handled if r != by_place[(r.partition, r.offset)]]
    assert not differing, f"fields differ (consumed, produced): {differing[:3]}"
    for partition in range(PARTITIONS):
        offsets = [r.offset for r in handled if r.partition == partition]
        assert offsets == sorted(offsets), f"partition {partition} handled out of order: {offsets}"


@pytest.mark.parametrize("producer_library,consumer_library", SCENARIOS)
def test_idempotent_produce_and_a_restarted_group_resumes_exactly_once(producer_library, consumer_library,
                                                                        endpoint, ads_admin):
    topic, group = new_topic(ads_admin), f"g-{uuid.uuid4().hex[:8]}"
    produce = PRODUCERS[producer_library]
    first: list[Record] = []

    def produce_once_formed() -> None:  # so that both members take a share of the first round
        wait_until(lambda: _formed(ads_admin, group, 2), what=f"group {group} stable with 2 members")
        first.extend(produce(endpoint, topic, items(RECORDS_PER_ROUND, "a")))

    run = consume_as_group(consumer_library, endpoint, topic, group, members=2, expected=RECORDS_PER_ROUND,
                           meanwhile=produce_once_formed)
    assert not run.errors, run.errors
    check_landed(first)
    second = produce(endpoint, topic, items(RECORDS_PER_ROUND, "b"))
    check_landed(first + second)
    restarted = consume_as_group(consumer_library, endpoint, topic, group, members=3, expected=len(second))
    assert not restarted.errors, restarted.errors
    assert {r for _, r in restarted.records} <= set(second), "the restarted group read before its commits"
    check_handled_exactly_once(first + second, [r for _, r in run.records + restarted.records])
    assert len({m for m, _ in run.records}) == 2, "one member of the first group did all"
    committed = ads_admin.list_consumer_group_offsets(group)
    ends = Counter(r.partition for r in first + second)
    assert {tp.partition: meta.offset for tp, meta in committed.items() if tp.topic == topic} == \
        {p: ends[p] for p in range(PARTITIONS) if ends[p]}


def _formed(ads_admin, group: str, members: int) -> bool:
    described = ads_admin.describe_consumer_groups([group]).get(group)
    return (described is not None and described.state == "Stable" and len(described.members) == members
            and all(m.assignment for m in described.members))


def _kcat(endpoint, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run([*kcat_args(endpoint), *args], input=stdin, capture_output=True, text=True,
                          timeout=KCAT_TIMEOUT_S)
    assert done.returncode == 0, f"kcat {' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}"
    return done.stdout


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (scripts/ensure-kafka-tools.sh)")
def test_kcat_lists_produces_consumes_and_resumes_a_group(endpoint, ads_admin):
    topic, group = new_topic(ads_admin), f"kcat-{uuid.uuid4().hex[:8]}"
    listed = json.loads(_kcat(endpoint, "-L", "-J", "-t", topic))
    assert len(listed["brokers"]) == 3
    assert {(b["name"].rsplit(":", 1)[0]) for b in listed["brokers"]} == {"127.0.0.1"}
    assert [len(t["partitions"]) for t in listed["topics"] if t["topic"] == topic] == [PARTITIONS]
    lines = [f"key{i}:value {i}" for i in range(30)]
    _kcat(endpoint, "-P", "-t", topic, "-K:", "-H", "source=kcat", "-X", "enable.idempotence=true",
          "-X", "acks=all", "-X", "partitioner=murmur2_random", stdin="\n".join(lines) + "\n")
    out = _kcat(endpoint, "-C", "-t", topic, "-e", "-o", "beginning", "-f", "%p|%o|%k|%s|%h|%T\\n")
    rows = [line.split("|") for line in out.splitlines() if line]
    assert sorted((k, v) for _, _, k, v, _, _ in rows) == sorted(tuple(line.split(":", 1)) for line in lines)
    assert all(int(p) == key_partition(k.encode(), PARTITIONS) and h == "source=kcat" and int(ts) > 0
               for p, _, k, _, h, ts in rows), rows[:5]
    for partition in range(PARTITIONS):
        offsets = [int(o) for p, o, *_ in rows if int(p) == partition]
        assert offsets == list(range(len(offsets))), (partition, offsets)
    grouped = _kcat(endpoint, "-G", group, topic, "-e", "-X", "auto.offset.reset=earliest", "-f", "%p|%o\\n")
    assert sorted(line for line in grouped.splitlines() if line) == sorted(f"{p}|{o}" for p, o, *_ in rows)
    again = _kcat(endpoint, "-G", group, topic, "-e", "-X", "auto.offset.reset=earliest", "-f", "%p|%o\\n")
    assert again.strip() == "", f"the group's second run read again: {again[:300]}"


def test_group_resumes_from_its_commits_after_the_coordinator_broker_restarts(kafka_cluster, endpoint, ads_admin):
    """The group's coordinator is stopped between the rounds (its groups move to another broker, loaded from the
    replicated offsets topic), records are written while it is down, and the group resumes where it committed."""
    topic, group = new_topic(ads_admin), f"g-{uuid.uuid4().hex[:8]}"
    first = PRODUCERS["confluent-kafka"](endpoint, topic, items(RECORDS_PER_ROUND, "a"))
    run = consume_as_group("confluent-kafka", endpoint, topic, group, members=2, expected=len(first))
    coordinator = ads_admin.describe_consumer_groups([group])[group].coordinator_id
    kafka_cluster.stop_broker(coordinator)
    try:
        second = PRODUCERS["kafka-python"](endpoint, topic, items(RECORDS_PER_ROUND, "b"))
        restarted = consume_as_group("confluent-kafka", endpoint, topic, group, members=2, expected=len(second))
        moved_to = ads_admin.describe_consumer_groups([group])[group].coordinator_id
    finally:
        kafka_cluster.start_broker(coordinator)
    assert not run.errors + restarted.errors, run.errors + restarted.errors
    assert moved_to not in (coordinator, -1), moved_to
    check_handled_exactly_once(first + second, [r for _, r in run.records + restarted.records])
