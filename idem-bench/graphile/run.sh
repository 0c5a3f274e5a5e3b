#!/usr/bin/env bash
# idem's queue and graphile-worker side by side on one PostgreSQL, in turns: 20,000 no-op
# jobs, all enqueued first, drained at one concurrency (default 16) in one process. Each round
# runs idem's queue (its default store) with its defaults (prefetching under a backlog, up to
# 500) and always prefetching 500 (as graphile-worker's `localQueue`), graphile-worker with its
# own performance test's settings, and graphile-worker with its defaults.
#
#   idem-bench/graphile/run.sh [DATABASE_URL] [ROUNDS] [CONCURRENCY] [PROCESSES]
#
# With more than one process, each drains at CONCURRENCY, started together on jobs enqueued
# first; the rate is the jobs over the first start to the last end.
#
# Without a DATABASE_URL (or with `-`) it starts a throwaway PostgreSQL (`idem-testdb`, fsync
# off, as the other benchmarks' throwaway servers) and stops it at the end.
#
# graphile-worker is installed from the npm registry into a directory of its own
# (GRAPHILE_DIR, default /tmp/idem-graphile-worker), not into the repository.
set -euo pipefail
url=${1:--}
rounds=${2:-3}
workers=${3:-16}
processes=${4:-1}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
if [ "$url" = - ]; then
  cargo build -q -p idem-testdb --manifest-path "$root/Cargo.toml"
  cluster=$(mktemp -d /tmp/idem-graphile-pg.XXXXXX)
  url=$("$root/target/debug/idem-testdb" start "$cluster")
  trap '"$root/target/debug/idem-testdb" stop "$cluster"; rm -rf "$cluster"' EXIT
fi
dir=${GRAPHILE_DIR:-/tmp/idem-graphile-worker}
mkdir -p "$dir"
if [ ! -d "$dir/node_modules/graphile-worker" ]; then
  (cd "$dir" && npm init -y >/dev/null && npm install --no-audit --no-fund graphile-worker@0.17.3 >/dev/null)
fi
cp "$here/bench.mjs" "$dir/bench.mjs"
cargo build --release -q -p idem-bench --bin queue-throughput --manifest-path "$root/Cargo.toml"
# Drains spread over `processes` processes: each prints its start and end (µs since the
# epoch); the rate is the jobs over the first start to the last end.
spread() {
  local label=$1
  shift
  local outs=()
  for p in $(seq 1 "$processes"); do
    outs+=("$(mktemp)")
    "$@" > "${outs[-1]}" &
  done
  wait
  cat "${outs[@]}" | awk -v label="$label" -v n=20000 \
    'NR == 1 || $1 < s { s = $1 } NR == 1 || $2 > e { e = $2 }
     END { printf "%s: %d jobs/s over the processes\n", label, n / ((e - s) / 1e6) }'
  rm -f "${outs[@]}"
}
if [ "$processes" -gt 1 ]; then
  cargo build --release -q -p idem-bench --bin queue-drain --manifest-path "$root/Cargo.toml"
  for round in $(seq 1 "$rounds"); do
    echo "round $round ($processes processes of concurrency $workers)"
    for prefetch in defaults 500; do
      flag=()
      [ "$prefetch" = defaults ] || flag=(--prefetch "$prefetch")
      "$root/target/release/queue-drain" --database-url "$url" --enqueue 20000
      spread "idem queue, prefetch $prefetch" "$root/target/release/queue-drain" \
        --database-url "$url" --drain --workers "$workers" "${flag[@]}"
    done
    for settings in perf defaults; do
      DATABASE_URL=$url node "$dir/bench.mjs" --role enqueue --jobs 20000
      spread "graphile-worker $settings" env DATABASE_URL="$url" node "$dir/bench.mjs" --role drain \
        --jobs 20000 --concurrency "$workers" --settings "$settings"
    done
  done
  exit 0
fi
for round in $(seq 1 "$rounds"); do
  echo "round $round"
  for prefetch in defaults 500; do
    flag=()
    [ "$prefetch" = defaults ] || flag=(--prefetch "$prefetch")
    "$root/target/release/queue-throughput" --database-url "$url" --items 20000 \
      --workers "$workers" "${flag[@]}" --purge-jobs 0 |
      awk -F'|' -v p="$prefetch" '/^\| *[0-9]+ /{gsub(/ /, "", $4); print "idem queue, prefetch " p ": " $4 " jobs/s"}'
  done
  DATABASE_URL=$url node "$dir/bench.mjs" --jobs 20000 --concurrency "$workers" --settings perf
  DATABASE_URL=$url node "$dir/bench.mjs" --jobs 20000 --concurrency "$workers" --settings defaults
done
