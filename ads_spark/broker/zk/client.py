"""The ZooKeeper adapter: everything ADS keeps in ZooKeeper, behind typed methods.

The znode layout is docs/DESIGN.md's (section ZooKeeper, modelled on Kafka's
pre-KRaft layout); paths and value codecs live in ``zk_model.py``, the session
and bounded-call helpers in ``zk_session.py``, topics and partition states in
``zk_topics.py``. This module adds the cluster-wide parts: the cluster id,
broker registration (ephemeral, broker epoch = the znode's czxid), the
controller election fenced by ``/controller_epoch``, producer-id blocks, and
the admin request znodes.

Errors: a lost session or a silent ensemble is ``ZooKeeperUnavailable``
(operational); request outcomes are ``ads_spark.errors`` exceptions
(``TopicAlreadyExistsError``, ``UnknownTopicOrPartitionError``,
``StaleControllerEpochError``, ...).
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from typing import Any, Callable

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from ads_spark.broker.zk.model import (
    CLUSTER_ID_PATH, CONTROLLER_EPOCH_PATH, CONTROLLER_PATH, PREFERRED_REPLICA_ELECTION_PATH,
    PRODUCER_ID_BLOCK_PATH, REASSIGN_PARTITIONS_PATH, BROKER_IDS_PATH, ControllerEpoch, PartitionStateZnode,
    ProducerIdBlock, StaleVersion, VersionedPartitionState, ZooKeeperUnavailable, broker_path, decode_json,
    encode_json, unclean_applied_path,
)
from ads_spark.broker.zk.session import DEFAULT_CHROOT, MultiOpFailed, ZkSession
from ads_spark.broker.zk.tls import ZkTls
from ads_spark.broker.zk.schemas import ZkSchemas
from ads_spark.broker.zk.topics import ZkTopics
from ads_spark.errors import (
    ErrorCode, InvalidRequestError, NotControllerError, StaleControllerEpochError, error_for,
)
from ads_spark.protocol.names import validate_topic_name

__all__ = [
    "ZkClient", "ZooKeeperUnavailable", "PartitionStateZnode", "VersionedPartitionState", "ControllerEpoch",
    "StaleVersion", "ProducerIdBlock", "BrokerIdInUseError", "DEFAULT_CHROOT",
]

log = logging.getLogger("ads.broker.zk")

PRODUCER_ID_BLOCK_SIZE = 1000
PRODUCER_ID_ATTEMPTS_MAX = 200
CONTROLLER_ELECTION_ATTEMPTS_MAX = 10
REREGISTER_ATTEMPTS_MAX = 30
RETRY_BACKOFF_MAX_S = 0.05


class BrokerIdInUseError(Exception):
    """Another live session holds ``/brokers/ids/<id>``: two brokers were given the same id."""


class ZkClient(ZkTopics, ZkSchemas, ZkSession):
    """The ADS view of one ZooKeeper session (see the module docstring)."""

    def __init__(self, hosts: str, chroot: str = DEFAULT_CHROOT, session_timeout_ms: int = 18000,
                 connect_timeout_s: float = 15.0, request_timeout_s: float | None = None,
                 tls: ZkTls | None = None, set_acl: bool = False):
        super().__init__(hosts, chroot, session_timeout_ms, connect_timeout_s, request_timeout_s, tls, set_acl)
        self._registration: dict[str, Any] | None = None
        self._reregister_lock = threading.Lock()

    # ---- cluster id -------------------------------------------------------------------

    def cluster_id(self) -> str:
        """The cluster's id (a uuid, created by the first client that connected)."""
        found = self._read(CLUSTER_ID_PATH)
        return str(decode_json(found[0])["id"])

    # ---- brokers ----------------------------------------------------------------------

    def register_broker(self, broker_id: int, host: str, port: int, rack: str | None = None,
                        metrics_port: int | None = None, stale_wait_s: float | None = None,
                        on_reregistered: Callable[[int], None] | None = None, clean_shutdown: bool = True,
                        endpoints: dict[str, dict[str, Any]] | None = None) -> int:
        """Create the ephemeral ``/brokers/ids/<id>``; return the broker epoch (its czxid).

        A znode left by this broker's previous, not yet expired session is waited
        out for up to ``stale_wait_s`` (default: the session timeout); a znode
        that stays means another broker has this id: ``BrokerIdInUseError``.
        With ``on_reregistered``, a new session (after the old one expired)
        registers again and reports the new, larger epoch to it.
        """
        # ``incarnation`` names this process: a registration after an expired session carries the same
        # one, so a controller can tell it from a restart (which may have lost an unflushed tail).
        info = {"host": host, "port": int(port), "rack": rack, "metrics_port": metrics_port,
                "clean_shutdown": bool(clean_shutdown), "incarnation": uuid.uuid4().hex}
        if endpoints is not None:  # every listener: {"NAME": {"host", "port", "protocol"}} (host/port: inter-broker)
            info["endpoints"] = endpoints
        wait_s = self.session_timeout_ms / 1000.0 + 1.0 if stale_wait_s is None else stale_wait_s
        epoch = self._create_registration(int(broker_id), info, wait_s)
        self._registration = {"broker_id": int(broker_id), "info": info, "callback": on_reregistered}
        if on_reregistered is not None and not getattr(self, "_reregister_hooked", False):
            self._reregister_hooked = True
            self.add_session_listener(self._on_session_for_registration)
        return epoch

    def _create_registration(self, broker_id: int, info: dict[str, Any], wait_s: float) -> int:
        path = broker_path(broker_id)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                _, stat = self._wait(self.client.create_async(path, encode_json({**info, "broker_epoch": -1}),
                                                              ephemeral=True, include_data=True),
                                     f"registering broker {broker_id}")
                break
            except NodeExistsError:
                found = self._read(path)
                if found is not None and found[1].ephemeralOwner == self.session_id:
                    return found[1].czxid
                if time.monotonic() >= deadline:
                    raise BrokerIdInUseError(
                        f"broker id {broker_id} is registered by another live ZooKeeper session; "
                        "is another broker running with the same broker.id?") from None
                time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
        epoch = stat.czxid
        try:
            self._wait(self.client.set_async(path, encode_json({**info, "broker_epoch": epoch}), version=0),
                       f"registering broker {broker_id}")
        except (BadVersionError, NoNodeError):
            pass  # the znode is ours or already gone with the session; its czxid is the epoch
        log.info("registered broker %s with broker epoch %s", broker_id, epoch)
        return epoch

    def _on_session_for_registration(self, state: str) -> None:
        if state == "connected" and self._registration is not None:
            threading.Thread(target=self._reregister, name="ads-zk-reregister", daemon=True).start()

    def _reregister(self) -> None:
        """After a reconnect: register again if the session (and so the znode) was lost."""
        registration = self._registration
        if registration is None or not self._reregister_lock.acquire(blocking=False):
            return
        try:
            for _ in range(REREGISTER_ATTEMPTS_MAX):
                try:
                    found = self._read(broker_path(registration["broker_id"]))
                    if found is not None and found[1].ephemeralOwner == self.session_id:
                        return
                    epoch = self._create_registration(registration["broker_id"], registration["info"],
                                                      self.session_timeout_ms / 1000.0 + 1.0)
                    if registration["callback"] is not None:
                        registration["callback"](epoch)
                    return
                except ZooKeeperUnavailable:
                    time.sleep(min(1.0, self.session_timeout_ms / 3000.0))
            log.error("could not re-register broker %s after %s attempts", registration["broker_id"],
                      REREGISTER_ATTEMPTS_MAX)
        finally:
            self._reregister_lock.release()

    def live_brokers(self) -> dict[int, dict[str, Any]]:
        """Registered brokers: id -> {"host", "port", "rack", "metrics_port", "clean_shutdown", "incarnation",
        "broker_epoch"}."""
        ids = [int(child) for child in self._children(BROKER_IDS_PATH)]
        found = self._read_many([broker_path(b) for b in ids])
        brokers = {}
        for broker_id, item in zip(ids, found):
            if item is None:
                continue  # gone between the listing and the read
            value = decode_json(item[0]) or {}
            value["broker_epoch"] = item[1].czxid
            brokers[broker_id] = value
        return dict(sorted(brokers.items()))

    def unclean_applied(self, broker_id: int) -> str | None:
        """The incarnation of ``broker_id`` whose unclean start a controller has applied, if any."""
        found = self._read(unclean_applied_path(broker_id))
        return None if found is None else (decode_json(found[0]) or {}).get("incarnation")

    def record_unclean_applied(self, broker_id: int, incarnation: str) -> None:
        path, data = unclean_applied_path(broker_id), encode_json({"incarnation": incarnation})
        try:
            self._wait(self.client.set_async(path, data), f"writing {path}")
        except NoNodeError:
            try:
                self._wait(self.client.create_async(path, data), f"creating {path}")
            except NodeExistsError:  # another controller created it meanwhile
                self._wait(self.client.set_async(path, data), f"writing {path}")

    def broker_epoch(self, broker_id: int) -> int | None:
        found = self._read(broker_path(broker_id))
        return None if found is None else found[1].czxid

    def watch_brokers(self, callback: Callable[[], None]) -> None:
        """``callback()`` whenever a broker registers or its registration goes away."""
        self._watch_children("brokers", BROKER_IDS_PATH, callback)

    # ---- controller -------------------------------------------------------------------

    def controller_epoch(self) -> ControllerEpoch:
        found = self._read(CONTROLLER_EPOCH_PATH)
        if found is None:
            return ControllerEpoch(0, -1)
        return ControllerEpoch(int(found[0].decode() or 0), found[1].version)

    def controller_id(self) -> int | None:
        found = self._read(CONTROLLER_PATH)
        return None if found is None else int(decode_json(found[0])["broker_id"])

    def try_become_controller(self, broker_id: int) -> ControllerEpoch | None:
        """Create ``/controller`` and bump ``/controller_epoch`` in one multi-op.

        Returns the new epoch and the ``/controller_epoch`` version that fences
        this controller's writes, or None when another broker is the controller.
        """
        value = encode_json({"version": 1, "broker_id": int(broker_id), "timestamp_ms": int(time.time() * 1000)})
        for _ in range(CONTROLLER_ELECTION_ATTEMPTS_MAX):
            current = self.controller_epoch()
            new_epoch = current.epoch + 1

            def build(tx, current=current, new_epoch=new_epoch):
                tx.create(CONTROLLER_PATH, value, ephemeral=True)
                tx.set_data(CONTROLLER_EPOCH_PATH, str(new_epoch).encode(), version=current.zk_version)

            try:
                results = self._commit(build, f"electing broker {broker_id} controller")
            except MultiOpFailed as failed:
                if isinstance(failed.error, NodeExistsError):
                    return self._already_controller(broker_id)
                if isinstance(failed.error, BadVersionError):
                    continue  # another election bumped the epoch between our read and write
                raise
            log.info("broker %s elected controller with epoch %s", broker_id, new_epoch)
            return ControllerEpoch(new_epoch, results[1].version)
        raise ZooKeeperUnavailable(f"controller election did not settle in {CONTROLLER_ELECTION_ATTEMPTS_MAX} tries")

    def _already_controller(self, broker_id: int) -> ControllerEpoch | None:
        """Our own earlier attempt may have won (a retry after a lost reply)."""
        found = self._read(CONTROLLER_PATH)
        if found is None or found[1].ephemeralOwner != self.session_id:
            return None
        if int(decode_json(found[0])["broker_id"]) != int(broker_id):
            return None
        return self.controller_epoch()

    def resign_controller(self, broker_id: int) -> None:
        """Delete ``/controller`` if this session holds it for ``broker_id``; otherwise do nothing."""
        found = self._read(CONTROLLER_PATH)
        if found is None or found[1].ephemeralOwner != self.session_id:
            return
        if int(decode_json(found[0])["broker_id"]) != int(broker_id):
            return
        try:
            self._wait(self.client.delete_async(CONTROLLER_PATH, version=found[1].version), "resigning controller")
        except (NoNodeError, BadVersionError):
            pass

    def check_controller(self, broker_id: int, epoch: ControllerEpoch) -> None:
        """Raise unless ``broker_id`` still is the controller at ``epoch``."""
        current = self.controller_epoch()
        if current.epoch > epoch.epoch or current.zk_version != epoch.zk_version:
            raise StaleControllerEpochError(f"controller epoch {epoch.epoch} is stale; current is {current.epoch}")
        if self.controller_id() != int(broker_id):
            raise NotControllerError(f"broker {broker_id} is not the controller")

    def watch_controller(self, callback: Callable[[], None]) -> None:
        """``callback()`` when ``/controller`` changes; also at once if there is no controller now."""
        self._watch_data("controller", CONTROLLER_PATH, callback, fire_if_absent=True)

    # ---- producer ids -----------------------------------------------------------------

    def allocate_producer_id_block(self, broker_id: int,
                                   block_size: int = PRODUCER_ID_BLOCK_SIZE) -> ProducerIdBlock:
        """Claim the next ``block_size`` producer ids for ``broker_id`` (conditional read-modify-write).

        Blocks never overlap: each claim is a write conditional on the version
        of ``/latest_producer_id_block`` that the new block follows.
        """
        if block_size < 1:
            raise InvalidRequestError(f"producer id block size must be positive, not {block_size}")
        rng = random.Random()
        for _ in range(PRODUCER_ID_ATTEMPTS_MAX):
            found = self._read(PRODUCER_ID_BLOCK_PATH)
            previous = ProducerIdBlock.from_json(found[0]) if found else None
            start = previous.block_end_inclusive + 1 if previous else 0
            block = ProducerIdBlock(int(broker_id), start, start + block_size - 1)
            try:
                if found is None:
                    self._wait(self.client.create_async(PRODUCER_ID_BLOCK_PATH, block.to_json()),
                               "allocating a producer id block")
                else:
                    self._wait(self.client.set_async(PRODUCER_ID_BLOCK_PATH, block.to_json(),
                                                     version=found[1].version), "allocating a producer id block")
                return block
            except (NodeExistsError, BadVersionError):
                time.sleep(rng.uniform(0.0, RETRY_BACKOFF_MAX_S))  # lost the race; re-read
        raise ZooKeeperUnavailable(f"no producer id block after {PRODUCER_ID_ATTEMPTS_MAX} attempts (contention)")

    # ---- admin requests ---------------------------------------------------------------

    def request_preferred_replica_election(self, partitions: list[tuple[str, int]]) -> None:
        """Write ``/admin/preferred_replica_election``; InvalidRequestError if one is pending."""
        value = encode_json({"version": 1, "partitions": [{"topic": validate_topic_name(t), "partition": int(p)}
                                                          for t, p in partitions]})
        if not self._create_if_absent(PREFERRED_REPLICA_ELECTION_PATH, value):
            raise InvalidRequestError("a preferred replica election is already in progress")

    def preferred_replica_election(self) -> list[tuple[str, int]] | None:
        found = self._read(PREFERRED_REPLICA_ELECTION_PATH)
        if found is None:
            return None
        return [(p["topic"], int(p["partition"])) for p in (decode_json(found[0]) or {}).get("partitions", [])]

    def clear_preferred_replica_election(self) -> None:
        self._delete_many([PREFERRED_REPLICA_ELECTION_PATH])

    def watch_preferred_replica_election(self, callback: Callable[[], None]) -> None:
        self._watch_data("preferred_replica_election", PREFERRED_REPLICA_ELECTION_PATH, callback)

    def request_reassignment(self, reassignment: dict[str, Any]) -> None:
        """Write ``/admin/reassign_partitions`` (Kafka's JSON); REASSIGNMENT_IN_PROGRESS if one is pending."""
        items = reassignment.get("partitions") if isinstance(reassignment, dict) else None
        if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            raise InvalidRequestError("a reassignment needs a list of partitions, each an object")
        for item in items:
            validate_topic_name(item.get("topic"), where="reassignment partitions[].topic")
        if not self._create_if_absent(REASSIGN_PARTITIONS_PATH, encode_json(reassignment)):
            raise error_for(ErrorCode.REASSIGNMENT_IN_PROGRESS, "a partition reassignment is already in progress")

    def reassignment(self) -> dict[str, Any] | None:
        found = self._read(REASSIGN_PARTITIONS_PATH)
        return None if found is None else decode_json(found[0])

    def clear_reassignment(self) -> None:
        self._delete_many([REASSIGN_PARTITIONS_PATH])

    def watch_reassignment(self, callback: Callable[[], None]) -> None:
        self._watch_data("reassignment", REASSIGN_PARTITIONS_PATH, callback)
