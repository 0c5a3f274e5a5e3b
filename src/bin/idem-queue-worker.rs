//! A work-queue worker process for the multi-process queue tests (`tests/pg_queue.rs`). Not
//! part of idem's API.
//!
//! ```text
//! DATABASE_URL=.. idem-queue-worker --schema S --concurrency N --until-done TOTAL
//!     [--work-ms W] [--lease-ms L] [--shutdown-ms D] [--seed X]
//! ```
//!
//! Every job's handler inserts a row into `<schema>.executions` (no unique constraint, so a job
//! that runs twice shows up twice), then sleeps up to `--work-ms`. The process exits once
//! `TOTAL` jobs are done or dead, or on SIGTERM, shutting its workers down with a
//! `--shutdown-ms` deadline. It prints `runs=N finished=N released=N`.

use idem_store_postgres::queue::{Job, Queue};
use idem_store_postgres::sqlx::{self, PgPool};
use idem_suite::{flags, worker_store, Random};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::signal::unix::{signal, SignalKind};

struct Ctx {
    pool: PgPool,
    schema: String,
    work_ms: u64,
    seed: Random,
    runs: AtomicU64,
}

impl Ctx {
    fn random(&self, below: u64) -> u64 {
        self.seed.below(below)
    }

    async fn run(&self, job: Job) -> Result<(), sqlx::Error> {
        self.runs.fetch_add(1, Ordering::Relaxed);
        sqlx::query(&format!(
            "INSERT INTO \"{}\".executions (key, pid) VALUES ($1, $2)",
            self.schema
        ))
        .bind(job.key())
        .bind(std::process::id() as i32)
        .execute(&self.pool)
        .await?;
        if self.work_ms > 0 {
            tokio::time::sleep(Duration::from_millis(self.random(self.work_ms))).await;
        }
        Ok(())
    }
}

fn num(args: &HashMap<String, String>, name: &str, default: Option<u64>) -> u64 {
    match args.get(name) {
        Some(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("--{name} must be a number")),
        None => default.unwrap_or_else(|| panic!("missing --{name}")),
    }
}

#[tokio::main]
async fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let args = flags(&argv);
    let schema = args.get("schema").expect("missing --schema").clone();
    let concurrency = num(&args, "concurrency", Some(8)) as usize;
    let until_done = num(&args, "until-done", None);
    let store = worker_store(&schema, concurrency as u32 + 4).await;
    let pool = store.pool().clone();
    let queue = Queue::new(&store);
    let ctx = Arc::new(Ctx {
        pool,
        schema,
        work_ms: num(&args, "work-ms", Some(0)),
        seed: Random::for_process(num(&args, "seed", Some(1))),
        runs: AtomicU64::new(0),
    });
    let handler_ctx = ctx.clone();
    let workers = queue
        .worker(move |job: Job| {
            let ctx = handler_ctx.clone();
            async move { ctx.run(job).await }
        })
        .concurrency(concurrency)
        .lease(Duration::from_millis(num(&args, "lease-ms", Some(30_000))))
        .poll_interval(Duration::from_millis(100))
        .start();

    let mut terminate = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut check = tokio::time::interval(Duration::from_millis(100));
    loop {
        tokio::select! {
            _ = terminate.recv() => break,
            _ = check.tick() => match queue.stats().await {
                Ok(stats) if stats.done + stats.dead >= until_done => break,
                Ok(_) => {}
                Err(e) => eprintln!("stats: {e}"),
            },
        }
    }
    let report = workers
        .shutdown(Duration::from_millis(num(
            &args,
            "shutdown-ms",
            Some(10_000),
        )))
        .await;
    println!(
        "runs={} finished={} released={}",
        ctx.runs.load(Ordering::SeqCst),
        report.finished,
        report.released
    );
}
