#!/usr/bin/env bash
# idem's queue and graphile-worker side by side on one PostgreSQL, in turns: 20,000 no-op
# jobs, all enqueued first, drained at one concurrency (default 16) in one process. Each round
# runs idem's queue (its default store) with its defaults and with a prefetch of 500 (as
# graphile-worker's `localQueue`), graphile-worker with its own performance test's settings,
# and graphile-worker with its defaults.
#
#   idem-bench/graphile/run.sh [DATABASE_URL] [ROUNDS] [CONCURRENCY]
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
for round in $(seq 1 "$rounds"); do
  echo "round $round"
  for prefetch in 0 500; do
    "$root/target/release/queue-throughput" --database-url "$url" --items 20000 \
      --workers "$workers" --prefetch "$prefetch" --purge-jobs 0 |
      awk -F'|' -v p="$prefetch" '/^\| *[0-9]+ /{gsub(/ /, "", $4); print "idem queue, prefetch " p ": " $4 " jobs/s"}'
  done
  DATABASE_URL=$url node "$dir/bench.mjs" --jobs 20000 --concurrency "$workers" --settings perf
  DATABASE_URL=$url node "$dir/bench.mjs" --jobs 20000 --concurrency "$workers" --settings defaults
done
