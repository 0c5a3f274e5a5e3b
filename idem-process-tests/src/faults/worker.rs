//! A worker process of the campaign (`idem-faults worker WORKLOAD ..`): it delivers work at
//! least once through idem, and notes each effect in the ledger as it begins.
//!
//! Calls (the attribute's workloads) go through keys `w:0`, `w:1`, .. in an order of the
//! process's own (shuffled in windows, so processes collide on keys without marching in step),
//! each delivered until its caller is told it is done, as a scheduler retries: an answer
//! "in progress", a lost claim or an error is delivered again after a pause. Queue workloads
//! run the jobs the campaign enqueues. On SIGTERM a process takes no new work, lets the work
//! it started finish, drains idem's background settlements, and exits.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_core::{idempotent, Error, Outcome, Store};
use idem_queue::{Job, Queue};
use idem_store_postgres::sqlx::{self, postgres::PgPoolOptions};
use idem_store_postgres::PgStore;
use idem_store_redis::RedisStore;
use idem_store_sqlite::SqliteStore;
use tokio::signal::unix::{signal, SignalKind};

use super::ledger::{now_micros, run_id, Ledger};
use super::workload::{Workload, LEASE, SCHEMA};
use crate::Random;

/// The worker's flags.
#[derive(Debug, clap::Args)]
pub struct WorkerArgs {
    /// What it runs.
    #[arg(value_enum)]
    pub workload: Workload,
    /// The store: a PostgreSQL or Redis URL (the proxy's), or a SQLite database file.
    #[arg(long)]
    pub url: String,
    /// The ledger file.
    #[arg(long)]
    pub ledger: PathBuf,
    /// Calls (or jobs) run at once.
    #[arg(long, default_value_t = 4)]
    pub tasks: usize,
    /// Each effect lasts up to this long (ms).
    #[arg(long, default_value_t = 60)]
    pub work_ms: u64,
    /// Seeds the process's key order and timing (mixed with its pid).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The port an HTTP server listens on (the same for the process that replaces it).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
}

/// What every workload's work does: it notes its effect, then takes up to `work_ms`.
struct Work {
    ledger: Ledger,
    random: Random,
    work_ms: u64,
}

impl Work {
    /// Notes an effect of `key` in the ledger under a new run id, works, and returns the id.
    async fn effect(&self, key: &str) -> String {
        let run = run_id();
        self.ledger.effect(key, &run);
        self.work().await;
        run
    }

    /// Takes up to `work_ms`.
    async fn work(&self) {
        tokio::time::sleep(Duration::from_millis(self.random.below(self.work_ms))).await;
    }
}

/// What a call's body needs.
struct Calls {
    store: Arc<dyn Store>,
    pg: Option<PgStore>,
    work: Work,
}

/// Answers with the run's id, which duplicates get back: every caller of a key must be told
/// the same one.
#[idempotent(key = "w:{k}", store = calls.store, lease = "2s", replay, scope = "faults-lease")]
async fn lease_work(calls: &Calls, k: u64) -> Result<String, std::convert::Infallible> {
    Ok(calls.work.effect(&format!("w:{k}")).await)
}

/// The effect is a row written in the call's transaction: it commits with the key or not at
/// all, so it must never be repeated, whatever the faults.
#[idempotent(key = "w:{k}", store = pg, transaction = tx, replay, scope = "faults-transaction")]
async fn transaction_work(pg: &PgStore, calls: &Calls, k: u64) -> Result<String, sqlx::Error> {
    let run = run_id();
    record_effect(tx, &format!("w:{k}"), &run).await?;
    calls.work.work().await;
    Ok(run)
}

/// Writes a transactional call's effect: a row of `effects`, in the call's transaction.
pub async fn record_effect(
    tx: &mut idem_store_postgres::PgTransaction,
    key: &str,
    run: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(&format!(
        "INSERT INTO \"{SCHEMA}\".effects (key, micros, run) VALUES ($1, $2, $3)"
    ))
    .bind(key)
    .bind(now_micros() as i64)
    .bind(run)
    .execute(&mut **tx)
    .await
    .map(|_| ())
}

/// Runs the worker until SIGTERM (or until the campaign that started it is gone).
pub async fn run(args: WorkerArgs) {
    let parent = std::os::unix::process::parent_id();
    tokio::spawn(async move {
        // A coordinator that died leaves no process behind retrying against its servers.
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            if std::os::unix::process::parent_id() != parent {
                std::process::exit(1);
            }
        }
    });
    let stopping = Arc::new(AtomicBool::new(false));
    let mut terminate = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let work = Work {
        ledger: Ledger::open(&args.ledger).expect("open the ledger"),
        random: Random::for_process(args.seed),
        work_ms: args.work_ms,
    };
    if args.workload.is_queue() {
        return run_queue(args, work, &mut terminate).await;
    }
    if args.workload == Workload::Http {
        return run_http(args, work, terminate).await;
    }
    let mut pg = None;
    let store: Arc<dyn Store> = match args.workload {
        Workload::PgLease | Workload::PgTransaction => {
            let store = pg_store(&args.url, args.tasks as u32 + 2);
            pg = Some(store.clone());
            Arc::new(store)
        }
        Workload::RedisLease => Arc::new(
            retry(|| RedisStore::connect(&args.url))
                .await
                .prefix("faults"),
        ),
        Workload::SqliteLease => Arc::new(retry(|| SqliteStore::open(&args.url)).await),
        Workload::Queue | Workload::QueuePrefetch | Workload::Schedules | Workload::Http => {
            unreachable!("run above")
        }
    };
    let calls = Arc::new(Calls { store, pg, work });
    let next = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..args.tasks)
        .map(|_| {
            let (calls, next, stopping) = (calls.clone(), next.clone(), stopping.clone());
            let workload = args.workload;
            tokio::spawn(async move {
                while !stopping.load(Ordering::SeqCst) {
                    let k = shuffled(next.fetch_add(1, Ordering::SeqCst), &calls.work.random);
                    deliver(&calls, workload, k, &stopping).await;
                }
            })
        })
        .collect();
    let _ = terminate.recv().await;
    stopping.store(true, Ordering::SeqCst);
    for task in tasks {
        let _ = task.await;
    }
    let _ = idem_core::pending::drain(Duration::from_secs(10)).await;
}

/// The `i`th key of the process's order: `i` moved within its window of 64 keys.
fn shuffled(i: u64, random: &Random) -> u64 {
    (i & !63) | random.below(64)
}

/// Delivers key `k` until its caller is told it is done, or the process is stopping.
async fn deliver(calls: &Calls, workload: Workload, k: u64, stopping: &AtomicBool) {
    let mut pause = Duration::from_millis(20);
    calls.work.ledger.attempt(&format!("w:{k}"));
    loop {
        let answer = match workload {
            Workload::PgTransaction => {
                let pg = calls.pg.as_ref().expect("a PostgreSQL store");
                answer(transaction_work(pg, calls, k).await)
            }
            _ => answer(lease_work(calls, k).await),
        };
        if let Some(run) = answer {
            return calls.work.ledger.done(&format!("w:{k}"), &run);
        }
        if stopping.load(Ordering::SeqCst) {
            return;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}

/// The answer the caller is told when the work is done (it ran now, or it had run): the id of
/// the run that did it (`<none>` for a duplicate without its value, which names no run and so
/// counts as an answer that differs). "In progress elsewhere", a lost claim and an error are
/// delivered again.
pub fn answer<E>(outcome: Result<Outcome<String>, Error<E>>) -> Option<String> {
    match outcome {
        Ok(Outcome::Executed(run)) => Some(run),
        Ok(Outcome::Duplicate { value, .. }) => Some(value.unwrap_or_else(|| "<none>".into())),
        _ => None,
    }
}

/// A store through `url` whose pool connects on demand, so a process started while the
/// database is unreachable starts anyway and its calls fail (and are retried) until it is back.
pub fn pg_store(url: &str, connections: u32) -> PgStore {
    let pool = PgPoolOptions::new()
        .max_connections(connections)
        .acquire_timeout(Duration::from_secs(5))
        .connect_lazy(url)
        .expect("a PostgreSQL URL");
    PgStore::builder(pool)
        .schema(SCHEMA.to_owned())
        .build()
        .expect("a valid schema")
}

/// `connect()` until it succeeds (the server may be down when the process starts).
async fn retry<T, E: std::fmt::Display, F: std::future::Future<Output = Result<T, E>>>(
    connect: impl Fn() -> F,
) -> T {
    loop {
        match connect().await {
            Ok(store) => return store,
            Err(e) => eprintln!("connect: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Runs the queue's jobs until SIGTERM, then shuts the workers down, letting running jobs
/// finish.
async fn run_queue(args: WorkerArgs, work: Work, terminate: &mut tokio::signal::unix::Signal) {
    let store = pg_store(&args.url, args.tasks as u32 + 4);
    let queue = Queue::new(&store);
    let work = Arc::new(work);
    // Schedules: every process fires them too, as every replica of an application would.
    let scheduler = match args.workload {
        Workload::Schedules => Some(start_scheduler(&queue).await),
        _ => None,
    };
    let workers = queue
        .worker(move |job: Job| {
            let work = work.clone();
            async move {
                work.effect(job.key()).await;
                Ok::<_, std::convert::Infallible>(())
            }
        })
        .queue(args.workload.queue_name(), args.tasks)
        .lease(LEASE)
        .prefetch(args.workload.prefetch())
        .poll_interval(Duration::from_millis(100))
        .start();
    let _ = terminate.recv().await;
    if let Some(scheduler) = scheduler {
        scheduler.shutdown().await;
    }
    workers.shutdown(Duration::from_secs(10)).await;
}

/// Starts the campaign's schedule, retrying while the database cannot be reached (the process
/// may start during a fault).
async fn start_scheduler(queue: &Queue) -> idem_queue::SchedulerHandle {
    loop {
        let scheduler = queue
            .scheduler(vec![super::workload::tick_schedule()])
            .expect("a valid schedule");
        match scheduler.start().await {
            Ok(running) => return running,
            Err(e) => eprintln!("start the scheduler: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Serves `POST /work` behind `idem-http`'s layer until SIGTERM, then drains the answers left
/// to record. The handler notes its effect under the request's `Idempotency-Key` and answers
/// with its run's id, which the layer replays to retries.
async fn run_http(args: WorkerArgs, work: Work, mut terminate: tokio::signal::unix::Signal) {
    use axum::http::{HeaderMap, StatusCode};
    use axum::{extract::Request, middleware::Next, routing::post, Router};

    let store = pg_store(&args.url, args.tasks as u32 + 4);
    let work = Arc::new(work);
    let handler = move |headers: HeaderMap| {
        let work = work.clone();
        async move {
            let key = headers
                .get("idempotency-key")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .trim_matches('"')
                .to_owned();
            (StatusCode::CREATED, work.effect(&key).await)
        }
    };
    let app = Router::new()
        .route("/work", post(handler))
        .layer(idem_http::IdempotencyLayer::new(store).lease(LEASE))
        .layer(axum::middleware::from_fn(
            |mut request: Request, next: Next| async move {
                request
                    .extensions_mut()
                    .insert(idem_http::Caller::new("campaign"));
                next.run(request).await
            },
        ));
    // The process this one replaces may have died a moment ago: its port comes free once the
    // kernel has closed its socket.
    let listener = loop {
        match tokio::net::TcpListener::bind(("127.0.0.1", args.port)).await {
            Ok(listener) => break listener,
            Err(e) => eprintln!("listen on {}: {e}", args.port),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let _ = axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = terminate.recv().await;
        })
        .await;
    let _ = idem_core::pending::drain(Duration::from_secs(10)).await;
}
