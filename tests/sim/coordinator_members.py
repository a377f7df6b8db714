"""Group membership in the simulated coordinator: members join, sync, heartbeat and commit with generations.

The coordinator side (``on_group_request``, ``tick_groups``, ``unload_groups``)
feeds the real pure core (``group_membership.join/sync/heartbeat/tick/
persist_done/unload``) and carries out its effects: replies go back to the
member, a ``PersistGroup`` is appended (``group_records.group_metadata_record``)
through the partition with acks=all and ``persist_done`` is called when that
append finishes (on the coordinator's next tick: completions arrive inside a call
into the partition). A new coordinator loads the group from its log
(``group_records.replay``: STABLE with the stored members); waiting joins and
syncs are answered NOT_COORDINATOR when it stops leading.

``MemberClient`` is one consumer of ``MEMBER_GROUP`` as Kafka's client runs the
classic protocol: KIP-394's second join with the id it was given, the leader
assigns, sync, heartbeats every ``HEARTBEAT_MS``, commits with its generation, and
rejoins on REBALANCE_IN_PROGRESS / ILLEGAL_GENERATION (with a new id after
UNKNOWN_MEMBER_ID). A sync answered NONE means the generation's record was
acknowledged: the checker holds every later coordinator to that generation.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ads_spark.errors import AdsError, ErrorCode
from ads_spark.replication import group_membership as membership
from ads_spark.replication import group_records

from tests.sim.cluster import MAX_MESSAGE_BYTES, PRODUCE_TIMEOUT_MS
from tests.sim.disk import SimBatch
from tests.sim.model import CLIENT

E = ErrorCode
MEMBER_GROUP = "stream-consumers"
MEMBERS = 2
GROUP_CONFIG = membership.GroupConfig(min_session_timeout_ms=50, max_session_timeout_ms=10_000,
                                      initial_rebalance_delay_ms=20, max_size=10)
SESSION_TIMEOUT_MS = 300
REBALANCE_TIMEOUT_MS = 300
HEARTBEAT_MS = 50
# The network here loses messages (TCP would re-send them): a request unanswered this long is sent again, well
# within the session and rebalance timeouts. A join or sync sent again replaces the waiting one at the coordinator.
REQUEST_ABANDON_MS = 100
RETRY_BACKOFF_MS = 20


@dataclass(frozen=True)
class GroupReq:
    req_id: int
    body: membership.JoinRequest | membership.SyncRequest | membership.HeartbeatRequest


@dataclass(frozen=True)
class GroupResp:
    req_id: int
    body: membership.JoinReply | membership.SyncReply | ErrorCode  # ErrorCode: a heartbeat's answer


# --------------------------------------------------------------------- coordinator side


def _refusal(req: GroupReq, error: ErrorCode):
    if isinstance(req.body, membership.JoinRequest):
        return membership.JoinReply(req.req_id, error, member_id=req.body.member_id)
    if isinstance(req.body, membership.SyncRequest):
        return membership.SyncReply(req.req_id, error)
    return error


def on_group_request(coord, msg: GroupReq) -> int | None:
    """A join, sync or heartbeat at ``coord`` (a SimCoordinator); returns the partition it produced to, if any."""
    c, body = coord.broker.c, msg.body
    p, _ = c.coordinator_of(body.group_id)
    state = coord.broker.states[p]
    loaded = coord.loaded.get(p) if state.is_leader else None
    if loaded is None or loaded.leader_epoch != state.leader_epoch:
        _reply(coord, msg.req_id, _refusal(msg, E.NOT_COORDINATOR))
        return None
    entry = loaded.groups.get(body.group_id)
    group = entry.group if entry else None
    if isinstance(body, membership.JoinRequest):
        group, effects = membership.join(group, body, msg.req_id, config=GROUP_CONFIG, now_ms=c.now,
                                         fresh_id=c.fresh_member_id())
    elif isinstance(body, membership.SyncRequest):
        group, effects = membership.sync(group, body, msg.req_id, now_ms=c.now)
    else:
        group, error = membership.heartbeat(group, body, now_ms=c.now)
        effects = []
        _reply(coord, msg.req_id, error)
    _store(loaded, body.group_id, group, c.now)
    return p if carry_out(coord, p, loaded, effects) else None


def _store(loaded, group_id: str, group, now_ms: int) -> None:
    entry = loaded.groups.get(group_id)
    offsets = entry.offsets if entry else {}
    if group is None and not offsets:
        loaded.groups.pop(group_id, None)
    else:
        group = group if group is not None else membership.new_group(group_id, now_ms)
        loaded.groups[group_id] = group_records.LoadedGroup(group, offsets)


def carry_out(coord, p: int, loaded, effects) -> bool:
    """Send the replies, append the PersistGroup records; True if it produced (the caller reads the state)."""
    produced = False
    for effect in effects:
        if isinstance(effect, membership.PersistGroup):
            _persist(coord, p, loaded, effect)
            produced = True
        else:
            _reply(coord, effect.handle, effect)
    return produced


def _persist(coord, p: int, loaded, effect: membership.PersistGroup) -> None:
    b, c = coord.broker, coord.broker.c
    rids = c.new_records([group_records.group_metadata_record(effect.group)])

    def complete(base: int, failure: Exception | None) -> None:
        error = E.NONE if failure is None else failure.code
        coord.deferred.append((p, loaded, effect.group_id, effect.generation_id, error, base, rids))

    try:
        b.partitions[p].produce(SimBatch(rids), acks=-1, timeout_ms=PRODUCE_TIMEOUT_MS,
                                max_message_bytes=MAX_MESSAGE_BYTES, now_ms=c.now, producer=(-1, -1, -1),
                                complete=complete)
    except AdsError as exc:
        complete(-1, exc)


def tick_groups(coord, now_ms: int) -> None:
    """Finished group writes (``persist_done``), then the core's timers of every group due."""
    deferred, coord.deferred = coord.deferred, []
    for p, loaded, group_id, generation, error, base, rids in deferred:
        if error is E.NONE:
            coord.broker.c.checker.on_ack(p, -1, base, rids, loaded.leader_epoch)
        if coord.serving(p, loaded.leader_epoch) is not loaded:
            continue  # unloaded since: its waiting syncs were answered NOT_COORDINATOR then
        entry = loaded.groups.get(group_id)
        group, effects = membership.persist_done(entry.group if entry else None, generation, error, now_ms=now_ms)
        _store(loaded, group_id, group, now_ms)
        carry_out(coord, p, loaded, effects)
    for p, loaded in list(coord.loaded.items()):
        for group_id, entry in list(loaded.groups.items()):
            due = membership.next_deadline_ms(entry.group)
            if due is not None and due <= now_ms:
                group, effects = membership.tick(entry.group, now_ms=now_ms)
                _store(loaded, group_id, group, now_ms)
                carry_out(coord, p, loaded, effects)


def unload_groups(coord, loaded) -> None:
    """Leadership lost (or a new epoch): every waiting join and sync is answered NOT_COORDINATOR."""
    for entry in loaded.groups.values():
        for effect in membership.unload(entry.group):
            _reply(coord, effect.handle, effect)


def _reply(coord, req_id: int, body) -> None:
    c = coord.broker.c
    c.net.send(c.now, coord.broker.id, CLIENT, GroupResp(req_id, body))


# --------------------------------------------------------------------- a member


class MemberClient:
    """One consumer of ``MEMBER_GROUP``; ``phase`` is "join", "sync" or "stable"."""

    def __init__(self, clients, name: str, req_ids: itertools.count):
        self.clients = clients  # the CommitClient: sends this member's commits, routes answers here
        self.c = clients.c
        self.name = name
        self.req_ids = req_ids
        self.member_id = ""
        self.generation = -1
        self.phase = "join"
        self.joined: membership.JoinReply | None = None
        self.inflight: tuple[int, int] | None = None  # (req_id, sent_ms)
        self.not_before_ms = 0
        self.last_heartbeat_ms = 0

    def _send(self, body) -> None:
        req_id = next(self.req_ids)
        self.inflight = (req_id, self.c.now)
        _, leader = self.c.coordinator_of(MEMBER_GROUP)
        if leader > 0:
            self.c.net.send(self.c.now, CLIENT, leader, GroupReq(req_id, body), self.c.brokers[leader].incarnation)

    def tick(self) -> None:
        now = self.c.now
        if self.inflight is not None and now - self.inflight[1] > REQUEST_ABANDON_MS:
            self.inflight = None
        if self.inflight is not None or now < self.not_before_ms:
            return
        if self.phase == "join":
            self._send(membership.JoinRequest(MEMBER_GROUP, self.member_id, None, self.name, "sim", SESSION_TIMEOUT_MS,
                                              REBALANCE_TIMEOUT_MS, "consumer", (("range", self.name.encode()),)))
        elif self.phase == "sync":
            joined = self.joined
            assignments = tuple((m.member_id, f"g{joined.generation_id}:{m.member_id}".encode())
                                for m in joined.members) if joined.leader_id == self.member_id else ()
            self._send(membership.SyncRequest(MEMBER_GROUP, self.member_id, None, self.generation, assignments))
        elif now - self.last_heartbeat_ms >= HEARTBEAT_MS:
            self.last_heartbeat_ms = now
            self._send(membership.HeartbeatRequest(MEMBER_GROUP, self.member_id, None, self.generation))

    def commit(self) -> None:
        if self.phase == "stable":
            self.clients.commit(MEMBER_GROUP, member=self)

    def on_error(self, error: ErrorCode) -> None:
        """What Kafka's client does on a group error: rejoin (with a new id if its own is unknown), or back off."""
        if error in (E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID):
            self.member_id, self.phase = "", "join"
        elif error in (E.ILLEGAL_GENERATION, E.REBALANCE_IN_PROGRESS):
            self.phase = "join"
        elif error is not E.NONE:
            self.not_before_ms = self.c.now + RETRY_BACKOFF_MS
            if self.phase == "sync":
                self.phase = "join"

    def on_response(self, msg: GroupResp) -> None:
        if self.inflight is None or self.inflight[0] != msg.req_id:
            return
        self.inflight = None
        body = msg.body
        if isinstance(body, membership.JoinReply):
            if body.error is E.MEMBER_ID_REQUIRED:
                self.member_id = body.member_id
            elif body.error is E.NONE:
                self.member_id, self.generation, self.joined, self.phase = (
                    body.member_id, body.generation_id, body, "sync")
            else:
                self.on_error(body.error)
        elif isinstance(body, membership.SyncReply):
            if body.error is E.NONE:
                self.phase = "stable"
                self.last_heartbeat_ms = self.c.now
                self.c.checker.on_generation_acked(MEMBER_GROUP, self.generation)
            else:
                self.on_error(body.error)
        else:
            self.on_error(body)


# --------------------------------------------------------------------- liveness


GROUP_LIVENESS_BOUND_MS = 3_000  # session and rebalance timeouts are 300 ms: a re-form takes a few of them


def group_unformed(cluster, clients) -> str | None:
    """Why ``MEMBER_GROUP`` is not formed now (None: it is): its coordinator leads and has loaded, the group is
    STABLE, and every member is in it, synced in its generation."""
    p, leader_id = cluster.coordinator_of(MEMBER_GROUP)
    leader = cluster.leader_state(p)
    if leader is None:
        return f"p{p} has no leader"
    loaded = cluster.brokers[leader_id].coordinator.serving(p, leader.leader_epoch)
    entry = loaded.groups.get(MEMBER_GROUP) if loaded else None
    if entry is None or entry.group.state is not membership.GroupState.STABLE:
        return f"group on coordinator {leader_id} is {entry.group.state.value if entry else 'unknown'}"
    for m in clients.members:
        if m.phase != "stable" or m.generation != entry.group.generation_id or m.member_id not in entry.group.members:
            return (f"{m.name} is {m.phase} in generation {m.generation}, the group's is "
                    f"{entry.group.generation_id}")
    return None


def run_group_liveness(cluster, clients, rng, bound_ms: int = GROUP_LIVENESS_BOUND_MS) -> None:
    """After runner's liveness phase (healed, restarted): the group must re-form on its coordinator in time."""
    deadline = cluster.now + bound_ms
    while not cluster.checker.violations:
        failing = group_unformed(cluster, clients)
        if failing is None:
            return
        if cluster.now >= deadline:
            cluster.checker.fail("liveness", f"group {MEMBER_GROUP} did not re-form: {failing}")
            return
        cluster.step(rng.randint(1, 6))
        clients.tick()
