"""__consumer_offsets records (replication/group_records.py): Kafka's bytes, replay, partition_for; and a
property test driving the whole pure group core with random histories."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ads_spark.errors import CorruptMessageError, ErrorCode
from ads_spark.replication import group_membership as gm
from ads_spark.replication import group_offsets as go
from ads_spark.replication import group_records as gr
from ads_spark.replication.group_membership import GroupConfig, GroupState, JoinReply, PersistGroup
from ads_spark.replication.group_offsets import OffsetAndMetadata

E = ErrorCode


def s16(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def test_offset_commit_record_is_kafkas_key_v1_and_value_v3_byte_for_byte():
    key, value = gr.offset_commit_record("g", "t", 3, OffsetAndMetadata(42, 5, "m", 1000))
    assert key == struct.pack(">h", 1) + s16("g") + s16("t") + struct.pack(">i", 3)
    assert value == struct.pack(">hqi", 3, 42, 5) + s16("m") + struct.pack(">q", 1000)
    assert gr.decode_key(key) == gr.OffsetKey("g", "t", 3)
    assert gr.decode_offset_value(value) == OffsetAndMetadata(42, 5, "m", 1000)
    # an explicit expiry is written as Kafka does, v1 (which has no leader epoch)
    _, v1 = gr.offset_commit_record("g", "t", 3, OffsetAndMetadata(42, 5, "é", 1000, 2000))
    assert gr.decode_offset_value(v1) == OffsetAndMetadata(42, -1, "é", 1000, 2000)
    assert gr.offset_tombstone("g", "t", 3) == (key, None)


def test_keys_are_canonical():
    assert gr.offset_key("grp", "topic", 1) == gr.offset_key("grp", "topic", 1) != gr.offset_key("grp", "topic", 2)
    assert gr.group_key("grp") == struct.pack(">h", 2) + s16("grp") == gr.group_tombstone("grp")[0]


def test_group_record_round_trips_and_reads_kafkas_older_versions():
    stored = gr.StoredGroup("g", "consumer", 7, "range", "m1", 99, (
        gr.StoredMember("m1", "i1", "c1", "/h1", 20_000, 10_000, b"sub1", b"as1"),
        gr.StoredMember("m2", None, "c2", "/h2", 20_000, 10_000, b"", b"as2")))
    group = gr.load(stored, now_ms=5)
    assert group.state is GroupState.STABLE and group.static_members == {"i1": "m1"}
    key, value = gr.group_metadata_record(group)
    assert gr.decode_key(key) == gr.GroupKey("g") and gr.decode_group_value("g", value) == stored
    v0 = (struct.pack(">h", 0) + s16("consumer") + struct.pack(">i", 7) + s16("range") + s16("m1")
          + struct.pack(">i", 1) + s16("m1") + s16("c1") + s16("/h1") + struct.pack(">i", 10_000)
          + struct.pack(">i", 4) + b"sub1" + struct.pack(">i", 3) + b"as1")
    old = gr.decode_group_value("g", v0)
    assert old.members[0].rebalance_timeout_ms == 10_000 and old.state_timestamp_ms == -1
    assert old.members[0].group_instance_id is None and old.generation_id == 7


def test_empty_group_record_keeps_type_generation_and_when_it_emptied():
    group = gm.new_group("g", 0)
    empty = gr.load(gr.StoredGroup("g", "consumer", 4, None, None, 1234, ()), now_ms=0)
    assert empty.state is GroupState.EMPTY and empty.generation_id == 4 and empty.state_timestamp_ms == 1234
    key, value = gr.group_metadata_record(empty)
    assert gr.decode_group_value("g", value) == gr.StoredGroup("g", "consumer", 4, None, None, 1234, ())
    assert gr.stored_group(group).generation_id == 0


@pytest.mark.parametrize("value,problem", [
    (struct.pack(">hq", 3, 1), "truncated"),
    (struct.pack(">hqi", 3, 1, 0) + s16("m") + struct.pack(">q", 0) + b"x", "left over"),
    (struct.pack(">hqi", 3, 1, 0) + struct.pack(">h", 1) + b"\xff" + struct.pack(">q", 0), "not UTF-8"),
    (struct.pack(">hq", 9, 1), "unknown version 9"),
])
def test_corrupt_values_are_refused_naming_the_problem_and_the_record(value, problem):
    with pytest.raises(CorruptMessageError, match=problem):
        gr.decode_offset_value(value)
    good = gr.offset_commit_record("g", "t", 0, OffsetAndMetadata(1))
    with pytest.raises(CorruptMessageError, match=f"record 1 of __consumer_offsets: .*{problem}"):
        gr.replay([good, (good[0], value)], now_ms=0)


def test_replay_latest_record_per_key_wins_and_tombstones_delete():
    g1 = gr.group_metadata_record(gr.load(gr.StoredGroup("g1", "consumer", 2, None, None, 10, ()), 0))
    records = [
        gr.offset_commit_record("g1", "t", 0, OffsetAndMetadata(1)),
        gr.offset_commit_record("g1", "t", 0, OffsetAndMetadata(2)),
        gr.offset_commit_record("g1", "t", 1, OffsetAndMetadata(3)),
        gr.offset_tombstone("g1", "t", 1),
        g1,
        gr.offset_commit_record("g2", "t", 0, OffsetAndMetadata(9)),  # standalone commits only
        gr.group_metadata_record(gr.load(gr.StoredGroup("g3", "consumer", 1, None, None, 0, ()), 0)),
        gr.group_tombstone("g3"),  # deleted group: gone
        (struct.pack(">h", 11) + b"a newer coordinator's record", b"whatever"),  # skipped, as Kafka
    ]
    loaded = gr.replay(records, now_ms=0)
    assert sorted(loaded) == ["g1", "g2"]
    assert loaded["g1"].offsets == {("t", 0): OffsetAndMetadata(2)} and loaded["g1"].group.generation_id == 2
    g2 = loaded["g2"].group
    assert g2.state is GroupState.EMPTY and g2.generation_id == 0 and g2.protocol_type is None


def test_partition_for_is_kafkas_abs_java_hashcode_mod_partitions():
    assert gr.java_string_hash("hello") == 99162322
    assert gr.java_string_hash("Aa") == gr.java_string_hash("BB") == 2112
    assert gr.java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00  # UTF-16 code units, as Java
    assert gr.java_string_hash("polygenelubricants") == -(1 << 31)
    assert gr.partition_for("polygenelubricants", 50) == 0  # Kafka's Utils.abs(MIN_VALUE) is 0
    assert gr.partition_for("hello", 50) == 99162322 % 50
    assert gr.partition_for("zz", 50) == abs(gr.java_string_hash("zz")) % 50


# ------------------------------------------------------------ property test

CONFIG = GroupConfig(min_session_timeout_ms=1000, max_session_timeout_ms=60_000, initial_rebalance_delay_ms=0,
                     max_size=3)
CLIENTS = 4  # one more than group.max.size
PROTOCOL_CHOICES = ((("range", b"t0"),), (("roundrobin", b"t0,t1"), ("range", b"t1")), (("roundrobin", b"t1"),))
RETENTION_MS = 60_000


def topics_of(metadata: bytes):
    return frozenset(metadata.decode().split(","))


class Shell:
    """What the broker shell does with the core, minus I/O: the log is a list of records."""

    def __init__(self, static: tuple[bool, ...], initial_delay_ms: int):
        self.config = GroupConfig(CONFIG.min_session_timeout_ms, CONFIG.max_session_timeout_ms, initial_delay_ms,
                                  CONFIG.max_size)
        self.group = None
        self.offsets: dict = {}
        self.log: list = []
        self.now_ms = 0
        self.handles = 0
        self.waiting: set = set()  # handles issued and not answered yet
        self.persists: list = []  # (generation, error) waiting for persist_done, in append order
        self.clients = [{"member_id": "", "generation": -1, "leader": None, "members": (),
                         "instance": f"i{c}" if static[c] else None, "protocols": PROTOCOL_CHOICES[c % 2]}
                        for c in range(CLIENTS)]
        self.client_of: dict = {}
        self.max_generation = 0

    def _handle(self, client: int) -> int:
        self.handles += 1
        self.waiting.add(self.handles)
        self.client_of[self.handles] = client
        return self.handles

    def apply(self, group, effects, fail_persist=False):
        self.group = group
        for effect in effects:
            if isinstance(effect, PersistGroup):
                # Only the leader's assignment write may fail here: a lost fire-and-forget write leaves
                # the log behind the group in Kafka too (its members rejoin), which this test does not model.
                error = E.NOT_ENOUGH_REPLICAS if fail_persist and effect.answers_syncs else E.NONE
                if error is E.NONE:
                    self.log.append(gr.group_metadata_record(effect.group))
                self.persists.append((effect.generation_id, error))
                continue
            assert effect.handle in self.waiting, f"handle {effect.handle} answered twice or never issued"
            self.waiting.discard(effect.handle)
            client = self.clients[self.client_of[effect.handle]]
            if isinstance(effect, JoinReply):
                if effect.error in (E.NONE, E.MEMBER_ID_REQUIRED):
                    client["member_id"] = effect.member_id
                if effect.error is E.NONE:
                    client.update(generation=effect.generation_id, leader=effect.leader_id,
                                  members=tuple(m.member_id for m in effect.members))
                elif effect.error in (E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID):
                    client.update(member_id="", generation=-1)

    def step(self, op) -> None:
        kind, c, choice = op
        client = self.clients[c]
        g, now = self.group, self.now_ms
        if kind == "join":
            member_id = "" if choice % 10 == 1 else client["member_id"]  # sometimes a restart forgets the id
            if choice % 10 == 0:  # sometimes the subscription changes
                client["protocols"] = PROTOCOL_CHOICES[choice % 3]
            req = gm.JoinRequest("g", member_id, client["instance"], f"c{c}", "h", 5000 + 1000 * (c % 4),
                                 8000 + 1000 * (c % 3), "consumer", client["protocols"])
            self.apply(*gm.join(g, req, self._handle(c), config=self.config, now_ms=now, fresh_id=f"u{self.handles}"))
        elif kind == "sync":
            assignments = tuple((m, f"{m}@{client['generation']}".encode()) for m in client["members"])
            req = gm.SyncRequest("g", client["member_id"], client["instance"], client["generation"], assignments)
            self.apply(*gm.sync(g, req, self._handle(c), now_ms=now), fail_persist=choice % 4 == 0)
        elif kind == "heartbeat":
            req = gm.HeartbeatRequest("g", client["member_id"], client["instance"], client["generation"])
            self.group, _ = gm.heartbeat(g, req, now_ms=now)
        elif kind == "leave":
            by_instance = choice % 2 and client["instance"]
            leaving = gm.LeaveMember("" if by_instance else client["member_id"], client["instance"])
            group, _, effects = gm.leave(g, gm.LeaveRequest("g", (leaving,)), now_ms=now)
            self.apply(group, effects)
        elif kind == "tick":
            self.now_ms += 200 * choice
            self.apply(*gm.tick(g, now_ms=self.now_ms))
        elif kind == "restart":  # the client process restarts: no member id; a static one keeps its instance id
            client["member_id"] = ""
            self.step(("join", c, 2))
        elif kind == "everyone":  # each member does its next step: rejoin while preparing, sync after a join
            for c2, other in enumerate(self.clients):
                group = self.group
                member = group.members.get(other["member_id"]) if group else None
                if member is None:
                    continue
                if group.state is GroupState.PREPARING_REBALANCE and not member.awaiting_join:
                    self.step(("join", c2, 2))
                elif group.state is GroupState.COMPLETING_REBALANCE and other["generation"] == group.generation_id:
                    self.step(("sync", c2, choice))
        elif kind == "persist_done" and self.persists:
            generation, error = self.persists.pop(0)
            self.apply(*gm.persist_done(g, generation, error, now_ms=now))
        elif kind == "commit":
            self._commit(client, choice)
        elif kind == "expire" and g is not None:
            decision = go.expire_offsets(g, self.offsets, now_ms=now, retention_ms=RETENTION_MS,
                                         subscribed_topics=topics_of)
            self._delete(decision.expired, decision.group_dead)
        elif kind == "delete_group":
            decision = go.delete_group(g, self.offsets)
            if decision.error is E.NONE:
                self._delete(decision.tombstones, True)

    def _commit(self, client, choice: int) -> None:
        standalone = choice % 3 == 0
        generation, member_id = (-1, "") if standalone else (client["generation"], client["member_id"])
        req = go.CommitRequest("g", generation, member_id, None if standalone else client["instance"],
                               (go.CommitPartition(f"t{choice % 2}", choice % 3, choice * 10, choice, f"m{choice}"),))
        group, decision = go.check_commit(self.group, req, metadata_max_bytes=100, now_ms=self.now_ms)
        self.group = group
        if decision.to_write and choice % 5:  # choice % 5 == 0: the acks=all append failed: nothing applies
            for (topic, partition), om in decision.to_write.items():
                self.log.append(gr.offset_commit_record("g", topic, partition, om))
            self.offsets = go.apply_commit(self.offsets, decision.to_write)

    def _delete(self, partitions, group_dead: bool) -> None:
        for topic, partition in partitions:
            self.log.append(gr.offset_tombstone("g", topic, partition))
        self.offsets = go.apply_delete(self.offsets, partitions)
        if group_dead:
            self.log.append(gr.group_tombstone("g"))
            self.group = None
            self.persists.clear()

    def check(self) -> None:
        group = self.group
        outstanding = set()
        if group is None:
            self.max_generation = 0  # deleted or expired: a group of that id starts again from generation 0
        else:
            gm.check_invariants(group)
            assert group.generation_id >= self.max_generation, "the generation went back"
            self.max_generation = group.generation_id
            for m in group.members.values():
                outstanding |= {h for h in (m.join_handle, m.sync_handle) if h is not None}
        assert outstanding == self.waiting, "a request was neither answered nor waiting"
        loaded = gr.replay(self.log, now_ms=self.now_ms)
        assert (loaded["g"].offsets if "g" in loaded else {}) == self.offsets
        if group is None or group.state not in (GroupState.STABLE, GroupState.EMPTY):
            return
        if "g" not in loaded:
            assert group.generation_id == 0 and not group.members
            return
        replayed, current = gr.stored_group(loaded["g"].group), gr.stored_group(group)
        if group.state is GroupState.STABLE:  # the record holds when the rebalance completed, not when it was stored
            replayed = gr.StoredGroup(**{**_fields(replayed), "state_timestamp_ms": 0})
            current = gr.StoredGroup(**{**_fields(current), "state_timestamp_ms": 0})
        if group.generation_id == 0:  # never persisted: loaded from offsets alone, without a state time
            current = gr.StoredGroup(**{**_fields(current), "state_timestamp_ms": replayed.state_timestamp_ms})
        assert replayed == current

    def finish(self) -> None:
        for effect in gm.unload(self.group):
            self.waiting.discard(effect.handle)
        assert not self.waiting, "unload left a request unanswered"


def _fields(value):
    return {name: getattr(value, name) for name in value.__slots__}


OPS = st.tuples(st.sampled_from(["join", "join", "sync", "heartbeat", "leave", "restart", "tick", "tick", "everyone",
                                 "everyone", "persist_done", "persist_done", "commit", "commit", "expire",
                                 "delete_group"]),
                st.integers(0, CLIENTS - 1), st.integers(0, 29))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(static=st.tuples(*[st.booleans()] * CLIENTS), initial_delay_ms=st.sampled_from([0, 3000]),
       ops=st.lists(OPS, min_size=20, max_size=80))
def test_random_histories_keep_the_invariants_and_replay_reproduces_the_coordinator(static, initial_delay_ms, ops):
    """Any sequence of join/sync/heartbeat/leave/tick/commit/expire/delete: the invariants hold after each
    step, every request is answered exactly once, and a new coordinator replaying the records written so
    far loads the same generation, members and offsets whenever the group is STABLE or EMPTY."""
    shell = Shell(static, initial_delay_ms)
    for op in ops:
        shell.step(op)
        shell.check()
    shell.finish()
