"""The controller role: the I/O shell around the pure controller core.

Every broker runs a ``Controller``; only the one holding ``/controller`` is
active. What the controller decides, and in which order it writes and sends, is
``ads_spark.replication.controller.step(state, event) -> (state, effects)``;
this shell feeds it events one at a time on its own thread and carries out the
effects, as ``broker/replica/partition.py`` does for the partition core.
``replication/controller_events.py``'s docstring is the contract between them.

* ZooKeeper watches only enqueue (a bounded queue); the controller thread reads
  ZooKeeper (``zk_reads.py``), builds the event and steps it.
* Effects run in order before the next event (``effects.py``): sends go through
  one channel per broker (``channel.py``), so a broker that does not answer
  never holds this thread; a request effect is executed at once and its answer
  stepped before anything else.
* Admin requests (controlled shutdown, elect leaders) come from request threads:
  they are stepped on the controller thread with a request id and wait on a
  Future, resolved by the core's ``ReplyToRequest``.
* A failure (``step`` raised, an effect failed: a fenced write, ZooKeeper lost)
  skips the rest of that step's effects and steps ``ControllerFailed``: the
  controller closes its channels, resigns and runs the election again.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from concurrent.futures import Future, TimeoutError as FutureTimeout
from typing import Any, Callable, Mapping

from ads_spark.broker.controller.effects import BROKER_REQUEST_TIMEOUT_MS, Channels, EffectRunner
from ads_spark.broker.controller.zk_reads import ZkReads
from ads_spark.broker.metrics import DurationHistogram
from ads_spark.errors import ErrorCode
from ads_spark.protocol.connection import Connections
from ads_spark.replication import controller as core
from ads_spark.replication.assignment import assign_replicas
from ads_spark.replication.controller_events import (
    CloseChannels, ChannelOverflowed, ControlledShutdownRequested, ControllerFailed, Elected, ElectLeadersRequested,
    Event, LostLeadership, RebalanceTick, RecoveryTick, Reloaded, Resign, WritePartitionStates,
)
from ads_spark.replication.controller_state import (
    ControllerConfig, ControllerState, initial_state, offline_partition_count,
)
from ads_spark.replication.state import evolve

log = logging.getLogger("ads.controller")

EVENT_QUEUE_MAX = 10_000
EVENT_QUEUE_FULL_WAIT_S = 5.0  # how long a watch waits to queue the reload after the queue overflowed
CHANNEL_DRAIN_S = 5.0
STOP_JOIN_S = 5.0
DRAIN_POLL_S = 0.05
# How often partitions waiting for unclean recovery (KIP-966) ask their replicas' log ends again, in case one
# did not answer the last question (each question is bounded by the effect runner's request timeout).
UNCLEAN_RECOVERY_RETRY_S = 2.0

Job = Callable[[], None]


class Controller:
    """This broker's controller role: the core's state and everything that feeds and carries it out.

    Owns the core ``ControllerState`` (``state``, replaced only by steps on the controller thread), the
    bounded event queue and the ``controller`` thread that drains it, the ``leader-rebalance`` timer
    thread (it only queues ticks), the per-broker request channels and their connections
    (``effects.Channels``), the admin requests waiting for a reply (request id -> Future), and the
    time spent on elections (``election_time``, a histogram measured here). It registers the ZooKeeper watches
    (on winning the election) but reads ZooKeeper only on its own thread.

    Read from other threads (one attribute read each): ``active``, ``epoch``, ``elections``,
    ``unclean_elections``, ``recovery_elections``, ``election_seconds``, ``offline_partition_count()``.
    """

    def __init__(self, broker, zk):
        self.broker = broker
        self.zk = zk
        self.broker_id = broker.broker_id
        self.state: ControllerState = initial_state(self.broker_id, ControllerConfig.from_broker_config(broker.config))
        self.election_time = DurationHistogram()  # Kafka's LeaderElectionRateAndTimeMs (see _drive)
        self._reads = ZkReads(zk, broker.config.topic_defaults())
        self._channels = Channels(self._new_connections, self._on_channel_overflow)
        self._effects = EffectRunner(zk, self._reads, self._channels, self._complete_request, self._resign,
                                     broker.config.inter_broker_listener_name)
        self._events: queue.Queue[tuple[str, Job]] = queue.Queue(maxsize=EVENT_QUEUE_MAX)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="controller", daemon=True)
        self._request_ids = itertools.count(1)
        self._waiting: dict[int, Future] = {}  # admin requests stepped, not yet answered
        self._waiting_lock = threading.Lock()

    # ---- what the rest of the broker reads ------------------------------------------

    @property
    def active(self) -> bool:
        return self.state.active

    @property
    def epoch(self) -> int:
        return self.state.epoch

    @property
    def elections(self) -> int:
        return self.state.elections

    @property
    def unclean_elections(self) -> int:
        return self.state.unclean_elections

    @property
    def recovery_elections(self) -> int:
        return self.state.recovery_elections

    @property
    def election_seconds(self) -> float:
        return self.election_time.sum_s

    def offline_partition_count(self) -> int:
        return offline_partition_count(self.state)

    # ---- life cycle -------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()
        threading.Thread(target=self._run_rebalance_timer, name="leader-rebalance", daemon=True).start()
        threading.Thread(target=self._run_recovery_timer, name="unclean-recovery", daemon=True).start()
        self._enqueue("elect", self._elect)

    def stop(self) -> None:
        self._stopping.set()
        self._enqueue("stop", lambda: None)
        if self._thread.ident is not None:  # started
            self._thread.join(STOP_JOIN_S)
        # What this controller decided last (a controlled shutdown's leader moves) must still reach
        # the brokers: let the senders drain, briefly.
        deadline = time.monotonic() + CHANNEL_DRAIN_S
        while time.monotonic() < deadline and self._channels.pending():
            time.sleep(DRAIN_POLL_S)
        self._channels.shut()

    def _enqueue(self, name: str, job: Job) -> None:
        """Queue ``job`` for the controller thread (from any thread: watches, timers, request threads)."""
        try:
            self._events.put_nowait((name, job))
        except queue.Full:
            log.error("controller event queue full; dropping %s and reloading state", name)
            try:
                self._events.put(("reload", self._watched(lambda state: Reloaded(self._reads.snapshot()))),
                                 timeout=EVENT_QUEUE_FULL_WAIT_S)
            except queue.Full:
                log.error("controller event queue still full; the reload was not queued")

    def _run(self) -> None:
        while not self._stopping.is_set():
            name, job = self._events.get()
            if self._stopping.is_set():
                return
            try:
                job()
            except Exception:  # _drive turns failures into ControllerFailed; this is a bug in the shell
                log.exception("controller job %s failed", name)

    # ---- stepping the core ------------------------------------------------------------

    def _drive(self, event: Event) -> None:
        """Step ``event`` and carry out its effects in order; step each request's answer at once."""
        written_at = None
        while event is not None:
            try:
                self.state, effects = core.step(self.state, event)
            except Exception as exc:
                self._fail(f"stepping {type(event).__name__}", exc)
                return
            if written_at is not None:  # the step answering a partition-state write (its pushes included)
                self.election_time.observe(time.monotonic() - written_at)
                written_at = None
            event = None
            for effect in effects:
                if isinstance(effect, WritePartitionStates):
                    written_at = time.monotonic()
                try:
                    answer = self._effects.execute(self.state, effect)
                except Exception as exc:
                    self._fail(f"carrying out {type(effect).__name__}", exc)
                    return
                if answer is not None:
                    event = answer  # a request is always the last effect of its step

    def _fail(self, what: str, exc: Exception) -> None:
        """Skip the rest of the effects, step ControllerFailed on the last state and carry out its answer."""
        log.error("controller: %s failed; resigning", what, exc_info=exc)
        try:
            self.state, effects = core.step(self.state, ControllerFailed(f"{what}: {exc}"))
        except Exception:
            log.exception("controller: stepping ControllerFailed failed; resigning anyway")
            self.state = evolve(self.state, active=False, pending=(), awaiting=None)
            effects = [CloseChannels(None), Resign()]
        for effect in effects:
            try:
                self._effects.execute(self.state, effect)
            except Exception:
                log.exception("controller: %s after a failure failed", type(effect).__name__)

    def _watched(self, read: Callable[[ControllerState], Event]) -> Job:
        """A job stepping what ``read`` builds from ZooKeeper, if the core is active when it runs (a
        standby must not take the notifications ISR and config reads delete)."""

        def job() -> None:
            if not self.state.active:
                return
            try:
                event = read(self.state)
            except Exception as exc:
                self._fail("reading ZooKeeper", exc)
                return
            self._drive(event)

        return job

    # ---- election ---------------------------------------------------------------------

    def _elect(self) -> None:
        if self.state.active:
            try:
                holder = self.zk.controller_id()
            except Exception as exc:
                self._fail("reading /controller", exc)
                return
            if holder == self.broker_id:
                return  # a watch fired for our own /controller: nothing changed for us
            self._drive(LostLeadership())
        try:
            won = self.zk.try_become_controller(self.broker_id)
            if won is None:
                self.zk.watch_controller(lambda: self._enqueue("controller-change", self._elect))
                return
            self._watch_everything()
            snapshot = self._reads.snapshot()
        except Exception as exc:
            self._fail("the controller election", exc)
            return
        self._drive(Elected(won.epoch, won.zk_version, snapshot))

    def _watch_everything(self) -> None:
        """The controller's watches; each only queues a job that reads ZooKeeper when it runs."""
        reads = self._reads
        for name, watch, read in (("broker-change", self.zk.watch_brokers, reads.brokers_changed),
                                  ("topic-change", self.zk.watch_topics, reads.topics_changed),
                                  ("partition-change", self.zk.watch_partition_changes, reads.partitions_added),
                                  ("isr-change", self.zk.watch_isr_changes, reads.isr_changed),
                                  ("topic-deletion", self.zk.watch_topic_deletions, reads.topic_deletions),
                                  ("config-change", self.zk.watch_config_changes, reads.topic_configs),
                                  ("reassignment", self.zk.watch_reassignment, reads.reassignment_requested)):
            watch(lambda name=name, job=self._watched(read): self._enqueue(name, job))
        # Losing /controller (this broker's session expired) runs the election again: LostLeadership.
        self.zk.watch_controller(lambda: self._enqueue("controller-change", self._elect))

    def _resign(self) -> None:
        """The core's ``Resign``: give up /controller (errors ignored) and run the election again."""
        try:
            self.zk.resign_controller(self.broker_id)
        except Exception:
            log.debug("resign failed", exc_info=True)
        self._enqueue("elect", self._elect)

    # ---- channels, timers ---------------------------------------------------------------

    def _new_connections(self) -> Connections:
        # Registrations' top-level host/port are inter-broker endpoints; the client config is that listener's.
        config = self.broker.config.inter_broker_client_config(f"{self.broker.host}:{self.broker.port}")
        return Connections({**config, "request.timeout.ms": BROKER_REQUEST_TIMEOUT_MS})

    def _on_channel_overflow(self, broker_id: int) -> None:
        self._enqueue("resync-broker", lambda: self._drive(ChannelOverflowed(broker_id)))

    def _run_rebalance_timer(self) -> None:
        interval_s = self.broker.config["leader.imbalance.check.interval.seconds"]
        while not self._stopping.wait(interval_s):
            if self.state.active and self.broker.config["auto.leader.rebalance.enable"]:
                self._enqueue("rebalance", lambda: self._drive(RebalanceTick()))

    def _run_recovery_timer(self) -> None:
        while not self._stopping.wait(UNCLEAN_RECOVERY_RETRY_S):
            state = self.state  # one value, read once (the controller thread replaces it)
            if state.active and offline_partition_count(state):
                self._enqueue("unclean-recovery",
                              lambda: self._drive(RecoveryTick(int(time.monotonic() * 1000))))

    # ---- admin requests (from request threads) ------------------------------------------

    def request_controlled_shutdown(self, broker_id: int, broker_epoch: int, force: bool,
                                    timeout_s: float) -> dict[str, Any]:
        """Move leadership off ``broker_id`` (and it out of ISRs), never below min ISR unless forced."""
        return self._request(lambda request_id: ControlledShutdownRequested(request_id, broker_id, broker_epoch,
                                                                            force), timeout_s)

    def request_elect_leaders(self, election_type: str, keys: list[tuple[str, int]] | None,
                              timeout_s: float) -> dict[str, Any]:
        """Preferred: move to the in-sync preferred replica. Unclean: lead a leaderless partition from any replica."""
        keys = None if keys is None else tuple((str(t), int(p)) for t, p in keys)
        return self._request(lambda request_id: ElectLeadersRequested(request_id, election_type, keys), timeout_s)

    def _request(self, make: Callable[[int], Event], timeout_s: float) -> dict[str, Any]:
        """Step ``make(request_id)`` on the controller thread and wait (at most ``timeout_s``) for its reply."""
        if not self.state.active:
            return self._not_controller()
        request_id, done = next(self._request_ids), Future()
        with self._waiting_lock:
            self._waiting[request_id] = done
        self._enqueue("admin-request", lambda: self._drive_request(make(request_id)))
        try:
            return done.result(timeout=timeout_s)
        except FutureTimeout:
            return {"error_code": int(ErrorCode.REQUEST_TIMED_OUT), "message": "controller busy"}
        finally:
            with self._waiting_lock:
                self._waiting.pop(request_id, None)

    def _drive_request(self, event: ControlledShutdownRequested | ElectLeadersRequested) -> None:
        self._drive(event)
        # Answered unless a failure (or a lost role) dropped the work: then say so now, not at the timeout.
        self._complete_request(event.request_id, self._not_controller())

    def _complete_request(self, request_id: Any, response: Mapping[str, Any]) -> None:
        """The core's ``ReplyToRequest`` (only the first answer to a request counts)."""
        with self._waiting_lock:
            done = self._waiting.pop(request_id, None)
        if done is not None and not done.done():
            done.set_result(dict(response))

    def _not_controller(self) -> dict[str, Any]:
        return {"error_code": int(ErrorCode.NOT_CONTROLLER), "message": f"broker {self.broker_id} is not the "
                "controller"}

    def new_topic_assignment(self, partitions: int, replication_factor: int,
                             exclude: set[int] | None = None) -> dict[int, list[int]]:
        """Replicas for a new topic's partitions over the live brokers (rack-aware), from a request thread."""
        brokers = self.zk.live_brokers()
        racks = {b: info.get("rack") for b, info in brokers.items() if b not in (exclude or set())}
        return assign_replicas(partitions, replication_factor, racks)
