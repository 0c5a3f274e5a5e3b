// graphile-worker's side of the queue comparison: drain `--jobs` no-op jobs, all enqueued
// before the clock starts, with `--concurrency` jobs at once in this one process, and print
// `graphile-worker SETTINGS: N jobs in S s, R jobs/s`. `--settings perf` uses the settings of
// graphile-worker's own performance test (a local queue of 500 jobs, completions batched with
// no delay); `--settings defaults` uses its defaults. Run through `run.sh`, which installs it.
import { Logger, run, runMigrations } from "graphile-worker";
import pg from "pg";

const args = Object.fromEntries(
  process.argv
    .slice(2)
    .reduce((pairs, arg, i, all) => (arg.startsWith("--") ? [...pairs, [arg.slice(2), all[i + 1]]] : pairs), []),
);
const connectionString = process.env.DATABASE_URL;
if (!connectionString) {
  console.error("DATABASE_URL is not set");
  process.exit(2);
}
const jobs = Number(args.jobs ?? 20000);
const concurrency = Number(args.concurrency ?? 16);
const settings = args.settings ?? "perf";
// `enqueue` only enqueues; `drain` only drains, and prints when it started and when it saw the
// queue empty (µs since the epoch), so that `run.sh` times processes that drain together.
const role = args.role ?? "all";
const batching =
  settings === "perf"
    ? { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 }
    : {};

await runMigrations({ connectionString, logger: new Logger(() => () => {}) });
const client = new pg.Client({ connectionString });
await client.connect();
if (role !== "drain") {
  await client.query("DELETE FROM graphile_worker._private_jobs");
  await client.query(
    "SELECT graphile_worker.add_job('noop', '{}'::json) FROM generate_series(1, $1)",
    [jobs],
  );
  await client.query("VACUUM ANALYZE graphile_worker._private_jobs");
}
if (role === "enqueue") {
  await client.end();
  process.exit(0);
}
const micros = () => Math.round((performance.timeOrigin + performance.now()) * 1000);
const startedAt = micros();
const started = process.hrtime.bigint();
const runner = await run({
  noHandleSignals: true,
  // Silent, as the queue's side logs nothing per job either.
  logger: new Logger(() => () => {}),
  taskList: { noop: async () => {} },
  preset: {
    worker: {
      connectionString,
      concurrentJobs: concurrency,
      maxPoolSize: concurrency + 1,
      pollInterval: 1000,
      ...batching,
    },
  },
});
for (;;) {
  const { rows } = await client.query("SELECT count(*)::int AS left FROM graphile_worker._private_jobs");
  if (rows[0].left === 0) break;
  await new Promise((resolve) => setTimeout(resolve, 5));
}
const seconds = Number(process.hrtime.bigint() - started) / 1e9;
const endedAt = micros();
await runner.stop();
await client.end();
if (role === "drain") {
  console.log(`${startedAt} ${endedAt}`);
  process.exit(0);
}
console.log(
  `graphile-worker ${settings}: ${jobs} jobs in ${seconds.toFixed(2)} s, ${Math.round(jobs / seconds)} jobs/s`,
);
