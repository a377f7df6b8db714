"""``ads topics``, ``ads configs``: topic administration with Kafka's tool syntax and output.

The admin client comes from ``common.open_admin``, which imports it only when a command runs.
"""

from __future__ import annotations

import sys

from ads_spark.cli.common import add_bootstrap, open_admin, print_json
from ads_spark.config import parse_overrides
from ads_spark.errors import InvalidRequestError


def register(commands) -> None:
    topics = commands.add_parser("topics", help="create, list, describe, delete topics")
    actions = topics.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create")
    add_bootstrap(create)
    create.add_argument("--topic", required=True)
    create.add_argument("--partitions", type=int, default=None)
    create.add_argument("--replication-factor", type=int, default=None)
    create.add_argument("--config", action="append", default=[], metavar="K=V")
    create.add_argument("--replica-assignment", default=None, help="1:2:3,2:3:1")
    create.add_argument("--observers", default=None, metavar="4,5",
                        help="brokers that hold a non-voting replica of every partition (never in the ISR, never lead)")
    create.set_defaults(func=create_topic)
    listing = actions.add_parser("list")
    add_bootstrap(listing)
    listing.set_defaults(func=list_topics)
    describe = actions.add_parser("describe")
    add_bootstrap(describe)
    describe.add_argument("--topic", default=None)
    describe.add_argument("--under-replicated-partitions", action="store_true")
    describe.add_argument("--under-min-isr-partitions", action="store_true")
    describe.add_argument("--unavailable-partitions", action="store_true")
    describe.add_argument("--json", action="store_true")
    describe.set_defaults(func=describe_topics)
    delete = actions.add_parser("delete")
    add_bootstrap(delete)
    delete.add_argument("--topic", required=True)
    delete.set_defaults(func=delete_topic)

    configs = commands.add_parser("configs", help="describe or alter topic configs")
    config_actions = configs.add_subparsers(dest="action", required=True)
    show = config_actions.add_parser("describe")
    add_bootstrap(show)
    show.add_argument("--topic", required=True)
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=describe_configs)
    alter = config_actions.add_parser("alter")
    add_bootstrap(alter)
    alter.add_argument("--topic", required=True)
    alter.add_argument("--add-config", default="", metavar="K=V[,K=V]")
    alter.add_argument("--delete-config", action="append", default=[], metavar="K")
    alter.set_defaults(func=alter_configs)


def parse_assignment(text: str) -> list[list[int]]:
    try:
        return [[int(b) for b in part.split(":")] for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise InvalidRequestError(f"bad --replica-assignment {text!r}: expected e.g. 1:2:3,2:3:1") from exc


def create_topic(args) -> int:
    admin = open_admin(args)
    assignment = parse_assignment(args.replica_assignment) if args.replica_assignment else None
    if assignment is None and (args.partitions is None or args.replication_factor is None):
        raise InvalidRequestError("give --partitions and --replication-factor, or --replica-assignment")
    observers = [int(b) for b in args.observers.split(",")] if args.observers else None
    admin.create_topic(args.topic, args.partitions or 0, args.replication_factor or 0,
                       config=parse_overrides(args.config), replica_assignment=assignment, observers=observers)
    print(f"Created topic {args.topic}.")
    return 0


def list_topics(args) -> int:
    for name in open_admin(args).list_topics():
        print(name)
    return 0


def _selected(description, args) -> list:
    chosen = []
    for p in description.partitions:
        live_replicas = [r for r in p.replicas if r not in p.offline_replicas]
        if args.under_replicated_partitions and len(p.isr) >= len(p.replicas):
            continue
        if args.under_min_isr_partitions:
            min_isr = int(description.config.get("min.insync.replicas", 1))
            if len(p.isr) >= min_isr:
                continue
        if args.unavailable_partitions and p.leader >= 0 and live_replicas:
            continue
        chosen.append(p)
    return chosen


def describe_topics(args) -> int:
    admin = open_admin(args)
    descriptions = admin.describe_topics([args.topic] if args.topic else None)
    if args.json:
        print_json({"topics": [{"topic": d.topic, "topic_id": d.topic_id, "config": d.config, "partitions": [
            {"partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
             "replicas": list(p.replicas), "isr": list(p.isr), "elr": list(p.elr),
             "observers": list(p.observers)} for p in _selected(d, args)]} for d in descriptions]})
        return 0
    for d in descriptions:
        for p in _selected(d, args):
            leader = str(p.leader) if p.leader >= 0 else "none"
            line = (f"Topic: {d.topic}\tPartition: {p.partition}\tLeader: {leader}\t"
                    f"Replicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}")
            if p.elr:
                line += f"\tElr: {_ids(p.elr)}"
            if p.observers:
                line += f"\tObservers: {_ids(p.observers)}"
            print(line)
    return 0


def _ids(values) -> str:
    return ",".join(str(v) for v in values)


def delete_topic(args) -> int:
    open_admin(args).delete_topic(args.topic)
    print(f"Deleted topic {args.topic}.")
    return 0


def describe_configs(args) -> int:
    response = open_admin(args).describe_configs(args.topic)
    if args.json:
        print_json(response)
        return 0
    print(f"Configs for topic '{args.topic}':")
    for entry in response["configs"]:
        source = "default" if entry["is_default"] else "override"
        print(f"  {entry['name']}={entry['value']} ({source})")
    return 0


def alter_configs(args) -> int:
    to_set = parse_overrides([p for p in args.add_config.split(",") if p.strip()])
    if not to_set and not args.delete_config:
        print("ads configs alter: nothing to change (give --add-config or --delete-config)", file=sys.stderr)
        return 1
    open_admin(args).alter_configs(args.topic, to_set, args.delete_config)
    print(f"Completed updating config for topic {args.topic}.")
    return 0
