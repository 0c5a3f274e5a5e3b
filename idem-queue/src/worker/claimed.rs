//! A job claimed from the queue's table: what every role passes along.

use std::time::Duration;

use tokio::time::Instant;

use sqlx::postgres::PgRow;
use sqlx::Row;

/// A claimed row.
#[derive(Debug)]
pub(crate) struct Claimed {
    pub key: String,
    pub payload: String,
    pub attempt: i32,
    pub max_attempts: i32,
    /// The fence the claim reserved for the key's idempotency record, when the key had none
    /// (the job's row is the record until one is written): (fence, the claim's lease end in
    /// epoch µs).
    pub record: Option<(i64, i64)>,
    /// Whether an operator asked to cancel it while an earlier attempt ran (that worker died
    /// before it heard): it is not run again.
    pub cancel_requested: bool,
    /// The `traceparent` of the span that enqueued it.
    pub traceparent: Option<String>,
    /// Whether the claim took it over from a worker whose lease lapsed.
    pub lapsed: bool,
    /// Its attempt as counted: `attempt` (the claim's fence) less the claims that lapsed before
    /// the job started.
    pub counted: i32,
    /// The job starts before this, or not at all: half its lease after its claim was sent.
    /// An answer that comes later (the database slow to answer, this worker stalled, jobs
    /// held past their time) may name a claim that has lapsed and been taken over, even
    /// completed: starting the job then would run it again after it was done.
    pub start_by: Instant,
}

/// When a job claimed by a statement sent at `sent`, on `lease`, must start by.
pub(crate) fn start_by(sent: Instant, lease: Duration) -> Instant {
    sent + lease / 2
}

impl Claimed {
    /// Decodes a claimed job from the columns of `claim` (key, payload, attempts, max
    /// attempts, record fence, record lease end, cancel requested, traceparent, lapsed, counted
    /// attempt) starting at column `first`, to start by `start_by`.
    pub(crate) fn decode(row: &PgRow, first: usize, start_by: Instant) -> Claimed {
        Claimed {
            key: row.get(first),
            payload: row.get(first + 1),
            attempt: row.get(first + 2),
            max_attempts: row.get(first + 3),
            record: row
                .get::<Option<i64>, _>(first + 4)
                .zip(row.get::<Option<i64>, _>(first + 5)),
            cancel_requested: row.get::<Option<bool>, _>(first + 6).unwrap_or(false),
            traceparent: row.get(first + 7),
            lapsed: row.get::<Option<bool>, _>(first + 8).unwrap_or(false),
            counted: row.get(first + 9),
            start_by,
        }
    }
}
