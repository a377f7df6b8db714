"""``ads reassign-partitions``: move partition replicas with Kafka's JSON file format.

``--execute`` records the reassignment (the controller adds the new replicas,
waits until they are in sync, moves leadership if needed and then drops the old
ones) and shows progress until it is done or ``--timeout-s`` passes;
``--throttle`` bounds the catch-up traffic of replicas outside the ISR only, so
it can never shrink an ISR. ``--verify`` reports each partition and exits 1
while any is still moving.

The admin client comes from ``common.open_admin``, which imports it only when a command runs.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from ads_spark.cli.common import add_bootstrap, open_admin
from ads_spark.errors import InvalidRequestError

PROGRESS_INTERVAL_S = 1.0


def register(commands) -> None:
    reassign = commands.add_parser("reassign-partitions", help="move partition replicas (Kafka's JSON format)")
    add_bootstrap(reassign)
    reassign.add_argument("--reassignment-json-file", required=True)
    action = reassign.add_mutually_exclusive_group(required=True)
    action.add_argument("--execute", action="store_true")
    action.add_argument("--verify", action="store_true")
    reassign.add_argument("--throttle", type=int, default=None, help="catch-up bytes/s for replicas not in the ISR")
    reassign.add_argument("--timeout-s", type=float, default=300.0, help="how long --execute shows progress")
    reassign.set_defaults(func=reassign_partitions)


def _plan(path: str) -> list[dict]:
    try:
        document = json.loads(Path(path).read_text())
        partitions = document["partitions"]
        return [{"topic": str(p["topic"]), "partition": int(p["partition"]),
                 "replicas": [int(r) for r in p["replicas"]]} for p in partitions]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InvalidRequestError(f"{path}: not a reassignment file like "
                                  '{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2,3]}]} '
                                  f"({exc})") from None


def _status(admin, plan: list[dict]) -> list[tuple[dict, bool, str]]:
    topics = {d.topic: {p.partition: p for p in d.partitions}
              for d in admin.describe_topics(sorted({p["topic"] for p in plan}))}
    out = []
    for item in plan:
        current = topics.get(item["topic"], {}).get(item["partition"])
        if current is None:
            out.append((item, False, "does not exist"))
            continue
        done = list(current.replicas) == item["replicas"] and set(item["replicas"]) <= set(current.isr)
        out.append((item, done, f"replicas {list(current.replicas)} isr {list(current.isr)}"))
    return out


def reassign_partitions(args) -> int:
    plan = _plan(args.reassignment_json_file)
    admin = open_admin(args)
    try:
        if args.execute:
            body = {"version": 1, "partitions": plan}
            if args.throttle is not None:
                body["throttle_bytes_per_s"] = args.throttle
            admin.alter_partition_reassignments(body)
            print(f"Started the reassignment of {len(plan)} partition(s).")
            deadline = time.monotonic() + args.timeout_s
            while time.monotonic() < deadline:
                status = _status(admin, plan)
                moving = [f"{i['topic']}-{i['partition']}: {what}" for i, done, what in status if not done]
                print(f"{len(plan) - len(moving)}/{len(plan)} done" + (f"; moving: {'; '.join(moving)}"
                                                                      if moving else ""), flush=True)
                if not moving:
                    return 0
                time.sleep(PROGRESS_INTERVAL_S)
            print("still in progress; check with --verify")
            return 1
        failed = 0
        for item, done, what in _status(admin, plan):
            state = "is complete" if done else "is still in progress"
            print(f"Reassignment of partition {item['topic']}-{item['partition']} {state} ({what}).")
            failed += not done
        return 1 if failed else 0
    finally:
        admin.close()
