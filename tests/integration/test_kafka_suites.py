"""The Kafka clients' own test suites against ADS (scripts/kafka-suites/, docs/kafka-suites.md), in their
quick forms: kafka-python's integration tests (all but its allow-list, ~20 s on one broker) and librdkafka's
quick selection (~30-60 s on three brokers).

Each needs a one-time preparation outside the repo (kafka-python's source archive and a venv; librdkafka's
Debian source package built). Without it the test skips and says which command prepares it: a skip is not
a pass, and CI runs these only on a machine where the preparation was done.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SUITES = REPO / "scripts" / "kafka-suites"
CACHE = Path(os.environ.get("ADS_SUITES_CACHE", "/var/cache/ads-kafka-suites"))
SUITE_TIMEOUT_S = 600  # the script's own bound on the suite, plus cluster start and stop


def _run(script: str, args: list[str], out: Path) -> dict:
    env = {**os.environ, "OUT": str(out), "ADS_SUITES_CACHE": str(CACHE)}
    env.pop("KAFKA_BOOTSTRAP", None)  # always the script's own cluster
    result = subprocess.run(["bash", str(SUITES / script), *args], env=env, capture_output=True, text=True,
                            timeout=SUITE_TIMEOUT_S)
    summary_path = out / "summary.json"
    assert summary_path.exists(), f"{script} wrote no summary (exit {result.returncode}):\n{result.stderr[-3000:]}"
    summary = json.loads(summary_path.read_text())
    failed = [c["id"] for c in summary["cases"] if c["outcome"] == "failed"]
    assert not failed and result.returncode == 0, f"{script}: failed {failed}; logs in {out}\n{result.stdout[-3000:]}"
    return summary


def test_kafka_python_integration_suite_passes_outside_its_allowlist(tmp_path):
    prepared = CACHE / "kafka_python-3.0.12" / ".ads-ready"
    if not (prepared.exists() and (CACHE / "kafka-python-venv" / ".ads-ready").exists()):
        pytest.skip(f"kafka-python's suite is not prepared in {CACHE}: run "
                    "scripts/kafka-suites/kafka_python_suite.sh prepare")
    summary = _run("kafka_python_suite.sh", [], tmp_path / "kafka-python")
    assert summary["passed"] >= 40, summary  # 40 measured: fewer means tests silently stopped running


def test_librdkafka_quick_selection_passes(tmp_path):
    if not (CACHE / "librdkafka-src" / "tests" / "test-runner").exists():
        pytest.skip(f"librdkafka's test suite is not built in {CACHE}: run "
                    "scripts/kafka-suites/librdkafka_suite.sh build")
    summary = _run("librdkafka_suite.sh", ["quick"], tmp_path / "librdkafka")
    assert summary["passed"] >= 26, summary  # every test of the quick selection
