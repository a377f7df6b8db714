"""``ads consumer-groups``: consumer-group administration with kafka-consumer-groups' flags and output.

One command with one action flag, as Kafka's tool: ``--list``, ``--describe --group G`` (per partition the
committed offset, the log end offset (the high watermark: what a consumer can read), the lag between
them and the member the partition is assigned to), ``--reset-offsets --group G --topic T[:P,P]``
(``--to-earliest | --to-latest | --to-datetime D | --to-offset N | --shift-by N``, then ``--dry-run`` or
``--execute``; new offsets are clamped to [log start, high watermark] as Kafka does, and a group with
members is refused: only an inactive group's offsets can be reset), ``--delete --group G`` and
``--delete-offsets --group G --topic T``. ``--json`` prints one document. Every error is one line.

The admin client is imported only when the command runs (``common.open_admin``): a broker starts from the
same parser.
"""

from __future__ import annotations

from datetime import datetime

from ads_spark.cli.common import add_bootstrap, admin_call, print_json
from ads_spark.errors import AdsError, GroupIdNotFoundError, InvalidRequestError, NonEmptyGroupError

RESET_SCENARIOS = ("to_earliest", "to_latest", "to_datetime", "to_offset", "shift_by")
DESCRIBE_COLUMNS = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                    "HOST", "CLIENT-ID")


def register(commands) -> None:
    parser = commands.add_parser("consumer-groups", help="list, describe, reset offsets of, delete consumer groups "
                                                         "(kafka-consumer-groups' flags)")
    add_bootstrap(parser)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", dest="action", action="store_const", const="list", help="every group's id")
    action.add_argument("--describe", dest="action", action="store_const", const="describe",
                        help="per partition: committed offset, log end offset, lag, member and host")
    action.add_argument("--reset-offsets", dest="action", action="store_const", const="reset_offsets",
                        help="set an inactive group's offsets (with a --to-* or --shift-by, and --dry-run or "
                             "--execute)")
    action.add_argument("--delete", dest="action", action="store_const", const="delete",
                        help="delete groups without members")
    action.add_argument("--delete-offsets", dest="action", action="store_const", const="delete_offsets",
                        help="delete a group's committed offsets of a topic")
    parser.add_argument("--group", action="append", default=[], help="a group id (repeatable for --delete)")
    parser.add_argument("--topic", action="append", default=[], metavar="T[:P,P]",
                        help="a topic, optionally with partitions (repeatable)")
    parser.add_argument("--to-earliest", action="store_true")
    parser.add_argument("--to-latest", action="store_true")
    parser.add_argument("--to-datetime", default=None, metavar="YYYY-MM-DDTHH:mm:SS.sss[+HH:MM]",
                        help="the first offset at or after this time (no zone: local time, as Kafka)")
    parser.add_argument("--to-offset", type=int, default=None, metavar="N")
    parser.add_argument("--shift-by", type=int, default=None, metavar="N", help="from the committed offset")
    parser.add_argument("--dry-run", action="store_true", help="show the new offsets, change nothing")
    parser.add_argument("--execute", action="store_true", help="commit the new offsets")
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(func=run)


def run(args) -> int:
    _check(args)
    handler = {"list": _list, "describe": _describe, "reset_offsets": _reset_offsets, "delete": _delete,
               "delete_offsets": _delete_offsets}[args.action]
    return admin_call(args, lambda admin: handler(admin, args))


def _check(args) -> None:
    """Refuse a combination of flags that makes no sense, naming the flag (before any connection)."""
    needs_group = args.action != "list"
    if needs_group and not args.group:
        raise InvalidRequestError(f"--{args.action.replace('_', '-')} needs --group")
    if args.action not in ("delete",) and len(args.group) > 1:
        raise InvalidRequestError(f"--{args.action.replace('_', '-')} takes one --group")
    scenarios = [s for s in RESET_SCENARIOS if getattr(args, s) not in (None, False)]
    if args.action == "reset_offsets":
        if len(scenarios) != 1:
            raise InvalidRequestError("--reset-offsets needs exactly one of --to-earliest, --to-latest, "
                                      "--to-datetime, --to-offset, --shift-by")
        if args.dry_run == args.execute:
            raise InvalidRequestError("--reset-offsets needs exactly one of --dry-run (show) or --execute (commit)")
    elif scenarios or args.dry_run or args.execute:
        flag = f"--{scenarios[0].replace('_', '-')}" if scenarios else ("--dry-run" if args.dry_run else "--execute")
        raise InvalidRequestError(f"{flag} is only for --reset-offsets")
    if args.action in ("reset_offsets", "delete_offsets") and not args.topic:
        raise InvalidRequestError(f"--{args.action.replace('_', '-')} needs --topic")
    if args.action not in ("reset_offsets", "delete_offsets") and args.topic:
        raise InvalidRequestError("--topic is only for --reset-offsets and --delete-offsets")


def _topic_args(args) -> list[tuple[str, list[int] | None]]:
    """``--topic T`` or ``--topic T:0,2`` as (topic, partitions or None for all)."""
    result = []
    for text in args.topic:
        topic, _, partitions = text.partition(":")
        if not topic:
            raise InvalidRequestError(f"--topic {text!r}: expected T or T:P,P")
        try:
            numbers = sorted({int(p) for p in partitions.split(",")}) if partitions else None
        except ValueError:
            raise InvalidRequestError(f"--topic {text!r}: partitions must be numbers, e.g. {topic}:0,1") from None
        result.append((topic, numbers))
    return result


# ---- --list --------------------------------------------------------------------------------------------


def _list(admin, args) -> int:
    listings = admin.list_consumer_groups()
    if args.json:
        print_json({"groups": [{"group_id": g.group_id, "state": g.state, "protocol_type": g.protocol_type,
                                "coordinator": g.coordinator_id} for g in listings]})
        return 0
    for listing in listings:
        print(listing.group_id)
    return 0


# ---- --describe ----------------------------------------------------------------------------------------


def describe_group(admin, group_id: str) -> dict:
    """The group as ``--describe --json`` shows it: state, members and one row per partition that has a
    committed offset or an assignment (log end offset = high watermark, lag = log end - committed)."""
    from ads_spark.client import TopicPartition

    description = admin.describe_consumer_groups([group_id])[group_id]
    committed = admin.list_consumer_group_offsets(group_id)
    if not description.members and not committed and description.state in ("Dead", ""):
        raise GroupIdNotFoundError(f"consumer group '{group_id}' does not exist")
    owner = {tp: member for member in description.members for tp in member.assignment}
    partitions = sorted({TopicPartition(tp.topic, tp.partition) for tp in [*committed, *owner]})
    log_ends, errors = _log_end_offsets(admin, partitions)
    rows = []
    for tp in partitions:
        member = owner.get(tp)
        offset = committed[tp].offset if tp in committed else None
        log_end = log_ends.get(tp)
        rows.append({"topic": tp.topic, "partition": tp.partition, "current_offset": offset,
                     "log_end_offset": log_end,
                     "lag": None if offset is None or log_end is None else log_end - offset,
                     "member_id": member.member_id if member else None,
                     "host": member.client_host if member else None,
                     "client_id": member.client_id if member else None,
                     "group_instance_id": member.group_instance_id if member else None,
                     "error": errors.get(tp.topic)})
    members = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
                "host": m.client_host, "assignment": [{"topic": tp.topic, "partition": tp.partition}
                                                      for tp in m.assignment]} for m in description.members]
    return {"group": group_id, "state": description.state, "protocol_type": description.protocol_type,
            "protocol": description.protocol_name, "coordinator": description.coordinator_id,
            "members": members, "partitions": rows}


def _log_end_offsets(admin, partitions) -> tuple[dict, dict[str, str]]:
    """HWs per partition, asked per topic so that one deleted (or unreadable) topic shows as unknown."""
    by_topic: dict[str, list] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp)
    found, errors = {}, {}
    for topic, tps in sorted(by_topic.items()):
        try:
            found.update(admin.list_offsets(tps, "latest"))
        except AdsError as exc:
            errors[topic] = str(exc)
    return found, errors


def _describe(admin, args) -> int:
    described = describe_group(admin, args.group[0])
    if args.json:
        print_json(described)
        return 0
    if not described["members"]:
        print(f"Consumer group '{described['group']}' has no active members.")
    rows = [[described["group"], r["topic"], r["partition"], r["current_offset"], r["log_end_offset"], r["lag"],
             r["member_id"], r["host"], r["client_id"]] for r in described["partitions"]]
    for m in described["members"]:  # a member with nothing assigned still shows (Kafka's "-" row)
        if not m["assignment"]:
            rows.append([described["group"], None, None, None, None, None, m["member_id"], m["host"],
                         m["client_id"]])
    _print_table(DESCRIBE_COLUMNS, rows)
    for topic, error in sorted({(r["topic"], r["error"]) for r in described["partitions"] if r["error"]}):
        print(f"note: log end offsets of topic '{topic}' unknown: {error}")
    return 0


def _print_table(columns, rows) -> None:
    cells = [list(columns)] + [["-" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    print()
    for row in cells:
        print("  ".join(value.ljust(width) for value, width in zip(row, widths)).rstrip())


# ---- --reset-offsets -----------------------------------------------------------------------------------


def _reset_offsets(admin, args) -> int:
    group_id = args.group[0]
    _refuse_active(admin, group_id)
    partitions = _partitions(admin, _topic_args(args))
    committed = admin.list_consumer_group_offsets(group_id, partitions)
    targets = reset_targets(admin, args, partitions, {tp: c.offset for tp, c in committed.items()})
    if args.execute:
        admin.alter_consumer_group_offsets(group_id, targets)
    rows = [{"topic": tp.topic, "partition": tp.partition,
             "current_offset": committed[tp].offset if tp in committed else None, "new_offset": offset}
            for tp, offset in sorted(targets.items())]
    if args.json:
        print_json({"group": group_id, "executed": bool(args.execute), "partitions": rows})
        return 0
    _print_table(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"),
                 [[group_id, r["topic"], r["partition"], r["new_offset"]] for r in rows])
    if not args.execute:
        print("(dry run: nothing was changed; --execute commits these offsets)")
    return 0


def _refuse_active(admin, group_id: str) -> None:
    """Kafka's rule: only an inactive group's offsets are reset (its members would overwrite them)."""
    try:
        description = admin.describe_consumer_groups([group_id])[group_id]
    except GroupIdNotFoundError:
        return  # a new group: resetting creates its offsets
    if description.members:
        raise NonEmptyGroupError(f"offsets of group '{group_id}' can only be reset while it is inactive, but it "
                                 f"has {len(description.members)} member(s) (state {description.state}); "
                                 f"stop its consumers first")


def _partitions(admin, topics) -> list:
    from ads_spark.client import TopicPartition

    result = []
    for topic, wanted in topics:
        existing = sorted(p.partition for p in admin.describe_topics([topic])[0].partitions)
        missing = sorted(set(wanted or ()) - set(existing))
        if missing:
            raise InvalidRequestError(f"--topic {topic}: no partition {', '.join(map(str, missing))} "
                                      f"(it has {len(existing)})")
        result.extend(TopicPartition(topic, p) for p in (wanted or existing))
    return result


def reset_targets(admin, args, partitions, committed: dict) -> dict:
    """The new offset of each partition for the reset scenario the flags name, clamped to
    [log start, high watermark] (Kafka clamps too, rather than commit an offset that cannot be read)."""
    earliest = admin.list_offsets(partitions, "earliest")
    latest = admin.list_offsets(partitions, "latest")
    if args.to_earliest:
        wanted = dict(earliest)
    elif args.to_latest:
        wanted = dict(latest)
    elif args.to_offset is not None:
        wanted = {tp: args.to_offset for tp in partitions}
    elif args.to_datetime is not None:
        wanted = admin.list_offsets(partitions, parse_datetime_ms(args.to_datetime))
    else:
        without = [f"{tp.topic}-{tp.partition}" for tp in partitions if tp not in committed]
        if without:
            raise InvalidRequestError(f"--shift-by: group has no committed offset to shift for {', '.join(without)}"
                                      f" (use --to-earliest, --to-latest or --to-offset for them)")
        wanted = {tp: committed[tp] + args.shift_by for tp in partitions}
    return {tp: min(max(wanted[tp], earliest[tp]), latest[tp]) for tp in partitions}


def parse_datetime_ms(text: str) -> int:
    """Kafka's --to-datetime: ISO-8601 ('2024-01-31T12:00:00.000', an offset like '+01:00' or 'Z'); without
    one, the local time zone."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidRequestError(f"--to-datetime {text!r}: expected YYYY-MM-DDTHH:mm:SS.sss with an optional "
                                  f"zone such as +01:00 or Z") from None
    return int(moment.timestamp() * 1000)  # a naive datetime is local time, as Kafka reads it


# ---- --delete, --delete-offsets ------------------------------------------------------------------------


def _delete(admin, args) -> int:
    admin.delete_consumer_groups(args.group)
    if args.json:
        print_json({"deleted": list(args.group)})
    else:
        shown = ", ".join(f"'{g}'" for g in args.group)
        print(f"Deletion of requested consumer groups ({shown}) was successful.")
    return 0


def _delete_offsets(admin, args) -> int:
    group_id = args.group[0]
    committed = admin.list_consumer_group_offsets(group_id)
    partitions = []
    for topic, wanted in _topic_args(args):
        mine = sorted(tp for tp in committed if tp.topic == topic and (wanted is None or tp.partition in wanted))
        if not mine:
            raise InvalidRequestError(f"group '{group_id}' has no committed offsets for topic '{topic}'"
                                      + (f" partitions {wanted}" if wanted else ""))
        partitions.extend(mine)
    admin.delete_consumer_group_offsets(group_id, partitions)
    rows = [{"topic": tp.topic, "partition": tp.partition, "status": "Successful"} for tp in partitions]
    if args.json:
        print_json({"group": group_id, "partitions": rows})
        return 0
    _print_table(("TOPIC", "PARTITION", "STATUS"), [[r["topic"], r["partition"], r["status"]] for r in rows])
    return 0
