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
//!   `UPDATE .. WHERE key IN (SELECT .. FOR UPDATE SKIP LOCKED) RETURNING ..` statement, so
//!   concurrent workers get different jobs. A claim is a lease, renewed while the job runs: a
//!   slow worker that is alive keeps its jobs; a crashed one's jobs return once the lease lapses.
//! - **Each job runs as an idempotent call** keyed by the job's key ([`idem_core::Call`]), so a
//!   job whose worker died after finishing it is recognised as done and not run again, and
//!   [`idem_core::context`], keyed clients and the [`idem_core::journal::Journal`] work in handlers
//!   unchanged.
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
//! use idem_store_postgres::queue::{NewJob, Job};
//! use idem_store_postgres::{sqlx::PgPool, PgStore};
//! use std::time::Duration;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = PgPool::connect(&std::env::var("DATABASE_URL")?).await?;
//! let store = PgStore::new(pool);
//! store.migrate().await?;
//! let queue = store.queue();
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
//! For a table of your own, see [`claim_batch`](crate::claim_batch).
//!
//! **Guarantees and limits.** A job's handler runs to completion once, unless its worker
//! crashes, stalls longer than the lease, or loses the database mid-job: then it runs again
//! (at least once), and the effect journal or provider idempotency keys (`job.key()`) keep the
//! repeat harmless. A job is never lost: every claimed job ends done, retried, dead-lettered, or
//! back in the queue when its lease lapses.

mod backoff;
mod job;
mod job_store;
mod listen;
mod sql;
mod worker;

use std::sync::Arc;
use std::time::Duration;

use idem_core::{Operation, StoreError};
use sqlx::{PgExecutor, Row};

use crate::error::store_error;
use crate::time::{duration_micros, from_micros};
use crate::PgStore;

pub use backoff::Backoff;
pub use job::{
    DeadJob, EnqueueError, Enqueued, Job, JobState, JobStatus, NewJob, QueueStats,
    DEFAULT_MAX_ATTEMPTS,
};
pub use worker::{ShutdownReport, WorkerBuilder, Workers, DEFAULT_POLL_INTERVAL};

use job::parse_payload;
pub(crate) use sql::QueueSql;

/// The work queue of a [`PgStore`]: table `<table>_queue` next to its records, created by
/// [`PgStore::migrate`]. Cheap to clone. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct Queue {
    store: PgStore,
    sql: Arc<QueueSql>,
}

fn failed(operation: Operation) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |e| store_error(e).during(operation)
}

impl Queue {
    pub(crate) fn new(store: PgStore, sql: Arc<QueueSql>) -> Queue {
        Queue { store, sql }
    }

    /// The store whose records the queue's jobs run under.
    pub fn store(&self) -> &PgStore {
        &self.store
    }

    /// Stores `job` unless a job with its key is stored already, and says which. Idle workers
    /// are woken when it commits.
    pub async fn enqueue(&self, job: NewJob) -> Result<Enqueued, EnqueueError> {
        self.enqueue_in(self.store.pool(), job).await
    }

    /// [`enqueue`](Queue::enqueue) on `executor`: a connection, or the caller's open
    /// transaction (`&mut *tx`), so the job is stored if and only if the transaction commits.
    ///
    /// ```no_run
    /// # use idem_store_postgres::queue::{NewJob, Queue};
    /// # async fn run(queue: Queue) -> Result<(), Box<dyn std::error::Error>> {
    /// let mut tx = queue.store().pool().begin().await?;
    /// sqlx::query("INSERT INTO orders (id) VALUES (7)").execute(&mut *tx).await?;
    /// queue.enqueue_in(&mut *tx, NewJob::new("order-confirmation:7", &7)?).await?;
    /// tx.commit().await?; // the order and its job, or neither
    /// # Ok(()) }
    /// ```
    pub async fn enqueue_in<'e, X>(
        &self,
        executor: X,
        job: NewJob,
    ) -> Result<Enqueued, EnqueueError>
    where
        X: PgExecutor<'e>,
    {
        let run_after = job.run_after.map(|at| {
            at.duration_since(std::time::UNIX_EPOCH)
                .map(duration_micros)
                .unwrap_or(0)
        });
        let row = sqlx::query(&self.sql.enqueue)
            .bind(job.key.as_str())
            .bind(&job.payload)
            .bind(job.max_attempts as i32)
            .bind(run_after)
            .bind(duration_micros(job.delay))
            .fetch_one(executor)
            .await
            .map_err(|e| EnqueueError::Store(store_error(e)))?;
        let inserted: bool = row.get(0);
        let same: Option<bool> = row.get(1);
        match (inserted, same) {
            (true, _) => Ok(Enqueued::Queued),
            (false, Some(true)) => Ok(Enqueued::Duplicate),
            (false, Some(false)) => Err(EnqueueError::KeyReused {
                key: job.key.into_string(),
            }),
            // The conflicting row committed after this statement's snapshot was taken: look
            // again, with a new snapshot.
            (false, None) => {
                let same: Option<bool> = sqlx::query_scalar(&self.sql.same_payload)
                    .bind(job.key.as_str())
                    .bind(&job.payload)
                    .fetch_optional(self.store.pool())
                    .await
                    .map_err(|e| EnqueueError::Store(store_error(e)))?;
                match same {
                    Some(true) => Ok(Enqueued::Duplicate),
                    Some(false) => Err(EnqueueError::KeyReused {
                        key: job.key.into_string(),
                    }),
                    // Discarded or purged in between: nothing is stored, and saying "duplicate"
                    // would lose the work.
                    None => Err(EnqueueError::Store(StoreError::msg(format!(
                        "the job stored under key {:?} was deleted while this enqueue ran; \
                         nothing was stored: enqueue it again",
                        job.key.as_str()
                    )))),
                }
            }
        }
    }

    /// Counts of jobs by state (one statement, counting the table).
    pub async fn stats(&self) -> Result<QueueStats, StoreError> {
        let row = sqlx::query(&self.sql.stats)
            .fetch_one(self.store.pool())
            .await
            .map_err(failed(Operation::Get))?;
        let count = |i: usize| row.get::<i64, _>(i).unsigned_abs();
        Ok(QueueStats {
            queued: count(0),
            running: count(1),
            done: count(2),
            dead: count(3),
        })
    }

    /// One job's state, or `None` if no job has this key (never enqueued, discarded or purged).
    pub async fn status(&self, key: &str) -> Result<Option<JobStatus>, StoreError> {
        let row = sqlx::query(&self.sql.status)
            .bind(key)
            .fetch_optional(self.store.pool())
            .await
            .map_err(failed(Operation::Get))?;
        Ok(row.map(|row| JobStatus {
            state: JobState::parse(row.get(0)),
            attempts: row.get::<i32, _>(1).unsigned_abs(),
            max_attempts: row.get::<i32, _>(2).unsigned_abs(),
            last_error: row.get(3),
            payload: parse_payload(row.get(4)),
        }))
    }

    /// Up to `limit` dead-lettered jobs, oldest first.
    pub async fn dead(&self, limit: usize) -> Result<Vec<DeadJob>, StoreError> {
        let rows = sqlx::query(&self.sql.list_dead)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(self.store.pool())
            .await
            .map_err(failed(Operation::Get))?;
        Ok(rows
            .iter()
            .map(|row| DeadJob {
                key: row.get(0),
                payload: parse_payload(row.get(1)),
                attempts: row.get::<i32, _>(2).unsigned_abs(),
                last_error: row.get(3),
                failed_at: from_micros(row.get(4)),
            })
            .collect())
    }

    /// Puts a dead-lettered job back in the queue with a fresh attempt count, to run now.
    /// Returns whether the key named a dead job.
    pub async fn retry_dead(&self, key: &str) -> Result<bool, StoreError> {
        let revived = sqlx::query(&self.sql.retry_dead)
            .bind(key)
            .execute(self.store.pool())
            .await
            .map_err(failed(Operation::Release))?
            .rows_affected()
            == 1;
        if revived {
            self.wake_workers().await?;
        }
        Ok(revived)
    }

    /// Deletes a dead-lettered job; its key can then be enqueued again. Returns whether the key
    /// named a dead job.
    pub async fn discard(&self, key: &str) -> Result<bool, StoreError> {
        Ok(sqlx::query(&self.sql.discard)
            .bind(key)
            .execute(self.store.pool())
            .await
            .map_err(failed(Operation::Purge))?
            .rows_affected()
            == 1)
    }

    /// Deletes up to `limit` jobs that finished more than `older_than` ago, and returns how
    /// many. Until then, enqueueing a finished job's key again is a duplicate. Dead jobs stay
    /// until discarded.
    pub async fn purge_done(&self, older_than: Duration, limit: usize) -> Result<u64, StoreError> {
        Ok(sqlx::query(&self.sql.purge_done)
            .bind(duration_micros(older_than))
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .execute(self.store.pool())
            .await
            .map_err(failed(Operation::Purge))?
            .rows_affected())
    }

    /// Every `every`, deletes jobs finished more than `older_than` ago, `batch` at a time, on
    /// the current Tokio runtime until the returned handle is aborted. Failures are logged and
    /// retried at the next tick. Dead jobs are kept.
    pub fn spawn_purger(
        &self,
        every: Duration,
        older_than: Duration,
        batch: usize,
    ) -> tokio::task::JoinHandle<()> {
        let queue = self.clone();
        let batch = batch.max(1);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                loop {
                    match queue.purge_done(older_than, batch).await {
                        Ok(n) if n == batch as u64 => continue,
                        Ok(0) => {}
                        Ok(n) => tracing::debug!(purged = n, "purged finished idem jobs"),
                        Err(e) => tracing::warn!(error = %e, "purging finished idem jobs failed"),
                    }
                    break;
                }
            }
        })
    }

    /// Wakes this queue's idle workers in every process.
    async fn wake_workers(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(sql::CHANNEL)
            .bind(&self.sql.name)
            .execute(self.store.pool())
            .await
            .map_err(failed(Operation::Release))
            .map(|_| ())
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
