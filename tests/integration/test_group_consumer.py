"""The Python consumer in a group, against a real broker and ZooKeeper: three member processes over six
partitions; one is SIGKILLed mid-stream; the other two take its partitions once the coordinator expires its
session and continue from the committed offsets. Checked from what every member wrote down as it consumed:
no offset skipped, and every record consumed twice lies in the killed member's uncommitted window (offsets
it had consumed beyond what was committed when it died); the duplicates are counted and printed.

One broker (the coordinator's failover is test_group_coordinator.py's), small session and rebalance
timeouts, no initial rebalance delay, auto commit every 100 ms. A second test restarts a static member
(group.instance.id) within its session timeout.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ads_spark.client import Admin, Consumer, Producer, TopicPartition
from tests.fixtures.cluster import start_cluster, stop_cluster
from tests.fixtures.waiting import wait_until

TOPIC = "orders"
PARTITIONS = 6
GROUP = "billing"
SESSION_TIMEOUT_MS = 1500
OVERRIDES = {"offsets.topic.num.partitions": "2", "offsets.topic.replication.factor": "1",
             "group.min.session.timeout.ms": "500", "group.initial.rebalance.delay.ms": "0"}
REPO = Path(__file__).resolve().parents[2]

# A member: polls, writes "A p,p" when assigned, "R p,p" when revoked and "M p offset" per record consumed,
# flushed after every poll (what a SIGKILL leaves is what it had consumed), until the stop file appears.
MEMBER = r"""
import os, sys, time
from ads_spark.client import Consumer
bootstrap, group, topic, out_path, stop_path, strategy = sys.argv[1:7]
out = open(out_path, "a", buffering=1)
def names(tps):
    return ",".join(str(tp.partition) for tp in tps)
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "session.timeout.ms": "%(session)d", "heartbeat.interval.ms": "200",
                     "max.poll.interval.ms": "10000", "auto.commit.interval.ms": "100", "max.poll.records": "5",
                     "fetch.max.wait.ms": "100", "partition.assignment.strategy": strategy})
consumer.subscribe([topic], on_assign=lambda c, tps: out.write(f"A {names(tps)}\n"),
                   on_revoke=lambda c, tps: out.write(f"R {names(tps)}\n"))
while not os.path.exists(stop_path):
    for record in consumer.poll(0.2):
        out.write(f"M {record.partition} {record.offset}\n")
    out.flush()
    time.sleep(0.01)  # slow enough that the SIGKILL lands mid-stream
consumer.close()
out.write("CLOSED\n")
""" % {"session": SESSION_TIMEOUT_MS}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    local = start_cluster(tmp_path_factory, 1, [f"{key}={value}" for key, value in OVERRIDES.items()])
    yield local
    stop_cluster(local)


def produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    with Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5}) as producer:
        futures = [producer.produce(topic, value=str(i).encode(), partition=i % PARTITIONS)
                   for i in range(start, start + count)]
        for future in futures:
            future.result(timeout=30)


class Member:
    def __init__(self, name: str, directory: Path, bootstrap: str, group: str, topic: str, strategy: str):
        self.out = directory / f"{name}.log"
        self.stop = directory / f"{name}.stop"
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.process = subprocess.Popen([sys.executable, "-c", MEMBER, bootstrap, group, topic, str(self.out),
                                         str(self.stop), strategy], env=env, cwd=REPO)

    def lines(self) -> list[str]:
        if not self.out.exists():
            return []
        text = self.out.read_text()
        complete = text[:text.rfind("\n") + 1] if "\n" in text else ""  # a SIGKILL may cut the last line
        return complete.splitlines()

    def assigned(self) -> set[int]:
        """The partitions this member holds according to its callbacks (eager: each A is the whole set after an
        R of everything; cooperative: A adds, R removes)."""
        held: set[int] = set()
        for line in self.lines():
            if line.startswith(("A ", "R ")):
                parts = {int(p) for p in line[2:].split(",") if p}
                held = held | parts if line[0] == "A" else held - parts
        return held

    def consumed(self) -> list[tuple[int, int]]:
        return [(int(p), int(o)) for p, o in (line.split()[1:] for line in self.lines() if line.startswith("M "))]


@pytest.mark.parametrize("strategy", ["range,cooperative-sticky", "cooperative-sticky"])
def test_three_members_one_killed_the_others_take_over_from_the_committed_offsets(cluster, tmp_path, strategy):
    """The default strategies (eager rebalances with range), and cooperative-sticky alone (incremental)."""
    bootstrap = cluster.bootstrap_servers
    topic, group = f"{TOPIC}-{len(strategy)}", f"{GROUP}-{len(strategy)}"
    admin = Admin({"bootstrap.servers": bootstrap})
    try:
        admin.create_topic(topic, partitions=PARTITIONS, replication_factor=1)
    finally:
        admin.close()
    produce(bootstrap, topic, 0, 1200)
    members = [Member(name, tmp_path, bootstrap, group, topic, strategy) for name in ("a", "b", "c")]
    try:
        wait_until(lambda: all(len(m.assigned()) == 2 for m in members), 60, what="each member to hold 2 partitions")
        victim, survivors = members[1], [members[0], members[2]]
        victim_partitions = victim.assigned()
        wait_until(lambda: len(victim.consumed()) >= 30, 30, what="the victim to consume")
        victim.process.send_signal(signal.SIGKILL)
        victim.process.wait(10)
        killed_at = time.monotonic()
        # What was committed when it died: nobody else commits its partitions until the session expires.
        watcher = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": "false"})
        try:
            committed = {tp.partition: tp.offset for tp in watcher.committed(
                [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)}
        finally:
            watcher.close()
        victim_seen = victim.consumed()
        produce(bootstrap, topic, 1200, 600)  # more arrives while the survivors take over
        wait_until(lambda: all(m.assigned() | survivors[1 - i].assigned() == set(range(PARTITIONS))
                               for i, m in enumerate(survivors)), 30, what="the survivors to hold every partition")
        takeover_s = time.monotonic() - killed_at
        end_offsets = {p: 1800 // PARTITIONS for p in range(PARTITIONS)}
        wait_until(lambda: {o for m in members for o in m.consumed()} >= {
            (p, o) for p in range(PARTITIONS) for o in range(end_offsets[p])}, 60, what="every record consumed")
        for m in survivors:
            m.stop.touch()
        for m in survivors:
            assert m.process.wait(30) == 0
    finally:
        for m in members:
            if m.process.poll() is None:
                m.process.kill()
                m.process.wait(10)

    seen = [o for m in members for o in m.consumed()]
    assert set(seen) == {(p, o) for p in range(PARTITIONS) for o in range(end_offsets[p])}  # nothing skipped
    duplicates = [o for o in set(seen) if seen.count(o) > 1]
    victim_max = {p: max((o for q, o in victim_seen if q == p), default=-1) for p in victim_partitions}
    window = {(p, o) for p in victim_partitions for o in range(max(committed[p], 0), victim_max[p] + 1)}
    assert set(duplicates) <= window, sorted(set(duplicates) - window)[:10]
    assert all(seen.count(o) == 2 for o in duplicates)
    print(f"{strategy}: takeover after SIGKILL: {takeover_s:.2f} s (session.timeout.ms={SESSION_TIMEOUT_MS}); "
          f"duplicates: {len(duplicates)} (uncommitted window: {len(window)} records)")
    assert takeover_s < SESSION_TIMEOUT_MS / 1000 + 5  # the expiry, then one rebalance
    assert all("CLOSED" in m.lines() for m in survivors)


def test_a_static_member_restarted_within_its_session_gets_its_partitions_back_without_a_rebalance(cluster):
    """KIP-345: close does not leave; the same group.instance.id rejoining in time takes its old assignment, and
    the other member sees no revocation and stays in the same generation."""
    bootstrap, topic, group = cluster.bootstrap_servers, "static-orders", "static-group"
    admin = Admin({"bootstrap.servers": bootstrap})
    try:
        admin.create_topic(topic, partitions=PARTITIONS, replication_factor=1)
    finally:
        admin.close()
    events: dict[str, list] = {"i1": [], "i2": []}

    def member(instance: str) -> Consumer:
        # range alone: the cooperative-sticky subscription carries the member's generation (as Kafka's does), so
        # a restarted member's metadata differs, and the coordinator rebalances when it does (group_membership).
        return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.instance.id": instance,
                         "session.timeout.ms": "6000", "heartbeat.interval.ms": "200", "max.poll.interval.ms": "10000",
                         "partition.assignment.strategy": "range"})

    def run(consumer: Consumer, instance: str, stop: threading.Event) -> None:
        consumer.subscribe([topic], on_assign=lambda c, tps: events[instance].append(("A", {tp.partition for tp in tps})),
                           on_revoke=lambda c, tps: events[instance].append(("R", {tp.partition for tp in tps})))
        while not stop.is_set():
            consumer.poll(0.1)

    def held(instance: str) -> set[int]:
        return events[instance][-1][1] if events[instance] and events[instance][-1][0] == "A" else set()

    first, second = member("i1"), member("i2")
    stops = {"i1": threading.Event(), "i2": threading.Event()}
    threads = [threading.Thread(target=run, args=(first, "i1", stops["i1"]), daemon=True),
               threading.Thread(target=run, args=(second, "i2", stops["i2"]), daemon=True)]
    restarted = None
    try:
        for thread in threads:
            thread.start()
        wait_until(lambda: len(held("i1")) == 3 and len(held("i2")) == 3, 30, what="both static members to hold 3")
        before, generation = held("i1"), second._group.generation_id
        stops["i1"].set()
        threads[0].join(10)
        first.close()
        seen_by_i2 = len(events["i2"])
        events["i1"].clear()
        restarted = member("i1")
        stops["i1"] = threading.Event()
        threads[0] = threading.Thread(target=run, args=(restarted, "i1", stops["i1"]), daemon=True)
        started = time.monotonic()
        threads[0].start()
        wait_until(lambda: held("i1") == before, 10, what="the restarted member to get its partitions back")
        rejoined_s = time.monotonic() - started
        assert len(events["i2"]) == seen_by_i2  # i2 was neither revoked nor reassigned
        assert restarted._group.generation_id == second._group.generation_id == generation
        print(f"static member back with its partitions after {rejoined_s:.2f} s, generation {generation} kept")
        assert rejoined_s < 5  # well within the 6 s session timeout: no expiry, no rebalance
    finally:
        for stop in stops.values():
            stop.set()
        for thread in threads:
            thread.join(10)
        for consumer in (second, restarted):
            if consumer is not None:
                consumer.close()
