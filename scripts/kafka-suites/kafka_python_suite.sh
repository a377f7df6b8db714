#!/usr/bin/env bash
# kafka-python's own integration tests (test/integration of its PyPI source archive) against a local ADS cluster.
#
#   scripts/kafka-suites/kafka_python_suite.sh [extra pytest args, e.g. -k consumer]
#   scripts/kafka-suites/kafka_python_suite.sh prepare    # download and venv only (no cluster, no tests)
#
# Downloads kafka-python's sdist (version pinned below) into $ADS_SUITES_CACHE (default
# /var/cache/ads-kafka-suites), makes a venv there with the suite's test dependencies (pytest, pytest-timeout,
# pytest-mock and the compression libraries, so every codec is exercised), starts an open ADS cluster of
# $BROKERS brokers (default 1, the suite's own topology; KAFKA_BOOTSTRAP=host:port uses a running cluster
# instead) configured as the suite configures its own broker (servers/resources/*/kafka.properties upstream:
# 4 partitions, shorter group session timeouts allowed, no initial rebalance delay), runs the suite with
# KAFKA_URI at the first broker's Kafka listener and KAFKA_VERSION pinned to the release whose API table
# ADS's Kafka port serves, deselects kafka-python-allowlist.txt (each entry with its reason), writes
# junit.xml + summary.json to $OUT (default $CACHE/results/kafka-python-<time>) and stops the cluster.
# Exit status: 0 when no test outside the allow-list failed.
set -euo pipefail
BROKERS="${BROKERS:-1}"  # the suite's own fixture is one broker; some tests assume it (docs/kafka-suites.md)
source "$(dirname "$0")/common.sh"

KAFKA_PYTHON_VERSION=3.0.12
SUITE_KAFKA_VERSION="${SUITE_KAFKA_VERSION:-2.8.0}"  # ADS advertises Kafka 2.8's table (docs/kafka-suites.md)
SUITE_TIMEOUT_S="${SUITE_TIMEOUT_S:-1500}"
ALLOWLIST="$SUITES_DIR/kafka-python-allowlist.txt"
SRC="$CACHE/kafka_python-$KAFKA_PYTHON_VERSION"
VENV="$CACHE/kafka-python-venv"
OUT="${OUT:-$CACHE/results/kafka-python-$(date -u +%Y%m%dT%H%M%S)}"
mkdir -p "$CACHE" "$OUT"

if [ ! -f "$SRC/.ads-ready" ]; then
  say "fetching kafka-python $KAFKA_PYTHON_VERSION's source archive"
  "$ADS_PYTHON" -m pip download -q --no-binary :all: --no-deps "kafka-python==$KAFKA_PYTHON_VERSION" -d "$CACHE/sdist"
  tar -xzf "$CACHE/sdist/kafka_python-$KAFKA_PYTHON_VERSION.tar.gz" -C "$CACHE"
  # the archive lacks test/service.py, which the integration fixtures import, and test/__init__.py, without
  # which `import test.testutil` finds the standard library's `test` package
  cp "$SUITES_DIR/kafka_python_service.py" "$SRC/test/service.py"
  touch "$SRC/test/__init__.py"
  touch "$SRC/.ads-ready"
fi
if [ ! -f "$VENV/.ads-ready" ]; then
  say "creating the suite's venv in $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q pytest pytest-timeout pytest-mock python-snappy lz4 zstandard
  touch "$VENV/.ads-ready"
fi

[ "${1:-}" = prepare ] && { say "prepared: $SRC, $VENV"; exit 0; }

deselect=()
while read -r node; do deselect+=(--deselect "$node"); done < <(allowlist_entries "$ALLOWLIST")

# Every allow-list entry must name a collected test: a stale entry would hide nothing and mislead.
collected="$(cd "$SRC" && KAFKA_VERSION="$SUITE_KAFKA_VERSION" "$VENV/bin/python" -m pytest --collect-only -q \
  -p no:cacheprovider test/integration 2>/dev/null | grep '::' || true)"
while read -r node; do
  grep -qxF "$node" <<<"$collected" || { say "allow-list entry not collected by the suite: $node"; exit 2; }
done < <(allowlist_entries "$ALLOWLIST")

trap stop_cluster EXIT
start_cluster "$OUT" num.partitions=4 group.min.session.timeout.ms=1000 group.initial.rebalance.delay.ms=0
first="${BOOTSTRAP%%,*}"
# The fixtures insist that a Kafka distribution directory exists even for an external broker; an empty one
# makes any attempt to run Kafka's own scripts fail loudly.
mkdir -p "$CACHE/no-kafka-distribution"

say "running kafka-python's integration tests against $first (KAFKA_VERSION=$SUITE_KAFKA_VERSION)"
t0=$(date +%s)
set +e
(cd "$SRC" && KAFKA_URI="PLAINTEXT://$first" KAFKA_VERSION="$SUITE_KAFKA_VERSION" \
  KAFKA_ROOT="$CACHE/no-kafka-distribution" \
  timeout "$SUITE_TIMEOUT_S" "$VENV/bin/python" -m pytest test/integration -p no:cacheprovider -q -rfEs \
  -o log_level="${SUITE_LOG_LEVEL:-INFO}" --timeout=120 --junitxml="$OUT/junit.xml" "${deselect[@]}" "$@") \
  > "$OUT/pytest.log" 2>&1
rc=$?
set -e
secs=$(( $(date +%s) - t0 ))
tail -40 "$OUT/pytest.log"
say "pytest exit $rc after ${secs}s; full log $OUT/pytest.log"
[ -f "$OUT/junit.xml" ] || { say "no junit.xml: the run did not complete"; exit 1; }
"$ADS_PYTHON" "$SUITES_DIR/summarize.py" junit "$OUT/junit.xml" "$OUT/summary.json" "$secs"
