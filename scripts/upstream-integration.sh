#!/usr/bin/env bash
# Runs envoyproxy/ratelimit's own integration tests (test/integration/integration_test.go at a
# pinned commit) against sluice, and prints pass/fail per test and subtest.
#
# How: the fetched copy's test process runner (src/service_cmd/runner, which starts upstream's
# service in-process) is swapped for scripts/upstream-integration/runner.go by a one-line import
# change (use-sluice-runner.patch). That runner spawns sluice (dist/src/main.js) with the
# environment that would give upstream each test's settings, plus COMPAT_MODE=upstream, and reads
# the statistics the tests assert from sluice's /metrics under upstream's names. The tests start
# their own redis-server processes (6380, 6383, 6384, 6385); the Sentinel and Cluster ones their CI
# starts beforehand (its Makefile, tests_with_redis) are started here the same way, as local
# processes, and stopped at the end. Port 6379 is never used.
#
# Needs: git, go, node, redis-server, redis-cli; the Go module proxy for upstream's dependencies.
# Usage: scripts/upstream-integration.sh [go test -run regexp]
#   UPSTREAM_RATELIMIT_GIT  where to clone from (default https://github.com/envoyproxy/ratelimit.git)
#   UPSTREAM_WORKDIR        where the copy, logs and Redis data go (default $TMPDIR/sluice-upstream-integration)
set -euo pipefail

COMMIT=f2fb15770f7fd1c88ca6c3a1b58ee513917ace96
TESTS='^(TestBasicConfig|TestBasicAuthConfig|TestBasicAuthConfigWithRedisCluster|TestBasicAuthConfigWithRedisSentinel|TestBasicReloadConfig|TestShareThreshold)$'
RUN="${1:-$TESTS}"

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
src="${UPSTREAM_RATELIMIT_GIT:-https://github.com/envoyproxy/ratelimit.git}"
work="${UPSTREAM_WORKDIR:-${TMPDIR:-/tmp}/sluice-upstream-integration}"
copy="$work/ratelimit"
mkdir -p "$work"

for tool in git go node redis-server redis-cli; do
  command -v "$tool" >/dev/null || { echo "upstream-integration: $tool is not installed" >&2; exit 2; }
done

# 1. upstream at the pinned commit, with the runner swapped.
if [ ! -d "$copy/.git" ]; then git clone --quiet --no-checkout "$src" "$copy"; fi
git -C "$copy" cat-file -e "$COMMIT^{commit}" 2>/dev/null || git -C "$copy" fetch --quiet origin "$COMMIT"
git -C "$copy" checkout --quiet --force --detach "$COMMIT"
git -C "$copy" clean --quiet -fdx test/
git -C "$copy" apply "$here/upstream-integration/use-sluice-runner.patch"
mkdir -p "$copy/test/sluicerunner"
cp "$here/upstream-integration/runner.go" "$copy/test/sluicerunner/runner.go"
echo "upstream: envoyproxy/ratelimit $(git -C "$copy" rev-parse --short=12 HEAD), runner swapped for sluice"

# 2. sluice, built (SLUICE_SKIP_BUILD=1: dist/ is current, as under `npm run bench`).
[ "${SLUICE_SKIP_BUILD:-}" = 1 ] || (cd "$repo" && npm run build --silent)

# 3. The Sentinel and Cluster Redis servers upstream's CI starts before its tests.
data="$work/redis"
rm -rf "$data" && mkdir -p "$data"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for port in 6380 6383 6384 6385 6386 6387 6388 6389 6390 6391 6392 6393 6397 6398 8082 8083 8084 26394 26395 26396 26399 26400 26401; do
  port_free "$port" || { echo "upstream-integration: port $port is in use (upstream's tests use fixed ports)" >&2; exit 2; }
done
redis() { # port, then redis-server arguments
  local port="$1" && shift
  mkdir -p "$data/$port"
  (cd "$data/$port" && exec redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no "$@" >"$data/$port.log" 2>&1) &
  pids+=($!)
}
wait_port() { for _ in $(seq 100); do port_free "$1" || return 0; sleep 0.1; done; echo "redis on $1 did not start" >&2; exit 2; }
for master in 6392 6397; do
  redis "$master" --requirepass password123
  redis $((master + 1)) --requirepass password123 --replicaof 127.0.0.1 "$master" --masterauth password123
done
# Sentinels read (and rewrite) their own config file: each starts from a copy of upstream's.
for sentinel in 26394 26395 26396 26399 26400 26401; do
  conf=sentinel.conf && [ "$sentinel" -ge 26399 ] && conf=sentinel-pre-second.conf
  mkdir -p "$data/$sentinel" && cp "$copy/test/integration/conf/$conf" "$data/$sentinel/sentinel.conf"
done
for sentinel in 26394 26395 26396 26399 26400 26401; do
  (cd "$data/$sentinel" && exec redis-server sentinel.conf --sentinel --port "$sentinel" --bind 127.0.0.1 >"$data/$sentinel.log" 2>&1) &
  pids+=($!)
done
for node in 6386 6387 6388 6389 6390 6391; do redis "$node" --requirepass password123 --cluster-enabled yes; done
for port in 6386 6387 6388 6389 6390 6391 6392 6393 6397 6398 26394 26395 26396 26399 26400 26401; do wait_port "$port"; done
for first in 6386 6389; do
  redis-cli -a password123 --no-auth-warning --cluster create 127.0.0.1:$first 127.0.0.1:$((first + 1)) 127.0.0.1:$((first + 2)) --cluster-replicas 0 --cluster-yes >"$data/cluster-$first.log" 2>&1
  for _ in $(seq 100); do
    [ "$(redis-cli -p "$first" -a password123 --no-auth-warning cluster info | tr -d '\r' | grep -c '^cluster_state:ok')" = 1 ] && break
    sleep 0.1
  done
done
echo "redis: Sentinel masters 6392, 6397 (3 sentinels each), clusters 6386-6388 and 6389-6391"

# 4. Upstream's tests, verbose; pass/fail per test and subtest.
log="$work/go-test.log"
export SLUICE_NODE="$(command -v node)" SLUICE_MAIN="$repo/dist/src/main.js" SLUICE_LOG="$work/sluice.log"
: >"$SLUICE_LOG"
set +e
(cd "$copy" && go test -tags=integration -count=1 -v -timeout 20m -run "$RUN" ./test/integration) >"$log" 2>&1
status=$?
set -e
results="$(grep -E '^\s*--- (PASS|FAIL|SKIP):' "$log" | sed -E 's/^\s*--- (PASS|FAIL|SKIP): ([^ ]+).*/\1 \2/')"
if [ -z "$results" ]; then
  echo "upstream-integration: no test ran (go test exit $status); see $log" >&2
  tail -20 "$log" >&2
  exit 2
fi
echo "$results" | sort -k2 | awk '{ printf "%-4s %s\n", $1, $2 }'
passed="$(echo "$results" | grep -c '^PASS' || true)"
failed="$(echo "$results" | grep -c '^FAIL' || true)"
skipped="$(echo "$results" | grep -c '^SKIP' || true)"
echo "envoyproxy/ratelimit $COMMIT integration tests against sluice (COMPAT_MODE=upstream): $passed of $((passed + failed + skipped)) passed"
echo "log: $log, sluice's output: $SLUICE_LOG"
echo "upstream-integration: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ "$status" -eq 0 ]
