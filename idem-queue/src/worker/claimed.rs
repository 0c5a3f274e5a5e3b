//! A job claimed from the queue's table: what every role passes along.

use std::time::Duration;

use tokio::time::Instant;

/// A claimed job, as a claim's row names it.
#[derive(Debug)]
pub struct Claimed {
    /// The job's key.
    pub key: String,
    /// Its payload, as JSON text.
    pub payload: String,
    /// The claim's fence: the job's claims so far, this one included.
    pub attempt: i32,
    /// How many attempts it may have.
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
    /// Whether its claim noted its start (a claim for free slots), else its start is noted
    /// when it starts (a prefetching claim: see `started`).
    pub start_noted: bool,
}

/// When a job claimed by a statement sent at `sent`, on `lease`, must start by.
pub(crate) fn start_by(sent: Instant, lease: Duration) -> Instant {
    sent + lease / 2
}
