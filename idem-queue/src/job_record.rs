//! A job's idempotency record: the scope its key names it in, and how long it is kept.

/// The scope of the queue's jobs' records: a job's key names one record of its own, apart
/// from any `#[idempotent]` handler's record with the same key text.
pub const QUEUE_SCOPE: &str = "idem:queue";

/// How long a finished job's idempotency record is kept: idem-core's default `keep`. While the
/// job's row is in the queue (until [`Queue::purge_done`] deletes it), the done row is the
/// record; purging a job that finished less than this ago writes its record for the rest.
pub(crate) const JOB_KEEP: std::time::Duration = idem_core::DEFAULT_KEEP;
