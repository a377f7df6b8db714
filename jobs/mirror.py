"""Mirror topics from one ADS cluster to another, MirrorMaker 2 style, exactly once in the target.

    python jobs/mirror.py --source-alias east --source-bootstrap 127.0.0.1:9092 \
        --target-alias west --target-bootstrap 127.0.0.1:9192 --topics 'orders|payments' \
        --checkpoint /data/mirror-east-west [--naming prefix|identity] [--available-now]

    python jobs/mirror.py translate --source-alias east --target-alias west \
        --target-bootstrap 127.0.0.1:9192 --offsets '{"orders":{"0":1234}}'

A secured cluster's client config (``security.protocol``, ``ssl.*``, ``sasl.*``: for a cluster of ``ads
cluster up``, its state dir's ``client.properties``) is given with ``--source-command-config FILE`` and
``--target-command-config FILE`` (``--command-config`` for ``translate``), as Kafka's tools take it.

The first form runs a Spark streaming query (restarted from its checkpoint after a failure):
every topic of the source matching ``--topics`` (a regular expression over the whole name) is
copied to ``<source alias>.<topic>`` on the target (or the same name with ``--naming identity``),
same partition, key, value, timestamp and headers; remote topics are created and kept at the
source's partition count and configs; offsets are checkpointed to
``<source alias>.checkpoints.internal`` on the target. The second form prints the target's
``startingOffsets`` for a reader that was at the given source offsets: it never skips a record
and re-reads at most one mirror micro-batch per partition.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ads_spark.mirror.naming import NAMING_CHOICES, MirrorPolicy  # noqa: E402


def translate_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="mirror.py translate", description="translate source offsets")
    parser.add_argument("--source-alias", required=True)
    parser.add_argument("--target-alias", required=True)
    parser.add_argument("--target-bootstrap", required=True)
    parser.add_argument("--naming", choices=NAMING_CHOICES, default="prefix")
    parser.add_argument("--offsets", required=True, help="the reader's source startingOffsets JSON")
    parser.add_argument("--command-config", default=None, metavar="FILE", help="the target's client properties")
    args = parser.parse_args(argv)
    from ads_spark.mirror.topics import translate_starting_offsets

    print(translate_starting_offsets(args.offsets, args.target_bootstrap, args.source_alias, args.target_alias,
                                     args.naming, client_config=_client_properties(args.command_config)))
    return 0


def _client_properties(path: str | None) -> dict[str, str]:
    """A client properties file's settings but the brokers (``--*-bootstrap`` names those)."""
    if not path:
        return {}
    from ads_spark.config import read_properties

    properties = read_properties(Path(path))
    properties.pop("bootstrap.servers", None)
    return properties


def _given(value, default):
    return default if value is None else value  # 0 or less is refused by MirrorConfig, naming the setting


def main(argv: list[str]) -> int:
    if argv[:1] == ["translate"]:
        return translate_main(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source-alias", required=True)
    parser.add_argument("--source-bootstrap", required=True)
    parser.add_argument("--target-alias", required=True)
    parser.add_argument("--target-bootstrap", required=True)
    parser.add_argument("--topics", default=".*", help="regular expression of source topics to mirror")
    parser.add_argument("--exclude", default="", help="regular expression of source topics never mirrored")
    parser.add_argument("--naming", choices=NAMING_CHOICES, default="prefix")
    parser.add_argument("--checkpoint", required=True, help="local directory of the query's checkpoint")
    parser.add_argument("--starting-offsets", default="earliest")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None)
    parser.add_argument("--trigger-interval-ms", type=int, default=None)
    parser.add_argument("--replication-factor", type=int, default=None, help="of created remote topics")
    parser.add_argument("--available-now", action="store_true", help="mirror what is there now, then stop")
    parser.add_argument("--source-command-config", default=None, metavar="FILE", help="source client properties")
    parser.add_argument("--target-command-config", default=None, metavar="FILE", help="target client properties")
    args = parser.parse_args(argv)
    from ads_spark.mirror.job import (MAX_OFFSETS_PER_TRIGGER_DEFAULT, TRIGGER_INTERVAL_MS_DEFAULT, MirrorConfig,
                                      run_mirror)

    policy = MirrorPolicy(args.source_alias, args.target_alias, args.naming, args.topics, args.exclude)
    config = MirrorConfig(policy, args.source_bootstrap, args.target_bootstrap, args.checkpoint,
                          starting_offsets=args.starting_offsets,
                          max_offsets_per_trigger=_given(args.max_offsets_per_trigger, MAX_OFFSETS_PER_TRIGGER_DEFAULT),
                          trigger_interval_ms=_given(args.trigger_interval_ms, TRIGGER_INTERVAL_MS_DEFAULT),
                          available_now=args.available_now, replication_factor=args.replication_factor,
                          source_options=_client_properties(args.source_command_config),
                          target_options=_client_properties(args.target_command_config))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.appName(f"ads-mirror-{args.source_alias}-{args.target_alias}")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    batch = run_mirror(spark, config)
    print(f"mirror stopped after {batch.batches} micro-batches")
    return 0


def run(argv: list[str]) -> int:
    from ads_spark.errors import AdsError

    try:
        return main(argv)
    except AdsError as exc:  # bad input or a cluster that refuses: the message names the problem
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
