"""The chaos workload driven through a Kafka client (confluent-kafka) on the brokers' Kafka listeners.

The same workload as ``runner.Workload`` (unique values, acks=all, idempotent, a cap on sends in flight per
partition, a consumer reading throughout), with the same outputs for the checker, but every write and read
goes through librdkafka and ADS's Kafka protocol listener (issue #25): so the checker judges the Kafka
path's acks=all, idempotence, leader-change errors and fencing under the nemesis, not only ADS's client.

A send's outcome: delivered -> ok at its offset; any delivery error -> unknown (librdkafka retries a send
until ``delivery.timeout.ms``, so a failed send may still have been stored); refused before it was queued
(a full local queue) -> failed, as it was never sent. confluent-kafka is imported when a run asks for this
workload (it is a test extra, never a broker dependency).
"""

from __future__ import annotations

import threading
import time

from ads_spark.chaos.checker import FAILED, OK, UNKNOWN, Attempt

DELIVERY_TIMEOUT_MS = 15_000
REQUEST_TIMEOUT_MS = 5_000
POLL_S = 0.1
FLUSH_TIMEOUT_S = 30.0
JOIN_TIMEOUT_S = 60.0
ERROR_EXAMPLE_CHARS = 300


class KafkaWorkload:
    """``config``: a Kafka client config (librdkafka names: ``LocalCluster.kafka_client_config()``)."""

    def __init__(self, config: dict, topic: str, partitions: int, sends_in_flight_max: int):
        from confluent_kafka import Consumer, Producer

        self.topic, self.partitions = topic, partitions
        self.producer = Producer({**config, "enable.idempotence": True, "acks": "all", "linger.ms": 2,
                                  "delivery.timeout.ms": DELIVERY_TIMEOUT_MS,
                                  "request.timeout.ms": REQUEST_TIMEOUT_MS})
        # No group: the reader is assigned every partition from the start and commits nothing.
        self.consumer = Consumer({**config, "group.id": "chaos-reader", "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest"})
        self.attempts: list[Attempt] = []
        self.consumer_reads: list[tuple[int, int, bytes]] = []
        self.producing_stopped_s: float | None = None
        self.produce_stream_threads_left = 0  # ADS's producer's streams; librdkafka has none to leak
        self.error_examples: dict[str, str] = {}  # error name -> its first message (bounded by the names)
        self._stop = threading.Event()
        self._in_flight = [threading.Semaphore(max(1, sends_in_flight_max // partitions)) for _ in range(partitions)]
        self._threads = [threading.Thread(target=self._produce, daemon=True, name="kafka-chaos-producer"),
                         threading.Thread(target=self._consume, daemon=True, name="kafka-chaos-consumer")]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(JOIN_TIMEOUT_S)
        self.producing_stopped_s = time.time()
        self.producer.flush(FLUSH_TIMEOUT_S)  # the sends still in flight report here (this thread)
        self.consumer.close()

    def _produce(self) -> None:
        n = 0
        while not self._stop.is_set():
            partition = n % self.partitions
            n += 1
            if not self._in_flight[partition].acquire(blocking=False):
                self.producer.poll(0.002 / self.partitions)  # delivery reports free the slots
                continue
            value, started = f"v{n}".encode(), time.time()
            try:
                self.producer.produce(self.topic, value=value, partition=partition,
                                      on_delivery=lambda error, message, v=value, p=partition, s=started:
                                      self._record(error, message, v, p, s))
            except Exception as exc:  # BufferError (queue full) and the like: refused before it was queued
                self.error_examples.setdefault(type(exc).__name__, str(exc)[:ERROR_EXAMPLE_CHARS])
                self.attempts.append(Attempt(value, partition, FAILED, -1, started, time.time(), type(exc).__name__))
                self._in_flight[partition].release()
                time.sleep(0.05)
                continue
            self.producer.poll(0)
            time.sleep(0.002)

    def _record(self, error, message, value: bytes, partition: int, started: float) -> None:
        if error is None:
            self.attempts.append(Attempt(value, partition, OK, message.offset(), started, time.time()))
        else:
            self.error_examples.setdefault(error.name(), str(error)[:ERROR_EXAMPLE_CHARS])
            self.attempts.append(Attempt(value, partition, UNKNOWN, -1, started, time.time(), error.name()))
        self._in_flight[partition].release()

    def _consume(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        self.consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(self.partitions)])
        while not self._stop.is_set():
            for message in self.consumer.consume(num_messages=500, timeout=POLL_S):
                if message.error() is not None:  # a fault is on: librdkafka retries by itself
                    self.error_examples.setdefault(f"consume {message.error().name()}",
                                                   str(message.error())[:ERROR_EXAMPLE_CHARS])
                    continue
                self.consumer_reads.append((message.partition(), message.offset(), message.value()))
