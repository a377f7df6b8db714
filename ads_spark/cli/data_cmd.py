"""``ads produce``, ``ads consume``, ``ads offsets``: records in and out from a terminal.

The client (``ads_spark.client``) is imported inside the commands that use it: a broker starts
from this parser and must not load the producer or consumer (``tests/unit/test_import_graph.py``).
"""

from __future__ import annotations

import sys
import time

from ads_spark.cli.common import add_bootstrap, client_config, print_json
from ads_spark.errors import AdsError, InvalidRequestError


def register(commands) -> None:
    produce = commands.add_parser("produce", help="one record per stdin line")
    add_bootstrap(produce)
    produce.add_argument("--topic", required=True)
    produce.add_argument("--partition", type=int, default=None)
    produce.add_argument("--key-separator", default=None)
    produce.add_argument("--acks", default="all", choices=["0", "1", "all", "-1"])
    produce.add_argument("--timeout-ms", type=int, default=60_000, help="delivery timeout")
    produce.set_defaults(func=produce_lines)

    consume = commands.add_parser("consume", help="print committed records, one value per line")
    add_bootstrap(consume)
    consume.add_argument("--topic", required=True)
    consume.add_argument("--partition", type=int, default=None)
    consume.add_argument("--offset", default=None, help="earliest | latest | N")
    consume.add_argument("--from-beginning", action="store_true")
    consume.add_argument("--max-messages", type=int, default=None)
    consume.add_argument("--timeout-ms", type=int, default=None, help="stop after this long without records")
    consume.add_argument("--print-offset", action="store_true")
    consume.add_argument("--print-key", action="store_true")
    consume.set_defaults(func=consume_records)

    offsets = commands.add_parser("offsets", help="earliest offset and high watermark per partition")
    add_bootstrap(offsets)
    offsets.add_argument("--topic", required=True)
    offsets.add_argument("--time", default="latest", help="earliest | latest | timestamp in ms")
    offsets.add_argument("--json", action="store_true")
    offsets.set_defaults(func=show_offsets)


def produce_lines(args) -> int:
    from ads_spark.client import Producer

    producer = Producer(client_config(args, acks=args.acks, **{"delivery.timeout.ms": args.timeout_ms}))
    futures = []
    try:
        for line in sys.stdin:
            line = line.rstrip("\n")
            key = None
            if args.key_separator and args.key_separator in line:
                key, line = line.split(args.key_separator, 1)
            futures.append(producer.produce(args.topic, value=line, key=key, partition=args.partition))
        producer.flush(args.timeout_ms / 1000 + 5)
    finally:
        producer.close(5)
    failed = 0
    first_error = None
    for future in futures:
        try:
            future.result(timeout=0)
        except Exception as exc:  # noqa: BLE001 - counted and reported below
            failed += 1
            first_error = first_error or exc
    if failed:
        print(f"ads produce: error: {failed} of {len(futures)} records not acknowledged: {first_error}",
              file=sys.stderr)
        return 1
    return 0


def _partitions(admin, topic: str, partition: int | None) -> list[int]:
    description = admin.describe_topics([topic])[0]
    numbers = [p.partition for p in description.partitions]
    if partition is not None:
        if partition not in numbers:
            raise InvalidRequestError(f"topic '{topic}' has no partition {partition}")
        return [partition]
    return numbers


def _start_offset(args) -> int:
    if args.from_beginning:
        return -2
    text = (args.offset or "latest").strip()
    if text in ("earliest", "latest"):
        return -2 if text == "earliest" else -1
    if not text.isdigit():
        raise InvalidRequestError(f"--offset must be earliest, latest or a number, got {args.offset!r}")
    return int(text)


def consume_records(args) -> int:
    from ads_spark.client import Admin, Consumer, TopicPartition

    config = client_config(args)
    admin = Admin(config)
    consumer = Consumer(config)
    start = _start_offset(args)
    consumer.assign([TopicPartition(args.topic, p, start) for p in _partitions(admin, args.topic, args.partition)])
    remaining = args.max_messages
    idle_limit_s = (args.timeout_ms / 1000) if args.timeout_ms is not None else (10.0 if remaining else None)
    last_seen = time.monotonic()
    out = sys.stdout
    while remaining is None or remaining > 0:
        records = consumer.poll(timeout=0.5)
        if not records:
            if idle_limit_s is not None and time.monotonic() - last_seen > idle_limit_s:
                break
            continue
        last_seen = time.monotonic()
        for record in records[: remaining if remaining is not None else len(records)]:
            parts = []
            if args.print_offset:
                parts.append(f"{record.partition}:{record.offset}")
            if args.print_key:
                parts.append((record.key or b"").decode(errors="replace"))
            parts.append((record.value or b"").decode(errors="replace"))
            out.write("\t".join(parts) + "\n")
        if remaining is not None:
            remaining -= min(remaining, len(records))
    out.flush()
    if args.max_messages and remaining:
        print(f"ads consume: got {args.max_messages - remaining} of {args.max_messages} records before the timeout",
              file=sys.stderr)
        return 1
    return 0


def show_offsets(args) -> int:
    from ads_spark.client import Admin, Consumer, TopicPartition

    config = client_config(args)
    admin = Admin(config)
    consumer = Consumer(config)
    tps = [TopicPartition(args.topic, p) for p in _partitions(admin, args.topic, None)]
    spec: str | int = args.time if args.time in ("earliest", "latest") else _as_int(args.time)
    earliest = consumer.list_offsets(tps, "earliest")
    latest = consumer.list_offsets(tps, spec)
    rows = [{"topic": tp.topic, "partition": tp.partition, "earliest": earliest[tp], "offset": latest[tp]}
            for tp in tps]
    if args.json:
        print_json({"partitions": rows})
    else:
        for row in rows:
            print(f"{row['topic']}:{row['partition']}:{row['earliest']}:{row['offset']}")
    return 0


def _as_int(text: str) -> int:
    try:
        return int(text)
    except ValueError as exc:
        raise InvalidRequestError(f"--time must be earliest, latest or a timestamp in ms, got {text!r}") from exc


__all__ = ["register", "AdsError"]
