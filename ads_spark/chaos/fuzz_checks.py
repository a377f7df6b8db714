"""The fuzz run's verdict: the end checks against the cluster, and every check over the counts.

Each check is ``{"ok": bool, "detail": str}``, the detail written for whoever reads a failed run:
which broker, which category, which input, what came back. An end check that raises is a failed
check with the exception's text, never an aborted run; every wait in here is bounded.
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any, Callable

from ads_spark.chaos.fuzz_inputs import KEEP_TOPIC
from ads_spark.chaos.fuzz_special import probe_controller
from ads_spark.chaos.fuzz_state import PLANTED_TEXT, checkpoint_keys, proc_status
from ads_spark.chaos.fuzz_typed import typed_rows_check
from ads_spark.chaos.runner import final_reads, wait_healed
from ads_spark.client import Producer, TopicPartition
from ads_spark.config import BROKER_KEYS, read_properties

# Every check a run reports, in the order of the report; tests/chaos/test_fuzz.py asserts each one.
CHECKS = ("no_crash", "no_hang", "no_untyped_error", "no_exception_text", "no_unknown_server_error", "no_state_change",
          "no_malformed_input_accepted", "zookeeper_sessions_kept", "brokers_responsive", "controller_obeyed",
          "partition_increase_served",
          "fetch_answer_bounded", "threads_released", "streams_bounded", "not_blocked_by_held_streams", "rss_bounded",
          "all_categories_ran", "brokers_alive_at_end", "checkpoints_readable", "outside_log_dirs_untouched",
          "verify_replicas", "acked_records_readable", "typed_rows_readable", "produce_consume_new_topic",
          "preferred_leader_election")
ISR_WAIT_S = 30.0
VERIFY_TIMEOUT_S = 90.0
ELECTION_WAIT_S = 20.0
RESTART_TIMEOUT_S = 45.0
NEW_TOPIC_RECORDS = 300
KIB_PER_MIB = 1024


def _check(ok: bool, detail: str) -> dict[str, Any]:
    return {"ok": bool(ok), "detail": detail}


def _guarded(name: str, func: Callable[[], dict]) -> dict:
    try:
        return func()
    except Exception as exc:  # noqa: BLE001 - a check that cannot finish has failed
        return _check(False, f"{name} raised {type(exc).__name__}: {str(exc)[:400]}")


def _wait(predicate: Callable[[], bool], timeout_s: float, interval_s: float = 0.25) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if predicate():
                return True
        except Exception:  # noqa: BLE001 - not yet
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)


def end_checks(fuzzer) -> dict[str, dict]:
    """The checks against the cluster after the last category, in an order that disturbs least first."""
    results = {"brokers_alive_at_end": _guarded("alive", lambda: _alive(fuzzer)),
               "checkpoints_readable": _guarded("checkpoints", lambda: _checkpoints(fuzzer)),
               "outside_log_dirs_untouched": _guarded("victim", lambda: _victim(fuzzer))}
    fuzzer.rss_after = {b: proc_status(fuzzer.cluster.broker_pid(b)) for b in fuzzer.layout.brokers}
    fuzzer.pids_after = {b: fuzzer.cluster.broker_pid(b) for b in fuzzer.layout.brokers}
    against_cluster = (("verify_replicas", _verify_replicas), ("acked_records_readable", _acked_readable),
                       ("typed_rows_readable", _typed_rows), ("produce_consume_new_topic", _new_topic),
                       ("preferred_leader_election", _preferred_election))
    alive = [b for b in fuzzer.layout.brokers if fuzzer.alive(b)]
    for name, check in against_cluster:
        # With no broker left each of these would only wait out its own timeout.
        results[name] = _guarded(name, lambda c=check: c(fuzzer)) if alive else _check(False, "no broker is alive")
    return results


def _alive(fuzzer) -> dict:
    dead = [b for b in fuzzer.layout.brokers if not fuzzer.alive(b)]
    return _check(not dead, f"dead at the end: {dead}" if dead else "every broker process is alive")


def _checkpoints(fuzzer) -> dict:
    bad = []
    for broker_id, endpoint in sorted(fuzzer.layout.brokers.items()):
        for path in sorted(endpoint.log_dir.glob("*-checkpoint")):
            state = checkpoint_keys(path)
            if not state.startswith("partitions"):
                bad.append(f"broker {broker_id} {path.name}: {state}")
    return _check(not bad, "; ".join(bad) or "every offset checkpoint parses")


def _verify_replicas(fuzzer) -> dict:
    """``ads verify-replicas`` exits 0, over replicas that are all in sync: of a partition without a leader
    there is nothing below a high watermark to compare, and exit 0 would prove nothing."""
    synced, seen = wait_healed(fuzzer.admin, (KEEP_TOPIC,), ISR_WAIT_S, 0.25)
    command = [sys.executable, "-m", "ads_spark.cli.main", "verify-replicas", "--bootstrap-server",
               fuzzer.cluster.bootstrap_servers, "--topic", KEEP_TOPIC]
    done = subprocess.run(command, capture_output=True, text=True, timeout=VERIFY_TIMEOUT_S)
    output = (done.stdout + done.stderr).strip().replace("\n", " | ")
    state = f"keep [partition, leader, isr]: {seen}" + ("" if synced else f", not all in sync after {ISR_WAIT_S}s")
    return _check(done.returncode == 0 and synced, f"exit {done.returncode}: {output[:400]} ({state})")


def _acked_readable(fuzzer) -> dict:
    reads = final_reads(fuzzer.cluster.bootstrap_servers, KEEP_TOPIC, sorted({p for p, _ in fuzzer.acked}),
                        {"request.timeout.ms": 10000, "default.api.timeout.ms": 20000})
    stored = {(partition, offset): value for partition, rows in reads.items() for offset, value in rows}
    missing = [key for key in fuzzer.acked if key not in stored]
    different = [key for key, value in fuzzer.acked.items() if key in stored and stored[key] != value]
    detail = (f"{len(fuzzer.acked)} acknowledged, {len(missing)} missing (first {sorted(missing)[:5]}), "
              f"{len(different)} with another value (first {sorted(different)[:5]})")
    return _check(fuzzer.acked and not missing and not different, detail)


def _typed_rows(fuzzer) -> dict:
    """The typed topic's acknowledged rows read back with a typed read at the end, and after every typed category
    (``fuzz_typed.typed_category``)."""
    end = typed_rows_check(fuzzer)
    losses = fuzzer.typed_losses
    detail = f"at the end: {end['detail']}" + (f"; after categories: {losses[:3]}" if losses else "")
    return _check(end["ok"] and not losses, detail)


def _new_topic(fuzzer) -> dict:
    topic = f"{fuzzer.probe_prefix}end"
    live = fuzzer.live_brokers()
    fuzzer.admin.create_topic(topic, 3, min(3, len(live)), config={"min.insync.replicas": str(min(2, len(live)))},
                              timeout_s=30)
    values = [f"end-{i}".encode() for i in range(NEW_TOPIC_RECORDS)]
    producer = Producer({"bootstrap.servers": fuzzer.cluster.bootstrap_servers, "acks": "all",
                         "delivery.timeout.ms": 30000})
    try:
        futures = [producer.produce(topic, value=v, partition=i % 3) for i, v in enumerate(values)]
        producer.flush(30)
        failed = [f.exception(timeout=5) for f in futures if f.exception(timeout=5) is not None]
    finally:
        producer.close(10)
    reads = final_reads(fuzzer.cluster.bootstrap_servers, topic, range(3), {"default.api.timeout.ms": 20000})
    read = [value for rows in reads.values() for _, value in rows]
    ok = not failed and sorted(read) == sorted(values)
    return _check(ok, f"created '{topic}'; {len(values) - len(failed)}/{len(values)} acknowledged, {len(read)} read"
                      + (f"; first failure: {failed[0]}" if failed else ""))


def _leaders(fuzzer, topic: str) -> list:
    return fuzzer.admin.describe_topics([topic])[0].partitions


def _preferred_election(fuzzer) -> dict:
    """Stop the preferred leader of the new topic's partition 0 (a controlled shutdown moves its leadership),
    restart it, and have the controller move leadership back: brokers obey the real controller, and a
    broker that took the fuzzing can restart."""
    topic = f"{fuzzer.probe_prefix}end"
    victim = _leaders(fuzzer, topic)[0].replicas[0]
    fuzzer.cluster.stop_broker(victim)
    fuzzer.cluster.start_broker(victim, wait=True, timeout_s=RESTART_TIMEOUT_S)
    if not _wait(lambda: all(victim in p.isr for p in _leaders(fuzzer, topic)), ISR_WAIT_S):
        return _check(False, f"broker {victim} restarted but did not rejoin the ISR of '{topic}' within {ISR_WAIT_S}s")
    answer = fuzzer.admin.elect_leaders("preferred", [TopicPartition(topic, p) for p in range(3)])
    settled = _wait(lambda: all(p.leader == p.replicas[0] for p in _leaders(fuzzer, topic)), ELECTION_WAIT_S)
    shown = [[p.partition, p.leader, list(p.replicas)] for p in _leaders(fuzzer, topic)]
    codes = [item.get("error_code") for item in answer.get("partitions", [])]
    obeyed = probe_controller(fuzzer, f"{fuzzer.probe_prefix}after-election")
    return _check(settled and obeyed["ok"], f"restarted broker {victim}; election codes {codes}; "
                                            f"[partition, leader, replicas] {shown}; then: {obeyed['detail']}")


def _victim(fuzzer) -> dict:
    planted = fuzzer.planted
    if planted is None:
        return _check(False, "no file was planted")
    others = sorted(p.name for p in planted.parent.iterdir() if p != planted) if planted.parent.exists() else []
    intact = planted.exists() and planted.read_text() == PLANTED_TEXT
    return _check(intact and not others, f"{planted}: {'intact' if intact else 'GONE or changed'}; "
                                         f"other files beside it: {others[:10]}")


# ---- the verdict over everything ------------------------------------------------------------


def _by_category(report: dict, key: str) -> dict[str, int]:
    return {name: stats[key] for name, stats in report["categories"].items() if stats.get(key)}


# Where an answer without an error is what a correct broker gives: a connection's first call, a stream the client ends.
ACCEPTING_CATEGORIES = ("connections",)


def _first_example(report: dict, outcome: str) -> str:
    for name, stats in report["categories"].items():
        if outcome == "success" and name in ACCEPTING_CATEGORIES:
            continue
        for example in stats.get("examples", {}).get(outcome, []):
            return f"e.g. {name} broker {example['broker']} {example['input']!r} -> {example['answer'][:200]!r}"
    return ""


def _count_check(report: dict, key: str, what: str) -> dict:
    found = _by_category(report, key)
    return _check(not found, f"{sum(found.values())} {what}: {found} {_first_example(report, key)}" if found
                  else f"no {what}")


def _exception_text(report: dict) -> dict:
    found = {}
    for name, stats in report["categories"].items():
        if stats.get("exception_answers"):
            names = sorted({n for e in stats["exception_examples"] for n in e["names"]})
            found[name] = f"{stats['exception_answers']} ({', '.join(names)})"
    return _check(not found, f"answers with exception text: {found}" if found else "no answer named a Python exception")


def _unknown_server_errors(report: dict) -> dict:
    found = {n: s["typed_by_code"]["UNKNOWN_SERVER_ERROR"] for n, s in report["categories"].items()
             if s.get("typed_by_code", {}).get("UNKNOWN_SERVER_ERROR")}
    return _check(not found, f"UNKNOWN_SERVER_ERROR answers (a validation that did not happen): {found}" if found
                  else "every error had a specific code")


def _accepted(report: dict) -> dict:
    found = {n: s["success"] for n, s in report["categories"].items()
             if s.get("success") and n not in ACCEPTING_CATEGORIES}
    return _check(not found, f"malformed inputs accepted: {found} {_first_example(report, 'success')}" if found
                  else "every malformed input was refused")


def _fetch_bounded(fuzzer, report: dict) -> dict:
    answers = report["categories"].get("fetch_amplification", {}).get("answers", {})
    limit = fuzzer.settings.fetch_answer_bytes_max
    big = {b: a for b, a in answers.items() if a["bytes"] > limit}
    detail = "; ".join(f"broker {b}: {a['outcome']} {a['code'] or ''} {a['rows']} rows, {a['bytes']} bytes, RSS "
                       f"{a['rss_kib_before']} -> {a['rss_kib_after']} KiB" for b, a in sorted(answers.items()))
    return _check(answers and not big, f"limit {limit} bytes; {detail or 'not run'}")


def _rss(fuzzer) -> tuple[dict, dict]:
    limit_kib = fuzzer.settings.rss_growth_max_mib * KIB_PER_MIB
    table, over = {}, []
    for broker_id, before in sorted(fuzzer.rss_before.items()):
        after = fuzzer.rss_after.get(broker_id)
        same = fuzzer.pids_before.get(broker_id) == fuzzer.pids_after.get(broker_id)
        table[str(broker_id)] = {"before_kib": (before or {}).get("rss_kib"), "after_kib": (after or {}).get("rss_kib"),
                                 "same_process": same}
        if before and after and same and after["rss_kib"] - before["rss_kib"] > limit_kib:
            over.append(broker_id)
    comparable = any(v["same_process"] and v["before_kib"] and v["after_kib"] for v in table.values())
    detail = ("" if comparable else "no broker ran the whole fuzz without a restart; ") + \
        f"limit +{fuzzer.settings.rss_growth_max_mib} MiB; " + "; ".join(
        f"broker {b}: {v['before_kib']} -> {v['after_kib']} KiB{'' if v['same_process'] else ' (restarted)'}"
        for b, v in table.items())
    return table, _check(comparable and not over, detail)


def _threads(fuzzer, report: dict) -> dict:
    counts = report["categories"].get("connections", {}).get("threads", {})
    slack = fuzzer.settings.threads_slack
    over = {b: c for b, c in counts.items()
            if None not in (c["before"], c["after"]) and c["after"] > c["before"] + slack}
    return _check(bool(counts) and not over, f"threads before/peak/after per broker: {counts} (slack {slack})")


def streams_limit(fuzzer) -> int | None:
    """The brokers' bound on open streams (``flight.streams.max``) as configured, or None without one."""
    if "flight.streams.max" not in BROKER_KEYS:
        return None
    endpoint = next(iter(fuzzer.layout.brokers))
    configured = read_properties(fuzzer.cluster.broker_config_path(endpoint)).get("flight.streams.max")
    return int(configured) if configured else BROKER_KEYS["flight.streams.max"].default


def _streams_bounded(fuzzer, report: dict) -> dict:
    """Half-open streams hold a thread each: the peak may not pass the configured bound (and a little more)."""
    counts = report["categories"].get("connections", {}).get("threads", {})
    limit = streams_limit(fuzzer)
    refused = report["categories"].get("connections", {}).get("typed_by_code", {})
    if limit is None:
        return _check(False, f"the brokers have no bound on open streams (no flight.streams.max); threads {counts}")
    over = {b: c for b, c in counts.items()
            if None not in (c["before"], c["peak"]) and c["peak"] - c["before"] > limit + fuzzer.settings.threads_slack}
    return _check(bool(counts) and not over, f"flight.streams.max {limit}; threads before/peak/after {counts}; "
                                             f"streams refused: {refused}")


def _held(report: dict) -> dict:
    answered = report["categories"].get("connections", {}).get("answered_while_held", {})
    stuck = {b: a for b, a in answered.items() if a["outcome"] in ("hang", "untyped", "unreachable")}
    return _check(bool(answered) and not stuck, f"a metadata request while the streams were held: {answered}")


# What validation answers; any other answer in a category whose inputs changed state points at the culprit.
REFUSALS = ("INVALID_REQUEST", "INVALID_TOPIC_EXCEPTION", "INVALID_PARTITIONS", "skipped")


def _state_changes(changes: list[dict], categories: dict[str, dict]) -> dict:
    by_category: dict[str, list[str]] = {}
    for item in changes:
        by_category.setdefault(item["category"], []).append(item["change"])
    shown = "; ".join(
        f"after {name} ({len(found)}): {' | '.join(found[:3])} [answers other than a refusal there: "
        f"{ {k: n for k, n in categories.get(name, {}).get('by_kind', {}).items() if not k.endswith(REFUSALS)} }]"
        for name, found in by_category.items())
    return _check(not changes, f"{len(changes)} changes from refused inputs: {shown}" if changes
                  else "no znode, file or broker view changed")


def _partition_increases(fuzzer) -> dict:
    """Each valid grow of keep (fuzz_grow.py) was accepted by exactly one broker, refused by the others as
    INVALID_PARTITIONS, and served: metadata, leaders, ISRs, acknowledged produce to the new partitions."""
    grows = fuzzer.grows
    if not grows:
        offered = "create_partitions" in fuzzer.action_names
        return _check(False, "no partition increase ran" + ("" if offered else ": the brokers do not list "
                                                                                 "create_partitions"))
    failed = [{k: g.get(k) for k in ("before", "target", "after", "problems")} for g in grows if not g["ok"]]
    return _check(not failed, f"{len(failed)} of {len(grows)} grows failed: {failed[:3]}" if failed else
                  f"keep grew {grows[0]['before']} -> {grows[-1]['after']} partitions in {len(grows)} grows, each "
                  f"accepted once and served ({sum(g.get('acked_in_new_partitions', 0) for g in grows)} records "
                  "acknowledged in the new partitions)")


def _listed(items: list, ok_detail: str, what: str) -> dict:
    return _check(not items, f"{len(items)} {what}: {items[:5]}" if items else ok_detail)


def run_checks(fuzzer, report: dict, end: dict[str, dict]) -> dict[str, Any]:
    rss, rss_check = _rss(fuzzer)
    failed_probes = [p for p in report["controller_probes"] if not p["ok"]]
    checks = {
        "no_crash": _listed(report["crashes"], "no broker died", "brokers died"),
        "no_hang": _count_check(report, "hang", "calls timed out"),
        "no_untyped_error": _count_check(report, "untyped", "errors without a typed code"),
        "no_exception_text": _exception_text(report),
        "no_unknown_server_error": _unknown_server_errors(report),
        "no_state_change": _state_changes(report["state_changes"], report["categories"]),
        "no_malformed_input_accepted": _accepted(report),
        "zookeeper_sessions_kept": _listed(report["zookeeper_sessions_lost"], "every broker stayed registered",
                                           "brokers lost their ZooKeeper registration"),
        "brokers_responsive": _listed(report["unresponsive"], "every broker answered after every category",
                                      "brokers did not answer metadata"),
        "controller_obeyed": _listed(failed_probes, f"{len(report['controller_probes'])} probes, all obeyed",
                                     "probes failed") if report["controller_probes"]
        else _check(False, "no probe ran (the control categories did not run)"),
        "partition_increase_served": _partition_increases(fuzzer),
        "fetch_answer_bounded": _fetch_bounded(fuzzer, report),
        "threads_released": _threads(fuzzer, report),
        "streams_bounded": _streams_bounded(fuzzer, report),
        "not_blocked_by_held_streams": _held(report),
        "rss_bounded": rss_check,
        "all_categories_ran": _listed(report["not_run"], "every category ran", "categories not run (time budget)"),
        **end,
    }
    # The report lists exactly CHECKS, in its order: a check evaluated but not listed (or the reverse) is a bug.
    assert set(checks) == set(CHECKS), sorted(set(checks) ^ set(CHECKS))
    checks = {name: checks[name] for name in CHECKS}
    failed = {name: check["detail"] for name, check in checks.items() if not check["ok"]}
    return {"checks": checks, "rss": rss, "failed_checks": failed, "ok": not failed}
