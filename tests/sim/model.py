"""A seeded, single-threaded model of an ADS cluster that runs the REAL replication core and broker shell.

Everything a real cluster has that can fail is modelled, small and bounded:

* ``SimNet``: messages between nodes with delay (so reordering), random drops,
  and cut links (one-way or both ways); bounded in-flight queue.
* ``SimZk``: versioned znodes for partition state, ephemeral broker
  registrations with a broker epoch (a czxid-like counter), sessions that expire
  ``session_timeout_ms`` after the last heartbeat, the /controller election and
  controller epoch (with the version of its znode, which fences the
  controller's writes), the one topic's assignment, and the ISR change
  notifications a leader's ISR write adds. As a broker does, every registration
  of a process says whether it started after a crash, and names it
  (incarnation); a persistent note records whose unclean start a controller
  applied (``election.unclean_starts_to_apply``), so a process's later
  registrations (expired sessions) are ordinary returns.
* ``SimDisk`` (disk.py): a broker's partition logs and checkpoints in memory; a
  crash keeps only what was flushed.
* ``SimBroker`` (cluster.py): the real ``Partition`` shell per partition, which
  drives ``partition.step`` and executes its effects; the simulated broker only
  delivers messages, keeps a fetcher's one-fetch-in-flight, its ZooKeeper
  session and registration, and crashes and restarts.
* the controller (controller_env.py): the real core,
  ``replication/controller.py``, on the broker holding /controller; the
  environment reads SimZk for it and carries out its effects.
* ``SimProducer`` (acks=all or 1, idempotent, one batch in flight per
  partition, bounded retries) and consumers live in runner.py/checker.py.

Nothing here uses wall-clock time or threads; ``now_ms`` is the model's clock and
every random choice comes from the one ``random.Random(seed)`` of the run.
"""

from __future__ import annotations

import heapq
import itertools
import random
from dataclasses import dataclass, replace

from ads_spark.errors import ErrorCode
from ads_spark.protocol.records import BatchHeader
from ads_spark.replication import partition as core
from ads_spark.replication.state import LeaderAndIsr

from tests.sim.disk import BATCH_BYTES

CLIENT = 100  # network id of producers and consumers
IN_FLIGHT_MAX = 4000  # bound on queued network messages
FETCH_TIMEOUT_MS = 60
FETCH_BATCHES_MAX = 4
FETCH_MAX_BYTES = FETCH_BATCHES_MAX * BATCH_BYTES  # a follower fetch carries at most this many batches


# ------------------------------------------------------------------ messages


@dataclass(frozen=True)
class FetchReq:
    p: int
    replica: int
    broker_epoch: int
    request: core.FetchRequest  # what the follower's core asked for; its answer echoes it, as a fetcher keeps it


@dataclass(frozen=True)
class FetchResp:
    p: int
    request: core.FetchRequest
    meta: dict  # the partition's part of a fetch answer, as the broker's data handler writes it
    batches: tuple[tuple[tuple[int, ...], BatchHeader], ...]  # (record ids, header) per stored batch


@dataclass(frozen=True)
class ProduceReq:
    req_id: int
    p: int
    acks: int
    rids: tuple[int, ...]
    pid: int
    pepoch: int
    seq: int


@dataclass(frozen=True)
class ProduceResp:
    req_id: int
    error: ErrorCode
    base_offset: int
    leader_epoch: int  # the answering leader's (the checker does not hold a fenced epoch to a newer history)


@dataclass(frozen=True)
class ZkWrite:  # a leader's ISR write travelling to ZooKeeper and back
    p: int
    proposed: LeaderAndIsr
    expected: int


class SimNet:
    def __init__(self, rng: random.Random, drop_prob: float = 0.0, delay_ms: tuple[int, int] = (1, 8)):
        self.rng = rng
        self.drop_prob = drop_prob
        self.delay_ms = delay_ms
        self.cut: set[tuple[int, int]] = set()  # (src, dst) links that lose everything
        self.queue: list = []
        self.seq = itertools.count()

    def blocked(self, src: int, dst: int) -> bool:
        return (src, dst) in self.cut

    def send(self, now_ms: int, src: int, dst: int, msg, dst_incarnation: int = -1) -> None:
        if len(self.queue) >= IN_FLIGHT_MAX or self.blocked(src, dst):
            return
        if src != dst and self.rng.random() < self.drop_prob:
            return
        at = now_ms + self.rng.randint(*self.delay_ms)
        heapq.heappush(self.queue, (at, next(self.seq), src, dst, dst_incarnation, msg))

    def due(self, now_ms: int):
        while self.queue and self.queue[0][0] <= now_ms:
            _, _, src, dst, inc, msg = heapq.heappop(self.queue)
            if not self.blocked(src, dst):
                yield src, dst, inc, msg


# ------------------------------------------------------------------ ZooKeeper


@dataclass
class Registration:
    broker_epoch: int
    session: int
    clean: bool  # False in every registration of a process that started after a crash (unclean shutdown)
    incarnation: int  # the process; a registration after an expired session keeps it


class SimZk:
    def __init__(self, session_timeout_ms: int):
        self.session_timeout_ms = session_timeout_ms
        self.czxid = itertools.count(1)
        self.sessions: dict[int, tuple[int, int]] = {}  # session -> (broker, last heartbeat ms)
        self.brokers: dict[int, Registration] = {}  # /brokers/ids ephemeral
        self.brokers_version = 0  # bumped at every change of /brokers/ids: what the controller's watch sees
        # persistent: broker -> the incarnation whose unclean start a controller applied (KIP-966, once)
        self.unclean_applied: dict[int, str] = {}
        self.controller: tuple[int, int] | None = None  # (broker, session), ephemeral
        self.controller_epoch = 0
        self.controller_epoch_version = 0  # /controller_epoch's znode version: bumped with the epoch
        self.assignment: dict[int, tuple[int, ...]] = {}  # topic "t": partition -> replicas, preferred first
        self.partitions: dict[int, LeaderAndIsr] = {}  # state znodes; partition_epoch is the znode version
        self.isr_changes: list[int] = []  # ISR change notifications (partitions) the controller has not taken

    def open_session(self, broker: int, now_ms: int) -> int:
        sid = next(self.czxid)
        self.sessions[sid] = (broker, now_ms)
        return sid

    def heartbeat(self, sid: int, now_ms: int) -> bool:
        if sid not in self.sessions:
            return False
        self.sessions[sid] = (self.sessions[sid][0], now_ms)
        return True

    def expire(self, now_ms: int) -> None:
        expired = [sid for sid, (_, last) in self.sessions.items() if now_ms - last > self.session_timeout_ms]
        if not expired:
            return
        for sid in expired:
            del self.sessions[sid]
        gone = [b for b, r in self.brokers.items() if r.session not in self.sessions]
        for b in gone:
            del self.brokers[b]
        self.brokers_version += bool(gone)
        if self.controller and self.controller[1] not in self.sessions:
            self.controller = None

    def register(self, broker: int, sid: int, clean: bool, incarnation: int) -> int | None:
        if broker in self.brokers or sid not in self.sessions:
            return None  # the old ephemeral has not expired yet
        epoch = next(self.czxid)
        self.brokers[broker] = Registration(epoch, sid, clean, incarnation)
        self.brokers_version += 1
        return epoch

    def update_isr(self, p: int, proposed: LeaderAndIsr, expected: int) -> bool:
        """A leader's ISR write: conditional on the znode version, with its change notification (one multi-op,
        as ``topics.update_isr``)."""
        if self.partitions[p].partition_epoch != expected:
            return False
        self.partitions[p] = replace(proposed, partition_epoch=expected + 1)
        self.isr_changes.append(p)
        return True

    def write_partition_state(self, p: int, new: LeaderAndIsr, expected: int,
                              controller_epoch: int) -> LeaderAndIsr | None:
        """One of the controller's writes (the caller checked the controller epoch version): the state as
        written, None if the znode moved past ``expected``."""
        if self.partitions[p].partition_epoch != expected:
            return None
        written = self.partitions[p] = replace(new, partition_epoch=expected + 1, controller_epoch=controller_epoch)
        return written
