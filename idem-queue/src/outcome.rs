//! What a handler's error asks for beyond "retry after the backoff": a retry after a given
//! delay (a provider's `Retry-After`), no more attempts, a snooze that uses no attempt, or
//! cancellation. Any `Display` error is an ordinary failure; a [`JobError`] says which of
//! these it is.

use std::any::Any;
use std::fmt;
use std::time::Duration;

/// A handler's error that says how the job goes on. Return it from a handler whose error type
/// is `JobError` (or convert to it); any other error is retried after the worker's backoff.
///
/// ```
/// use idem_queue::{Job, JobError};
/// use std::time::Duration;
///
/// async fn handle(job: Job) -> Result<(), JobError> {
///     let status = 429; // what the provider answered
///     match status {
///         200..=299 => Ok(()),
///         // Rate-limited: again when the provider says, as an attempt.
///         429 => Err(JobError::retry_after(Duration::from_secs(30), "rate limited")),
///         // Not our turn yet: again in a minute, without using an attempt.
///         423 => Err(JobError::snooze(Duration::from_secs(60), "locked upstream")),
///         // The order is gone: nothing left to do, and nothing failed.
///         410 => Err(JobError::cancel("the order was deleted")),
///         // Refused for good: dead now, no more attempts.
///         400..=499 => Err(JobError::permanent(format!("refused with {status}"))),
///         _ => Err(JobError::retry(format!("failed with {status}"))),
///     }
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobError {
    message: String,
    kind: Kind,
}

/// How a job goes on after its handler's error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Retried after the backoff, as an attempt.
    Retry,
    /// Retried after this delay, as an attempt.
    RetryAfter(Duration),
    /// Dead now.
    Permanent,
    /// Queued again after this delay, the attempt not counted.
    Snooze(Duration),
    /// Ended for good, as `cancelled`.
    Cancel,
}

impl JobError {
    /// A failed attempt, retried after the worker's backoff (as any error is) until the job's
    /// attempts run out.
    pub fn retry(message: impl fmt::Display) -> JobError {
        JobError {
            message: message.to_string(),
            kind: Kind::Retry,
        }
    }

    /// A failed attempt, retried after `delay` instead of the backoff (a provider's
    /// `Retry-After`); it counts as an attempt.
    pub fn retry_after(delay: Duration, message: impl fmt::Display) -> JobError {
        JobError {
            message: message.to_string(),
            kind: Kind::RetryAfter(delay),
        }
    }

    /// A failure no retry can fix (a request the provider refuses for good): the job is
    /// dead-lettered now, whatever attempts it had left.
    pub fn permanent(message: impl fmt::Display) -> JobError {
        JobError {
            message: message.to_string(),
            kind: Kind::Permanent,
        }
    }

    /// Not a failure: the job goes back to the queue for `delay` (waiting for something
    /// outside it), and the attempt it used is given back, so snoozing never dead-letters a
    /// job. The attempt log says `snoozed` with `message`.
    pub fn snooze(delay: Duration, message: impl fmt::Display) -> JobError {
        JobError {
            message: message.to_string(),
            kind: Kind::Snooze(delay),
        }
    }

    /// The job is ended for good as `cancelled` (not failed: nothing to retry or alert on),
    /// with `message` as its reason.
    pub fn cancel(message: impl fmt::Display) -> JobError {
        JobError {
            message: message.to_string(),
            kind: Kind::Cancel,
        }
    }

    /// The delay this error asks for (a retry's or a snooze's), if it asks for one.
    pub fn delay(&self) -> Option<Duration> {
        match self.kind {
            Kind::RetryAfter(delay) | Kind::Snooze(delay) => Some(delay),
            _ => None,
        }
    }

    /// Whether the job is to be dead-lettered now.
    pub fn is_permanent(&self) -> bool {
        self.kind == Kind::Permanent
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for JobError {}

/// A handler's failure as the executor reads it: its text, and what it asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    pub message: String,
    pub kind: Kind,
}

impl Failure {
    /// A plain failure with `message`.
    pub(crate) fn message(message: impl Into<String>) -> Failure {
        Failure {
            message: message.into(),
            kind: Kind::Retry,
        }
    }

    /// The failure a handler's error `e` says: a [`JobError`]'s kind, or a plain failure.
    pub(crate) fn from_error<E: fmt::Display + 'static>(e: E) -> Failure {
        match (&e as &dyn Any).downcast_ref::<JobError>() {
            Some(job_error) => Failure {
                message: job_error.message.clone(),
                kind: job_error.kind,
            },
            None => Failure::message(e.to_string()),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}
