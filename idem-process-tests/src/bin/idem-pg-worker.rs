//! A worker process for the multi-process PostgreSQL tests (`tests/pg_*.rs` of this crate).
//! Not part of idem's API.
//!
//! ```text
//! DATABASE_URL=.. idem-pg-worker storm --schema S --keys N --rounds R --tasks T --seed X
//! DATABASE_URL=.. idem-pg-worker crash --schema S --keys N --tasks T --work-ms W --seed X
//! DATABASE_URL=.. idem-pg-worker sweep --schema S --keys N --tasks T
//! ```
//!
//! Keys are `first..first + keys` (`--first`, default 0).
//!
//! Every handler body inserts a row into `<schema>.executions` (no unique constraint, so a
//! body that runs twice shows up twice) before it returns. `crash` bodies then sleep up to
//! `--work-ms`, so workers killed with SIGKILL die mid-body. A run that loses its claim writes
//! a row to `<schema>.lost_claims`. Each mode prints one summary line:
//! `executed=N duplicate=N in_progress=N errors=N lost=N`.

use clap::{Parser, ValueEnum};
use idem_core::{idempotent, Error, Outcome};
use idem_process_tests::{Random, WorkerFlags};
use idem_store_postgres::sqlx::{self, PgPool};
use idem_store_postgres::PgStore;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

struct Ctx {
    store: PgStore,
    pool: PgPool,
    schema: String,
    work_ms: u64,
    seed: Random,
}

impl Ctx {
    fn random(&self, below: u64) -> u64 {
        self.seed.below(below)
    }

    async fn record_execution(&self, key: &str) -> Result<(), sqlx::Error> {
        sqlx::query(&format!(
            "INSERT INTO \"{}\".executions (key, pid) VALUES ($1, $2)",
            self.schema
        ))
        .bind(key)
        .bind(std::process::id() as i32)
        .execute(&self.pool)
        .await
        .map(|_| ())
    }
}

#[idempotent(key = "storm:{k}", store = ctx.store)]
async fn storm_job(ctx: &Ctx, k: u32) -> Result<(), sqlx::Error> {
    ctx.record_execution(&format!("storm:{k}")).await
}

#[idempotent(key = "crash:{k}", store = ctx.store, lease = "1s")]
async fn crash_job(ctx: &Ctx, k: u32) -> Result<(), sqlx::Error> {
    ctx.record_execution(&format!("crash:{k}")).await?;
    tokio::time::sleep(Duration::from_millis(ctx.random(ctx.work_ms))).await;
    Ok(())
}

/// The same work as `crash_job` (its scope), delivered again after the crashes.
#[idempotent(key = "crash:{k}", store = ctx.store, lease = "1s", wait = "4s", scope = "crash_job")]
async fn sweep_job(ctx: &Ctx, k: u32) -> Result<(), sqlx::Error> {
    ctx.record_execution(&format!("crash:{k}")).await?;
    Ok(())
}

#[derive(Default)]
struct Tally {
    executed: AtomicU64,
    duplicate: AtomicU64,
    in_progress: AtomicU64,
    errors: AtomicU64,
    lost: AtomicU64,
}

/// What the deliveries run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// Every key `rounds` times, concurrently: each body must run once.
    Storm,
    /// Bodies that sleep up to `--work-ms`, to be killed mid-run; a key in progress is retried.
    Crash,
    /// Deliveries that wait for (or take over) keys left by crashed workers.
    Sweep,
}

#[derive(Debug, Parser)]
#[command(about = "A worker process of idem's multi-process PostgreSQL tests")]
struct Args {
    #[arg(value_enum)]
    mode: Mode,
    #[command(flatten)]
    worker: WorkerFlags,
    /// Concurrent delivery tasks.
    #[arg(long)]
    tasks: usize,
    /// How many keys.
    #[arg(long)]
    keys: u32,
    /// The first key.
    #[arg(long, default_value_t = 0)]
    first: u32,
    /// How many times each key is delivered.
    #[arg(long, default_value_t = 1)]
    rounds: u32,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let (mode, tasks, keys, first) = (args.mode, args.tasks, args.keys, args.first);
    let store = args.worker.store(tasks as u32 + 2).await;
    let pool = store.pool().clone();
    let ctx = Arc::new(Ctx {
        store,
        pool,
        schema: args.worker.schema.clone(),
        work_ms: args.worker.work_ms,
        seed: Random::for_process(args.worker.seed),
    });
    let tally = Arc::new(Tally::default());

    // The deliveries: every key, `rounds` times, shuffled; shared by the tasks.
    let rounds = args.rounds;
    let mut queue: Vec<u32> = (0..rounds).flat_map(|_| first..first + keys).collect();
    for i in (1..queue.len()).rev() {
        queue.swap(i, ctx.random(i as u64 + 1) as usize);
    }
    let queue = Arc::new(Mutex::new(queue));
    let next = Arc::new(AtomicUsize::new(0));

    let workers: Vec<_> = (0..tasks)
        .map(|_| {
            let (ctx, tally, queue, next) =
                (ctx.clone(), tally.clone(), queue.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let k = {
                        let queue = queue.lock().unwrap();
                        let i = next.fetch_add(1, Ordering::SeqCst);
                        match queue.get(i) {
                            Some(k) => *k,
                            None => return,
                        }
                    };
                    deliver(&ctx, &tally, mode, k, &queue).await;
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.expect("worker task");
    }
    println!(
        "executed={} duplicate={} in_progress={} errors={} lost={}",
        tally.executed.load(Ordering::SeqCst),
        tally.duplicate.load(Ordering::SeqCst),
        tally.in_progress.load(Ordering::SeqCst),
        tally.errors.load(Ordering::SeqCst),
        tally.lost.load(Ordering::SeqCst),
    );
}

/// Delivers key `k` until it is executed or a duplicate. In `crash` mode a key found in
/// progress goes back on the queue, as a scheduler's retry would.
async fn deliver(ctx: &Ctx, tally: &Tally, mode: Mode, k: u32, queue: &Mutex<Vec<u32>>) {
    for attempt in 0..20u64 {
        let result = match mode {
            Mode::Storm => storm_job(ctx, k).await,
            Mode::Crash => crash_job(ctx, k).await,
            Mode::Sweep => sweep_job(ctx, k).await,
        };
        match result {
            Ok(Outcome::Executed(())) => {
                tally.executed.fetch_add(1, Ordering::SeqCst);
                return;
            }
            Ok(Outcome::Duplicate { .. }) => {
                tally.duplicate.fetch_add(1, Ordering::SeqCst);
                return;
            }
            Ok(Outcome::InProgress { .. }) => {
                tally.in_progress.fetch_add(1, Ordering::SeqCst);
                if mode == Mode::Crash {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    queue.lock().unwrap().push(k);
                }
                return;
            }
            Err(Error::LostClaim { key }) => {
                tally.lost.fetch_add(1, Ordering::SeqCst);
                let _ = sqlx::query(&format!(
                    "INSERT INTO \"{}\".lost_claims (key, pid) VALUES ($1, $2)",
                    ctx.schema
                ))
                .bind(&key)
                .bind(std::process::id() as i32)
                .execute(&ctx.pool)
                .await;
                return;
            }
            Err(e) => {
                tally.errors.fetch_add(1, Ordering::SeqCst);
                eprintln!("delivery of {k} failed (attempt {attempt}): {e}");
                tokio::time::sleep(Duration::from_millis(20 << attempt.min(5))).await;
            }
        }
    }
    panic!("delivery of {k} kept failing");
}
