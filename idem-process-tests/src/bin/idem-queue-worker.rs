//! A work-queue worker process for the multi-process queue tests (`tests/pg_queue.rs`). Not
//! part of idem's API.
//!
//! ```text
//! DATABASE_URL=.. idem-queue-worker --schema S --concurrency N --until-done TOTAL
//!     [--work-ms W] [--fixed-work BOOL] [--lease-ms L] [--shutdown-ms D] [--seed X]
//!     [--prefetch P]
//!     [--queue NAME] [--global-limit N]
//! ```
//!
//! Every job's handler inserts a row into `<schema>.executions` (no unique constraint, so a job
//! that runs twice shows up twice), then sleeps up to `--work-ms` (exactly, with
//! `--fixed-work`; until cancelled, when the job is), then notes its end (`ended_at`). The process exits once
//! `TOTAL` jobs are done or dead, or on SIGTERM, shutting its workers down with a
//! `--shutdown-ms` deadline. It prints `runs=N finished=N released=N`, and idem's warnings (a
//! claim lost to a newer run, say) to stderr.

use clap::Parser;
use idem_process_tests::{Random, WorkerFlags};
use idem_queue::{Job, Queue};
use idem_store_postgres::sqlx::{self, PgPool};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::signal::unix::{signal, SignalKind};

struct Ctx {
    pool: PgPool,
    schema: String,
    work_ms: u64,
    fixed_work: bool,
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
        let work = if self.fixed_work {
            self.work_ms
        } else if self.work_ms > 0 {
            self.random(self.work_ms)
        } else {
            0
        };
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(work)) => {}
            () = job.cancelled() => {}
        }
        sqlx::query(&format!(
            "UPDATE \"{}\".executions SET ended_at = clock_timestamp()
             WHERE key = $1 AND pid = $2 AND ended_at IS NULL",
            self.schema
        ))
        .bind(job.key())
        .bind(std::process::id() as i32)
        .execute(&self.pool)
        .await?;
        if job.is_cancelled() {
            return Err(sqlx::Error::Protocol("cancelled".into()));
        }
        Ok(())
    }
}

#[derive(Debug, Parser)]
#[command(about = "A work-queue worker process of idem's multi-process PostgreSQL tests")]
struct Args {
    #[command(flatten)]
    worker: WorkerFlags,
    /// Jobs run at once.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Stop once this many jobs are done or dead (in every process).
    #[arg(long)]
    until_done: u64,
    /// The jobs' lease (ms).
    #[arg(long, default_value_t = 30_000)]
    lease_ms: u64,
    /// How long a shutdown lets running jobs finish (ms).
    #[arg(long, default_value_t = 10_000)]
    shutdown_ms: u64,
    /// Each job works `--work-ms` exactly, not up to it (`--fixed-work true`).
    #[arg(long, action = clap::ArgAction::Set, default_value_t = false)]
    fixed_work: bool,
    /// The named queue served (default: the default queue).
    #[arg(long, default_value = idem_queue::DEFAULT_QUEUE)]
    queue: String,
    /// At most this many of the queue's jobs run at once across every process.
    #[arg(long)]
    global_limit: Option<usize>,
    /// Always claim this many jobs past the free slots (0: never); without it, the queue's
    /// defaults (prefetching under a backlog).
    #[arg(long)]
    prefetch: Option<usize>,
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("warn"))
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let (concurrency, until_done) = (args.concurrency, args.until_done);
    let store = args.worker.store(concurrency as u32 + 4).await;
    let pool = store.pool().clone();
    let queue = Queue::new(&store);
    let ctx = Arc::new(Ctx {
        pool,
        schema: args.worker.schema.clone(),
        work_ms: args.worker.work_ms,
        fixed_work: args.fixed_work,
        seed: Random::for_process(args.worker.seed),
        runs: AtomicU64::new(0),
    });
    let handler_ctx = ctx.clone();
    let mut workers = queue
        .worker(move |job: Job| {
            let ctx = handler_ctx.clone();
            async move { ctx.run(job).await }
        })
        .queue(args.queue.clone(), concurrency)
        .lease(Duration::from_millis(args.lease_ms))
        .poll_interval(Duration::from_millis(100));
    if let Some(prefetch) = args.prefetch {
        workers = workers.prefetch(prefetch);
    }
    if let Some(limit) = args.global_limit {
        workers = workers.global_limit(args.queue.clone(), limit);
    }
    let workers = workers.start();

    let mut terminate = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut check = tokio::time::interval(Duration::from_millis(100));
    loop {
        tokio::select! {
            _ = terminate.recv() => break,
            _ = check.tick() => match queue.stats().await {
                Ok(stats) if stats.done + stats.dead + stats.cancelled >= until_done => break,
                Ok(_) => {}
                Err(e) => eprintln!("stats: {e}"),
            },
        }
    }
    let report = workers
        .shutdown(Duration::from_millis(args.shutdown_ms))
        .await;
    println!(
        "runs={} finished={} released={}",
        ctx.runs.load(Ordering::SeqCst),
        report.finished,
        report.released
    );
}
