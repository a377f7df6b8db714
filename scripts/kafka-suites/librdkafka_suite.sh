#!/usr/bin/env bash
# librdkafka's own C test suite (Debian's source package, tests/) against a local ADS cluster.
#
#   scripts/kafka-suites/librdkafka_suite.sh [quick|full|sockem|build]
#
# build: (also done by the others when missing) fetch Debian's librdkafka source package into
#   $ADS_SUITES_CACHE (default /var/cache/ads-kafka-suites), install its build dependencies, build the library
#   and tests/test-runner there (~1-5 min on 2 cores; never inside the repo). A deb-src entry for the
#   configured Debian mirror is added (/etc/apt/sources.list.d/ads-kafka-suites-src.sources) when apt has none.
# quick: the tests marked "quick" in librdkafka-allowlist.txt, in librdkafka's quick mode (-Q: fewer messages,
#        sub-tests not marked quick skipped) without the socket fault-injection (sockem) tests, as `make quick`.
# full:  those marked "quick" or "full", every sub-test (-E: no sockem tests), then each "alone" test in a
#        runner of its own (a test overrunning its timeout ends its runner).
# sockem: the socket fault-injection tests, one at a time (-p1).
# Tests marked "exclude" never run; each line says why.
#
# The cluster is an open ADS cluster of $BROKERS brokers (default 3) configured like librdkafka's own "default"
# test scenario (auto-created topics get 4 partitions, replication factor 3), or KAFKA_BOOTSTRAP=host:port,...
# Results: $OUT (default $CACHE/results/librdkafka-<mode>-<time>): runner*.log, runner*.json (the runner's
# reports), summary.json.
# Exit status: 0 when every selected test passed or was skipped by the runner itself.
set -euo pipefail
source "$(dirname "$0")/common.sh"

MODE="${1:-quick}"
alone=""
ALLOWLIST="$SUITES_DIR/librdkafka-allowlist.txt"
SRC="$CACHE/librdkafka-src"
TESTS_DIR="$SRC/tests"
SUITE_KAFKA_VERSION="${SUITE_KAFKA_VERSION:-2.8.0.0}"  # ADS advertises Kafka 2.8's table
PARALLEL="${PARALLEL:-2}"
SUITE_TIMEOUT_S="${SUITE_TIMEOUT_S:-1800}"
BUILD_DEPS=(build-essential liblz4-dev libsasl2-dev libssl-dev libzstd-dev rapidjson-dev zlib1g-dev python3 dpkg-dev)

ensure_deb_src() {
  if apt-cache showsrc librdkafka 2>/dev/null | grep -q '^Version:'; then return 0; fi
  local uri suites
  uri="$(grep -h '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -1 | awk '{print $2}')"
  suites="$(grep -h '^Suites:' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1 | cut -d' ' -f2-)"
  [ -n "$uri" ] || uri="http://deb.debian.org/debian"
  [ -n "$suites" ] || suites="$(. /etc/os-release && echo "$VERSION_CODENAME")"
  say "adding a deb-src entry for $uri ($suites)"
  printf 'Types: deb-src\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$uri" "$suites" > /etc/apt/sources.list.d/ads-kafka-suites-src.sources
  apt-get update -q >/dev/null
}

build() {
  [ -x "$TESTS_DIR/test-runner" ] && return 0
  say "building librdkafka's test suite in $SRC"
  mkdir -p "$CACHE"
  ensure_deb_src
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${BUILD_DEPS[@]}" >/dev/null
  (cd "$CACHE" && rm -rf "$SRC" && apt-get source -q --download-only librdkafka >/dev/null 2>&1 \
    && dpkg-source -x "$(ls librdkafka_*.dsc | sort -V | tail -1)" "$SRC" >/dev/null)
  local t0=$(date +%s)
  (cd "$SRC" && nice -n 10 ./configure --disable-gssapi >"$CACHE/build.log" 2>&1 \
    && nice -n 10 make -j2 libs >>"$CACHE/build.log" 2>&1 \
    && nice -n 10 make -C tests -j2 test-runner >>"$CACHE/build.log" 2>&1) \
    || { say "build failed; see $CACHE/build.log"; exit 1; }
  say "built in $(( $(date +%s) - t0 ))s"
}

# the names (0034_offset_reset) of the runner's tests that need a broker (not local-only, not manual)
broker_test_names() {
  sed -n '/^struct test tests\[\] = {/,/^ *{NULL}};/p' "$TESTS_DIR/test.c" | tr -s ' \n' ' ' \
    | sed 's/_TEST(/\n_TEST(/g' | grep '^_TEST(' | grep -v 'TEST_F_LOCAL\|TEST_F_MANUAL' \
    | sed 's/^_TEST(\([0-9a-z_]*\),.*/\1/' | sort -u
}

broker_tests() { broker_test_names | cut -c1-4 | sort -u; }

# selection KIND...: the allow-list's test numbers of the given kinds, comma-separated
selection() {
  local kinds="$*"
  sed -e 's/#.*//' "$ALLOWLIST" | awk -v kinds=" $kinds " 'NF >= 2 && index(kinds, " " $2 " ") { print $1 }' \
    | paste -sd, -
}

# Every broker test of the runner is classified once (quick, full, alone, sockem or exclude); an exclude
# says why.
check_allowlist() {
  local listed missing
  listed="$(sed -e 's/#.*//' "$ALLOWLIST" | awk 'NF >= 2 { print $1 }' | sort)"
  missing="$(comm -23 <(broker_tests) <(echo "$listed" | sort -u))"
  [ -z "$missing" ] || { say "tests not classified in $ALLOWLIST: $(echo $missing)"; exit 2; }
  [ -z "$(echo "$listed" | uniq -d)" ] || { say "classified twice: $(echo "$listed" | uniq -d)"; exit 2; }
  awk '/^[[:space:]]*#/ || NF == 0 { next }
       $2 != "quick" && $2 != "full" && $2 != "alone" && $2 != "sockem" && $2 != "exclude" {
         print "bad kind: " $0; bad = 1 }
       $2 == "exclude" && index($0, "#") == 0 { print "exclude without a reason: " $0; bad = 1 }
       END { exit bad }' "$ALLOWLIST" >&2 || exit 2
}

build
[ "$MODE" = build ] && exit 0
check_allowlist
case "$MODE" in
  quick) selected="$(selection quick)"; runner_args=(-Q -E) ;;  # librdkafka's `make quick`: -Q, no sockem
  full) selected="$(selection quick full)"; alone="$(selection alone)"; runner_args=(-E) ;;
  sockem) selected="$(selection sockem)"; runner_args=(); PARALLEL=1 ;;
  *) say "mode: quick, full, sockem or build"; exit 2 ;;
esac

OUT="${OUT:-$CACHE/results/librdkafka-$MODE-$(date -u +%Y%m%dT%H%M%S)}"
mkdir -p "$OUT"
rf=$(( BROKERS < 3 ? BROKERS : 3 ))
trap stop_cluster EXIT
start_cluster "$OUT" num.partitions=4 "default.replication.factor=$rf"
printf 'bootstrap.servers=%s\n' "$BOOTSTRAP" > "$OUT/test.conf"

# run_runner TESTS NAME ARGS...: one test-runner invocation; its log and report are $OUT/NAME.{log,json}.
# A test that overruns its own timeout ends the whole runner (librdkafka's watchdog), so tests that may
# ("alone" in the allow-list) get an invocation each after the others.
run_runner() {
  local tests="$1" name="$2"; shift 2
  (cd "$TESTS_DIR" && LD_LIBRARY_PATH="../src:../src-cpp" RDKAFKA_TEST_CONF="$OUT/test.conf" \
    TEST_KAFKA_VERSION="$SUITE_KAFKA_VERSION" TEST_REPORT="$OUT/$name.json" TESTS="$tests" \
    timeout "$SUITE_TIMEOUT_S" ./test-runner -L "$@") > "$OUT/$name.log" 2>&1
  local rc=$?
  sed 's/\x1b\[[0-9;]*m//g' "$OUT/$name.log" | awk '/SUMMARY$/ { on = 1 } on && /^\|/' || true
  say "test-runner ($name) exit $rc; log $OUT/$name.log"
  [ -f "$OUT/$name.json" ] && reports+=("$OUT/$name.json") || say "no report from $name: it did not complete"
}

say "running librdkafka tests ($MODE: $selected${alone:+; alone: $alone})"
t0=$(date +%s)
reports=()
set +e
run_runner "$selected" runner "-p$PARALLEL" "${runner_args[@]}"
for test in ${alone//,/ }; do run_runner "$test" "runner-$test" -p1 "${runner_args[@]}"; done
set -e
secs=$(( $(date +%s) - t0 ))
say "librdkafka tests took ${secs}s"
[ "${#reports[@]}" -gt 0 ] || exit 1
selected="$selected${alone:+,$alone}"
# count the selected broker tests only (not the local-only variants that share a number and -L filters out)
names="$(broker_test_names | grep -E "^($(echo "$selected" | tr , '|'))_" | paste -sd, -)"
"$ADS_PYTHON" "$SUITES_DIR/summarize.py" librdkafka "$(IFS=,; echo "${reports[*]}")" "$names" "$OUT/summary.json" \
  "$secs"
