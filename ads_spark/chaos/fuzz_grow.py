"""The fuzz category ``partition_increase``: create_partitions against the topic that holds the acknowledged records.

First the inputs every broker must refuse on the keep topic (``fuzz_inputs.partition_increase_inputs``: a
decrease, the same count, huge counts, wrong types, an unknown topic), counted like any other category.
Then, while keep has fewer than ``KEEP_PARTITIONS_MAX`` partitions, one valid grow by one partition, sent
to every live broker at once: exactly one must accept it and the others refuse it as INVALID_PARTITIONS
(the count has already grown, or the conditional write lost the race), because an increase is written
conditionally on the assignment it read. The grown topic must then be served: every broker's metadata
shows the new count with a leader, the ISRs fill up, and records produced with acks=all to the new
partition are acknowledged; they join the run's acknowledged records, so the end check reads them back
with the old ones.

``fuzzer.keep_partitions`` is the run's own count of keep's partitions (read from ZooKeeper at setup and
after each grow): the state diff (``fuzz_state.diff``) lets keep's assignment grow to exactly that count
and nothing else. Each grow is one entry of ``fuzzer.grows``; ``fuzz_checks`` judges them.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from ads_spark.broker.zk.model import topic_path
from ads_spark.chaos.fuzz_inputs import KEEP_TOPIC, dumps, partition_increase_inputs
from ads_spark.chaos.fuzz_report import Answer, CategoryStats
from ads_spark.chaos.fuzz_send import failure, options, send_action
from ads_spark.chaos.runner import wait_healed
from ads_spark.client import Producer

KEEP_PARTITIONS_MAX = 6  # one partition more per round up to here; later rounds send only the refused inputs
GROW_CALL_TIMEOUT_S = 30.0  # the grow waits for ZooKeeper; three at once on a loaded 2-core machine
SERVED_WAIT_S = 30.0  # for every broker's metadata to show the new count, and again for the ISRs to fill
GROWN_RECORDS = 20  # produced with acks=all to each new partition
PRODUCE_TIMEOUT_S = 30.0
LOSING_CODES = ("INVALID_PARTITIONS",)


def zk_partition_count(fuzzer, topic: str = KEEP_TOPIC) -> int | None:
    """How many partitions ``topic``'s assignment in ZooKeeper has, or None if it cannot be read."""
    try:
        data = fuzzer.zk.get(fuzzer.layout.chroot.rstrip("/") + topic_path(topic))[0]
        return len(json.loads(data)["partitions"])
    except Exception:  # noqa: BLE001 - the grow's record says the count is unknown
        return None


def partition_increase(fuzzer, stats: CategoryStats) -> None:
    refused = partition_increase_inputs(fuzzer.keep_partitions)
    stats.inputs += len(refused)
    fuzzer.send_all(stats, refused)
    if fuzzer.keep_partitions < KEEP_PARTITIONS_MAX:
        fuzzer.grows.append(grow(fuzzer, fuzzer.keep_partitions + 1))
        stats.extra.setdefault("grows", []).append(fuzzer.grows[-1])


def grow(fuzzer, target: int) -> dict[str, Any]:
    """Ask every live broker at once to grow keep to ``target`` partitions; then check it is served."""
    before = fuzzer.keep_partitions
    answers = _ask_all(fuzzer, dumps({"topic": KEEP_TOPIC, "partitions": target}))
    accepted = sorted(b for b, a in answers.items() if a.outcome == "success")
    wrong = {b: f"{a.outcome} {a.code or ''} {' '.join(a.texts)[:200]}".strip() for b, a in answers.items()
             if a.outcome != "success" and (a.outcome != "typed" or a.code not in LOSING_CODES)}
    count = zk_partition_count(fuzzer)
    if count is not None:
        fuzzer.keep_partitions = count  # later diffs judge against what exists; a wrong count fails here once
    record: dict[str, Any] = {"before": before, "target": target, "after": count, "accepted_by": accepted,
                              "not_refused_as_expected": wrong}
    problems = []
    if len(accepted) != 1:
        problems.append(f"accepted by {len(accepted)} brokers {accepted}, not exactly one")
    if wrong:
        problems.append(f"answers other than success or {'/'.join(LOSING_CODES)}: {wrong}")
    if count != target:
        problems.append(f"ZooKeeper holds {count} partitions, not {target}")
    if not problems:
        problems += _served(fuzzer, before, target, record)
    record.update(ok=not problems, problems=problems)
    return record


def _ask_all(fuzzer, body: bytes) -> dict[int, Answer]:
    answers: dict[int, Answer] = {}

    def ask(broker_id: int) -> None:
        client = flight.FlightClient(f"grpc+tcp://127.0.0.1:{fuzzer.layout.brokers[broker_id].port}")
        try:
            answers[broker_id] = send_action(client, "create_partitions", body, GROW_CALL_TIMEOUT_S)
        except (flight.FlightError, pa.ArrowException, OSError) as exc:
            answers[broker_id] = failure(exc, lambda: fuzzer.alive(broker_id, 0.5))
        finally:
            client.close()

    threads = [threading.Thread(target=ask, args=(b,), daemon=True, name=f"fuzz-grow-{b}")
               for b in fuzzer.live_brokers()]
    for thread in threads:
        thread.start()
    for thread in threads:  # each call has its own deadline; this bound is for a bug in the sender
        thread.join(GROW_CALL_TIMEOUT_S + 10)
    return {b: answers.get(b, Answer("hang", texts=("no answer recorded",))) for b in fuzzer.live_brokers()}


def _served(fuzzer, before: int, target: int, record: dict[str, Any]) -> list[str]:
    """Problems serving keep at ``target`` partitions: metadata, leaders and ISRs, produce to the new ones."""
    deadline = time.monotonic() + SERVED_WAIT_S
    while True:
        counts = {b: _metadata_count(fuzzer, b) for b in fuzzer.live_brokers()}
        if all(c == target for c in counts.values()) or time.monotonic() >= deadline:
            break
        time.sleep(0.25)
    record["metadata_counts"] = {str(b): c for b, c in counts.items()}
    if any(c != target for c in counts.values()):
        return [f"brokers' metadata [partitions with a leader]: {counts} after {SERVED_WAIT_S}s, not {target}"]
    synced, seen = wait_healed(fuzzer.admin, (KEEP_TOPIC,), SERVED_WAIT_S, 0.25)
    if not synced:
        return [f"not all in sync after {SERVED_WAIT_S}s: [partition, leader, isr] {seen}"]
    acked, failed = _produce(fuzzer, range(before, target))
    fuzzer.acked.update(acked)
    record["acked_in_new_partitions"] = len(acked)
    expected = GROWN_RECORDS * (target - before)
    return [] if len(acked) == expected else [f"{len(acked)}/{expected} acknowledged in the new partitions; "
                                              f"first failure: {failed[:1]}"]


def _metadata_count(fuzzer, broker_id: int) -> int | None:
    """Partitions of keep with a leader in one broker's metadata answer (its cache, pushed by the controller)."""
    client = flight.FlightClient(f"grpc+tcp://127.0.0.1:{fuzzer.layout.brokers[broker_id].port}")
    try:
        results = list(client.do_action(flight.Action("metadata", pa.py_buffer(dumps({"topics": [KEEP_TOPIC]}))),
                                        options(5.0)))
        topics = json.loads(results[0].body.to_pybytes()).get("topics", [])
        partitions = next((t.get("partitions", []) for t in topics if t.get("topic") == KEEP_TOPIC), [])
        return sum(1 for p in partitions if p.get("leader", -1) >= 0)
    except Exception:  # noqa: BLE001 - not answering now; the wait above is bounded
        return None
    finally:
        client.close()


def _produce(fuzzer, partitions) -> tuple[dict[tuple[int, int], bytes], list[str]]:
    # Not idempotent: a producer id would be allocated from the block of whichever broker answers, and a new
    # block written to ZooKeeper is a change the state diff would lay at this category's door.
    producer = Producer({"bootstrap.servers": fuzzer.cluster.bootstrap_servers, "acks": "all", "linger.ms": 5,
                         "enable.idempotence": False, "delivery.timeout.ms": int(PRODUCE_TIMEOUT_S * 1000)})
    acked, failed = {}, []
    try:
        futures = []
        for partition in partitions:
            for i in range(GROWN_RECORDS):
                value = f"grown-{fuzzer.settings.seed}-{partition}-{i:04d}-".encode().ljust(64, b".")
                futures.append((value, producer.produce(KEEP_TOPIC, value=value, partition=partition)))
        producer.flush(PRODUCE_TIMEOUT_S)
        for value, future in futures:
            error = future.exception(timeout=5)
            if error is None:
                metadata = future.result()
                acked[(metadata.partition, metadata.offset)] = value
            else:
                failed.append(f"{type(error).__name__}: {str(error)[:200]}")
    finally:
        producer.close(10)
    return acked, failed
