"""``ads topics``, ``ads configs``: topic administration with Kafka's tool syntax and output.

Typed topics (issue #26): ``topics create --schema DDL | --schema-file F`` makes one, ``topics alter-schema``
registers (or with ``--dry-run`` checks) a new version, ``topics describe`` adds each typed topic's
schema.type, compatibility, latest schema id and every version's DDL before its partitions.
The admin client comes from ``common.open_admin``, which imports it only when a command runs.
"""

from __future__ import annotations

import sys

from ads_spark.cli.common import (
    add_bootstrap, is_unavailable, is_under_min_isr, is_under_replicated, open_admin, print_json, under_min_isr_note,
)
from ads_spark.config import parse_overrides
from ads_spark.errors import InvalidConfigError, InvalidRequestError


def register(commands) -> None:
    topics = commands.add_parser("topics", help="create, list, describe, alter (add partitions), delete topics")
    actions = topics.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create")
    add_bootstrap(create)
    create.add_argument("--topic", required=True)
    create.add_argument("--partitions", type=int, default=None, help="default: the brokers' num.partitions")
    create.add_argument("--replication-factor", type=int, default=None,
                        help="default: the brokers' default.replication.factor")
    create.add_argument("--config", action="append", default=[], metavar="K=V")
    create.add_argument("--replica-assignment", default=None, help="1:2:3,2:3:1")
    create.add_argument("--observers", default=None, metavar="4,5",
                        help="brokers that hold a non-voting replica of every partition (never in the ISR, never lead)")
    _add_schema_arguments(create, required=False)
    create.set_defaults(func=create_topic)
    alter_schema = actions.add_parser("alter-schema", help="register a new schema version of a typed topic")
    add_bootstrap(alter_schema)
    alter_schema.add_argument("--topic", required=True)
    _add_schema_arguments(alter_schema, required=True)
    alter_schema.add_argument("--dry-run", action="store_true",
                              help="check against the topic's schema.compatibility; register nothing")
    alter_schema.set_defaults(func=alter_schema_cmd)
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
    alter = actions.add_parser("alter", help="add partitions to a topic (kafka-topics --alter --partitions)")
    add_bootstrap(alter)
    alter.add_argument("--topic", required=True)
    alter.add_argument("--partitions", type=int, required=True,
                       help="the new partition count; only a larger one is accepted")
    alter.set_defaults(func=alter_topic)
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


def _add_schema_arguments(parser, required: bool) -> None:
    given = parser.add_mutually_exclusive_group(required=required)
    given.add_argument("--schema", default=None, metavar="DDL",
                       help="a typed topic's columns in Spark DDL: 'id BIGINT NOT NULL, amount DECIMAL(10,2), ...'")
    given.add_argument("--schema-file", default=None, metavar="FILE", help="a file holding the DDL")


def _schema_ddl(args) -> str | None:
    if args.schema_file is None:
        return args.schema
    try:
        with open(args.schema_file, encoding="utf-8") as file:
            return file.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidConfigError(f"--schema-file {args.schema_file}: cannot read it ({exc})") from None


def parse_assignment(text: str) -> list[list[int]]:
    try:
        return [[int(b) for b in part.split(":")] for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise InvalidRequestError(f"bad --replica-assignment {text!r}: expected e.g. 1:2:3,2:3:1") from exc


def create_topic(args) -> int:
    admin = open_admin(args)
    assignment = parse_assignment(args.replica_assignment) if args.replica_assignment else None
    observers = [int(b) for b in args.observers.split(",")] if args.observers else None
    admin.create_topic(args.topic, args.partitions, args.replication_factor,
                       config=parse_overrides(args.config), replica_assignment=assignment, observers=observers,
                       schema=_schema_ddl(args))
    print(f"Created topic {args.topic}.")
    return 0


def alter_schema_cmd(args) -> int:
    version, created = open_admin(args).register_schema(args.topic, _schema_ddl(args), dry_run=args.dry_run)
    if not created:
        print(f"Unchanged: equals version {version} of topic {args.topic}'s schema.")
    elif args.dry_run:
        print(f"Compatible: would register version {version} of topic {args.topic}'s schema.")
    else:
        print(f"Registered version {version} of topic {args.topic}'s schema.")
    return 0


def list_topics(args) -> int:
    for name in open_admin(args).list_topics():
        print(name)
    return 0


def _selected(description, args) -> list:
    min_isr = description.min_insync_replicas
    return [p for p in description.partitions
            if not (args.under_replicated_partitions and not is_under_replicated(p))
            and not (args.under_min_isr_partitions and not is_under_min_isr(p, min_isr))
            and not (args.unavailable_partitions and not is_unavailable(p))]


def _schemas(admin, descriptions) -> dict:
    """Each typed topic's describe_schema answer (versions as DDL); Kafka-shaped topics need no request."""
    found = {}
    for d in descriptions:
        if d.config.get("schema.type") == "arrow":
            described = admin.describe_schema(d.topic)
            found[d.topic] = {**described, "versions": [
                {"version": v["version"], "ddl": v["ddl"], "registered_ms": v["registered_ms"]}
                for v in described["versions"]]}
    return found


def _print_schema(schema: dict) -> None:
    print(f"Topic: {schema['topic']}\tSchemaType: {schema['schema_type']}\tCompatibility: "
          f"{schema['compatibility']}\tSchemaId: {schema['latest']}")
    for version in schema["versions"]:
        print(f"\tSchema version {version['version']}: {version['ddl']}")


def describe_topics(args) -> int:
    admin = open_admin(args)
    descriptions = admin.describe_topics([args.topic] if args.topic else None)
    # The partition filters list problem partitions only; the schema lines go with a plain describe.
    filtered = args.under_replicated_partitions or args.under_min_isr_partitions or args.unavailable_partitions
    schemas = {} if filtered else _schemas(admin, descriptions)
    if args.json:
        print_json({"topics": [{"topic": d.topic, "topic_id": d.topic_id, "config": d.config,
                                "schema_type": d.config.get("schema.type", "kafka"), "schema": schemas.get(d.topic),
                                "min_insync_replicas": d.min_insync_replicas, "partitions": [
            {"partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
             "replicas": list(p.replicas), "isr": list(p.isr), "elr": list(p.elr),
             "observers": list(p.observers), "note": under_min_isr_note(p, d.min_insync_replicas)}
            for p in _selected(d, args)]} for d in descriptions]})
        return 0
    for d in descriptions:
        if d.topic in schemas:
            _print_schema(schemas[d.topic])
        for p in _selected(d, args):
            leader = str(p.leader) if p.leader >= 0 else "none"
            line = (f"Topic: {d.topic}\tPartition: {p.partition}\tLeader: {leader}\t"
                    f"Replicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}")
            if p.elr:
                line += f"\tElr: {_ids(p.elr)}"
            if p.observers:
                line += f"\tObservers: {_ids(p.observers)}"
            note = under_min_isr_note(p, d.min_insync_replicas)
            if note:
                line += f"\tNote: {note}"
            print(line)
    return 0


def _ids(values) -> str:
    return ",".join(str(v) for v in values)


def alter_topic(args) -> int:
    added = open_admin(args).create_partitions(args.topic, args.partitions)
    placed = ", ".join(f"{a['partition']}: {_ids(a['replicas'])}" for a in added)
    print(f"Topic {args.topic} now has {args.partitions} partitions (added {placed}).")
    return 0


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
