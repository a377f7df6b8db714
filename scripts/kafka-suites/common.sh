# Shared by kafka_python_suite.sh and librdkafka_suite.sh (sourced, not run).
# Builds and downloads live in a cache dir outside the repo; each run writes its logs, the cluster's state
# dir and the summaries to an output dir. The cluster is an open local ADS cluster (ads_cluster.py) unless
# KAFKA_BOOTSTRAP names one already running (then it is neither started nor stopped).

SUITES_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SUITES_DIR/../.." && pwd)"
ADS_PYTHON="${ADS_PYTHON:-$REPO/.venv/bin/python}"
CACHE="${ADS_SUITES_CACHE:-/var/cache/ads-kafka-suites}"
BROKERS="${BROKERS:-3}"
CLUSTER_UP_TIMEOUT_S="${CLUSTER_UP_TIMEOUT_S:-180}"
CLUSTER_DIR=""

say() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }

# allowlist_entries FILE: the first field of every non-comment line (the test id).
allowlist_entries() {
  sed -e 's/#.*//' -e 's/[[:space:]]*$//' "$1" | awk 'NF { print $1 }'
}

# start_cluster OUT_DIR [K=V overrides...]: sets BOOTSTRAP (and CLUSTER_DIR when it started one).
start_cluster() {
  local out="$1"; shift
  if [ -n "${KAFKA_BOOTSTRAP:-}" ]; then
    BOOTSTRAP="$KAFKA_BOOTSTRAP"
    say "using the running cluster at $BOOTSTRAP"
    return 0
  fi
  CLUSTER_DIR="$out/cluster"
  local args=(up --dir "$CLUSTER_DIR" --brokers "$BROKERS")
  local kv
  for kv in "$@"; do args+=(--override "$kv"); done
  say "starting an open ADS cluster of $BROKERS broker(s) in $CLUSTER_DIR"
  BOOTSTRAP="$(cd "$REPO" && timeout "$CLUSTER_UP_TIMEOUT_S" "$ADS_PYTHON" "$SUITES_DIR/ads_cluster.py" \
    "${args[@]}" | tail -1)" || { say "cluster did not come up; logs in $CLUSTER_DIR"; return 1; }
  say "Kafka bootstrap: $BOOTSTRAP"
}

stop_cluster() {
  if [ -n "$CLUSTER_DIR" ] && [ -d "$CLUSTER_DIR" ]; then
    (cd "$REPO" && timeout 120 "$ADS_PYTHON" "$SUITES_DIR/ads_cluster.py" down --dir "$CLUSTER_DIR") \
      || say "cluster down failed; state in $CLUSTER_DIR"
    CLUSTER_DIR=""
  fi
}
