"""Issue #20, finding 7 (streams): a client cannot make a broker hold threads without bound.

A broker holds one thread per open stream. Half-open DoExchange streams (opened, then silent) and raw gRPC
streams that never send their first message are refused past ``flight.streams.max`` and
``flight.streams.per.connection.max`` with a typed retriable error at once, and the broker closes a connection
whose streams carried nothing for ``connections.max.idle.ms``, which ends its streams and frees their threads.
Our own clients, idle long enough to have their connection closed, carry on as if nothing happened.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from concurrent.futures import Future, ThreadPoolExecutor

import pyarrow.flight as flight
import pytest

from ads_spark.client import Admin, Consumer, Producer, TopicPartition
from ads_spark.protocol import wire
from ads_spark.errors import ErrorCode
from tests.fixtures.cluster import metric_total

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

IDLE_MS = 2000
STREAMS_MAX = 40
PER_CONNECTION_MAX = 16
CLIENTS, STREAMS_PER_CLIENT = 5, 40  # 200 half-open streams, 16 at most accepted per connection, 40 in all
RAW_STREAMS = 100
THREADS_SLACK = 12  # gRPC's own pollers and timers come and go beside the handler threads
REFUSED_WITHIN_S = 3.0
REAPED_WITHIN_S = IDLE_MS / 1000 + 8.0
SETTLE_WAIT_S = 15.0


def broker_threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("Threads:"))


def settled_threads(pid: int, at_most: int | None = None, wait_s: float = SETTLE_WAIT_S) -> int:
    """The broker's thread count once it stops falling (or once it is at most ``at_most``)."""
    deadline = time.monotonic() + wait_s
    last = broker_threads(pid)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = broker_threads(pid)
        if (at_most is not None and now <= at_most) or (at_most is None and now >= last):
            return now
        last = now
    return last


def outcome_of(exc: flight.FlightError) -> object:
    extra = getattr(exc, "extra_info", None)
    return json.loads(extra)["error_code"] if extra else type(exc).__name__


def first_answer(reader, opened_at: float) -> tuple[object, float]:
    """(error code or exception name, seconds after opening) of a stream's first read."""
    try:
        reader.read_chunk()
        outcome = "answered"
    except StopIteration:
        outcome = "ended"
    except flight.FlightError as exc:
        outcome = outcome_of(exc)
    return outcome, time.monotonic() - opened_at


def refused_at_open(exc: flight.FlightError, opened_at: float) -> Future:
    """A stream whose refusal came back before ``do_exchange`` returned."""
    done: Future = Future()
    done.set_result((outcome_of(exc), time.monotonic() - opened_at))
    return done


def open_half_open_streams(clients: list, pool: ThreadPoolExecutor) -> tuple[list, list]:
    """STREAMS_PER_CLIENT fetch sessions on each client's connection, that never send a request: the streams
    (a writer left to the garbage collector half-closes its stream) and the futures of their first reads."""
    descriptor = flight.FlightDescriptor.for_command(wire.dumps({"type": wire.FETCH_SESSION}))
    options = flight.FlightCallOptions(timeout=60)  # a bound on the test, far past the idle time
    streams, answers = [], []
    for client in clients:
        for _ in range(STREAMS_PER_CLIENT):
            opened_at = time.monotonic()
            try:
                writer, reader = client.do_exchange(descriptor, options)
            except flight.FlightError as exc:
                answers.append(refused_at_open(exc, opened_at))
                continue
            streams.append(writer)
            answers.append(pool.submit(first_answer, reader, opened_at))
    return streams, answers


def raw_headers_only_streams(port: int, count: int) -> socket.socket:
    """One HTTP/2 connection with ``count`` DoExchange streams whose first message never comes: each holds a
    thread inside Arrow's C++ before any Python handler runs."""
    def frame(kind: int, flags: int, stream_id: int, payload: bytes) -> bytes:
        return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream_id) + payload

    def literal(name: bytes, value: bytes) -> bytes:  # HPACK: literal without indexing, new name
        return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value

    path, authority = b"/arrow.flight.protocol.FlightService/DoExchange", f"127.0.0.1:{port}".encode()
    headers = (b"\x83\x86"  # :method POST, :scheme http (static table)
               + b"\x04" + bytes([len(path)]) + path + b"\x01" + bytes([len(authority)]) + authority
               + literal(b"content-type", b"application/grpc") + literal(b"te", b"trailers"))
    sock = socket.create_connection(("127.0.0.1", port), timeout=REAPED_WITHIN_S + 5)
    sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, b""))
    for index in range(count):
        sock.sendall(frame(1, 0x4, 1 + 2 * index, headers))  # HEADERS, END_HEADERS, no data ever
    return sock


def closed_by_peer_within(sock: socket.socket, wait_s: float) -> bool:
    deadline = time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline:
            if not sock.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return False


def produce_and_consume(bootstrap: str, topic: str, count: int) -> list[bytes]:
    admin = Admin({"bootstrap.servers": bootstrap})
    try:
        admin.create_topic(topic, partitions=1, replication_factor=1)
    finally:
        admin.close()
    with Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0}) as producer:
        for future in [producer.produce(topic, value=f"v{i}".encode(), partition=0) for i in range(count)]:
            future.result(timeout=30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "local.reads": "false"})
    try:
        return consumer.fetch_arrow(TopicPartition(topic, 0), 0, count).column("value").to_pylist()
    finally:
        consumer.close()


def half_open_phase(pid: int, port: int, baseline: int) -> int:
    """200 half-open streams on 5 connections: the first connection's alone first, so that its 16 accepted and
    24 refused are not mixed up with the others'. Returns how many were accepted."""
    clients = [flight.FlightClient(f"grpc+tcp://127.0.0.1:{port}") for _ in range(CLIENTS)]
    opened_at = time.monotonic()
    with ThreadPoolExecutor(max_workers=CLIENTS * STREAMS_PER_CLIENT) as pool:
        streams, answers = open_half_open_streams(clients[:1], pool)
        deadline = time.monotonic() + REFUSED_WITHIN_S
        while sum(a.done() for a in answers) < STREAMS_PER_CLIENT - PER_CONNECTION_MAX and time.monotonic() < deadline:
            time.sleep(0.05)
        more_streams, more_answers = open_half_open_streams(clients[1:], pool)
        answers += more_answers
        time.sleep(1.0)  # every stream has reached the broker; the idle time has not passed
        peak = broker_threads(pid)
        outcomes = [answer.result(timeout=REAPED_WITHIN_S + 5) for answer in answers]
    all_ended_s = time.monotonic() - opened_at
    after = settled_threads(pid, at_most=baseline + 3)
    del streams, more_streams
    for client in clients:
        client.close()

    refused = [seconds for outcome, seconds in outcomes if outcome == ErrorCode.NETWORK_EXCEPTION]
    # The accepted streams ended when the broker closed their idle connections: gRPC's UNAVAILABLE.
    accepted = [outcome for outcome, _ in outcomes if outcome != ErrorCode.NETWORK_EXCEPTION]
    assert set(accepted) == {"FlightUnavailableError"}, outcomes
    per_client = [sum(outcome != ErrorCode.NETWORK_EXCEPTION for outcome, _ in outcomes[i:i + STREAMS_PER_CLIENT])
                  for i in range(0, len(outcomes), STREAMS_PER_CLIENT)]
    assert per_client[0] == PER_CONNECTION_MAX and max(per_client) <= PER_CONNECTION_MAX, per_client
    assert PER_CONNECTION_MAX < len(accepted) <= STREAMS_MAX, per_client
    assert max(refused) < REFUSED_WITHIN_S, max(refused)
    assert peak <= baseline + STREAMS_MAX + THREADS_SLACK, (baseline, peak)
    assert IDLE_MS / 1000 <= all_ended_s < REAPED_WITHIN_S, all_ended_s
    assert after <= baseline + 3, (baseline, peak, after)
    print(f"half-open streams: threads {baseline} -> {peak} -> {after}; accepted per connection {per_client}")
    return len(accepted)


def raw_phase(pid: int, port: int, baseline: int) -> None:
    raw = raw_headers_only_streams(port, RAW_STREAMS)
    try:
        time.sleep(1.0)
        peak = broker_threads(pid)
        assert peak <= baseline + STREAMS_MAX + THREADS_SLACK, (baseline, peak)
        assert closed_by_peer_within(raw, REAPED_WITHIN_S)
    finally:
        raw.close()
    after = settled_threads(pid, at_most=baseline + 3)
    assert after <= baseline + 3, (baseline, peak, after)
    print(f"raw streams: threads {baseline} -> {peak} -> {after}")


def test_streams_are_bounded_refused_at_once_and_freed_when_idle(fresh_cluster, topic_name):
    cluster = fresh_cluster(brokers=1, overrides=[f"flight.streams.max={STREAMS_MAX}",
                                                  f"flight.streams.per.connection.max={PER_CONNECTION_MAX}",
                                                  f"connections.max.idle.ms={IDLE_MS}"])
    pid, port = cluster.broker_pid(1), cluster.state["brokers"][0]["port"]
    baseline = settled_threads(pid)
    accepted = half_open_phase(pid, port, baseline)
    raw_phase(pid, port, baseline)

    by_connection = metric_total(cluster, 'ads_flight_streams_refused_total{limit="connection"}')
    by_broker = metric_total(cluster, 'ads_flight_streams_refused_total{limit="broker"}')
    assert by_connection >= STREAMS_PER_CLIENT - PER_CONNECTION_MAX
    assert by_connection + by_broker == CLIENTS * STREAMS_PER_CLIENT - accepted + RAW_STREAMS - STREAMS_MAX
    assert metric_total(cluster, "ads_connections_closed_idle_total") >= 3  # a held stream's connection, raw
    assert metric_total(cluster, "ads_flight_streams_open") == 0
    assert produce_and_consume(cluster.bootstrap_servers, topic_name, 10) == [f"v{i}".encode() for i in range(10)]
    assert broker_threads(pid) <= baseline + STREAMS_MAX + THREADS_SLACK


def test_idle_clients_carry_on_after_the_broker_closed_their_connections(fresh_cluster, topic_name):
    cluster = fresh_cluster(brokers=2, overrides=[f"connections.max.idle.ms={IDLE_MS}"])
    bootstrap = cluster.bootstrap_servers
    admin = Admin({"bootstrap.servers": bootstrap})
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    consumer = Consumer({"bootstrap.servers": bootstrap, "local.reads": "false", "fetch.max.wait.ms": 200})
    try:
        admin.create_topic(topic_name, partitions=2, replication_factor=2, config={"min.insync.replicas": "2"})
        consumer.assign([TopicPartition(topic_name, p, 0) for p in range(2)])

        def round_trip(first: int) -> bool:
            sent = [f"r{i}".encode() for i in range(first, first + 10)]
            for future in [producer.produce(topic_name, value=v, partition=i % 2) for i, v in enumerate(sent)]:
                future.result(timeout=30)
            got: list[bytes] = []
            deadline = time.monotonic() + 30
            while len(got) < len(sent) and time.monotonic() < deadline:
                got += [record.value for record in consumer.poll(timeout=1.0)]
            return sorted(got) == sorted(sent)

        assert round_trip(0)
        closed_before = metric_total(cluster, "ads_connections_closed_idle_total")
        streams_before = producer.streams_opened
        deadline = time.monotonic() + REAPED_WITHIN_S
        while metric_total(cluster, "ads_connections_closed_idle_total") - closed_before < 2:
            assert time.monotonic() < deadline, "the idle producer's and consumer's connections stayed open"
            time.sleep(0.5)
        assert round_trip(10)  # both reconnect on their own; acks=all with min ISR 2: the followers still fetch
        assert producer.streams_opened > streams_before
        assert all(len(p.isr) == 2 for d in admin.describe_topics([topic_name]) for p in d.partitions)
    finally:
        consumer.close()
        producer.close()
        admin.close()
