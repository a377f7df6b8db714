#!/usr/bin/env bash
# The long fault-injection runs (not part of CI): one scenario over many seeds, a summary line per seed.
#   scripts/chaos-sweep.sh jepsen-2013 1 20 60 chaos-out/jepsen-2013
# runs seeds 1..20 for 60 s each and writes OUT/seed-N/report.{json,png} and OUT/summary.jsonl.
set -u
scenario=$1; first=$2; last=$3; duration=$4; out=$5
here="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-$here/.venv/bin/python}"
mkdir -p "$out"
for seed in $(seq "$first" "$last"); do
  "$python" -m ads_spark.cli.main chaos run --scenario "$scenario" --duration "$duration" --seed "$seed" \
    --out "$out/seed-$seed" > "$out/seed-$seed.txt" 2>&1
  "$python" - "$out/seed-$seed/report.json" "$seed" >> "$out/summary.jsonl" <<'PY'
import json, sys
try:
    report = json.load(open(sys.argv[1]))
except OSError as exc:
    print(json.dumps({"seed": int(sys.argv[2]), "error": str(exc)}))
    raise SystemExit(0)
keys = ("seed", "acknowledged", "lost", "duplicated", "inconsistent_offsets", "non_monotonic", "aborted_reads",
        "replica_divergence", "unseen", "availability", "longest_outage_s", "longest_outage_cause", "valid")
print(json.dumps({k: report.get(k) for k in keys}))
PY
  tail -1 "$out/summary.jsonl"
done
