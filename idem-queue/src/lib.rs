//! Respond fast, work later: a durable work queue in PostgreSQL, behind idem's idempotency
//! rules.
//!
//! A handler that takes long makes duplicates likely: callers time out and retry while it is
//! still working. Instead, accept the request, [enqueue](Queue::enqueue) the work under its
//! idempotency key, answer at once (an HTTP 202), and let [workers](Queue::worker) process it.
//!
//! - **Enqueue is idempotent on the key.** A second enqueue of a key stores nothing and returns
//!   [`Enqueued::Duplicate`]; the same key with a different payload is refused
//!   ([`EnqueueError::KeyReused`]). [`Queue::enqueue_in`] enqueues inside the caller's own
//!   transaction, so the job exists exactly when the business write commits.
//! - **Claim, then process.** Workers in any number of processes claim batches with one
//!   `UPDATE .. WHERE key = ANY(ARRAY(SELECT .. FOR UPDATE SKIP LOCKED)) RETURNING ..`
//!   statement, so concurrent workers get different jobs. A claim is a lease, renewed while the
//!   job runs: a slow worker that is alive keeps its jobs; a crashed one's jobs return once the
//!   lease lapses.
//! - **Each job runs as an idempotent call** keyed by the job's key ([`idem_core::Call`]), so a
//!   job whose worker died after finishing it is recognised as done and not run again, and
//!   [`idem_core::context`], keyed clients and the [`idem_core::journal::Journal`] work in handlers
//!   unchanged. The call renews its lease on idem-core's one policy ([`idem_core::lease`]); for
//!   a job, each renewal also extends the job's claim, in the same statement.
//! - **A job's row is its record.** The claim that takes a job reserves its call's fence and
//!   writes no idempotency record, and the completion marks the row done and writes none
//!   either: the claimed row holds the key, and the done row says it ran. A record is written
//!   only when the call needs one (its first lease renewal, or a journal entry), and when
//!   [`Queue::purge_done`] deletes a done job it writes the job's record, completed, for the
//!   rest of its keep (a day), so the key enqueued again within it is still recognised as
//!   done. A job that runs once, briefly, thus writes its row twice and nothing else, as the
//!   hand-written loop does (it wrote a record twice more before: BENCHMARKS.md).
//! - **Failures retry** with exponential backoff and jitter ([`Backoff`]) up to the job's
//!   [`max_attempts`](NewJob::max_attempts); then the job is dead-lettered with its last error,
//!   where it can be [listed](Queue::dead), [retried](Queue::retry_dead) or
//!   [discarded](Queue::discard).
//! - **Idle workers sleep** until PostgreSQL notifies them of new work (`LISTEN idem_queue`), with
//!   polling as the fallback for retries that come due and for missed notifications.
//! - **Graceful shutdown** ([`Workers::shutdown`]) stops claiming, lets running jobs finish until
//!   a deadline, and gives the rest back to the queue.
//! - **Timeouts** ([`WorkerBuilder::timeout`]) count a job that runs too long as a failed attempt;
//!   finished jobs are deleted by [`Queue::purge_done`] or [`Queue::spawn_purger`].
//!
//! ```no_run
//! use idem_queue::{Job, NewJob, Queue};
//! use idem_store_postgres::{sqlx::PgPool, PgStore};
//! use std::time::Duration;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = PgPool::connect(&std::env::var("DATABASE_URL")?).await?;
//! let store = PgStore::new(pool);
//! let queue = Queue::new(&store); // once at start-up; clones share it
//! queue.migrate().await?; // the store's records table and the queue's, created or upgraded
//!
//! // In the request handler: store the work, answer 202.
//! let job = NewJob::new("welcome-email:42", &serde_json::json!({"user": 42}))?;
//! let status = queue.enqueue(job).await?; // Enqueued::Queued, or Duplicate on a retry
//!
//! // In the worker process (or a background task of the same one):
//! let workers = queue
//!     .worker(|job: Job| async move {
//!         let user: u64 = job.payload()["user"].as_u64().unwrap_or_default();
//!         // send the email, passing job.key() to the provider as its idempotency key
//!         Ok::<_, std::io::Error>(())
//!     })
//!     .concurrency(8)
//!     .start();
//! // ... on SIGTERM:
//! let report = workers.shutdown(Duration::from_secs(20)).await;
//! # Ok(()) }
//! ```
//!
//! For a table of your own, see [`claim_batch`](idem_store_postgres::claim_batch).
//!
//! **Layout, by role** (as River splits its queue): [`Queue`] is the client (`enqueue.rs`,
//! `admin.rs`); the workers are a `producer` that claims batches into free slots, an `executor`
//! that runs each job as an idempotent call on the job's view of the store (`job_store`, whose
//! completion also claims the next job for the slot it frees, so the slot's task runs it next), a
//! `completer` that records how each claim ended, and a `rescuer` that decides what a claim
//! whose worker died becomes. The queue sits on top of [`PgStore`]: the store knows nothing of
//! it, and the queue reaches job records only through the store's extension interface
//! ([`idem_store_postgres::extend`]).
//!
//! **Guarantees and limits.** A job's handler runs to completion once, unless its worker
//! crashes, stalls longer than the lease, or loses the database mid-job: then it runs again
//! (at least once), and the effect journal or provider idempotency keys (`job.key()`) keep the
//! repeat harmless. A job is never lost: every claimed job ends done, retried, dead-lettered, or
//! back in the queue when its lease lapses.

#![warn(missing_docs)]

mod admin;
mod backoff;
mod builder;
mod completer;
mod enqueue;
mod executor;
mod held;
mod job;
mod job_store;
mod listen;
pub mod metrics;
mod producer;
mod rescuer;
mod sql;
#[cfg(test)]
mod test_store;
mod workers;

use std::sync::Arc;

use idem_core::{Operation, StoreError};

use idem_store_postgres::extend::store_error;
use idem_store_postgres::PgStore;

pub use backoff::Backoff;
pub use builder::{WorkerBuilder, DEFAULT_POLL_INTERVAL};
pub use job::{
    DeadJob, EnqueueError, Enqueued, Job, JobState, JobStatus, NewJob, QueueStats,
    DEFAULT_MAX_ATTEMPTS,
};
pub use workers::{ShutdownReport, Workers};

use idem_store_postgres::extend::Batcher;
use job_store::JobCompleteOp;
use sql::QueueSql;

/// The scope of the queue's jobs' records: a job's key names one record of its own, apart
/// from any `#[idempotent]` handler's record with the same key text.
pub const QUEUE_SCOPE: &str = "idem:queue";

/// The SQL condition a row of the queue's table meets when its job is running on a lease that
/// lapsed: its worker died or stalled, and the next claim takes the job again.
/// [`QueueStats::stale`] counts these rows, and `idem jobs` shows their state as `stale`.
pub const LAPSED_SQL: &str = "(state = 'running' AND available_at <= now())";

/// How long a finished job's idempotency record is kept: idem-core's default `keep`. While the
/// job's row is in the queue (until [`Queue::purge_done`] deletes it), the done row is the
/// record; purging a job that finished less than this ago writes its record for the rest.
pub(crate) const JOB_KEEP: std::time::Duration = idem_core::DEFAULT_KEEP;

/// The queue's migrations: its table, `<table>_queue`, beside the store's records, with its
/// history in `<table>_queue_migrations`.
static MIGRATIONS: idem_store_postgres::extend::Migrations =
    idem_store_postgres::extend::Migrations::new("idem-queue", "queue_migrations", &MIGRATOR);
static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// The work queue of a [`PgStore`]: table `<table>_queue` next to its records, created by
/// [`Queue::migrate`]. Build it once at start-up ([`Queue::new`] writes its statements);
/// clones are cheap and share them. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct Queue {
    store: PgStore,
    sql: Arc<QueueSql>,
    /// The completions of concurrent jobs, batched as the store batches calls' (when it does),
    /// with at least two statements in flight: each also claims the next jobs for the slots it
    /// frees, so with one in flight two workers' jobs took turns on the wire (measured: 0.25 of
    /// the hand-written loop at two workers, 0.52-0.60 with two in flight).
    completions: Option<Arc<Batcher<JobCompleteOp>>>,
}

fn failed(operation: Operation) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |e| store_error(e).during(operation)
}

impl Queue {
    /// The queue of `store` (table `<table>_queue` in the store's schema), whose jobs run as
    /// idempotent calls on that store.
    pub fn new(store: &PgStore) -> Queue {
        Queue {
            sql: Arc::new(QueueSql::new(store)),
            store: store.clone(),
            completions: store
                .batch_drivers()
                .map(|drivers| Arc::new(Batcher::new(drivers.max(2)))),
        }
    }

    /// Creates or upgrades the store's records table ([`PgStore::migrate`]) and the queue's
    /// own, by applying the versioned migrations not applied yet. Safe to call from many
    /// processes at once and on every start-up.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        self.store.migrate().await?;
        MIGRATIONS.apply(&self.store).await
    }

    /// The store whose records the queue's jobs run under.
    pub fn store(&self) -> &PgStore {
        &self.store
    }

    /// Workers that run `handler` for each job; configure, then [`start`](WorkerBuilder::start).
    ///
    /// The handler's `Err` (any `Display` error) and its panics are failures: the job is
    /// retried after a [`Backoff`], and dead-lettered after its last attempt with the error's
    /// text.
    pub fn worker<H, F, E>(&self, handler: H) -> WorkerBuilder
    where
        H: Fn(Job) -> F + Send + Sync + 'static,
        F: std::future::Future<Output = Result<(), E>> + Send + 'static,
        E: std::fmt::Display + Send + 'static,
    {
        WorkerBuilder::new(self.clone(), handler)
    }
}
