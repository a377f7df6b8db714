"""The ``ads`` command: argument parsing and dispatch, and the one place errors are printed.

Each sub-command lives in a small module; this one builds the parser and turns
any ``AdsError`` (or bad argument) into one clear line on stderr and a non-zero
exit, as INTERFACES.md promises.
"""

from __future__ import annotations

import argparse
import logging
import sys

from ads_spark.errors import AdsError


def build_parser() -> argparse.ArgumentParser:
    from ads_spark.cli import (
        chaos_cmd, cluster_cmd, data_cmd, election_cmd, reassign_cmd, server_cmd, topics_cmd, verify_cmd,
    )
    from ads_spark.cli import acls_cmd, users_cmd
    from ads_spark.cli import certs_cmd
    from ads_spark.cli import groups_cmd

    parser = argparse.ArgumentParser(prog="ads", description="ADS: a replicated log for Spark")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug output to stderr")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    cluster_cmd.register(commands)
    server_cmd.register(commands)
    topics_cmd.register(commands)
    data_cmd.register(commands)
    verify_cmd.register(commands)
    election_cmd.register(commands)
    reassign_cmd.register(commands)
    chaos_cmd.register(commands)
    acls_cmd.register(commands)
    users_cmd.register(commands)
    certs_cmd.register(commands)
    groups_cmd.register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except AdsError as exc:
        print(f"ads {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except (OSError, ValueError) as exc:
        print(f"ads {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
