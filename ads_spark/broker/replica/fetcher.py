"""Follower replication: fetcher threads that pull from partition leaders like consumers.

One thread per (leader broker, fetcher index) batches every partition this
broker follows on that leader into one long-polling fetch. A fetch carries the
follower's log end offset, its last fetched epoch and its view of the leader
epoch, so the leader can fence stale followers and point out a divergence
(KIP-320); the follower then truncates to the point the leader names — never to
its own possibly-stale high watermark — and fetches again.

A partition added to a thread whose fetch is parked at the leader (up to
``replica.fetch.wait.max.ms``) cuts that fetch short, so the next one names it:
otherwise a new topic's or a moved leader's partition would start replicating
only when the long-poll for the other partitions ended (the first acks=all
produce to a new topic took 80 ms here against 15-20 ms with a 50 ms poll).

A partition whose fetch the leader refuses (a stale or unknown leader epoch, a
leader that has moved on or does not know the partition yet) is answered at
once, so asking again at once would spin both brokers for as long as one of
them has not heard of the latest LeaderAndIsr. Such a partition is left out of
the thread's fetches for a backoff that doubles from 10 ms up to
``replica.fetch.backoff.ms``, as Kafka's fetcher delays a partition with an
error; a LeaderAndIsr for it (``add``) ends the backoff, since that is what
usually resolves the error.

Fetches go to the leader's inter-broker endpoint through one ``ClientTransport`` per broker, built from
``config.inter_broker_client_config``: TLS and the broker's own SASL credentials as its clients would
use them, and one token shared by every fetcher thread.
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from dataclasses import dataclass

import pyarrow.flight as flight

from ads_spark.protocol import wire
from ads_spark.protocol.fetch_session import FetchSession
from ads_spark.protocol.transport import PLAINTEXT, ClientTransport
from ads_spark.errors import AdsError, ErrorCode, InvariantViolation
from ads_spark.broker.replica.partition import Partition
from ads_spark.protocol.records import message_of, now_ms

log = logging.getLogger("ads.broker.fetcher")

FETCH_RPC_TIMEOUT_MARGIN_S = 10.0
FETCH_ERROR_BACKOFF_FIRST_S = 0.010  # doubles per refused fetch, up to replica.fetch.backoff.ms
IDLE_WAIT_S = 0.05  # a thread with no partition to fetch looks again this often


@dataclass
class LeaderEndpoint:
    broker_id: int
    host: str
    port: int


class FetcherThread(threading.Thread):
    def __init__(self, manager: "ReplicaFetcherManager", leader: LeaderEndpoint, index: int,
                 transport: ClientTransport = PLAINTEXT):
        super().__init__(name=f"replica-fetcher-{leader.broker_id}-{index}", daemon=True)
        self._transport = transport
        self.manager = manager
        self.leader = leader
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self._client: flight.FlightClient | None = None
        self._session = FetchSession(self._connect, replica_messages=True, transport=transport,
                                     address=(leader.host, leader.port))
        self._cut_short = threading.Event()  # set by add(): the failing fetch was cancelled on purpose
        # partition -> (refused fetches in a row, monotonic s before which it is not fetched); every key
        # is in ``partitions``: discard() and add() remove it, an answer without an error too
        self._backoff: dict[tuple[str, int], tuple[int, float]] = {}

    def add(self, partition: Partition) -> None:
        with self.lock:
            is_new = partition.key not in self.partitions
            self.partitions[partition.key] = partition
            was_backing_off = self._backoff.pop(partition.key, None) is not None
        if is_new or was_backing_off:
            self._cut_short.set()
            self._session.cancel()  # no-op unless a fetch is outstanding; then it ends with an error now

    def discard(self, key: tuple[str, int]) -> None:
        with self.lock:
            self.partitions.pop(key, None)
            self._backoff.pop(key, None)

    def empty(self) -> bool:
        with self.lock:
            return not self.partitions

    def run(self) -> None:
        config = self.manager.config
        while not self.stopping.is_set():
            self._cut_short.clear()  # any partition added from here on is in this round's list, or cuts it short
            now_s = time.monotonic()
            with self.lock:
                partitions = list(self.partitions.values())
                retry_at_s = {key: at for key, (_, at) in self._backoff.items()}
            requests = [(p, p.fetch_request()) for p in partitions if retry_at_s.get(p.key, 0.0) <= now_s]
            partitions = [(p, r) for p, r in requests if r is not None and r.leader == self.leader.broker_id]
            next_retry_s = min((at for at in retry_at_s.values() if at > now_s), default=None)
            if not partitions:
                self.stopping.wait(IDLE_WAIT_S if next_retry_s is None else min(next_retry_s - now_s, IDLE_WAIT_S))
                continue
            # A partition backing off is fetched again when its backoff ends, not when this poll does.
            wait_ms = config["replica.fetch.wait.max.ms"]
            if next_retry_s is not None:
                wait_ms = min(wait_ms, max(1, int((next_retry_s - now_s) * 1000)))
            try:
                self._fetch_once(partitions, wait_ms)
            except InvariantViolation as bug:  # the replica's state is not trustworthy: stop the broker
                log.critical("replica fetcher for broker %s: %s", self.leader.broker_id, bug)
                self.manager.on_fatal(str(bug))
                return
            except Exception as exc:  # leader down or unreachable: back off, the controller will move us
                if self._cut_short.is_set():  # cancelled by add(): fetch again at once, on a new stream
                    self._session.close()
                    continue
                log.debug("fetch from broker %s failed: %s", self.leader.broker_id, exc)
                self._close_client()
                self.stopping.wait(config["replica.fetch.backoff.ms"] / 1000)
        self._close_client()

    def _connect(self) -> flight.FlightClient:
        if self._client is None:
            self._client = self._transport.connect(self.leader.host, self.leader.port)
        return self._client

    def _close_client(self) -> None:
        self._session.close()
        if self._client is not None:
            try:
                self._client.close()
            except Exception:
                pass
            self._client = None

    def _fetch_once(self, partitions: list, wait_ms: int) -> None:
        """One fetch, parked at most ``wait_ms``, for every partition followed on this leader, answers fed
        to the core."""
        config = self.manager.config
        max_bytes = config["replica.fetch.max.bytes"]
        request = {
            "type": wire.FETCH, "replica_id": self.manager.broker_id, "broker_epoch": self.manager.broker_epoch(),
            "max_wait_ms": wait_ms, "min_bytes": 1, "max_bytes": config["replica.fetch.response.max.bytes"],
            "partitions": [{"topic": p.topic, "partition": p.partition, "fetch_offset": r.fetch_offset,
                            "current_leader_epoch": r.current_leader_epoch, "last_fetched_epoch": r.last_fetched_epoch,
                            "partition_max_bytes": max_bytes} for p, r in partitions],
        }
        metas, stored = wire.split_fetch_answer(
            self._session.fetch(request, wait_ms / 1000 + FETCH_RPC_TIMEOUT_MARGIN_S))
        for partition, fetch in partitions:
            meta = metas.get(partition.key)
            if meta is None:
                continue
            code = int(meta.get("error_code", 0))
            if code and code != ErrorCode.OFFSET_OUT_OF_RANGE:
                log.debug("fetch %s-%s from %s: error %s %s", partition.topic, partition.partition,
                          self.leader.broker_id, code, meta.get("message"))
                self._back_off(partition.key)
                continue
            with self.lock:
                self._backoff.pop(partition.key, None)
            # Each chunk is one stored message, written as it is (broker/log/fetched.py checks it).
            messages = [(message_of(data), wire.header_from_json(chunk_meta["header"]))
                        for data, chunk_meta in stored.get(partition.key, [])]
            try:
                partition.on_fetch_response(fetch, meta, messages, now_ms())
            except AdsError as exc:  # a corrupt batch: refused, nothing appended; fetch again
                log.warning("fetch %s-%s from %s refused: %s", partition.topic, partition.partition,
                            self.leader.broker_id, exc)

    def _back_off(self, key: tuple[str, int]) -> None:
        backoff_max_s = self.manager.config["replica.fetch.backoff.ms"] / 1000
        with self.lock:
            if key not in self.partitions:
                return
            refused, _ = self._backoff.get(key, (0, 0.0))
            delay_s = min(backoff_max_s, FETCH_ERROR_BACKOFF_FIRST_S * 2 ** min(refused, 16))
            self._backoff[key] = (refused + 1, time.monotonic() + delay_s)


def inter_broker_transport(config) -> ClientTransport:
    """How this broker dials other brokers' inter-broker listener; a plain dict config has no security keys.

    The keystore and truststore are read here, so a broker whose files are wrong does not start."""
    client_config = getattr(config, "inter_broker_client_config", None)
    if client_config is None:
        return PLAINTEXT
    return ClientTransport.from_config(client_config(""))


class ReplicaFetcherManager:
    """Which fetcher thread follows which partition; threads come and go with leadership."""

    def __init__(self, broker_id: int, config, replicas, broker_epoch_fn):
        self.broker_id = broker_id
        self.config = config
        self.replicas = replicas
        self.broker_epoch = broker_epoch_fn
        self.transport = inter_broker_transport(config)
        self.on_fatal = lambda reason: None  # the broker sets it: a broken invariant stops the process
        self._threads: dict[tuple[int, int, str, int], FetcherThread] = {}
        self._assigned: dict[tuple[str, int], tuple[int, int, str, int]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def follow(self, partition: Partition, leader: LeaderEndpoint) -> None:
        count = self.config["num.replica.fetchers"]
        index = zlib.crc32(f"{partition.topic}-{partition.partition}".encode()) % count
        thread_key = (leader.broker_id, index, leader.host, leader.port)
        with self._lock:
            if self._assigned.get(partition.key) != thread_key:
                # Kept on its thread when it stays there: only a partition new to a thread cuts its parked
                # fetch short (every LeaderAndIsr for a followed partition comes through here).
                self._unassign_locked(partition.key)
            if self._closed:
                return
            thread = self._threads.get(thread_key)
            if thread is None:
                thread = FetcherThread(self, leader, index, self.transport)
                self._threads[thread_key] = thread
                thread.start()
            thread.add(partition)
            self._assigned[partition.key] = thread_key

    def unfollow(self, key: tuple[str, int]) -> None:
        with self._lock:
            self._unassign_locked(key)

    def _unassign_locked(self, key: tuple[str, int]) -> None:
        thread_key = self._assigned.pop(key, None)
        if thread_key is None:
            return
        thread = self._threads.get(thread_key)
        if thread is not None:
            thread.discard(key)
            if thread.empty():
                thread.stopping.set()
                del self._threads[thread_key]

    def shutdown(self, timeout_s: float = 5.0) -> None:
        with self._lock:
            self._closed = True  # a stopping broker follows nothing more (controlled shutdown)
            threads = list(self._threads.values())
            self._threads.clear()
            self._assigned.clear()
        for thread in threads:
            thread.stopping.set()
        for thread in threads:
            thread.join(timeout_s)
