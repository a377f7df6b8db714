"""Summary rows, the printed table, compare.json and the PNG chart of `benchmarks.compare`.

A row is ``{"system", "case", "records_per_s" (median), "min", "max", "runs"}``,
with ``p50_ms``/``p99_ms``/``p999_ms`` (medians over runs) for latency, and
``"status": "unavailable: <reason>"`` or ``"failed: <reason>"`` where a system
or a case could not be measured.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

RECORD_BYTES = 1024
SYSTEM_ORDER = ["ads", "ads-rf1", "ceiling", "ceiling-rf1", "nats", "rabbitmq", "spark-noop"]


def summarise(samples: dict[tuple[str, str], list[dict]], statuses: dict[tuple[str, str], str]) -> list[dict]:
    """``samples[(system, case)]`` holds one dict per run with records_per_s and, for latency, the percentiles."""
    rows = []
    for (system, case), runs in samples.items():
        rates = [run["records_per_s"] for run in runs]
        median = statistics.median(rates)
        row = {"system": system, "case": case, "records_per_s": median, "mb_per_s": median * RECORD_BYTES / 1e6,
               "min": min(rates), "max": max(rates), "runs": len(runs), "status": "ok"}
        for key in ("p50_ms", "p99_ms", "p999_ms"):
            if key in runs[0]:
                values = [run[key] for run in runs]
                row[key] = statistics.median(values)
                row[f"{key}_min"], row[f"{key}_max"] = min(values), max(values)
        if (system, case) in statuses:
            row["status"] = statuses[(system, case)] + f" (after {len(runs)} good runs)"
        rows.append(row)
    for (system, case), status in statuses.items():
        if (system, case) not in samples:
            rows.append({"system": system, "case": case, "records_per_s": None, "min": None, "max": None,
                         "runs": 0, "status": status})
    rank = {name: i for i, name in enumerate(SYSTEM_ORDER)}
    return sorted(rows, key=lambda r: (r["case"], rank.get(r["system"], 99)))


def print_table(rows: list[dict]) -> None:
    print(f"{'system':9} {'case':16} {'records/s':>11} {'min-max':>23} {'p50/p99/p99.9 ms':>22}  status")
    for row in rows:
        if row["records_per_s"] is None:
            print(f"{row['system']:9} {row['case']:16} {'-':>11} {'':>23} {'':>22}  {row['status']}")
            continue
        spread = f"{row['min']:,.0f}-{row['max']:,.0f}"
        latency = (f"{row['p50_ms']:.1f}/{row['p99_ms']:.1f}/{row['p999_ms']:.1f}" if "p50_ms" in row else "")
        status = "" if row["status"] == "ok" else row["status"]
        print(f"{row['system']:9} {row['case']:16} {row['records_per_s']:11,.0f} {spread:>23} {latency:>22}  {status}")
    by_key = {(r["system"], r["case"]): r["records_per_s"] for r in rows if r["records_per_s"]}
    for case in ("produce_record", "produce_batched", "consume", "spark_read", "spark_read_batch", "spark_write"):
        ads = by_key.get(("ads", case))
        others = ("ads-rf1", "ceiling", "nats", "rabbitmq", "spark-noop")
        ratios = [f"{other} {ads / by_key[(other, case)]:.2f}" for other in others if ads and (other, case) in by_key]
        if ratios:
            print(f"ads / other, {case}: " + ", ".join(ratios))
    pairs = [("ads", "ads-rf1"), ("ceiling", "ceiling-rf1")]
    ratios = [f"{rf3} {by_key[(rf3, 'produce_batched')] / by_key[(rf1, 'produce_batched')]:.2f}" for rf3, rf1 in pairs
              if (rf3, "produce_batched") in by_key and (rf1, "produce_batched") in by_key]
    if ratios:
        print("RF=3 / RF=1, produce_batched: " + ", ".join(ratios))


def write_json(rows: list[dict], path: Path) -> None:
    path.write_text(json.dumps(rows, indent=2, allow_nan=False, default=str))


def write_chart(rows: list[dict], path: Path) -> str | None:
    """Throughput bars (log scale, min-max whiskers) by case, and latency percentiles; None when written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        return f"no chart: {exc}"
    measured = [r for r in rows if r["records_per_s"]]
    throughput = [r for r in measured if r["case"] != "latency"]
    latency = [r for r in measured if r["case"] == "latency"]
    figure, (left, right) = plt.subplots(1, 2, figsize=(15, 6), gridspec_kw={"width_ratios": [3, 1]})
    cases = sorted({r["case"] for r in throughput})
    systems = [s for s in SYSTEM_ORDER if any(r["system"] == s for r in measured)]
    width = 0.8 / max(1, len(systems))
    for index, system in enumerate(systems):
        xs, heights, low, high = [], [], [], []
        for position, case in enumerate(cases):
            row = next((r for r in throughput if r["system"] == system and r["case"] == case), None)
            if row:
                xs.append(position + index * width)
                heights.append(row["records_per_s"])
                low.append(row["records_per_s"] - row["min"])
                high.append(row["max"] - row["records_per_s"])
        if xs:
            left.bar(xs, heights, width, yerr=[low, high], capsize=2, label=system)
    left.set_xticks([p + width * (len(systems) - 1) / 2 for p in range(len(cases))], cases, rotation=20)
    left.set_yscale("log")
    left.set_ylabel("records/s (1 KiB), median, min-max whiskers")
    left.legend()
    labels = [r["system"] for r in latency]
    for offset, key in enumerate(("p50_ms", "p99_ms", "p999_ms")):
        right.bar([i + offset * 0.27 for i in range(len(latency))], [max(r[key], 1e-3) for r in latency], 0.27,
                  label=key.replace("_ms", ""))
    right.set_xticks([i + 0.27 for i in range(len(latency))], labels, rotation=20)
    right.set_yscale("log")
    right.set_ylabel("end-to-end latency, ms (median over runs)")
    right.legend()
    figure.suptitle("ADS vs NATS JetStream vs RabbitMQ streams, 3 replicas, 127.0.0.1")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return None
