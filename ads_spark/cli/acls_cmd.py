"""``ads acls add|remove|list``: ACL administration with kafka-acls' flags.

``add`` builds one ACL per resource x principal x host x operation (ALLOW for ``--allow-principal`` with
``--allow-host``, DENY for ``--deny-principal`` with ``--deny-host``; hosts default to ``*``, operations to
All). ``--producer`` is Write, Describe and Create on each topic and IdempotentWrite on the cluster;
``--consumer`` is Read and Describe on each topic and, with ``--group G``, Read on each group (as Kafka's).
``--group`` names consumer groups (a group id, ``*``, or a prefix with ``--resource-pattern-type prefixed``). ``remove`` with principals or operations removes exactly the
ACLs ``add`` would build; without them every ACL on the named resources. ``add`` and ``remove`` return
once every live broker applied the change (bounded by the client's default.api.timeout.ms).
"""

from __future__ import annotations

import itertools
import json

from ads_spark.cli.common import add_bootstrap, admin_call
from ads_spark.errors import InvalidRequestError
from ads_spark.security.authorizer import CLUSTER_NAME, AclBinding

PRODUCER_TOPIC_OPERATIONS = ("Write", "Describe", "Create")
CONSUMER_TOPIC_OPERATIONS = ("Read", "Describe")
CONSUMER_GROUP_OPERATIONS = ("Read",)


def register(commands) -> None:
    acls = commands.add_parser("acls", help="add, remove or list ACLs (kafka-acls' flags)")
    actions = acls.add_subparsers(dest="action", required=True)
    for name, func in (("add", add_acls), ("remove", remove_acls), ("list", list_acls)):
        parser = actions.add_parser(name)
        add_bootstrap(parser)
        parser.add_argument("--topic", action="append", default=[], help="a topic name, '*' or a prefix; repeatable")
        parser.add_argument("--cluster", action="store_true", help="the cluster resource")
        parser.add_argument("--group", action="append", default=[], help="a consumer group id, '*' or a prefix; "
                                                                          "repeatable")
        parser.add_argument("--resource-pattern-type", dest="pattern_type", default="literal",
                            choices=("literal", "prefixed", "any", "match"),
                            help="literal or prefixed (add); any and match also filter (remove, list)")
        if name == "list":
            parser.add_argument("--principal", default=None, help="only the ACLs of this principal")
            parser.add_argument("--json", action="store_true")
        else:
            parser.add_argument("--allow-principal", dest="allow_principals", action="append", default=[])
            parser.add_argument("--deny-principal", dest="deny_principals", action="append", default=[])
            parser.add_argument("--allow-host", dest="allow_hosts", action="append", default=[])
            parser.add_argument("--deny-host", dest="deny_hosts", action="append", default=[])
            parser.add_argument("--operation", dest="operations", action="append", default=[],
                                help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                                     "AlterConfigs, IdempotentWrite or All (default All); repeatable")
            parser.add_argument("--producer", action="store_true", help="Write, Describe, Create on the topics and "
                                                                        "IdempotentWrite on the cluster")
            parser.add_argument("--consumer", action="store_true", help="Read, Describe on the topics (and Read on "
                                                                        "the --group groups)")
        parser.set_defaults(func=func)


def _resources(args) -> list[tuple[str, str]]:
    """(resource type, name) pairs the flags name."""
    resources = [("Topic", topic) for topic in args.topic] + [("Group", group) for group in args.group]
    if args.cluster:
        resources.append(("Cluster", CLUSTER_NAME))
    return resources


def _entries(args) -> list[tuple[str, str, str]]:
    """(permission, principal, host) from the allow/deny flags."""
    entries = []
    for permission, principals, hosts, flag in (("Allow", args.allow_principals, args.allow_hosts, "--allow-host"),
                                                ("Deny", args.deny_principals, args.deny_hosts, "--deny-host")):
        if hosts and not principals:
            raise InvalidRequestError(f"{flag} needs a --{permission.lower()}-principal")
        pairs = itertools.product(principals, hosts or ["*"])
        entries.extend((permission, principal, host) for principal, host in pairs)
    return entries


def _bindings(args) -> list[dict[str, str]]:
    """Every ACL the add/remove flags describe (resource x entry x operation)."""
    resources = _resources(args)
    if args.pattern_type not in ("literal", "prefixed"):
        raise InvalidRequestError(f"--resource-pattern-type {args.pattern_type} filters; ACLs are literal or prefixed")
    entries = _entries(args)
    if not entries:
        raise InvalidRequestError("name who the ACLs are for: --allow-principal or --deny-principal")
    per_resource: list[tuple[str, str, tuple[str, ...]]] = []
    if args.producer or args.consumer:
        if args.operations:
            raise InvalidRequestError("--operation cannot be combined with --producer or --consumer")
        if not args.topic:
            raise InvalidRequestError("--producer and --consumer need --topic")
        operations = (PRODUCER_TOPIC_OPERATIONS if args.producer else ()) + (
            CONSUMER_TOPIC_OPERATIONS if args.consumer else ())
        per_resource = [("Topic", topic, tuple(dict.fromkeys(operations))) for topic in args.topic]
        if args.producer:
            per_resource.append(("Cluster", CLUSTER_NAME, ("IdempotentWrite",)))
        if args.consumer:
            per_resource.extend(("Group", group, CONSUMER_GROUP_OPERATIONS) for group in args.group)
        elif args.group:
            raise InvalidRequestError("--group with --producer alone grants nothing; use --consumer or --operation")
    else:
        if not resources:
            raise InvalidRequestError("name a resource: --topic, --group or --cluster")
        per_resource = [(kind, name, tuple(args.operations or ["All"])) for kind, name in resources]
    pattern = "LITERAL" if args.pattern_type == "literal" else "PREFIXED"
    return [{"resource_type": kind, "resource_name": name, "pattern_type": pattern, "principal": principal,
             "host": host, "operation": operation, "permission": permission}
            for kind, name, operations in per_resource for permission, principal, host in entries
            for operation in operations]


def _resource_label(binding) -> str:
    return (f"ResourcePattern(resourceType={binding.resource_type.value.upper()}, name={binding.resource_name}, "
            f"patternType={binding.pattern_type.name})")


def _entry_label(binding) -> str:
    return (f"(principal={binding.principal}, host={binding.host}, operation={binding.operation.value}, "
            f"permissionType={binding.permission.name})")


def _print_grouped(heading: str, bindings) -> None:
    """Kafka's layout: a heading per resource pattern, one indented line per entry."""
    groups: dict[str, list[str]] = {}
    for binding in bindings:
        groups.setdefault(_resource_label(binding), []).append(_entry_label(binding))
    for label, entries in groups.items():
        print(f"{heading} `{label}`:")
        for entry in entries:
            print(f" \t{entry}")
        print()


def add_acls(args) -> int:
    built = [AclBinding.from_dict(b) for b in _bindings(args)]  # checked before anything is sent
    version = admin_call(args, lambda admin: admin.create_acls(built))
    _print_grouped("Adding ACLs for resource", built)
    print(f"ACL version {version} applied by every live broker")
    return 0


def remove_acls(args) -> int:
    if args.allow_principals or args.deny_principals or args.operations or args.producer or args.consumer:
        filters = _bindings(args)  # exactly the ACLs add would make
    else:
        resources = _resources(args)
        if not resources:
            raise InvalidRequestError("name a resource: --topic, --group or --cluster")
        filters = [{"resource_type": kind, "resource_name": name, "pattern_type": args.pattern_type}
                   for kind, name in resources]
    removed = admin_call(args, lambda admin: admin.delete_acls(filters))
    _print_grouped("Removed ACLs for resource", removed)
    print(f"{len(removed)} ACLs removed; every live broker applied the change")
    return 0


def list_acls(args) -> int:
    resources = _resources(args)
    filters = [{"resource_type": kind, "resource_name": name, "pattern_type": args.pattern_type,
                "principal": args.principal} for kind, name in resources] or [{"principal": args.principal}]
    found = admin_call(args, lambda admin: {binding: None for f in filters for binding in admin.describe_acls(f)})
    if args.json:
        print(json.dumps([binding.to_dict() for binding in found], indent=2, sort_keys=True))
    else:
        _print_grouped("Current ACLs for resource", found)
    return 0
