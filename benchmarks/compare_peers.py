"""The peer workloads of `benchmarks.compare`: NATS JetStream (nats-py) and RabbitMQ streams (rstream).

Each class owns its cluster (``up``/``down``) and measures the cases of the
comparison through its client used the way the client's docs recommend for
throughput, with 1 KiB records and acknowledgement after replication to a
quorum of 3 replicas:

* produce_record:  NATS ``js.publish_async`` per record (at most
  ``PUBLISH_PENDING_MAX`` acks outstanding); rstream ``Producer.send`` per
  record (buffered by the client, confirmed by callback);
* produce_batched: NATS 512 ``publish_async`` awaited together, a few batches
  in flight; rstream ``send_batch`` of 512, confirmations by callback;
* consume:         NATS pull subscription fetching ``FETCH_RECORDS`` at a time
  (no acks); rstream ``Consumer.subscribe`` from the first offset;
* latency:         see ``benchmarks.latency``: a paced producer stamps each
  record, a subscriber in the same event loop reads it back.

Not run on its own: ``python -m benchmarks.compare`` drives it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import deque

from benchmarks.latency import paced_due, stamp, stamp_age_ms
from benchmarks.peers import nats_cluster, rabbitmq_cluster

RECORD_BYTES = 1024
BATCH_RECORDS = 512
BATCHES_IN_FLIGHT_MAX = 8
PUBLISH_PENDING_MAX = 4096
FETCH_RECORDS = 4096
CASE_TIMEOUT_S = 300.0
TICK_S = 0.001


async def _wait_until(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not done within {timeout_s}s")
        await asyncio.sleep(0.005)


class NatsBench:
    system = "nats"

    def __init__(self):
        self.cluster = nats_cluster.NatsCluster()

    def up(self) -> None:
        self.cluster.up()
        name = self.new_topic()  # the first stream waits for the JetStream meta leader
        self.delete_topic(name)

    def down(self) -> None:
        self.cluster.down()

    async def _js(self):
        nc = await nats_cluster.connect(self.cluster)
        return nc, nc.jetstream(publish_async_max_pending=PUBLISH_PENDING_MAX)

    def new_topic(self) -> str:
        name = f"bench{uuid.uuid4().hex[:8]}"

        async def create() -> None:
            nc, js = await self._js()
            await nats_cluster.create_stream(js, name, name)
            await nc.close()
        asyncio.run(create())
        return name

    def delete_topic(self, name: str) -> None:
        async def delete() -> None:
            nc, js = await self._js()
            await js.delete_stream(name)
            await nc.close()
        asyncio.run(delete())

    def produce_record(self, topic: str, records: int) -> float:
        async def run() -> float:
            nc, js = await self._js()
            payload = b"r" * RECORD_BYTES
            started = time.perf_counter()
            futures = [await js.publish_async(topic, payload) for _ in range(records)]
            await asyncio.wait_for(asyncio.gather(*futures), CASE_TIMEOUT_S)
            elapsed = time.perf_counter() - started
            await nc.close()
            return records / elapsed
        return asyncio.run(run())

    def produce_batched(self, topic: str, records: int) -> float:
        async def run() -> float:
            nc, js = await self._js()
            payload = b"b" * RECORD_BYTES
            in_flight: deque = deque()
            batches = records // BATCH_RECORDS
            started = time.perf_counter()
            for _ in range(batches):
                if len(in_flight) >= BATCHES_IN_FLIGHT_MAX:
                    await asyncio.wait_for(in_flight.popleft(), CASE_TIMEOUT_S)
                futures = [await js.publish_async(topic, payload) for _ in range(BATCH_RECORDS)]
                in_flight.append(asyncio.gather(*futures))
            while in_flight:
                await asyncio.wait_for(in_flight.popleft(), CASE_TIMEOUT_S)
            elapsed = time.perf_counter() - started
            await nc.close()
            return batches * BATCH_RECORDS / elapsed
        return asyncio.run(run())

    def consume(self, topic: str, records: int) -> float:
        async def run() -> float:
            from nats.js.api import AckPolicy, ConsumerConfig

            nc, js = await self._js()
            started = time.perf_counter()
            sub = await js.pull_subscribe(topic, stream=topic, config=ConsumerConfig(ack_policy=AckPolicy.NONE),
                                          pending_msgs_limit=4 * FETCH_RECORDS, pending_bytes_limit=256 << 20)
            received, deadline = 0, time.monotonic() + CASE_TIMEOUT_S
            while received < records and time.monotonic() < deadline:
                received += len(await sub.fetch(batch=min(FETCH_RECORDS, records - received), timeout=5))
            elapsed = time.perf_counter() - started
            await nc.close()
            if received < records:
                raise TimeoutError(f"nats consumed {received} of {records}")
            return received / elapsed
        return asyncio.run(run())

    def latency(self, topic: str, rate_per_s: float, duration_s: float) -> list[float]:
        async def run() -> list[float]:
            from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

            nc, js = await self._js()
            latencies_ms: list[float] = []

            async def on_message(message) -> None:
                latencies_ms.append(stamp_age_ms(message.data))
            await js.subscribe(topic, stream=topic, cb=on_message, manual_ack=True,
                               config=ConsumerConfig(ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.NEW))
            sent, started, futures = 0, time.monotonic(), []
            while time.monotonic() - started < duration_s:
                for _ in range(paced_due(started, rate_per_s, sent)):
                    futures.append(await js.publish_async(topic, stamp(RECORD_BYTES)))
                    sent += 1
                await asyncio.sleep(TICK_S)
            await asyncio.wait_for(asyncio.gather(*futures), CASE_TIMEOUT_S)
            await _wait_until(lambda: len(latencies_ms) >= sent, 30, "nats latency read-back")
            await nc.close()
            return latencies_ms
        return asyncio.run(run())


class RabbitBench:
    system = "rabbitmq"

    def __init__(self):
        self.cluster = rabbitmq_cluster.RabbitCluster()

    def up(self) -> None:
        self.cluster.up()

    def down(self) -> None:
        self.cluster.down()

    def new_topic(self) -> str:
        name = f"bench-{uuid.uuid4().hex[:8]}"
        asyncio.run(rabbitmq_cluster.create_stream(self.cluster, name))
        return name

    def delete_topic(self, name: str) -> None:
        asyncio.run(rabbitmq_cluster.delete_stream(self.cluster, name))

    def _produce(self, topic: str, records: int, batched: bool) -> float:
        if batched:
            records = records // BATCH_RECORDS * BATCH_RECORDS

        async def run() -> float:
            confirmed = failed = 0

            def on_confirm(status) -> None:
                nonlocal confirmed, failed
                confirmed += 1
                failed += not status.is_confirmed
            async with rabbitmq_cluster.producer(self.cluster) as producer:
                await producer.send_batch(topic, [b"warm"], on_publish_confirm=on_confirm)  # declares the publisher
                await _wait_until(lambda: confirmed == 1, 30, "rabbitmq publisher")
                payload = b"p" * RECORD_BYTES
                started = time.perf_counter()
                if batched:
                    for _ in range(records // BATCH_RECORDS):
                        await producer.send_batch(topic, [payload] * BATCH_RECORDS, on_publish_confirm=on_confirm)
                else:
                    for _ in range(records):
                        await producer.send(topic, payload, on_publish_confirm=on_confirm)
                await _wait_until(lambda: confirmed >= records + 1, CASE_TIMEOUT_S, "rabbitmq confirms")
                elapsed = time.perf_counter() - started
            if failed:
                raise RuntimeError(f"rabbitmq: {failed} publishes not confirmed")
            return records / elapsed
        return asyncio.run(run())

    def produce_record(self, topic: str, records: int) -> float:
        return self._produce(topic, records, batched=False)

    def produce_batched(self, topic: str, records: int) -> float:
        return self._produce(topic, records, batched=True)

    def consume(self, topic: str, records: int) -> float:
        async def run() -> float:
            from rstream import ConsumerOffsetSpecification, OffsetType

            received = 0

            def on_message(message, context) -> None:
                nonlocal received
                received += 1
            async with rabbitmq_cluster.consumer(self.cluster) as consumer:
                started = time.perf_counter()
                await consumer.subscribe(topic, on_message,
                                         offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None))
                # +1: the publisher-declaring record written before each produce case
                await _wait_until(lambda: received >= records + 1, CASE_TIMEOUT_S, "rabbitmq consume")
                elapsed = time.perf_counter() - started
            return received / elapsed
        return asyncio.run(run())

    def latency(self, topic: str, rate_per_s: float, duration_s: float) -> list[float]:
        async def run() -> list[float]:
            from rstream import ConsumerOffsetSpecification, OffsetType

            latencies_ms: list[float] = []
            confirmed = 0

            def on_confirm(status) -> None:
                nonlocal confirmed
                confirmed += 1
            async with rabbitmq_cluster.consumer(self.cluster) as consumer, \
                    rabbitmq_cluster.producer(self.cluster) as producer:
                await consumer.subscribe(topic, lambda message, context: latencies_ms.append(stamp_age_ms(message)),
                                         offset_specification=ConsumerOffsetSpecification(OffsetType.NEXT, None))
                sent, started = 0, time.monotonic()
                while time.monotonic() - started < duration_s:
                    due = paced_due(started, rate_per_s, sent)
                    if due:
                        await producer.send_batch(topic, [stamp(RECORD_BYTES) for _ in range(due)],
                                                  on_publish_confirm=on_confirm)
                        sent += due
                    await asyncio.sleep(TICK_S)
                await _wait_until(lambda: confirmed >= sent, CASE_TIMEOUT_S, "rabbitmq confirms")
                await _wait_until(lambda: len(latencies_ms) >= sent, 30, "rabbitmq latency read-back")
            return latencies_ms
        return asyncio.run(run())
