//! How a job's claim ends: the outcomes the completer settles.

use std::time::Duration;

/// How a job's claim ends.
pub(crate) enum Settle {
    /// Done, with the result its call's earlier run recorded, if any.
    Done {
        result: Option<Vec<u8>>,
    },
    Retry {
        delay: Duration,
        error: String,
    },
    Dead {
        error: String,
    },
    /// Back to the queue without counting the attempt.
    Release {
        delay: Duration,
    },
    /// Back to the queue after `delay` without counting the attempt, as the handler asked.
    Snooze {
        delay: Duration,
        message: String,
    },
    /// Ended for good: cancelled by an operator, or by the handler.
    Cancelled {
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
