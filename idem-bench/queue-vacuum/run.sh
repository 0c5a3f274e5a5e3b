#!/bin/bash
# A claim's cost against the jobs claimed since the queue's table was last vacuumed, with
# PostgreSQL's default autovacuum threshold and with the one the queue's migration sets (a
# hundredth; BENCHMARKS.md has the result). About six minutes. Needs psql, pgbench and cargo; the server's
# autovacuum on, with its default naptime (one minute).
#
#   idem-bench/queue-vacuum/run.sh postgres://postgres@127.0.0.1:5432/postgres
set -euo pipefail
url=$1
here=$(dirname "$0")
for setting in default migration; do
    psql "$url" -v ON_ERROR_STOP=1 -q -c "DROP SCHEMA IF EXISTS idem_vacuum CASCADE" 2>/dev/null
    cargo run -q --release -p idem-cli -- --database-url "$url" --schema idem_vacuum migrate
    psql "$url" -v ON_ERROR_STOP=1 -q -f "$here/fill.sql"
    if [ "$setting" = default ]; then
        psql "$url" -v ON_ERROR_STOP=1 -q -c "ALTER TABLE idem_vacuum.idem_records_queue RESET (autovacuum_vacuum_scale_factor)"
    fi
    echo "## $setting: 1,000 jobs/s at one worker for 150 s (latency without the schedule's lag, ms)"
    pgbench "$url" -n -M prepared -c 1 -R 1000 -T 150 -P 10 -f "$here/job.sql" 2>&1 \
        | tr -d ',' | awk '/^progress/ { printf "%s s: %.3f\n", $2, $7 - $14 } /error/ { print > "/dev/stderr" }'
    psql "$url" -At -c "SELECT 'autovacuums during the run: ' || autovacuum_count
        FROM pg_stat_user_tables WHERE schemaname = 'idem_vacuum' AND relname = 'idem_records_queue'"
done
psql "$url" -v ON_ERROR_STOP=1 -q -c "DROP SCHEMA idem_vacuum CASCADE" 2>/dev/null
