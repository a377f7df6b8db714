"""Whether a broker obeys a controller's request: the fencing of KIP-380, decided in one place.

Every controller request (leader_and_isr, update_metadata, stop_replica,
replica_log_ends) carries the epoch of the controller that sent it; a
leader_and_isr may also carry the broker epoch (the czxid of the target's
ZooKeeper registration) the controller addressed it to. A broker refuses:

* a controller epoch older than one it already obeyed (STALE_CONTROLLER_EPOCH):
  a deposed controller, cut off from ZooKeeper, must neither move leadership
  nor roll the metadata back;
* a broker epoch older than its current registration's (STALE_BROKER_EPOCH):
  the controller decided it for an earlier incarnation of this broker (before
  a restart, or before its session expired and it registered again), from
  that incarnation's state; obeying it now could, say, make a replica that has
  since lost its unflushed tail a leader again. While the broker does not know
  its own epoch (it has not registered yet: a restarted broker waits for its
  previous session's znode to go), it cannot tell, and refuses too; the
  controller's request channel retries (broker/controller/channel.py).

A request addressed to a *newer* epoch than the broker knows is obeyed, as in
Kafka: only this broker's own registration can have that id's newer czxid, and
the controller may see the new znode before the broker's registration call has
returned. A request without a broker epoch (or with -1) is not checked: a
controller that does not send one yet.

A refused request changes nothing: not even the controller epoch the broker
remembers, so a forged or stale request with a huge controller epoch cannot
deafen the broker to the real controller.

Pure (no I/O, no clock): the broker's control handlers and metadata cache and
the simulation's broker (tests/sim) all decide with ``check_control_request``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ads_spark.errors import ErrorCode

NO_BROKER_EPOCH = -1  # in a request: not checked; as the broker's own: not registered (yet)


@dataclass(frozen=True, slots=True)
class Verdict:
    """Obey (error NONE) or refuse, and the controller epoch to remember from now on."""

    error: ErrorCode
    controller_epoch: int  # unchanged from the one seen when the request is refused
    message: str = ""

    @property
    def obeyed(self) -> bool:
        return self.error is ErrorCode.NONE


def check_control_request(seen_controller_epoch: int, request_controller_epoch: int, *,
                          request_broker_epoch: int | None = None,
                          current_broker_epoch: int = NO_BROKER_EPOCH) -> Verdict:
    """The verdict on a controller request with ``request_controller_epoch`` (and, for leader_and_isr, the
    ``request_broker_epoch`` it was addressed to) at a broker that last obeyed ``seen_controller_epoch`` and
    is registered with ``current_broker_epoch``."""
    if request_broker_epoch is not None and request_broker_epoch != NO_BROKER_EPOCH:
        if current_broker_epoch == NO_BROKER_EPOCH:
            return Verdict(ErrorCode.STALE_BROKER_EPOCH, seen_controller_epoch,
                           f"request for broker epoch {request_broker_epoch}; this broker has not registered yet")
        if request_broker_epoch < current_broker_epoch:
            return Verdict(ErrorCode.STALE_BROKER_EPOCH, seen_controller_epoch,
                           f"request for broker epoch {request_broker_epoch}, an earlier registration of this "
                           f"broker (now {current_broker_epoch})")
    if request_controller_epoch < seen_controller_epoch:
        return Verdict(ErrorCode.STALE_CONTROLLER_EPOCH, seen_controller_epoch,
                       f"request from controller epoch {request_controller_epoch}; already follows epoch "
                       f"{seen_controller_epoch}")
    return Verdict(ErrorCode.NONE, request_controller_epoch)
