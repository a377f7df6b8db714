"""The arguments the side-by-side benchmarks share (compare, kafka_clients): where to write, quick mode,
rounds, records per produce case, with one default rule and one check."""

from __future__ import annotations

import argparse

RECORDS_DEFAULT = 102_400
RECORDS_QUICK = 20_480


def add(parser: argparse.ArgumentParser, quick_help: str) -> None:
    parser.add_argument("--out", required=True)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records", type=int, default=None,
                        help=f"records per produce case (default {RECORDS_DEFAULT:,}, quick {RECORDS_QUICK:,})")


def finish(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """``args`` with ``records`` defaulted; a parser error for fewer than one run or record."""
    args.records = args.records or (RECORDS_QUICK if args.quick else RECORDS_DEFAULT)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.records < 1:
        parser.error("--records must be at least 1")
    return args
