//! The configuration every idempotent handler shares, and one invocation's call.

use idem_core::{
    Call, Codec, Error as IdemError, JsonReplay, Key, NoReplay, Outcome, Replayable, Store,
    DEFAULT_LEASE,
};
use lambda_runtime::Context;
use std::borrow::Cow;
use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::deadline::UntilDeadline;

/// How long a completed invocation's record is kept by default (1 hour): Powertools'
/// `expires_after_seconds`. A delivery after that runs again.
pub const DEFAULT_KEEP: Duration = Duration::from_secs(3600);

/// The shortest lease an invocation claims with, even when its deadline is nearer (or past):
/// a claim must outlive the request that makes it.
pub const MIN_LEASE: Duration = Duration::from_secs(1);

/// What the idempotent handlers of one function share: the store, how long completed
/// invocations are kept, and the scope their keys live in.
#[derive(Clone)]
pub struct Idempotency {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) keep: Duration,
    pub(crate) scope: Option<Cow<'static, str>>,
}

impl fmt::Debug for Idempotency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Idempotency")
            .field("store", &self.store)
            .field("keep", &self.keep)
            .field("scope", &self.scope)
            .finish()
    }
}

/// An invocation that another delivery of the same event is running: it fails (as
/// Powertools' `IdempotencyAlreadyInProgressError`), so the caller retries it later and then
/// gets the first run's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlreadyInProgress {
    /// The event's key.
    pub key: String,
    /// When the other run's claim lapses (its invocation's deadline).
    pub lease_expires_at: SystemTime,
}

impl fmt::Display for AlreadyInProgress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "another invocation is running the event with idempotency key {:?}; this one did \
             not run it (retry after it ends, at the latest at its deadline)",
            self.key
        )
    }
}

impl std::error::Error for AlreadyInProgress {}

/// What an invocation failed with, for the runtime: the handler's own error as it returned it,
/// anything else boxed.
pub(crate) fn into_lambda_error(error: IdemError<lambda_runtime::Error>) -> lambda_runtime::Error {
    match error {
        IdemError::Handler(own) => own,
        other => Box::new(other.map_handler(|_| -> Infallible { unreachable!("matched above") })),
    }
}

impl Idempotency {
    /// Idempotent handlers on `store`, keeping completed invocations for [`DEFAULT_KEEP`], each
    /// function's keys in a scope named for the function (`AWS_LAMBDA_FUNCTION_NAME`).
    pub fn new(store: impl Store + 'static) -> Idempotency {
        Idempotency {
            store: Arc::new(store),
            keep: DEFAULT_KEEP,
            scope: None,
        }
    }

    /// How long a completed invocation is kept: a duplicate within it is answered from the
    /// record, one after it runs again (default [`DEFAULT_KEEP`]).
    pub fn keep(mut self, keep: Duration) -> Idempotency {
        self.keep = keep;
        self
    }

    /// The scope the keys live in (default: the function's name), so functions that share a
    /// table, or one function's handlers, keep their keys apart. `idem_core::DEFAULT_SCOPE`
    /// writes keys as they are, as Powertools does.
    pub fn scope(mut self, scope: impl Into<Cow<'static, str>>) -> Idempotency {
        self.scope = Some(scope.into());
        self
    }

    /// The claim's lease: until the invocation's deadline, after which Lambda has stopped it,
    /// so a retry after a timeout takes the key over at once. Without a deadline (a test's
    /// context), idem's default lease.
    pub(crate) fn lease(context: &Context) -> Duration {
        if context.deadline == 0 {
            return DEFAULT_LEASE;
        }
        context
            .deadline()
            .duration_since(SystemTime::now())
            .unwrap_or_default()
            .max(MIN_LEASE)
    }

    fn scope_for(&self, context: &Context) -> Cow<'static, str> {
        match &self.scope {
            Some(scope) => scope.clone(),
            None if !context.env_config.function_name.is_empty() => {
                Cow::Owned(context.env_config.function_name.clone())
            }
            None => Cow::Borrowed(idem_core::DEFAULT_SCOPE),
        }
    }

    /// Runs `work` once for `key` with `codec`: a duplicate's outcome, or the work's own;
    /// another invocation running it is [`AlreadyInProgress`]. The claim is scoped, and its
    /// lease is the time to the deadline, renewed no further than that.
    async fn once<R, C, F>(
        &self,
        key: Key,
        context: &Context,
        codec: C,
        work: F,
    ) -> Result<Outcome<R>, lambda_runtime::Error>
    where
        C: Codec<R>,
        F: Future<Output = Result<R, lambda_runtime::Error>>,
    {
        let name = key.as_str().to_owned();
        let store = UntilDeadline {
            inner: self.store.clone(),
            deadline: (context.deadline != 0).then(|| context.deadline()),
        };
        let outcome = Call::new(&store, key)
            .scope(self.scope_for(context))
            .lease(Idempotency::lease(context))
            .keep(self.keep)
            .run_with(codec, work)
            .await
            .map_err(into_lambda_error)?;
        match outcome {
            Outcome::InProgress { lease_expires_at } => Err(Box::new(AlreadyInProgress {
                key: name,
                lease_expires_at,
            })),
            done => Ok(done),
        }
    }

    /// Runs `work` once for `key`: its answer, or the stored answer of a duplicate.
    pub(crate) async fn run<R, F>(
        &self,
        key: Key,
        context: &Context,
        work: F,
    ) -> Result<R, lambda_runtime::Error>
    where
        R: Replayable,
        F: Future<Output = Result<R, lambda_runtime::Error>>,
    {
        let name = key.as_str().to_owned();
        self.once(key, context, JsonReplay, work)
            .await?
            .into_value()
            .ok_or_else(|| {
                format!("the invocation with idempotency key {name:?} completed without a stored answer")
                    .into()
            })
    }

    /// Runs `work` once for `key`, with no answer to replay (an SQS record): done now or
    /// before is `Ok`.
    pub(crate) async fn run_once<F>(
        &self,
        key: Key,
        context: &Context,
        work: F,
    ) -> Result<(), lambda_runtime::Error>
    where
        F: Future<Output = Result<(), lambda_runtime::Error>>,
    {
        self.once(key, context, NoReplay, work).await.map(|_| ())
    }
}
