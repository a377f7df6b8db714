"""Counts of a suite run, from its own report, as JSON plus one closing line ``N passed, N failed, N skipped``.

    python summarize.py junit RESULTS.xml SUMMARY.json [SECONDS]
    python summarize.py librdkafka REPORT.json[,REPORT.json...] NAMES SUMMARY.json [SECONDS]

``junit``: pytest's --junitxml (kafka-python). ``librdkafka``: the test-runner's TEST_REPORT file; NAMES are the
comma-separated test names the run asked for (0034_offset_reset; the report lists every test of the runner,
asked for or not, local-only ones included: only the named ones are counted). Exit status 0 when nothing failed.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET


def junit_summary(path: str) -> dict:
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome, detail = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome, detail = "failed", (child.get("message") or "")[:300]
            elif child.tag == "skipped":
                outcome, detail = "skipped", (child.get("message") or "")[:300]
        cases.append({"id": f"{case.get('classname')}::{case.get('name')}", "outcome": outcome,
                      "seconds": round(float(case.get("time") or 0), 3), "detail": detail})
    return {"cases": cases}


def _runner_states(paths: str) -> dict:
    """Each test's entry from the reports of one or more runner invocations; a test that ran in one and was
    left out (SKIPPED/NOT_STARTED/DNS) in another keeps the entry of the invocation that ran it."""
    merged: dict = {}
    for path in paths.split(","):
        for name, test in json.load(open(path))["tests"].items():
            if name not in merged or merged[name]["state"] in ("SKIPPED", "NOT_STARTED", "DNS"):
                merged[name] = test
    return merged


def librdkafka_summary(paths: str, names: str) -> dict:
    wanted = {n.strip() for n in names.split(",") if n.strip()}
    cases = []
    for name, test in _runner_states(paths).items():
        if name not in wanted:
            continue
        state = test["state"]
        # DNS: did not start (the runner ended first, e.g. after another test's timeout); RUNNING: cut off
        outcome = {"PASSED": "passed", "SKIPPED": "skipped", "NOT_STARTED": "skipped", "DNS": "not_run"}.get(
            state, "failed")
        cases.append({"id": name, "outcome": outcome, "state": state, "seconds": test["duration"]})
    return {"cases": cases}


def main(argv: list[str]) -> int:
    kind = argv[0]
    if kind == "junit":
        summary, out, rest = junit_summary(argv[1]), argv[2], argv[3:]
    elif kind == "librdkafka":
        summary, out, rest = librdkafka_summary(argv[1], argv[2]), argv[3], argv[4:]
    else:
        raise SystemExit(f"unknown report kind {kind!r}")
    counts = {k: sum(1 for c in summary["cases"] if c["outcome"] == k)
              for k in ("passed", "failed", "skipped", "not_run")}
    summary.update(counts)
    if rest:
        summary["wall_seconds"] = float(rest[0])
    with open(out, "w") as f:
        json.dump(summary, f, indent=1)
    for case in summary["cases"]:
        if case["outcome"] == "failed":
            print(f"FAILED {case['id']} {case.get('detail', '')}".rstrip())
    if counts["not_run"]:
        print(f"NOT RUN (the runner ended before them): {counts['not_run']}")
    print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    return 1 if counts["failed"] or counts["not_run"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
