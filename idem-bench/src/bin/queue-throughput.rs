//! Work-queue throughput: idem's queue (`idem_queue`) against a
//! hand-written `FOR UPDATE SKIP LOCKED` loop, draining the same items with 1, 2, 4 and 8
//! workers, side by side in one run.
//!
//! ```text
//! cargo run --release -p idem-bench --bin queue-throughput -- [--items 20000]
//!     [--workers 1,2,4,8] [--batch 10] [--purge-jobs 1000000] [--rounds 1]
//!     [--prefetch 0] [--database-url URL]
//! ```
//!
//! Then it purges `--purge-jobs` finished jobs twice from the same vacuumed backlog of jobs
//! finished an hour ago (within their keep, so each leaves its record), in batches of 10,000:
//! batch by batch, each from the start of the done jobs (`purge_done`), and as one drain whose
//! batches each start where the one before ended (`purge_all_done`, as the queue's
//! `spawn_purger` runs it); then once more as one drain of jobs finished 25 hours ago (past
//! their keep: no record written).
//!
//! Each item's work is empty, so the figures are the machinery's cost per item. idem's items
//! each run as an idempotent call (a fence reserved by the claim, the job's row marked done by
//! the completion, which also claims the next job); the hand-written loop marks a row `sent`
//! and nothing else. Each row also gives the CPU per item of this process and (where it runs
//! on this machine) the server, over idem's default drain and over the loop's. With `--rounds
//! N` every worker count runs N times, the counts taking turns, and a row is its median round
//! (by idem's default / hand-written ratio) with that ratio's range. Without `--database-url`
//! it starts a throwaway PostgreSQL.

use idem_bench::cpu;
use idem_bench::spread::{median_by, Spread};
use idem_queue::{Job, NewJob, Queue};
use idem_store_postgres::sqlx::{self, PgPool, Row};
use idem_store_postgres::PgStore;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// CPU time per item, in µs, of this process and (where it runs on this machine) of the
/// server, over `drain`.
async fn cpu_per_item<F: std::future::Future<Output = f64>>(
    server: Option<&cpu::Server>,
    items: u64,
    drain: F,
) -> (f64, (f64, Option<f64>)) {
    let (client0, server0) = (cpu::client_seconds().0, server.map(cpu::Server::seconds));
    let rate = drain.await;
    let (client1, server1) = (cpu::client_seconds().0, server.map(cpu::Server::seconds));
    let per_item = |seconds: f64| seconds * 1e6 / items as f64;
    let server = server0.zip(server1).map(|(s0, s1)| per_item(s1 - s0));
    (rate, (per_item(client1 - client0), server))
}

/// `client / server` µs per item, the server's "n/a" where it is not on this machine.
fn cpu_cell((client, server): (f64, Option<f64>)) -> String {
    let server = server.map_or("n/a".to_owned(), |s| format!("{s:.0}"));
    format!("{client:.0} / {server}")
}

/// The work queue against a hand-written loop. Unknown flags exit with status 2.
#[derive(Debug, clap::Parser)]
#[command(about = "The work queue's throughput against a hand-written SKIP LOCKED loop")]
struct Args {
    /// Jobs per run.
    #[arg(long, default_value_t = 20_000)]
    items: u64,
    /// Worker counts to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    workers: Vec<usize>,
    /// The hand-written loop's batch size.
    #[arg(long, default_value_t = 10)]
    batch: i64,
    /// Finished jobs in the purge comparison (0 skips it).
    #[arg(long, default_value_t = 1_000_000)]
    purge_jobs: u64,
    /// A server to use (with `pg_stat_statements`); without it a throwaway one is started.
    #[arg(long)]
    database_url: Option<String>,
    /// Jobs idem's workers claim past their free slots (`WorkerBuilder::prefetch`).
    /// Without it, the queue's defaults (adaptive prefetching).
    #[arg(long)]
    prefetch: Option<usize>,
    /// Rounds: every worker count once per round, in turn. A row is the worker count's median
    /// round by idem's default / hand-written ratio, with that ratio's range over the rounds.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
}

/// One worker count's measurements in one round.
struct Round {
    /// idem's queue through the pool, in items/s.
    pooled: f64,
    /// idem's queue on its default store, in items/s.
    default: f64,
    /// The hand-written loop, in items/s.
    by_hand: f64,
    /// CPU per item, client and server, over idem's default drain.
    idem_cpu: (f64, Option<f64>),
    /// The same over the loop's.
    hand_cpu: (f64, Option<f64>),
}

impl Round {
    /// idem's default store / the hand-written loop.
    fn ratio(&self) -> f64 {
        self.default / self.by_hand
    }
}

/// Drains `items` jobs with `workers` workers through the pool, then with the default store,
/// then by hand, in a fresh schema; pushes the enqueue rates onto `enqueue_rates`.
async fn round(
    pool: &PgPool,
    server_cpu: Option<&cpu::Server>,
    items: u64,
    batch: i64,
    workers: usize,
    prefetch: Option<usize>,
    enqueue_rates: &mut Vec<f64>,
) -> Round {
    let schema = format!("idem_bench_queue_{workers}");
    fresh_schema(pool, &schema).await;
    let mut rates = Vec::new();
    let mut idem_cpu = (0.0, None);
    for default in [false, true] {
        let mut builder = PgStore::builder(pool.clone()).schema(schema.clone());
        if !default {
            builder = builder.through_pool();
        }
        let store = builder.build().unwrap();
        Queue::new(&store).migrate().await.unwrap();
        sqlx::raw_sql(&format!(
            "TRUNCATE {schema}.idem_records_queue, {schema}.idem_records"
        ))
        .execute(pool)
        .await
        .unwrap();
        enqueue_rates.push(enqueue_idem(&store, items).await);
        sqlx::raw_sql(&format!("ANALYZE {schema}.idem_records_queue"))
            .execute(pool)
            .await
            .unwrap();
        let drain = drain_idem(&store, items, workers, prefetch);
        let (rate, cpu) = cpu_per_item(server_cpu, items, drain).await;
        rates.push(rate);
        idem_cpu = cpu;
    }
    fill_by_hand(pool, &schema, items).await;
    let drain = drain_by_hand(pool, &schema, workers, batch);
    let (by_hand, hand_cpu) = cpu_per_item(server_cpu, items, drain).await;
    sqlx::raw_sql(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(pool)
        .await
        .unwrap();
    Round {
        pooled: rates[0],
        default: rates[1],
        by_hand,
        idem_cpu,
        hand_cpu,
    }
}

async fn fresh_schema(pool: &PgPool, name: &str) {
    sqlx::raw_sql(&format!(
        "DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}"
    ))
    .execute(pool)
    .await
    .unwrap();
}

/// Enqueues `items` jobs through the API from 8 tasks; returns jobs/s.
async fn enqueue_idem(store: &PgStore, items: u64) -> f64 {
    let queue = Queue::new(store);
    let started = Instant::now();
    let tasks: Vec<_> = (0..8u64)
        .map(|t| {
            let queue = queue.clone();
            tokio::spawn(async move {
                for i in (t..items).step_by(8) {
                    let job = NewJob::new(format!("item:{i}"), &i).unwrap();
                    let _ = queue.enqueue(job).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    items as f64 / started.elapsed().as_secs_f64()
}

/// Drains the queue with `workers` concurrent jobs; returns items/s.
async fn drain_idem(store: &PgStore, items: u64, workers: usize, prefetch: Option<usize>) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let finished = Arc::new(tokio::sync::Notify::new());
    let (handler_done, handler_finished) = (done.clone(), finished.clone());
    let started = Instant::now();
    let workers = Queue::new(store)
        .worker(move |_job: Job| {
            let (done, finished) = (handler_done.clone(), handler_finished.clone());
            async move {
                if done.fetch_add(1, Ordering::SeqCst) + 1 == items {
                    finished.notify_one();
                }
                Ok::<_, std::convert::Infallible>(())
            }
        })
        .concurrency(workers);
    let running = idem_bench::prefetch(workers, prefetch)
        .poll_interval(Duration::from_millis(50))
        .start();
    finished.notified().await;
    // Waits for the last items to be settled.
    let report = running.shutdown(Duration::from_secs(60)).await;
    assert_eq!(report.released, 0);
    let elapsed = started.elapsed();
    let stats = Queue::new(store).stats().await.unwrap();
    assert_eq!(stats.done, items, "every item done once");
    items as f64 / elapsed.as_secs_f64()
}

/// The hand-written loop: claim a batch with SKIP LOCKED, process each row, mark it sent.
async fn drain_by_hand(pool: &PgPool, schema: &str, workers: usize, batch: i64) -> f64 {
    let table = format!("{schema}.emails");
    let claim = format!(
        "UPDATE {table} SET status = 'sending', claimed_at = now()
         WHERE id IN (
             SELECT id FROM {table} WHERE status = 'queued'
             ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
         RETURNING id, payload::text"
    );
    let sent = format!("UPDATE {table} SET status = 'sent' WHERE id = $1");
    let started = Instant::now();
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let (pool, claim, sent) = (pool.clone(), claim.clone(), sent.clone());
            tokio::spawn(async move {
                let mut processed = 0u64;
                loop {
                    let rows = sqlx::query(&claim)
                        .bind(batch)
                        .fetch_all(&pool)
                        .await
                        .unwrap();
                    if rows.is_empty() {
                        return processed;
                    }
                    for row in rows {
                        let id: i64 = row.get(0);
                        let _payload: String = row.get(1);
                        sqlx::query(&sent).bind(id).execute(&pool).await.unwrap();
                        processed += 1;
                    }
                }
            })
        })
        .collect();
    let mut processed = 0;
    for task in tasks {
        processed += task.await.unwrap();
    }
    processed as f64 / started.elapsed().as_secs_f64()
}

async fn fill_by_hand(pool: &PgPool, schema: &str, items: u64) {
    sqlx::raw_sql(&format!(
        "CREATE TABLE {schema}.emails (
             id bigserial PRIMARY KEY, key text UNIQUE NOT NULL, payload jsonb NOT NULL,
             status text NOT NULL DEFAULT 'queued', claimed_at timestamptz);
         CREATE INDEX ON {schema}.emails (id) WHERE status = 'queued';
         INSERT INTO {schema}.emails (key, payload)
             SELECT 'item:' || i, to_jsonb(i) FROM generate_series(0, {items} - 1) i;
         ANALYZE {schema}.emails;"
    ))
    .execute(pool)
    .await
    .unwrap();
}

#[tokio::main]
async fn main() {
    let args: Args = clap::Parser::parse();
    // Kept until the end: a throwaway server stops when it is dropped.
    let server = idem_bench::server(args.database_url.as_deref(), &[]).await;
    let pool = server.pool.clone();
    let server_cpu = cpu::Server::find(&pool).await;
    let version: String = sqlx::query("SHOW server_version")
        .fetch_one(&pool)
        .await
        .unwrap()
        .get(0);
    println!(
        "Queue throughput, {} items, empty work, PostgreSQL {version}, {} cores",
        args.items,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!();
    println!(
        "| workers | idem queue, through the pool (items/s) | idem queue, default store (items/s) \
         | hand-written SKIP LOCKED loop (items/s) | idem / hand-written (pool / default) \
         | CPU µs/item, client / server: idem default | same: hand-written |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    let mut enqueue_rates = Vec::new();
    let mut measured: Vec<Vec<Round>> = args.workers.iter().map(|_| Vec::new()).collect();
    for n in 1..=args.rounds {
        for (&workers, rounds) in args.workers.iter().zip(&mut measured) {
            eprintln!("{workers} workers (round {n} of {}) ...", args.rounds);
            let r = round(
                &pool,
                server_cpu.as_ref(),
                args.items,
                args.batch,
                workers,
                args.prefetch,
                &mut enqueue_rates,
            )
            .await;
            rounds.push(r);
        }
    }
    for (&workers, rounds) in args.workers.iter().zip(measured) {
        let spread = Spread::of(rounds.iter().map(Round::ratio)).expect("at least one round");
        let range = match rounds.len() {
            1 => String::new(),
            n => format!(" ({:.2}-{:.2} over {n} rounds)", spread.low, spread.high),
        };
        let r = median_by(rounds, Round::ratio).expect("at least one round");
        println!(
            "| {workers} | {:.0} | {:.0} | {:.0} | {:.2} / {:.2}{range} | {} | {} |",
            r.pooled,
            r.default,
            r.by_hand,
            r.pooled / r.by_hand,
            r.ratio(),
            cpu_cell(r.idem_cpu),
            cpu_cell(r.hand_cpu)
        );
    }
    let mean = enqueue_rates.iter().sum::<f64>() / enqueue_rates.len() as f64;
    println!();
    println!("Enqueue through the API (8 tasks, one statement each): {mean:.0} jobs/s");
    if args.purge_jobs > 0 {
        purge(&pool, args.purge_jobs).await;
    }
}

/// Purges `jobs` finished jobs batch by batch, each from the start, then as one drain, on the
/// same vacuumed backlog of jobs finished an hour ago (within their keep, so purging writes
/// each one's record); then as one drain of jobs finished 25 hours ago (past their keep: no
/// record written). Prints the rates and the longest batch.
async fn purge(pool: &PgPool, jobs: u64) {
    const BATCH: usize = 10_000;
    let schema = "idem_bench_queue_purge";
    fresh_schema(pool, schema).await;
    let store = PgStore::builder(pool.clone())
        .schema(schema)
        .build()
        .unwrap();
    let queue = Queue::new(&store);
    queue.migrate().await.unwrap();
    let fill = |hours_ago: u32| async move {
        // Done a microsecond apart, `hours_ago`; no records; then vacuumed, so runs start alike.
        sqlx::raw_sql(&format!(
            "TRUNCATE {schema}.idem_records;
             INSERT INTO {schema}.idem_records_queue
                 (key, payload, max_attempts, state, attempts, finished_at)
             SELECT 'done:' || i, to_jsonb(i), 1, 'done', 1,
                    now() - interval '{hours_ago} hours' + i * interval '1 microsecond'
             FROM generate_series(1, {jobs}) i"
        ))
        .execute(pool)
        .await
        .unwrap();
        for table in ["idem_records_queue", "idem_records"] {
            sqlx::raw_sql(&format!("VACUUM ANALYZE {schema}.{table}"))
                .execute(pool)
                .await
                .unwrap();
        }
    };
    let drain = |hours_ago: u32| {
        let queue = queue.clone();
        async move {
            eprintln!("purge of {jobs} done jobs finished {hours_ago} h ago, one drain ...");
            fill(hours_ago).await;
            let started = Instant::now();
            let drained = queue.purge_all_done(Duration::ZERO, BATCH).await.unwrap();
            (drained, started.elapsed())
        }
    };
    eprintln!("purge of {jobs} done jobs, batch by batch ...");
    fill(1).await;
    let (mut purged, mut longest) = (0, Duration::ZERO);
    let started = Instant::now();
    loop {
        let t0 = Instant::now();
        let n = queue.purge_done(Duration::ZERO, BATCH).await.unwrap();
        longest = longest.max(t0.elapsed());
        purged += n;
        if n < BATCH as u64 {
            break;
        }
    }
    let took = started.elapsed();
    let (drained, drain_took) = drain(1).await;
    let (old, old_took) = drain(25).await;
    let kept: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {schema}.idem_records"))
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(kept, 0, "jobs past their keep leave no record");
    println!();
    println!(
        "Purge of finished jobs, batches of {BATCH}, jobs finished an hour ago (each leaves its \
         record for the rest of its keep): {purged} batch by batch, each from the start of the \
         done jobs (`purge_done`), in {:.1} s ({:.0} jobs/s, longest batch {:.0} ms); {drained} \
         as one drain whose batches each start where the one before ended (`purge_all_done`) in \
         {:.1} s ({:.0} jobs/s): {:.2}x. Jobs finished 25 hours ago (past their keep: no \
         record), one drain: {old} in {:.1} s ({:.0} jobs/s)",
        took.as_secs_f64(),
        purged as f64 / took.as_secs_f64(),
        longest.as_secs_f64() * 1000.0,
        drain_took.as_secs_f64(),
        drained as f64 / drain_took.as_secs_f64(),
        took.as_secs_f64() / drain_took.as_secs_f64(),
        old_took.as_secs_f64(),
        old as f64 / old_took.as_secs_f64(),
    );
    sqlx::raw_sql(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(pool)
        .await
        .unwrap();
}
