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

/// The longest `lease`, `keep` or `wait` a call takes: 100 years. Every store can count that far from
/// now; a longer one is refused before the claim ([`Error::InvalidOption`]), rather than
/// overflowing a store's arithmetic after the body ran.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

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
        let key = call.key.and_then(Key::callable).map_err(|e| {
            span.record("outcome", "invalid_key");
            span.in_scope(|| tracing::warn!(error = %e, "refused an invalid idempotency key"));
            Error::InvalidKey(e)
        })?;
        let fingerprint = call.fingerprint.map_err(|e| {
            span.record("outcome", "codec_error");
            Error::Codec(e)
        })?;
        let wait = call.wait.unwrap_or_default();
        for (option, value) in [("lease", call.lease), ("keep", call.keep), ("wait", wait)] {
            if value > MAX_DURATION {
                span.record("outcome", "invalid_option");
                return Err(Error::InvalidOption {
                    option,
                    reason: format!("{value:?} is longer than the most a store keeps ({MAX_DURATION:?}, 100 years)"),
                });
            }
        }
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
        // The acquiring attempt carries its timing (see `Timing`). The first attempt starts
        // when the call was made.
        let mut first = Some(made);
        let (fence, timing) = match prepared
            .claim(&codec, || {
                let started = first.take();
                async move {
                    let started = started.unwrap_or_else(Instant::now);
                    let in_flight = ClaimInFlight { store, request };
                    let claim = store.claim(request).await;
                    std::mem::forget(in_flight);
                    let answered = Instant::now();
                    let took = answered - started;
                    handler.claim_took(took);
                    // The store's lease began no earlier than `started`; an answer that took a
                    // renewal interval or more is re-checked before the body runs.
                    let (claim, lease_from) = match claim? {
                        Claim::Acquired {
                            fence, taken_over, ..
                        } if took >= crate::lease::renew_every(request.lease) => {
                            renew_late_claim(store, request, fence, taken_over).await?
                        }
                        claim => (claim, started),
                    };
                    Ok((
                        claim,
                        Timing {
                            lease_from,
                            body_from: answered,
                        },
                    ))
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
            .run(&codec, keep, timing, context.clone(), work)
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
    /// Runs `work` in `context` (the call's) and settles the claim.
    async fn run<T, E, F, C>(
        self,
        codec: &C,
        keep: Duration,
        timing: Timing,
        context: CallContext,
        work: F,
    ) -> Result<Outcome<T>, Error<E>>
    where
        F: Future<Output = Result<T, E>>,
        C: Codec<T>,
    {
        let renewal = self.lease.renew_in_background(&context, timing.lease_from);
        // Until the claim is settled, dropping this future leaves the claim to `Settling`.
        let mut settling = Settling {
            context,
            renewal: Some(renewal),
            stopping: None,
            next: Next::Abandon,
        };
        let result = CatchUnwind(settling.context.clone().scope(work)).await;
        self.handler.body_took(timing.body_from.elapsed());
        let settled = match result {
            Err(panic) => {
                settling.cut_renewal();
                self.release().await;
                settling.next = Next::Nothing;
                record_outcome("panicked");
                resume_unwind(panic);
            }
            Ok(Err(e)) => {
                settling.cut_renewal();
                self.release().await;
                record_outcome("handler_error");
                Err(Error::Handler(e))
            }
            Ok(Ok(value)) => match codec.encode(&value) {
                Err(e) => {
                    settling.cut_renewal();
                    self.release().await;
                    record_outcome("codec_error");
                    Err(Error::Codec(e))
                }
                Ok(output) => {
                    // From here on the work is done: whatever happens to this future, the
                    // completion goes through.
                    settling.next = Next::Complete { output, keep };
                    settling.stop_renewal().await;
                    let Next::Complete { output, .. } = &settling.next else {
                        unreachable!("set above")
                    };
                    let completion = Completion {
                        output: output.as_deref(),
                        keep,
                    };
                    let completed = complete(&self.lease, completion).await;
                    match completed {
                        Ok(Fenced::Applied) => {
                            record_outcome("executed");
                            Ok(Outcome::Executed(value))
                        }
                        Ok(Fenced::Lost) => {
                            record_outcome("lost_claim");
                            tracing::warn!("completion refused: a newer run took the key over");
                            Err(Error::LostClaim {
                                key: self.lease.key.as_str().to_owned(),
                            })
                        }
                        Err(e) => {
                            record_outcome("store_error");
                            tracing::error!(
                                error = %e,
                                "the handler ran but its completion could not be recorded"
                            );
                            Err(Error::Store(e.during(Operation::Complete)))
                        }
                    }
                }
            },
        };
        settling.next = Next::Nothing;
        settled
    }

    /// Frees the key after a handler error or panic. A failure only delays the next run by one
    /// lease, so it is logged rather than returned in place of the handler's own error.
    async fn release(&self) {
        log_release(
            self.lease
                .store
                .release(self.lease.key, self.lease.fence)
                .await,
        );
    }
}

fn log_release(released: Result<Fenced, StoreError>) {
    match released {
        Ok(Fenced::Applied) => {}
        Ok(Fenced::Lost) => tracing::debug!("nothing to release: a newer run holds the key"),
        Err(e) => tracing::warn!(
            error = %e,
            "releasing the claim failed; the key is free again when its lease lapses"
        ),
    }
}

/// Records `completion` under the claim `lease` holds, retrying after store errors (a
/// completion applies again under the same fence, so a retry is safe).
async fn complete<S: Store + ?Sized>(
    lease: &Lease<'_, S>,
    completion: Completion<'_>,
) -> Result<Fenced, StoreError> {
    let mut retries = COMPLETE_RETRIES.iter();
    loop {
        match lease
            .store
            .complete(lease.key, lease.fence, completion)
            .await
        {
            Err(e) => match retries.next() {
                Some(pause) => {
                    tracing::warn!(error = %e, "recording completion failed; retrying");
                    Box::pin(tokio::time::sleep(*pause)).await; // rare: boxed
                }
                None => return Err(e),
            },
            settled => return settled,
        }
    }
}

/// When an acquiring claim's lease counts from, and when its body starts.
struct Timing {
    /// No earlier than the store started the lease: the claim's (or its re-check's) sending.
    /// Renewals are timed from here, so they never fall due later than the store's lease needs.
    lease_from: Instant,
    /// When the claim's answer came.
    body_from: Instant,
}

/// An acquired claim whose answer took a renewal interval or more (a batch that waited on a
/// lock, a slow store) may have little lease left, or none: another process may have taken it
/// over meanwhile. It is renewed before it is handed to the body, and handed back with the
/// time its lease counts from; if a newer run took it over, the call is answered as the claim
/// would have been had it come later: in progress.
async fn renew_late_claim<S: Store + ?Sized>(
    store: &S,
    request: ClaimRequest<'_>,
    fence: Fence,
    taken_over: bool,
) -> Result<(Claim, Instant), StoreError> {
    // Held until settled here: dropped while the renewal is on the wire, the claim is abandoned.
    let held = Unsettled {
        store,
        key: request.key,
        fence,
    };
    let renewing = Instant::now();
    let renewed = store.renew(request.key, fence, request.lease).await;
    match renewed {
        Ok(Fenced::Applied) => {
            std::mem::forget(held);
            tracing::info!("the claim's answer came late; renewed its lease before running");
            let lease_expires_at = std::time::SystemTime::now()
                .checked_add(request.lease)
                .unwrap_or(std::time::SystemTime::UNIX_EPOCH);
            Ok((
                Claim::Acquired {
                    fence,
                    lease_expires_at,
                    taken_over,
                },
                renewing,
            ))
        }
        Ok(Fenced::Lost) => {
            std::mem::forget(held);
            tracing::info!(
                "the claim's answer came after its lease lapsed and another run took the key over"
            );
            let lease_expires_at = std::time::SystemTime::now()
                .checked_add(request.lease)
                .unwrap_or(std::time::SystemTime::UNIX_EPOCH);
            Ok((Claim::InProgress { lease_expires_at }, renewing))
        }
        // The claim is abandoned as `held` drops: the body does not run without a lease.
        Err(e) => Err(e.during(Operation::Renew)),
    }
}

/// A claim on its way to the store. Dropped before its answer came (the caller went away), it
/// may still be applied, holding the key for nobody until its lease lapses: the store is told
/// to undo it ([`Store::abandon_claim`]).
struct ClaimInFlight<'a, S: Store + ?Sized> {
    store: &'a S,
    request: ClaimRequest<'a>,
}

impl<S: Store + ?Sized> Drop for ClaimInFlight<'_, S> {
    fn drop(&mut self) {
        self.store.abandon_claim(self.request);
    }
}

/// An acquired claim not yet handed to its body: abandoned if dropped.
struct Unsettled<'a, S: Store + ?Sized> {
    store: &'a S,
    key: &'a Key,
    fence: Fence,
}

impl<S: Store + ?Sized> Drop for Unsettled<'_, S> {
    fn drop(&mut self) {
        self.store.abandon(self.key, self.fence);
    }
}

/// What settles the claim if the call's future is dropped before it did.
enum Next {
    /// The body has not ended, or failed and its claim is being released: the store is told
    /// to [abandon](Store::abandon) the claim.
    Abandon,
    /// The body succeeded: its completion is recorded, whoever waits for it.
    Complete {
        output: Option<Vec<u8>>,
        keep: Duration,
    },
    /// Settled.
    Nothing,
}

/// A claim being settled: whatever [`Next`] says is done when this is dropped (a completion
/// in the background, after a renewal on the wire was answered: see [`Renewal::stop`](crate::lease::Renewal::stop)).
struct Settling {
    context: CallContext,
    renewal: Option<crate::lease::Renewal>,
    /// A renewal's stop being awaited: a drop hands it to the background.
    stopping: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    next: Next,
}

impl Settling {
    /// Stops the renewal, waiting for one on the wire. Dropped meanwhile, the wait goes on in
    /// the background before the claim is settled there.
    async fn stop_renewal(&mut self) {
        let Some(stopped) = self.renewal.take().and_then(crate::lease::Renewal::stop) else {
            return;
        };
        let stopping = self.stopping.insert(Box::pin(stopped));
        stopping.await;
        self.stopping = None;
    }

    /// Stops the renewal at once, a renewal on the wire cut on this side: before a release,
    /// whose wait for a renewal that cannot be answered (the store is down) would only hold
    /// the next delivery up. (A late renewal can at worst hold the key for one more lease.)
    fn cut_renewal(&mut self) {
        self.renewal = None;
        self.stopping = None;
    }

    /// What a drop must wait for before settling.
    fn take_stop(&mut self) -> Option<Pin<Box<dyn Future<Output = ()> + Send>>> {
        let stopped = self.renewal.take().and_then(crate::lease::Renewal::stop);
        match stopped {
            Some(stopped) => Some(Box::pin(stopped)),
            None => self.stopping.take(),
        }
    }
}

impl Drop for Settling {
    fn drop(&mut self) {
        let next = std::mem::replace(&mut self.next, Next::Nothing);
        if matches!(next, Next::Nothing) {
            return;
        }
        let context = self.context.clone();
        let Next::Complete { output, keep } = next else {
            self.cut_renewal();
            tracing::info!(key = %context.key(), "call dropped mid-run; abandoning its claim");
            context.store().abandon(context.key(), context.fence());
            return;
        };
        let stopped = self.take_stop();
        match tokio::runtime::Handle::try_current() {
            // A runtime that is shutting down drops the task unrun: the claim then lapses with
            // its lease (the finished body's completion is lost, and it runs again), unless
            // the process drains its background work first (`pending::drain`).
            Ok(runtime) => {
                crate::pending::spawn(
                    &runtime,
                    complete_in_background(context, output, keep, stopped),
                );
            }
            Err(_) => {
                // No runtime to wait or write on: free the key as well as can be done without
                // one.
                tracing::warn!(key = %context.key(), "call dropped outside a Tokio runtime; abandoning its claim");
                context.store().abandon(context.key(), context.fence());
            }
        }
    }
}

/// Records the completion of a call dropped after its body succeeded (its caller went away),
/// once its renewal stopped.
async fn complete_in_background(
    context: CallContext,
    output: Option<Vec<u8>>,
    keep: Duration,
    stopped: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
) {
    if let Some(stopped) = stopped {
        stopped.await;
    }
    let (store, key, fence) = (context.store(), context.key(), context.fence());
    let lease = Lease {
        store,
        key,
        fence,
        lease: Duration::ZERO,
    };
    let completion = Completion {
        output: output.as_deref(),
        keep,
    };
    match complete(&lease, completion).await {
        Ok(Fenced::Applied) => {
            tracing::info!(%key, "call dropped after its work was done; its completion was recorded")
        }
        Ok(Fenced::Lost) => {
            tracing::warn!(%key, "call dropped after its work was done; its completion was refused: a newer run took the key over")
        }
        Err(e) => {
            tracing::error!(%key, error = %e, "call dropped after its work was done, and its completion could not be recorded")
        }
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
