//! A worker process for the multi-process PostgreSQL tests (`tests/pg_*.rs`). Not part of
//! idem's API.
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

use idem_core::{idempotent, Error, Outcome};
use idem_store_postgres::sqlx::{self, PgPool};
use idem_store_postgres::PgStore;
use idem_suite::{flags, worker_store, Random};
use std::collections::HashMap;
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

#[idempotent(key = "crash:{k}", store = ctx.store, lease = "1s", wait = "4s")]
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

fn arg<'a>(args: &'a HashMap<String, String>, name: &str) -> &'a str {
    args.get(name)
        .unwrap_or_else(|| panic!("missing --{name}"))
        .as_str()
}

fn num(args: &HashMap<String, String>, name: &str) -> u64 {
    arg(args, name)
        .parse()
        .unwrap_or_else(|_| panic!("--{name} must be a number"))
}

#[tokio::main]
async fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mode = argv.first().cloned().expect("mode: storm | crash | sweep");
    let args = flags(&argv[1..]);
    let schema = arg(&args, "schema").to_owned();
    let tasks = num(&args, "tasks") as usize;
    let keys = num(&args, "keys") as u32;
    let store = worker_store(&schema, tasks as u32 + 2).await;
    let pool = store.pool().clone();
    let ctx = Arc::new(Ctx {
        store,
        pool,
        schema,
        work_ms: args.get("work-ms").map_or(1, |v| v.parse().unwrap()),
        seed: Random::for_process(args.get("seed").map_or(1, |v| v.parse().unwrap())),
    });
    let tally = Arc::new(Tally::default());

    // The deliveries: every key, `rounds` times, shuffled; shared by the tasks.
    let rounds = args.get("rounds").map_or(1, |v| v.parse().unwrap());
    let first: u32 = args.get("first").map_or(0, |v| v.parse().unwrap());
    let mut queue: Vec<u32> = (0..rounds).flat_map(|_| first..first + keys).collect();
    for i in (1..queue.len()).rev() {
        queue.swap(i, ctx.random(i as u64 + 1) as usize);
    }
    let queue = Arc::new(Mutex::new(queue));
    let next = Arc::new(AtomicUsize::new(0));

    let workers: Vec<_> = (0..tasks)
        .map(|_| {
            let (ctx, tally, queue, next, mode) = (
                ctx.clone(),
                tally.clone(),
                queue.clone(),
                next.clone(),
                mode.clone(),
            );
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
                    deliver(&ctx, &tally, &mode, k, &queue).await;
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
async fn deliver(ctx: &Ctx, tally: &Tally, mode: &str, k: u32, queue: &Mutex<Vec<u32>>) {
    for attempt in 0..20u64 {
        let result = match mode {
            "storm" => storm_job(ctx, k).await,
            "crash" => crash_job(ctx, k).await,
            "sweep" => sweep_job(ctx, k).await,
            other => panic!("unknown mode {other}"),
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
                if mode == "crash" {
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
