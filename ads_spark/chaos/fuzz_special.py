"""The fuzz categories that are not a list of inputs, and the probe that a broker still obeys its controller.

* ``fetch_amplification``: one fetch per broker naming a keep partition it leads 2,000 times with
  ``max_bytes`` and ``partition_max_bytes`` 2**63 (issue #20 finding 7: 6.7 M rows, +130 MB RSS).
  The answer must be refused or bounded; its rows, bytes and the broker's RSS around it are recorded.
* ``connections``: per broker, many connections and half-open DoExchange streams (opened, never
  written to; half of them on one connection), held, then closed by the client; the broker's thread
  count before, at the peak and after, and whether it still answered a metadata request while they
  were held.
* ``probe_controller``: create a one-partition topic on every live broker and check that each
  broker's metadata and replica hold it, as the real controller said: a broker that recorded a
  forged controller epoch refuses the real controller from then on (finding 5).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from ads_spark.chaos.fuzz_inputs import KEEP_TOPIC, REPEATS, FuzzInput, dumps
from ads_spark.chaos.fuzz_report import Answer, CategoryStats, from_json_answers
from ads_spark.chaos.fuzz_send import failure, options, send, send_action
from ads_spark.chaos.fuzz_state import proc_status
from ads_spark.protocol.records import PRODUCE_SCHEMA

AMPLIFIED_FETCH_TIMEOUT_S = 60.0  # an unbounded answer of ~200 MB takes a while to read; a hang is still a hang
HELD_PROBE_TIMEOUT_S = 5.0
STREAM_CLOSE_TIMEOUT_S = 10.0
PROBE_TIMEOUT_S = 15.0
REPLICA_WAIT_S = 5.0


def amplified_fetch(partition: int) -> bytes:
    entry = {"topic": KEEP_TOPIC, "partition": partition, "fetch_offset": 0, "current_leader_epoch": -1,
             "partition_max_bytes": 2 ** 63}
    return dumps({"type": "fetch", "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 2 ** 63,
                  "partitions": [entry] * REPEATS})


def fetch_amplification(fuzzer, stats: CategoryStats) -> None:
    stats.inputs += 1
    answers = {}
    for broker_id in fuzzer.live_brokers():
        partition = fuzzer.targets.led.get(KEEP_TOPIC, {}).get(broker_id, 0)
        label = f"{KEEP_TOPIC}-{partition} x{REPEATS}, max_bytes and partition_max_bytes 2**63"
        inp = FuzzInput("fetch_amplification", "repeated_partition", label, "get",
                        build=lambda p=partition: amplified_fetch(p), timeout_s=AMPLIFIED_FETCH_TIMEOUT_S)
        pid = fuzzer.cluster.broker_pid(broker_id)
        before = proc_status(pid) or {}
        port = fuzzer.layout.brokers[broker_id].port
        client = flight.FlightClient(f"grpc+tcp://127.0.0.1:{port}")
        try:
            answer = send(client, inp, broker_id, port, fuzzer.targets, AMPLIFIED_FETCH_TIMEOUT_S,
                          lambda b=broker_id: fuzzer.alive(b, 0.5))
        finally:
            client.close()
        after = proc_status(pid) or {}
        stats.record(inp.kind, label, broker_id, answer)
        answers[str(broker_id)] = {"partition": partition, "outcome": answer.outcome, "code": answer.code,
                                   "rows": answer.detail.get("rows", 0), "bytes": answer.detail.get("bytes", 0),
                                   "elapsed_s": answer.detail.get("elapsed_s"),
                                   "rss_kib_before": before.get("rss_kib"), "rss_kib_after": after.get("rss_kib")}
    stats.extra["answers"] = answers


def _threads(fuzzer) -> dict[str, int | None]:
    return {str(b): (proc_status(fuzzer.cluster.broker_pid(b)) or {}).get("threads") for b in fuzzer.live_brokers()}


def connections(fuzzer, stats: CategoryStats) -> None:
    settings = fuzzer.settings
    before = _threads(fuzzer)
    held = {b: _open(fuzzer, b, stats) for b in fuzzer.live_brokers()}
    stats.inputs += settings.half_open_streams + settings.connections
    time.sleep(settings.hold_s)
    peak = _threads(fuzzer)
    answered = {}
    for broker_id in held:
        answered[str(broker_id)] = _answers_while_held(fuzzer, broker_id)
    for broker_id, (clients, streams) in held.items():
        for kind, writer, reader in streams:
            stats.record(kind, "half-open stream, closed by the client", broker_id,
                         _close(writer, reader, lambda b=broker_id: fuzzer.alive(b, 0.5)))
        for client in clients:
            client.close()
    time.sleep(settings.threads_settle_s)
    stats.extra["threads"] = {b: {"before": before.get(b), "peak": peak.get(b), "after": after}
                              for b, after in _threads(fuzzer).items()}
    stats.extra["answered_while_held"] = answered


def _open(fuzzer, broker_id: int, stats: CategoryStats) -> tuple[list, list]:
    """``connections`` clients, each with one call made, and the half-open streams spread over them."""
    settings = fuzzer.settings
    port = fuzzer.layout.brokers[broker_id].port
    clients, streams = [], []
    for _ in range(settings.connections):
        client = flight.FlightClient(f"grpc+tcp://127.0.0.1:{port}")
        clients.append(client)
        try:
            list(client.list_actions(options(settings.call_timeout_s)))
            answer = Answer("success", texts=())
        except (flight.FlightError, pa.ArrowException, OSError) as exc:
            answer = failure(exc, lambda: fuzzer.alive(broker_id, 0.5))
        stats.record("connection", "a new connection's list_actions", broker_id, answer)
    for index in range(settings.half_open_streams):
        command = {"type": "produce"} if index % 2 else {"type": "fetch_session"}
        # Half of them on one connection, past a per-connection bound; the rest spread over all of them.
        client = clients[0 if index < settings.half_open_streams // 2 else index % len(clients)]
        try:
            writer, reader = client.do_exchange(flight.FlightDescriptor.for_command(json.dumps(command).encode()),
                                                options(settings.hold_s + 60))
            streams.append((f"half_open_{command['type']}", writer, reader))
        except (flight.FlightError, pa.ArrowException, OSError) as exc:
            stats.record(f"half_open_{command['type']}", "opening a half-open stream", broker_id,
                         failure(exc, lambda: fuzzer.alive(broker_id, 0.5)))
    return clients, streams


def _answers_while_held(fuzzer, broker_id: int) -> dict[str, Any]:
    port = fuzzer.layout.brokers[broker_id].port
    client = flight.FlightClient(f"grpc+tcp://127.0.0.1:{port}")
    started = time.monotonic()
    try:
        answer = send_action(client, "metadata", b'{"topics": []}', HELD_PROBE_TIMEOUT_S)
    except (flight.FlightError, pa.ArrowException, OSError) as exc:
        answer = failure(exc, lambda: fuzzer.alive(broker_id, 0.5))
    finally:
        client.close()
    return {"outcome": answer.outcome, "code": answer.code, "elapsed_ms": round((time.monotonic() - started) * 1000)}


def _close(writer, reader, alive) -> Answer:
    """End a half-open stream from the client side: done writing, then read whatever the broker says."""
    texts = []
    try:
        writer.begin(PRODUCE_SCHEMA)
        writer.done_writing()
        deadline = time.monotonic() + STREAM_CLOSE_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                chunk = reader.read_chunk()
            except StopIteration:
                break
            if chunk.app_metadata is not None:
                texts.append(chunk.app_metadata.to_pybytes().decode("utf-8", "replace"))
        writer.close()
    except (flight.FlightError, pa.ArrowException, OSError) as exc:
        return failure(exc, alive)
    return from_json_answers(texts)


def probe_controller(fuzzer, topic: str) -> dict[str, Any]:
    """Create ``topic`` (one partition on every live broker) and check that each broker holds it as told."""
    live = fuzzer.live_brokers()
    error = None
    try:
        fuzzer.admin.create_topic(topic, 1, min(3, len(live)), timeout_s=PROBE_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - which brokers did not follow is worked out below
        error = f"{type(exc).__name__}: {exc}"[:300]
    deadline = time.monotonic() + REPLICA_WAIT_S
    while True:
        not_obeying = {b: why for b in live if (why := _disobeys(fuzzer, b, topic)) is not None}
        if not not_obeying or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    detail = "; ".join(f"broker {b}: {why}" for b, why in sorted(not_obeying.items())) or "every broker holds it"
    return {"topic": topic, "ok": error is None and not not_obeying, "create_error": error, "detail": detail,
            "not_obeying": sorted(not_obeying)}


def _disobeys(fuzzer, broker_id: int, topic: str) -> str | None:
    port = fuzzer.layout.brokers[broker_id].port
    client = flight.FlightClient(f"grpc+tcp://127.0.0.1:{port}")
    try:
        metadata = _action(client, "metadata", {"topics": [topic]})
        partitions = next((t.get("partitions", []) for t in metadata.get("topics", []) if t.get("topic") == topic), [])
        if not partitions:
            return "its metadata does not have the topic (update_metadata not applied)"
        status = _action(client, "replica_status", {"topic": topic})
        held = {p["partition"]: p for p in status.get("partitions", [])}
        for partition in partitions:
            if broker_id in partition.get("replicas", []):
                replica = held.get(partition["partition"])
                if replica is None:
                    return "it holds no replica of the topic (leader_and_isr not applied)"
                if replica.get("leader_epoch") != partition.get("leader_epoch"):
                    return f"its replica is at leader epoch {replica.get('leader_epoch')}, the controller's is " \
                           f"{partition.get('leader_epoch')}"
        return None
    except Exception as exc:  # noqa: BLE001 - a broker that cannot be asked does not obey either
        return f"cannot be asked ({type(exc).__name__}: {str(exc)[:120]})"
    finally:
        client.close()


def _action(client: flight.FlightClient, name: str, body: dict) -> dict:
    results = list(client.do_action(flight.Action(name, pa.py_buffer(dumps(body))), options(5.0)))
    return json.loads(results[0].body.to_pybytes())
