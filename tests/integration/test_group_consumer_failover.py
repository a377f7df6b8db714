"""The Python group consumer across its coordinator's crash: two member processes consume a topic of a
3-broker cluster, committing synchronously every few records; the broker that is the group's coordinator
(the leader of the group's partition of ``__consumer_offsets``, RF 3, min ISR 2) is SIGKILLed mid-stream.
The members must find the new coordinator and finish: every record consumed, none skipped, every record
consumed twice lies in an uncommitted window of the member that first consumed it (offsets it consumed beyond
its last successful commit of that partition before giving the partition up), and at the end the group's
committed offsets are the log ends (``ads consumer-groups --describe``'s rows: lag 0 everywhere).

test_group_consumer.py kills a member on one broker; test_group_coordinator.py kills the coordinator under a
raw client. This module is the two together: the real client's rediscovery, commits and rejoin.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ads_spark.cli.groups_cmd import describe_group
from ads_spark.client import Admin, Producer
from tests.fixtures.cluster import start_cluster, stop_cluster
from tests.fixtures.waiting import wait_until

TOPIC, GROUP = "payments", "ledger"
PARTITIONS, RECORDS = 4, 2400
COMMIT_EVERY, MAX_POLL_RECORDS = 20, 5
OVERRIDES = {"offsets.topic.num.partitions": "2", "offsets.topic.replication.factor": "3",
             "group.min.session.timeout.ms": "500", "group.initial.rebalance.delay.ms": "0",
             "zookeeper.session.timeout.ms": "6000", "replica.lag.time.max.ms": "3000",
             "controlled.shutdown.enable": "false"}
REPO = Path(__file__).resolve().parents[2]

# A member: writes "A p,p" / "R p,p" / "L p,p" (assigned / revoked / lost), "M p offset" per record, and after
# each successful synchronous commit "C p:offset p:offset" (what it committed), "F error" for a failed one.
# It commits every COMMIT_EVERY records and when a poll comes back empty with records uncommitted, so that an
# idle group's committed offsets reach the log ends. Lines are flushed after every poll.
MEMBER = r"""
import os, sys, time
from ads_spark.client import Consumer
from ads_spark.errors import AdsError
bootstrap, group, topic, out_path, stop_path = sys.argv[1:6]
out = open(out_path, "a", buffering=1)
def names(tps):
    return ",".join(str(tp.partition) for tp in tps)
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "enable.auto.commit": "false", "session.timeout.ms": "3000", "heartbeat.interval.ms": "300",
                     "max.poll.interval.ms": "20000", "max.poll.records": "%(max_poll)d",
                     "fetch.max.wait.ms": "100", "default.api.timeout.ms": "15000"})
consumer.subscribe([topic], on_assign=lambda c, tps: out.write(f"A {names(tps)}\n"),
                   on_revoke=lambda c, tps: out.write(f"R {names(tps)}\n"),
                   on_lost=lambda c, tps: out.write(f"L {names(tps)}\n"))
uncommitted = 0
while not os.path.exists(stop_path):
    records = consumer.poll(0.2)
    for record in records:
        out.write(f"M {record.partition} {record.offset}\n")
    uncommitted += len(records)
    if uncommitted >= %(every)d or (uncommitted and not records):
        try:
            done = consumer.commit(asynchronous=False)
            out.write("C " + " ".join(f"{tp.partition}:{tp.offset}" for tp in done) + "\n")
            uncommitted = 0
        except AdsError as exc:
            out.write(f"F {type(exc).__name__}\n")
    out.flush()
    time.sleep(0.02)  # slow enough that the coordinator dies mid-stream
consumer.close()
out.write("CLOSED\n")
""" % {"max_poll": MAX_POLL_RECORDS, "every": COMMIT_EVERY}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    local = start_cluster(tmp_path_factory, 3, [f"{key}={value}" for key, value in OVERRIDES.items()])
    yield local
    stop_cluster(local)


class Member:
    def __init__(self, name: str, directory: Path, bootstrap: str):
        self.name, self.out, self.stop = name, directory / f"{name}.log", directory / f"{name}.stop"
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.process = subprocess.Popen([sys.executable, "-c", MEMBER, bootstrap, GROUP, TOPIC, str(self.out),
                                         str(self.stop)], env=env, cwd=REPO)

    def lines(self) -> list[str]:
        text = self.out.read_text() if self.out.exists() else ""
        return text[:text.rfind("\n") + 1].splitlines()

    def consumed(self) -> list[tuple[int, int]]:
        return [(int(p), int(o)) for p, o in (line.split()[1:] for line in self.lines() if line.startswith("M "))]

    def commits(self) -> int:
        return sum(line.startswith("C ") for line in self.lines())

    def last_committed(self) -> dict[int, int]:
        """Per partition, the offset of this member's last acknowledged commit of it."""
        return {int(p): int(o) for line in self.lines() if line.startswith("C ")
                for p, o in (item.split(":") for item in line[2:].split())}

    def assigned(self) -> set[int]:
        held: set[int] = set()
        for line in self.lines():
            if line[:2] in ("A ", "R ", "L "):
                parts = {int(p) for p in line[2:].split(",") if p}
                held = held | parts if line[0] == "A" else held - parts
        return held

    def uncommitted_windows(self) -> set[tuple[int, int]]:
        """Every (partition, offset) this member consumed and had not committed past when it gave the partition
        up (revoked, lost, or still held at the end): the records another member may consume again."""
        windows: set[tuple[int, int]] = set()
        pending: dict[int, set[int]] = {}
        for line in self.lines():
            kind, rest = (line[:1], line[2:]) if line[1:2] == " " else ("", "")
            if kind == "M":
                p, o = map(int, rest.split())
                pending.setdefault(p, set()).add(o)
            elif kind == "C":
                for item in rest.split():
                    p, o = map(int, item.split(":"))
                    pending[p] = {x for x in pending.get(p, set()) if x >= o}
            elif kind in ("R", "L"):
                for p in (int(x) for x in rest.split(",") if x):
                    windows |= {(p, o) for o in pending.pop(p, set())}
        return windows | {(p, o) for p, offsets in pending.items() for o in offsets}


def coordinator_of(admin: Admin) -> int:
    return admin.describe_consumer_groups([GROUP])[GROUP].coordinator_id


def test_members_rediscover_the_coordinator_after_its_broker_is_killed_and_commit_every_record(cluster, tmp_path):
    bootstrap = cluster.bootstrap_servers
    admin = Admin({"bootstrap.servers": bootstrap})
    members: list[Member] = []
    try:
        admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3, config={"min.insync.replicas": "2"})
        with Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5}) as producer:
            futures = [producer.produce(TOPIC, value=str(i).encode(), partition=i % PARTITIONS)
                       for i in range(RECORDS)]
            for future in futures:
                future.result(timeout=30)
        log_ends = {p: RECORDS // PARTITIONS for p in range(PARTITIONS)}
        members = [Member(name, tmp_path, bootstrap) for name in ("a", "b")]
        wait_until(lambda: all(len(m.assigned()) == PARTITIONS // 2 for m in members), 30,
                   what="each member to hold half the partitions")
        wait_until(lambda: all(len(m.consumed()) >= 100 and m.commits() for m in members), 30,
                   what="both members to consume and commit")
        victim = coordinator_of(admin)
        consumed_before = sum(len(m.consumed()) for m in members)
        commits_before = [m.commits() for m in members]
        acked = {p: o for m in members for p, o in m.last_committed().items()}  # acknowledged before the kill
        cluster.kill_broker(victim)
        killed_at = time.monotonic()
        assert consumed_before < RECORDS * 0.6, consumed_before  # the kill lands mid-stream
        (successor,) = wait_until(lambda: next(((c,) for c in [coordinator_of(admin)] if c != victim), None), 20,
                                  what="a new coordinator")
        # No acknowledged commit lost: the new coordinator serves each (or a later one).
        after = {tp.partition: got.offset for tp, got in admin.list_consumer_group_offsets(GROUP).items()}
        assert all(after.get(p, -1) >= o for p, o in acked.items()), (acked, after)
        wait_until(lambda: all(m.commits() > before for m, before in zip(members, commits_before)), 30,
                   what="both members to commit to the new coordinator")
        resumed_s = time.monotonic() - killed_at
        everything = {(p, o) for p in range(PARTITIONS) for o in range(log_ends[p])}
        wait_until(lambda: {o for m in members for o in m.consumed()} >= everything, 30, what="every record consumed")

        def described():
            group = describe_group(admin, GROUP)  # what `ads consumer-groups --describe --json` prints
            done = {r["partition"]: r["current_offset"] for r in group["partitions"]} == log_ends
            return group if done else None

        group = wait_until(described, 20, what="committed offsets at the log ends")
        rows = group["partitions"]
        # Not a rebalance loop: both members in one Stable generation on the new coordinator.
        assert (group["state"], len(group["members"]), group["coordinator"]) == ("Stable", 2, successor), group
        for m in members:
            m.stop.touch()
        for m in members:
            assert m.process.wait(30) == 0
    finally:
        admin.close()
        for m in members:
            if m.process.poll() is None:
                m.process.kill()
                m.process.wait(10)

    assert [(r["partition"], r["lag"], r["log_end_offset"]) for r in rows] == [
        (p, 0, log_ends[p]) for p in range(PARTITIONS)]
    seen = [o for m in members for o in m.consumed()]
    assert set(seen) == everything and len(everything) == RECORDS  # nothing skipped
    counts: dict[tuple[int, int], int] = {}
    for o in seen:
        counts[o] = counts.get(o, 0) + 1
    duplicates = {o for o, n in counts.items() if n > 1}
    windows = set().union(*(m.uncommitted_windows() for m in members))
    assert duplicates <= windows, sorted(duplicates - windows)[:10]
    failed = sum(line.startswith("F ") for m in members for line in m.lines())
    rebalances = sum(line.startswith(("R ", "L ")) for m in members for line in m.lines())
    if not failed:  # each window is what one member consumed since its last commit (< one commit interval)
        assert len(windows) <= (rebalances + len(members)) * (COMMIT_EVERY + MAX_POLL_RECORDS), len(windows)
    print(f"coordinator {victim} killed after {consumed_before} records; coordinator {successor} took over; "
          f"both members committing again after {resumed_s:.2f} s; duplicates: {len(duplicates)} "
          f"(uncommitted windows: {len(windows)} records; {rebalances} revocations incl. close's, {failed} failed commits)")
    assert all("CLOSED" in m.lines() for m in members)
