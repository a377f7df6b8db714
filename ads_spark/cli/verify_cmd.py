"""``ads verify-replicas``: compare every replica of every partition below the high watermark.

Exit 0 when all replicas agree on every batch (offsets, epochs, CRC) in the
range all of them have committed; exit 1 and name the first difference
otherwise, or when a replica cannot be asked.

A compacted topic's replicas each clean on their own, so they are compared by what must agree
(``compare_compacted``): below the furthest point any of them has cleaned, the latest value of every
key (a key whose latest record is a tombstone has none: one replica may have removed the tombstone
already); above it, every record (offset, key, value digests).

The client (``ads_spark.client``) is imported inside the command: a broker starts from this parser and
must not load the producer or consumer (``tests/unit/test_import_graph.py``).
"""

from __future__ import annotations

import sys

from ads_spark.cli.common import add_bootstrap, client_config, print_json
from ads_spark.protocol import wire
from ads_spark.protocol.connection import Connections


def register(commands) -> None:
    verify = commands.add_parser("verify-replicas", help="compare replicas below the high watermark")
    add_bootstrap(verify)
    verify.add_argument("--topic", default=None)
    verify.add_argument("--json", action="store_true")
    verify.set_defaults(func=verify_replicas)


def _latest_values(records: list, start: int, end: int) -> dict:
    """{key digest (a keyless record: its offset): (offset, value digest)} of the latest record per key in
    [start, end), keys whose latest record is a tombstone left out."""
    latest: dict = {}
    for offset, key, value in records:
        if start <= offset < end:
            latest[key if key is not None else ("keyless", offset)] = (offset, value)
    return {key: found for key, found in latest.items() if found[1] is not None}


def compare_compacted(statuses: dict[int, dict]) -> tuple[int, str | None]:
    """(offsets compared, first difference or None) for a compacted partition (see the module docstring)."""
    common_start = max(s["log_start_offset"] for s in statuses.values())
    common_end = min(min(s["high_watermark"], s.get("records_end", s["high_watermark"])) for s in statuses.values())
    cleaned = min(max(s.get("cleaned_up_to", common_start) for s in statuses.values()), common_end)
    cleaned = max(cleaned, common_start)
    compared = max(0, common_end - common_start)
    reference_id, reference = next(iter(statuses.items()))
    below = _latest_values(reference.get("records", []), common_start, cleaned)
    above = [r for r in reference.get("records", []) if cleaned <= r[0] < common_end]
    for broker_id, status in statuses.items():
        theirs = _latest_values(status.get("records", []), common_start, cleaned)
        if theirs != below:
            key = next(iter(sorted(set(below.items()) ^ set(theirs.items()), key=str)))[0]
            return compared, (f"below offset {cleaned} (cleaned), key digest {key}: broker {reference_id} has "
                              f"{below.get(key)}, broker {broker_id} has {theirs.get(key)} (offset, value digest)")
        their_above = [r for r in status.get("records", []) if cleaned <= r[0] < common_end]
        if their_above != above:
            mine, other = next(((a, b) for a, b in zip(above, their_above) if a != b),
                               (len(above), len(their_above)))
            return compared, (f"above offset {cleaned} (not cleaned): broker {reference_id} has {mine} where "
                              f"broker {broker_id} has {other}")
    return compared, None


def compare_replicas(statuses: dict[int, dict]) -> tuple[int, str | None]:
    """(offsets compared, first difference or None) for one partition's replica statuses."""
    if any("records" in status for status in statuses.values()):
        return compare_compacted(statuses)
    common_end = min(s["high_watermark"] for s in statuses.values())
    common_start = max(s["log_start_offset"] for s in statuses.values())
    views = {}
    for broker_id, status in statuses.items():
        views[broker_id] = [b for b in status["batches"] if b[0] >= common_start and b[0] + b[1] <= common_end]
    reference_id, reference = next(iter(views.items()))
    for broker_id, batches in views.items():
        if batches != reference:
            for mine, theirs in zip(reference, batches):
                if mine != theirs:
                    return common_end - common_start, (
                        f"broker {reference_id} has batch {mine} where broker {broker_id} has {theirs}")
            return common_end - common_start, (
                f"broker {reference_id} has {len(reference)} batches below the HW, broker {broker_id} has "
                f"{len(batches)}")
    return common_end - common_start, None


def verify_replicas(args) -> int:
    from ads_spark.client import Admin

    config = client_config(args)
    admin = Admin(config)
    connections = Connections(config)
    descriptions = admin.describe_topics([args.topic] if args.topic else None)
    by_broker: dict[int, dict] = {}
    problems, report = [], []
    for broker_id in sorted({r for d in descriptions for p in d.partitions for r in p.replicas}):
        try:
            response = connections.call_broker(broker_id, wire.ACTION_REPLICA_STATUS, {"topic": args.topic})
            by_broker[broker_id] = {(p["topic"], p["partition"]): p for p in response["partitions"]}
        except Exception as exc:  # noqa: BLE001 - reported as a problem
            problems.append(f"broker {broker_id}: cannot read replica status ({exc})")
    for description in descriptions:
        for partition in description.partitions:
            statuses = {b: by_broker[b][(description.topic, partition.partition)] for b in partition.replicas
                        if b in by_broker and (description.topic, partition.partition) in by_broker[b]}
            missing = [b for b in partition.replicas if b not in statuses]
            if missing:
                problems.append(f"{description.topic}-{partition.partition}: no status from replicas {missing}")
                continue
            compared, difference = compare_replicas(statuses)
            compacted = any("records" in status for status in statuses.values())
            report.append({"topic": description.topic, "partition": partition.partition,
                           "offsets_compared": compared, "difference": difference, "compacted": compacted})
            if difference:
                problems.append(f"{description.topic}-{partition.partition}: {difference}")
    if args.json:
        print_json({"partitions": report, "problems": problems})
    else:
        for row in report:
            agree = "agree (compacted: latest value per key, then every record)" if row["compacted"] else "identical"
            state = agree if not row["difference"] else "DIFFERENT"
            print(f"{row['topic']}-{row['partition']}: {state} below the HW ({row['offsets_compared']} offsets)")
    for problem in problems:
        print(f"ads verify-replicas: {problem}", file=sys.stderr)
    return 1 if problems else 0
