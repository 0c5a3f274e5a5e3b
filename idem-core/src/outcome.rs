//! What an idempotent call did.

use std::time::SystemTime;

/// What happened to one delivery of a unit of work.
///
/// An idempotent handler returns `Result<Outcome<T>, Error<E>>`: `Ok` means the delivery was
/// handled correctly, which for a duplicate means *not* running the work again. Answer a
/// scheduler's duplicate with success (a 2xx), or it retries again.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "an Outcome says whether the work ran now, ran before, or is running elsewhere"]
pub enum Outcome<T> {
    /// This call claimed the key and ran the handler, which returned `Ok(T)`.
    Executed(T),
    /// The work was completed before; the handler did not run.
    Duplicate {
        /// When the earlier run completed.
        completed_at: SystemTime,
        /// With `replay`, the earlier run's `Ok` value; otherwise `None`.
        value: Option<T>,
    },
    /// Another run holds a live claim on the key; the handler did not run. With `wait`, this is
    /// returned only after waiting that long for the other run to finish.
    InProgress {
        /// When the other run's claim lapses unless it renews it. If it crashed, the key can be
        /// taken over from then on.
        lease_expires_at: SystemTime,
    },
}

impl<T> Outcome<T> {
    /// Whether this call ran the handler.
    pub fn is_executed(&self) -> bool {
        matches!(self, Outcome::Executed(_))
    }

    /// Whether the work was completed before.
    pub fn is_duplicate(&self) -> bool {
        matches!(self, Outcome::Duplicate { .. })
    }

    /// Whether another run holds the key.
    pub fn is_in_progress(&self) -> bool {
        matches!(self, Outcome::InProgress { .. })
    }

    /// The handler's value: the one just produced, or the replayed one of a duplicate.
    pub fn into_value(self) -> Option<T> {
        match self {
            Outcome::Executed(v) => Some(v),
            Outcome::Duplicate { value, .. } => value,
            Outcome::InProgress { .. } => None,
        }
    }

    /// A short name for logs and metrics: `executed`, `duplicate` or `in_progress`.
    pub fn kind(&self) -> &'static str {
        match self {
            Outcome::Executed(_) => "executed",
            Outcome::Duplicate { .. } => "duplicate",
            Outcome::InProgress { .. } => "in_progress",
        }
    }
}
