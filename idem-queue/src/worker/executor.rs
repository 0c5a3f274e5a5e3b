//! The executor: runs one claimed job as an idempotent call on the job's view of the store, and
//! maps the call's outcome to how its claim ends (done already, retried after a backoff,
//! dead-lettered, or given back).

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures_util::FutureExt;
use idem_core::{Call, Claim, Error, Fence, Outcome};
use tracing::Instrument;

use crate::completer::rescue::rescue;
use crate::completer::settle::settle;
use crate::completer::settlement::Settle;
use crate::job::{parse_payload, Job};
use crate::job_record::{JOB_KEEP, QUEUE_SCOPE};
use crate::outcome::{Failure, Kind};
use crate::trace;
use crate::worker::claimed::Claimed;
use crate::worker::job_store::JobStore;
use crate::worker::shared::Shared;
use idem_core::Codec;
use idem_postgres_core::extend::from_micros;

/// The longest error text kept with a job.
const MAX_ERROR_LEN: usize = 2000;

/// A handler cut at the shutdown's deadline ends with this error.
const CUT: &str = "the workers stopped before the job finished";

/// A handler cut a lease after its job was cancelled ends with this error.
const CANCELLED: &str = "cancelled while running; the handler did not stop within a lease";

/// The largest result kept with a job (its JSON): a larger one is dropped with a warning, the
/// job still done (its work happened; failing it would run it again).
pub const MAX_RESULT_BYTES: usize = 64 * 1024;

/// A job's result as the call's output: JSON, within [`MAX_RESULT_BYTES`].
struct ResultCodec;

impl idem_core::Codec<serde_json::Value> for ResultCodec {
    fn encode(&self, value: &serde_json::Value) -> Result<Option<Vec<u8>>, idem_core::CodecError> {
        if value.is_null() {
            return Ok(None);
        }
        let bytes = serde_json::to_vec(value)
            .map_err(|e| idem_core::CodecError::new("the job's result", e))?;
        if bytes.len() > MAX_RESULT_BYTES {
            tracing::warn!(
                bytes = bytes.len(),
                limit = MAX_RESULT_BYTES,
                "the job's result is too large to keep; the job is done without it"
            );
            return Ok(None);
        }
        Ok(Some(bytes))
    }

    fn decode(
        &self,
        stored: Option<Vec<u8>>,
    ) -> Result<Option<serde_json::Value>, idem_core::CodecError> {
        stored
            .map(|bytes| serde_json::from_slice(&bytes))
            .transpose()
            .map_err(|e| idem_core::CodecError::new("the job's stored result", e))
    }
}

/// Runs a claimed job and settles its claim, then each job that its completion claimed for
/// the slot (see `job_store`), each in a span of its own. `slot`, when given, is the slot the
/// job holds: given back as soon as its handler ends, before its outcome is written, so that
/// the next job starts while the completion is on the wire.
pub(crate) async fn run(shared: Arc<Shared>, job: Claimed, slot: Option<Slot>) {
    // Without a slot of its own, the task holds one for as long as it runs (see `tasks`), and
    // only then does a completion claim the next job for it.
    let whole_slot = slot.is_none();
    let mut next = Some(job);
    let mut slot = slot;
    while let Some(job) = next.take() {
        let span = tracing::info_span!("idem::queue::job", key = %job.key, attempt = job.counted);
        if let Some(traceparent) = &job.traceparent {
            trace::link(&span, traceparent);
        }
        next = run_one(&shared, job, slot.take(), whole_slot)
            .instrument(span)
            .await;
    }
}

/// A slot of the workers, held while a job's handler runs.
pub(crate) type Slot = tokio::sync::OwnedSemaphorePermit;

/// Runs one claimed job and settles its claim; returns the job its completion claimed for the
/// slot, if it did.
async fn run_one(
    shared: &Arc<Shared>,
    job: Claimed,
    slot: Option<Slot>,
    whole_slot: bool,
) -> Option<Claimed> {
    let started = std::time::Instant::now();
    let (cancel, cancelled) = tokio::sync::watch::channel(false);
    let store = JobStore::new(
        shared.queue.clone(),
        job.attempt,
        job.record.map(|(fence, expires_us)| Claim::Acquired {
            fence: Fence(fence.unsigned_abs()),
            lease_expires_at: from_micros(expires_us),
            taken_over: false,
        }),
        Some(Arc::clone(&shared.holder)),
        whole_slot,
        cancel,
    );
    let settled = match rescue(&job) {
        Some(settle) => Some(settle),
        None if tokio::time::Instant::now() >= job.start_by => {
            // The claim's answer came too late to start on its lease: the job may have been
            // taken over, even finished, meanwhile. It goes back if it is still ours.
            tracing::warn!("the job's claim came back too late to start on its lease (the database was slow to answer, or this worker stalled); it goes back to the queue");
            crate::completer::settle::release_jobs(&shared.holder, std::slice::from_ref(&job))
                .await;
            metrics::counter!(crate::metrics::JOBS, "outcome" => "released").increment(1);
            return None;
        }
        None => match note_start(shared, &job).await {
            Ok(true) => execute(shared, &job, &store, cancelled, slot).await,
            Ok(false) => {
                tracing::warn!("the job's claim was taken over before it started (this worker stalled past its lease)");
                None
            }
            Err(e) => {
                tracing::warn!(error = %e, "noting the job's start failed; it goes back to the queue");
                Some(Settle::Release {
                    delay: shared.backoff.delay(1),
                })
            }
        },
    };
    // However the call ended (its handler may never have run), no start is written after
    // its outcome: the outcome notes the start.
    shared.holder.starts.ended(&job.key, job.attempt);
    // `None`: settled with the call's completion (or owned by a newer claim).
    let outcome = settled.as_ref().map_or("done", Settle::outcome);
    metrics::counter!(crate::metrics::JOBS, "outcome" => outcome).increment(1);
    let took = started.elapsed();
    metrics::histogram!(crate::metrics::JOB_SECONDS).record(took.as_secs_f64());
    shared.holder.job_took(took);
    // `None`: settled already (with the call's completion), or another claim owns the job.
    if let Some(how) = settled {
        settle(&shared.holder, &job, how).await;
    }
    shared.holder.held.forget(&job.key, job.attempt);
    store.take_next()
}

/// Notes that a prefetched job starts (see `started`): before it runs when its last claim
/// lapsed (so that a job that kills its worker is counted), else in the background.
/// `Ok(false)`: its claim is no longer this attempt's. Jobs claimed for free slots need
/// none: their claim noted the start.
async fn note_start(shared: &Shared, job: &Claimed) -> Result<bool, sqlx::Error> {
    let holder = &shared.holder;
    if job.start_noted {
        return Ok(true);
    }
    if job.lapsed {
        return crate::worker::started::mark_now(holder, &job.key, job.attempt).await;
    }
    holder.starts.started(&job.key, job.attempt);
    Ok(true)
}

/// Runs the job's idempotent call; says how to settle its claim, or `None` when it is settled
/// already or a newer claim owns it.
async fn execute(
    shared: &Shared,
    job: &Claimed,
    store: &JobStore,
    cancelled: tokio::sync::watch::Receiver<bool>,
    slot: Option<Slot>,
) -> Option<Settle> {
    // Cancelled while an earlier attempt ran, whose worker stopped before it heard: the call
    // still runs, to find the work done if that attempt finished it, but its body only ends
    // the job cancelled.
    let cancel_only = job
        .cancel_requested
        .then(|| -> crate::worker::shared::BoxFuture {
            Box::pin(async {
                Err(Failure {
                    message: "cancelled while an earlier attempt ran; that worker stopped before \
                          it heard"
                        .to_owned(),
                    kind: Kind::Cancel,
                })
            })
        });
    let work = cancel_only.unwrap_or_else(|| {
        (shared.handler)(Job {
            key: job.key.clone(),
            payload: parse_payload(&job.payload),
            attempt: job.counted.unsigned_abs(),
            max_attempts: job.max_attempts.unsigned_abs(),
            queue: shared.holder.queue.clone(),
            traceparent: job.traceparent.clone(),
            cancel: cancelled.clone(),
        })
    });
    // The timeout cuts the handler only, never the call around it: a call cut while its
    // completion is on the wire would leave a finished job to run again, and one cut while
    // its completion claims the next job would leave that job claimed and unrun. A handler
    // that times out is a failed attempt; the call releases its claim, so the retry can take it.
    // The shutdown's deadline cuts the handler the same way.
    // A cancellation is heard at a lease renewal; the handler then has one more lease to stop
    // on its own, and is cut after it.
    let limit = shared.timeout;
    let lease = shared.holder.lease;
    let mut cut = shared.cut.subscribe();
    let mut cancel = cancelled.clone();
    let holder = Arc::clone(&shared.holder);
    let (key, attempt) = (job.key.clone(), job.attempt);
    let work = async move {
        let limited = async {
            match limit {
                None => work.await,
                Some(limit) => tokio::time::timeout(limit, work).await.unwrap_or_else(|_| {
                    Err(Failure::message(format!("timed out after {limit:?}")))
                }),
            }
        };
        let ended = tokio::select! {
            biased;
            done = limited => done,
            () = async {
                if cut.wait_for(|cut| *cut).await.is_err() {
                    std::future::pending::<()>().await; // the workers are gone: never cut
                }
            } => Err(Failure::message(CUT)),
            () = async {
                if cancel.wait_for(|cancelled| *cancelled).await.is_err() {
                    std::future::pending::<()>().await; // nobody can cancel it any more
                }
                tokio::time::sleep(lease).await;
            } => Err(Failure::message(CANCELLED)),
        };
        // The outcome, written next, notes the start if no mark wrote it yet.
        holder.starts.ended(&key, attempt);
        drop(slot);
        ended
    };
    // A panicking handler (which the call resumes once it has released its claim) ends the
    // call with the panic, caught here: the call runs in this task, not one of its own.
    let joined = AssertUnwindSafe(
        Call::new(store, job.key.as_str())
            .scope(QUEUE_SCOPE)
            .name("idem::queue::run")
            .lease(shared.holder.lease)
            .keep(JOB_KEEP)
            .run_with(ResultCodec, work),
    )
    .catch_unwind()
    .await;
    Some(match joined {
        // The completion marked the job done in the same statement, unless the job's claim
        // was taken over meanwhile; then the newer claim finds the call completed.
        Ok(Ok(Outcome::Executed(_))) => {
            if !store.marked_done() {
                tracing::warn!("the job ran and its call completed, but its claim was taken over meanwhile (this worker stalled past its lease)");
            }
            return None;
        }
        Ok(Ok(Outcome::Duplicate { value, .. })) => {
            tracing::info!("the job's idempotent call was completed before; not running it again");
            // The earlier run's result, as its record kept it.
            let result = value.and_then(|value| ResultCodec.encode(&value).ok().flatten());
            Settle::Done { result }
        }
        Ok(Ok(Outcome::InProgress { lease_expires_at })) => {
            let delay = lease_expires_at
                .duration_since(std::time::SystemTime::now())
                .unwrap_or_default();
            tracing::info!(
                ?delay,
                "another run holds the job's key; trying again after its lease"
            );
            Settle::Release { delay }
        }
        // Cut at the shutdown's deadline: back to the queue, the attempt not counted.
        Ok(Err(Error::Handler(error))) if error.message == CUT && *shared.cut.borrow() => {
            shared.cut_released.fetch_add(1, Ordering::SeqCst);
            Settle::Release {
                delay: std::time::Duration::ZERO,
            }
        }
        // Cancelled while it ran: whatever the handler ended with, short of finishing.
        Ok(Err(Error::Handler(error))) if *cancelled.borrow() => Settle::Cancelled {
            reason: if error.message == CANCELLED {
                CANCELLED.to_owned()
            } else {
                truncate(format!(
                    "cancelled while running; the handler ended with: {error}"
                ))
            },
        },
        Ok(Err(Error::Handler(error))) => failure(shared, job, error),
        Err(panic) => failure(
            shared,
            job,
            Failure::message(format!("panicked: {}", panic_message(&*panic))),
        ),
        Ok(Err(Error::LostClaim { .. })) => {
            tracing::warn!("the job ran, but a newer run took it over meanwhile (this worker stalled past its lease)");
            return None;
        }
        Ok(Err(Error::Store(e))) => {
            tracing::warn!(error = %e, "the store failed around the job; it goes back to the queue");
            Settle::Release {
                delay: shared.backoff.delay(1),
            }
        }
        Ok(Err(other)) => Settle::Dead {
            error: other.to_string(),
        },
    })
}

/// A failed attempt: retried after a backoff (or the delay the failure asks for), or
/// dead-lettered after the last, or at once when the failure says no retry can fix it.
fn failure(shared: &Shared, job: &Claimed, failure: Failure) -> Settle {
    let error = truncate(failure.message);
    let retry_after = match failure.kind {
        Kind::Snooze(delay) => {
            tracing::info!(message = %error, ?delay, "the job snoozed; it runs again after the delay");
            return Settle::Snooze {
                delay,
                message: error,
            };
        }
        Kind::Cancel => {
            tracing::info!(reason = %error, "the job cancelled itself");
            return Settle::Cancelled { reason: error };
        }
        Kind::RetryAfter(delay) => Some(delay),
        Kind::Retry | Kind::Permanent => None,
    };
    if failure.kind == Kind::Permanent {
        tracing::warn!(%error, "the job failed for good; dead-lettered without more attempts");
        Settle::Dead { error }
    } else if job.counted >= job.max_attempts {
        tracing::warn!(%error, "the job failed its last attempt; dead-lettered");
        Settle::Dead { error }
    } else {
        let delay = retry_after.unwrap_or_else(|| shared.backoff.delay(job.counted.unsigned_abs()));
        tracing::info!(%error, ?delay, "the job failed; retrying after a delay");
        Settle::Retry { delay, error }
    }
}

fn panic_message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a non-string panic payload")
}

fn truncate(mut error: String) -> String {
    if error.len() > MAX_ERROR_LEN {
        let mut end = MAX_ERROR_LEN;
        while !error.is_char_boundary(end) {
            end -= 1;
        }
        error.truncate(end);
        error.push('…');
    }
    error
}
