"""``ads leader-election``: preferred or unclean leader election, as Kafka's kafka-leader-election.sh.

``preferred`` moves leadership back to each partition's first replica when it
is alive and in sync; ``unclean`` gives a leaderless partition any live replica
(committed records it lacks are lost, and the controller counts the election).
Per-partition outcomes are printed; the exit is non-zero if any partition failed
for a reason other than "election not needed".

The client (``ads_spark.client``) is imported inside the commands that use it: a broker starts
from this parser and must not load the producer or consumer (``tests/unit/test_import_graph.py``).
"""

from __future__ import annotations

from ads_spark.cli.common import add_bootstrap, client_config, print_json
from ads_spark.errors import ErrorCode, InvalidRequestError


def register(commands) -> None:
    election = commands.add_parser("leader-election", help="preferred or unclean leader election")
    add_bootstrap(election)
    election.add_argument("--election-type", required=True, choices=["preferred", "unclean"])
    election.add_argument("--topic", default=None)
    election.add_argument("--partition", type=int, default=None)
    election.add_argument("--all-topic-partitions", action="store_true")
    election.add_argument("--json", action="store_true")
    election.set_defaults(func=leader_election)


def leader_election(args) -> int:
    from ads_spark.client import Admin, TopicPartition

    if args.all_topic_partitions == (args.topic is not None):
        raise InvalidRequestError("give either --topic T --partition P or --all-topic-partitions")
    if args.topic is not None and args.partition is None:
        raise InvalidRequestError("--topic needs --partition")
    partitions = None if args.all_topic_partitions else [TopicPartition(args.topic, args.partition)]
    admin = Admin(client_config(args))
    try:
        answer = admin.elect_leaders(args.election_type, partitions)
    finally:
        admin.close()
    if args.json:
        print_json(answer)
    failed = 0
    for item in answer.get("partitions", []):
        code = ErrorCode(int(item.get("error_code", 0)))
        if code not in (ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED):
            failed += 1
        if not args.json:
            outcome = "elected" if code is ErrorCode.NONE else code.name
            print(f"{item['topic']}-{item['partition']}: {outcome}")
    return 1 if failed else 0
