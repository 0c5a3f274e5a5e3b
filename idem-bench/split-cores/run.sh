#!/bin/bash
# The 16-caller tables of `idem-bench` with the database on cores of its own, as it is where it
# runs on another machine (BENCHMARKS.md reports it beside the shared-core rows). A throwaway
# PostgreSQL is pinned to SERVER_CPUS (default: the first half of this machine's CPUs, at least
# one) and the benchmark, with the pgbench it starts, to the rest. BIN names the benchmark
# program (default `idem-bench`; `interleaved` takes `--database-url` too). Arguments go to it;
# without any, idem-bench's `--main-only --rounds 5 --calls 5000` (about six minutes on two
# cores).
#
#   idem-bench/split-cores/run.sh
#   SERVER_CPUS=0-3 CLIENT_CPUS=4-7 idem-bench/split-cores/run.sh --main-only --rounds 3
#   BIN=interleaved idem-bench/split-cores/run.sh --in-flight 1 --callers 1,16,64,128,256 --reps 11
#
# Needs taskset, PostgreSQL's server binaries (on PATH or under /usr/lib/postgresql/*/bin) with
# pg_stat_statements, and pgbench. As root the server runs as `postgres`, else as `nobody`.
set -euo pipefail
cpus=$(nproc)
if [ "$cpus" -lt 2 ]; then
    echo "split-cores: needs at least two CPUs, this machine has $cpus" >&2
    exit 1
fi
half=$((cpus / 2))
server_cpus=${SERVER_CPUS:-0-$((half - 1))}
client_cpus=${CLIENT_CPUS:-$half-$((cpus - 1))}
program=${BIN:-idem-bench}
if [ $# -eq 0 ] && [ "$program" = idem-bench ]; then
    set -- --main-only --rounds 5 --calls 5000
fi

bin=""
if command -v initdb >/dev/null && command -v pg_ctl >/dev/null; then
    bin=$(dirname "$(command -v initdb)")
else
    bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
fi
if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
    echo "split-cores: no PostgreSQL server binaries (initdb, pg_ctl) on PATH or under /usr/lib/postgresql/*/bin" >&2
    exit 1
fi

as=()
dir=$(mktemp -d /tmp/idem-split-cores.XXXXXX)
if [ "$(id -u)" -eq 0 ]; then
    user=postgres
    id -u postgres >/dev/null 2>&1 || user=nobody
    chown "$user" "$dir"
    as=(runuser -u "$user" --)
fi
port=""
for candidate in $(seq 55400 55499); do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then
        port=$candidate
        break
    fi
done
if [ -z "$port" ]; then
    echo "split-cores: no free port in 55400-55499" >&2
    exit 1
fi

stop() {
    "${as[@]}" "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap stop EXIT

"${as[@]}" "$bin/initdb" -D "$dir/data" -U postgres -A trust >/dev/null
# The same settings as the benchmark's own throwaway server (idem-testdb, idem-bench).
"${as[@]}" taskset -c "$server_cpus" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off \
        -c max_connections=300 -c shared_buffers=128MB \
        -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all" \
    start >/dev/null
url="postgres://postgres@127.0.0.1:$port/postgres"
psql "$url" -v ON_ERROR_STOP=1 -q -c "CREATE EXTENSION pg_stat_statements"
echo "split-cores: PostgreSQL on CPUs $server_cpus, the benchmark and pgbench on CPUs $client_cpus"

here=$(cd "$(dirname "$0")/../.." && pwd)
cargo build -q --release -p idem-bench --bin "$program" --manifest-path "$here/Cargo.toml"
taskset -c "$client_cpus" "$here/target/release/$program" --database-url "$url" "$@"
