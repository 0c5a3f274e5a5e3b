//! The runtime contract, in order: validate the key, claim (waiting if asked), then run the
//! body and settle the claim: complete, release, or report the duplicate.
//!
//! Two modes share the claim loop and the settling rules: lease mode (claim committed at once,
//! renewed while the body runs, completion fenced) and transactional mode (claim, body writes and
//! completion in one transaction).

use std::any::Any;
use std::convert::Infallible;
use std::future::Future;
use std::panic::{resume_unwind, AssertUnwindSafe};
use std::pin::{pin, Pin};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tracing::Span;

use crate::call::Call;
use crate::codec::Codec;
use crate::context::CallContext;
use crate::error::{Error, Operation, StoreError};
use crate::fingerprint::Fingerprint;
use crate::key::Key;
use crate::outcome::Outcome;
use crate::store::{Claim, ClaimRequest, Completion, Fence, Fenced, Store};
use crate::transactional::{TransactionalStore, TxClaim};

/// First and longest pause between looks while `wait`ing for another run.
const WAIT_POLL_FIRST: Duration = Duration::from_millis(5);
const WAIT_POLL_MAX: Duration = Duration::from_millis(250);

/// Pauses between attempts to record a completion after a store error.
const COMPLETE_RETRIES: [Duration; 3] = [
    Duration::from_millis(20),
    Duration::from_millis(100),
    Duration::from_millis(400),
];

fn record_outcome(kind: &'static str) {
    Span::current().record("outcome", kind);
}

/// A call's validated inputs.
struct Prepared {
    key: Key,
    fingerprint: Option<Fingerprint>,
    lease: Duration,
    keep: Duration,
    wait: Option<Duration>,
}

impl Prepared {
    fn new<E>(call: Call<'_>) -> Result<Prepared, Error<E>> {
        let key = call.key.map_err(|e| {
            record_outcome("invalid_key");
            tracing::warn!(error = %e, "refused an invalid idempotency key");
            Error::InvalidKey(e)
        })?;
        let fingerprint = call.fingerprint.map_err(|e| {
            record_outcome("codec_error");
            Error::Codec(e)
        })?;
        Ok(Prepared {
            key,
            fingerprint,
            lease: call.lease,
            keep: call.keep,
            wait: call.wait,
        })
    }

    fn request(&self) -> ClaimRequest<'_> {
        ClaimRequest {
            key: &self.key,
            fingerprint: self.fingerprint.as_ref(),
            lease: self.lease,
        }
    }

    /// Claims until acquired or settled: a duplicate, a mismatch, or (past `wait`) a run in
    /// progress elsewhere. `attempt` makes one claim and may carry something (a transaction)
    /// along with an acquisition.
    async fn claim<T, E, X, C, Fut>(
        &self,
        codec: &C,
        mut attempt: impl FnMut() -> Fut,
    ) -> Result<Result<(Fence, X), Outcome<T>>, Error<E>>
    where
        C: Codec<T>,
        Fut: Future<Output = Result<(Claim, X), StoreError>>,
    {
        let deadline = self.wait.map(|wait| Instant::now() + wait);
        let mut pause = WAIT_POLL_FIRST;
        loop {
            let (claim, extra) = attempt().await.map_err(|e| {
                record_outcome("store_error");
                tracing::error!(error = %e, "claim failed; the handler did not run");
                Error::Store(e.during(Operation::Claim))
            })?;
            match claim {
                Claim::Acquired {
                    fence, taken_over, ..
                } => {
                    Span::current().record("fence", fence.0);
                    if taken_over {
                        tracing::info!("took over a lapsed claim");
                    }
                    return Ok(Ok((fence, extra)));
                }
                Claim::Completed {
                    completed_at,
                    output,
                } => {
                    let value = codec.decode(output).map_err(|e| {
                        record_outcome("codec_error");
                        Error::Codec(e)
                    })?;
                    record_outcome("duplicate");
                    return Ok(Err(Outcome::Duplicate {
                        completed_at,
                        value,
                    }));
                }
                Claim::Mismatch => {
                    record_outcome("key_reused");
                    tracing::warn!(
                        "key reused with a different fingerprint; the handler did not run"
                    );
                    return Err(Error::KeyReused {
                        key: self.key.as_str().to_owned(),
                    });
                }
                Claim::InProgress { lease_expires_at } => {
                    let now = Instant::now();
                    match deadline {
                        Some(deadline) if now < deadline => {
                            tokio::time::sleep(pause.min(deadline - now)).await;
                            pause = (pause * 2).min(WAIT_POLL_MAX);
                        }
                        _ => {
                            record_outcome("in_progress");
                            return Ok(Err(Outcome::InProgress { lease_expires_at }));
                        }
                    }
                }
            }
        }
    }
}

/// Lease mode.
pub(crate) async fn execute<T, E, F, C>(
    call: Call<'_>,
    codec: C,
    work: F,
) -> Result<Outcome<T>, Error<E>>
where
    F: Future<Output = Result<T, E>>,
    C: Codec<T>,
{
    let store = call.store;
    let prepared = Prepared::new(call)?;
    let request = prepared.request();
    let fence = match prepared
        .claim(
            &codec,
            || async move { Ok((store.claim(request).await?, ())) },
        )
        .await?
    {
        Ok((fence, ())) => fence,
        Err(settled) => return Ok(settled),
    };
    let claimed = Claimed {
        store,
        key: &prepared.key,
        fence,
        lease: prepared.lease,
    };
    claimed.run(&codec, prepared.keep, work).await
}

/// Transactional mode, first half: claim inside a new transaction. The body then runs with the
/// transaction, and [`TxPending::finish`] settles it.
pub(crate) async fn begin_in_transaction<'s, S, T, E, C>(
    call: Call<'_>,
    store: &'s S,
    codec: C,
) -> Result<TxBegun<'s, S, T, C>, Error<E>>
where
    S: TransactionalStore + ?Sized,
    C: Codec<T>,
{
    let prepared = Prepared::new(call)?;
    let request = prepared.request();
    let claimed = prepared
        .claim(&codec, || async move {
            let TxClaim { claim, transaction } = store.claim_in_transaction(request).await?;
            Ok((claim, transaction))
        })
        .await?;
    let (fence, transaction) = match claimed {
        Ok(acquired) => acquired,
        Err(settled) => return Ok(TxBegun::Settled(settled)),
    };
    let Some(transaction) = transaction else {
        record_outcome("store_error");
        return Err(Error::Store(
            StoreError::msg("the store acquired a claim without an open transaction")
                .during(Operation::Claim),
        ));
    };
    // No lease renewal: the open transaction holds the claimed row, and if the call is dropped
    // or the process dies, the transaction (claim and writes) rolls back.
    Ok(TxBegun::Claimed(
        transaction,
        TxPending {
            store,
            key: prepared.key,
            fence,
            keep: prepared.keep,
            codec,
        },
    ))
}

/// The result of claiming inside a transaction.
#[doc(hidden)]
pub enum TxBegun<'s, S: TransactionalStore + ?Sized, T, C> {
    /// Claimed: run the body with the transaction, then [`TxPending::finish`].
    Claimed(S::Transaction, TxPending<'s, S, C>),
    /// Not claimed: the outcome to return (duplicate, in progress).
    Settled(Outcome<T>),
}

/// A claim held inside an open transaction, waiting for the body's result.
#[doc(hidden)]
pub struct TxPending<'s, S: ?Sized, C> {
    store: &'s S,
    key: Key,
    fence: Fence,
    keep: Duration,
    codec: C,
}

impl<S: ?Sized, C> TxPending<'_, S, C> {
    /// Runs the body as the current call (see [`crate::context`]).
    pub fn scope<F: Future>(&self, work: F) -> impl Future<Output = F::Output> {
        CallContext::new(self.key.clone(), self.fence).scope(work)
    }
}

/// What the body produced: its result, or the payload of its panic.
#[doc(hidden)]
pub type Caught<T, E> = Result<Result<T, E>, Box<dyn Any + Send>>;

impl<S: ?Sized, C> TxPending<'_, S, C> {
    /// Commits the completion with the body's writes on `Ok`; rolls everything back on `Err`
    /// or a panic (then resumes the panic).
    pub async fn finish<T, E>(
        self,
        transaction: S::Transaction,
        result: Caught<T, E>,
    ) -> Result<Outcome<T>, Error<E>>
    where
        S: TransactionalStore,
        C: Codec<T>,
    {
        let roll_back = |transaction| async {
            if let Err(e) = self.store.roll_back(transaction).await {
                tracing::warn!(error = %e, "rolling back failed; the connection drops it");
            }
        };
        let value = match result {
            Err(panic) => {
                roll_back(transaction).await;
                record_outcome("panicked");
                resume_unwind(panic);
            }
            Ok(Err(e)) => {
                roll_back(transaction).await;
                record_outcome("handler_error");
                return Err(Error::Handler(e));
            }
            Ok(Ok(value)) => value,
        };
        let output = match self.codec.encode(&value) {
            Ok(output) => output,
            Err(e) => {
                roll_back(transaction).await;
                record_outcome("codec_error");
                return Err(Error::Codec(e));
            }
        };
        let completion = Completion {
            output: output.as_deref(),
            keep: self.keep,
        };
        match self
            .store
            .commit_completion(transaction, &self.key, self.fence, completion)
            .await
        {
            Ok(Fenced::Applied) => {
                record_outcome("executed");
                Ok(Outcome::Executed(value))
            }
            Ok(Fenced::Lost) => {
                record_outcome("lost_claim");
                Err(Error::LostClaim {
                    key: self.key.as_str().to_owned(),
                })
            }
            Err(e) => {
                record_outcome("store_error");
                tracing::error!(error = %e, "commit failed; the handler's writes rolled back");
                Err(Error::Store(e.during(Operation::Complete)))
            }
        }
    }
}

/// Runs `work`, turning a panic into `Err(payload)`.
pub(crate) async fn catch_unwind<F: Future>(work: F) -> Result<F::Output, Box<dyn Any + Send>> {
    CatchUnwind(work).await
}

/// A claim this call holds in lease mode.
struct Claimed<'a> {
    store: &'a dyn Store,
    key: &'a Key,
    fence: Fence,
    lease: Duration,
}

impl Claimed<'_> {
    async fn run<T, E, F, C>(
        self,
        codec: &C,
        keep: Duration,
        work: F,
    ) -> Result<Outcome<T>, Error<E>>
    where
        F: Future<Output = Result<T, E>>,
        C: Codec<T>,
    {
        // Until the claim is settled (completed or released), dropping this future abandons it.
        let guard = AbandonGuard { claim: &self };
        let context = CallContext::new(self.key.clone(), self.fence);
        let result = {
            let mut work = pin!(CatchUnwind(context.scope(work)));
            let mut renew = pin!(self.renew_forever());
            tokio::select! {
                biased;
                result = &mut work => result,
                never = &mut renew => match never {},
            }
        };
        let settled = match result {
            Err(panic) => {
                self.release().await;
                std::mem::forget(guard);
                record_outcome("panicked");
                resume_unwind(panic);
            }
            Ok(Err(e)) => {
                self.release().await;
                record_outcome("handler_error");
                Err(Error::Handler(e))
            }
            Ok(Ok(value)) => match codec.encode(&value) {
                Err(e) => {
                    self.release().await;
                    record_outcome("codec_error");
                    Err(Error::Codec(e))
                }
                Ok(output) => self.complete(output.as_deref(), keep).await.map(|()| {
                    record_outcome("executed");
                    Outcome::Executed(value)
                }),
            },
        };
        std::mem::forget(guard);
        settled
    }

    /// Renews the lease every third of a lease, for as long as it is polled.
    async fn renew_forever(&self) -> Infallible {
        let every = (self.lease / 3).max(Duration::from_millis(1));
        loop {
            tokio::time::sleep(every).await;
            match self.store.renew(self.key, self.fence, self.lease).await {
                Ok(Fenced::Applied) => tracing::trace!("lease renewed"),
                Ok(Fenced::Lost) => {
                    tracing::warn!(
                        "claim lost while the handler runs (a newer run took the key over); \
                         its completion will be refused"
                    );
                    return std::future::pending().await;
                }
                Err(e) => tracing::warn!(error = %e, "lease renewal failed; will retry"),
            }
        }
    }

    async fn complete<E>(&self, output: Option<&[u8]>, keep: Duration) -> Result<(), Error<E>> {
        let completion = Completion { output, keep };
        let mut retries = COMPLETE_RETRIES.iter();
        loop {
            match self.store.complete(self.key, self.fence, completion).await {
                Ok(Fenced::Applied) => return Ok(()),
                Ok(Fenced::Lost) => {
                    record_outcome("lost_claim");
                    tracing::warn!("completion refused: a newer run took the key over");
                    return Err(Error::LostClaim {
                        key: self.key.as_str().to_owned(),
                    });
                }
                Err(e) => match retries.next() {
                    Some(pause) => {
                        tracing::warn!(error = %e, "recording completion failed; retrying");
                        tokio::time::sleep(*pause).await;
                    }
                    None => {
                        record_outcome("store_error");
                        tracing::error!(
                            error = %e,
                            "the handler ran but its completion could not be recorded"
                        );
                        return Err(Error::Store(e.during(Operation::Complete)));
                    }
                },
            }
        }
    }

    /// Frees the key after a handler error or panic. A failure only delays the next run by one
    /// lease, so it is logged rather than returned in place of the handler's own error.
    async fn release(&self) {
        match self.store.release(self.key, self.fence).await {
            Ok(Fenced::Applied) => {}
            Ok(Fenced::Lost) => tracing::debug!("nothing to release: a newer run holds the key"),
            Err(e) => tracing::warn!(
                error = %e,
                "releasing the claim failed; the key is free again when its lease lapses"
            ),
        }
    }
}

/// Abandons the claim if the call's future is dropped before the claim was settled.
struct AbandonGuard<'a, 'b> {
    claim: &'a Claimed<'b>,
}

impl Drop for AbandonGuard<'_, '_> {
    fn drop(&mut self) {
        tracing::info!(key = %self.claim.key, "call dropped mid-run; abandoning its claim");
        self.claim.store.abandon(self.claim.key, self.claim.fence);
    }
}

/// Resolves to `Err(payload)` instead of unwinding when the inner future panics.
struct CatchUnwind<F>(F);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Box<dyn Any + Send>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: the inner future is structurally pinned: it is never moved out of `self`.
        let inner = unsafe { self.map_unchecked_mut(|s| &mut s.0) };
        match std::panic::catch_unwind(AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}
