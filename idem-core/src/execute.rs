//! The runtime contract, in order: validate the key, claim (waiting if asked), then run the
//! body and settle the claim: complete, release, or report the duplicate.
//!
//! Two modes share the claim loop ([`Prepared::claim`]) and the settling rules: lease mode, here
//! (claim committed at once, renewed while the body runs, completion fenced), and transactional
//! mode in [`crate::transactional`] (claim, body writes and completion in one transaction).

use std::any::Any;
use std::future::Future;
use std::panic::{resume_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tracing::Span;

use crate::codec::Codec;
use crate::context::CallContext;
use crate::error::{CodecError, Error, Operation, StoreError};
use crate::fingerprint::Fingerprint;
use crate::key::{InvalidKey, Key};
use crate::lease::Lease;
use crate::outcome::Outcome;
use crate::store::{Claim, ClaimRequest, ClaimToken, Completion, Fence, Fenced, Store};

/// First and longest pause between looks while `wait`ing for another run.
const WAIT_POLL_FIRST: Duration = Duration::from_millis(5);
const WAIT_POLL_MAX: Duration = Duration::from_millis(250);

/// Pauses between attempts to record a completion after a store error.
const COMPLETE_RETRIES: [Duration; 3] = [
    Duration::from_millis(20),
    Duration::from_millis(100),
    Duration::from_millis(400),
];

/// The lease used when none is given: how long a claim holds without renewal. It is renewed
/// every third of a lease while the work runs (see [`crate::lease`]).
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// How long a completed record is kept when no `keep` is given.
pub const DEFAULT_KEEP: Duration = Duration::from_secs(24 * 60 * 60);

pub(crate) fn record_outcome(kind: &'static str) {
    Span::current().record("outcome", kind);
}

/// What a [`Call`](crate::Call) was told, before validation.
#[derive(Debug)]
pub(crate) struct Spec {
    pub name: &'static str,
    pub key: Result<Key, InvalidKey>,
    pub fingerprint: Result<Option<Fingerprint>, CodecError>,
    pub lease: Duration,
    pub keep: Duration,
    pub wait: Option<Duration>,
}

impl Spec {
    pub fn new(key: Result<Key, InvalidKey>) -> Spec {
        Spec {
            name: "idem::call",
            key,
            fingerprint: Ok(None),
            lease: DEFAULT_LEASE,
            keep: DEFAULT_KEEP,
            wait: None,
        }
    }

    /// The call's span: one per call, named `idem`, carrying the key and (later) the outcome.
    pub fn span(&self) -> Span {
        let span = tracing::info_span!(
            "idem",
            handler = self.name,
            key = tracing::field::Empty,
            outcome = tracing::field::Empty,
            fence = tracing::field::Empty,
        );
        match &self.key {
            Ok(key) => span.record("key", key.as_str()),
            Err(invalid) => span.record("key", tracing::field::debug(invalid)),
        };
        span
    }
}

/// A call's validated inputs.
pub(crate) struct Prepared {
    key: Key,
    token: ClaimToken,
    fingerprint: Option<Fingerprint>,
    lease: Duration,
    keep: Duration,
    wait: Option<Duration>,
}

impl Prepared {
    /// Validates `call`, made at `now`; a refusal is recorded on `span` (the call's).
    pub fn new<E>(call: Spec, now: Instant, span: &Span) -> Result<Prepared, Error<E>> {
        let key = call.key.map_err(|e| {
            span.record("outcome", "invalid_key");
            span.in_scope(|| tracing::warn!(error = %e, "refused an invalid idempotency key"));
            Error::InvalidKey(e)
        })?;
        let fingerprint = call.fingerprint.map_err(|e| {
            span.record("outcome", "codec_error");
            Error::Codec(e)
        })?;
        Ok(Prepared {
            key,
            token: ClaimToken::random_at(now),
            fingerprint,
            lease: call.lease,
            keep: call.keep,
            wait: call.wait,
        })
    }

    pub fn key(&self) -> &Key {
        &self.key
    }

    pub fn keep(&self) -> Duration {
        self.keep
    }

    pub fn request(&self) -> ClaimRequest<'_> {
        ClaimRequest {
            key: &self.key,
            fingerprint: self.fingerprint.as_ref(),
            lease: self.lease,
            token: Some(self.token),
        }
    }

    /// Claims until acquired or settled: a duplicate, a mismatch, or (past `wait`) a run in
    /// progress elsewhere. `attempt` makes one claim and may carry something (a transaction)
    /// along with an acquisition.
    pub async fn claim<T, E, X, C, Fut>(
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
                            // Boxed: the rare path keeps the call's future small.
                            Box::pin(tokio::time::sleep(pause.min(deadline - now))).await;
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

/// Lease mode: claim, run the body while the lease is renewed, settle.
///
/// The key and fingerprint are validated here, when the future is made (a refusal is recorded on
/// the call's span). The future is written so that it holds each part once: the whole call is one
/// state machine that the layers above (`Call::run`, the attribute's expansion) return as it is
/// instead of wrapping, since each `async` layer would hold (and copy) all of it again.
pub(crate) fn execute<'s, S, T, E, F, C>(
    store: &'s S,
    spec: Spec,
    codec: C,
    work: F,
) -> impl Future<Output = Result<Outcome<T>, Error<E>>> + use<'s, S, T, E, F, C>
where
    S: Store + ?Sized,
    F: Future<Output = Result<T, E>>,
    C: Codec<T>,
{
    let span = spec.span();
    let meter = crate::metrics::CallMeter::start(spec.name);
    let handler = meter.handler();
    let made = Instant::now();
    let mut prepared = Prepared::new(spec, made, &span);
    let call = async move {
        let prepared = match prepared {
            Ok(ref mut prepared) => prepared,
            Err(invalid) => return Err(invalid),
        };
        let request = prepared.request();
        // The acquiring attempt carries when it returned: the claim's end is the body's start.
        // The first attempt starts when the call was made.
        let mut first = Some(made);
        let (fence, started) = match prepared
            .claim(&codec, || {
                let started = first.take();
                async move {
                    let started = started.unwrap_or_else(Instant::now);
                    let claim = store.claim(request).await;
                    let ended = Instant::now();
                    handler.claim_took(ended - started);
                    Ok((claim?, ended))
                }
            })
            .await?
        {
            Ok(acquired) => acquired,
            Err(settled) => return Ok(settled),
        };
        // The body's context takes the key over (no copy of it).
        let context = CallContext::new(prepared.key.take(), fence, store.shared());
        let claimed = Claimed {
            handler,
            lease: Lease {
                store,
                key: context.key(),
                fence,
                lease: prepared.lease,
            },
        };
        let keep = prepared.keep;
        claimed
            .run(&codec, keep, started, context.clone(), work)
            .await
    };
    Traced {
        span,
        meter: Some(meter),
        call,
    }
}

pin_project_lite::pin_project! {
    /// A call's future, run inside the call's span, that counts the call when it ends
    /// ([`CallMeter`](crate::metrics::CallMeter)). One wrapper for both, so the call's state
    /// machine is moved into it once.
    struct Traced<F> {
        span: Span,
        meter: Option<crate::metrics::CallMeter>,
        #[pin]
        call: F,
    }
}

impl<F, T, E> Future for Traced<F>
where
    F: Future<Output = Result<Outcome<T>, Error<E>>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let result = {
            let _entered = this.span.enter();
            std::task::ready!(this.call.poll(cx))
        };
        let meter = this
            .meter
            .take()
            .expect("a call's future polled after it finished");
        Poll::Ready(meter.finish(result))
    }
}

/// Runs `work`, turning a panic into `Err(payload)`.
pub(crate) async fn catch_unwind<F: Future>(work: F) -> Result<F::Output, Box<dyn Any + Send>> {
    CatchUnwind(work).await
}

/// A claim this call holds in lease mode.
struct Claimed<'a, S: ?Sized> {
    handler: crate::metrics::Handler,
    lease: Lease<'a, S>,
}

impl<S: Store + ?Sized> Claimed<'_, S> {
    /// Runs `work` in `context` (the call's), from `started`, and settles the claim.
    async fn run<T, E, F, C>(
        self,
        codec: &C,
        keep: Duration,
        started: Instant,
        context: CallContext,
        work: F,
    ) -> Result<Outcome<T>, Error<E>>
    where
        F: Future<Output = Result<T, E>>,
        C: Codec<T>,
    {
        // Until the claim is settled (completed or released), dropping this future abandons it.
        let guard = AbandonGuard { claim: &self };
        let lease = &self.lease;
        let result = {
            let _renewal = lease.renew_in_background(&context, started);
            let result = CatchUnwind(context.scope(work)).await;
            self.handler.body_took(started.elapsed());
            result
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

    async fn complete<E>(&self, output: Option<&[u8]>, keep: Duration) -> Result<(), Error<E>> {
        let completion = Completion { output, keep };
        let mut retries = COMPLETE_RETRIES.iter();
        loop {
            let Lease {
                store, key, fence, ..
            } = &self.lease;
            match store.complete(key, *fence, completion).await {
                Ok(Fenced::Applied) => return Ok(()),
                Ok(Fenced::Lost) => {
                    record_outcome("lost_claim");
                    tracing::warn!("completion refused: a newer run took the key over");
                    return Err(Error::LostClaim {
                        key: key.as_str().to_owned(),
                    });
                }
                Err(e) => match retries.next() {
                    Some(pause) => {
                        tracing::warn!(error = %e, "recording completion failed; retrying");
                        Box::pin(tokio::time::sleep(*pause)).await; // rare: boxed
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
        match self
            .lease
            .store
            .release(self.lease.key, self.lease.fence)
            .await
        {
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
struct AbandonGuard<'a, 'b, S: Store + ?Sized> {
    claim: &'a Claimed<'b, S>,
}

impl<S: Store + ?Sized> Drop for AbandonGuard<'_, '_, S> {
    fn drop(&mut self) {
        let lease = &self.claim.lease;
        tracing::info!(key = %lease.key, "call dropped mid-run; abandoning its claim");
        lease.store.abandon(lease.key, lease.fence);
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
