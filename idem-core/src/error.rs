//! What can go wrong around a handler, and what to do about it.

use std::error::Error as StdError;
use std::fmt;

use crate::key::InvalidKey;

/// A boxed error source, as stores and codecs keep them.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// The error of an idempotent call: the handler's own error, or why idem did not (or could not
/// safely) run it.
///
/// Every variant except [`Error::Handler`] and [`Error::LostClaim`] means the handler body did
/// **not** run in this call.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error<E> {
    /// The handler ran and returned `Err`. Its claim was released, so a retry runs it again.
    Handler(E),
    /// The rendered key is empty, too long or has control characters. Nothing was claimed.
    InvalidKey(InvalidKey),
    /// The store failed. If this happened while claiming, the handler did not run (idem fails
    /// closed); see [`StoreError::operation`] for which step failed.
    Store(StoreError),
    /// The key was already used with different inputs (another fingerprint). The handler did not
    /// run: either the key template is missing a part that tells these calls apart, or the caller
    /// reused a key for different work.
    KeyReused {
        /// The key in question.
        key: String,
    },
    /// The handler ran, but by the time it finished a newer run had taken the key over (this
    /// run's lease lapsed: it stalled longer than the lease, or the store lost contact with it).
    /// Its completion was refused so the newer run's record stands; the side effects of this run
    /// may have happened, and the newer run may repeat them.
    LostClaim {
        /// The key in question.
        key: String,
    },
    /// A value could not be encoded or decoded: a fingerprinted parameter or a `replay` output.
    Codec(CodecError),
    /// A call's option is out of range: a `lease`, `keep` or `wait` over [`MAX_DURATION`].
    /// Nothing was claimed: refused before the claim, not found out after the body ran.
    ///
    /// [`MAX_DURATION`]: crate::MAX_DURATION
    InvalidOption {
        /// The option (`"lease"`, `"keep"`, `"wait"`).
        option: &'static str,
        /// What is wrong with it, and the range it must be in.
        reason: String,
    },
}

impl<E> Error<E> {
    /// The handler's own error, if that is what this is.
    pub fn into_handler(self) -> Option<E> {
        match self {
            Error::Handler(e) => Some(e),
            _ => None,
        }
    }

    /// Maps the handler's error type.
    pub fn map_handler<F>(self, f: impl FnOnce(E) -> F) -> Error<F> {
        match self {
            Error::Handler(e) => Error::Handler(f(e)),
            Error::InvalidKey(e) => Error::InvalidKey(e),
            Error::Store(e) => Error::Store(e),
            Error::KeyReused { key } => Error::KeyReused { key },
            Error::LostClaim { key } => Error::LostClaim { key },
            Error::Codec(e) => Error::Codec(e),
            Error::InvalidOption { option, reason } => Error::InvalidOption { option, reason },
        }
    }
}

impl<E: fmt::Display> fmt::Display for Error<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Handler(e) => write!(f, "handler failed: {e}"),
            Error::InvalidKey(e) => fmt::Display::fmt(e, f),
            Error::Store(e) => fmt::Display::fmt(e, f),
            Error::KeyReused { key } => write!(
                f,
                "idempotency key {key:?} was already used with different inputs (fingerprint \
                 mismatch); the handler did not run. Use a key that names this work, or add the \
                 differing inputs to the key template"
            ),
            Error::LostClaim { key } => write!(
                f,
                "the run for key {key:?} lost its claim to a newer run before it finished (its \
                 lease lapsed); its completion was not recorded. Use a longer `lease` if the \
                 handler can stall, and make its side effects tolerate one repeat"
            ),
            Error::Codec(e) => fmt::Display::fmt(e, f),
            Error::InvalidOption { option, reason } => {
                write!(f, "invalid `{option}`: {reason}; nothing was claimed")
            }
        }
    }
}

impl<E: StdError + 'static> StdError for Error<E> {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            Error::Handler(e) => Some(e),
            Error::InvalidKey(e) => Some(e),
            Error::Store(e) => Some(e),
            Error::Codec(e) => Some(e),
            Error::KeyReused { .. } | Error::LostClaim { .. } | Error::InvalidOption { .. } => None,
        }
    }
}

impl<E> From<InvalidKey> for Error<E> {
    fn from(e: InvalidKey) -> Self {
        Error::InvalidKey(e)
    }
}

impl<E> From<StoreError> for Error<E> {
    fn from(e: StoreError) -> Self {
        Error::Store(e)
    }
}

impl<E> From<CodecError> for Error<E> {
    fn from(e: CodecError) -> Self {
        Error::Codec(e)
    }
}

/// The store step that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Operation {
    /// Claiming the key. The handler did not run.
    Claim,
    /// Recording completion. The handler **did** run; its claim stays until the lease lapses,
    /// after which a retry runs it again.
    Complete,
    /// Releasing the claim after a handler error or panic.
    Release,
    /// Renewing the lease while the handler runs.
    Renew,
    /// Reading a record.
    Get,
    /// Purging expired records (or finished queue jobs).
    Purge,
    /// Setting up the store (connecting, migrating).
    Setup,
    /// Reading an effect journal entry. The effect did not run.
    JournalRead,
    /// Writing an effect journal entry (an intent, or an effect done).
    JournalWrite,
    /// Storing a job in a work queue.
    Enqueue,
    /// Putting a dead-lettered job back in its queue.
    RetryDead,
    /// Deleting a dead-lettered job.
    Discard,
    /// Waking a queue's idle workers.
    Notify,
    /// Cancelling a queued job, or asking a running one to stop.
    Cancel,
    /// Pausing or resuming a schedule.
    Schedule,
}

impl Operation {
    fn describe(self) -> &'static str {
        match self {
            Operation::Claim => "claiming the key failed, so the handler did not run; retry later",
            Operation::Complete => {
                "the handler ran but its completion could not be recorded; the claim lapses \
                 after its lease and a retry would run the handler again"
            }
            Operation::Release => "releasing the claim failed; the key is free after its lease",
            Operation::Renew => "renewing the lease failed",
            Operation::Get => "reading the record failed",
            Operation::Purge => "purging expired records failed",
            Operation::Setup => "setting up the store failed",
            Operation::JournalRead => {
                "reading the effect journal failed, so the effect did not run; retry later"
            }
            Operation::JournalWrite => "writing the effect journal failed",
            Operation::Enqueue => "storing the job failed; nothing was enqueued, retry later",
            Operation::RetryDead => "reviving the dead job failed; it is still dead",
            Operation::Discard => "discarding the dead job failed; it is still stored",
            Operation::Notify => {
                "waking the queue's workers failed; they find the work at their next poll"
            }
            Operation::Cancel => "cancelling the job failed; it goes on as it was, cancel again",
            Operation::Schedule => "changing the schedule failed; it is as it was, try again",
        }
    }
}

/// A store failure, with the backend's error as its source.
#[derive(Debug)]
pub struct StoreError {
    message: String,
    operation: Option<Operation>,
    source: Option<BoxError>,
}

impl StoreError {
    /// A store error with a message and the backend error that caused it.
    pub fn new(message: impl Into<String>, source: impl Into<BoxError>) -> StoreError {
        StoreError {
            message: message.into(),
            operation: None,
            source: Some(source.into()),
        }
    }

    /// A store error with only a message.
    pub fn msg(message: impl Into<String>) -> StoreError {
        StoreError {
            message: message.into(),
            operation: None,
            source: None,
        }
    }

    /// Tags the error with the step that failed.
    pub fn during(mut self, operation: Operation) -> StoreError {
        self.operation = Some(operation);
        self
    }

    /// The step that failed, when known.
    pub fn operation(&self) -> Option<Operation> {
        self.operation
    }

    /// The message, without the operation's explanation.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "idem store error: {}", self.message)?;
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        if let Some(operation) = self.operation {
            write!(f, " ({})", operation.describe())?;
        }
        Ok(())
    }
}

impl StdError for StoreError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn StdError + 'static))
    }
}

/// A value that could not be encoded or decoded: a fingerprinted parameter, or an output by its
/// [`Codec`](crate::Codec).
#[derive(Debug)]
pub struct CodecError {
    context: String,
    source: BoxError,
}

impl CodecError {
    /// What could not be encoded or decoded (`context`), and why (`source`).
    pub fn new(context: impl Into<String>, source: impl Into<BoxError>) -> CodecError {
        CodecError {
            context: context.into(),
            source: source.into(),
        }
    }
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.context, self.source)
    }
}

impl StdError for CodecError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.source)
    }
}
