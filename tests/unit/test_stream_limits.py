"""The stream registry of broker/rpc/connections.py: counting, the two bounds, which connections are idle (time is
an argument), and the socket sweep on a real local TCP connection."""

from __future__ import annotations

import socket
import time

import pytest

from ads_spark.broker.rpc import connections
from ads_spark.broker.rpc.connections import StreamLimits, StreamRegistry, SweepPlan, SweepResult, parse_peer
from ads_spark.errors import ErrorCode, NetworkExceptionError

IDLE_MS = 1000
PEER_A, PEER_B = "ipv4:10.0.0.1:40001", "ipv4:10.0.0.2:40002"
ADDRESS_A = ("10.0.0.1", 40001)


def registry(streams_max=4, per_connection_max=2, idle_ms=IDLE_MS) -> StreamRegistry:
    return StreamRegistry(StreamLimits(streams_max, per_connection_max, idle_ms))  # port 0: no sweeper thread


def test_the_broker_bound_refuses_retriably_and_a_release_makes_room():
    streams = registry(streams_max=2)
    first, _ = streams.open(0.0), streams.open(0.0)
    with pytest.raises(NetworkExceptionError) as refused:
        streams.open(0.0)
    assert refused.value.code == ErrorCode.NETWORK_EXCEPTION and refused.value.retriable
    assert "flight.streams.max=2" in refused.value.message
    assert streams.refused_by_limit == {"broker": 1, "connection": 0}
    streams.release(first)
    streams.open(0.0)
    assert streams.open_count() == 2


def test_the_connection_bound_counts_each_peer_apart():
    streams = registry(streams_max=10, per_connection_max=2)
    for _ in range(2):
        streams.attach(streams.open(0.0), PEER_A, 0.0)
    refused_stream = streams.open(0.0)
    with pytest.raises(NetworkExceptionError, match="flight.streams.per.connection.max=2"):
        streams.attach(refused_stream, PEER_A, 0.0)
    streams.attach(streams.open(0.0), PEER_B, 0.0)  # another connection is not held back
    assert streams.refused_by_limit == {"broker": 0, "connection": 1}
    streams.release(refused_stream)  # the call ends (its middleware releases it) with nothing attached
    assert streams.open_count() == 3 and streams.connection_count() == 2


def test_releasing_the_last_stream_forgets_the_connection():
    streams = registry()
    stream = streams.attach(streams.open(0.0), PEER_A, 0.0)
    streams.release(stream)
    streams.release(stream)  # twice is harmless
    assert streams.open_count() == 0 and streams.connection_count() == 0
    assert streams.plan_sweep(100.0).idle == {}


def test_a_connection_is_idle_when_none_of_its_streams_carried_anything_for_idle_ms():
    streams = registry()
    quiet = streams.attach(streams.open(0.0), PEER_A, 0.0)
    other = streams.attach(streams.open(0.0), PEER_A, 0.0)
    other.active_at_s = 0.5
    assert streams.plan_sweep(1.4).idle == {}
    plan = streams.plan_sweep(1.5)
    assert plan.idle == {ADDRESS_A: PEER_A} and not plan.anonymous
    quiet.active_at_s = 1.2  # one stream carried a message: the connection is in use
    assert streams.plan_sweep(1.5).idle == {} and streams.plan_sweep(1.5).active == {ADDRESS_A}


def test_a_stream_with_a_request_in_progress_keeps_its_connection():
    streams = registry()
    stream = streams.attach(streams.open(0.0), PEER_A, 0.0)
    stream.busy = 1  # a long poll, or a produce waiting for its followers
    assert streams.plan_sweep(60.0).idle == {}
    stream.busy = 0
    assert streams.plan_sweep(60.0).idle == {ADDRESS_A: PEER_A}


def test_idle_connections_are_never_chosen_when_the_timeout_is_off():
    streams = registry(idle_ms=-1)
    streams.attach(streams.open(0.0), PEER_A, 0.0)
    streams.open(0.0)
    plan = streams.plan_sweep(1e9)
    assert plan.idle == {} and not plan.anonymous


def test_after_a_sweep_a_closed_connection_is_not_looked_for_again_and_a_busy_one_waits():
    streams = registry()
    streams.attach(streams.open(0.0), PEER_A, 0.0)
    streams.attach(streams.open(0.0), PEER_B, 0.0)
    plan = streams.plan_sweep(2.0)
    assert set(plan.idle.values()) == {PEER_A, PEER_B}
    # A was shut down; B carried unary calls on the wire 300 ms ago (TCP_INFO), so it is not idle.
    streams.record_sweep(plan, SweepResult(closed=[ADDRESS_A], busy_ms={("10.0.0.2", 40002): 300}), 2.0)
    assert streams.closed_idle == 1
    assert streams.plan_sweep(2.5).idle == {}
    assert streams.plan_sweep(2.7).idle == {("10.0.0.2", 40002): PEER_B}


def test_a_stream_that_never_reached_its_handler_asks_for_a_sweep_once_per_idle_time():
    streams = registry()
    streams.open(0.0)  # its client never sent the first message: no handler, no peer
    assert not streams.plan_sweep(0.9).anonymous
    plan = streams.plan_sweep(1.0)
    assert plan.anonymous
    streams.record_sweep(plan, SweepResult(), 1.0)
    assert not streams.plan_sweep(1.5).anonymous
    assert streams.plan_sweep(2.0).anonymous


@pytest.mark.parametrize("peer, address", [
    ("ipv4:127.0.0.1:54321", ("127.0.0.1", 54321)),
    ("ipv6:%5B::1%5D:4000", ("::1", 4000)),
    ("ipv6:[::ffff:127.0.0.1]:4000", ("127.0.0.1", 4000)),
    ("unix:/tmp/socket", None),
    ("ipv4:garbage", None),
])
def test_peer_strings(peer, address):
    assert parse_peer(peer) == address


def test_proc_net_tcp_lines():
    header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    v4 = ("   0: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000  0  0 4242 1 0 20 4 30 10 -1\n"
          "   1: 0100007F:1F90 0100007F:D432 0A 00000000:00000000 00:00000000 00000000  0  0 4343 1 0 20 4 30 10 -1\n"
          "   2: 0100007F:D431 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  0  0 4444 1 0 20 4 30 10 -1\n")
    assert connections.parse_proc_net_tcp(header + v4, 0x1F90) == {4242: ("127.0.0.1", 0xD431)}
    v6 = ("   0: 00000000000000000000000001000000:1F90 0000000000000000FFFF00000100007F:D433 01 "
          "00000000:00000000 00:00000000 00000000 0 0 4545 1 0 20 4 30 10 -1\n"
          "   1: 00000000000000000000000001000000:1F90 00000000000000000000000001000000:D434 01 "
          "00000000:00000000 00:00000000 00000000 0 0 4646 1 0 20 4 30 10 -1\n")
    assert connections.parse_proc_net_tcp(header + v6, 0x1F90) == {4545: ("127.0.0.1", 0xD433),
                                                                    4646: ("::1", 0xD434)}


@pytest.fixture
def tcp_pair():
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname(), timeout=5)
    accepted, _ = listener.accept()
    yield listener.getsockname()[1], client, accepted
    for sock in (client, accepted, listener):
        sock.close()


def test_the_sweep_shuts_down_a_silent_socket_of_this_process_and_spares_a_busy_one(tcp_pair):
    port, client, accepted = tcp_pair
    address = ("127.0.0.1", client.getsockname()[1])
    plan = SweepPlan(idle={address: f"ipv4:127.0.0.1:{address[1]}"})
    client.sendall(b"x")
    accepted.recv(1)
    busy = connections.close_idle_sockets(port, plan, idle_ms=60_000)
    assert busy.closed == [] and busy.busy_ms.get(address, 60_000) < 60_000
    time.sleep(0.15)
    closed = connections.close_idle_sockets(port, plan, idle_ms=100)
    assert closed.closed == [address]
    assert client.recv(1) == b""  # the peer sees the connection end
    accepted.getsockname()  # the fd itself stays open: only its owner closes it


def test_an_anonymous_sweep_leaves_connections_known_to_be_in_use(tcp_pair):
    port, client, _ = tcp_pair
    address = ("127.0.0.1", client.getsockname()[1])
    time.sleep(0.15)
    kept = connections.close_idle_sockets(port, SweepPlan(anonymous=True, active={address}), idle_ms=100)
    assert kept.closed == []
    swept = connections.close_idle_sockets(port, SweepPlan(anonymous=True), idle_ms=100)
    assert swept.closed == [address]
