//! How a job's claim ends: the outcomes the completer settles.

use std::time::Duration;

/// How a job's claim ends, when its call did not complete it (a completion marks the job done
/// in its own statement).
#[derive(Debug)]
pub enum Settle {
    /// Done, its call found completed by an earlier run.
    Done {
        /// The result that run recorded, if any.
        result: Option<Vec<u8>>,
    },
    /// Failed: back to the queue after `delay`, the attempt counted.
    Retry {
        /// When the job may run again.
        delay: Duration,
        /// What went wrong, kept as the job's last error.
        error: String,
    },
    /// Failed for good: dead-lettered.
    Dead {
        /// What went wrong, kept as the job's last error.
        error: String,
    },
    /// Back to the queue without counting the attempt.
    Release {
        /// When the job may run again.
        delay: Duration,
    },
    /// Back to the queue after `delay` without counting the attempt, as the handler asked.
    Snooze {
        /// When the job may run again.
        delay: Duration,
        /// The handler's reason, logged with the attempt.
        message: String,
    },
    /// Ended for good: cancelled by an operator, or by the handler.
    Cancelled {
        /// The handler's reason (an operator's, when one asked, is kept first).
        reason: String,
    },
}

impl Settle {
    /// How the attempt ended, as the `idem_queue_jobs_total` metric's `outcome` says it.
    pub(crate) fn outcome(&self) -> &'static str {
        match self {
            Settle::Done { .. } => "done",
            Settle::Retry { .. } => "retried",
            Settle::Dead { .. } => "dead",
            Settle::Release { .. } => "released",
            Settle::Snooze { .. } => "snoozed",
            Settle::Cancelled { .. } => "cancelled",
        }
    }
}
