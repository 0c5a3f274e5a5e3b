//! For tests of the queue's statements and of its completer against a real PostgreSQL
//! (feature `testing`; an application needs none of it). The queue's tests in `tests/` use
//! it to check each statement's plans and to drive one statement, or one completion, at a
//! time; everything else they do goes through the public API.
//!
//! - [`sql`]: the queue's database layer, its statements by name
//!   ([`QueueSql::named`]) and the typed calls the workers and operators make.
//! - [`Slots`], [`Completion`] and [`complete_on`] and its siblings: the completer's
//!   completions as the workers send them, alone or batched, claiming the next jobs for the
//!   slots they free.

use std::sync::Arc;
use std::time::Duration;

use idem_core::StoreError;
use idem_postgres_core::extend::{submit, Op};
use sqlx::PgConnection;

use crate::completer::completion::{JobCompleteOp, JobCompletion};
use crate::completer::rescue::Rescue;
use crate::queue::Queue;
use crate::worker::held::Holder;

pub use crate::completer::settlement::Settle;
pub use crate::db::admin::{AdminSql, Cancelling};
pub use crate::db::browse::{BrowseSql, PageOf};
pub use crate::db::claim::{ClaimFor, ClaimSql};
pub use crate::db::complete::{ClaimNext, CompleteSql, Completing, CompletionRow, Renewed};
pub use crate::db::enqueue::{EnqueueSql, Stored};
pub use crate::db::schedules::{Loaded, ScheduleSql};
pub use crate::db::settle::SettleSql;
pub use crate::db::QueueSql;
pub use crate::worker::claimed::Claimed;

/// The database layer of `queue`: its statements and their typed calls.
pub fn sql(queue: &Queue) -> &QueueSql {
    &queue.sql
}

/// A set of workers of the default named queue, named `worker`, with a lease of a minute, as
/// the holder of the claims that completions make for its slots.
#[derive(Debug, Clone)]
pub struct Slots(Arc<Holder>);

impl Slots {
    /// The workers `worker` of `queue`.
    pub fn new(queue: &Queue, worker: &str) -> Slots {
        let lease = Duration::from_secs(60);
        Slots(Arc::new(Holder {
            store: queue.store().clone(),
            sql: Arc::clone(&queue.sql),
            queue: crate::job::DEFAULT_QUEUE.to_owned(),
            global_limit: None,
            lease,
            worker: worker.to_owned(),
            held: Default::default(),
            stopping: Default::default(),
            rescue: Rescue::new(lease),
            prefetch: 0,
            prefetching: Default::default(),
            backlog: Default::default(),
            job_micros: Default::default(),
            starts: Default::default(),
        }))
    }

    /// The keys of the claims these workers hold.
    pub fn held(&self) -> Vec<String> {
        let mut held: Vec<String> = self.0.held.snapshot().into_iter().map(|(k, _)| k).collect();
        held.sort();
        held
    }
}

/// A job's completion as the completer sends it: its call's record completed and the job
/// marked done, and, for `next`'s workers, the next job claimed for the slot it frees.
#[derive(Debug, Clone)]
pub struct Completion {
    /// The job's key.
    pub key: String,
    /// The call's record fence.
    pub fence: i64,
    /// The call's output.
    pub output: Option<Vec<u8>>,
    /// How long the record is kept (µs).
    pub keep: i64,
    /// The job's claim (its attempt).
    pub attempt: i32,
    /// The workers whose slot the job frees, to claim the next job for.
    pub next: Option<Slots>,
}

/// What a completion heard: (call completed, job marked done, the job claimed for its slot).
pub type Completed = (bool, bool, Option<Claimed>);

impl Completion {
    fn job(self, queue: &Queue) -> JobCompletion {
        JobCompletion {
            sql: Arc::clone(&queue.sql),
            key: self.key,
            fence: self.fence,
            output: self.output,
            keep: self.keep,
            attempt: self.attempt,
            next: self.next.map(|slots| slots.0),
        }
    }
}

/// The completions of `batch` in one statement on `conn`, as a batch of the store's sends them.
pub async fn complete_on(
    conn: &mut PgConnection,
    queue: &Queue,
    batch: Vec<Completion>,
) -> Result<Vec<Completed>, sqlx::Error> {
    let batch: Vec<JobCompletion> = batch.into_iter().map(|c| c.job(queue)).collect();
    JobCompleteOp::many_on(conn, &batch).await
}

/// One completion in the statement for one job on `conn`, as the store sends a lone one.
pub async fn complete_alone_on(
    conn: &mut PgConnection,
    queue: &Queue,
    completion: Completion,
) -> Result<Completed, sqlx::Error> {
    JobCompleteOp::single(conn, &completion.job(queue)).await
}

/// One completion on the store's connections, never sent again, as the store sends a
/// completion outside a batch.
pub async fn complete(queue: &Queue, completion: Completion) -> Result<Completed, StoreError> {
    JobCompleteOp::one(queue.store(), &completion.job(queue)).await
}

/// One completion through the queue's batcher, as a job's call sends it when the store
/// batches: a completion whose caller went away is handled as the batcher handles it.
pub async fn submit_completion(
    queue: &Queue,
    completion: Completion,
) -> Result<Completed, StoreError> {
    let batcher = queue
        .completions
        .as_ref()
        .ok_or_else(|| StoreError::msg("the queue's store does not batch"))?;
    submit(queue.store(), batcher, completion.job(queue)).await
}
